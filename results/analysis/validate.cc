#include "validate.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

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

// ---- checks judged within the run ------------------------------------------------------------------------------

std::string NameSources(const Report& report, const std::set<int>& sources, Subject& subject);

// How the run ended: anything but complete (failed, interrupted: a hang the watchdog ended, a crash) fails, with
// the report's own reason; after a timeout, the check concerns the ranks the others waited for (stuck_ranks).
void AddStatusCheck(const Report& report, std::vector<Check>& checks) {
  const std::string* status = sc::Find(&report.root, sc::root::status);
  const std::string* reason = sc::Find(&report.root, sc::root::status_reason);
  Figure f = MakeFigure("run.status", "run", "how the run ended", "", Better::kHigher, kNaN);
  if (const std::string* stuck = sc::Find(&report.root, sc::root::stuck_ranks)) {
    std::set<int> ranks;
    for (const std::string& rank : SplitItems(*stuck)) {
      if (!rank.empty()) ranks.insert(std::atoi(rank.c_str()));
    }
    if (!ranks.empty()) NameSources(report, ranks, f.subject);
  }
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

// The ranks a results table names as the sources of wrong data (every size and mode), in rank order.
std::set<int> WrongSources(const Table& results) {
  std::set<int> ranks;
  for (const std::string& mode : sc::collective::results::kModes) {
    const tb::Column* column = sc::FindColumn(results, sc::collective::results::wrong_sources, mode);
    const auto* values = column ? std::get_if<std::vector<std::string>>(&column->values) : nullptr;
    for (const std::string& list : values ? *values : std::vector<std::string>{}) {
      for (const std::string& rank : SplitItems(list)) {
        if (!rank.empty()) ranks.insert(std::atoi(rank.c_str()));
      }
    }
  }
  return ranks;
}

// Rank r's host as topology/ranks has it ("?" when the report lacks it).
std::string HostOfRank(const Report& report, int rank) {
  const Table* ranks = sc::FindTable(sc::FindGroup(report.root, sc::kTopology), sc::topology::kRanks);
  const auto* hosts = ranks ? sc::Values(*ranks, sc::topology::ranks::host) : nullptr;
  return hosts && rank >= 0 && static_cast<size_t>(rank) < hosts->size() ? (*hosts)[rank] : "?";
}

// The subject of wrong data from `sources`: the ranks and their hosts; the message's words for them.
std::string NameSources(const Report& report, const std::set<int>& sources, Subject& subject) {
  std::vector<std::string> ranks, hosts;
  for (int rank : sources) {
    ranks.push_back(std::to_string(rank));
    const std::string host = HostOfRank(report, rank);
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  subject.rank = JoinNames(ranks, ",");
  subject.host = JoinNames(hosts, ",");
  return "; the wrong data came from rank " + subject.rank + " (" + subject.host + ")";
}

// Elements that failed verification, per operation: any is a failure, whatever any expectation says. The operations
// that move data name the ranks whose data arrived wrong.
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
    Subject subject;
    const std::set<int> sources = WrongSources(*results);
    const std::string from = sources.empty() ? "" : NameSources(report, sources, subject);
    Figure f = MakeFigure("collectives." + op + ".wrong_elements", "collectives", op + " elements that failed verification",
                           "elements", Better::kLower, checked ? static_cast<double>(wrong) : kNaN, subject);
    const Verdict verdict = !checked ? Verdict::kUnknown : wrong > 0 ? Verdict::kFail : Verdict::kPass;
    checks.push_back(SelfCheck(f, 0, 0, "verification: any wrong element fails", verdict,
                               !checked ? "not verified (--check-iters 0)"
                                        : wrong ? std::to_string(wrong) + " wrong elements" + from : "every element right"));
  }
}

// p2p pairs the run itself flagged below threshold x median: one check, p2p.weak_links, on every night (its key
// never depends on the outcome, so that dashboards keep one series): the count of weak pairs, failing when any;
// the weakest pair in the subject (rank, host, gpu, link labels), every weak pair named by host and device in the
// message.
void AddWeakLinkChecks(const Report& report, std::vector<Check>& checks) {
  const Group* p2p = sc::FindGroup(report.root, sc::kP2p);
  const Table* flagged = sc::FindTable(p2p, sc::p2p::kFlagged);
  if (!flagged) return;
  namespace f = sc::p2p::flagged;
  const double overall_median = sc::Number(p2p, sc::p2p::median_uni_GBps).value_or(kNaN);
  const double threshold = sc::Number(p2p, sc::p2p::threshold_fraction).value_or(kNaN);
  const std::string source = "this run's median x threshold " + Number(threshold);
  const auto* src = sc::Values(*flagged, f::src_rank);
  const auto* dst = sc::Values(*flagged, f::dst_rank);
  const auto* src_host = sc::Values(*flagged, f::src_host);
  const auto* dst_host = sc::Values(*flagged, f::dst_host);
  const auto* src_gpu = sc::Values(*flagged, f::src_gpu);
  const auto* dst_gpu = sc::Values(*flagged, f::dst_gpu);
  const auto* uni = sc::Values(*flagged, f::uni_bw_GBps);
  const auto* class_median = sc::Values(*flagged, f::median_GBps);  // absent before link classes: the one median
  const auto* link = sc::Values(*flagged, f::link);
  if (!src || !dst || !src_host || !dst_host || !src_gpu || !dst_gpu || !uni) return;
  Subject weakest;
  double weakest_share = INFINITY;
  std::vector<std::string> named;
  for (size_t i = 0; i < src->size(); ++i) {
    const double median = class_median && i < class_median->size() ? (*class_median)[i] : overall_median;
    const std::string of = link && i < link->size() ? " of the " + (*link)[i] + "-node pairs" : "";
    const std::string pair = std::to_string((*src)[i]) + "->" + std::to_string((*dst)[i]);
    const Subject s{pair, (*src_host)[i] + "->" + (*dst_host)[i], (*src_gpu)[i] + "->" + (*dst_gpu)[i], pair};
    named.push_back(s.host + " (" + s.gpu + ", ranks " + pair + "): " + Number((*uni)[i]) + " GB/s, " +
                    Number((*uni)[i] / median * 100) + "% of the median" + of);
    if ((*uni)[i] / median < weakest_share) std::tie(weakest, weakest_share) = std::tuple{s, (*uni)[i] / median};
  }
  Figure fig = MakeFigure("p2p.weak_links", "p2p", "p2p links below the threshold", "pairs", Better::kLower,
                          static_cast<double>(src->size()), weakest);
  checks.push_back(SelfCheck(fig, 0, 0, source, named.empty() ? Verdict::kPass : Verdict::kFail,
                             named.empty() ? "no pair below the threshold"
                                           : "weak link " + JoinNames(named, "; weak link ")));
}

// Each host's inter-node link as train's link probe judged it (train/link_hosts, 3 nodes or more): a host whose
// pairs ran below the threshold x the other pairs' median fails, named by host and local rank.
void AddLinkProbeChecks(const Report& report, std::vector<Check>& checks) {
  const Group* train = sc::FindGroup(report.root, sc::kTrain);
  const Table* hosts = sc::FindTable(train, sc::train::kLinkHosts);
  namespace h = sc::train::link_hosts;
  const auto* host = hosts ? sc::Values(*hosts, h::host) : nullptr;
  const auto* local = hosts ? sc::Values(*hosts, h::local_rank) : nullptr;
  const auto* mine = hosts ? sc::Values(*hosts, h::median_GBps) : nullptr;
  const auto* others = hosts ? sc::Values(*hosts, h::others_GBps) : nullptr;
  const auto* slow = hosts ? sc::Values(*hosts, h::slow) : nullptr;
  if (!host || !local || !mine || !others || !slow) return;
  const double threshold = sc::Number(train, sc::train::link_probe_threshold).value_or(kNaN);
  const std::string source = "train's link probe: the other pairs' median x threshold " + Number(threshold);
  for (size_t i = 0; i < host->size(); ++i) {
    const std::string local_rank = std::to_string((*local)[i]);
    Subject s{"", (*host)[i], "", "local rank " + local_rank};
    Figure fig = MakeFigure("train.link." + s.host + ".l" + local_rank, "train",
                            "inter-node link of " + s.host + ", local rank " + local_rank + " (bidirectional)", "GB/s",
                            Better::kHigher, (*mine)[i], s);
    const bool is_slow = (*slow)[i] != 0;
    checks.push_back(SelfCheck(fig, threshold * (*others)[i], 1 - threshold, source,
                               is_slow ? Verdict::kFail : Verdict::kPass,
                               Number((*mine)[i]) + " GB/s, " + Number(100 * (*mine)[i] / (*others)[i]) +
                                   "% of the other pairs' " + Number((*others)[i]) + " GB/s" +
                                   (is_slow ? ": straggler host " + s.host + " (slow link)" : "")));
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

// Of two ranks, the slower one (`slower`, a row of the stall budget) may be slow, or the other fast: nothing tells
// which is off. The subject becomes both ranks, and their host only when both ran on it (in question either way);
// the words say so.
std::string NameNeitherOfTwo(const Table& budget, size_t slower, Subject& subject) {
  namespace b = sc::point::stall_budget;
  const auto& rank = *sc::Values(budget, b::rank);
  const auto& host = *sc::Values(budget, b::host);
  const auto& device = *sc::Values(budget, b::device);
  const size_t other = 1 - slower;
  subject = Subject{std::to_string(rank[other]) + "," + std::to_string(rank[slower]),
                    host[other] == host[slower] ? host[slower] : "", "", ""};
  return Format(": ranks %lld (%s, %s) and %lld (%s, %s) differ; two ranks cannot tell which of them is off (a third "
                "rank would name it)",
                static_cast<long long>(rank[other]), host[other].c_str(), device[other].c_str(),
                static_cast<long long>(rank[slower]), host[slower].c_str(), device[slower].c_str());
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
  const bool cpu = DeviceSummary(report).ends_with(" x cpu");
  const double floor = cpu ? policy.straggler_floor_cpu : policy.straggler_floor;
  const std::string source = "peers: median of the other " + std::to_string(step->size() - 1) +
                             " ranks, robust z limit " + Number(policy.straggler_z) + ", floor " +
                             Format("%g%%", 100 * floor) + (cpu ? " (CPU backend)" : "");
  for (size_t i = 0; i < step->size(); ++i) {
    const auto [median, z] = LeaveOneOut(*step, i);
    const double excess = (*step)[i] / median - 1;
    const bool straggler = z > policy.straggler_z && excess > floor;
    Subject s{std::to_string((*rank)[i]), (*host)[i], (*device)[i], ""};
    std::string verdict_words = straggler ? ": straggler on " + s.host + " (" + s.gpu + ")" : "";
    if (straggler && step->size() == 2) verdict_words = NameNeitherOfTwo(*budget, i, s);
    Figure fig = MakeFigure("train.step_s.rank" + std::to_string((*rank)[i]), "train",
                            "median step time of rank " + std::to_string((*rank)[i]), "s", Better::kLower, (*step)[i], s);
    checks.push_back(SelfCheck(fig, median, floor, source, straggler ? Verdict::kFail : Verdict::kPass,
                               Format("robust z %.2f, %+.1f%% against the others' median", z, 100 * excess) +
                                   verdict_words));
  }
}

// How each phase of a suite ended (suite/phases): a failed one fails with its reason; one the job ended during
// (still "running" in the report) fails too; an interrupted one is unknown.
void AddSuiteChecks(const Report& report, std::vector<Check>& checks) {
  const Group* suite = sc::FindGroup(report.root, sc::kSuite);
  const Table* phases = sc::FindTable(suite, sc::suite::kPhases);
  namespace p = sc::suite::phases;
  const auto* phase = phases ? sc::Values(*phases, p::phase) : nullptr;
  const auto* repeat = phases ? sc::Values(*phases, p::repeat) : nullptr;
  const auto* status = phases ? sc::Values(*phases, p::status) : nullptr;
  const auto* reason = phases ? sc::Values(*phases, p::reason) : nullptr;
  if (!phase || !repeat || !status || !reason) return;
  const int64_t repeats = sc::Number(suite, sc::suite::repeats).value_or(1);
  for (size_t i = 0; i < phase->size(); ++i) {
    const bool confirmation = (*repeat)[i] == sc::suite::kConfirmRepeat;
    const std::string key = "suite." + (*phase)[i] +
                            (confirmation ? ".confirm" : repeats > 1 ? ".r" + std::to_string((*repeat)[i]) : "");
    Figure f = MakeFigure(key, "suite", "phase " + (*phase)[i] + " of the suite", "", Better::kHigher, kNaN);
    f.is_text = true;
    f.text = (*status)[i];
    const std::string& s = (*status)[i];
    const Verdict verdict = s == "complete" ? Verdict::kPass : s == "interrupted" ? Verdict::kUnknown : Verdict::kFail;
    const std::string message = s == "complete"  ? "complete"
                                : s == "running" ? "the job ended during this phase"
                                                 : s + ((*reason)[i].empty() ? "" : ": " + (*reason)[i]);
    checks.push_back(SelfCheck(f, 0, 0, "suite/phases", verdict, message));
  }
}

// The checks a repeat judges within itself (wrong elements, weak links, stragglers), over every repeat: a check
// that fails in most repeats fails (the latest failing repeat's message); one that fails in some but not most is
// noisy (warn); one a repeat does not produce (a link it did not flag) passes there.
std::vector<Check> MergeRepeatChecks(const std::vector<std::vector<Check>>& per_repeat) {
  std::vector<Check> merged;
  std::map<std::string, size_t> index;
  std::map<std::string, size_t> fails;
  for (const std::vector<Check>& checks : per_repeat) {
    for (const Check& c : checks) {
      auto [it, fresh] = index.try_emplace(c.figure.key, merged.size());
      if (fresh) merged.push_back(c);
      if (c.verdict == Verdict::kFail) {
        ++fails[c.figure.key];
        merged[it->second] = c;
      } else if (merged[it->second].verdict != Verdict::kFail) {
        merged[it->second] = c;
      }
    }
  }
  const size_t n = per_repeat.size();
  if (n < 2) return merged;
  for (Check& c : merged) {
    const size_t failed = fails[c.figure.key];
    if (failed == 0) continue;
    c.message += Format(" (in %zu of %zu repeats)", failed, n);
    if (2 * failed <= n) {
      c.verdict = Verdict::kWarn;
      c.noisy = true;
    }
  }
  return merged;
}

// Over repeats, a figure whose spread exceeds its fail band is noisy: a pass becomes a warn, a warn or fail stays.
void MarkNoisy(Check& c, double fail_band) {
  if (c.figure.repeats < 2 || !(c.figure.spread > fail_band)) return;
  c.noisy = true;
  if (c.verdict == Verdict::kPass) c.verdict = Verdict::kWarn;
  c.message += Format("; noisy: the %d repeats spread over %s (bound %s)", c.figure.repeats,
                      c.figure.share ? Format("%.1f points", 100 * c.figure.spread).c_str()
                                     : Format("%.1f%%", 100 * c.figure.spread).c_str(),
                      c.figure.share ? Format("%.1f points", 100 * fail_band).c_str()
                                     : Format("%.1f%%", 100 * fail_band).c_str());
}

// ---- expectations --------------------------------------------------------------------------------------------

struct Expectation {
  double value;
  double warn, fail;  // bands: relative, or absolute points for a share
  std::string source;
  // History only: how far its nights' noise widened the policy's bands ("" when it did not), and whether the noise
  // is beyond the cap (too noisy to judge the figure).
  std::string widened = {};
  bool too_noisy = false;
};

std::string GpuModelOf(const Report& report) {
  const std::string devices = DeviceSummary(report);
  if (devices.ends_with(" x cpu")) return "cpu";
  const size_t x = devices.find(" x ");
  if (x == std::string::npos) return "";  // no devices in the report (no topology/ranks, or no gpu_index)
  const std::optional<GpuModel> model = MatchGpuModel(devices.substr(x + 3));
  return model ? model->name : "";
}

// The NVLink count of a link as topology/gpu_links names it ("NVLink x18", "NVLink x18 via NVSwitch"); 0 for
// anything else (PCIe links: FromPcie).
int NvlinkCount(const std::string& link, bool* via_switch) {
  if (link.rfind("NVLink x", 0) != 0) return 0;
  *via_switch = link.find("via NVSwitch") != std::string::npos;
  return std::atoi(link.c_str() + 8);
}

// GB/s per lane and direction of PCIe generation `gen` after its line encoding (8b/10b for generations 1 and 2,
// 128b/130b for 3 to 5, 242/256 FLITs for 6); 0 for a generation not listed.
double PcieLaneGBps(double gen) {
  constexpr double kGTps[] = {0, 2.5, 5, 8, 16, 32, 64};
  const int g = static_cast<int>(gen);
  if (!(gen >= 1 && gen <= 6) || g != gen) return 0;
  const double encoding = g <= 2 ? 8.0 / 10 : g <= 5 ? 128.0 / 130 : 242.0 / 256;
  return kGTps[g] * encoding / 8;
}

// Derived from gpu_health, for a run on one node whose GPU pairs are all PCIe-connected: p2p's median
// unidirectional rate = the slowest used GPU's link at its maximum generation and width x efficiency (a pair's
// copy crosses both GPUs' links). Nothing when NVML did not give every used GPU's link.
std::optional<Expectation> FromPcie(const Report& report, const ValidatePolicy& policy) {
  const Table* devices = sc::FindTable(sc::FindGroup(report.root, sc::kGpuHealth), sc::gpu_health::kDevices);
  namespace d = sc::gpu_health::devices;
  const auto* ranks = devices ? sc::Values(*devices, d::ranks) : nullptr;
  const auto* gen = devices ? sc::Values(*devices, d::pcie_gen_max) : nullptr;
  const auto* width = devices ? sc::Values(*devices, d::pcie_width_max) : nullptr;
  if (!ranks || !gen || !width) return std::nullopt;
  double slowest = INFINITY, slowest_gen = 0, slowest_width = 0;
  for (size_t i = 0; i < ranks->size(); ++i) {
    if ((*ranks)[i].empty()) continue;  // a GPU no rank used
    const double rate = PcieLaneGBps((*gen)[i]) * (*width)[i];
    if (!(rate > 0)) return std::nullopt;
    if (rate < slowest) std::tie(slowest, slowest_gen, slowest_width) = std::tuple{rate, (*gen)[i], (*width)[i]};
  }
  if (!std::isfinite(slowest)) return std::nullopt;
  return Expectation{slowest * policy.derived_efficiency, policy.warn, policy.fail,
                     Format("derived: PCIe gen%g x%g = %.3g GB/s x efficiency %g", slowest_gen, slowest_width,
                            slowest, policy.derived_efficiency)};
}

// Derived from the topology, for a run on one node: with every GPU pair NVLink-connected, p2p's median
// unidirectional rate = the pairs' median NVLink count x nvlink_GBps x efficiency, and with every pair through
// NVSwitch also all_reduce's large-message busbw, whose bound is a GPU's NVLink rate; with every pair on PCIe,
// p2p's from the links' generation and width (FromPcie). Mixed links give nothing.
std::optional<Expectation> FromTopology(const Figure& f, const Report& report, const ValidatePolicy& policy) {
  const bool p2p = f.key == "p2p.median_uni_GBps", all_reduce = f.key == "collectives.all_reduce.busbw_GBps.large";
  const int64_t* nodes = sc::Find(&report.root, sc::root::n_nodes);
  const Table* links = sc::FindTable(sc::FindGroup(report.root, sc::kTopology), sc::topology::kGpuLinks);
  const auto* link = links ? sc::Values(*links, sc::topology::gpu_links::link) : nullptr;
  if ((!p2p && !all_reduce) || !nodes || *nodes != 1 || !link || link->empty()) return std::nullopt;
  if (std::all_of(link->begin(), link->end(), [](const std::string& l) { return l.rfind("PCIe", 0) == 0; })) {
    return p2p ? FromPcie(report, policy) : std::nullopt;
  }
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

// Derived from the storage's own rates in the policy ([derived] storage_write_GBps, storage_read_MBps, measured
// by fio): the checkpoints' rate over all ranks and the loader's per-read rate expect them x efficiency.
std::optional<Expectation> FromStorage(const Figure& f, const ValidatePolicy& policy) {
  const bool write = f.key == "storage.checkpoint_total_GBps", read = f.key == "storage.loader_MBps";
  const double device = write ? policy.storage_write_GBps : read ? policy.storage_read_MBps : 0;
  if (!(device > 0)) return std::nullopt;
  return Expectation{device * policy.derived_efficiency, policy.warn, policy.fail,
                     Format(write ? "derived: storage writes %g GB/s x efficiency %g"
                                  : "derived: storage reads %g MB/s per stream x efficiency %g",
                            device, policy.derived_efficiency)};
}

// Derived from the NIC's rate in the policy ([derived] nic_GBps), for alltoall's large-message busbw over every rank
// of k > 1 nodes of m ranks each: an all-to-all does not aggregate a node's NICs (nccl-tests issue 267), so each rank's
// share that crosses nodes, (n - m)/n of its buffer, moves at most at its NIC's rate B while the part inside the node
// goes over NVLink at the same time; busbw = S/t x (n-1)/n is then at most B x (n-1)/(n-m) (which is why such a busbw
// can read a little above the NIC's rate). Expects that x efficiency.
std::optional<Expectation> FromNic(const Figure& f, const Report& report, const ValidatePolicy& policy) {
  if (f.key != "collectives.alltoall.busbw_GBps.large" || !(policy.nic_GBps > 0)) return std::nullopt;
  for (const auto& [op, group] : sc::Instances(report.root, sc::kCollective)) {
    if (op != "alltoall") continue;
    const int64_t* ranks = sc::Find(group, sc::collective::n_ranks);
    const int64_t* nodes = sc::Find(group, sc::collective::nodes);
    if (!ranks || !nodes || *nodes < 2 || *ranks % *nodes != 0) return std::nullopt;
    const double n = static_cast<double>(*ranks), m = n / static_cast<double>(*nodes);
    return Expectation{policy.nic_GBps * (n - 1) / (n - m) * policy.derived_efficiency, policy.warn, policy.fail,
                       Format("derived: one NIC's rate %g GB/s x (n-1)/(n-m) = %g/%g x efficiency %g (an alltoall "
                              "across nodes does not aggregate a node's NICs)",
                              policy.nic_GBps, n - 1, n - m, policy.derived_efficiency)};
  }
  return std::nullopt;
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

// The median of the nights, with the policy's bands widened by the nights' noise (sigma = 1.4826 MAD): warn to
// 2 sigma but never past the policy's fail band (a drop beyond it is never a pass), fail to 3 sigma but at most
// history_max_widening x the policy's fail band (a larger drop fails however noisy the nights); nights whose
// 3 sigma exceeds that cap are too noisy to judge the figure.
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
  const double cap = policy.history_max_widening * policy_fail;
  Expectation e{median, std::min(std::max(policy_warn, 2 * spread), policy_fail),
                std::min(std::max(policy_fail, 3 * spread), cap),
                Format("history: median of %zu passing nights, MAD %.3g", values.size(), sigma / 1.4826)};
  const std::string in = f.share ? Format("%.1f points", 100 * spread) : Format("%.1f%%", 100 * spread);
  e.too_noisy = 3 * spread > cap;
  if (e.too_noisy) {
    e.widened = "history too noisy to judge this figure: its nights vary by sigma " + in +
                (f.share ? Format(" (3 sigma over the cap of %.1f points", 100 * cap)
                         : Format(" (3 sigma over the cap of %.1f%%", 100 * cap)) +
                Format(", %g x the policy's fail band)", policy.history_max_widening);
  } else if (e.fail > policy_fail) {
    e.widened = "fail band widened by the nights' noise (sigma " + in + ")";
  }
  return e;
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
  if (!e->widened.empty()) c.message += "; " + e->widened;
  if (e->too_noisy && c.verdict == Verdict::kPass) {
    c.verdict = Verdict::kWarn;
    c.noisy = true;
  }
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

// A failing figure of a phase the suite measured again in the same launch (ConfirmationOf) fails only when the
// confirmation fails too; else it warns, as a transient. A failing figure whose phase was not measured again says
// why it stands unconfirmed.
void ApplyConfirmation(const Report& report, const ValidateInputs& inputs, std::vector<Check>& checks) {
  const std::optional<Report> again = ConfirmationOf(report);
  if (!again) return;
  const std::set<std::string> phases = ConfirmedPhases(report);
  std::map<std::string, const Check*> confirmed;
  const std::vector<Check> second = ValidateReport(*again, inputs);
  for (const Check& c : second) confirmed.emplace(c.figure.key, &c);
  for (Check& c : checks) {
    const std::string phase = PhaseOfFamily(c.figure.family);
    if (c.verdict != Verdict::kFail || phase.empty()) continue;
    auto it = confirmed.find(c.figure.key);
    if (!phases.contains(phase) || it == confirmed.end()) {
      c.message += "; not measured again (no time left within --confirm-within, or the phase failed)";
    } else if (it->second->verdict == Verdict::kFail) {
      c.message += "; confirmed: measured again in the same launch, it fails too (" + it->second->message + ")";
    } else {
      c.verdict = Verdict::kWarn;
      c.noisy = true;
      c.message += std::string("; not confirmed: measured again in the same launch, ") +
                   VerdictName(it->second->verdict) + " (" + it->second->message + "): a transient, not a failure";
    }
  }
}

// A baseline is a known-good run: one that completed, and measured the system rather than faults injected on
// purpose. Anything else is bad input.
void CheckKnownGood(const Report& baseline, const std::string& file) {
  const std::string* status = sc::Find(&baseline.root, sc::root::status);
  const std::string* reason = sc::Find(&baseline.root, sc::root::status_reason);
  if (!status || *status != "complete") {
    throw InputError("--baseline '" + file + "' is no known-good run: its status is " +
                     (status ? *status : std::string("missing")) +
                     (reason && !reason->empty() ? " (" + *reason + ")" : std::string()) +
                     " (give a complete run)");
  }
  const std::string* injected = sc::Find(&baseline.root, sc::root::injected_faults);
  if (injected && !injected->empty()) {
    throw InputError("--baseline '" + file + "' is no known-good run: it injected faults on purpose (--inject " +
                     *injected + ")");
  }
}

}  // namespace

std::string PhaseOfFamily(const std::string& family) {
  if (family == "collectives" || family == "p2p" || family == "train") return family;
  return family == "storage" ? "train" : "";
}

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
    CheckKnownGood(*inputs.baseline, inputs.baseline_file);
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
  AddSuiteChecks(report, checks);
  std::vector<Report> repeats = EarlierRepeats(report);
  std::vector<std::vector<Check>> per_repeat;
  for (size_t i = 0; i <= repeats.size(); ++i) {
    const Report& r = i < repeats.size() ? repeats[i] : report;
    std::vector<Check>& own = per_repeat.emplace_back();
    AddWrongElementChecks(r, own);
    AddWeakLinkChecks(r, own);
    AddStragglerChecks(r, inputs.policy, own);
    AddLinkProbeChecks(r, own);
  }
  repeats.clear();
  for (Check& c : MergeRepeatChecks(per_repeat)) checks.push_back(std::move(c));
  AddGpuHealthChecks(report, checks);
  AddPlacementCheck(report, checks);
  for (const Figure& f : ExtractFigures(report)) {
    if (f.is_text) {
      checks.push_back(JudgeText(f, TextReference(f, baseline, inputs.baseline_file, inputs.history), inputs.policy));
      continue;
    }
    // Later layers win: derived < policy < baseline < history.
    std::optional<Expectation> e = FromTopology(f, report, inputs.policy);
    if (auto d = FromStorage(f, inputs.policy)) e = d;
    if (auto d = FromNic(f, report, inputs.policy)) e = d;
    if (auto p = FromPolicy(f, inputs.policy, gpu)) e = p;
    if (auto b = FromBaseline(f, baseline, inputs.baseline_file, inputs.policy)) e = b;
    if (auto h = FromHistory(f, inputs.history, inputs.policy)) e = h;
    checks.push_back(Judge(f, e));
    MarkNoisy(checks.back(), e ? e->fail : Bands(f, inputs.policy).second);
  }
  ApplyConfirmation(report, inputs, checks);
  std::stable_sort(checks.begin(), checks.end(),
                   [](const Check& a, const Check& b) { return a.figure.family < b.figure.family; });
  return checks;
}

const char* CheckState(const Check& check) {
  if (check.noisy) return "noisy";
  switch (check.verdict) {
    case Verdict::kPass: return "ok";
    case Verdict::kWarn:
    case Verdict::kFail: return "degraded";
    case Verdict::kUnknown: return "missing";
  }
  return "missing";
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
