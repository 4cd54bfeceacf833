// `cost`'s decision as a library (results/analysis/cost_analysis.h), driven with runs, fabrics and prices built in
// code: a data-parallel run measured at k = 1 and 2, priced on one 8-GPU NVSwitch node and on PCIe nodes over 2x100G
// Ethernet at 8 and 32 GPUs — the rows, the layout chosen on each fabric, a projected step and the totals against a
// hand computation with cost.h's formulas, the cheapest and the fastest; the fitted projection for offerings without
// a fabric, the notes and errors of configurations nothing can price; and the export tables against their
// declarations (cost_schema.h): every declared column built, in order, and no other.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cost_analysis.h"
#include "cost_schema.h"
#include "cost_tables.h"
#include "cost_text.h"
#include "error.h"
#include "input_error_of.h"

namespace tb {
namespace {

constexpr double kTargetTokens = 1e11;

// An NVSwitch node with 8x400G InfiniBand and an 8-GPU PCIe node with 2x100G Ethernet, each sold by one offering;
// the GPUs' memory (GiB) set so that the run's model needs sharding. No provisioning, energy or egress.
std::string PriceText(double gpu_memory_gib) {
  return R"(
[[fabric]]
name = "nvl"
intra = "nvswitch"
intra_allreduce_busbw_GBps = 370
intra_latency_us = 1
intra_source = "nccl-tests issue 212, 2024"
nics_per_node = 8
nic_gbps = 400
network_latency_us = 5
network_source = "datasheet, 2024"

[[fabric]]
name = "pcie"
intra = "pcie"
pcie_gen = 4
pcie_lanes = 16
gpus_per_switch = 2
intra_allreduce_busbw_GBps = 20
intra_latency_us = 3
intra_source = "measured 2023"
nics_per_node = 2
nic_gbps = 100
network_latency_us = 10
network_source = "assumed 2026"

[[offering]]
name = "nvl-node"
gpu = "H100 SXM"
gpus_per_node = 8
gpu_memory_gib = )" + std::to_string(gpu_memory_gib) + R"(
usd_per_gpu_hour = 4
storage_usd_per_gb_month = 0.1
egress_usd_per_gb = 0
mtbf_node_hours = 1000
restart_hours = 0.5
fabric = "nvl"

[[offering]]
name = "pcie-nodes"
gpu = "H100 PCIe"
gpus_per_node = 8
gpu_memory_gib = )" + std::to_string(gpu_memory_gib) + R"(
usd_per_gpu_hour = 2.5
storage_usd_per_gb_month = 0.1
egress_usd_per_gb = 0
mtbf_node_hours = 1000
restart_hours = 0.5
fabric = "pcie"
)";
}

// 8 GiB per GPU: dp needs 20 GB and zero1 over 8 ranks 9.5 GB (neither fits); zero1 over 32 needs 8.4 GB and fsdp
// over 8 6.8 GB (both fit).
constexpr double kTightGib = 8;

MeasuredPoint Point(int k, double step_s, double comm_s, double exposed_s) {
  MeasuredPoint p;
  p.train.k = k;
  p.train.nodes = 1;
  p.train.gpus_per_node = k;
  p.train.step_s = step_s;
  p.train.comm_total_s = comm_s;
  p.train.comm_exposed_s = exposed_s;
  p.train.gradient_bytes = 2e9;  // bf16 gradients of 1e9 parameters
  p.train.buckets = std::ceil(2e9 / (25.0 * 1024 * 1024));
  p.train.tokens_per_step = 8192.0 * k;
  p.step_s_reported = step_s;
  p.tokens_per_s_reported = p.train.tokens_per_step / step_s;
  p.micro_batch = 4;
  p.optimizer_s = 0.1;
  return p;
}

// A 1e9-parameter model trained data parallel on one and two GPUs of one node (weak scaling), 30 s of start-up, no
// checkpoints measured: k=2's step is 1.05 s of which 0.05 s exposed of 0.2 s of gradient all-reduce (overlap 0.75).
RunMeasurement DpRun() {
  RunMeasurement m;
  m.path = "dp.h5";
  m.device = "NVIDIA H100 80GB HBM3";
  m.ranks = 2;
  m.nodes = 1;
  m.startup_s = 30;
  m.points = {Point(1, 1.0, 0, 0), Point(2, 1.05, 0.2, 0.05)};
  m.model_name = "gpt-1b";
  m.parameters = 1e9;
  m.seq = 2048;
  m.layers = 24;
  m.parallel = "dp";
  m.bucket_bytes = 25.0 * 1024 * 1024;
  m.memory_estimate = {2e9, 2e9, 12e9, 4e9, 0};  // bf16 weights and gradients, fp32 master and AdamW; activations
  m.memory_precision = "bf16 mixed";
  return m;
}

// What the models say of it: T = 1 and 2 possible (the model states split in two, the activations mostly), 4 and 8
// not; 0.2e9 parameters gathered at once under fsdp.
RunModelFacts Facts() {
  RunModelFacts facts;
  facts.memory.estimate = DpRun().memory_estimate;
  facts.memory.parameters = 1e9;
  facts.memory.gathered_parameters = 0.2e9;
  facts.memory.what = "gpt-1b as run";
  facts.shapes.push_back({1, "", {2e9, 2e9, 12e9, 4e9, 0}, 0, 0, {}, {}});
  facts.shapes.push_back({2, "", {2e9, 2e9, 12e9, 2.5e9, 0}, 64e6, 4 * 24 + 4, {}, {}});
  facts.shapes.push_back({4, "tensor parallel 4 does not divide the 6 heads", {}, 0, 0, {}, {}});
  facts.shapes.push_back({8, "tensor parallel 8 does not divide the 6 heads", {}, 0, 0, {}, {}});
  return facts;
}

CostPlan FabricPlan() {
  CostPlan plan;
  plan.target_tokens = kTargetTokens;
  plan.device_as = {FindGpuModel("H100 SXM", "test"), FindGpuModel("H100 PCIe", "test")};
  plan.targets = ParseProjectTargets("8,32", "--project");
  return plan;
}

CostRun Analyzed(CostPlan plan, PriceFile prices, const std::vector<RunMeasurement>& runs,
                 const RunModelFacts& facts = Facts()) {
  CostRun c;
  c.plan = std::move(plan);
  c.prices = std::move(prices);
  for (const RunMeasurement& m : runs) c.runs.push_back(AnalyzeRun(m, facts, c.plan, {}, c.prices));
  AnalyzeCost(c);
  return c;
}

// cost.h's formulas by hand for a configuration of `nodes` 8-GPU nodes at `usd_per_gpu_hour`, the offerings' MTBF
// (1000 h per node) and restart (0.5 h), the default interval (1 h), two checkpoints kept of 12 B per parameter at
// $0.1 per GB-month; no provisioning, measured stall, egress or energy.
struct HandCost {
  double time_to_train_hours = 0, total_usd = 0;
};
HandCost ByHand(double tokens_per_s, int nodes, double usd_per_gpu_hour) {
  const double work = kTargetTokens / tokens_per_s / 3600, startup = 30.0 / 3600;
  const double run = startup + work;
  const double per_hour = nodes * 8 * usd_per_gpu_hour;
  const double failures = run / (1000.0 / nodes);
  const double retry = failures * (0.5 + startup + 1.0 / 2);
  const double time = run + retry;
  const double storage = 2 * (1e9 * 12 / 1e9) * 0.1 * time / 730;
  return {time, per_hour * run + storage + per_hour * retry};
}

const CostRow& RowNamed(const CostRun& c, const std::string& label, const std::string& offering) {
  for (const CostRow& r : c.rows) {
    if (r.config.label == label && r.offering->name == offering) return r;
  }
  ADD_FAILURE() << "no row " << label << " on " << offering;
  return c.rows.front();
}

const FabricProjection& OnFabric(const RunAnalysis& a, const std::string& offering, const std::string& target) {
  for (const FabricProjection& fp : a.on_fabrics) {
    if (fp.offering->name == offering && fp.target.text == target) return fp;
  }
  ADD_FAILURE() << "no projection onto " << offering << " at " << target;
  return a.on_fabrics.front();
}

// The run on both offerings at 8 and 32 GPUs, the GPUs' memory tight (analysed once for the tests below).
const CostRun& TightRun() {
  static const CostRun c = Analyzed(FabricPlan(), ParsePriceFile(PriceText(kTightGib), "p.toml"), {DpRun()});
  return c;
}

TEST(CostAnalysis, RowsOfEachOfferingAndTheLayoutChosenOnItsFabric) {
  const CostRun& c = TightRun();
  ASSERT_EQ(c.runs.size(), 1u);
  const RunAnalysis& a = c.runs[0];
  EXPECT_EQ(a.priced, 1u);  // the largest k
  EXPECT_EQ(GpuNames(a), "H100 SXM, H100 PCIe");
  EXPECT_NEAR(a.basis.overlap, 0.75, 1e-12);
  EXPECT_NEAR(a.basis.ComputeS(), 1.05 - 0.05 - 0.1, 1e-12);
  // Each offering: the measured point as measured, then the chosen layout at 8 and at 32 GPUs.
  ASSERT_EQ(c.rows.size(), 6u);
  ASSERT_EQ(a.on_fabrics.size(), 4u);
  EXPECT_TRUE(c.notes.empty()) << c.notes.front();
  // Memory decides the layouts: one NVLink node cannot hold zero1's AdamW state over 8 ranks and shards everything
  // (fsdp over NVSwitch is cheap); four PCIe nodes shard AdamW's state over 32 ranks.
  const FabricProjection& nvl8 = OnFabric(a, "nvl-node", "8");
  const FabricProjection& pcie32 = OnFabric(a, "pcie-nodes", "32");
  ASSERT_TRUE(nvl8.choice && nvl8.choice->chosen && pcie32.choice && pcie32.choice->chosen);
  EXPECT_EQ(nvl8.choice->candidates[*nvl8.choice->chosen].Name(), "fsdp");
  EXPECT_EQ(pcie32.choice->candidates[*pcie32.choice->chosen].Name(), "zero1");
  for (const FabricProjection* fp : {&nvl8, &pcie32}) {
    const LayoutChoice& ch = *fp->choice;
    const LayoutCandidate& won = ch.candidates[*ch.chosen];
    int impossible = 0;
    for (const LayoutCandidate& other : ch.candidates) {
      if (other.Viable()) {
        EXPECT_LE(other.tokens_per_s, won.tokens_per_s) << other.Name();
      }
      if (!other.considered) ++impossible;
    }
    EXPECT_EQ(impossible, fp == &nvl8 ? 4 : 6);  // T = 4 and 8: dp, and zero1 and fsdp where there are replicas
    EXPECT_EQ(RowNamed(c, won.layout.Name() + " " + won.Name(), fp->offering->name).inputs.tokens_per_s,
              won.tokens_per_s);
  }
}

TEST(CostAnalysis, ProjectedStepAndTotalsByHand) {
  const CostRun& c = TightRun();
  // zero1 on 4x8 PCIe by hand: the run's compute; AdamW over 32 ranks instead of 1; one all-reduce's worth of
  // 2 GB, hierarchical: inside the node at 20 GB/s and 3 us, across 4 nodes at 2 x 100 Gbit/s shared by 8 ranks
  // and 10 us; all of it exposed (zero1's collectives run after backward).
  const FabricProjection& pcie32 = OnFabric(c.runs[0], "pcie-nodes", "32");
  ASSERT_TRUE(pcie32.choice && pcie32.choice->chosen);
  const LayoutCandidate& zero1 = pcie32.choice->candidates[*pcie32.choice->chosen];
  const double comm = 2.0 * 7 / 8 * 2e9 / 20e9 + 2 * 7 * 3e-6 + 2.0 * 3 / 4 * (2e9 / 8) * (8.0 * 8 / 200e9) +
                      2 * 3 * 10e-6;
  EXPECT_NEAR(zero1.comm_s, comm, 1e-12);
  const double step = 0.9 + 0.1 / 32 + comm;
  EXPECT_NEAR(zero1.step_s, step, 1e-12);
  EXPECT_NEAR(zero1.tokens_per_s, 32 * 8192 / step, 1e-6);

  // The totals against cost.h's formulas by hand: the measured 1x2 bills its whole 8-GPU node.
  const CostRow& measured = RowNamed(c, "k2 1x2", "nvl-node");
  EXPECT_FALSE(measured.config.projected);
  EXPECT_EQ(measured.cost.billed_gpus, 8);
  const HandCost m_hand = ByHand(16384 / 1.05, 1, 4);
  EXPECT_NEAR(measured.cost.time_to_train_hours, m_hand.time_to_train_hours, 1e-9 * m_hand.time_to_train_hours);
  EXPECT_NEAR(measured.cost.total_usd, m_hand.total_usd, 1e-9 * m_hand.total_usd);
  const CostRow& pcie_row = RowNamed(c, "4x8 zero1", "pcie-nodes");
  EXPECT_TRUE(pcie_row.config.projected);
  EXPECT_EQ(pcie_row.cost.nodes, 4);
  EXPECT_NEAR(pcie_row.cost.job_usd_per_hour, 4 * 8 * 2.5, 1e-12);
  const HandCost p_hand = ByHand(32 * 8192 / step, 4, 2.5);
  EXPECT_NEAR(pcie_row.cost.total_usd, p_hand.total_usd, 1e-9 * p_hand.total_usd);
  EXPECT_NEAR(pcie_row.cost.usd_per_million_tokens, p_hand.total_usd / (kTargetTokens / 1e6), 1e-9);
  EXPECT_TRUE(pcie_row.memory.fits);
  EXPECT_FALSE(measured.memory.fits);  // dp's 20 GB in 8 GiB, as measured (priced, flagged)
}

TEST(CostAnalysis, CheapestAndFastestWithTheirLines) {
  const CostRun& c = TightRun();
  // The lowest total and the shortest time to train, each named as the text names it.
  ASSERT_TRUE(c.decision.cheapest && c.decision.fastest);
  for (const CostRow& r : c.rows) {
    EXPECT_GE(r.cost.total_usd, c.rows[*c.decision.cheapest].cost.total_usd);
    EXPECT_GE(r.cost.time_to_train_hours, c.rows[*c.decision.fastest].cost.time_to_train_hours);
  }
  // The PCIe nodes' GPU-hour is 37% cheaper and no layout there is that much slower; 32 GPUs over 8x400G are the
  // fastest, in fsdp: backward hides up to 0.15 s of its collectives (as in the dp run), zero1 hides none of its.
  const CostRow& cheapest = c.rows[*c.decision.cheapest];
  EXPECT_EQ(cheapest.offering->name, "pcie-nodes");
  EXPECT_EQ(RowName(c.rows[*c.decision.fastest], c.runs), "dp.h5 4x8 fsdp (projected) on nvl-node");
  const std::vector<std::string> decision = DecisionLines(c);
  ASSERT_EQ(decision.size(), 2u);
  EXPECT_EQ(decision[0].rfind("# cheapest: " + RowName(cheapest, c.runs) + ": $", 0), 0u) << decision[0];
  EXPECT_NE(decision[0].find(" on fabric pcie, the best of 10 layouts considered: "), std::string::npos) << decision[0];
  EXPECT_NE(decision[0].find("; why: " + c.reasons.cheapest), std::string::npos) << decision[0];
  EXPECT_EQ(decision[1].rfind("# fastest: dp.h5 4x8 fsdp (projected) on nvl-node: $", 0), 0u) << decision[1];
}

// Offerings without a fabric price --project's layouts with the links fitted to the run (here its training buckets
// inside the node, and --inter-node-gbps across nodes).
TEST(CostAnalysis, FittedProjectionOnOfferingsWithoutAFabric) {
  std::string text = PriceText(80);
  for (const char* line : {"fabric = \"nvl\"\n", "fabric = \"pcie\"\n"}) text.erase(text.find(line), strlen(line));
  CostPlan plan;
  plan.target_tokens = kTargetTokens;
  plan.device_as = {FindGpuModel("H100 SXM", "test")};
  plan.layouts = ParseLayouts("16", 8, "--project");
  plan.overrides.inter_node_gbps = 100;
  const CostRun c = Analyzed(std::move(plan), ParsePriceFile(text, "p.toml"), {DpRun()});
  const RunAnalysis& a = c.runs[0];
  ASSERT_TRUE(a.fit.has_value());
  ASSERT_EQ(a.projected.size(), 1u);
  EXPECT_EQ(a.projected[0].layout.Name(), "2x8");
  EXPECT_TRUE(a.on_fabrics.empty());
  ASSERT_EQ(c.rows.size(), 2u);  // the measured point and 2x8 on the H100 SXM offering
  const CostRow& projected = RowNamed(c, "2x8", "nvl-node");
  EXPECT_NEAR(projected.inputs.tokens_per_s, a.projected[0].tokens_per_s, 1e-9 * a.projected[0].tokens_per_s);
  const HandCost hand = ByHand(a.projected[0].tokens_per_s, 2, 4);
  EXPECT_NEAR(projected.cost.total_usd, hand.total_usd, 1e-9 * hand.total_usd);
}

// The same model trained in 2 pipeline stages of 4 micro-batches (of 4 sequences) on 4 GPUs of one node (2 replicas):
// 1.3 s per step of which 0.25 s of exchanges with the neighbouring stage (the bubble) and 0.02 s of tied-embedding
// all-reduce, as ReadRunMeasurement leaves them (out of the gradient communication: 0.1 s, 0.04 exposed). Each
// stage's memory: half the states, the first stage 2 micro-batches' activations of half the layers, the last one's
// and the head's.
RunMeasurement PipelineRun() {
  RunMeasurement m = DpRun();
  m.path = "pp.h5";
  m.ranks = 4;
  MeasuredPoint p = Point(4, 1.3, 0.1, 0.04);
  p.train.tokens_per_step = 2 * 4 * 4 * 2048.0;  // 2 pipelines x 4 micro-batches of 4 sequences
  p.tokens_per_s_reported = p.train.tokens_per_step / 1.3;
  p.train.pipeline_parallel = 2;
  p.train.micro_batches = 4;
  p.train.pipeline_s = 0.25;
  p.train.embedding_s = 0.02;
  p.train.edge_bytes = 1 * 2048 * 2048 * 4.0;
  p.train.embedding_bytes = 4.0 * 50304 * 2048;
  p.train.gradient_bytes = 1.1e9;  // stage 0's
  p.bubble_measured = 0.21;
  p.bubble_theory = 0.2;
  m.points = {p};
  return m;
}

RunModelFacts PipelineFacts() {
  RunModelFacts facts = Facts();
  facts.memory.stages = {{1.1e9, 1.1e9, 6.6e9, 4e9, 0}, {1.0e9, 1.0e9, 6e9, 2.6e9, 0}};
  PipelineShape two;
  two.pp = 2;
  two.stage_memory = facts.memory.stages;
  two.parameter_share = {0.55, 0.5};
  two.compute_share = 0.55;
  two.edge_bytes = 2048 * 2048 * 4.0;
  two.embedding_bytes = 4.0 * 50304 * 2048;
  facts.shapes[0].pipelines = {two};
  PipelineShape four;
  four.pp = 4;
  four.invalid = "--pipeline-parallel 4 does not divide ...";  // the sizes PipelineSizes asks for come first below
  facts.shapes[0].pipelines.push_back(four);
  return facts;
}

TEST(CostAnalysis, PipelineRunPricedAsMeasuredAndProjectedWithItsStages) {
  const PriceFile prices = ParsePriceFile(PriceText(80), "p.toml");
  const RunMeasurement run = PipelineRun();
  // Its own P, and the P that divide the nodes of --project's 32 GPUs on 8-GPU nodes (4 nodes); 8 GPUs are one node.
  EXPECT_EQ(PipelineSizes(prices, FabricPlan().targets, run, 0), (std::vector<int>{2, 4}));
  const CostRun c = Analyzed(FabricPlan(), prices, {run}, PipelineFacts());
  const RunAnalysis& a = c.runs[0];
  // The measured point as measured: its tokens/s, its stages' exchanges as exposed communication, its largest stage's
  // memory (dp over the stage's 2 ranks: 1.1 + 1.1 + 6.6 + 4 GB).
  const CostRow& measured = RowNamed(c, "k4 1x4", "nvl-node");
  EXPECT_DOUBLE_EQ(measured.inputs.tokens_per_s, 2 * 4 * 4 * 2048 / 1.3);
  EXPECT_EQ(measured.config.pp, 2);
  EXPECT_NEAR(measured.config.exposed_s, 0.04 + 0.25 + 0.02, 1e-12);
  EXPECT_NEAR(measured.memory.required_bytes, 12.8e9, 1);
  const std::string why = CommReason(measured.config, a);
  EXPECT_NE(why.find("pp2 x 4 micro-batches (1F1B): bubble 21.0% measured at k=4 (20.0% in theory)"), std::string::npos)
      << why;
  // The basis: a stage's compute (the step less its gradient, pipeline and embedding communication and AdamW), the
  // whole model's gradients per rank (stage 0's / its share), the mean stage's share of AdamW's state.
  EXPECT_EQ(a.basis.pp, 2);
  EXPECT_NEAR(a.basis.ComputeS(), 1.3 - 0.04 - 0.25 - 0.02 - 0.1, 1e-12);
  EXPECT_NEAR(a.basis.gradient_bytes, 1.1e9 / 0.55, 1);
  EXPECT_NEAR(a.basis.optimizer_share, 0.525, 1e-12);
  // On the PCIe nodes at 32 GPUs: pp2 candidates modelled (M = 2 x 4 / 2 = 4: the run's), pp4 not possible.
  const LayoutChoice& pcie = *OnFabric(a, "pcie-nodes", "32").choice;
  const auto pp2 = std::find_if(pcie.candidates.begin(), pcie.candidates.end(),
                                [](const LayoutCandidate& cand) { return cand.Name() == "pp2+dp"; });
  ASSERT_NE(pp2, pcie.candidates.end());
  ASSERT_TRUE(pp2->considered) << pp2->why_not;
  EXPECT_EQ(pp2->micro_batches, 4);
  EXPECT_NEAR(pp2->compute_s, a.basis.ComputeS() * 0.55 * 2, 1e-12);  // the run's compute per token, 2 stages' tokens
  EXPECT_TRUE(std::any_of(pcie.candidates.begin(), pcie.candidates.end(), [](const LayoutCandidate& cand) {
    return cand.pp == 4 && cand.why_not == "--pipeline-parallel 4 does not divide ...";
  }));
}

// What cannot be priced is a note, and nothing priced at all an error naming the first reason; a --k the run did not
// measure is bad input.
TEST(CostAnalysis, NotesAndErrorsOfWhatCannotBePriced) {
  CostPlan plan;
  plan.target_tokens = kTargetTokens;
  plan.device_as = {FindGpuModel("H100 SXM", "test")};
  RunMeasurement wide = DpRun();
  wide.points.back().train.gpus_per_node = 2;
  const std::string one_per_node = R"(
[[offering]]
name = "one"
gpu = "H100 SXM"
gpus_per_node = 1
usd_per_gpu_hour = 2
storage_usd_per_gb_month = 0
egress_usd_per_gb = 0
mtbf_node_hours = 1000
restart_hours = 0.5
)";
  EXPECT_EQ(InputErrorOf([&] { Analyzed(plan, ParsePriceFile(one_per_node, "one.toml"), {wide}); }),
            "no offering in 'one.toml' has nodes for the layout of any configuration (dp.h5 k2 1x2: offering one has 1 "
            "GPU per node; layout 1x2 needs 2 on one node)");
  CostPlan own_device = plan;
  own_device.device_as.clear();
  RunMeasurement cpu = DpRun();
  cpu.device = "cpu";
  EXPECT_NE(InputErrorOf([&] { Analyzed(own_device, ParsePriceFile(one_per_node, "one.toml"), {cpu}); })
                .find("matches the device of any run (dp.h5: device 'cpu' is no known GPU model"),
            std::string::npos);
  CostPlan k3 = plan;
  k3.k = 3;
  EXPECT_EQ(InputErrorOf([&] { Analyzed(k3, ParsePriceFile(one_per_node, "one.toml"), {DpRun()}); }),
            "--k 3: 'dp.h5' measured k = 1,2");
  // --k 1 prices the one-GPU point, which the one-GPU nodes hold.
  CostPlan k1 = plan;
  k1.k = 1;
  const CostRun c = Analyzed(k1, ParsePriceFile(one_per_node, "one.toml"), {DpRun()});
  ASSERT_EQ(c.rows.size(), 1u);
  EXPECT_EQ(c.rows[0].config.label, "k1 1x1");
}

// --history's measured failure rate replaces every offering's MTBF when asked for.
TEST(CostAnalysis, MeasuredFailureRateReplacesTheOfferingsMtbf) {
  CostRun c;
  c.plan = FabricPlan();
  c.plan.measured_failure_rate = true;
  c.prices = ParsePriceFile(PriceText(80), "p.toml");
  UseFailureHistory(c, FailureHistory{"history", 6, 4, 100});
  EXPECT_TRUE(c.measured_failures);
  c.runs.push_back(AnalyzeRun(DpRun(), Facts(), c.plan, {}, c.prices));
  AnalyzeCost(c);
  for (const CostRow& r : c.rows) EXPECT_NEAR(r.cost.job_mtbf_hours, 25.0 / r.cost.nodes, 1e-12);
}

// The export tables are the declared ones: every declared table built (a run with --model, prices and fabrics builds
// all six), each with exactly its declared columns and units, in order; and the README's tables come from them.
TEST(CostTables, EveryDeclaredColumnIsBuiltAndNoOther) {
  CostPlan plan = FabricPlan();
  plan.model = "gpt-1b";
  plan.model_memory = Facts().memory;
  plan.gpu_memory = 80 * kGiB;
  plan.gpu_memory_text = "80G";
  plan.deadline = 1000;
  const CostRun c = Analyzed(std::move(plan), ParsePriceFile(PriceText(kTightGib), "p.toml"), {DpRun()});
  const std::vector<RunView> views = CostViews(c);
  ASSERT_EQ(views.size(), 2u);
  EXPECT_EQ(views[0].label, "dp.h5");
  EXPECT_EQ(views[1].label, "p.toml");
  std::vector<const ViewTable*> built;
  for (const RunView& view : views) {
    for (const ViewTable& table : view.tables) built.push_back(&table);
  }
  for (const cost_schema::Table* spec : cost_schema::AllTables()) {
    const auto it = std::find_if(built.begin(), built.end(), [&](const ViewTable* t) { return t->name == spec->name; });
    ASSERT_NE(it, built.end()) << spec->FullName() << " not built";
    const ViewTable& table = **it;
    EXPECT_EQ(table.FullName(), spec->FullName());
    EXPECT_EQ(table.per_run, spec->per_run);
    EXPECT_FALSE(table.rows.empty()) << spec->FullName();
    ASSERT_EQ(table.columns.size(), spec->columns.size()) << spec->FullName();
    for (size_t i = 0; i < spec->columns.size(); ++i) {
      EXPECT_EQ(table.columns[i].name, spec->columns[i]->name) << spec->FullName();
      EXPECT_EQ(table.columns[i].unit, spec->columns[i]->unit) << spec->FullName() << "." << spec->columns[i]->name;
      for (const std::vector<Cell>& row : table.rows) EXPECT_EQ(row.size(), spec->columns.size());
    }
  }
  for (const ViewTable* table : built) {
    const auto& all = cost_schema::AllTables();
    EXPECT_TRUE(std::any_of(all.begin(), all.end(), [&](const cost_schema::Table* t) { return t->name == table->name; }))
        << table->FullName() << " is not declared";
  }
  EXPECT_EQ(cost_schema::AllTables().size(), 6u);
  EXPECT_NE(cost_schema::CostSchemaMarkdown().find("| `total_usd` | USD | "), std::string::npos);
}

// The console text renders the same results: the header, a run's lines, the fabric table and the cost table.
TEST(CostText, RendersTheAnalysis) {
  const std::vector<std::string> lines = CostTextLines(TightRun());
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "# trainbench cost: 1 run(s); prices p.toml (2 offerings); target 1e+11 tokens");
  const auto has = [&](const std::string& text) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  EXPECT_TRUE(has("# run dp.h5: NVIDIA H100 80GB HBM3, priced as H100 SXM, H100 PCIe (--device-as)"));
  EXPECT_TRUE(has("#   on pcie-nodes (fabric pcie, pcie), 32 GPUs:"));
  EXPECT_TRUE(has("#     tp4: not possible: tensor parallel 4 does not divide the 6 heads"));
  EXPECT_TRUE(has("#     chosen: zero1 is the fastest that fits"));
  EXPECT_TRUE(has("# cost per run and offering"));
  EXPECT_EQ(Usd(1234567.4), "$1,234,567");
  EXPECT_EQ(Usd(12.345), "$12.35");
}

}  // namespace
}  // namespace tb
