// `trainbench report`'s views and exports on hand-built reports: what each section shows, runs side by side, JSON
// escaping, CSV quoting, and numbers that read back as the same doubles.
#include "report_view.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>

#include "error.h"
#include "json.h"
#include "console.h"
#include "reporter.h"
#include "validate_outputs.h"

namespace tb {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The table `full_name` ("train.points") of `view`; fails the test when missing.
const ViewTable& TableOf(const RunView& view, const std::string& full_name) {
  for (const ViewTable& table : view.tables) {
    if (table.FullName() == full_name) return table;
  }
  ADD_FAILURE() << "no table " << full_name;
  static const ViewTable kEmpty;
  return kEmpty;
}

const Cell& CellOf(const ViewTable& table, size_t row, const std::string& column) {
  for (size_t c = 0; c < table.columns.size(); ++c) {
    if (table.columns[c].name == column) return table.rows.at(row).at(c);
  }
  ADD_FAILURE() << "no column " << column << " in " << table.FullName();
  static const Cell kNone;
  return kNone;
}

std::string Str(const Cell& cell) { return std::get<std::string>(cell); }
int64_t Int(const Cell& cell) { return std::get<int64_t>(cell); }
double Dbl(const Cell& cell) { return std::get<double>(cell); }

const ReportContextInfo kReport = {"report", {}};

RunView ViewAll(const Report& report, const std::string& label = "run.h5") {
  return ViewReport(report, label, ReportSectionNames());
}

Report BaseReport(const std::string& command) {
  Report report;
  Group& root = report.root;
  root.Set("schema", std::string(kReportSchemaName));
  root.Set("schema_version", kReportSchemaVersion);
  root.Set("command", command);
  root.Set("command_line", "trainbench " + command + " --timeout 600 -o \"x y.h5\"");
  root.Set("status", std::string("complete"));
  root.Set("status_reason", std::string());
  root.Set("start_utc", std::string("2024-05-01T12:00:00Z"));
  root.Set("end_utc", std::string("2024-05-01T12:05:00Z"));
  root.Set("tool_version", std::string("0.1.0"));
  root.Set("n_ranks", int64_t{4});
  root.Set("backend", std::string("nccl"));
  root.Child("config").Set("iters", int64_t{20});
  root.Child("config").Set("threshold", 0.8);
  return report;
}

// 4 ranks on 2 nodes, two H100s per node joined by NVLink.
void AddTopology(Report& report) {
  Group& topology = report.root.Child("topology");
  topology.Set("nccl", std::string("2.21.5"));
  topology.Set("mpi_library", std::string("Open MPI v4.1.4"));
  topology.tables["ranks"]
      .Add("rank", "", std::vector<int64_t>{0, 1, 2, 3})
      .Add("host", "", std::vector<std::string>{"a", "a", "b", "b"})
      .Add("node", "", std::vector<int64_t>{0, 0, 1, 1})
      .Add("local_rank", "", std::vector<int64_t>{0, 1, 0, 1})
      .Add("gpu_index", "", std::vector<int64_t>{0, 1, 0, 1})
      .Add("gpu_name", "", std::vector<std::string>(4, "NVIDIA H100"))
      .Add("cpu_model", "", std::vector<std::string>(4, "Xeon"))
      .Add("cpu_cores", "", std::vector<int64_t>(4, 96));
  topology.tables["gpu_links"]
      .Add("node", "", std::vector<int64_t>{0, 0, 1, 1})
      .Add("peer_access", "", std::vector<int64_t>{1, 1, 1, 0})
      .Add("link", "", std::vector<std::string>{"NVLink x18", "NVLink x18", "NVLink x18", "PCIe"});
}

void AddCollective(Report& report, const std::string& op, double peak_busbw) {
  Group& group = report.root.Child("collectives").Child(op);
  group.Set("dtype", std::string("float"));
  group.Set("n_ranks", int64_t{4});
  group.tables["results"]
      .Add("size_bytes", "B", std::vector<int64_t>{1024, 1048576})
      .Add("count", "elements", std::vector<int64_t>{256, 262144})
      .Add("out_of_place_time_us", "us", std::vector<double>{10.5, 40.25})
      .Add("out_of_place_algbw_GBps", "GB/s", std::vector<double>{0.1, 26.0})
      .Add("out_of_place_busbw_GBps", "GB/s", std::vector<double>{0.15, peak_busbw})
      .Add("out_of_place_wrong", "elements", std::vector<int64_t>{0, 0})
      .Add("in_place_time_us", "us", std::vector<double>{11, 41})
      .Add("in_place_algbw_GBps", "GB/s", std::vector<double>{0.09, 25.5})
      .Add("in_place_busbw_GBps", "GB/s", std::vector<double>{0.14, 38.0})
      .Add("in_place_wrong", "elements", std::vector<int64_t>{-1, -1});
  Group& summary = report.root.Child("summary");
  summary.Set(op + "_peak_busbw_GBps", peak_busbw);
  summary.Set(op + "_peak_busbw_size_bytes", int64_t{1048576});
  summary.Set("wrong_elements_total", int64_t{0});
}

void AddPoint(Group& train, const std::string& name, int64_t ranks, double tokens_per_s, int64_t worst_rank) {
  Group& point = train.Child(name);
  point.Set("ranks", ranks);
  point.Set("tokens_per_s", tokens_per_s);
  point.Set("tokens_per_s_per_rank", tokens_per_s / static_cast<double>(ranks));
  point.Set("mfu_peak", kNaN);
  point.Set("mfu_measured_gemm", 0.25);
  point.Set("scaling_efficiency", ranks == 1 ? kNaN : 0.9);
  point.Set("overlap", 0.75);
  point.Set("step_s", 0.5);
  point.Set("worst_rank", worst_rank);
  std::vector<int64_t> rank_ids;
  std::vector<std::string> hosts, devices;
  for (int64_t r = 0; r < ranks; ++r) {
    rank_ids.push_back(r);
    hosts.push_back("host" + std::to_string(r));
    devices.push_back("GPU " + std::to_string(r));
  }
  point.tables["stall_budget"]
      .Add("rank", "", rank_ids)
      .Add("host", "", hosts)
      .Add("device", "", devices)
      .Add("median_step_s", "s", std::vector<double>(ranks, 0.5))
      .Add("compute_p50", "", std::vector<double>(ranks, 0.8))
      .Add("compute_p95", "", std::vector<double>(ranks, 0.85))
      .Add("compute_p99", "", std::vector<double>(ranks, 0.9));
}

Report TrainReport() {
  Report report = BaseReport("train");
  report.root.Child("model").Set("name", std::string("gpt2-124m"));
  Group& train = report.root.Child("train");
  train.Set("attention", std::string("cudnn-sdpa"));
  train.Set("device", std::string("NVIDIA H100 (GPU 0)"));
  train.Set("peak_device_memory_bytes_max", 7.5e10);
  // Names sort as k1, k10, k2: the view must order them by rank count.
  AddPoint(train, "k1", 1, 1000, 0);
  AddPoint(train, "k10", 10, 9000, 7);
  AddPoint(train, "k2", 2, 1900, 1);
  report.root.Child("summary").Set("train_tokens_per_s", 9000.0);
  return report;
}

TEST(ReportView, ConfigShowsTheRunAndEveryOption) {
  const RunView view = ViewAll(BaseReport("collectives"));
  const ViewTable& run = TableOf(view, "config.run");
  ASSERT_TRUE(run.per_run);
  ASSERT_EQ(run.rows.size(), 1u);
  EXPECT_EQ(Str(CellOf(run, 0, "command")), "collectives");
  EXPECT_EQ(Str(CellOf(run, 0, "status")), "complete");
  EXPECT_EQ(Int(CellOf(run, 0, "n_ranks")), 4);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(CellOf(run, 0, "git_revision")));  // not in this report
  const ViewTable& options = TableOf(view, "config.options");
  ASSERT_EQ(options.rows.size(), 2u);
  EXPECT_EQ(Str(CellOf(options, 0, "option")), "iters");
  EXPECT_EQ(Int(CellOf(options, 0, "value")), 20);
  EXPECT_EQ(Dbl(CellOf(options, 1, "value")), 0.8);
}

TEST(ReportView, TopologyCountsGpusByModelAndLinksByKind) {
  Report report = BaseReport("info");
  AddTopology(report);
  const RunView view = ViewAll(report);
  const ViewTable& summary = TableOf(view, "topology.summary");
  EXPECT_EQ(Int(CellOf(summary, 0, "ranks")), 4);
  EXPECT_EQ(Int(CellOf(summary, 0, "nodes")), 2);
  EXPECT_EQ(Str(CellOf(summary, 0, "hosts")), "a, b");
  EXPECT_EQ(Str(CellOf(summary, 0, "gpus")), "4 x NVIDIA H100");
  EXPECT_EQ(Str(CellOf(summary, 0, "cpus")), "2 x Xeon (96 cores)");  // one per node
  EXPECT_EQ(Str(CellOf(summary, 0, "gpu_links")), "NVLink x18 (peer access): 3 pairs; PCIe (no peer access): 1 pair");
  EXPECT_EQ(Str(CellOf(summary, 0, "nccl")), "2.21.5");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(CellOf(summary, 0, "cudnn")));
}

TEST(ReportView, AnEmulatedFabricIsSaidUnderTheRunAndInItsTable) {
  Report report = BaseReport("collectives");
  AddTopology(report);
  EXPECT_EQ(EmulatedFabricOf(report), "");  // a report before the attribute
  EXPECT_EQ(EmulatedFabricLine(report), "");
  EXPECT_EQ(IntraNodeFabric(report), "NVLink x18, PCIe");
  EXPECT_TRUE(ViewAll(report).notes.empty());

  report.root.Set("emulated_fabric", std::string("pcie"));
  report.root.Set("emulated_fabric_environment", std::string("NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0"));
  EXPECT_EQ(EmulatedFabricOf(report), "pcie");
  const std::string line =
      "intra-node fabric: PCIe emulated on NVLink x18, PCIe (NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0)";
  EXPECT_EQ(EmulatedFabricLine(report), line);
  const RunView view = ViewAll(report, "e.h5");
  EXPECT_EQ(view.notes, std::vector<std::string>{line});
  const ViewTable& run = TableOf(view, "config.run");
  EXPECT_EQ(Str(CellOf(run, 0, "emulated_fabric")), "pcie");
  EXPECT_EQ(Str(CellOf(run, 0, "emulated_fabric_environment")), "NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0");
  EXPECT_NE(ReportViews("text", kReport, {view}).find("#   run 1: e.h5\n#     " + line + "\n"), std::string::npos);

  // One GPU per node: no pair for the topology to name.
  report.root.Child("topology").tables.erase("gpu_links");
  EXPECT_EQ(EmulatedFabricLine(report), "intra-node fabric: PCIe emulated on no GPU pair (one GPU per node) "
                                        "(NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0)");
  // A run of the node's own fabric writes the attributes empty.
  report.root.Set("emulated_fabric", std::string());
  report.root.Set("emulated_fabric_environment", std::string());
  EXPECT_EQ(EmulatedFabricOf(report), "");
  EXPECT_EQ(EmulatedFabricLine(report), "");
}

TEST(ReportView, CollectivesHeadlineAndEveryRow) {
  Report report = BaseReport("collectives");
  AddCollective(report, "all_reduce", 39.5);
  AddCollective(report, "all_gather", 30.0);
  const RunView view = ViewAll(report);
  const ViewTable& peak = TableOf(view, "collectives.peak");
  EXPECT_EQ(Dbl(CellOf(peak, 0, "all_reduce_peak_busbw_GBps")), 39.5);
  EXPECT_EQ(Dbl(CellOf(peak, 0, "all_gather_peak_busbw_GBps")), 30.0);
  EXPECT_EQ(Int(CellOf(peak, 0, "wrong_elements_total")), 0);
  const ViewTable& results = TableOf(view, "collectives.results");
  ASSERT_EQ(results.rows.size(), 4u);
  EXPECT_EQ(Str(CellOf(results, 0, "op")), "all_gather");
  EXPECT_EQ(Str(CellOf(results, 3, "op")), "all_reduce");
  EXPECT_EQ(Int(CellOf(results, 3, "size_bytes")), 1048576);
  EXPECT_EQ(Dbl(CellOf(results, 3, "out_of_place_busbw_GBps")), 39.5);
  EXPECT_EQ(Int(CellOf(results, 3, "in_place_wrong")), -1);
  EXPECT_EQ(Int(CellOf(results, 3, "ranks")), 4);
}

TEST(ReportView, P2pFlaggedPairsAndTheSlowestLink) {
  Report report = BaseReport("p2p");
  Group& p2p = report.root.Child("p2p");
  p2p.Set("median_uni_GBps", 40.0);
  p2p.matrices["uni_bw_GBps"] = Matrix{"", "GB/s", 2, 2, {kNaN, 40.0, 12.5, kNaN}};
  p2p.tables["flagged"]
      .Add("src_rank", "", std::vector<int64_t>{1})
      .Add("dst_rank", "", std::vector<int64_t>{0})
      .Add("src_host", "", std::vector<std::string>{"b"})
      .Add("dst_host", "", std::vector<std::string>{"a"})
      .Add("src_gpu", "", std::vector<std::string>{"H100 #0"})
      .Add("dst_gpu", "", std::vector<std::string>{"H100 #0"})
      .Add("uni_bw_GBps", "GB/s", std::vector<double>{12.5})
      .Add("fraction_of_median", "", std::vector<double>{0.3125});
  const RunView view = ViewAll(report);
  const ViewTable& summary = TableOf(view, "p2p.summary");
  EXPECT_EQ(Dbl(CellOf(summary, 0, "median_uni_GBps")), 40.0);
  EXPECT_EQ(Dbl(CellOf(summary, 0, "min_uni_GBps")), 12.5);
  EXPECT_EQ(Int(CellOf(summary, 0, "flagged_pairs")), 1);
  const ViewTable& flagged = TableOf(view, "p2p.flagged");
  ASSERT_EQ(flagged.rows.size(), 1u);
  EXPECT_EQ(Str(CellOf(flagged, 0, "src_host")), "b");
  EXPECT_EQ(Dbl(CellOf(flagged, 0, "fraction_of_median")), 0.3125);
}

TEST(ReportView, TrainPointsInRankOrderHeadlineIsTheLargest) {
  const RunView view = ViewAll(TrainReport());
  const ViewTable& points = TableOf(view, "train.points");
  ASSERT_EQ(points.rows.size(), 3u);
  EXPECT_EQ(Str(CellOf(points, 0, "point")), "k1");
  EXPECT_EQ(Str(CellOf(points, 1, "point")), "k2");
  EXPECT_EQ(Str(CellOf(points, 2, "point")), "k10");
  EXPECT_EQ(Str(CellOf(points, 2, "worst_rank_host")), "host7");
  EXPECT_EQ(Str(CellOf(points, 2, "worst_rank_device")), "GPU 7");
  EXPECT_TRUE(std::isnan(Dbl(CellOf(points, 0, "scaling_efficiency"))));

  const ViewTable& summary = TableOf(view, "train.summary");
  EXPECT_EQ(Str(CellOf(summary, 0, "point")), "k10");
  EXPECT_EQ(Dbl(CellOf(summary, 0, "tokens_per_s")), 9000.0);
  EXPECT_EQ(Dbl(CellOf(summary, 0, "tokens_per_s_per_rank")), 900.0);
  EXPECT_EQ(Str(CellOf(summary, 0, "attention")), "cudnn-sdpa");
  EXPECT_EQ(Str(CellOf(summary, 0, "model")), "gpt2-124m");
  EXPECT_EQ(Dbl(CellOf(summary, 0, "peak_device_memory_bytes_max")), 7.5e10);

  const ViewTable& budget = TableOf(view, "train.stall_budget");
  ASSERT_EQ(budget.rows.size(), 13u);  // 1 + 2 + 10 ranks
  EXPECT_EQ(Str(CellOf(budget, 3, "point")), "k10");
  EXPECT_EQ(Dbl(CellOf(budget, 3, "compute_p95")), 0.85);
  // Phases the report lacks stay empty rather than invented.
  EXPECT_TRUE(std::holds_alternative<std::monostate>(CellOf(budget, 3, "data_wait_p50")));
}

TEST(ReportView, IoCheckpointsAcrossRanksAndTheStorageSweepOrder) {
  Report report = BaseReport("train");
  Group& io = report.root.Child("io");
  io.Set("sweep_data_wait_share", 0.05);
  io.Set("throttle_at_data_wait_share_MBps", 12.5);
  for (const char* name : {"k1_throttle0.5", "k1_throttle100", "k1_throttle20"}) {
    io.Child(name).Set("data_wait_share", std::string(name) == "k1_throttle0.5" ? 0.4 : 0.01);
  }
  Group& slow = io.Child("k1_throttle0.5");
  slow.tables["checkpoints"]
      .Add("step", "", std::vector<int64_t>{5, 5, 10, 10})
      .Add("rank", "", std::vector<int64_t>{0, 1, 0, 1})
      .Add("mode", "", std::vector<std::string>(4, "async"))
      .Add("bytes", "B", std::vector<int64_t>(4, 500'000'000))
      .Add("stall_s", "s", std::vector<double>{0.1, 0.3, 0.2, 0.1})
      .Add("write_s", "s", std::vector<double>{0.5, 1.0, 0.25, 0.5})
      .Add("verified", "", std::vector<int64_t>{1, 1, 1, 0})
      .Add("ok", "", std::vector<int64_t>{1, 1, 0, 1})
      .Add("error", "", std::vector<std::string>{"", "", "disk full", ""});
  io.tables["throttle_sweep"]
      .Add("io_throttle_MBps", "MB/s", std::vector<double>{100, 20, 0.5})
      .Add("data_wait_share", "", std::vector<double>{0.01, 0.01, 0.4});

  const RunView view = ViewAll(report);
  const ViewTable& points = TableOf(view, "io.points");
  ASSERT_EQ(points.rows.size(), 3u);
  EXPECT_EQ(Str(CellOf(points, 0, "point")), "k1_throttle100");  // the order --io-throttle ran them in
  EXPECT_EQ(Str(CellOf(points, 1, "point")), "k1_throttle20");
  EXPECT_EQ(Str(CellOf(points, 2, "point")), "k1_throttle0.5");

  const ViewTable& checkpoints = TableOf(view, "io.checkpoints");
  ASSERT_EQ(checkpoints.rows.size(), 2u);
  EXPECT_EQ(Int(CellOf(checkpoints, 0, "bytes")), 1'000'000'000);
  EXPECT_EQ(Dbl(CellOf(checkpoints, 0, "stall_s_max")), 0.3);
  EXPECT_EQ(Dbl(CellOf(checkpoints, 0, "write_GBps")), 1.0);  // 1e9 B over the slower slice's 1 s
  EXPECT_EQ(Int(CellOf(checkpoints, 0, "ok")), 1);
  EXPECT_EQ(Int(CellOf(checkpoints, 1, "ok")), 0);
  EXPECT_EQ(Int(CellOf(checkpoints, 1, "verified")), 0);
  EXPECT_EQ(Str(CellOf(checkpoints, 1, "error")), "disk full");

  const ViewTable& summary = TableOf(view, "io.summary");
  EXPECT_EQ(Str(CellOf(summary, 0, "point")), "k1_throttle0.5");
  EXPECT_EQ(Dbl(CellOf(summary, 0, "data_wait_share")), 0.4);
  EXPECT_EQ(Int(CellOf(summary, 0, "checkpoints")), 2);
  EXPECT_EQ(Dbl(CellOf(summary, 0, "throttle_at_data_wait_share_MBps")), 12.5);
  EXPECT_EQ(TableOf(view, "io.throttle_sweep").rows.size(), 3u);
}

TEST(ReportView, OnlyTheSectionsAReportHasAndTheChosenOnes) {
  Report report = BaseReport("collectives");
  AddCollective(report, "all_reduce", 10);
  for (const char* section : {"topology", "p2p", "train", "io"}) EXPECT_TRUE(ViewSection(report, section).empty());
  const RunView chosen = ViewReport(report, "c.h5", {"collectives"});
  ASSERT_EQ(chosen.tables.size(), 2u);
  EXPECT_EQ(chosen.tables[0].FullName(), "collectives.peak");
  EXPECT_TRUE(ViewReport(report, "c.h5", {"train"}).tables.empty());
  EXPECT_THROW(ViewSection(report, "bogus"), std::invalid_argument);
}

// JSON text of one value, as the exports write it (DumpJson, nlohmann-json).
std::string JsonText(const Json& value) { return DumpJson(value, -1); }

TEST(Export, JsonStringEscapes) {
  EXPECT_EQ(JsonText("plain"), "\"plain\"");
  EXPECT_EQ(JsonText("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonText("l1\nl2\r\t\b\f"), "\"l1\\nl2\\r\\t\\b\\f\"");
  EXPECT_EQ(JsonText(std::string("nul\0x\x1f", 6)), "\"nul\\u0000x\\u001f\"");
  EXPECT_EQ(JsonText("/ and \x7f stay"), "\"/ and \x7f stay\"");
  EXPECT_EQ(JsonText("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"), "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");  // é € 😀
  // Invalid UTF-8 (a stray continuation byte, an overlong form, a surrogate, a cut sequence) cannot pass through: each
  // maximal invalid subpart becomes one U+FFFD (Unicode's best practice, as Python's decode(errors="replace")).
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(JsonText("a\x80z"), "\"a" + fffd + "z\"");
  EXPECT_EQ(JsonText("\xc0\xaf"), "\"" + fffd + fffd + "\"");
  EXPECT_EQ(JsonText("\xed\xa0\x80"), "\"" + fffd + fffd + fffd + "\"");
  EXPECT_EQ(JsonText("\xe2\x82"), "\"" + fffd + "\"");
}

TEST(Export, CsvQuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(CsvField("plain text"), "plain text");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField("cr\r"), "\"cr\r\"");
  EXPECT_EQ(CsvField(" edge"), "\" edge\"");
  EXPECT_EQ(CsvField("#not a comment"), "\"#not a comment\"");
  EXPECT_EQ(CsvField(""), "");
}

// Doubles whose shortest form is tricky: tiny and huge exponents, subnormals, long mantissas, negative zero.
const double kHardDoubles[] = {0.1,     1.0 / 3.0, 2.0 / 3.0,  1e-300, 5e-324,      DBL_MAX,       DBL_MIN,
                               -0.0,    123456789.123456789,  1e21,   9007199254740993.0, 0.30000000000000004,
                               2.5e-7, -1.7976931348623157e308, 294.9679980460047, 3250224470.3883505};

TEST(Export, NumbersReadBackAsTheSameDoubles) {
  for (double value : kHardDoubles) {
    for (const std::string& text : {JsonText(value), CsvNumber(value)}) {
      char* end = nullptr;
      const double back = std::strtod(text.c_str(), &end);
      EXPECT_EQ(*end, '\0') << text;
      EXPECT_EQ(std::memcmp(&back, &value, sizeof value), 0) << text << " read back as " << back;
    }
  }
  EXPECT_EQ(JsonText(0.1), "0.1");  // shortest, not %.17g's 0.10000000000000001
  EXPECT_EQ(JsonText(kNaN), "null");
  EXPECT_EQ(JsonText(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(CsvNumber(kNaN), "nan");
  EXPECT_EQ(CsvNumber(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_TRUE(std::isnan(std::strtod(CsvNumber(kNaN).c_str(), nullptr)));
}

// The number after `"key": ` in `json` (the first occurrence at or after `from`).
double JsonValueAfter(const std::string& json, const std::string& key, size_t from = 0) {
  const std::string marker = "\"" + key + "\": ";
  const size_t at = json.find(marker, from);
  EXPECT_NE(at, std::string::npos) << key;
  return at == std::string::npos ? kNaN : std::strtod(json.c_str() + at + marker.size(), nullptr);
}

TEST(Export, JsonHoldsEveryRunWithNumbersAsNumbers) {
  Report train = TrainReport();
  train.root.Child("train").Child("k10").Set("tokens_per_s", 1.0 / 3.0);
  Report collectives = BaseReport("collectives");
  AddCollective(collectives, "all_reduce", 39.5);
  const std::string json = ReportViews("json", kReport, {ViewAll(train, "t \"1\".h5"), ViewAll(collectives, "c.h5")});

  EXPECT_EQ(json.front(), '{');
  EXPECT_NE(json.find("\"file\": \"t \\\"1\\\".h5\""), std::string::npos);
  EXPECT_NE(json.find("\"file\": \"c.h5\""), std::string::npos);
  const Json summary = Json::parse(json)["runs"][0]["train"]["summary"];  // a headline table: one object
  ASSERT_TRUE(summary.is_object());
  EXPECT_EQ(summary.begin().key(), "model");  // columns in the view's order
  const double tokens = summary["tokens_per_s"].get<double>();
  EXPECT_EQ(std::memcmp(&tokens, &kHardDoubles[1], sizeof tokens), 0);  // 1/3 exactly
  EXPECT_NE(json.find("\"mfu_peak\": null"), std::string::npos);        // NaN
  EXPECT_NE(json.find("\"git_revision\": null"), std::string::npos);    // absent
  EXPECT_NE(json.find("\"n_ranks\": 4,"), std::string::npos);
  EXPECT_EQ(JsonValueAfter(json, "all_reduce_peak_busbw_GBps", json.find("\"runs\"")), 39.5);
  EXPECT_NE(json.find("\"train.points\": {"), std::string::npos);  // units of each table
  EXPECT_NE(json.find("\"step_s\": \"s\""), std::string::npos);
  EXPECT_EQ(json.find("nan"), std::string::npos);
  EXPECT_EQ(json.find("inf"), std::string::npos);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

TEST(Export, CsvOneBlockPerTableWithARunColumn) {
  Report a = BaseReport("collectives");
  AddCollective(a, "all_reduce", 39.5);
  Report b = BaseReport("collectives");
  AddCollective(b, "all_reduce", 20.0);
  AddCollective(b, "all_gather", 1.0 / 3.0);
  const std::string csv = ReportViews("csv", kReport, {ViewReport(a, "a,1.h5", {"collectives"}), ViewReport(b, "b.h5", {"collectives"})});
  const std::vector<std::string> lines = Lines(csv);
  ASSERT_GE(lines.size(), 6u);
  EXPECT_EQ(lines[0], "# collectives.peak");
  EXPECT_EQ(lines[1].rfind("# units,GB/s,B,", 0), 0u) << lines[1];
  // The union of both runs' columns, in order of first appearance.
  EXPECT_EQ(lines[2],
            "run,all_reduce_peak_busbw_GBps,all_reduce_peak_busbw_size_bytes,wrong_elements_total,"
            "all_gather_peak_busbw_GBps,all_gather_peak_busbw_size_bytes");
  EXPECT_EQ(lines[3], "\"a,1.h5\",39.5,1048576,0,,");
  EXPECT_EQ(lines[4], "b.h5,20,1048576,0,0.3333333333333333,1048576");
  EXPECT_EQ(lines[5], "");
  EXPECT_EQ(lines[6], "# collectives.results");
  EXPECT_EQ(std::count(lines.begin(), lines.end(), std::string("")), 1);  // blocks apart, none empty inside
  // 2 sizes of all_reduce in a, 2 sizes of each op in b.
  EXPECT_EQ(lines.size(), 7u + 2 + 2 + 4);
}

TEST(Export, TextSideBySideThenRunByRun) {
  Report collectives = BaseReport("collectives");
  AddCollective(collectives, "all_reduce", 39.5);
  const std::string text = ReportViews("text", kReport, {ViewAll(TrainReport(), "t.h5"), ViewAll(collectives, "c.h5")});
  const std::vector<std::string> lines = Lines(text);
  EXPECT_EQ(lines[0], "# trainbench report: 2 runs");
  EXPECT_EQ(lines[1], "#   run 1: t.h5");
  EXPECT_EQ(lines[2], "#   run 2: c.h5");
  bool side_by_side = false, tokens = false, efficiency = false, per_run_heading = false, wide = false;
  for (const std::string& row : lines) {
    const std::string line = row.substr(row.find_first_not_of(' ') == std::string::npos ? 0 : row.find_first_not_of(' '));
    side_by_side = side_by_side || (line.find("run 1") != std::string::npos && line.find("run 2") != std::string::npos);
    // tokens/s of the largest point for the train run; the collectives run has none.
    tokens = tokens || (line.rfind("tokens_per_s ", 0) == 0 && line.find("9000") != std::string::npos &&
                        line.substr(line.size() - 1) == "-");
    efficiency = efficiency || (line.rfind("scaling_efficiency", 0) == 0 && line.find("90.0") != std::string::npos);
    wide = wide || line == "# command_line, run 2: trainbench collectives --timeout 600 -o \"x y.h5\"";
    per_run_heading = per_run_heading || line == "# collectives.results: collectives, per operation and size, run 2 (c.h5)";
  }
  EXPECT_TRUE(side_by_side);
  EXPECT_TRUE(tokens);
  EXPECT_TRUE(efficiency);
  EXPECT_TRUE(per_run_heading);
  EXPECT_TRUE(wide);  // too long for a column: under the table
}

// Each format's reporter; the runs of several ReportRuns calls accumulate, as if given at once.
TEST(Export, MakeReporterPerFormat) {
  const std::vector<RunView> runs = {ViewAll(TrainReport(), "t.h5")};
  for (const std::string& format : ReportFormatNames()) {
    std::unique_ptr<ViewReporter> reporter = MakeReporter(format);
    reporter->ReportContext(kReport);
    reporter->ReportRuns(runs);
    reporter->ReportRuns(runs);
    EXPECT_EQ(reporter->Finalize(), ReportViews(format, kReport, {runs[0], runs[0]})) << format;
  }
  EXPECT_EQ(ReportViews("text", kReport, runs).rfind("# trainbench report: 1 run\n", 0), 0u);
  EXPECT_EQ(ReportViews("text", {"cost", {}}, runs).rfind("# trainbench cost: 1 run\n", 0), 0u);
  EXPECT_EQ(ReportViews("csv", kReport, runs).rfind("# config.run\n", 0), 0u);
  EXPECT_EQ(Json::parse(ReportViews("json", kReport, runs))["runs"][0]["file"], "t.h5");
  EXPECT_THROW(MakeReporter("xml"), std::invalid_argument);
}

// The HDF5 reporter writes the Report it was given, as WriteReport does, at Finalize and not before.
TEST(Export, Hdf5ReporterWritesTheReport) {
  const std::string path = ::testing::TempDir() + "/hdf5_reporter_test.h5";
  std::remove(path.c_str());
  const Report written = TrainReport();
  Hdf5Reporter reporter(path);
  reporter.ReportContext({"train", {}});
  reporter.ReportRuns(written);
  EXPECT_FALSE(std::ifstream(path).good());
  EXPECT_EQ(reporter.Finalize(), "");
  const RunView read = ViewAll(ReadReport(path), "t.h5");
  EXPECT_EQ(ReportViews("json", kReport, {read}), ReportViews("json", kReport, {ViewAll(written, "t.h5")}));
  std::remove(path.c_str());
  EXPECT_THROW(Hdf5Reporter(path).Finalize(), std::logic_error);
}


// --- the console's width: headline columns in kConsoleWidth, the rest named (DESIGN.md, "Outputs people read") ---

// The lines of `text` wider than the console, for the failure message.
std::string WideLines(const std::string& text) {
  std::string wide;
  for (const std::string& line : Lines(text)) {
    if (line.size() > kConsoleWidth) wide += std::to_string(line.size()) + ": " + line.substr(0, 80) + "...\n";
  }
  return wide;
}

bool HasLine(const std::string& text, const std::string& line) {
  const std::vector<std::string> lines = Lines(text);
  return std::find(lines.begin(), lines.end(), line) != lines.end();
}

// The first line of `text` that starts with `prefix`, or "".
std::string LineStartingWith(const std::string& text, const std::string& prefix) {
  for (const std::string& line : Lines(text)) {
    if (line.rfind(prefix, 0) == 0) return line;
  }
  return "";
}

// A detail table of 40 numeric columns, every 4th one headline (tokens_0, tokens_4, ...), the others detail.
RunView WideRun() {
  ViewTable table;
  table.section = "train";
  table.name = "wide";
  table.title = "forty columns";
  table.columns.push_back(ViewColumn{"point", ""});
  std::vector<Cell> row = {std::string("k8")};
  for (int c = 0; c < 40; ++c) {
    ViewColumn column{(c % 4 == 0 ? "tokens_" : "extra_") + std::to_string(c), "tokens/s", 0};
    if (c % 4 != 0) column.console = Console::kDetail;
    table.columns.push_back(column);
    row.push_back(1000.0 * c);
  }
  table.rows.push_back(row);
  return RunView{"w.h5", {table}};
}

TEST(ConsoleWidth, DetailColumnsAreLeftOutAndNamedWithWhereTheyAre) {
  const RunView run = WideRun();
  ReportContextInfo context = kReport;
  context.left_out_hint = "--all-columns, or --format csv|json";
  const std::string text = ReportViews("text", context, {run});
  EXPECT_EQ(WideLines(text), "");
  const std::string header = LineStartingWith(text, "# point");
  EXPECT_NE(header.find("tokens_36"), std::string::npos) << header;
  EXPECT_EQ(header.find("extra_1"), std::string::npos) << header;
  const std::string left_out = LineStartingWith(text, "# 30 more columns (--all-columns, or --format csv|json): ");
  EXPECT_EQ(left_out.rfind("# 30 more columns (--all-columns, or --format csv|json): extra_1, extra_2, extra_3, extra_5", 0),
            0u) << text;
  EXPECT_TRUE(left_out.ends_with(", ...")) << left_out;  // as many names as fit one line
  EXPECT_LE(left_out.size(), kConsoleWidth);

  // --all-columns: every column, as wide as it is, nothing named as left out.
  context.all_columns = true;
  const std::string all = ReportViews("text", context, {run});
  EXPECT_NE(LineStartingWith(all, "# point").find("extra_39"), std::string::npos);
  EXPECT_EQ(LineStartingWith(all, "# 30 more"), "");
  EXPECT_NE(WideLines(all), "");
  // CSV and JSON: every column.
  EXPECT_NE(ReportViews("csv", kReport, {run}).find(",extra_39\n"), std::string::npos);
  EXPECT_EQ(Json::parse(ReportViews("json", kReport, {run}))["runs"][0]["train"]["wide"][0].size(), 41u);
}

TEST(ConsoleWidth, HeadlineColumnsThatDoNotFitAreLeftOutFromTheRight) {
  RunView run = WideRun();
  for (ViewColumn& column : run.tables[0].columns) column.console = Console::kHeadline;
  const std::string text = ReportViews("text", kReport, {run});
  EXPECT_EQ(WideLines(text), "");
  const std::string header = LineStartingWith(text, "# point");
  EXPECT_NE(header.find("tokens_0"), std::string::npos);
  EXPECT_EQ(header.find("extra_39"), std::string::npos);
  EXPECT_NE(LineStartingWith(text, "# 30 more columns (in the JSON export): extra_1"), "") << text;
  // The row keeps the values of the columns it shows, in order.
  const std::string row = LineStartingWith(text, "     k8");
  EXPECT_LT(row.find(" 1000 "), row.find(" 2000 ")) << row;
  EXPECT_LT(row.find(" 2000 "), row.find(" 9000")) << row;
}

TEST(ConsoleWidth, KeyedColumnsGoUnderTheirKeysHeading) {
  Report report = BaseReport("collectives");
  AddCollective(report, "all_reduce", 39.5);
  const std::string text = ReportViews("text", kReport, {ViewReport(report, "c.h5", {"collectives"})});
  EXPECT_EQ(WideLines(text), "");
  const std::vector<std::string> lines = Lines(text);
  const auto titles = std::find_if(lines.begin(), lines.end(),
                                   [](const std::string& l) { return l.find(" op size_bytes") != std::string::npos; });
  ASSERT_NE(titles, lines.end()) << text;
  const std::string& groups = *(titles - 1);
  // nccl-tests' layout: each mode's heading over its time, algbw, busbw and wrong.
  ASSERT_NE(groups.find("out_of_place"), std::string::npos) << groups;
  ASSERT_NE(groups.find("in_place"), std::string::npos) << groups;
  EXPECT_EQ(titles->find("out_of_place_busbw_GBps"), std::string::npos) << *titles;
  EXPECT_EQ(titles->find(" time_us"), groups.find("out_of_place") - 1) << groups << "\n" << *titles;
  EXPECT_EQ(titles->rfind(" time_us"), groups.find("in_place") - 1) << groups << "\n" << *titles;
  // dtype, ranks and split are the run's, the same on every row: named as left out.
  EXPECT_TRUE(HasLine(text, "# 4 more columns (in the JSON export): dtype, ranks, split, communicators")) << text;
}

// The text of the '#' lines under the row `row` (its notes, wrapped), joined by spaces.
std::string TextUnder(const std::vector<std::string>& lines, std::vector<std::string>::const_iterator row) {
  std::string under;
  for (auto line = row + 1; line != lines.end() && line->rfind("#  ", 0) == 0; ++line) {
    under += (under.empty() ? "" : " ") + line->substr(line->find_first_not_of("# "));
  }
  return under;
}

// A table whose cells hold long text: the note under its row, a cell too wide moved under its row, the line wrapped.
TEST(ConsoleWidth, LongTextGoesUnderItsRowOnCommentLines) {
  const std::string message = "the wrong data came from rank 3 (" + std::string(90, 'h') + ") and " +
                              "the job was aborted after it waited for 600 s in all_reduce of 1 GiB";
  const std::string host = "node-" + std::string(70, 'x') + ".cluster.example.org";
  ViewTable table;
  table.section = "validate";
  table.name = "checks";
  table.title = "checks";
  table.columns = {{"verdict", ""}, {"check", "", 2, false, nullptr, "", Console::kWhole}, {"host", ""},
                   {"measured", "GB/s"}, {"source", "", 2, false, nullptr, "", Console::kAside},
                   {"message", "", 2, false, nullptr, "", Console::kNote}};
  table.rows = {{std::string("fail"), std::string("collectives.all_reduce.busbw_GBps.large"), host, 12.5,
                 std::string("baseline b.h5"), message},
                {std::string("pass"), std::string("run.status"), std::string("a"), Cell(), Cell(), Cell()}};
  const std::string text = ReportViews("text", kReport, {RunView{"v.h5", {table}}});
  EXPECT_EQ(WideLines(text), "") << text;
  const std::vector<std::string> lines = Lines(text);
  const auto row = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.find("large") != std::string::npos; });
  ASSERT_NE(row, lines.end()) << text;
  EXPECT_NE(row->find(" (below) "), std::string::npos) << *row;  // the host moved out of the table
  EXPECT_NE(row->find(" 12.50"), std::string::npos) << *row;
  // Under the row: '#' lines, the message first, then the aside and the moved host; nothing lost.
  EXPECT_EQ(TextUnder(lines, row), message + " (source: baseline b.h5; host: " + host + ")") << text;
  // A row with nothing to say has no line under it.
  const auto pass = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.find("run.status") != std::string::npos; });
  ASSERT_NE(pass, lines.end());
  EXPECT_TRUE(pass + 1 == lines.end() || (pass + 1)->empty()) << *(pass + 1);
}

// validate's checks on the console: a row per check (verdict, state, family, key, rank, host, measured, expected, unit)
// within kConsoleWidth, its message on the lines under it with the GPU, the tolerance and where the expectation came
// from.
TEST(ConsoleWidth, ValidateChecksRowThenItsMessage) {
  Report report = BaseReport("train");
  AddTopology(report);
  Check slow;
  slow.figure.key = "train.step_s.rank3";
  slow.figure.family = "train";
  slow.figure.unit = "s";
  slow.figure.value = 0.75;
  slow.figure.subject = {"3", "gpu-node-017.cluster.example.org", "NVIDIA H100 80GB HBM3", ""};
  slow.expected = 0.5;
  slow.tolerance = 0.5;
  slow.source = "peers: median of the other 3 ranks, robust z limit 3.5, floor 50%";
  slow.verdict = Verdict::kFail;
  slow.message = "robust z 9.10, +50.0% against the others' median: straggler on gpu-node-017.cluster.example.org "
                 "(NVIDIA H100 80GB HBM3)";
  Check version;
  version.figure.key = "environment.mpi_library";
  version.figure.family = "environment";
  version.figure.is_text = true;
  version.figure.text = "Open MPI v5.0.3, package: Open MPI builder@host Distribution, ident: 5.0.3";
  version.verdict = Verdict::kUnknown;
  version.message = "no reference: give --baseline or --history";
  const RunView view = ValidateView("night.h5", report, {slow, version});
  const std::string text = ReportViews("text", {"validate", {"night.h5"}}, {view});
  EXPECT_EQ(WideLines(text), "") << text;
  const std::vector<std::string> lines = Lines(text);
  const auto row = std::find_if(lines.begin(), lines.end(),
                                [](const std::string& l) { return l.find(" train.step_s.rank3 ") != std::string::npos; });
  ASSERT_NE(row, lines.end()) << text;
  std::istringstream cells(*row);
  std::vector<std::string> words;
  for (std::string word; cells >> word;) words.push_back(word);
  ASSERT_EQ(words.size(), 9u) << *row;
  EXPECT_EQ(std::vector<std::string>(words.begin(), words.begin() + 5),
            (std::vector<std::string>{"fail", "degraded", "train", "train.step_s.rank3", "3"})) << *row;
  EXPECT_EQ(std::vector<std::string>(words.end() - 3, words.end()), (std::vector<std::string>{"0.75", "0.5", "s"})) << *row;
  EXPECT_EQ(TextUnder(lines, row).rfind(slow.message + " (gpu: NVIDIA H100 80GB HBM3; tolerance: 0.500; source: " +
                                            slow.source + ";", 0),
            0u) << text;
  EXPECT_NE(TextUnder(lines, row).find("host: gpu-node-017.cluster.example.org"), std::string::npos);  // whole
  // A measured text too wide for its column: under its row too, whole.
  const auto text_row = std::find_if(lines.begin(), lines.end(),
                                     [](const std::string& l) { return l.find(" environment.mpi_library ") != std::string::npos; });
  ASSERT_NE(text_row, lines.end());
  EXPECT_EQ(TextUnder(lines, text_row), version.message + " (measured: " + version.figure.text + ")");
}

// Many runs side by side: blocks of runs that fit, every run's value in one of them.
TEST(ConsoleWidth, ManyRunsSideBySideInBlocks) {
  std::vector<RunView> runs;
  for (int run = 0; run < 14; ++run) {
    Report report = TrainReport();
    report.root.Child("train").Child("k10").Set("tokens_per_s", 1000.0 + run);
    runs.push_back(ViewReport(report, "run" + std::to_string(run) + ".h5", {"train"}));
  }
  const std::string text = ReportViews("text", kReport, runs);
  EXPECT_EQ(WideLines(text), "");
  // 5 runs of 10 characters and more fit beside the widest field and unit: 3 blocks, about as wide.
  EXPECT_TRUE(HasLine(text, "# runs 1-5 of 14") && HasLine(text, "# runs 6-10 of 14") && HasLine(text, "# runs 11-14 of 14"))
      << text.substr(0, 3000);
  for (int run = 0; run < 14; ++run) EXPECT_NE(text.find(" " + std::to_string(1000 + run)), std::string::npos) << run;
}

TEST(ConsoleWidth, WrapLinesKeepsClausesBreaksAtSpacesAndCutsWhatIsLongerThanALine) {
  EXPECT_EQ(WrapLines("one two three", "# ", "#   ", 9), (std::vector<std::string>{"# one two", "#   three"}));
  EXPECT_EQ(WrapLines("short", "# x: ", "#   "), (std::vector<std::string>{"# x: short"}));
  // A clause that fits a line is kept whole on one.
  EXPECT_EQ(WrapLines("ab cd; ef gh ij", "# ", "# ", 15), (std::vector<std::string>{"# ab cd;", "# ef gh ij"}));
  EXPECT_EQ(WrapLines("ab; cd; ef gh ij", "# ", "# ", 15), (std::vector<std::string>{"# ab; cd;", "# ef gh ij"}));
  const std::string path = "/" + std::string(25, 'p');
  EXPECT_EQ(WrapLines("at " + path, "# ", "#   ", 12),
            (std::vector<std::string>{"# at /pppppp", "#   pppppppp", "#   pppppppp", "#   ppp"}));
  for (const std::string& line : WrapLines(std::string(500, 'x') + " y", "# ", "#   ")) EXPECT_LE(line.size(), kConsoleWidth);
}

}  // namespace
}  // namespace tb
