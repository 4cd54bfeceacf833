// Where ranks may run on their host's CPUs, and whether they must share them. Two ranks that busy-poll for messages
// (MPI's default when it thinks each rank has a core) on one CPU wait a scheduler time slice for each message: on
// this project's 2-core VM a p2p latency of 5700-6100 us and an 8 B all_reduce of 5100-6100 us, against 0.27-0.29
// and 0.4-0.6 us with a core each (launch/slurm/README.md). Such figures measure the placement, not the cluster.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tb {

// Sorted distinct ids as a list with ranges, as the kernel writes CPU lists (Cpus_allowed_list, taskset -c):
// runs of at least `shortest_range` consecutive ids become "a-b". {0,1,2,3,8} -> "0-3,8"; {} -> "".
std::string FormatIdList(std::vector<int> ids, int shortest_range = 2);

// "0-3,8" -> {0,1,2,3,8}; nullopt for text that is no such list (empty, a bad number, a range that runs backwards).
std::optional<std::vector<int>> ParseIdList(std::string_view text);

// The CPUs this process may run on (sched_getaffinity: what the launcher's binding, taskset or a cgroup leaves
// it), as "0-3,8"; "" when the kernel does not say.
std::string ThisProcessCpuList();

// One rank: its host and the CPUs it may run on (empty: not known; such a rank is left out of the judgement).
struct RankCpus {
  int rank = 0;
  std::string host;
  std::vector<int> cpus;
};

// Ranks of one host that cannot each have a CPU of their own: together they may run only on `cpus`, fewer CPUs
// than ranks.
struct SharedCpus {
  std::string host;
  std::vector<int> ranks;
  std::vector<int> cpus;
};

// The rule: the ranks of a host share CPUs when they cannot each be given a CPU of their own from their affinity
// sets, that is (Hall's theorem) when some group of them may run only on fewer CPUs than it has ranks. Two ranks
// bound to one CPU share it; two ranks that may both run anywhere on two CPUs do not; three unbound ranks on two
// CPUs do. CPUs are the kernel's (hardware threads): sibling hyperthreads run at once, a time slice is per CPU.
// Hosts are compared by name. Returns each group of ranks that contend, directly or through one another, for CPUs too
// few for them (ranks with a CPU to spare are in none), by host and then by rank; none when every rank can have a
// CPU of its own.
std::vector<SharedCpus> FindSharedCpus(const std::vector<RankCpus>& ranks);

// "ranks 0,1 on node07 share CPUs 0: figures measure the placement, not the cluster (why; the remedy)" (the first
// three groups, then how many more); "" when `shared` is empty. The one sentence the command header, the report and
// validate give.
std::string PlacementWarning(const std::vector<SharedCpus>& shared);

}  // namespace tb
