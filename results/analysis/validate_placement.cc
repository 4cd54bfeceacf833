// validate's placement check (environment.placement, results/README.md "Validation"): whether the ranks of each host
// could each have a CPU of their own (FindSharedCpus over topology/ranks' cpu_affinity). Ranks that must share CPUs
// measure the placement, not the cluster: a warning. A report without the affinities (written before them) is unknown.
#include <cmath>
#include <set>

#include "console.h"
#include "cpu_placement.h"
#include "schema.h"
#include "units.h"
#include "validate_internal.h"

namespace tb {
namespace {

namespace sc = schema;

Check PlacementCheck(Verdict verdict, double sharing_ranks, std::string message, Subject subject = {}) {
  return SelfCheck(MakeFigure("environment.placement", "environment", "ranks that must share CPUs with another rank",
                              "ranks", Better::kLower, sharing_ranks, std::move(subject)),
                   0, 0, "topology/ranks cpu_affinity: each rank a CPU of its own", verdict, std::move(message));
}

}  // namespace

void AddPlacementCheck(const Report& report, std::vector<Check>& checks) {
  namespace c = sc::topology::ranks;
  const Table* table = sc::FindTable(sc::FindGroup(report.root, sc::kTopology), sc::topology::kRanks);
  const auto* affinities = table ? sc::Values(*table, c::cpu_affinity) : nullptr;
  const auto* ranks = table ? sc::Values(*table, c::rank) : nullptr;
  const auto* hosts = table ? sc::Values(*table, c::host) : nullptr;
  if (!affinities || !ranks || !hosts) {
    checks.push_back(PlacementCheck(Verdict::kUnknown, NAN,
                                    "the report has no CPU affinity of its ranks (written before trainbench recorded "
                                    "them in topology/ranks)"));
    return;
  }
  std::vector<RankCpus> placed;
  std::vector<std::string> unknown;
  for (size_t i = 0; i < affinities->size() && i < ranks->size() && i < hosts->size(); ++i) {
    const int rank = static_cast<int>((*ranks)[i]);
    const std::optional<std::vector<int>> cpus = ParseIdList((*affinities)[i]);
    if (!cpus) unknown.push_back(std::to_string(rank));
    placed.push_back({rank, (*hosts)[i], cpus.value_or(std::vector<int>{})});
  }
  const std::vector<SharedCpus> shared = FindSharedCpus(placed);
  if (!shared.empty()) {
    Subject subject;
    std::vector<int> sharing;
    std::vector<std::string> sharing_hosts;
    for (const SharedCpus& s : shared) {
      sharing.insert(sharing.end(), s.ranks.begin(), s.ranks.end());
      if (sharing_hosts.empty() || sharing_hosts.back() != s.host) sharing_hosts.push_back(s.host);
    }
    subject.rank = FormatIdList(sharing, 3);
    subject.host = JoinNames(sharing_hosts, ",");
    checks.push_back(PlacementCheck(Verdict::kWarn, static_cast<double>(sharing.size()), PlacementWarning(shared),
                                    subject));
  } else if (!unknown.empty()) {
    Subject subject;
    subject.rank = JoinNames(unknown, ",");
    checks.push_back(PlacementCheck(Verdict::kUnknown, NAN,
                                    "the CPU affinity of rank " + subject.rank + " is not recorded (or not a CPU list)",
                                    subject));
  } else {
    const std::set<std::string> distinct(hosts->begin(), hosts->end());
    checks.push_back(PlacementCheck(Verdict::kPass, 0,
                                    Format("each rank has a CPU of its own (%zu ranks on %zu hosts)", ranks->size(),
                                           distinct.size())));
  }
}

}  // namespace tb
