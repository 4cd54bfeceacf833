#include "report_check.h"

#include <algorithm>
#include <vector>

#include "schema.h"
#include "units.h"

namespace tb {
namespace {

namespace sc = schema;

// Written by every command (CommandRun, and the first report write), whatever the command and its outcome.
const schema::Field* const kRootAttributes[] = {&sc::root::command, &sc::root::command_line, &sc::root::start_utc,
                                                &sc::root::end_utc, &sc::root::n_ranks,      &sc::root::status,
                                                &sc::root::status_reason};

std::string Missing(const std::string& what, const std::string& claim) {
  return "damaged: " + claim + ", but " + what + " is missing";
}

std::string Text(const Group* group, const schema::TextAttribute& field) {
  const std::string* text = schema::Find(group, field);
  return text ? *text : "";
}

bool Has(const Group* group, const schema::Field& field) { return schema::Value(group, field).has_value(); }

std::string RootDamage(const Group& root) {
  for (const schema::Field* field : kRootAttributes) {
    if (!Has(&root, *field)) {
      return "damaged: the root attribute '" + field->name + "' (written to every report) is missing";
    }
  }
  const std::string status = Text(&root, sc::root::status);
  if (status != "complete" && status != "interrupted" && status != "failed") {
    return "damaged: the root attribute 'status' is '" + status + "' (want complete, interrupted or failed)";
  }
  return "";
}

// The operation whose peak a summary attribute holds ("all_reduce" for all_reduce_peak_busbw_GBps); "" otherwise.
std::string PeakOperation(const std::string& name) {
  const std::string& pattern = sc::summary::peak_busbw_GBps.name;  // "<op>_peak_busbw_GBps"
  const std::string suffix = pattern.substr(pattern.find('>') + 1);
  return name.size() > suffix.size() && name.ends_with(suffix) ? name.substr(0, name.size() - suffix.size()) : "";
}

std::string CollectivesDamage(const Group& root, const Group& summary) {
  for (const auto& [name, value] : summary.attributes) {
    const std::string op = PeakOperation(name);
    if (op.empty()) continue;
    if (!sc::FindTable(sc::FindGroup(root, sc::kCollective, op), sc::collective::kResults)) {
      return Missing("/collectives/" + op + "/results", "summary/" + name + " reports a sweep of " + op);
    }
  }
  return "";
}

std::string P2pDamage(const Group& root, const Group& summary) {
  const Group* p2p = sc::FindGroup(root, sc::kP2p);
  if (Has(&summary, sc::summary::p2p_median_uni_GBps) && !sc::FindMatrix(p2p, sc::p2p::uni_bw_GBps)) {
    return Missing("/p2p/uni_bw_GBps", "summary/p2p_median_uni_GBps reports a p2p matrix");
  }
  if (Has(&summary, sc::summary::p2p_flagged_pairs) && !sc::FindTable(p2p, sc::p2p::kFlagged)) {
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
std::pair<std::vector<std::string>, std::string> ClaimedPoints(const Group& summary, const Group& root) {
  if (Has(&summary, sc::summary::train_points)) {
    return {SplitNames(Text(&summary, sc::summary::train_points)), "summary/" + sc::summary::train_points.name};
  }
  const int64_t* ranks_attribute = sc::Find(&summary, sc::summary::train_ranks);
  const int64_t ranks = ranks_attribute ? *ranks_attribute : 0;
  std::vector<std::string> sweep;
  for (const auto& [name, group] : sc::Instances(root, sc::kTrainPoint)) {
    const std::optional<PointGroup> parsed = ParsePointGroupName(name);
    if (parsed && parsed->ranks == ranks && parsed->throttle_MBps > 0) sweep.push_back(name);
  }
  return {sweep.empty() ? std::vector<std::string>{PointGroupName({ranks, 0})} : sweep, "summary/train_ranks"};
}

// A run with the loader, checkpoints or a resume has an io group per point (train_io.h).
bool RanWithIo(const Group& root) {
  const Group* config = sc::FindGroup(root, sc::kConfig);
  const int64_t* every = sc::Find(config, sc::config::checkpoint_every);
  return !Text(config, sc::config::data).empty() || (every && *every > 0) || !Text(config, sc::config::resume).empty();
}

std::string PointDamage(const Group& root, const std::string& point, const std::string& claim) {
  const Group* group = sc::FindGroup(root, sc::kTrainPoint, point);
  const std::string lists = claim + " lists the training point " + point;
  if (!group) return Missing("group /train/" + point, lists);
  if (!sc::FindTable(group, sc::point::kSteps)) return Missing("/train/" + point + "/steps", lists);
  if (!Has(group, sc::point::tokens_per_s)) return Missing("attribute /train/" + point + " tokens_per_s", lists);
  if (RanWithIo(root) && !sc::FindGroup(root, sc::kIoPoint, point)) {
    return Missing("group /io/" + point, lists + " of a run with --data, checkpoints or --resume");
  }
  return "";
}

std::string TrainDamage(const Group& root, const Group& summary) {
  if (!Has(&summary, sc::summary::train_ranks) && !Has(&summary, sc::summary::train_points)) return "";
  const auto [points, claim] = ClaimedPoints(summary, root);
  if (!sc::FindGroup(root, sc::kModel)) return Missing("group /model", claim + " reports a training run");
  for (const std::string& point : points) {
    if (std::string damage = PointDamage(root, point, claim); !damage.empty()) return damage;
  }
  return "";
}

// A suite records how each phase ended (suite/phases) before the phase runs: a suite that completed has it.
std::string SuiteDamage(const Group& root) {
  if (Text(&root, sc::root::command) != "suite" || Text(&root, sc::root::status) != "complete") return "";
  if (!sc::FindTable(sc::FindGroup(root, sc::kSuite), sc::suite::kPhases)) {
    return Missing("/suite/phases", "the root says a suite ran to completion");
  }
  return "";
}

}  // namespace

std::string FindReportDamage(const Report& report) {
  const Group& root = report.root;
  if (std::string damage = RootDamage(root); !damage.empty()) return damage;
  if (std::string damage = SuiteDamage(root); !damage.empty()) return damage;
  const Group* summary = sc::FindGroup(root, sc::kSummary);
  if (!summary) return "";
  for (auto check : {CollectivesDamage, P2pDamage, TrainDamage}) {
    if (std::string damage = check(root, *summary); !damage.empty()) return damage;
  }
  return "";
}

}  // namespace tb
