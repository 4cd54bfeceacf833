// `trainbench validate`: a report's key figures turned into checks with verdicts. Each check carries the measured
// value, the expected value, the tolerance, where the expectation came from and the rank, host, GPU or link it
// concerns. Expectations are layered, later wins: derived from the topology (NVLink count x rate x a stated
// efficiency) < the policy file's thresholds per GPU model < a baseline report < history (the rolling median and
// MAD of the last passing nights). Definitions: results/README.md ("Validation").
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "report.h"

namespace tb {

enum class Verdict { kPass, kWarn, kFail, kUnknown };
const char* VerdictName(Verdict verdict);  // "pass", "warn", "fail", "unknown"

// Which way a figure is good.
enum class Better { kHigher, kLower };

// The thing a check concerns; empty fields do not apply.
struct Subject {
  std::string rank, host, gpu, link;
};

// One key figure of a run, as validate reads it out of a report. `key` is stable across runs (history and
// baselines match on it): "collectives.all_reduce.busbw_GBps.large", "train.tokens_per_s", "p2p.median_uni_GBps".
struct Figure {
  std::string key;
  std::string family;  // run, collectives, p2p, train, storage, environment, gpu_health
  std::string title;   // "all_reduce busbw, sizes >= 16 MiB"
  std::string unit;    // "GB/s", "tokens/s", "fraction", "" for text
  Better better = Better::kHigher;
  bool share = false;  // a share of step time (0..1): tolerances are absolute points, not relative
  double value = 0;    // NaN: the report lacks it (the check is unknown)
  bool is_text = false;  // compared as `text` (environment figures, the run's status), not as a number
  std::string text;
  Subject subject;
  int repeats = 1;      // suite --repeats: the repeats that measured it; value is their median
  double spread = 0;    // over the repeats: (max - min) / |median|, or max - min in points for a share
};

// The figures of `report`; every one validate checks. A report of several repeats (suite --repeats) gives each
// figure's median over the repeats, with its spread.
std::vector<Figure> ExtractFigures(const Report& report);

// The earlier repeats of a suite report (suite --repeats; its root holds the latest), oldest first: each a copy of
// the report with that repeat's groups (repeats/r<r>) in place of the latest's. Empty for a report of one repeat.
std::vector<Report> EarlierRepeats(const Report& report);

// The confirmation of a suite report (suite --confirm-within: the phases whose figures failed, measured again in the
// same launch, in confirm/): a copy of the report with confirm/'s groups in place of the root's; nullopt without.
std::optional<Report> ConfirmationOf(const Report& report);
// The phases the confirmation measured again and completed (suite/phases rows of repeat kConfirmRepeat).
std::set<std::string> ConfirmedPhases(const Report& report);
// The suite phase that measures a figure of `family` ("collectives", "p2p", "train" for train and storage); "" for
// the families no phase measures again (run, suite, environment, gpu_health).
std::string PhaseOfFamily(const std::string& family);

// What validate judges by, from --policy (defaults otherwise).
struct ValidatePolicy {
  std::string file;           // "" for the defaults
  double warn = 0.05;         // relative shortfall of a rate (or excess of a time) that warns
  double fail = 0.10;         // ... that fails
  double share_warn = 0.02;   // absolute excess of a share of step time that warns
  double share_fail = 0.05;   // ... that fails
  double straggler_z = 3.5;   // robust z (0.6745 (x - median) / MAD) above which a rank is a straggler ...
  double straggler_floor = 0.05;  // ... when also this much slower than the others' median (0.05 = 5%)
  // ... on the CPU backend, whose ranks share a host's cores with each other and the loader's threads: differences
  // of 20% between ranks are normal there, so only a far slower rank is a straggler.
  double straggler_floor_cpu = 0.5;
  int history_nights = 14;    // the last N passing nights
  int history_min_nights = 3; // fewer give no expectation
  // History widens the policy's bands where the nights vary (2 and 3 sigma), but its fail band at most to this many
  // times the policy's: a figure whose nights vary more than that is too noisy to judge (a warn saying so, never a
  // pass), and a drop beyond the capped band fails however noisy the nights were.
  double history_max_widening = 2.5;
  bool environment_drift_fails = false;  // a changed driver/CUDA/NCCL/MPI version fails instead of warning
  // Expectations derived from the topology (the lowest layer): each NVLink's rate per direction, and the share of
  // it a healthy run reaches.
  double nvlink_GBps = 25;         // NVLink 3 and 4: 25 GB/s per link and direction
  double derived_efficiency = 0.8;
  // The storage's own rates, as measured by fio on the file systems the run uses (0: not given): a sequential
  // write with fsync in as many files as ranks (storage.checkpoint_total_GBps expects it x efficiency), and one
  // job's random reads of the loader's record size (storage.loader_MBps expects it x efficiency).
  double storage_write_GBps = 0;
  double storage_read_MBps = 0;
  // The rate of the NIC each rank sends through across nodes, per direction (0: not given; 400G NDR: about 48 GB/s
  // measured): an alltoall over k > 1 nodes runs at one NIC's rate, whatever the node's NICs together could carry.
  double nic_GBps = 0;
  // Thresholds per GPU model (the model names cost's price files use: "H100 SXM"): figure key -> expected value.
  std::map<std::string, std::map<std::string, double>> gpu_thresholds;
};

// Reads a policy file (TOML; keys in results/README.md, "Validation"); InputError naming the file, line and key
// for a syntax error, an unknown key or a bad value.
ValidatePolicy ReadValidatePolicy(const std::string& path);
ValidatePolicy ParseValidatePolicy(const std::string& text, const std::string& file);
// The figure keys a policy's [gpu."MODEL"] table may set, for its errors and the docs.
std::vector<std::string> PolicyFigureKeys();

// One passing night as history keeps it: its identity and its figures' values.
struct HistoryEntry {
  std::string file;        // where it was read from
  std::string run;         // the report it summarises
  std::string start_utc;
  std::string identity;    // what must match for nights to be compared (RunIdentity)
  std::string run_key;     // RunKey of the report ("" in entries from before it)
  std::map<std::string, double> values;
  std::map<std::string, std::string> texts;
  // Every validated night is kept (issue 15): `counted` ones (passing, or --record-anyway) are the expectation of
  // the nights that follow; all of them give the failure rate (cost --history). Entries from before these fields:
  // counted, status complete, node_hours unknown.
  bool counted = true;
  std::string status = "complete";  // the report's: complete, interrupted, failed
  double node_hours = NAN;          // nodes x (end_utc - start_utc) / 3600
};

// Failed and interrupted runs per node-hour over every entry of a history directory with its node-hours known.
struct FailureHistory {
  std::string dir;
  int runs = 0;              // entries with node_hours
  int failures = 0;          // of them, status failed or interrupted
  double node_hours = 0;
  // A rate is measured once at least this many failures are seen (Poisson: relative error 1/sqrt(n), 58% at 3).
  static constexpr int kMinFailures = 3;
  bool measured() const { return failures >= kMinFailures && node_hours > 0; }
  double mtbf_node_hours() const { return failures > 0 ? node_hours / failures : INFINITY; }
};
FailureHistory ReadFailureHistory(const std::string& dir);

// Seconds since the epoch of an ISO 8601 UTC time as the reports write it ("2026-12-01T17:35:00Z"); nullopt for
// anything else.
std::optional<double> UtcSeconds(const std::string& utc);

// What a run must share with a baseline or a night of history to be compared with it: the command, the model
// and its shape, a suite's profile, the GPU model and count, the ranks and nodes ("train gpt2-124m x12, 8 x NVIDIA
// H100, 8 ranks on 1 node(s)", "suite tiny x2 profile quick, 2 x cpu, 2 ranks on 1 node(s)").
std::string RunIdentity(const Report& report);

struct Check {
  Figure figure;
  std::optional<double> expected;
  double tolerance = 0;     // relative (or absolute points for a share) band before a fail
  std::string source;       // "policy (p.toml, H100 SXM)", "baseline base.h5", "history (9 nights)", "peers", ...
  Verdict verdict = Verdict::kUnknown;
  std::string message;      // one line for people
  // Over repeats: the spread exceeds the check's fail band (or the check flagged some repeats but not most), so
  // the figure is not steady enough to judge; distinct from degraded (a steady figure on the bad side).
  bool noisy = false;
};

// "ok" (pass), "degraded" (warn or fail on its value), "noisy" (see Check::noisy), "missing" (unknown).
const char* CheckState(const Check& check);

struct ValidateInputs {
  ValidatePolicy policy;
  std::optional<Report> baseline;
  std::string baseline_file;
  std::vector<HistoryEntry> history;  // this run's identity only, oldest first
};

// The files validate judges by: --policy, --baseline, --history ("" when not given).
struct ExpectationFiles {
  std::string policy, baseline, history;
  // The ones given: the files a run reads for its expectations (its outputs must be none of them).
  std::vector<std::string> Given() const;
};
// Reads them for `report`: the policy, the baseline report, and the history directory's counted nights of the
// report's configuration, without the report itself (when it was validated before), the last policy.history_nights.
// InputError for any bad file.
ValidateInputs ReadValidateInputs(const Report& report, const ExpectationFiles& files);

// The checks of `report`. Throws InputError when the baseline is another configuration (RunIdentity differs), or
// no known-good run (not complete, or with faults injected on purpose).
std::vector<Check> ValidateReport(const Report& report, const ValidateInputs& inputs);

// Median of `values` (the mean of the middle two for an even count); NaN when empty.
double Median(std::vector<double> values);

// The run's verdict: fail when any check fails; warn when any warns or is unknown; else pass.
Verdict OverallVerdict(const std::vector<Check>& checks);

// ---- history directories ----------------------------------------------------------------------------------------

// Reads every entry of `dir` (files `*.json` written by AddToHistory). A file that is not one (another name, not
// JSON, another format) is bad input: InputError naming it. Missing directory: InputError.
std::vector<HistoryEntry> ReadHistory(const std::string& dir);
// The counted entries with `identity`, oldest first, at most the last `nights`.
std::vector<HistoryEntry> HistoryOf(const std::vector<HistoryEntry>& all, const std::string& identity, int nights);
// What tells this run apart from every other: the report's run_id; for a report from before run_id, "digest-" and
// 16 hex digits of a hash of its command line, start, end, status, identity and figures.
std::string RunKey(const Report& report);
// Whether `entry` is the history entry of `report` (the same run key; an entry from before run keys: the same
// identity and start).
bool IsEntryOf(const HistoryEntry& entry, const Report& report);
// Writes tonight's entry into `dir` (durably): counted (it joins the expectation) or not (a regression: kept for the
// failure rate only), with its status and node-hours; removes the oldest entries of the same identity and kind
// beyond `keep`. The file is `<start>-<run key>.json`, created exclusively: safe beside concurrent validates of the
// same directory (none lost, none doubled, a concurrent prune tolerated). Returns the file written, or "" when the
// directory already holds this run (IsEntryOf): a night counts once however often it is validated.
std::string AddToHistory(const std::string& dir, const Report& report, const std::string& run_file,
                         const std::vector<Figure>& figures, int keep, bool counted = true);

}  // namespace tb
