#include "report_check.h"

#include <algorithm>
#include <vector>

#include "units.h"

namespace tb {
namespace {

// Written by every command (CommandRun, and the first report write), whatever the command and its outcome.
constexpr const char* kRootAttributes[] = {"command", "command_line", "start_utc", "end_utc",
                                           "n_ranks", "status",       "status_reason"};
constexpr const char* kPeakSuffix = "_peak_busbw_GBps";

std::string Missing(const std::string& what, const std::string& claim) {
  return "damaged: " + claim + ", but " + what + " is missing";
}

std::string Text(const Group& group, const std::string& name) {
  auto it = group.attributes.find(name);
  const std::string* text = it == group.attributes.end() ? nullptr : std::get_if<std::string>(&it->second);
  return text ? *text : "";
}

int64_t Integer(const Group& group, const std::string& name) {
  auto it = group.attributes.find(name);
  const int64_t* value = it == group.attributes.end() ? nullptr : std::get_if<int64_t>(&it->second);
  return value ? *value : 0;
}

std::string RootDamage(const Group& root) {
  for (const char* name : kRootAttributes) {
    if (!root.attributes.contains(name)) {
      return "damaged: the root attribute '" + std::string(name) + "' (written to every report) is missing";
    }
  }
  const std::string status = Text(root, "status");
  if (status != "complete" && status != "interrupted" && status != "failed") {
    return "damaged: the root attribute 'status' is '" + status + "' (want complete, interrupted or failed)";
  }
  return "";
}

std::string CollectivesDamage(const Group& root, const Group& summary) {
  const Group* collectives = root.FindChild("collectives");
  for (const auto& [name, value] : summary.attributes) {
    if (!name.ends_with(kPeakSuffix)) continue;
    const std::string op = name.substr(0, name.size() - std::string(kPeakSuffix).size());
    const Group* group = collectives ? collectives->FindChild(op) : nullptr;
    if (!group || !group->tables.contains("results")) {
      return Missing("/collectives/" + op + "/results", "summary/" + name + " reports a sweep of " + op);
    }
  }
  return "";
}

std::string P2pDamage(const Group& root, const Group& summary) {
  const Group* p2p = root.FindChild("p2p");
  if (summary.attributes.contains("p2p_median_uni_GBps") && (!p2p || !p2p->matrices.contains("uni_bw_GBps"))) {
    return Missing("/p2p/uni_bw_GBps", "summary/p2p_median_uni_GBps reports a p2p matrix");
  }
  if (summary.attributes.contains("p2p_flagged_pairs") && (!p2p || !p2p->tables.contains("flagged"))) {
    return Missing("/p2p/flagged", "summary/p2p_flagged_pairs reports flagged pairs");
  }
  return "";
}

// The names of a comma-separated list such as summary/train_points ("k1,k2").
std::vector<std::string> SplitNames(const std::string& list) {
  std::vector<std::string> names = SplitItems(list);
  std::erase(names, std::string());
  return names;
}

// The points the summary says were measured, and the attribute that says so. Reports older than train_points
// name only the largest point (train_ranks = N): group k<N>, or its storage sweep's k<N>_throttle<rate> groups.
std::pair<std::vector<std::string>, std::string> ClaimedPoints(const Group& summary, const Group* train) {
  if (summary.attributes.contains(kTrainPointsAttribute)) {
    return {SplitNames(Text(summary, kTrainPointsAttribute)), "summary/" + std::string(kTrainPointsAttribute)};
  }
  const int64_t ranks = Integer(summary, "train_ranks");
  const std::string point = PointGroupName({ranks, 0});
  std::vector<std::string> sweep;
  if (train) {
    for (const auto& [name, group] : train->children()) {
      const std::optional<PointGroup> parsed = ParsePointGroupName(name);
      if (parsed && parsed->ranks == ranks && parsed->throttle_MBps > 0) sweep.push_back(name);
    }
  }
  return {sweep.empty() ? std::vector<std::string>{point} : sweep, "summary/train_ranks"};
}

// A run with the loader, checkpoints or a resume has an io group per point (train_io.h).
bool RanWithIo(const Group& root) {
  const Group* config = root.FindChild("config");
  return config && (!Text(*config, "data").empty() || Integer(*config, "checkpoint_every") > 0 ||
                    !Text(*config, "resume").empty());
}

std::string PointDamage(const Group& root, const std::string& point, const std::string& claim) {
  const Group* train = root.FindChild("train");
  const Group* group = train ? train->FindChild(point) : nullptr;
  const std::string lists = claim + " lists the training point " + point;
  if (!group) return Missing("group /train/" + point, lists);
  if (!group->tables.contains("steps")) return Missing("/train/" + point + "/steps", lists);
  if (!group->attributes.contains("tokens_per_s")) return Missing("attribute /train/" + point + " tokens_per_s", lists);
  const Group* io = root.FindChild("io");
  if (RanWithIo(root) && (!io || !io->FindChild(point))) {
    return Missing("group /io/" + point, lists + " of a run with --data, checkpoints or --resume");
  }
  return "";
}

std::string TrainDamage(const Group& root, const Group& summary) {
  if (!summary.attributes.contains("train_ranks") && !summary.attributes.contains(kTrainPointsAttribute)) return "";
  const auto [points, claim] = ClaimedPoints(summary, root.FindChild("train"));
  if (!root.FindChild("model")) return Missing("group /model", claim + " reports a training run");
  for (const std::string& point : points) {
    if (std::string damage = PointDamage(root, point, claim); !damage.empty()) return damage;
  }
  return "";
}

}  // namespace

std::string FindReportDamage(const Report& report) {
  const Group& root = report.root;
  if (std::string damage = RootDamage(root); !damage.empty()) return damage;
  const Group* summary = root.FindChild("summary");
  if (!summary) return "";
  for (auto check : {CollectivesDamage, P2pDamage, TrainDamage}) {
    if (std::string damage = check(root, *summary); !damage.empty()) return damage;
  }
  return "";
}

}  // namespace tb
