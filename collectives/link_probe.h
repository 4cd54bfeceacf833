// The training's inter-node link probe: before the scaling points of a launch that spans nodes, every node pair
// exchanges messages both ways on each local rank's link (local rank j of one node with local rank j of the other,
// the pairs of a round at once, k-1 rounds for k nodes), so that the report can name the host whose link is slow.
// A synchronous all-reduce makes every rank wait for the slowest link, so step times alone cannot say whose it is.
//
// Judgement (per local rank j, with at least 3 nodes): host h's rate = the median bidirectional rate of its pairs;
// the others' = the median over the pairs without h; h's link is slow when its rate < threshold x the others'.
// With 2 nodes there is one pair per local rank and the slow end cannot be told apart: no judgement is made.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "communicator.h"
#include "report.h"
#include "watchdog.h"

namespace tb {

struct LinkProbeOptions {
  uint64_t bytes = uint64_t{16} << 20;  // per message and direction; a multiple of 4 (sent as float32)
  int iters = 5;                         // timed exchanges per pair
  int warmup = 1;                        // untimed exchanges before them
  double threshold_fraction = 0.8;       // a host's link is slow below this share of the others' rate
  Watchdog* watchdog = nullptr;          // guards each round when set
};

struct LinkPair {
  int local_rank = 0;
  int node_a = 0, node_b = 0;  // node_a < node_b
  double seconds = 0;          // the timed exchanges, as the slower side saw them
  double GBps = 0;             // 2 x bytes x iters / seconds: both directions at once, GB = 1e9 bytes
};

struct HostLink {
  int node = 0;
  int local_rank = 0;
  double median_GBps = 0;     // median rate of the host's pairs
  double others_GBps = 0;     // median rate of the pairs without it
  double fraction = 0;        // median_GBps / others_GBps
  bool slow = false;          // fraction < threshold
};

struct LinkProbeResult {
  int nodes = 0;
  int rounds = 0;
  std::vector<LinkPair> pairs;  // by local rank, then node pair
  std::vector<HostLink> hosts;  // by local rank, then node; empty with fewer than 3 nodes
  std::vector<int> slow_nodes;  // nodes with a slow link on any local rank, ascending
};

// Rounds of disjoint node pairs that cover every pair once (the circle method): k-1 rounds for even k, k for odd.
std::vector<std::vector<std::pair<int, int>>> TournamentRounds(int nodes);

// Host judgements from the pairs' rates (see the header comment). Pure.
std::vector<HostLink> JudgeHostLinks(const std::vector<LinkPair>& pairs, int nodes, double threshold_fraction);

// Throws InputError naming --link-probe for a size that is not a positive multiple of 4.
void ValidateLinkProbeOptions(const LinkProbeOptions& options);

// Runs the probe on `comm`, whose rank r is on node rank_node[r] as local rank rank_local[r]. Collective; every rank
// returns the whole result.
LinkProbeResult ProbeInterNodeLinks(Communicator& comm, const std::vector<int>& rank_node,
                                    const std::vector<int>& rank_local, const LinkProbeOptions& options);

// The console lines: the rounds, each host's rate against the others', and the verdict naming the slow hosts.
std::vector<std::string> FormatLinkProbe(const LinkProbeResult& result, const LinkProbeOptions& options,
                                         const std::vector<std::string>& node_hosts);

// "" when no host's link is slow, else the hosts, comma-separated.
std::string SlowHosts(const LinkProbeResult& result, const std::vector<std::string>& node_hosts);

// Writes the train group's link_pairs and link_hosts tables and link_probe_* attributes.
void AddLinkProbeToReport(Group& train, const LinkProbeResult& result, const LinkProbeOptions& options,
                          const std::vector<std::string>& node_hosts);

}  // namespace tb
