#include "link_probe.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "console.h"
#include "error.h"
#include "p2p.h"
#include "schema.h"
#include "timed_phase.h"
#include "units.h"

namespace tb {
namespace {


// This rank's seconds per (local rank, node pair), laid out so that one MAX all-reduce gives each pair's time as its
// slower side saw it.
struct ProbeSeconds {
  ProbeSeconds(int locals, int nodes) : nodes(nodes), values(static_cast<size_t>(locals) * nodes * nodes, 0.0) {}
  double& at(int local, int a, int b) { return values[(static_cast<size_t>(local) * nodes + a) * nodes + b]; }
  int nodes;
  std::vector<double> values;
};

// The node this one meets in the round; -1 for a bye.
int PartnerIn(const std::vector<std::pair<int, int>>& round, int node) {
  for (const auto& [a, b] : round) {
    if (a == node) return b;
    if (b == node) return a;
  }
  return -1;
}

std::string NodeName(const std::vector<std::string>& node_hosts, int node) {
  return node < static_cast<int>(node_hosts.size()) ? node_hosts[static_cast<size_t>(node)] : "node " + std::to_string(node);
}

std::string Rate(double GBps) { return Format("%.4g GB/s", GBps); }

}  // namespace

std::vector<std::vector<std::pair<int, int>>> TournamentRounds(int nodes) {
  std::vector<std::vector<std::pair<int, int>>> rounds;
  if (nodes < 2) return rounds;
  const int slots = nodes + nodes % 2;  // an odd count gets a bye: the slot `nodes`
  std::vector<int> circle(static_cast<size_t>(slots));
  for (int i = 0; i < slots; ++i) circle[static_cast<size_t>(i)] = i;
  for (int r = 0; r < slots - 1; ++r) {
    std::vector<std::pair<int, int>> round;
    for (int i = 0; i < slots / 2; ++i) {
      const int a = circle[static_cast<size_t>(i)], b = circle[static_cast<size_t>(slots - 1 - i)];
      if (a < nodes && b < nodes) round.emplace_back(std::min(a, b), std::max(a, b));
    }
    rounds.push_back(std::move(round));
    std::rotate(circle.begin() + 1, circle.end() - 1, circle.end());  // slot 0 stays, the rest turn
  }
  return rounds;
}

std::vector<HostLink> JudgeHostLinks(const std::vector<LinkPair>& pairs, int nodes, double threshold_fraction) {
  std::vector<HostLink> hosts;
  if (nodes < 3) return hosts;
  int locals = 0;
  for (const LinkPair& p : pairs) locals = std::max(locals, p.local_rank + 1);
  for (int local = 0; local < locals; ++local) {
    for (int node = 0; node < nodes; ++node) {
      std::vector<double> mine, others;
      for (const LinkPair& p : pairs) {
        if (p.local_rank != local) continue;
        (p.node_a == node || p.node_b == node ? mine : others).push_back(p.GBps);
      }
      if (mine.empty() || others.empty()) continue;
      HostLink h{node, local, MedianOf(mine), MedianOf(others), 0, false};
      h.fraction = h.median_GBps / h.others_GBps;
      h.slow = h.fraction < threshold_fraction;
      hosts.push_back(h);
    }
  }
  return hosts;
}

void ValidateLinkProbeOptions(const LinkProbeOptions& options) {
  CheckMessageSize(options.bytes, "--link-probe", ", or 0 to skip the probe");
}

LinkProbeResult ProbeInterNodeLinks(Communicator& comm, const std::vector<int>& rank_node,
                                    const std::vector<int>& rank_local, const LinkProbeOptions& options) {
  ValidateLinkProbeOptions(options);
  LinkProbeResult result;
  result.nodes = *std::max_element(rank_node.begin(), rank_node.end()) + 1;
  const int locals = *std::max_element(rank_local.begin(), rank_local.end()) + 1;
  std::map<std::pair<int, int>, int> rank_at;  // (node, local rank) -> rank
  for (size_t r = 0; r < rank_node.size(); ++r) rank_at[{rank_node[r], rank_local[r]}] = static_cast<int>(r);
  const int me = comm.rank(), my_node = rank_node[static_cast<size_t>(me)], my_local = rank_local[static_cast<size_t>(me)];

  std::unique_ptr<CommBuffer> send = AllocateFilled(comm, options.bytes);
  std::unique_ptr<CommBuffer> recv = AllocateFilled(comm, options.bytes);
  const size_t count = options.bytes / kMessageElementBytes;
  ProbeSeconds seconds(locals, result.nodes);
  const auto rounds = TournamentRounds(result.nodes);
  result.rounds = static_cast<int>(rounds.size());
  for (size_t r = 0; r < rounds.size(); ++r) {
    const int partner = PartnerIn(rounds[r], my_node);
    const auto found = partner < 0 ? rank_at.end() : rank_at.find({partner, my_local});
    const int peer = found == rank_at.end() ? -1 : found->second;
    auto describe = [&] {
      return Format("link probe round %zu of %zu: %llu B both ways, %d exchanges per node pair", r + 1, rounds.size(),
                    static_cast<unsigned long long>(options.bytes), options.iters);
    };
    const double s = TimePhase(comm, options.watchdog, describe, peer >= 0, options.warmup, options.iters,
                               [&] { comm.SendRecv(send->data(), peer, recv->data(), peer, count, DataType::kFloat32); });
    if (peer >= 0) seconds.at(my_local, std::min(my_node, partner), std::max(my_node, partner)) = s;
  }
  TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, seconds.values.data(), static_cast<int>(seconds.values.size()), MPI_DOUBLE,
                             MPI_MAX, comm.host_comm()));
  const double moved_GB = 2.0 * static_cast<double>(options.bytes) * options.iters / 1e9;
  for (int local = 0; local < locals; ++local) {
    for (int a = 0; a < result.nodes; ++a) {
      for (int b = a + 1; b < result.nodes; ++b) {
        const double s = seconds.at(local, a, b);
        if (s > 0) result.pairs.push_back({local, a, b, s, moved_GB / s});
      }
    }
  }
  result.hosts = JudgeHostLinks(result.pairs, result.nodes, options.threshold_fraction);
  for (const HostLink& h : result.hosts) {
    if (h.slow && std::find(result.slow_nodes.begin(), result.slow_nodes.end(), h.node) == result.slow_nodes.end()) {
      result.slow_nodes.push_back(h.node);
    }
  }
  std::sort(result.slow_nodes.begin(), result.slow_nodes.end());
  return result;
}

std::string SlowHosts(const LinkProbeResult& result, const std::vector<std::string>& node_hosts) {
  std::vector<std::string> names;
  for (int node : result.slow_nodes) names.push_back(NodeName(node_hosts, node));
  return JoinNames(names, ",");
}

namespace {

std::string Verdict(const LinkProbeResult& result, const LinkProbeOptions& options,
                    const std::vector<std::string>& node_hosts) {
  const int percent = static_cast<int>(std::lround(100 * options.threshold_fraction));
  if (result.nodes < 3) {
    return Format("%d nodes: one link per local rank, whose slow end cannot be told apart; no host judged "
                  "(3 nodes or more name it)", result.nodes);
  }
  if (result.slow_nodes.empty()) {
    return Format("no slow host link (every host's pairs at %d%% or more of the other pairs' rate)", percent);
  }
  return Format("straggler host%s %s: %s link%s below %d%% of the other pairs' rate",
                result.slow_nodes.size() > 1 ? "s" : "", SlowHosts(result, node_hosts).c_str(),
                result.slow_nodes.size() > 1 ? "their" : "its", result.slow_nodes.size() > 1 ? "s run" : " runs", percent);
}

}  // namespace

std::vector<std::string> FormatLinkProbe(const LinkProbeResult& result, const LinkProbeOptions& options,
                                         const std::vector<std::string>& node_hosts) {
  std::vector<std::string> lines = {Format(
      "# link probe: %d nodes in %d rounds of node pairs at once, on each local rank's link: %s both ways x %d "
      "exchanges per pair (after %d); rate = 2 x bytes x exchanges / time, GB = 1e9 bytes",
      result.nodes, result.rounds, FormatBytes(static_cast<double>(options.bytes)).c_str(), options.iters,
      options.warmup)};
  for (const LinkPair& p : result.pairs) {
    lines.push_back(Format("#   local rank %d: %s <-> %s %s", p.local_rank, NodeName(node_hosts, p.node_a).c_str(),
                           NodeName(node_hosts, p.node_b).c_str(), Rate(p.GBps).c_str()));
  }
  for (const HostLink& h : result.hosts) {
    lines.push_back(Format("#   %s, local rank %d: its pairs %s, the others %s (%.3g%%)%s",
                           NodeName(node_hosts, h.node).c_str(), h.local_rank, Rate(h.median_GBps).c_str(),
                           Rate(h.others_GBps).c_str(), 100 * h.fraction, h.slow ? ": slow link" : ""));
  }
  lines.push_back("# link probe: " + Verdict(result, options, node_hosts));
  return lines;
}

void AddLinkProbeToReport(Group& train, const LinkProbeResult& result, const LinkProbeOptions& options,
                          const std::vector<std::string>& node_hosts) {
  namespace t = schema::train;
  schema::Set(train, t::link_probe_bytes, static_cast<int64_t>(options.bytes));
  schema::Set(train, t::link_probe_iters, options.iters);
  schema::Set(train, t::link_probe_nodes, result.nodes);
  schema::Set(train, t::link_probe_threshold, options.threshold_fraction);
  schema::Set(train, t::link_probe_slow_hosts, SlowHosts(result, node_hosts));
  schema::Set(train, t::link_probe_verdict, Verdict(result, options, node_hosts));
  auto host = [&](int node) { return NodeName(node_hosts, node); };
  namespace lp = t::link_pairs;
  schema::RecordTable<LinkPair>(t::kLinkPairs)
      .Column(lp::local_rank, [](const LinkPair& p) { return p.local_rank; })
      .Column(lp::node_a, [](const LinkPair& p) { return p.node_a; })
      .Column(lp::node_b, [](const LinkPair& p) { return p.node_b; })
      .Column(lp::host_a, [&](const LinkPair& p) { return host(p.node_a); })
      .Column(lp::host_b, [&](const LinkPair& p) { return host(p.node_b); })
      .Column(lp::seconds, [](const LinkPair& p) { return p.seconds; })
      .Column(lp::bidi_GBps, [](const LinkPair& p) { return p.GBps; })
      .Write(train, result.pairs);
  namespace lh = t::link_hosts;
  schema::RecordTable<HostLink>(t::kLinkHosts)
      .Column(lh::node, [](const HostLink& h) { return h.node; })
      .Column(lh::host, [&](const HostLink& h) { return host(h.node); })
      .Column(lh::local_rank, [](const HostLink& h) { return h.local_rank; })
      .Column(lh::median_GBps, [](const HostLink& h) { return h.median_GBps; })
      .Column(lh::others_GBps, [](const HostLink& h) { return h.others_GBps; })
      .Column(lh::fraction, [](const HostLink& h) { return h.fraction; })
      .Column(lh::slow, [](const HostLink& h) { return h.slow ? 1 : 0; })
      .Write(train, result.hosts);
}

}  // namespace tb
