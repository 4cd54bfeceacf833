#include "validate.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "console.h"
#include "error.h"
#include "prices.h"
#include "schema.h"
#include "units.h"
#include "validate_internal.h"

namespace tb {
namespace {

namespace sc = schema;
const double kNaN = std::nan("");

std::string Number(double value) { return Format("%.4g", value); }

Check SelfCheck(Figure figure, double expected, double tolerance, std::string source, Verdict verdict,
                std::string message) {
  Check c;
  c.figure = std::move(figure);
  c.expected = expected;
  c.tolerance = tolerance;
  c.source = std::move(source);
  c.verdict = verdict;
  c.message = std::move(message);
  return c;
}

// ---- checks judged within the run ------------------------------------------------------------------------------

// How the run ended: anything but complete (failed, interrupted: a hang the watchdog ended, a crash) fails, with
// the report's own reason.
void AddStatusCheck(const Report& report, std::vector<Check>& checks) {
  const std::string* status = sc::Find(&report.root, sc::root::status);
  const std::string* reason = sc::Find(&report.root, sc::root::status_reason);
  Figure f = MakeFigure("run.status", "run", "how the run ended", "", Better::kHigher, kNaN);
  f.is_text = true;
  f.text = status ? *status : "";
  const bool complete = status && *status == "complete";
  checks.push_back(SelfCheck(f, 0, 0, "the report's status", complete ? Verdict::kPass : Verdict::kFail,
                             complete ? "complete" : f.text + ": " + (reason ? *reason : std::string("(no reason)"))));
  // A run with faults injected on purpose (--inject) is a test of validate, not a measurement: it says so.
  const std::string* injected = sc::Find(&report.root, sc::root::injected_faults);
  if (injected && !injected->empty()) {
    Figure i = MakeFigure("run.injected_faults", "run", "faults injected on purpose", "", Better::kLower, kNaN);
    i.is_text = true;
    i.text = *injected;
    checks.push_back(SelfCheck(i, 0, 0, "--inject", Verdict::kWarn, "faults injected on purpose: " + *injected));
  }
}

// Elements that failed verification, per operation: any is a failure, whatever any expectation says.
void AddWrongElementChecks(const Report& report, std::vector<Check>& checks) {
  for (const auto& [op, group] : sc::Instances(report.root, sc::kCollective)) {
    const Table* results = sc::FindTable(group, sc::collective::kResults);
    if (!results) continue;
    int64_t wrong = 0;
    bool checked = false;
    for (const std::string& mode : sc::collective::results::kModes) {
      const tb::Column* column = sc::FindColumn(*results, sc::collective::results::wrong, mode);
      const auto* values = column ? std::get_if<std::vector<int64_t>>(&column->values) : nullptr;
      for (int64_t w : values ? *values : std::vector<int64_t>{}) {
        if (w >= 0) checked = true;
        if (w > 0) wrong += w;
      }
    }
    Figure f = MakeFigure("collectives." + op + ".wrong_elements", "collectives", op + " elements that failed verification",
                           "elements", Better::kLower, checked ? static_cast<double>(wrong) : kNaN);
    const Verdict verdict = !checked ? Verdict::kUnknown : wrong > 0 ? Verdict::kFail : Verdict::kPass;
    checks.push_back(SelfCheck(f, 0, 0, "verification: any wrong element fails", verdict,
                               !checked ? "not verified (--check-iters 0)"
                                        : wrong ? std::to_string(wrong) + " wrong elements" : "every element right"));
  }
}

// p2p pairs the run itself flagged below threshold x median: each a weak link, named by host and device.
void AddWeakLinkChecks(const Report& report, std::vector<Check>& checks) {
  const Group* p2p = sc::FindGroup(report.root, sc::kP2p);
  const Table* flagged = sc::FindTable(p2p, sc::p2p::kFlagged);
  if (!flagged) return;
  namespace f = sc::p2p::flagged;
  const double median = sc::Number(p2p, sc::p2p::median_uni_GBps).value_or(kNaN);
  const double threshold = sc::Number(p2p, sc::p2p::threshold_fraction).value_or(kNaN);
  const std::string source = "this run's median x threshold " + Number(threshold);
  const auto* src = sc::Values(*flagged, f::src_rank);
  const auto* dst = sc::Values(*flagged, f::dst_rank);
  const auto* src_host = sc::Values(*flagged, f::src_host);
  const auto* dst_host = sc::Values(*flagged, f::dst_host);
  const auto* src_gpu = sc::Values(*flagged, f::src_gpu);
  const auto* dst_gpu = sc::Values(*flagged, f::dst_gpu);
  const auto* uni = sc::Values(*flagged, f::uni_bw_GBps);
  if (!src || !dst || !src_host || !dst_host || !src_gpu || !dst_gpu || !uni) return;
  for (size_t i = 0; i < src->size(); ++i) {
    const std::string pair = std::to_string((*src)[i]) + "->" + std::to_string((*dst)[i]);
    Subject s{pair, (*src_host)[i] + "->" + (*dst_host)[i], (*src_gpu)[i] + "->" + (*dst_gpu)[i], pair};
    Figure fig = MakeFigure("p2p.weak_link." + pair, "p2p", "p2p link " + pair + " unidirectional bandwidth", "GB/s",
                             Better::kHigher, (*uni)[i], s);
    checks.push_back(SelfCheck(fig, threshold * median, 1 - threshold, source, Verdict::kFail,
                               "weak link " + s.host + " (" + s.gpu + "): " + Number((*uni)[i]) + " GB/s, " +
                                   Number((*uni)[i] / median * 100) + "% of the median"));
  }
  if (src->empty()) {
    Figure fig = MakeFigure("p2p.weak_links", "p2p", "p2p links below the threshold", "pairs", Better::kLower, 0);
    checks.push_back(SelfCheck(fig, 0, 0, source, Verdict::kPass, "no pair below the threshold"));
  }
}

// Rank i's median step time x against the other ranks' (leave one out, so that a straggler does not pull its own
// expectation, and two ranks still compare): robust z = 0.6745 (x - median) / MAD of the others, infinite when
// their MAD is 0 and x is above their median.
std::pair<double, double> LeaveOneOut(const std::vector<double>& steps, size_t i) {
  std::vector<double> others;
  for (size_t j = 0; j < steps.size(); ++j) {
    if (j != i) others.push_back(steps[j]);
  }
  const double median = Median(others);
  std::vector<double> deviations;
  for (double s : others) deviations.push_back(std::fabs(s - median));
  const double mad = Median(deviations);
  const double z = mad > 0 ? 0.6745 * (steps[i] - median) / mad : (steps[i] > median ? INFINITY : 0);
  return {median, z};
}

// A straggler is above the z limit and slower than the others' median by more than the floor.
void AddStragglerChecks(const Report& report, const ValidatePolicy& policy, std::vector<Check>& checks) {
  const std::optional<HeadlinePoint> point = FindHeadlinePoint(report);
  const Table* budget = point ? sc::FindTable(point->train, sc::point::kStallBudget) : nullptr;
  namespace b = sc::point::stall_budget;
  const auto* rank = budget ? sc::Values(*budget, b::rank) : nullptr;
  const auto* host = budget ? sc::Values(*budget, b::host) : nullptr;
  const auto* device = budget ? sc::Values(*budget, b::device) : nullptr;
  const auto* step = budget ? sc::Values(*budget, b::median_step_s) : nullptr;
  if (!rank || !host || !device || !step || step->size() < 2) return;
  const std::string source = "peers: median of the other " + std::to_string(step->size() - 1) +
                             " ranks, robust z limit " + Number(policy.straggler_z);
  for (size_t i = 0; i < step->size(); ++i) {
    const auto [median, z] = LeaveOneOut(*step, i);
    const double excess = (*step)[i] / median - 1;
    const bool straggler = z > policy.straggler_z && excess > policy.straggler_floor;
    Subject s{std::to_string((*rank)[i]), (*host)[i], (*device)[i], ""};
    Figure fig = MakeFigure("train.step_s.rank" + s.rank, "train", "median step time of rank " + s.rank, "s",
                             Better::kLower, (*step)[i], s);
    checks.push_back(SelfCheck(fig, median, policy.straggler_floor, source,
                               straggler ? Verdict::kFail : Verdict::kPass,
                               Format("robust z %.2f, %+.1f%% against the others' median", z, 100 * excess) +
                                   (straggler ? ": straggler on " + s.host + " (" + s.gpu + ")" : "")));
  }
}

// ---- expectations --------------------------------------------------------------------------------------------

struct Expectation {
  double value;
  double warn, fail;  // bands: relative, or absolute points for a share
  std::string source;
};

std::string GpuModelOf(const Report& report) {
  const std::string devices = DeviceSummary(report);
  if (devices.ends_with(" x cpu")) return "cpu";
  const std::optional<GpuModel> model = MatchGpuModel(devices.substr(devices.find(" x ") + 3));
  return model ? model->name : "";
}

// The NVLink count of a link as topology/gpu_links names it ("NVLink x18", "NVLink x18 via NVSwitch"); 0 for
// anything else (PCIe: its generation and width are not in the report, so nothing is derived from it).
int NvlinkCount(const std::string& link, bool* via_switch) {
  if (link.rfind("NVLink x", 0) != 0) return 0;
  *via_switch = link.find("via NVSwitch") != std::string::npos;
  return std::atoi(link.c_str() + 8);
}

// Derived from the topology, for a run on one node whose GPU pairs are all NVLink-connected: p2p's median
// unidirectional rate = the pairs' median NVLink count x nvlink_GBps x efficiency; with every pair through
// NVSwitch also all_reduce's large-message busbw, whose bound is a GPU's NVLink rate.
std::optional<Expectation> FromTopology(const Figure& f, const Report& report, const ValidatePolicy& policy) {
  const bool p2p = f.key == "p2p.median_uni_GBps", all_reduce = f.key == "collectives.all_reduce.busbw_GBps.large";
  const int64_t* nodes = sc::Find(&report.root, sc::root::n_nodes);
  const Table* links = sc::FindTable(sc::FindGroup(report.root, sc::kTopology), sc::topology::kGpuLinks);
  const auto* link = links ? sc::Values(*links, sc::topology::gpu_links::link) : nullptr;
  if ((!p2p && !all_reduce) || !nodes || *nodes != 1 || !link || link->empty()) return std::nullopt;
  std::vector<double> counts;
  bool all_via_switch = true;
  for (const std::string& name : *link) {
    bool via_switch = false;
    const int count = NvlinkCount(name, &via_switch);
    if (count <= 0) return std::nullopt;  // a pair without NVLink: nothing derived
    counts.push_back(count);
    all_via_switch = all_via_switch && via_switch;
  }
  if (all_reduce && !all_via_switch) return std::nullopt;
  const double links_per_pair = all_reduce ? *std::min_element(counts.begin(), counts.end()) : Median(counts);
  return Expectation{links_per_pair * policy.nvlink_GBps * policy.derived_efficiency, policy.warn, policy.fail,
                     Format("derived: NVLink x%g x %g GB/s x efficiency %g", links_per_pair, policy.nvlink_GBps,
                            policy.derived_efficiency)};
}

// The policy's warn and fail bands for `f`: relative, or absolute points for a share of step time.
std::pair<double, double> Bands(const Figure& f, const ValidatePolicy& policy) {
  return f.share ? std::pair{policy.share_warn, policy.share_fail} : std::pair{policy.warn, policy.fail};
}

std::optional<Expectation> FromPolicy(const Figure& f, const ValidatePolicy& policy, const std::string& gpu) {
  auto model = policy.gpu_thresholds.find(gpu);
  if (model == policy.gpu_thresholds.end()) return std::nullopt;
  auto value = model->second.find(f.key);
  if (value == model->second.end()) return std::nullopt;
  const auto [warn, fail] = Bands(f, policy);
  return Expectation{value->second, warn, fail, "policy " + policy.file + " [gpu." + gpu + "]"};
}

std::optional<Expectation> FromBaseline(const Figure& f, const std::vector<Figure>& baseline, const std::string& file,
                                        const ValidatePolicy& policy) {
  for (const Figure& b : baseline) {
    if (b.key == f.key && std::isfinite(b.value)) {
      const auto [warn, fail] = Bands(f, policy);
      return Expectation{b.value, warn, fail, "baseline " + file};
    }
  }
  return std::nullopt;
}

std::optional<Expectation> FromHistory(const Figure& f, const std::vector<HistoryEntry>& history,
                                       const ValidatePolicy& policy) {
  std::vector<double> values;
  for (const HistoryEntry& night : history) {
    auto it = night.values.find(f.key);
    if (it != night.values.end() && std::isfinite(it->second)) values.push_back(it->second);
  }
  if (static_cast<int>(values.size()) < policy.history_min_nights) return std::nullopt;
  const double median = Median(values);
  std::vector<double> deviations;
  for (double v : values) deviations.push_back(std::fabs(v - median));
  const double sigma = 1.4826 * Median(deviations);  // the MAD as a standard deviation of normal noise
  const double scale = f.share ? 1.0 : std::fabs(median);
  const double spread = scale > 0 ? sigma / scale : 0;
  const auto [policy_warn, policy_fail] = Bands(f, policy);
  const double warn = std::max(policy_warn, 2 * spread);
  const double fail = std::max(policy_fail, 3 * spread);
  return Expectation{median, warn, fail,
                     Format("history: median of %zu passing nights, MAD %.3g", values.size(), sigma / 1.4826)};
}

// How far `measured` is on the bad side of `expected`: relative, or in absolute points for a share.
double Shortfall(const Figure& f, double expected) {
  const double bad = f.better == Better::kHigher ? expected - f.value : f.value - expected;
  return f.share ? bad : (expected != 0 ? bad / std::fabs(expected) : (bad > 0 ? INFINITY : 0));
}

Check Judge(const Figure& f, const std::optional<Expectation>& e) {
  Check c;
  c.figure = f;
  if (!std::isfinite(f.value)) {
    c.message = "the report lacks this figure";
    return c;
  }
  if (!e) {
    c.message = "no expectation: give --baseline, --history, or a threshold for this GPU model in --policy";
    return c;
  }
  c.expected = e->value;
  c.tolerance = e->fail;
  c.source = e->source;
  const double shortfall = Shortfall(f, e->value);
  c.verdict = shortfall <= e->warn ? Verdict::kPass : shortfall <= e->fail ? Verdict::kWarn : Verdict::kFail;
  const std::string by = f.share ? Format("%+.1f points", 100 * shortfall) : Format("%+.1f%%", 100 * shortfall);
  c.message = Number(f.value) + " " + f.unit + " against " + Number(e->value) + " (" + by + " on the bad side; warn " +
              (f.share ? Format("%.1f points", 100 * e->warn) : Format("%.1f%%", 100 * e->warn)) + ", fail " +
              (f.share ? Format("%.1f points", 100 * e->fail) : Format("%.1f%%", 100 * e->fail)) + ")";
  return c;
}

// A text figure (a version, the devices) against the baseline's or the last night's.
Check JudgeText(const Figure& f, const std::optional<std::pair<std::string, std::string>>& reference,
                const ValidatePolicy& policy) {
  Check c;
  c.figure = f;
  if (!reference) {
    c.message = "no reference: give --baseline or --history";
    return c;
  }
  c.source = reference->second;
  const bool same = reference->first == f.text;
  c.verdict = same ? Verdict::kPass : policy.environment_drift_fails ? Verdict::kFail : Verdict::kWarn;
  c.message = same ? "unchanged: " + (f.text.empty() ? std::string("(none)") : f.text)
                   : "changed: '" + reference->first + "' -> '" + f.text + "'";
  return c;
}

std::optional<std::pair<std::string, std::string>> TextReference(const Figure& f, const std::vector<Figure>& baseline,
                                                                 const std::string& baseline_file,
                                                                 const std::vector<HistoryEntry>& history) {
  for (const Figure& b : baseline) {
    if (b.key == f.key) return std::pair{b.text, "baseline " + baseline_file};
  }
  if (!history.empty()) {
    auto it = history.back().texts.find(f.key);
    if (it != history.back().texts.end()) return std::pair{it->second, "history: the last passing night"};
  }
  return std::nullopt;
}

}  // namespace

const char* VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass: return "pass";
    case Verdict::kWarn: return "warn";
    case Verdict::kFail: return "fail";
    case Verdict::kUnknown: return "unknown";
  }
  return "unknown";
}

std::vector<Check> ValidateReport(const Report& report, const ValidateInputs& inputs) {
  std::vector<Figure> baseline;
  if (inputs.baseline) {
    const std::string mine = RunIdentity(report), theirs = RunIdentity(*inputs.baseline);
    if (mine != theirs) {
      throw InputError("--baseline '" + inputs.baseline_file + "' is another configuration: " + theirs +
                       "; this run: " + mine);
    }
    baseline = ExtractFigures(*inputs.baseline);
  }
  const std::string gpu = GpuModelOf(report);
  std::vector<Check> checks;
  AddStatusCheck(report, checks);
  AddWrongElementChecks(report, checks);
  AddWeakLinkChecks(report, checks);
  AddStragglerChecks(report, inputs.policy, checks);
  AddGpuHealthChecks(report, checks);
  for (const Figure& f : ExtractFigures(report)) {
    if (f.is_text) {
      checks.push_back(JudgeText(f, TextReference(f, baseline, inputs.baseline_file, inputs.history), inputs.policy));
      continue;
    }
    // Later layers win: derived < policy < baseline < history.
    std::optional<Expectation> e = FromTopology(f, report, inputs.policy);
    if (auto p = FromPolicy(f, inputs.policy, gpu)) e = p;
    if (auto b = FromBaseline(f, baseline, inputs.baseline_file, inputs.policy)) e = b;
    if (auto h = FromHistory(f, inputs.history, inputs.policy)) e = h;
    checks.push_back(Judge(f, e));
  }
  std::stable_sort(checks.begin(), checks.end(),
                   [](const Check& a, const Check& b) { return a.figure.family < b.figure.family; });
  return checks;
}

Verdict OverallVerdict(const std::vector<Check>& checks) {
  Verdict overall = Verdict::kPass;
  for (const Check& c : checks) {
    if (c.verdict == Verdict::kFail) return Verdict::kFail;
    if (c.verdict != Verdict::kPass) overall = Verdict::kWarn;
  }
  return overall;
}

}  // namespace tb
