// The exports of `trainbench report`: the views of one or more runs (results/report_view.h) as console text, CSV
// or JSON. Layouts are documented in results/README.md ("Exports of trainbench report").
#pragma once

#include <string>
#include <vector>

#include "report_view.h"

namespace tb {

enum class ExportFormat { kText, kCsv, kJson };

// "text", "csv", "json"; InputError naming --format and the accepted values otherwise.
ExportFormat ParseExportFormat(const std::string& name);

// Console text: headline tables side by side (a column per run), detail tables run by run.
std::string ExportText(const std::vector<RunView>& runs);
// One CSV block per table, every run's rows in it with a leading `run` column; blocks separated by a blank line.
std::string ExportCsv(const std::vector<RunView>& runs);
// One JSON object: the runs, each with its sections and tables; numbers as numbers, NaN and infinities as null
// (nlohmann-json through DumpJson).
std::string ExportJson(const std::vector<RunView>& runs);

// Building blocks, exposed for their tests (JSON text is written by DumpJson, json.h).
// A CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma, quote, line break or edge space.
std::string CsvField(const std::string& text);
// The shortest text that reads back as exactly `value`; "nan", "inf", "-inf" (read by strtod, Python, pandas).
std::string CsvNumber(double value);

}  // namespace tb
