#include "cpu_placement.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <set>

#include "units.h"

namespace tb {

std::string FormatIdList(std::vector<int> ids, int shortest_range) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::string text;
  for (size_t first = 0; first < ids.size();) {
    size_t last = first;
    while (last + 1 < ids.size() && ids[last + 1] == ids[last] + 1) ++last;
    const bool range = static_cast<int>(last - first + 1) >= std::max(shortest_range, 2);
    for (size_t i = first; i <= last; i = range ? last + 1 : i + 1) {
      if (!text.empty()) text += ',';
      text += std::to_string(ids[i]);
      if (range) text += '-' + std::to_string(ids[last]);
    }
    first = last + 1;
  }
  return text;
}

std::optional<std::vector<int>> ParseIdList(std::string_view text) {
  auto number = [](std::string_view digits) -> std::optional<int> {
    int value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    const bool whole = !digits.empty() && error == std::errc() && end == digits.data() + digits.size();
    if (!whole || value < 0) return std::nullopt;
    return value;
  };
  std::vector<int> ids;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const size_t dash = item.find('-');
    const std::optional<int> first = number(item.substr(0, dash));
    const std::optional<int> last = dash == std::string_view::npos ? first : number(item.substr(dash + 1));
    if (!first || !last || *last < *first) return std::nullopt;
    for (int id = *first; id <= *last; ++id) ids.push_back(id);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
    if (text.empty()) return std::nullopt;  // a trailing comma
  }
  if (ids.empty()) return std::nullopt;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::string ThisProcessCpuList() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return "";
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return FormatIdList(cpus);
}

namespace {

// One host's ranks (with known CPUs): the groups that cannot each have a CPU of their own. A maximum matching of
// ranks to CPUs (augmenting paths) leaves a rank without a CPU exactly when such a group exists; from each rank left
// over, the ranks reachable by alternating paths (a CPU it may use, that CPU's holder, a CPU the holder may use,
// ...) and the CPUs they may use form one: every CPU reached has a holder among them, and they outnumber those CPUs.
std::vector<SharedCpus> FindSharedOnHost(const std::string& host, const std::vector<const RankCpus*>& ranks) {
  std::map<int, size_t> holder;  // CPU -> the rank (index into `ranks`) it is given to
  std::function<bool(size_t, std::set<int>&)> give = [&](size_t r, std::set<int>& tried) {
    for (int cpu : ranks[r]->cpus) {
      if (!tried.insert(cpu).second) continue;
      auto held = holder.find(cpu);
      if (held == holder.end() || give(held->second, tried)) {
        holder[cpu] = r;
        return true;
      }
    }
    return false;
  };
  std::vector<size_t> left_over;
  for (size_t r = 0; r < ranks.size(); ++r) {
    std::set<int> tried;
    if (!give(r, tried)) left_over.push_back(r);
  }
  std::vector<std::pair<std::set<size_t>, std::set<int>>> groups;
  for (size_t start : left_over) {
    std::set<size_t> members = {start};
    std::set<int> cpus;
    std::vector<size_t> queue = {start};
    while (!queue.empty()) {
      const size_t r = queue.back();
      queue.pop_back();
      for (int cpu : ranks[r]->cpus) {
        if (!cpus.insert(cpu).second) continue;
        const size_t next = holder.at(cpu);  // held: a free CPU would have been given to `start`
        if (members.insert(next).second) queue.push_back(next);
      }
    }
    // Groups reached from two left-over ranks that meet are one group: the same CPUs are contended for.
    for (auto it = groups.begin(); it != groups.end();) {
      const bool meets = std::any_of(it->first.begin(), it->first.end(), [&](size_t m) { return members.contains(m); });
      if (!meets) {
        ++it;
        continue;
      }
      members.insert(it->first.begin(), it->first.end());
      cpus.insert(it->second.begin(), it->second.end());
      it = groups.erase(it);
    }
    groups.emplace_back(std::move(members), std::move(cpus));
  }
  std::vector<SharedCpus> shared;
  for (const auto& [members, cpus] : groups) {
    SharedCpus s{host, {}, {cpus.begin(), cpus.end()}};
    for (size_t m : members) s.ranks.push_back(ranks[m]->rank);
    std::sort(s.ranks.begin(), s.ranks.end());
    shared.push_back(std::move(s));
  }
  std::sort(shared.begin(), shared.end(), [](const SharedCpus& a, const SharedCpus& b) { return a.ranks < b.ranks; });
  return shared;
}

}  // namespace

std::vector<SharedCpus> FindSharedCpus(const std::vector<RankCpus>& ranks) {
  std::map<std::string, std::vector<const RankCpus*>> by_host;
  for (const RankCpus& r : ranks) {
    if (!r.cpus.empty()) by_host[r.host].push_back(&r);
  }
  std::vector<SharedCpus> shared;
  for (auto& [host, members] : by_host) {
    std::sort(members.begin(), members.end(), [](const RankCpus* a, const RankCpus* b) { return a->rank < b->rank; });
    for (SharedCpus& s : FindSharedOnHost(host, members)) shared.push_back(std::move(s));
  }
  return shared;
}

std::string PlacementWarning(const std::vector<SharedCpus>& shared) {
  if (shared.empty()) return "";
  constexpr size_t kNamed = 3;  // a launch oversubscribed on every node says so once per host: name a few
  std::vector<std::string> groups;
  for (size_t i = 0; i < shared.size() && i < kNamed; ++i) {
    groups.push_back("ranks " + FormatIdList(shared[i].ranks, 3) + " on " + shared[i].host + " share CPUs " +
                     FormatIdList(shared[i].cpus));
  }
  if (shared.size() > kNamed) groups.push_back("and " + std::to_string(shared.size() - kNamed) + " more groups");
  return JoinNames(groups, "; ") +
         ": figures measure the placement, not the cluster (an MPI rank polling for a message waits a time slice when "
         "its peer shares its CPU; bind one rank per core: mpirun does by default, srun with --cpu-bind=cores under "
         "Slurm's task/affinity or task/cgroup)";
}

}  // namespace tb
