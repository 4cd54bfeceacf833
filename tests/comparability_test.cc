// Comparability of runs (results/analysis/comparability.h) on hand-built reports: which variables differ, which
// differences are warned about and which are what a comparison is about, the warning text, --require-comparable,
// and the comparison in the text, CSV and JSON exports.
#include "comparability.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "error.h"
#include "json.h"
#include "reporter.h"

namespace tb {
namespace {

// A train run of 8 ranks on 1 node (the fields comparability reads, and nothing else).
Report TrainRun() {
  Report report;
  Group& root = report.root;
  root.Set("command", std::string("train"));
  root.Set("tool_version", std::string("0.1.0"));
  root.Set("git_revision", std::string("abc123"));
  root.Set("n_ranks", int64_t{8});
  root.Set("n_nodes", int64_t{1});
  Group& config = root.Child("config");
  config.Set("model", std::string("gpt-1b"));
  config.Set("data", std::string());
  config.Set("micro_batch", int64_t{8});
  config.Set("seq", int64_t{1024});
  config.Set("global_batch", int64_t{64});
  config.Set("warmup_steps", int64_t{2});
  config.Set("steps", int64_t{20});
  config.Set("parallel", std::string("dp"));
  config.Set("tensor_parallel", int64_t{1});
  Group& model = root.Child("model");
  model.Set("layers", int64_t{24});
  model.Set("d_model", int64_t{2048});
  model.Set("heads", int64_t{16});
  model.Set("vocab", int64_t{50257});
  Group& topology = root.Child("topology");
  topology.Set("cuda_runtime", std::string("13.0"));
  topology.Set("cudnn", std::string("9.19.0"));
  topology.Set("nccl", std::string("2.28.9"));
  topology.Set("mpi_library", std::string("Open MPI v4.1.4"));
  topology.tables["gpu_links"].Add("link", "", std::vector<std::string>{"NVLink x18", "NVLink x18"});
  Group& train = root.Child("train");
  train.Set("backend", std::string("cuda"));
  train.Set("device", std::string("NVIDIA H100 80GB HBM3 (GPU 0)"));
  train.Child("k8").Set("ranks_per_node", int64_t{8});
  return report;
}

Comparison Compare(const std::vector<Report>& reports) {
  std::vector<const Report*> pointers;
  std::vector<std::string> labels;
  for (const Report& report : reports) {
    pointers.push_back(&report);
    labels.push_back("run" + std::to_string(labels.size() + 1) + ".h5");
  }
  return CompareRuns(pointers, labels);
}

const ComparedVariable& VariableOf(const Comparison& comparison, const std::string& name) {
  for (const ComparedVariable& variable : comparison.variables) {
    if (variable.name == name) return variable;
  }
  ADD_FAILURE() << "no variable " << name;
  static const ComparedVariable kNone;
  return kNone;
}

std::vector<std::string> DifferingNames(const Comparison& comparison) {
  std::vector<std::string> names;
  for (const ComparedVariable& variable : comparison.variables) {
    if (variable.differs) names.push_back(variable.name);
  }
  return names;
}

TEST(Comparability, IdenticalRunsDifferInNothing) {
  const Comparison comparison = Compare({TrainRun(), TrainRun()});
  EXPECT_TRUE(DifferingNames(comparison).empty());
  EXPECT_TRUE(ComparisonWarnings(comparison).empty());
  EXPECT_NO_THROW(RequireComparable(comparison));
  // Every variable the runs record is in the table, with its value in each run.
  EXPECT_EQ(VariableOf(comparison, "model_shape").values, (std::vector<std::string>{"L24 d2048 h16 V50257",
                                                                                   "L24 d2048 h16 V50257"}));
  EXPECT_EQ(VariableOf(comparison, "precision").values[0], "bf16 (fp32 master)");
  EXPECT_EQ(VariableOf(comparison, "data").values[0], "synthetic");
  EXPECT_EQ(VariableOf(comparison, "tool_version").values[0], "0.1.0 (abc123)");
  EXPECT_EQ(VariableOf(comparison, "ranks_per_node").values[0], "8");
  EXPECT_EQ(VariableOf(comparison, "interconnect").values[0], "NVLink x18");
}

TEST(Comparability, OneVariableDifferingGivesOneWarning) {
  Report other = TrainRun();
  other.root.Child("config").Set("micro_batch", int64_t{4});
  const Comparison comparison = Compare({TrainRun(), other});
  EXPECT_EQ(DifferingNames(comparison), std::vector<std::string>{"micro_batch"});
  EXPECT_EQ(ComparisonWarnings(comparison),
            std::vector<std::string>{"runs differ in micro_batch (8 vs 4): throughput is not comparable"});
  EXPECT_EQ(DifferenceText(VariableOf(comparison, "micro_batch")), "yes: not comparable");
  EXPECT_EQ(DifferenceText(VariableOf(comparison, "seq")), "no");
}

TEST(Comparability, WhatAComparisonIsAboutIsShownNotWarned) {
  Report other = TrainRun();
  other.root.Set("n_nodes", int64_t{2});
  other.root.Child("train").Set("device", std::string("NVIDIA H200 (GPU 0)"));
  other.root.Child("topology").tables["gpu_links"] = Table().Add("link", "", std::vector<std::string>{"PCIe"});
  other.root.Child("config").Set("parallel", std::string("fsdp"));
  other.root.Child("config").Set("tensor_parallel", int64_t{2});
  const Comparison comparison = Compare({TrainRun(), other});
  EXPECT_EQ(DifferingNames(comparison),
            (std::vector<std::string>{"device", "nodes", "interconnect", "parallel", "tensor_parallel"}));
  EXPECT_TRUE(ComparisonWarnings(comparison).empty());
  EXPECT_EQ(DifferenceText(VariableOf(comparison, "device")), "yes: compared");
  EXPECT_NO_THROW(RequireComparable(comparison));
}

TEST(Comparability, AnEmulatedFabricIsAnotherInterconnect) {
  Report emulated = TrainRun();
  emulated.root.Set("emulated_fabric", std::string("pcie"));
  emulated.root.Set("emulated_fabric_environment", std::string("NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0"));
  const Comparison comparison = Compare({TrainRun(), emulated});
  EXPECT_EQ(DifferingNames(comparison), std::vector<std::string>{"interconnect"});
  EXPECT_EQ(VariableOf(comparison, "interconnect").values[1], "PCIe emulated on NVLink x18");
  EXPECT_EQ(DifferenceText(VariableOf(comparison, "interconnect")), "yes: compared");
}

TEST(Comparability, EveryHeldVariableIsWarnedWithItsConsequence) {
  Report other = TrainRun();
  Group& config = other.root.Child("config");
  config.Set("model", std::string("gpt-7b"));
  config.Set("steps", int64_t{50});
  config.Set("warmup_steps", int64_t{5});
  other.root.Child("topology").Set("nccl", std::string("2.21.5"));
  other.root.Child("train").Set("backend", std::string("cpu"));
  other.root.Child("train").Child("k8").Set("ranks_per_node", int64_t{4});
  other.root.Set("git_revision", std::string("def456"));
  const std::vector<std::string> warnings = ComparisonWarnings(Compare({TrainRun(), other}));
  EXPECT_EQ(warnings, (std::vector<std::string>{
                          "runs differ in tool_version (0.1.0 (abc123) vs 0.1.0 (def456)): the code that ran may differ",
                          "runs differ in model (gpt-1b vs gpt-7b): throughput is not comparable",
                          "runs differ in precision (bf16 (fp32 master) vs fp32): throughput is not comparable",
                          "runs differ in ranks_per_node (8 vs 4): the load on each node's links is not comparable",
                          "runs differ in warmup_steps (2 vs 5): the measured steps start at different points",
                          "runs differ in steps (20 vs 50): the figures average different numbers of steps",
                          "runs differ in nccl (2.28.9 vs 2.21.5): communication times may differ for the library "
                          "alone"}));
}

TEST(Comparability, ThreeRunsNameEachValueOnce) {
  Report b = TrainRun(), c = TrainRun();
  b.root.Child("config").Set("seq", int64_t{2048});
  c.root.Child("config").Set("seq", int64_t{512});
  EXPECT_EQ(ComparisonWarnings(Compare({TrainRun(), b, TrainRun(), c})),
            std::vector<std::string>{"runs differ in seq (1024 vs 2048 vs 512): throughput is not comparable"});
}

TEST(Comparability, DatasetsCompareByShapeNotPath) {
  Report a = TrainRun(), b = TrainRun();
  for (Report* report : {&a, &b}) {
    Group& io = report->root.Child("io").Child("k8");
    io.Set("dataset_samples", int64_t{1000});
    io.Set("record_bytes", int64_t{4096});
  }
  a.root.Child("config").Set("data", std::string("/mnt/lustre/tokens"));
  b.root.Child("config").Set("data", std::string("/data/tokens"));
  EXPECT_FALSE(VariableOf(Compare({a, b}), "data").differs) << "the same dataset on two machines' paths";
  EXPECT_EQ(VariableOf(Compare({a, b}), "data").values[0], "1000 samples of 4096 B");
  const Comparison with_synthetic = Compare({a, TrainRun()});
  EXPECT_EQ(ComparisonWarnings(with_synthetic),
            std::vector<std::string>{"runs differ in data (1000 samples of 4096 B vs synthetic): data-loader stalls "
                                     "are not comparable"});
}

TEST(Comparability, AVariableARunDoesNotRecordIsNotADifference) {
  Report old = TrainRun();  // a report from before --parallel
  old.root.Child("config").attributes.erase("parallel");
  const Comparison comparison = Compare({TrainRun(), old});
  EXPECT_FALSE(VariableOf(comparison, "parallel").differs);
  EXPECT_EQ(VariableOf(comparison, "parallel").values, (std::vector<std::string>{"dp", ""}));
  // Recorded empty ("no CUDA in this build") is a value, not a gap.
  Report cpu = TrainRun();
  cpu.root.Child("topology").Set("cudnn", std::string());
  EXPECT_EQ(VariableOf(Compare({TrainRun(), cpu}), "cudnn").values[1], "none");
  EXPECT_TRUE(VariableOf(Compare({TrainRun(), cpu}), "cudnn").differs);
}

TEST(Comparability, RunsOfDifferentCommandsAreShownNotCompared) {
  Report collectives;
  collectives.root.Set("command", std::string("collectives"));
  collectives.root.Set("n_ranks", int64_t{2});
  collectives.root.Set("n_nodes", int64_t{1});
  collectives.root.Child("topology").Set("nccl", std::string("2.28.9"));
  const Comparison comparison = Compare({TrainRun(), collectives});
  EXPECT_TRUE(ComparisonWarnings(comparison).empty()) << "a suite's collectives and train reports side by side";
  EXPECT_EQ(DifferenceText(VariableOf(comparison, "command")), "yes: compared");
  EXPECT_FALSE(VariableOf(comparison, "ranks_per_node").differs) << "8 (train) and 2 (collectives) are not compared";
  // Two train runs among them are still compared with each other.
  Report other = TrainRun();
  other.root.Child("config").Set("global_batch", int64_t{128});
  EXPECT_EQ(ComparisonWarnings(Compare({TrainRun(), collectives, other})),
            std::vector<std::string>{"runs differ in global_batch (64 vs 128): throughput is not comparable"});
}

TEST(Comparability, RequireComparableIsOneLineNamingTheFirstDifference) {
  Report other = TrainRun();
  other.root.Child("config").Set("micro_batch", int64_t{4});
  other.root.Child("config").Set("seq", int64_t{2048});
  try {
    RequireComparable(Compare({TrainRun(), other}));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "runs are not comparable (--require-comparable): runs differ in micro_batch (8 vs 4): "
                           "throughput is not comparable; 1 more difference");
  }
  EXPECT_FALSE(CompareReports({TrainRun()}, {"one.h5"}, true)) << "one run: nothing to compare";
  EXPECT_THROW(CompareReports({TrainRun(), other}, {"a.h5", "b.h5"}, true), InputError);
  EXPECT_NO_THROW(CompareReports({TrainRun(), other}, {"a.h5", "b.h5"}, false));
}

TEST(Comparability, ExportsCarryTheTableAndTheWarnings) {
  Report other = TrainRun();
  other.root.Child("config").Set("micro_batch", int64_t{4});
  ReportContextInfo context{"report", {"a.h5", "b.h5"}};
  context.comparison = Compare({TrainRun(), other});
  const std::vector<RunView> runs = {RunView{"a.h5", {}}, RunView{"b.h5", {}}};

  const std::string text = ReportViews("text", context, runs);
  const size_t warning = text.find("# warning: runs differ in micro_batch (8 vs 4): throughput is not comparable\n");
  ASSERT_NE(warning, std::string::npos) << text;
  EXPECT_LT(warning, text.find("# comparability:")) << "the warnings come first";
  EXPECT_NE(text.find("yes: not comparable"), std::string::npos) << text;

  const Json json = Json::parse(ReportViews("json", context, runs));
  const Json& comparability = json.at("comparability");
  EXPECT_EQ(comparability.at("warnings").size(), 1u);
  bool found = false;
  for (const Json& variable : comparability.at("variables")) {
    if (variable.at("name") != "micro_batch") continue;
    found = true;
    EXPECT_EQ(variable.at("values"), Json::array({"8", "4"}));
    EXPECT_TRUE(variable.at("differs").get<bool>());
    EXPECT_TRUE(variable.at("warned").get<bool>());
    EXPECT_TRUE(variable.at("held_fixed").get<bool>());
  }
  EXPECT_TRUE(found);

  const std::string csv = ReportViews("csv", context, runs);
  EXPECT_EQ(csv.rfind("# comparability\n# units,,,,\nrun,variable,value,differs,warned\n", 0), 0u) << csv;
  EXPECT_NE(csv.find("run2.h5,micro_batch,4,1,1\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("run2.h5,seq,1024,0,0\n"), std::string::npos) << csv;
}

}  // namespace
}  // namespace tb
