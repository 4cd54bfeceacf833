// `trainbench report`: one or more HDF5 reports as tables — side by side, or exported as CSV or JSON — and, with
// --html, as a page of plots, and with --trace/--trace-dir, one run's training steps as a timeline (Chrome trace-event
// JSON). Reads files only; under mpirun every rank checks the input and rank 0 prints and writes.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli.h"
#include "commands.h"
#include "durable_file.h"
#include "error.h"
#include "html_report.h"
#include "log.h"
#include "report.h"
#include "report_view.h"
#include "reporter.h"
#include "trace_export.h"
#include "units.h"

namespace tb {
namespace {

std::string Usage() {
  std::string sections;
  for (const std::string& name : ReportSectionNames()) sections += (sections.empty() ? "" : ", ") + name;
  return "usage: trainbench report REPORT.h5 [REPORT.h5 ...] [--format text|csv|json] [--sections LIST] [--html FILE]\n"
         "       trainbench report RUN.h5 [--trace FILE.json] [--trace-dir DIR] [--trace-point POINT]\n"
         "Shows reports written by trainbench (-o): per run the config, topology, collectives, flagged p2p pairs,\n"
         "training per scaling point with the stall budget per rank, I/O, and GPU health and energy (NVML). Several\n"
         "runs: headline figures side by side (a column per run), detail tables run by run. Writes to standard\n"
         "output (redirect it to keep it). Text tables fit 120 characters: their headline columns, a '#' line naming\n"
         "the rest, which --all-columns shows (as --format csv|json always does).\n"
         "--trace writes one run's training steps as Chrome trace-event JSON for Perfetto and chrome://tracing: a\n"
         "process per rank (host:rank:device), a track per phase, a slice per step (ProfilerStep#N) and per phase;\n"
         "--trace-dir writes one such file per rank (rankR.json, with distributedInfo) for Holistic Trace Analysis.\n"
         "The largest training point by default (--trace-point k1 picks another). The report holds durations, not\n"
         "start times: each rank's steps are laid end to end from 0, its phases one after another in loop order\n"
         "(layout: results/README.md, \"Timeline\").\n"
         "Sections (--sections, comma-separated; all by default): " +
         sections;
}

struct ReportFlags {
  std::vector<std::string> files;
  std::string format = "text";
  std::string sections;
  bool sections_given = false;
  std::string html;
  bool require_comparable = false;
  bool all_columns = false;
  std::optional<std::string> trace, trace_dir;  // set when given (an empty path is refused, not ignored)
  std::string trace_point;
};

// The report goes to standard output; an -o/--output here would most likely be a mistyped redirection.
void RejectOutputFlag(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--") return;
    if (arg == "-o" || arg.rfind("--output", 0) == 0 || (arg.rfind("-o", 0) == 0 && arg.size() > 2)) {
      throw InputError("'trainbench report' has no " + arg.substr(0, arg.rfind("--", 0) == 0 ? 8 : 2) +
                       ": it writes to standard output (redirect it: > run.json), and --html FILE writes the plots");
    }
  }
}

std::vector<std::string> ParseSections(const ReportFlags& f) {
  const std::vector<std::string>& known = ReportSectionNames();
  if (!f.sections_given) return known;
  std::vector<std::string> chosen;
  for (const std::string& name : SplitFlagList(f.sections, "--sections")) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw InputError("unknown section '" + name + "' for --sections (accepted: " + JoinNames(known, ", ") + ")");
    }
    chosen.push_back(name);
  }
  return chosen;
}

// Parses the flags; false when --help was given (and printed).
bool ParseReportFlags(const std::vector<std::string>& args, ReportFlags& f) {
  po::options_description options("report options");
  options.add_options()
      ("format", Choice(&f.format, ReportFormatNames())->default_value(f.format), "layouts in results/README.md")
      ("sections", po::value(&f.sections), "comma-separated sections to show (all by default)")
      ("html", po::value(&f.html), "also write a self-contained HTML page of plots to this file")
      ("all-columns", po::bool_switch(&f.all_columns), "text: every column of every table, however wide")
      ("require-comparable", po::bool_switch(&f.require_comparable),
       "exit 2 when the runs differ in a variable a fair comparison holds fixed (model, data, versions, batch shape, "
       "steps, ...)")
      ("trace", po::value<std::string>(), "also write the run's training steps as Chrome trace-event JSON to this file")
      ("trace-dir", po::value<std::string>(), "also write one trace per rank (rankR.json) to this directory, for HTA")
      ("trace-point", po::value(&f.trace_point), "the training point to trace: k1, k2, ... (the largest)")
      ("help,h", "show this help");
  RejectOutputFlag(args);
  po::variables_map given;
  ParseSpec spec;
  spec.positional = "file";
  spec.positional_target = &f.files;
  spec.given = &given;
  if (!ParseCommandLine("report", args, options, Usage(), spec)) return false;
  f.sections_given = given.count("sections") > 0;
  if (given.count("trace")) f.trace = given["trace"].as<std::string>();
  if (given.count("trace-dir")) f.trace_dir = given["trace-dir"].as<std::string>();
  if (f.files.empty()) throw InputError("no report files given (usage: trainbench report A.h5 [B.h5 ...])");
  if (given.count("trace-point") && !f.trace && !f.trace_dir) {
    throw InputError("--trace-point goes with --trace or --trace-dir (not given)");
  }
  if ((f.trace || f.trace_dir) && f.files.size() != 1) {
    throw InputError("--trace and --trace-dir export one report's steps (" + std::to_string(f.files.size()) +
                     " reports given)");
  }
  return true;
}

std::string TraceFilePath(const std::string& dir, int64_t rank) {
  return (std::filesystem::path(dir) / RankTraceFileName(rank)).string();
}

// The --trace file's path, before any report is read: not an input, in a directory that takes a new file.
void CheckTraceFile(const ReportFlags& f) {
  if (!f.trace) return;
  CheckOutputPath(*f.trace, "--trace", f.files);
}

// The --trace-dir files of `point`: the directory holds no other traces, takes new files (or can be made), and no
// file is the input.
void CheckTraceDirOutputs(const ReportFlags& f, const TracedPoint& point) {
  if (!f.trace_dir) return;
  const std::string& dir = *f.trace_dir;
  CheckTraceDirectory(dir, "--trace-dir", point);
  if (!std::filesystem::is_directory(dir)) {  // made when written: its parent must take it
    CheckOutputPath(dir, "--trace-dir", f.files);
    return;
  }
  for (int64_t rank : point.ranks) CheckOutputPath(TraceFilePath(dir, rank), "--trace-dir", f.files);
}

// Writes the traces asked for, each file atomically; returns the lines saying where they went.
std::string WriteTraces(const ReportFlags& f, const Report& report, const TracedPoint& point) {
  const std::string& file = f.files.front();
  const std::string what = "training point " + point.name + ": " + std::to_string(point.ranks.size()) + " ranks x " +
                           std::to_string(point.steps) + " steps, laid end to end";
  std::string lines;
  if (f.trace) {
    const std::string text = TraceText(PointTrace(report, file, point));
    ReplaceFileDurably(*f.trace, text.data(), text.size());
    lines += "# trace: " + *f.trace + " (" + what + ")\n";
  }
  if (f.trace_dir) {
    std::error_code error;
    std::filesystem::create_directory(*f.trace_dir, error);
    if (error) throw RuntimeError("cannot create --trace-dir '" + *f.trace_dir + "': " + error.message());
    const std::vector<Json> traces = PointTracesPerRank(report, file, point);
    for (size_t i = 0; i < traces.size(); ++i) {
      const std::string text = TraceText(traces[i]);
      ReplaceFileDurably(TraceFilePath(*f.trace_dir, point.ranks[i]), text.data(), text.size());
    }
    lines += "# traces per rank: " + TraceFilePath(*f.trace_dir, point.ranks.front()) + " ... (" + what + ")\n";
  }
  return lines;
}

}  // namespace

int RunReportCommand(const CommandInput& input) {
  ReportFlags f;
  bool help = false;
  std::vector<Report> reports;
  std::vector<RunView> runs;
  std::optional<TracedPoint> traced;
  ReportContextInfo context{"report", {}};
  context.left_out_hint = "--all-columns, or --format csv|json";
  // Every rank checks the same input, so that a bad file ends the job with one line whatever the launch.
  AgreeOnSetup([&] {
    help = !ParseReportFlags(input.args, f);
    if (help) return;
    context.files = f.files;
    context.all_columns = f.all_columns;
    const std::vector<std::string> sections = ParseSections(f);
    if (!f.html.empty()) CheckOutputPath(f.html, "--html", f.files);
    CheckTraceFile(f);
    for (const std::string& file : f.files) {
      reports.push_back(ReadReport(file));
      runs.push_back(ViewReport(reports.back(), file, sections));
    }
    context.comparison = CompareReports(reports, f.files, f.require_comparable);
    if (f.trace || f.trace_dir) {
      traced = ChooseTracePoint(reports.front(), f.files.front(), f.trace_point);
      CheckTraceDirOutputs(f, *traced);
    }
  });
  if (help || input.ctx.world_rank != 0) return 0;

  std::string text = ReportViews(f.format, context, runs);
  if (traced) {
    const std::string lines = WriteTraces(f, reports.front(), *traced);
    if (f.format == "text") text += "\n" + lines;
  }
  if (!f.html.empty()) {
    WriteHtmlReport(f.files, f.html, context.comparison ? ReportViews("json", context, {}) : "");
    if (f.format == "text") text += "\n# HTML report: " + f.html + "\n";
  }
  std::cout << text << std::flush;
  return 0;
}

}  // namespace tb
