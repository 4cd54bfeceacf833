// WriteHtmlReport and WriteHistoryHtml: how they find and run the plotting script and what its outcomes become (a
// stand-in script under /bin/sh plays plots.py for the exit-code mapping and the argument vector: the cost page's
// decision lines, the history page's bands), then the real plots.py on a report written by WriteReport and on a
// history directory (skipped when /usr/bin/python3 lacks h5py or matplotlib).
#include "html_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "error.h"
#include "report.h"
#include "scoped_env.h"
#include "validate.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

using test::ScopedEnv;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

size_t CountOf(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

class HtmlReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string test_name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    directory_ = fs::temp_directory_path() / ("trainbench_html_test." + std::to_string(::getpid()) + "." + test_name);
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  std::string PathOf(const std::string& name) const { return (directory_ / name).string(); }

  // A stand-in for plots.py, run by /bin/sh: records its arguments one per line, then runs `body`.
  std::string FakeScript(const std::string& body) const {
    const std::string path = PathOf("fake_plots.sh");
    std::ofstream(path) << "printf '%s\\n' \"$@\" > '" << PathOf("args") << "'\n" << body << "\n";
    return path;
  }

  // The error WriteHtmlReport throws with the stand-in script `body`; fails the test when it throws nothing.
  template <typename ErrorType>
  std::string ErrorFrom(const std::string& body) {
    ScopedEnv python("TRAINBENCH_PYTHON", "/bin/sh");
    ScopedEnv script("TRAINBENCH_PLOTS_SCRIPT", FakeScript(body));
    try {
      WriteHtmlReport({PathOf("a.h5")}, PathOf("page.html"));
    } catch (const ErrorType& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error thrown for a script doing: " << body;
    return "";
  }

  fs::path directory_;
};

TEST_F(HtmlReportTest, MissingScriptIsAnInputErrorNamingIt) {
  ScopedEnv script("TRAINBENCH_PLOTS_SCRIPT", "/nonexistent/plots.py");
  try {
    WriteHtmlReport({PathOf("a.h5")}, PathOf("page.html"));
    FAIL() << "no error for a missing plotting script";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'/nonexistent/plots.py' is missing"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("TRAINBENCH_PLOTS_SCRIPT"), std::string::npos) << e.what();
  }
}

TEST_F(HtmlReportTest, MissingPythonIsAnInputErrorSayingWhatToInstall) {
  ScopedEnv python("TRAINBENCH_PYTHON", "/nonexistent/python3");
  ScopedEnv script("TRAINBENCH_PLOTS_SCRIPT", FakeScript("exit 0"));
  try {
    WriteHtmlReport({PathOf("a.h5")}, PathOf("page.html"));
    FAIL() << "no error for a missing interpreter";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot run '/nonexistent/python3'"), std::string::npos) << message;
    EXPECT_NE(message.find("install python3-h5py python3-matplotlib"), std::string::npos) << message;
  }
}

TEST_F(HtmlReportTest, ArgumentsReachTheScriptAsGivenWithoutAShell) {
  ScopedEnv python("TRAINBENCH_PYTHON", "/bin/sh");
  // The stand-in keeps a copy of the export it was handed (the argument after --cost or --export).
  ScopedEnv script("TRAINBENCH_PLOTS_SCRIPT", FakeScript("case \"$3\" in --cost|--export) cp \"$4\" '" + PathOf("export copy") + "';; esac"));
  // Spaces, a quote, a dollar sign and a leading dash would each be mangled by a shell or taken for an option.
  const std::vector<std::string> reports = {PathOf("run one.h5"), "-odd'$name.h5"};
  const std::string export_path = PathOf("out page.html") + ".export.json.tmp";
  WriteHtmlReport(reports, PathOf("out page.html"), "{\"runs\": []}", HtmlExport::kCost);
  const std::string expected = "--out\n" + PathOf("out page.html") + "\n--cost\n" + export_path + "\n--\n" +
                               reports[0] + "\n" + reports[1] + "\n";
  EXPECT_EQ(ReadFile(PathOf("args")), expected);
  EXPECT_EQ(ReadFile(PathOf("export copy")), "{\"runs\": []}");
  EXPECT_FALSE(fs::exists(export_path)) << "the export handed to the script is removed after";

  WriteHtmlReport(reports, PathOf("out page.html"), "{}");  // a report's export
  EXPECT_EQ(ReadFile(PathOf("args")), "--out\n" + PathOf("out page.html") + "\n--export\n" + export_path + "\n--\n" +
                                          reports[0] + "\n" + reports[1] + "\n");

  WriteHtmlReport({reports[0]}, PathOf("page.html"));  // no export: neither flag
  EXPECT_EQ(ReadFile(PathOf("args")), "--out\n" + PathOf("page.html") + "\n--\n" + reports[0] + "\n");
}

TEST_F(HtmlReportTest, DecisionLinesReachTheScriptAsTheyArePrinted) {
  ScopedEnv python("TRAINBENCH_PYTHON", "/bin/sh");
  ScopedEnv script("TRAINBENCH_PLOTS_SCRIPT", FakeScript("exit 0"));
  const std::vector<std::string> decision = {"# cheapest: a.h5 k2 1x2 (measured) on x: $1; why: the only one",
                                             "# none meets the deadline of 2 h (the fastest takes 3.0 h)"};
  WriteHtmlReport({PathOf("a.h5")}, PathOf("page.html"), "{}", HtmlExport::kCost, decision);
  const std::string export_path = PathOf("page.html") + ".export.json.tmp";
  EXPECT_EQ(ReadFile(PathOf("args")), "--out\n" + PathOf("page.html") + "\n--cost\n" + export_path +
                                          "\n--decision\n" + decision[0] + "\n--decision\n" + decision[1] +
                                          "\n--\n" + PathOf("a.h5") + "\n");
}

TEST_F(HtmlReportTest, HistoryPageGetsValidatesDefaultBands) {
  ScopedEnv python("TRAINBENCH_PYTHON", "/bin/sh");
  ScopedEnv script("TRAINBENCH_PLOTS_SCRIPT", FakeScript("exit 0"));
  WriteHistoryHtml(PathOf("history"), PathOf("trend.html"));
  const ValidatePolicy p;
  std::ostringstream bands;
  bands << "warn=" << p.warn << ",fail=" << p.fail << ",share_warn=" << p.share_warn << ",share_fail=" << p.share_fail
        << ",nights=" << p.history_nights << ",min_nights=" << p.history_min_nights
        << ",max_widening=" << p.history_max_widening;
  EXPECT_EQ(ReadFile(PathOf("args")), "--out\n" + PathOf("trend.html") + "\n--history\n" + PathOf("history") +
                                          "\n--bands\n" + bands.str() + "\n");
}

TEST_F(HtmlReportTest, ScriptInputErrorBecomesAnInputErrorWithItsLine) {
  const std::string message = ErrorFrom<InputError>(
      "echo 'a warning first' >&2; echo \"plots.py: cannot read cost file 'c.json': not JSON\" >&2; exit 2");
  EXPECT_EQ(message, "cannot read cost file 'c.json': not JSON");
}

TEST_F(HtmlReportTest, MissingPackagesBecomeAnInputErrorSayingWhatToInstall) {
  const std::string message = ErrorFrom<InputError>(
      "echo \"plots.py: /usr/bin/python3 lacks the Python package 'h5py': install python3-h5py "
      "python3-matplotlib\" >&2; exit 3");
  EXPECT_EQ(message.rfind("cannot make the HTML page: ", 0), 0u) << message;
  EXPECT_NE(message.find("install python3-h5py python3-matplotlib"), std::string::npos) << message;
}

TEST_F(HtmlReportTest, ScriptFailureIsARuntimeErrorWithItsLastLine) {
  // Only RuntimeError is caught here: an InputError (also a tb::Error) would escape and fail the test.
  const std::string message = ErrorFrom<RuntimeError>(
      "echo 'Traceback (most recent call last):' >&2; echo 'ValueError: boom' >&2; echo >&2; exit 1");
  EXPECT_NE(message.find("failed (exit code 1): ValueError: boom"), std::string::npos) << message;
}

TEST_F(HtmlReportTest, ScriptKilledBySignalIsARuntimeError) {
  const std::string message = ErrorFrom<RuntimeError>("kill -KILL $$");
  EXPECT_NE(message.find("failed (signal 9)"), std::string::npos) << message;
}

// The real plots.py: whether Debian's Python has what it needs decides between running and skipping.
bool PlotsPythonReady() {
  return std::system("/usr/bin/python3 -c 'import h5py, matplotlib' >/dev/null 2>&1") == 0;
}

Report CollectivesReport() {
  Report report;
  report.root.Set("schema", std::string(kReportSchemaName));
  report.root.Set("schema_version", kReportSchemaVersion);
  report.root.Set("command", std::string("collectives"));
  report.root.Set("status", std::string("complete"));
  report.root.Set("n_ranks", int64_t{4});
  report.root.Set("backend", std::string("mpi"));
  Group& all_reduce = report.root.Child("collectives").Child("all_reduce");
  all_reduce.Set("n_ranks", int64_t{4});
  all_reduce.Set("bus_factor", 1.5);
  all_reduce.Set("bus_factor_formula", std::string("2(n-1)/n"));
  all_reduce.tables["results"]
      .Add("size_bytes", "B", std::vector<int64_t>{1024, 65536, 1048576})
      .Add("out_of_place_busbw_GBps", "GB/s", std::vector<double>{0.5, 3.0, 9.5})
      .Add("in_place_busbw_GBps", "GB/s", std::vector<double>{0.4, 2.9, 9.6});
  return report;
}

TEST_F(HtmlReportTest, RealScriptDrawsWhatTheReportHolds) {
  if (!PlotsPythonReady()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or matplotlib (apt-get install python3-h5py "
                                           "python3-matplotlib)";
  WriteReport(CollectivesReport(), PathOf("coll.h5"));
  WriteHtmlReport({PathOf("coll.h5")}, PathOf("page.html"));
  const std::string page = ReadFile(PathOf("page.html"));
  EXPECT_EQ(CountOf(page, "src=\"data:image/png;base64,"), 1u);  // all_reduce busbw; nothing else is in the report
  EXPECT_NE(page.find("all_reduce 2(n-1)/n = 1.5 at n = 4 (coll.h5)"), std::string::npos);
  EXPECT_NE(page.find("No report holds a p2p matrix"), std::string::npos);
  EXPECT_NE(page.find("No report holds a training scaling sweep"), std::string::npos);
  for (const auto& entry : fs::directory_iterator(directory_)) {
    EXPECT_NE(entry.path().extension(), ".tmp") << "temporary file left behind: " << entry.path();
  }
}

// A history entry as validate writes it (results/README.md, "History directory").
std::string Night(const std::string& start, bool counted, const std::string& status, double busbw, double share) {
  std::ostringstream json;
  json << R"({"format": "trainbench.history", "version": 1, "run": "/runs/night.h5", "run_key": ")" << start
       << R"(", "start_utc": ")" << start << R"j(", "identity": "suite tiny x2, 2 x cpu, 2 ranks on 1 node(s)", )j"
       << R"("values": {"collectives.all_reduce.busbw_GBps.large": )" << busbw
       << R"(, "train.comm_exposed_share": )" << share << R"(}, "texts": {}, "counted": )"
       << (counted ? "true" : "false") << R"(, "status": ")" << status << R"(", "node_hours": 0.1})";
  return json.str();
}

TEST_F(HtmlReportTest, RealScriptDrawsAPanelPerFamilyOfTheHistory) {
  if (!PlotsPythonReady()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or matplotlib";
  fs::create_directories(PathOf("history"));
  std::ofstream(PathOf("history/1.json")) << Night("2026-12-01T02:00:00Z", true, "complete", 10.0, 0.10);
  std::ofstream(PathOf("history/2.json")) << Night("2026-12-02T02:00:00Z", true, "complete", 10.2, 0.11);
  std::ofstream(PathOf("history/3.json")) << Night("2026-12-03T02:00:00Z", true, "complete", 9.9, 0.10);
  std::ofstream(PathOf("history/4.json")) << Night("2026-12-04T02:00:00Z", false, "complete", 7.0, 0.30);
  std::ofstream(PathOf("history/5.json")) << Night("2026-12-05T02:00:00Z", false, "interrupted", 9.8, 0.10);
  WriteHistoryHtml(PathOf("history"), PathOf("trend.html"));
  const std::string page = ReadFile(PathOf("trend.html"));
  EXPECT_NE(page.find("from 5 night(s) of 1 configuration(s)"), std::string::npos);
  EXPECT_EQ(CountOf(page, "<figure class=\"panel\" data-family=\"collectives\">"), 1u);
  EXPECT_EQ(CountOf(page, "<figure class=\"panel\" data-family=\"train\">"), 1u);
  EXPECT_EQ(CountOf(page, "<figure class=\"panel\""), 2u);
  // The band drawn is the policy's default around the median of the three passing nights.
  EXPECT_NE(page.find("within 5% below the expectation for a rate, 2 points above it for a share"), std::string::npos);
  EXPECT_NE(page.find("band around the median of the last 3 passing night(s)"), std::string::npos);
  EXPECT_NE(page.find("all_reduce.busbw_GBps.large 10."), std::string::npos) << "the median of 10, 10.2 and 9.9";
  // Both nights not counted, and why, in the table and on each panel; the counted ones in neither.
  EXPECT_NE(page.find("<td>2026-12-04T02:00:00Z</td><td>regression</td>"), std::string::npos);
  EXPECT_NE(page.find("<td>2026-12-05T02:00:00Z</td><td>run interrupted</td>"), std::string::npos);
  EXPECT_EQ(CountOf(page, "2026-12-04T02:00:00Z (regression)"), 2u);
  EXPECT_EQ(CountOf(page, "2026-12-02T02:00:00Z"), 0u);
}

TEST_F(HtmlReportTest, RealScriptRejectsAFileThatIsNotHdf5) {
  if (!PlotsPythonReady()) GTEST_SKIP() << "/usr/bin/python3 lacks h5py or matplotlib";
  std::ofstream(PathOf("text.h5")) << "not a report\n";
  try {
    WriteHtmlReport({PathOf("text.h5")}, PathOf("page.html"));
    FAIL() << "no error for a text file";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read report '" + PathOf("text.h5") + "': not an HDF5 file");
  }
  EXPECT_FALSE(fs::exists(PathOf("page.html")));
}

}  // namespace
}  // namespace tb
