// `trainbench validate RUN.h5`: the run's checks and verdict against a policy, a baseline report and the history
// of passing nights; text on standard output, JSON, JUnit XML and a Prometheus textfile on request; exit 3 on a
// regression. Reads files only; under mpirun every rank checks the input and rank 0 writes.
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "commands.h"
#include "durable_file.h"
#include "error.h"
#include "log.h"
#include "paths.h"
#include "reporter.h"
#include "validate.h"
#include "validate_outputs.h"

namespace tb {
namespace {

constexpr const char* kUsage =
    "usage: trainbench validate RUN.h5 [--baseline B.h5] [--history DIR] [--policy P.toml] [--json F] [--junit F]\n"
    "                           [--prometheus F] [--strict] [--record-anyway] [--history-keep N]\n"
    "Checks the run's key figures (collectives busbw per size band and verification, p2p weak links, training\n"
    "throughput, MFU, stragglers and stall shares, storage rates, environment drift) against expectations layered\n"
    "policy < baseline < history; prints each check and the verdict. Exit 0 pass (warnings and unknowns allowed\n"
    "unless --strict), 3 regression, 1 error, 2 bad input. Definitions in results/README.md (\"Validation\").";

struct ValidateFlags {
  std::vector<std::string> files;
  ExpectationFiles expectations;  // --policy, --baseline, --history
  std::string json, junit, prometheus;
  bool strict = false;
  bool record_anyway = false;
  int history_keep = 30;
};

bool ParseValidateFlags(const std::vector<std::string>& args, ValidateFlags& f) {
  po::options_description options("validate options");
  options.add_options()
      ("baseline", po::value(&f.expectations.baseline), "a known-good report of the same configuration to compare with")
      ("history", po::value(&f.expectations.history), "directory of nights: expectations from the passing ones; tonight added (a regression: for cost's failure rate only)")
      ("policy", po::value(&f.expectations.policy), "policy file (TOML): tolerances, straggler rule, thresholds per GPU model")
      ("json", po::value(&f.json), "also write the checks as JSON (report's export layout) to this file")
      ("junit", po::value(&f.junit), "also write JUnit XML (a testsuite per check family) to this file")
      ("prometheus", po::value(&f.prometheus), "also write a Prometheus textfile (node_exporter) to this file")
      ("strict", po::bool_switch(&f.strict), "exit 3 on warnings and unknown checks too")
      ("record-anyway", po::bool_switch(&f.record_anyway), "count tonight in --history's expectation even when it failed")
      ("history-keep", Number(&f.history_keep, IntRange::Between(1, 100000))->default_value(f.history_keep),
       "nights of this configuration --history keeps")
      ("help,h", "show this help");
  ParseSpec spec;
  spec.positional = "file";
  spec.positional_target = &f.files;
  spec.rules = {Needs("record-anyway", "history"), Needs("history-keep", "history")};
  if (!ParseCommandLine("validate", args, options, kUsage, spec)) return false;
  if (f.files.size() != 1) {
    throw InputError(std::string(f.files.empty() ? "no report given" : "one report at a time") +
                     " (usage: trainbench validate RUN.h5 [--baseline B.h5] [--history DIR])");
  }
  return true;
}

struct ValidateRun {
  Report report;
  ValidateInputs inputs;
};

// Everything read and checked before anything is written (every rank; agreed).
ValidateRun ReadInputs(const ValidateFlags& f) {
  ValidateRun run;
  run.report = ReadReport(f.files.front());
  run.inputs = ReadValidateInputs(run.report, f.expectations);
  std::vector<std::string> inputs = f.expectations.Given();
  inputs.insert(inputs.begin(), f.files.front());
  for (const auto& [path, flag] : {std::pair{f.json, "--json"}, {f.junit, "--junit"}, {f.prometheus, "--prometheus"}}) {
    if (!path.empty()) CheckOutputPath(path, flag, inputs, {HistoryDirectory(f.expectations.history)});
  }
  return run;
}

void WriteOutput(const std::string& path, const std::string& text) { ReplaceFileDurably(path, text.data(), text.size()); }

}  // namespace

int RunValidateCommand(const CommandInput& input) {
  ValidateFlags f;
  bool help = false;
  ValidateRun run;
  std::vector<Check> checks;
  AgreeOnSetup([&] {
    help = !ParseValidateFlags(input.args, f);
    if (help) return;
    run = ReadInputs(f);
    checks = ValidateReport(run.report, run.inputs);
  });
  if (help || input.ctx.world_rank != 0) return 0;

  const std::string& file = f.files.front();
  const RunView view = ValidateView(file, run.report, checks);
  std::cout << ReportViews("text", {"validate", {file}}, {view}) << std::flush;
  if (!f.json.empty()) WriteOutput(f.json, ReportViews("json", {"validate", {file}}, {view}));
  if (!f.junit.empty()) WriteOutput(f.junit, JunitXml(run.report, checks));
  if (!f.prometheus.empty()) WriteOutput(f.prometheus, PrometheusText(run.report, checks));
  const Verdict verdict = OverallVerdict(checks);
  const bool regression = verdict == Verdict::kFail || (f.strict && verdict != Verdict::kPass);
  if (const std::string& history = f.expectations.history; !history.empty()) {
    // Every night is kept, for the failure rate (cost --history); only passing ones (or --record-anyway) become
    // the expectation of the nights that follow.
    const bool counted = !regression || f.record_anyway;
    const std::string entry =
        AddToHistory(history, run.report, file, ExtractFigures(run.report), f.history_keep, counted);
    Print(entry.empty() ? "# history: this run is already in " + history
                        : "# history: added " + entry + " (" + std::to_string(run.inputs.history.size()) +
                              " earlier nights of this configuration)" +
                              (counted ? "" : "; a regression: kept for the failure rate, not for the expectation"),
          true);
  }
  Print(std::string("# verdict: ") + VerdictName(verdict) + (regression ? " (exit 3)" : ""), true);
  return static_cast<int>(regression ? ExitCode::kRegression : ExitCode::kOk);
}

}  // namespace tb
