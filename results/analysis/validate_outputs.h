// What `trainbench validate` writes: its checks as view tables (text and JSON through the reporters), JUnit XML for
// Jenkins and GitLab, and a Prometheus textfile for node_exporter's textfile collector. Layouts in
// results/README.md ("Validation").
#pragma once

#include <string>
#include <vector>

#include "report.h"
#include "report_view.h"
#include "validate.h"

namespace tb {

// The tables `validate.summary` (headline: verdict and counts) and `validate.checks` (a row per check).
RunView ValidateView(const std::string& run_file, const Report& report, const std::vector<Check>& checks);

// JUnit XML: <testsuites name="trainbench validate">, one <testsuite> per check family, one <testcase> per check
// (classname = its host, name = its key), <failure> for fail, <skipped> for unknown, warn as a passing test with its
// message in <system-out>. No name holds the report's path: a CI system's test history keys on them.
std::string JunitXml(const Report& report, const std::vector<Check>& checks);

// Prometheus text exposition format, no timestamps, base units (bytes/s, seconds, ratios), `trainbench_` prefix:
// trainbench_info (the host and versions, value 1; not the report's path, which would make a series per night), trainbench_validate_verdict, and per check trainbench_check_status
// (0 pass, 1 warn, 2 fail, 3 unknown) and its measured and expected values, labelled check/family/host/gpu/rank/link.
std::string PrometheusText(const Report& report, const std::vector<Check>& checks);

}  // namespace tb
