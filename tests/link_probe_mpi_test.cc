// train's inter-node link probe: the tournament's rounds, the host judgement on hand-made pair rates, the console
// lines and report tables, and a real probe over MPI with each rank standing for a node of its own.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "error.h"
#include "link_probe.h"
#include "mpi_communicator.h"
#include "report.h"
#include "watchdog.h"

namespace tb {
namespace {

TEST(LinkProbeRounds, EveryPairOnceAndNoNodeTwiceInARound) {
  for (int nodes = 1; nodes <= 9; ++nodes) {
    SCOPED_TRACE("nodes: " + std::to_string(nodes));
    const auto rounds = TournamentRounds(nodes);
    EXPECT_EQ(rounds.size(), nodes < 2 ? 0u : static_cast<size_t>(nodes - 1 + nodes % 2));
    std::set<std::pair<int, int>> seen;
    for (const auto& round : rounds) {
      std::set<int> busy;
      for (const auto& [a, b] : round) {
        EXPECT_LT(a, b);
        EXPECT_GE(a, 0);
        EXPECT_LT(b, nodes);
        EXPECT_TRUE(busy.insert(a).second && busy.insert(b).second) << a << "-" << b << " shares a node";
        EXPECT_TRUE(seen.insert({a, b}).second) << a << "-" << b << " twice";
      }
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(nodes * (nodes - 1) / 2));
  }
}

// Every pair at `fast` GB/s, the pairs of `slow_node` at `slow`; one local rank.
std::vector<LinkPair> Pairs(int nodes, int slow_node, double fast, double slow) {
  std::vector<LinkPair> pairs;
  for (int a = 0; a < nodes; ++a) {
    for (int b = a + 1; b < nodes; ++b) {
      pairs.push_back({0, a, b, 1.0, a == slow_node || b == slow_node ? slow : fast});
    }
  }
  return pairs;
}

TEST(LinkProbeJudge, OneSlowHostIsNamedAndNoOther) {
  for (int nodes : {3, 4, 5, 8}) {
    SCOPED_TRACE("nodes: " + std::to_string(nodes));
    const std::vector<HostLink> hosts = JudgeHostLinks(Pairs(nodes, 1, 10.0, 2.0), nodes, 0.8);
    ASSERT_EQ(hosts.size(), static_cast<size_t>(nodes));
    for (const HostLink& h : hosts) {
      EXPECT_EQ(h.slow, h.node == 1) << h.node << ": " << h.median_GBps << " against " << h.others_GBps;
    }
    EXPECT_DOUBLE_EQ(hosts[1].median_GBps, 2.0);
    EXPECT_DOUBLE_EQ(hosts[1].others_GBps, 10.0);
    EXPECT_DOUBLE_EQ(hosts[1].fraction, 0.2);
  }
}

TEST(LinkProbeJudge, EvenLinksNameNobodyAndTwoNodesCannotBeJudged) {
  for (const HostLink& h : JudgeHostLinks(Pairs(4, -1, 10.0, 10.0), 4, 0.8)) EXPECT_FALSE(h.slow) << h.node;
  EXPECT_TRUE(JudgeHostLinks(Pairs(2, 1, 10.0, 1.0), 2, 0.8).empty());
  // The threshold is strict: exactly 80% of the others is no slow link.
  const std::vector<HostLink> edge = JudgeHostLinks(Pairs(4, 2, 10.0, 8.0), 4, 0.8);
  EXPECT_FALSE(edge[2].slow);
}

TEST(LinkProbeJudge, EachLocalRankIsJudgedOnItsOwnLinks) {
  std::vector<LinkPair> pairs = Pairs(4, -1, 10.0, 10.0);
  for (LinkPair p : Pairs(4, 3, 10.0, 1.0)) {
    p.local_rank = 1;
    pairs.push_back(p);
  }
  const std::vector<HostLink> hosts = JudgeHostLinks(pairs, 4, 0.8);
  ASSERT_EQ(hosts.size(), 8u);
  for (const HostLink& h : hosts) EXPECT_EQ(h.slow, h.local_rank == 1 && h.node == 3) << h.local_rank << "/" << h.node;
}

TEST(LinkProbeOptions, SizeMustBeAPositiveMultipleOfFour) {
  LinkProbeOptions options;
  options.bytes = 6;
  EXPECT_THROW(ValidateLinkProbeOptions(options), InputError);
  options.bytes = 0;
  EXPECT_THROW(ValidateLinkProbeOptions(options), InputError);
  options.bytes = 8;
  EXPECT_NO_THROW(ValidateLinkProbeOptions(options));
}

TEST(LinkProbeFormat, VerdictNamesTheSlowHostAndTheTablesHoldEveryRow) {
  LinkProbeResult result;
  result.nodes = 4;
  result.rounds = 3;
  result.pairs = Pairs(4, 2, 10.0, 1.0);
  result.hosts = JudgeHostLinks(result.pairs, 4, 0.8);
  result.slow_nodes = {2};
  const std::vector<std::string> hosts = {"a", "b", "c", "d"};
  const std::vector<std::string> lines = FormatLinkProbe(result, LinkProbeOptions{}, hosts);
  EXPECT_EQ(lines.back(), "# link probe: straggler host c: its link runs below 80% of the other pairs' rate");
  EXPECT_EQ(SlowHosts(result, hosts), "c");
  Group train;
  AddLinkProbeToReport(train, result, LinkProbeOptions{}, hosts);
  EXPECT_EQ(train.tables.at("link_pairs").rows(), 6u);
  EXPECT_EQ(train.tables.at("link_hosts").rows(), 4u);

  result.nodes = 2;
  result.pairs = Pairs(2, 1, 10.0, 1.0);
  result.hosts.clear();
  result.slow_nodes.clear();
  EXPECT_NE(FormatLinkProbe(result, LinkProbeOptions{}, hosts).back().find("cannot be told apart"), std::string::npos);
}

// Each rank as a node of its own (one local rank): every pair measured once, the same result on every rank.
TEST(LinkProbeMpi, EveryRankAsANodeGivesEveryPairOnEveryRank) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) GTEST_SKIP() << "needs 2 or more ranks";
  std::unique_ptr<Communicator> comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  Watchdog watchdog(120, [](const std::string& operation, double) { ADD_FAILURE() << "watchdog: " << operation; });
  LinkProbeOptions options;
  options.bytes = 64 * 1024;
  options.iters = 2;
  options.watchdog = &watchdog;
  std::vector<int> node(static_cast<size_t>(size)), local(static_cast<size_t>(size), 0);
  for (int r = 0; r < size; ++r) node[static_cast<size_t>(r)] = r;
  const LinkProbeResult result = ProbeInterNodeLinks(*comm, node, local, options);
  EXPECT_EQ(result.nodes, size);
  ASSERT_EQ(result.pairs.size(), static_cast<size_t>(size * (size - 1) / 2));
  std::vector<double> rates;
  for (const LinkPair& p : result.pairs) {
    EXPECT_GT(p.seconds, 0) << p.node_a << "-" << p.node_b;
    EXPECT_DOUBLE_EQ(p.GBps, 2.0 * 64 * 1024 * 2 / p.seconds / 1e9);
    rates.push_back(p.GBps);
  }
  std::vector<double> root = rates;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(rates, root);
  EXPECT_EQ(result.hosts.size(), size >= 3 ? static_cast<size_t>(size) : 0u);
}

}  // namespace
}  // namespace tb
