// The report model and its HDF5 form: round trip of every kind of content, the atomic write, the errors a
// user sees for files that are not readable reports, and the layout as an independent tool (h5dump) sees it.
#include "report.h"
#include "schema.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <regex>
#include <string>

#include "error.h"
#include "report_check.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A fresh directory per test, removed afterwards.
class ReportFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string test_name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    directory_ = fs::temp_directory_path() / ("trainbench_report_test." + std::to_string(::getpid()) + "." + test_name);
    fs::remove_all(directory_);
    fs::create_directories(directory_);
  }
  void TearDown() override { fs::remove_all(directory_); }

  std::string PathOf(const std::string& name) const { return (directory_ / name).string(); }

  fs::path directory_;
};

// The root attributes every command writes (a report without one is damaged).
Report MinimalReport() {
  Report report;
  report.root.Set("schema", std::string(kReportSchemaName));
  report.root.Set("schema_version", kReportSchemaVersion);
  report.root.Set("command", std::string("info"));
  report.root.Set("command_line", std::string("trainbench info -o r.h5"));
  report.root.Set("start_utc", std::string("2024-05-01T12:00:00Z"));
  report.root.Set("end_utc", std::string("2024-05-01T12:00:01Z"));
  report.root.Set("n_ranks", int64_t{1});
  report.root.Set("status", std::string("complete"));
  report.root.Set("status_reason", std::string());
  return report;
}

Report FullReport() {
  Report report = MinimalReport();
  report.root.Set("command", std::string("collectives"));
  report.root.Set("n_ranks", int64_t{4});
  report.root.Set("bus_factor", 1.5);
  report.root.Set("status_reason", std::string());

  Group& all_reduce = report.root.Child("collectives").Child("all_reduce");
  all_reduce.Set("op", std::string("all_reduce"));
  all_reduce.Set("iters", int64_t{-20});
  all_reduce.tables["results"]
      .Add("size_bytes", "B", std::vector<int64_t>{8, 1024, int64_t{1} << 40})
      .Add("out_of_place_time_us", "us", std::vector<double>{1.25, 3.5, kNaN})
      .Add("host", "", std::vector<std::string>{"node01", "", "nöde-02 (µ)"});
  all_reduce.tables["results"].description = "one row per message size";

  Group& p2p = report.root.Child("p2p");
  p2p.tables["flagged"]
      .Add("src_rank", "", std::vector<int64_t>{})
      .Add("uni_bw_GBps", "GB/s", std::vector<double>{})
      .Add("src_host", "", std::vector<std::string>{});
  Matrix& latency = p2p.matrices["latency_us"];
  latency.description = "half the round-trip time";
  latency.unit = "us";
  latency.rows = 2;
  latency.cols = 3;
  latency.values = {kNaN, 2.5, 3.0, 4.0, kNaN, -1e300};
  return report;
}

// Equal values, with NaN equal to NaN (NaN marks unmeasured entries).
template <typename Value>
bool SameValues(const std::vector<Value>& a, const std::vector<Value>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if constexpr (std::is_floating_point_v<Value>) {
      if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    }
    if (a[i] != b[i]) return false;
  }
  return true;
}

void ExpectSameGroup(const Group& expected, const Group& actual, const std::string& path) {
  SCOPED_TRACE("group " + path);
  EXPECT_EQ(expected.attributes, actual.attributes);

  ASSERT_EQ(expected.tables.size(), actual.tables.size());
  for (const auto& [name, table] : expected.tables) {
    SCOPED_TRACE("table " + name);
    ASSERT_EQ(actual.tables.count(name), 1u);
    const Table& read = actual.tables.at(name);
    EXPECT_EQ(table.description, read.description);
    ASSERT_EQ(table.columns.size(), read.columns.size());
    for (size_t c = 0; c < table.columns.size(); ++c) {
      const Column& want = table.columns[c];
      const Column& got = read.columns[c];
      SCOPED_TRACE("column " + want.name);
      EXPECT_EQ(want.name, got.name);
      EXPECT_EQ(want.unit, got.unit);
      ASSERT_EQ(want.values.index(), got.values.index());
      std::visit(
          [&](const auto& want_values) {
            using Values = std::decay_t<decltype(want_values)>;
            EXPECT_TRUE(SameValues(want_values, std::get<Values>(got.values)));
          },
          want.values);
    }
  }

  ASSERT_EQ(expected.matrices.size(), actual.matrices.size());
  for (const auto& [name, matrix] : expected.matrices) {
    SCOPED_TRACE("matrix " + name);
    ASSERT_EQ(actual.matrices.count(name), 1u);
    const Matrix& read = actual.matrices.at(name);
    EXPECT_EQ(matrix.description, read.description);
    EXPECT_EQ(matrix.unit, read.unit);
    EXPECT_EQ(matrix.rows, read.rows);
    EXPECT_EQ(matrix.cols, read.cols);
    EXPECT_TRUE(SameValues(matrix.values, read.values));
  }

  ASSERT_EQ(expected.children().size(), actual.children().size());
  for (const auto& [name, child] : expected.children()) {
    const Group* read = actual.FindChild(name);
    ASSERT_NE(read, nullptr) << "missing group " << name;
    ExpectSameGroup(*child, *read, path + name + "/");
  }
}

// Runs `fn` and expects an InputError whose message names `path` and contains `detail`.
template <typename Fn>
void ExpectInputError(Fn fn, const std::string& path, const std::string& detail) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing '" << detail << "'";
  } catch (const InputError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'" + path + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(detail), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
    EXPECT_EQ(error.code(), ExitCode::kInput);
  }
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// ---- model --------------------------------------------------------------------------------------------

TEST(ReportModel, TableRowsAndFind) {
  Table table;
  EXPECT_EQ(table.rows(), 0u);
  table.Add("rank", "", std::vector<int64_t>{0, 1}).Add("time_us", "us", std::vector<double>{1.0, 2.0});
  EXPECT_EQ(table.rows(), 2u);
  ASSERT_NE(table.Find("time_us"), nullptr);
  EXPECT_EQ(table.Find("time_us")->unit, "us");
  EXPECT_EQ(table.Find("time_us")->rows(), 2u);
  EXPECT_EQ(table.Find("missing"), nullptr);
}

TEST(ReportModel, ChildCreatesOnceAndCopiesAreDeep) {
  Group root;
  EXPECT_EQ(root.FindChild("collectives"), nullptr);
  Group& collectives = root.Child("collectives");
  collectives.Child("all_reduce").Set("iters", int64_t{20});
  EXPECT_EQ(&root.Child("collectives"), &collectives);
  ASSERT_NE(root.FindChild("collectives"), nullptr);

  Group copy = root;
  copy.Child("collectives").Child("all_reduce").Set("iters", int64_t{50});
  copy.Child("p2p");
  EXPECT_EQ(root.Child("collectives").Child("all_reduce").attributes.at("iters"), AttributeValue(int64_t{20}));
  EXPECT_EQ(root.FindChild("p2p"), nullptr);

  Group assigned;
  assigned = copy;
  copy.Child("collectives").Child("all_reduce").Set("iters", int64_t{70});
  EXPECT_EQ(assigned.Child("collectives").Child("all_reduce").attributes.at("iters"), AttributeValue(int64_t{50}));
  EXPECT_NE(assigned.FindChild("p2p"), nullptr);
}

// ---- HDF5 round trip ----------------------------------------------------------------------------------

TEST_F(ReportFileTest, RoundTripKeepsEveryKindOfContent) {
  const std::string path = PathOf("report.h5");
  const Report written = FullReport();
  WriteReport(written, path);
  const Report read = ReadReport(path);
  ExpectSameGroup(written.root, read.root, "/");
}

TEST_F(ReportFileTest, RewriteReplacesTheFileAndLeavesNoTemporary) {
  const std::string path = PathOf("report.h5");
  WriteReport(FullReport(), path);
  Report second = MinimalReport();
  second.root.Set("status", std::string("complete"));
  WriteReport(second, path);
  ExpectSameGroup(second.root, ReadReport(path).root, "/");
  EXPECT_EQ(std::distance(fs::directory_iterator(directory_), fs::directory_iterator()), 1);
}

TEST_F(ReportFileTest, FailedWriteLeavesTheExistingFileIntact) {
  const std::string path = PathOf("report.h5");
  const Report good = FullReport();
  WriteReport(good, path);

  Report bad = FullReport();
  bad.root.Child("p2p").tables["uneven"].Add("a", "", std::vector<int64_t>{1, 2}).Add("b", "", std::vector<double>{1});
  try {
    WriteReport(bad, path);
    ADD_FAILURE() << "a table with uneven columns was written";
  } catch (const RuntimeError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("/p2p/uneven"), std::string::npos) << message;
    EXPECT_NE(message.find("'b'"), std::string::npos) << message;
  }
  ExpectSameGroup(good.root, ReadReport(path).root, "/");
  EXPECT_EQ(std::distance(fs::directory_iterator(directory_), fs::directory_iterator()), 1) << "temporary left";
}

TEST_F(ReportFileTest, WriteCarriesHdf5MessageAndNamesThePath) {
  Report report = MinimalReport();
  report.root.tables["empty"];  // a table without columns has no compound type
  const std::string path = PathOf("report.h5");
  EXPECT_THROW(WriteReport(report, path), RuntimeError);

  Report clash = MinimalReport();
  clash.root.matrices["x"] = Matrix{"", "", 1, 1, {1.0}};
  clash.root.Child("x");
  try {
    WriteReport(clash, path);
    ADD_FAILURE() << "a group and a matrix shared a name";
  } catch (const RuntimeError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("cannot write report '" + path + "'"), std::string::npos) << message;
    EXPECT_NE(message.find("cannot create group '/x'"), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(directory_));
}

TEST_F(ReportFileTest, StatusRewriteChangesOnlyTheStatus) {
  const std::string path = PathOf("report.h5");
  const Report written = FullReport();
  WriteReport(written, path);
  RewriteReportStatus(path, "failed", "timeout: all_reduce did not complete", "2030-01-01T00:00:00Z");
  Report expected = written;
  expected.root.Set("status", std::string("failed"));
  expected.root.Set("status_reason", std::string("timeout: all_reduce did not complete"));
  expected.root.Set("end_utc", std::string("2030-01-01T00:00:00Z"));
  ExpectSameGroup(expected.root, ReadReport(path).root, "/");
  EXPECT_EQ(std::distance(fs::directory_iterator(directory_), fs::directory_iterator()), 1) << "temporary left";
}

TEST_F(ReportFileTest, StatusRewriteOfAMissingFileNamesIt) {
  const std::string path = PathOf("absent.h5");
  try {
    RewriteReportStatus(path, "failed", "why", "");
    ADD_FAILURE() << "a missing report was rewritten";
  } catch (const RuntimeError& error) {
    EXPECT_NE(std::string(error.what()).find("cannot rewrite the status of report '" + path + "'"), std::string::npos)
        << error.what();
  }
  EXPECT_TRUE(fs::is_empty(directory_));
}

// ---- read errors --------------------------------------------------------------------------------------

TEST_F(ReportFileTest, ReadMissingFile) {
  const std::string path = PathOf("absent.h5");
  ExpectInputError([&] { ReadReport(path); }, path, "no such file");
}

TEST_F(ReportFileTest, ReadNonHdf5File) {
  const std::string path = PathOf("notes.txt");
  WriteBytes(path, "size_bytes,time_us\n8,1.5\n");
  ExpectInputError([&] { ReadReport(path); }, path, "not an HDF5 file");
}

TEST_F(ReportFileTest, ReadHdf5FileWithoutSchema) {
  const std::string path = PathOf("foreign.h5");
  Report foreign;
  foreign.root.Set("title", std::string("someone else's data"));
  WriteReport(foreign, path);
  ExpectInputError([&] { ReadReport(path); }, path, "not a trainbench report");
}

TEST_F(ReportFileTest, ReadOtherSchemaName) {
  const std::string path = PathOf("other.h5");
  Report other = MinimalReport();
  other.root.Set("schema", std::string("other.tool"));
  WriteReport(other, path);
  ExpectInputError([&] { ReadReport(path); }, path, "not a trainbench report");
}

TEST_F(ReportFileTest, ReadWrongSchemaVersion) {
  const std::string path = PathOf("future.h5");
  Report future = MinimalReport();
  future.root.Set("schema_version", int64_t{2});
  WriteReport(future, path);
  ExpectInputError([&] { ReadReport(path); }, path, "schema version 2 is not supported (this build reads 1)");
}

TEST_F(ReportFileTest, ReadTruncatedFile) {
  const std::string path = PathOf("truncated.h5");
  WriteReport(FullReport(), path);
  fs::resize_file(path, fs::file_size(path) / 2);
  ExpectInputError([&] { ReadReport(path); }, path, "truncated");
}

TEST_F(ReportFileTest, ReadDirectory) {
  ExpectInputError([&] { ReadReport(directory_.string()); }, directory_.string(), "directory");
}

// ---- CheckWritable ------------------------------------------------------------------------------------

TEST_F(ReportFileTest, CheckWritableMissingDirectory) {
  const std::string path = PathOf("no/such/dir/report.h5");
  ExpectInputError([&] { CheckWritable(path); }, path, "does not exist");
}

TEST_F(ReportFileTest, CheckWritableDirectoryPath) {
  ExpectInputError([&] { CheckWritable(directory_.string()); }, directory_.string(), "is a directory");
}

TEST_F(ReportFileTest, CheckWritableParentIsAFile) {
  const std::string file = PathOf("plain");
  WriteBytes(file, "x");
  const std::string path = file + "/report.h5";
  ExpectInputError([&] { CheckWritable(path); }, path, "is not a directory");
}

TEST_F(ReportFileTest, CheckWritableGoodPathLeavesNothingBehind) {
  EXPECT_NO_THROW(CheckWritable(PathOf("report.h5")));
  EXPECT_TRUE(fs::is_empty(directory_));
}

// ---- the file as other tools see it -------------------------------------------------------------------

// ---- damage: what the report says it holds --------------------------------------------------------------

// A whole report of a 1,2-rank training run with the loader: every group its summary and config name.
Report TrainReport() {
  Report report = MinimalReport();
  report.root.Set("command", std::string("train"));
  report.root.Child("config").Set("data", std::string("tokens"));
  report.root.Child("model").Set("name", std::string("tiny"));
  Group& summary = report.root.Child("summary");
  summary.Set(schema::summary::train_points.name, std::string("k1,k2"));
  summary.Set("train_ranks", int64_t{2});
  for (const char* point : {"k1", "k2"}) {
    Group& group = report.root.Child("train").Child(point);
    group.Set("tokens_per_s", 1000.0);
    group.tables["steps"].Add("step", "", std::vector<int64_t>{0});
    report.root.Child("io").Child(point).Set("data_wait_share", 0.1);
  }
  return report;
}

std::string DamageWithout(Report report, const std::string& path) {
  Group* group = &report.root;
  std::string rest = path;
  for (size_t slash; (slash = rest.find('/')) != std::string::npos; rest = rest.substr(slash + 1)) {
    group = &group->Child(rest.substr(0, slash));
  }
  const bool removed = group->attributes.erase(rest) + group->tables.erase(rest) + group->matrices.erase(rest) > 0;
  if (!removed) {
    Group copy;
    for (const auto& [name, child] : group->children()) {
      if (name != rest) copy.Child(name) = *child;
    }
    copy.attributes = group->attributes;
    copy.tables = group->tables;
    copy.matrices = group->matrices;
    *group = std::move(copy);
  }
  return FindReportDamage(report);
}

TEST(ReportDamage, WholeReportsAreNotDamaged) {
  EXPECT_EQ(FindReportDamage(MinimalReport()), "");
  EXPECT_EQ(FindReportDamage(TrainReport()), "");
  Report sweep = TrainReport();  // older reports: no train_points, a storage sweep's groups for train_ranks
  sweep.root.Child("summary").attributes.erase(schema::summary::train_points.name);
  sweep.root.Child("summary").Set("train_ranks", int64_t{1});
  sweep.root.Child("train").Child("k1_throttle100") = *sweep.root.Child("train").FindChild("k1");
  sweep.root.Child("io").Child("k1_throttle100");
  EXPECT_EQ(DamageWithout(sweep, "train/k1"), "");
  Report stopped = MinimalReport();  // a collectives sweep stopped before its first operation
  stopped.root.Set("status", std::string("interrupted"));
  stopped.root.Child("summary").Set("wrong_elements_total", int64_t{0});
  EXPECT_EQ(FindReportDamage(stopped), "");
}

TEST(ReportDamage, RootAttributes) {
  EXPECT_EQ(DamageWithout(MinimalReport(), "status"),
            "damaged: the root attribute 'status' (written to every report) is missing");
  EXPECT_NE(DamageWithout(MinimalReport(), "end_utc").find("'end_utc'"), std::string::npos);
  Report odd = MinimalReport();
  odd.root.Set("status", std::string("fine"));
  EXPECT_EQ(FindReportDamage(odd), "damaged: the root attribute 'status' is 'fine' (want complete, interrupted or failed)");
}

TEST(ReportDamage, TrainingPointsAndTheirIo) {
  EXPECT_EQ(DamageWithout(TrainReport(), "train/k2"),
            "damaged: summary/train_points lists the training point k2, but group /train/k2 is missing");
  EXPECT_EQ(DamageWithout(TrainReport(), "train/k1/steps"),
            "damaged: summary/train_points lists the training point k1, but /train/k1/steps is missing");
  EXPECT_EQ(DamageWithout(TrainReport(), "train/k2/tokens_per_s"),
            "damaged: summary/train_points lists the training point k2, but attribute /train/k2 tokens_per_s is missing");
  EXPECT_EQ(DamageWithout(TrainReport(), "io/k2"),
            "damaged: summary/train_points lists the training point k2 of a run with --data, checkpoints or --resume, "
            "but group /io/k2 is missing");
  EXPECT_EQ(DamageWithout(TrainReport(), "model"),
            "damaged: summary/train_points reports a training run, but group /model is missing");
  Report old = TrainReport();  // before train_points: train_ranks names the largest point
  old.root.Child("summary").attributes.erase(schema::summary::train_points.name);
  EXPECT_EQ(DamageWithout(old, "train/k2"),
            "damaged: summary/train_ranks lists the training point k2, but group /train/k2 is missing");
  EXPECT_EQ(DamageWithout(old, "train/k1"), "") << "only the largest point is named";
}

TEST(ReportDamage, CollectivesAndP2p) {
  Report report = MinimalReport();
  Group& summary = report.root.Child("summary");
  summary.Set("all_reduce_peak_busbw_GBps", 10.0);
  summary.Set("wrong_elements_total", int64_t{0});
  summary.Set("p2p_median_uni_GBps", 5.0);
  summary.Set("p2p_flagged_pairs", int64_t{0});
  report.root.Child("collectives").Child("all_reduce").tables["results"].Add("size_bytes", "", std::vector<int64_t>{8});
  report.root.Child("p2p").matrices["uni_bw_GBps"] = Matrix{"", "GB/s", 1, 1, {1.0}};
  report.root.Child("p2p").tables["flagged"].Add("src_rank", "", std::vector<int64_t>{});
  EXPECT_EQ(FindReportDamage(report), "");
  EXPECT_EQ(DamageWithout(report, "collectives/all_reduce/results"),
            "damaged: summary/all_reduce_peak_busbw_GBps reports a sweep of all_reduce, but "
            "/collectives/all_reduce/results is missing");
  EXPECT_EQ(DamageWithout(report, "p2p/uni_bw_GBps"),
            "damaged: summary/p2p_median_uni_GBps reports a p2p matrix, but /p2p/uni_bw_GBps is missing");
  EXPECT_EQ(DamageWithout(report, "p2p/flagged"),
            "damaged: summary/p2p_flagged_pairs reports flagged pairs, but /p2p/flagged is missing");
}

// ReadReport, which `report` and `cost` both read through, refuses a damaged file with one line naming it.
TEST_F(ReportFileTest, ReadRefusesADamagedReport) {
  const std::string path = PathOf("damaged.h5");
  Report report = TrainReport();
  WriteReport(report, path);
  EXPECT_NO_THROW(ReadReport(path));
  report.root.Child("summary").Set(schema::summary::train_points.name, std::string("k1,k2,k4"));
  WriteReport(report, path);
  ExpectInputError([&] { ReadReport(path); }, path,
                   "damaged: summary/train_points lists the training point k4, but group /train/k4 is missing");
}

// Output and exit status of a shell command.
std::pair<std::string, int> RunCommand(const std::string& command) {
  std::string output;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {"", -1};
  char buffer[4096];
  size_t length = 0;
  while ((length = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, length);
  return {output, ::pclose(pipe)};
}

// h5dump as the environment names it (H5DUMP), else from PATH.
std::string H5dump() {
  const char* from_environment = std::getenv("H5DUMP");
  return from_environment != nullptr && *from_environment ? from_environment : "h5dump";
}

TEST_F(ReportFileTest, H5dumpSeesCompoundFieldsAndAttributes) {
  const std::string h5dump = H5dump();
  if (RunCommand("'" + h5dump + "' --version").second != 0) GTEST_SKIP() << "h5dump not runnable as '" << h5dump << "'";

  const std::string path = PathOf("report.h5");
  WriteReport(FullReport(), path);
  const auto [output, status] = RunCommand("'" + h5dump + "' '" + path + "'");
  ASSERT_EQ(status, 0) << output;
  for (const char* expected :
       {"DATASET \"results\"", "H5T_STD_I64LE \"size_bytes\";", "H5T_IEEE_F64LE \"out_of_place_time_us\";", "\"host\";",
        "ATTRIBUTE \"units\"", "ATTRIBUTE \"schema\"", "\"trainbench.report\"", "DATASET \"latency_us\""}) {
    EXPECT_NE(output.find(expected), std::string::npos) << "missing " << expected << " in:\n" << output;
  }
}

// ---- units of a group's attributes ------------------------------------------------------------------------

TEST(ReportSchema, GroupSpecAtAndMatchAttribute) {
  EXPECT_EQ(schema::GroupSpecAt("/"), &schema::kRoot);
  EXPECT_EQ(schema::GroupSpecAt("/summary"), &schema::kSummary);
  EXPECT_EQ(schema::GroupSpecAt("/train/k2"), &schema::kTrainPoint);
  EXPECT_EQ(schema::GroupSpecAt("/train"), &schema::kTrain);
  EXPECT_EQ(schema::GroupSpecAt("/collectives/all_reduce"), &schema::kCollective);
  EXPECT_EQ(schema::GroupSpecAt("/repeats/r1"), &schema::kRepeat);
  EXPECT_EQ(schema::GroupSpecAt("/repeats/r1/train/k2"), &schema::kTrainPoint);  // the root's layout, repeated
  EXPECT_EQ(schema::GroupSpecAt("/repeats/r1/summary"), &schema::kSummary);
  EXPECT_EQ(schema::GroupSpecAt("/train/k2/extra"), nullptr);
  EXPECT_EQ(schema::GroupSpecAt("/title"), nullptr);
  EXPECT_EQ(schema::kTrainPoint.MatchAttribute("tokens_per_s"), &schema::point::tokens_per_s);
  EXPECT_EQ(schema::kSummary.MatchAttribute("all_reduce_peak_busbw_GBps"), &schema::summary::peak_busbw_GBps);
  EXPECT_EQ(schema::kSummary.MatchAttribute("all_reduce_peak_busbw_size_bytes"),
            &schema::summary::peak_busbw_size_bytes);
  EXPECT_EQ(schema::kSummary.MatchAttribute("_peak_busbw_GBps"), nullptr);  // the placeholder stands for a name
  EXPECT_EQ(schema::kSummary.MatchAttribute("title"), nullptr);
}

// Attributes as the commands write them: declared ones with a unit (by name and through a placeholder), declared
// ones without one, one the schema does not declare, and a suite's earlier repeat laid out as the root.
Report ReportWithUnits() {
  Report report = MinimalReport();
  namespace sc = schema;
  Group& point = sc::GroupOf(report.root, sc::kTrainPoint, "k2");
  sc::Set(point, sc::point::tokens_per_s, 1234.5);
  sc::Set(point, sc::point::step_s, 0.25);
  sc::Set(point, sc::point::micro_batch, 2);
  point.Set("note", std::string("not in the schema"));
  Group& summary = sc::GroupOf(report.root, sc::kSummary);
  sc::Set(summary, sc::summary::p2p_median_uni_GBps, 12.5);
  sc::Set(summary, sc::summary::peak_busbw_GBps, "all_reduce", 80.0);
  sc::SetMatrix(sc::GroupOf(report.root, sc::kP2p), sc::p2p::uni_bw_GBps, 1, 1, {kNaN});  // what the summary names
  Group& all_reduce = sc::GroupOf(report.root, sc::kCollective, "all_reduce");
  sc::Set(all_reduce, sc::collective::op, "all_reduce");
  sc::AddColumn(sc::AddTable(all_reduce, sc::collective::kResults), sc::collective::results::size_bytes, {8});
  sc::Set(sc::GroupOf(sc::GroupOf(report.root, sc::kRepeat, "r1"), sc::kTrainPoint, "k2"), sc::point::tokens_per_s,
          1000.0);
  return report;
}

// The strings of attribute `attribute` ("/train/k2/units") as h5dump prints them; nullopt when h5dump fails (no such
// attribute).
std::optional<std::vector<std::string>> DumpedStrings(const std::string& path, const std::string& attribute) {
  const auto [output, status] = RunCommand("'" + H5dump() + "' -A -a '" + attribute + "' '" + path + "'");
  if (status != 0) return std::nullopt;
  std::vector<std::string> strings;
  const std::string data = output.substr(std::min(output.find("DATA {"), output.size()));
  const std::regex quoted("\"([^\"]*)\"");
  for (auto it = std::sregex_iterator(data.begin(), data.end(), quoted); it != std::sregex_iterator(); ++it) {
    strings.push_back((*it)[1]);
  }
  return strings;
}

TEST_F(ReportFileTest, GroupsCarryTheUnitsOfTheirAttributes) {
  const std::string h5dump = H5dump();
  if (RunCommand("'" + h5dump + "' --version").second != 0) GTEST_SKIP() << "h5dump not runnable as '" << h5dump << "'";
  const std::string path = PathOf("units.h5");
  WriteReport(ReportWithUnits(), path);
  using Strings = std::vector<std::string>;
  // Name order; micro_batch (no unit) and note (not declared) have none.
  EXPECT_EQ(DumpedStrings(path, "/train/k2/units"), Strings({"step_s=s", "tokens_per_s=tokens/s"}));
  EXPECT_EQ(DumpedStrings(path, "/summary/units"),
            Strings({"all_reduce_peak_busbw_GBps=GB/s", "p2p_median_uni_GBps=GB/s"}));
  EXPECT_EQ(DumpedStrings(path, "/units"), Strings({"n_ranks=ranks"}));
  EXPECT_EQ(DumpedStrings(path, "/repeats/r1/train/k2/units"), Strings({"tokens_per_s=tokens/s"}));
  // A group whose attributes have no unit gets no units attribute.
  EXPECT_EQ(DumpedStrings(path, "/collectives/all_reduce/units"), std::nullopt);
}

TEST_F(ReportFileTest, ReadingSkipsTheUnitsOfAGroup) {
  const std::string path = PathOf("units.h5");
  const Report written = ReportWithUnits();
  WriteReport(written, path);
  const Report read = ReadReport(path);
  ExpectSameGroup(written.root, read.root, "/");
  const Group* point = schema::FindGroup(read.root, schema::kTrainPoint, "k2");
  ASSERT_NE(point, nullptr);
  EXPECT_FALSE(point->attributes.contains("units"));
  EXPECT_FALSE(read.root.attributes.contains("units"));
}

TEST_F(ReportFileTest, AGroupAttributeNamedUnitsIsRefused) {
  Report report = MinimalReport();
  report.root.Child("summary").Set("units", std::string("GB/s"));
  try {
    WriteReport(report, PathOf("units.h5"));
    ADD_FAILURE() << "no error";
  } catch (const RuntimeError& error) {
    EXPECT_NE(std::string(error.what()).find("group '/summary': attribute 'units' is reserved"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace tb
