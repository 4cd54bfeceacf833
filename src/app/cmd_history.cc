// `trainbench history DIR`: the trend of each key figure over the nights a validate --history directory holds, per
// configuration; --html draws it (results/analysis/plots.py --history). Reads files only; rank 0 prints.
#include <cmath>
#include <iostream>
#include <map>

#include "cli.h"
#include "commands.h"
#include "error.h"
#include "html_report.h"
#include "reporter.h"
#include "validate.h"

namespace tb {
namespace {

constexpr const char* kUsage =
    "usage: trainbench history DIR [--format text|csv|json] [--html FILE]\n"
    "The nights in a `validate --history` directory, per configuration: each key figure's nights, first, last,\n"
    "median and MAD, and the last night against the median (history.trend); every night's figures in long form\n"
    "(history.nights). --html draws each configuration's figures over the nights, relative to their median.";

struct HistoryFlags {
  std::vector<std::string> dirs;
  std::string format = "text";
  std::string html;
};

bool ParseHistoryFlags(const std::vector<std::string>& args, HistoryFlags& f) {
  po::options_description options("history options");
  options.add_options()
      ("format", Choice(&f.format, ReportFormatNames())->default_value(f.format), "layouts in results/README.md")
      ("html", po::value(&f.html), "also write a self-contained HTML page of the trends to this file")
      ("help,h", "show this help");
  ParseSpec spec;
  spec.positional = "dir";
  spec.positional_target = &f.dirs;
  if (!ParseCommandLine("history", args, options, kUsage, spec)) return false;
  if (f.dirs.size() != 1) {
    throw InputError(std::string(f.dirs.empty() ? "no history directory given" : "one history directory at a time") +
                     " (usage: trainbench history DIR)");
  }
  return true;
}

// A row per configuration and figure: how many nights, first, last, median, MAD, last / median - 1.
ViewTable TrendTable(const std::vector<HistoryEntry>& nights) {
  ViewTable table{"history", "trend", "each figure over the nights, per configuration", false,
                  {{"configuration", ""}, {"figure", ""}, {"nights", ""}, {"first", "", -1}, {"last", "", -1},
                   {"median", "", -1}, {"mad", "", -1}, {"last_vs_median", "fraction", 1, true}},
                  {}};
  std::map<std::pair<std::string, std::string>, std::vector<double>> series;  // in night order
  for (const HistoryEntry& night : nights) {
    for (const auto& [key, value] : night.values) {
      if (std::isfinite(value)) series[{night.identity, key}].push_back(value);
    }
  }
  for (const auto& [id, values] : series) {
    const double median = Median(values);
    std::vector<double> deviations;
    for (double v : values) deviations.push_back(std::fabs(v - median));
    table.rows.push_back({id.first, id.second, static_cast<int64_t>(values.size()), values.front(), values.back(),
                          median, Median(deviations), median != 0 ? values.back() / median - 1 : std::nan("")});
  }
  return table;
}

// Every night's figures, one row per figure (long form: pandas pivots it).
ViewTable NightsTable(const std::vector<HistoryEntry>& nights) {
  ViewTable table{"history", "nights", "every night's figures", false,
                  {{"configuration", ""}, {"start_utc", ""}, {"run", ""}, {"figure", ""}, {"value", "", -1}}, {}};
  for (const HistoryEntry& night : nights) {
    for (const auto& [key, value] : night.values) {
      table.rows.push_back({night.identity, night.start_utc, night.run, key,
                            std::isfinite(value) ? Cell(value) : Cell()});
    }
    for (const auto& [key, text] : night.texts) table.rows.push_back({night.identity, night.start_utc, night.run, key, text});
  }
  return table;
}

}  // namespace

int RunHistoryCommand(const CommandInput& input) {
  HistoryFlags f;
  bool help = false;
  std::vector<HistoryEntry> nights;
  AgreeOnSetup([&] {
    help = !ParseHistoryFlags(input.args, f);
    if (help) return;
    nights = ReadHistory(f.dirs.front());
    if (!f.html.empty()) {
      CheckOutputPath(f.html, "--html", {f.dirs.front()}, {HistoryDirectory(f.dirs.front(), "the history directory")});
    }
  });
  if (help || input.ctx.world_rank != 0) return 0;
  const RunView view{f.dirs.front(), {TrendTable(nights), NightsTable(nights)}};
  std::string text = ReportViews(f.format, {"history", {f.dirs.front()}}, {view});
  if (!f.html.empty()) {
    WriteHistoryHtml(f.dirs.front(), f.html);
    if (f.format == "text") text += "\n# HTML history: " + f.html + "\n";
  }
  std::cout << text << std::flush;
  return 0;
}

}  // namespace tb
