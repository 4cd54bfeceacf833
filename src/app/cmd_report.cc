// `trainbench report`: one or more HDF5 reports as tables — side by side, or exported as CSV or JSON — and, with
// --html, as a page of plots. Reads files only; under mpirun every rank checks the input and rank 0 prints.
#include <algorithm>
#include <iostream>
#include <sstream>

#include "cli.h"
#include "commands.h"
#include "error.h"
#include "html_report.h"
#include "log.h"
#include "report.h"
#include "report_view.h"
#include "reporter.h"
#include "units.h"

namespace tb {
namespace {

std::string Usage() {
  std::string sections;
  for (const std::string& name : ReportSectionNames()) sections += (sections.empty() ? "" : ", ") + name;
  return "usage: trainbench report REPORT.h5 [REPORT.h5 ...] [--format text|csv|json] [--sections LIST] [--html FILE]\n"
         "Shows reports written by trainbench (-o): per run the config, topology, collectives, flagged p2p pairs,\n"
         "training per scaling point with the stall budget per rank, I/O, and GPU health and energy (NVML). Several\n"
         "runs: headline figures side by side (a column per run), detail tables run by run. Writes to standard\n"
         "output (redirect it to keep it).\n"
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
      ("require-comparable", po::bool_switch(&f.require_comparable),
       "exit 2 when the runs differ in a variable a fair comparison holds fixed (model, data, versions, batch shape, "
       "steps, ...)")
      ("help,h", "show this help");
  RejectOutputFlag(args);
  po::variables_map given;
  ParseSpec spec;
  spec.positional = "file";
  spec.positional_target = &f.files;
  spec.given = &given;
  if (!ParseCommandLine("report", args, options, Usage(), spec)) return false;
  f.sections_given = given.count("sections") > 0;
  if (f.files.empty()) throw InputError("no report files given (usage: trainbench report A.h5 [B.h5 ...])");
  return true;
}

}  // namespace

int RunReportCommand(const CommandInput& input) {
  ReportFlags f;
  bool help = false;
  std::vector<RunView> runs;
  ReportContextInfo context{"report", {}};
  // Every rank checks the same input, so that a bad file ends the job with one line whatever the launch.
  AgreeOnSetup([&] {
    help = !ParseReportFlags(input.args, f);
    if (help) return;
    context.files = f.files;
    const std::vector<std::string> sections = ParseSections(f);
    if (!f.html.empty()) CheckOutputPath(f.html, "--html", f.files);
    std::vector<Report> reports;
    for (const std::string& file : f.files) {
      reports.push_back(ReadReport(file));
      runs.push_back(ViewReport(reports.back(), file, sections));
    }
    context.comparison = CompareReports(reports, f.files, f.require_comparable);
  });
  if (help || input.ctx.world_rank != 0) return 0;

  std::string text = ReportViews(f.format, context, runs);
  if (!f.html.empty()) {
    WriteHtmlReport(f.files, f.html, context.comparison ? ReportViews("json", context, {}) : "");
    if (f.format == "text") text += "\n# HTML report: " + f.html + "\n";
  }
  std::cout << text << std::flush;
  return 0;
}

}  // namespace tb
