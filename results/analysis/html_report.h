// The HTML page of `trainbench report --html` and `trainbench cost --html`: plots for people who would rather
// look than read, drawn by results/analysis/plots.py (matplotlib and h5py under /usr/bin/python3, from Debian's packages)
// into one self-contained file (images inline as data: URIs, no scripts or links to fetch: it opens offline).
#pragma once

#include <string>
#include <vector>

namespace tb {

// Writes `html_path` from the reports at `report_paths` (already validated by ReadReport): busbw against size per
// run, scaling efficiency against GPU count, the stall budget per rank as stacked bars, the p2p matrix as a
// heatmap — each plot only where the reports hold its data. `export_json`, when not empty, is the command's JSON
// export (`report` or `cost --format json`): its `comparability` becomes the page's table of what the runs held
// fixed and, from `cost` (kind kCost), its rows the cost per configuration. It is written beside the page for the
// script and removed after. `decision`: the lines that open a cost page, in words, as the command prints them
// ("# cheapest: ...; why: ..."): the page shows them, it decides nothing. The page is written to a temporary name
// and renamed. Throws InputError when the plotting script or its Python packages are missing (naming what to
// install), RuntimeError when the script fails (with its last error line).
enum class HtmlExport { kReport, kCost };
void WriteHtmlReport(const std::vector<std::string>& report_paths, const std::string& html_path,
                     const std::string& export_json = "", HtmlExport kind = HtmlExport::kReport,
                     const std::vector<std::string>& decision = {});

// The trends of a `validate --history` directory as one page (plots.py --history), with the same errors: a panel
// per figure family and configuration, shaded with the band validate would judge the next night by (the policy's
// default bands around the median of the passing nights; ValidatePolicy's defaults are handed to the script).
void WriteHistoryHtml(const std::string& history_dir, const std::string& html_path);

}  // namespace tb
