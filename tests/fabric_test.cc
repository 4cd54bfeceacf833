// Fabrics and the layout search (results/analysis/fabric.h, layout_search.h): the [[fabric]] tables of a price file
// and their checks, the links a fabric gives a layout, the per-size-band fit of a measured link, and the best layout
// of a run on an offering's fabric against hand-computed steps — including the decision the project is for: a large
// model on one 8-GPU NVLink node and on four 8-GPU PCIe nodes over Ethernet chooses different layouts; and pipeline
// stages: 1F1B's bubble by hand, a model only stages fit, stages winning over slow Ethernet and losing over InfiniBand,
// a P the model cannot take, and a pipeline run's fitted projection.
#include <gtest/gtest.h>

#include <cmath>

#include "error.h"
#include "input_error_of.h"
#include "layout_search.h"
#include "prices.h"
#include "projection.h"
#include "train_plan.h"

namespace tb {
namespace {

const char* const kFabricPrices = R"(
[[fabric]]
name = "nvl"
intra = "nvswitch"
intra_allreduce_busbw_GBps = 370
intra_p2p_GBps = 370
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
name = "sxm"
gpu = "H100 SXM"
gpus_per_node = 8
usd_per_gpu_hour = 4
storage_usd_per_gb_month = 0
egress_usd_per_gb = 0
mtbf_node_hours = 6335
restart_hours = 0.5
fabric = "nvl"

[[offering]]
name = "plain"
gpu = "H100 PCIe"
gpus_per_node = 8
usd_per_gpu_hour = 2
storage_usd_per_gb_month = 0
egress_usd_per_gb = 0
mtbf_node_hours = 6335
restart_hours = 0.5
)";

std::string EditedFabric(const std::string& from, const std::string& to) {
  std::string text = kFabricPrices;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(Fabric, ParsesFabricsAndOfferingsNameThem) {
  const PriceFile p = ParsePriceFile(kFabricPrices, "p.toml");
  ASSERT_EQ(p.fabrics.size(), 2u);
  const Fabric& nvl = p.fabrics[0];
  EXPECT_EQ(nvl.intra.kind, IntraKind::kNvSwitch);
  EXPECT_DOUBLE_EQ(*nvl.intra.all_reduce_busbw_GBps, 370);
  EXPECT_DOUBLE_EQ(*nvl.intra.latency_us, 1);
  EXPECT_EQ(nvl.intra.source, "nccl-tests issue 212, 2024");
  EXPECT_EQ(*nvl.network.nics_per_node, 8);
  EXPECT_DOUBLE_EQ(nvl.network.NodeGbps(), 3200);
  EXPECT_EQ(p.fabrics[1].intra.pcie_gen, 4);
  EXPECT_EQ(p.fabrics[1].intra.gpus_per_switch, 2);
  ASSERT_NE(p.FabricOf(p.offerings[0]), nullptr);
  EXPECT_EQ(p.FabricOf(p.offerings[0])->name, "nvl");
  EXPECT_EQ(p.FabricOf(p.offerings[1]), nullptr);  // an offering may name none
}

TEST(Fabric, BadFiguresAreOneLineNamingFileLineAndKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {EditedFabric("intra_allreduce_busbw_GBps = 370", "intra_allreduce_busbw_GBps = 0"),
       "p.toml:5: fabric 'nvl': intra_allreduce_busbw_GBps must be > 0, got 0"},
      {EditedFabric("nic_gbps = 400", "nic_gbps = -400"), "p.toml:10: fabric 'nvl': nic_gbps must be > 0, got -400"},
      {EditedFabric("intra_latency_us = 1", "intra_latency_us = \"fast\""),
       "p.toml:7: fabric 'nvl': intra_latency_us must be a number (got a string)"},
      {EditedFabric("intra_latency_us = 1", "intra_latency_us = nan"),
       "p.toml:7: fabric 'nvl': intra_latency_us must be a finite number"},
      {EditedFabric("fabric = \"nvl\"", "fabric = \"nvlink\""),
       "p.toml:28: offering 'sxm': fabric 'nvlink' is not declared (declared: nvl, pcie)"},
      {EditedFabric("intra_source = \"nccl-tests issue 212, 2024\"", "intra_source = \"nccl-tests\""),
       "p.toml:8: fabric 'nvl': intra_source must say when the figures were taken (a year), got 'nccl-tests'"},
      {EditedFabric("intra_source = \"nccl-tests issue 212, 2024\"\n", ""),
       "fabric 'nvl': missing intra_source: every intra-node figure says where it comes from and when"},
      {EditedFabric("intra_allreduce_busbw_GBps = 20", "intra_allreduce_busbw_GBps = 40"),
       "fabric 'pcie': intra_allreduce_busbw_GBps 40 exceeds what PCIe gen 4 x16 carries in one direction (31.5 GB/s)"},
      {EditedFabric("intra = \"nvswitch\"", "intra = \"nvswitch\"\npcie_gen = 4"),
       "fabric 'nvl': pcie_gen, pcie_lanes and gpus_per_switch go with intra = \"pcie\""},
      {EditedFabric("intra = \"nvswitch\"", "intra = \"infiniband\""),
       "fabric 'nvl': intra must be \"nvswitch\", \"nvlink-pairs\", \"pcie\" or \"measured\", got 'infiniband'"},
      {EditedFabric("intra = \"nvswitch\"", "intra = \"measured\"\nintra_report = \"node.h5\""),
       "fabric 'nvl': a measured link takes its all-reduce from intra_report: declare none"},
      {EditedFabric("nic_gbps = 400", "nic_gbps = 400\nnic_count = 8"), "fabric 'nvl': unknown key 'nic_count'"},
      {EditedFabric("name = \"pcie\"", "name = \"nvl\""), "p.toml:14: fabric name 'nvl' used twice"},
      {EditedFabric("nics_per_node = 8", "nics_per_node = 0"), "fabric 'nvl': nics_per_node must be 1..64, got 0"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string error = InputErrorOf([&] { ParsePriceFile(text, "p.toml"); });
    EXPECT_NE(error.find(expected), std::string::npos) << "expected: " << expected << "\ngot: " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(Fabric, PcieRatesPerDirection) {
  EXPECT_NEAR(PcieDirectionGBps(3, 16), 15.75, 0.01);
  EXPECT_NEAR(PcieDirectionGBps(4, 16), 31.51, 0.01);
  EXPECT_NEAR(PcieDirectionGBps(5, 16), 63.02, 0.01);
  EXPECT_NEAR(PcieDirectionGBps(2, 8), 4.0, 1e-9);
  EXPECT_EQ(PcieDirectionGBps(7, 16), 0);
}

TEST(Fabric, LinksOfALayout) {
  const PriceFile p = ParsePriceFile(kFabricPrices, "p.toml");
  const Fabric& nvl = p.fabrics[0];
  // One node of 8: the intra link only; beta = 1 / busbw, alpha = latency.
  FabricLinks one = LinksOnFabric(nvl, 1, 8);
  EXPECT_EQ(one.missing, "");
  EXPECT_DOUBLE_EQ(one.links.intra.beta_s_per_byte, 1.0 / 370e9);
  EXPECT_DOUBLE_EQ(one.links.intra.alpha_s, 1e-6);
  // Four nodes of 8: 8 ranks share 8 x 400 Gbit/s, 400 per rank.
  FabricLinks four = LinksOnFabric(nvl, 4, 8);
  EXPECT_DOUBLE_EQ(four.links.inter.beta_s_per_byte, 8.0 / 400e9);
  EXPECT_DOUBLE_EQ(four.links.inter.alpha_s, 5e-6);
  // Four nodes of 2 on the PCIe fabric: 2 ranks share 2 x 100.
  EXPECT_DOUBLE_EQ(LinksOnFabric(p.fabrics[1], 4, 2).links.inter.beta_s_per_byte, 8.0 / 100e9);
  // A figure the layout needs and the fabric lacks: not projected, with the reason.
  Fabric bare = nvl;
  bare.network = {};
  EXPECT_EQ(LinksOnFabric(bare, 1, 8).missing, "");
  EXPECT_NE(LinksOnFabric(bare, 2, 8).missing.find("declares no nics_per_node: layouts of several nodes are not projected"),
            std::string::npos);
  bare.intra.all_reduce_busbw_GBps.reset();
  EXPECT_EQ(LinksOnFabric(bare, 1, 1).missing, "");  // one GPU: no link at all
  EXPECT_NE(LinksOnFabric(bare, 1, 8).missing.find("declares no intra_allreduce_busbw_GBps"), std::string::npos);
}

// A ring all-reduce of one node, the way the sweep measures it: t = 2(n-1) alpha + 2(n-1)/n S beta.
AllReduceSample Ring(int n, double bytes, double alpha, double beta) {
  return {1, n, bytes, 1, 2.0 * (n - 1) * alpha + 2.0 * (n - 1) / n * bytes * beta, "synthetic"};
}

TEST(Fabric, MeasuredLinkFittedPerSizeBand) {
  // Small messages pay a latency of 10 us at a slow protocol; large ones 2 us at ten times the bandwidth (as NCCL's LL
  // and Simple protocols differ).
  std::vector<AllReduceSample> sweep;
  for (double bytes = 1024; bytes < 64 * 1024; bytes *= 2) sweep.push_back(Ring(4, bytes, 10e-6, 1 / 1e9));
  for (double bytes = 64 * 1024; bytes < 16 * 1024 * 1024; bytes *= 2) sweep.push_back(Ring(4, bytes, 4e-6, 1 / 5e9));
  for (double bytes = 16 * 1024 * 1024; bytes <= 1024.0 * 1024 * 1024; bytes *= 2) {
    sweep.push_back(Ring(4, bytes, 2e-6, 1 / 10e9));
  }
  const LinkParameters link = FitIntraBands(sweep);
  ASSERT_TRUE(link.fitted);
  ASSERT_EQ(link.bands.size(), 3u);
  EXPECT_NEAR(link.bands[0].alpha_s, 10e-6, 1e-9);
  EXPECT_NEAR(1 / link.bands[0].beta_s_per_byte, 1e9, 1e3);
  EXPECT_NEAR(1 / link.bands[1].beta_s_per_byte, 5e9, 5e3);
  EXPECT_NEAR(link.bands[2].alpha_s, 2e-6, 1e-9);
  EXPECT_NEAR(1 / link.bands[2].beta_s_per_byte, 10e9, 1e4);
  // Each band predicts its own sizes exactly; one fit over every size is off on some of them.
  LinkModel banded, single;
  banded.intra = link;
  single.intra.alpha_s = link.alpha_s;
  single.intra.beta_s_per_byte = link.beta_s_per_byte;
  double worst_single = 0;
  for (const AllReduceSample& s : sweep) {
    EXPECT_NEAR(PredictAllReduceSeconds(banded, 1, 4, s.bytes, 1) / s.time_s, 1.0, 1e-6) << s.bytes;
    worst_single = std::max(worst_single, std::fabs(PredictAllReduceSeconds(single, 1, 4, s.bytes, 1) / s.time_s - 1));
  }
  EXPECT_GT(worst_single, 0.2);
  // A band with one size takes the all-sizes fit.
  std::vector<AllReduceSample> sparse = {Ring(4, 1024, 10e-6, 1e-9), Ring(4, 1 << 20, 4e-6, 2e-10),
                                         Ring(4, 2 << 20, 4e-6, 2e-10)};
  const LinkParameters partial = FitIntraBands(sparse);
  EXPECT_EQ(partial.bands[0].beta_s_per_byte, partial.beta_s_per_byte);
  EXPECT_NE(partial.bands[0].name.find("one size"), std::string::npos);
  EXPECT_NE(partial.bands[2].name.find("not measured"), std::string::npos);
}

TEST(Fabric, FittedLinksTakeBandsFromOneNodeAndOneRankPerNodeSweeps) {
  std::vector<AllReduceSample> sweep;
  for (double bytes = 1024; bytes < 64 * 1024; bytes *= 2) sweep.push_back(Ring(4, bytes, 10e-6, 1 / 1e9));
  for (double bytes = 1 << 20; bytes < 16 << 20; bytes *= 2) sweep.push_back(Ring(4, bytes, 4e-6, 1 / 5e9));
  // --split inter: one rank on each of 4 nodes, 1 Gbit/s-class.
  for (double bytes = 1 << 20; bytes < 16 << 20; bytes *= 2) {
    sweep.push_back({4, 1, bytes, 1, 2.0 * 3 * 50e-6 + 2.0 * 3 / 4 * bytes / 0.125e9, "inter"});
  }
  LinkModel links = ResolveLinks(FitAlphaBeta(sweep), LinkOverrides{});
  BandLinks(links, sweep, false);
  ASSERT_EQ(links.intra.bands.size(), 3u);
  EXPECT_NE(links.intra.origin.find("2 of 3 size bands fitted on their own"), std::string::npos) << links.intra.origin;
  EXPECT_NEAR(1 / links.intra.bands[1].beta_s_per_byte, 5e9, 5e3);
  EXPECT_NEAR(1 / links.inter.bands[1].beta_s_per_byte, 0.125e9, 1e3);
  // A rate the user gave (--inter-node-gbps) is not replaced.
  LinkOverrides given;
  given.inter_node_gbps = 10;
  LinkModel kept = ResolveLinks(FitAlphaBeta(sweep), given);
  BandLinks(kept, sweep, true);
  EXPECT_TRUE(kept.inter.bands.empty());
  EXPECT_DOUBLE_EQ(kept.inter.beta_s_per_byte, 8 / 10e9);
}

// A run measured in dp at k = 2 on one node, weak scaling: 0.5 s of compute, 0.1 s of optimizer, 0.05 s exposed
// of 0.1 s of gradient all-reduce (overlap 0.5), 4096 tokens per rank per step, 1 GB of gradients per rank.
ProjectionBasis SmallBasis() {
  ProjectionBasis b;
  b.run = "run.h5";
  b.mode = "dp";
  b.k = 2;
  b.step_s = 0.65;
  b.tokens_per_step = 8192;
  b.exposed_s = 0.05;
  b.optimizer_s = 0.1;
  b.gradient_bytes = 1e9;
  b.bucket_bytes = 25.0 * 1024 * 1024;
  b.fsdp_units = 6;
  b.overlap = 0.5;
  b.hidden_s = 0.05;
  b.overlap_measured = true;
  b.parameters = 0.25e9;
  b.gathered_parameters = 0.1e9;
  TensorParallelShape one;
  one.dp_memory = {0.5e9, 0.5e9, 3e9, 2e9, 0};  // 16 B per parameter, 2 GB of activations
  TensorParallelShape two = one;
  two.tp = 2;
  two.dp_memory.activations_bytes = 1.2e9;
  two.activation_bytes = 64e6;
  two.activation_ops = 20;
  b.shapes = {one, two};
  return b;
}

TEST(LayoutSearch, HandComputedStepOnANode) {
  const PriceFile p = ParsePriceFile(kFabricPrices, "p.toml");
  const LayoutChoice choice = ChooseLayout(SmallBasis(), p.fabrics[0], {1, 8}, 80 * kGiB);
  // dp, zero1, fsdp at T=1, then tp2 with each.
  ASSERT_EQ(choice.candidates.size(), 6u);
  const LayoutCandidate& dp = choice.candidates[0];
  EXPECT_EQ(dp.Name(), "dp");
  // 1 GB in ceil(1e9 / 25 MiB) = 39 buckets over 8 ranks: 2*7*39 alpha + 2*7/8 * 1e9 / 370e9.
  const double comm = 2 * 7 * 39 * 1e-6 + 2.0 * 7 / 8 * 1e9 / 370e9;
  EXPECT_NEAR(dp.comm_s, comm, 1e-12);
  // Backward hid 0.05 s (half) in the run: here it hides half again, the smallest of half, 0.05 s and the compute.
  EXPECT_NEAR(dp.exposed_s, 0.5 * comm, 1e-15);
  EXPECT_NEAR(dp.step_s, 0.5 + 0.1 + 0.5 * comm, 1e-12);
  EXPECT_NEAR(dp.tokens_per_s, 8 * 4096 / dp.step_s, 1e-6);
  // zero1: one reduce-scatter and one all-gather (an all-reduce's worth in one op), the optimizer over 8 ranks.
  const LayoutCandidate& zero1 = choice.candidates[1];
  EXPECT_NEAR(zero1.optimizer_s, 0.1 * 1 / 8, 1e-12);
  EXPECT_NEAR(zero1.comm_s, 2 * 7 * 1e-6 + 2.0 * 7 / 8 * 1e9 / 370e9, 1e-12);
  EXPECT_NEAR(zero1.exposed_s, zero1.comm_s, 1e-15);  // after backward: nothing hidden
  EXPECT_TRUE(zero1.assumptions.empty());
  const LayoutCandidate& fsdp = choice.candidates[2];
  EXPECT_NE(fsdp.assumptions.front().find("backward hides up to 0.05 s per step as it did in dp, taken for fsdp"),
            std::string::npos);
  // tp2+dp: half the compute per rank, half the gradient, the activation all-reduces inside pairs, 4 replicas.
  const LayoutCandidate& tp2 = choice.candidates[3];
  EXPECT_EQ(tp2.Name(), "tp2+dp");
  EXPECT_NEAR(tp2.compute_s, 0.25, 1e-12);
  EXPECT_NEAR(tp2.activation_s, 2 * 1 * 20 * 1e-6 + 64e6 / 370e9, 1e-12);
  EXPECT_NEAR(tp2.tokens_per_step, 4 * 4096, 1e-9);
  // Everything fits 80 GiB; fsdp is fastest: AdamW sharded as in zero1, and its collectives hidden by backward as
  // dp's were, where zero1's come after backward.
  ASSERT_TRUE(choice.chosen.has_value());
  EXPECT_EQ(choice.candidates[*choice.chosen].Name(), "fsdp");
  const LayoutCandidate& won = choice.candidates[*choice.chosen];
  EXPECT_NEAR(won.step_s, 0.5 + 0.1 / 8 + 0.5 * won.comm_s, 1e-12);
  EXPECT_NE(choice.reason.find("fsdp is the fastest that fits"), std::string::npos) << choice.reason;
}

TEST(LayoutSearch, ModesTheGpusDoNotTrainAreNotConsidered) {
  const PriceFile p = ParsePriceFile(kFabricPrices, "p.toml");
  ProjectionBasis basis = SmallBasis();
  basis.shapes[1].modes_not_built["fsdp"] = "--tensor-parallel 2 with --parallel fsdp is not built on the GPUs yet";
  const LayoutChoice choice = ChooseLayout(basis, p.fabrics[0], {1, 8}, 80 * kGiB);
  const LayoutCandidate& tp2_fsdp = choice.candidates[5];
  ASSERT_EQ(tp2_fsdp.Name(), "tp2+fsdp");
  EXPECT_FALSE(tp2_fsdp.considered);
  EXPECT_EQ(tp2_fsdp.why_not, "--tensor-parallel 2 with --parallel fsdp is not built on the GPUs yet");
  EXPECT_TRUE(choice.candidates[4].considered);  // tp2+zero1
}

TEST(LayoutSearch, MemoryRulesOutAndNothingFitsSaysWhy) {
  const PriceFile p = ParsePriceFile(kFabricPrices, "p.toml");
  // 5 GiB per GPU: dp needs 6 GB (4 of states + 2 of activations); zero1 over 8 fits.
  const LayoutChoice tight = ChooseLayout(SmallBasis(), p.fabrics[0], {1, 8}, 5 * kGiB);
  EXPECT_FALSE(tight.candidates[0].memory.fits);
  EXPECT_NE(tight.candidates[0].why_not.find("does not fit: needs"), std::string::npos);
  EXPECT_NE(tight.reason.find("does not fit the GPU's memory"), std::string::npos) << tight.reason;
  const LayoutChoice none = ChooseLayout(SmallBasis(), p.fabrics[0], {1, 8}, 0.1 * kGiB);
  EXPECT_FALSE(none.chosen.has_value());
  EXPECT_NE(none.reason.find("no layout fits the GPU's memory"), std::string::npos) << none.reason;
  // A fabric without a network cannot take several nodes: no candidate, the reason.
  Fabric bare = p.fabrics[0];
  bare.network = {};
  const LayoutChoice cut = ChooseLayout(SmallBasis(), bare, {2, 8}, 80 * kGiB);
  EXPECT_TRUE(cut.candidates.empty());
  EXPECT_NE(cut.reason.find("declares no nics_per_node"), std::string::npos);
}

// A 13B-parameter model (40 layers, d 5120) measured in dp... as its numbers would be on H100s: 0.4 s of compute per
// step for 2048 tokens per rank, 26 GB of bf16 gradients, 16 B of states per parameter (208 GB: dp fits nowhere),
// 20 GB of activations (8 GB at T=2, 3.6 at T=4, 1.8 at T=8).
ProjectionBasis LargeBasis() {
  ProjectionBasis b;
  b.run = "gpt13b.h5";
  b.mode = "fsdp";
  b.k = 8;
  b.tokens_per_step = 8 * 2048;
  b.optimizer_s = 0.08;
  b.exposed_s = 0.1;
  b.step_s = 0.4 + b.optimizer_s + b.exposed_s;
  b.gradient_bytes = 26e9;
  b.fsdp_units = 42;
  b.overlap = 0.6;
  b.hidden_s = 0.15;
  b.overlap_measured = true;
  b.parameters = 13e9;
  b.gathered_parameters = 2 * 0.32e9 + 0.27e9;
  const double activations[] = {20e9, 8e9, 3.6e9, 1.8e9};
  int i = 0;
  for (int t : {1, 2, 4, 8}) {
    TensorParallelShape s;
    s.tp = t;
    s.dp_memory = {26e9, 26e9, 156e9, activations[i++], 0};
    // 4 L N C fp32 elements: 4 * 40 * 2048 * 5120 * 4 B.
    s.activation_bytes = t > 1 ? 4.0 * 40 * 2048 * 5120 * 4 : 0;
    s.activation_ops = t > 1 ? 164 : 0;
    b.shapes.push_back(s);
  }
  return b;
}

TEST(LayoutSearch, NvlinkNodeAndPcieNodesChooseDifferentLayouts) {
  const PriceFile p = ParsePriceFile(kFabricPrices, "p.toml");
  const LayoutChoice node = ChooseLayout(LargeBasis(), p.fabrics[0], {1, 8}, 80 * kGiB);
  const LayoutChoice cluster = ChooseLayout(LargeBasis(), p.fabrics[1], {4, 8}, 80 * kGiB);
  ASSERT_TRUE(node.chosen && cluster.chosen) << node.reason << " / " << cluster.reason;
  const LayoutCandidate& a = node.candidates[*node.chosen];
  const LayoutCandidate& b = cluster.candidates[*cluster.chosen];
  // dp fits on neither (208 GB of states per GPU). On the node, zero1 over 8 needs 52 GB of bf16 weights and
  // gradients + 19.5 of AdamW + 20 of activations: too much; fsdp over NVLink exposes 13% of its step and wins. Over
  // four nodes zero1's AdamW shard is 4.9 GB (77 GB in all: it fits), and on 2 x 100 Gbit/s per 8 GPUs fsdp's gathers
  // (1.5 x zero1's bytes) cost more than they save.
  EXPECT_FALSE(node.candidates[0].memory.fits);
  EXPECT_FALSE(cluster.candidates[0].memory.fits);
  EXPECT_FALSE(node.candidates[1].memory.fits);
  EXPECT_EQ(a.Name(), "fsdp") << node.reason;
  EXPECT_EQ(b.Name(), "zero1") << cluster.reason;
  EXPECT_GT(b.exposed_s / b.step_s, 0.5);  // network-bound
  EXPECT_NE(cluster.reason.find("next fsdp at"), std::string::npos) << cluster.reason;
}

TEST(LayoutSearch, ProjectTargetsOnTheOfferingsNodes) {
  const std::vector<ProjectTarget> targets = ParseProjectTargets("8,32,4x2", "--project");
  ASSERT_EQ(targets.size(), 3u);
  std::string why;
  EXPECT_EQ(LayoutOnNodes(targets[0], 8, why)->Name(), "1x8");
  EXPECT_EQ(LayoutOnNodes(targets[1], 8, why)->Name(), "4x8");
  EXPECT_EQ(LayoutOnNodes(targets[1], 2, why)->Name(), "16x2");
  EXPECT_EQ(LayoutOnNodes(targets[2], 8, why)->Name(), "4x2");
  EXPECT_FALSE(LayoutOnNodes(targets[2], 1, why).has_value());
  EXPECT_NE(why.find("layout 4x2 needs 2 GPUs on one node; the offering's nodes have 1"), std::string::npos);
  EXPECT_FALSE(LayoutOnNodes(ParseProjectTargets("12", "--project")[0], 8, why).has_value());
  EXPECT_NE(why.find("12 GPUs are not a whole number of 8-GPU nodes"), std::string::npos);
  EXPECT_NE(InputErrorOf([] { ParseProjectTargets("8,x", "--project"); }).find("--project"), std::string::npos);
}

// ---- pipeline stages in the layout search ----------------------------------------------------------------------------

// "pcie-eth": 8 PCIe GPUs per node (20 GB/s all-reduce busbw, 3 us) and one 25 Gbit/s Ethernet NIC per node: 25/8 =
// 3.125 Gbit/s = 0.390625 GB/s per rank when the node's 8 ranks share it, 20 us. "nvl-ib": NVSwitch (370 GB/s, 1 us)
// and 8 x 400 Gbit/s InfiniBand: 50 GB/s per rank, 5 us.
const char* const kPipelineFabrics = R"(
[[fabric]]
name = "pcie-eth"
intra = "pcie"
pcie_gen = 4
pcie_lanes = 16
gpus_per_switch = 2
intra_allreduce_busbw_GBps = 20
intra_latency_us = 3
intra_source = "measured 2023"
nics_per_node = 1
nic_gbps = 25
network_latency_us = 20
network_source = "assumed 2026"

[[fabric]]
name = "nvl-ib"
intra = "nvswitch"
intra_allreduce_busbw_GBps = 370
intra_latency_us = 1
intra_source = "nccl-tests issue 212, 2024"
nics_per_node = 8
nic_gbps = 400
network_latency_us = 5
network_source = "datasheet, 2024"

[[offering]]
name = "pcie"
gpu = "H100 PCIe"
gpus_per_node = 8
usd_per_gpu_hour = 2
storage_usd_per_gb_month = 0
egress_usd_per_gb = 0
mtbf_node_hours = 6335
restart_hours = 0.5
fabric = "pcie-eth"
)";

// P even stages of a model whose data-parallel memory per rank is `dp` (states and one micro-batch's activations at
// T): stage s holds 1/P of the states and the activations of its L/P layers for the P - s micro-batches 1F1B keeps in
// flight there (the head's activations left out, for the hand arithmetic).
PipelineShape EvenStages(int pp, const MemoryBreakdown& dp, double compute_share, double edge_bytes,
                         double embedding_bytes) {
  PipelineShape pipe;
  pipe.pp = pp;
  for (int s = 0; s < pp; ++s) {
    pipe.stage_memory.push_back({dp.weights_bytes / pp, dp.gradients_bytes / pp, dp.optimizer_bytes / pp,
                                 dp.activations_bytes * (pp - s) / pp, 0});
    pipe.parameter_share.push_back(1.0 / pp);
  }
  pipe.compute_share = compute_share;
  pipe.edge_bytes = edge_bytes;
  pipe.embedding_bytes = embedding_bytes;
  return pipe;
}

const LayoutCandidate& Named(const LayoutChoice& choice, const std::string& name) {
  for (const LayoutCandidate& c : choice.candidates) {
    if (c.Name() == name) return c;
  }
  throw std::logic_error("no candidate " + name);
}

// A dp run on one node of 8, weak scaling: 1 s of compute per step for 4 micro-batches of 2048 tokens per rank, no
// optimizer time and nothing exposed (so that the pipeline's arithmetic stands alone), 1 GB of gradients per rank.
ProjectionBasis EvenBasis() {
  ProjectionBasis b;
  b.run = "run.h5";
  b.k = 8;
  b.step_s = 1.0;
  b.tokens_per_step = 8 * 4 * 2048;
  b.micro_batch_tokens = 2048;
  b.gradient_bytes = 1e9;
  b.parameters = 0.25e9;
  TensorParallelShape one;
  one.dp_memory = {0.5e9, 0.5e9, 3e9, 2e9, 0};
  one.pipelines = {EvenStages(4, one.dp_memory, 0.25, 16e6, 0)};
  b.shapes = {one};
  return b;
}

TEST(LayoutSearch, PipelineBubbleIsItsShareOfThePipelinedPart) {
  const PriceFile p = ParsePriceFile(kPipelineFabrics, "p.toml");
  const LayoutChoice choice = ChooseLayout(EvenBasis(), p.fabrics[1], {4, 8}, 80 * kGiB);
  // Stages come after the layouts without them, in the order dp, zero1 across the pipelines.
  ASSERT_EQ(choice.candidates.size(), 5u);
  const LayoutCandidate& pp = choice.candidates[3];
  ASSERT_EQ(pp.Name(), "pp4+dp");
  ASSERT_TRUE(pp.considered) << pp.why_not;
  // M = P x the run's 4 micro-batches per replica = 16: 8 pipelines x 16 x 2048 tokens, dp's 32 x 4 x 2048.
  EXPECT_EQ(pp.micro_batches, 16);
  EXPECT_DOUBLE_EQ(pp.tokens_per_step, choice.candidates[0].tokens_per_step);
  // The heaviest stage: a quarter of the model's compute on 4 times the tokens of a replica of the run: 1 s.
  EXPECT_NEAR(pp.compute_s, 1.0, 1e-12);
  // Boundaries cross nodes: 2 x 16 exchanges of 16 MB at 50 GB/s per rank after 5 us each.
  const double exchange = 5e-6 + 16e6 / 50e9;
  EXPECT_NEAR(pp.pipeline_s, 2 * 16 * exchange, 1e-12);
  // 1F1B: 16 + 3 slots of (compute + exchanges) / 16; the 3 idle ones are the bubble, 3/19 of the pipelined part.
  EXPECT_NEAR(pp.bubble_s, (1.0 + 2 * 16 * exchange) * 3 / 16, 1e-12);
  EXPECT_NEAR(pp.bubble_s / (pp.compute_s + pp.activation_s + pp.pipeline_s + pp.bubble_s), 3.0 / 19, 1e-12);
  // Each stage's 8 replicas sit on one node: its quarter of the gradients in ceil(0.25e9 / 25 MiB) = 10 buckets
  // over NVSwitch, nothing across the network.
  EXPECT_NEAR(pp.comm_s, 2 * 7 * 10 * 1e-6 + 2.0 * 7 / 8 * 0.25e9 / 370e9, 1e-12);
  EXPECT_NEAR(pp.step_s, pp.compute_s + pp.pipeline_s + pp.bubble_s + pp.exposed_s, 1e-12);
  EXPECT_EQ(pp.embedding_s, 0.0);
  // Memory: the first stage holds a quarter of the states and 4 micro-batches of a quarter of the layers.
  EXPECT_NEAR(pp.memory.required_bytes, (0.5e9 + 0.5e9 + 3e9) / 4 + 2e9, 1);
  EXPECT_NE(std::find_if(pp.assumptions.begin(), pp.assumptions.end(),
                         [](const std::string& a) { return a.find("M = 16 micro-batches") == 0; }),
            pp.assumptions.end());
}

// A model of 40e9 parameters (16 B each: 80 GB of bf16 weights, 80 of gradients, 480 of fp32 master weights and
// AdamW moments) whose one micro-batch's activations per rank are 80, 40, 20 and 10 GB at T = 1, 2, 4, 8, on four
// PCIe nodes of 40 GiB GPUs over 25 Gbit/s Ethernet. Without stages nothing fits: at T=8 (the smallest activations)
// zero1 over the 4 replicas holds 10 + 10 + 480/32 = 35 GB of states and 10 of activations: 45 GB = 41.9 GiB; fsdp
// across tensor-parallel groups is not built, and fsdp at T=1 holds the 80 GB of activations. With stages each rank
// holds 1/P of the states: pp2+tp8+zero1 (2 replicas per stage) 5 + 5 + 15 of states and 10 of activations (the first
// stage keeps 2 micro-batches of half the layers): 35 GB = 32.6 GiB, and pp4+tp8 (one pipeline) 2.5 + 2.5 + 15 + 10 =
// 30 GB: both fit, and the faster is chosen.
ProjectionBasis HugeBasis() {
  ProjectionBasis b;
  b.run = "huge.h5";
  b.k = 8;
  b.tp = 8;
  b.step_s = 2.0;
  b.tokens_per_step = 4 * 2048;  // one replica of T = 8, 4 micro-batches of 2048 tokens
  b.micro_batch_tokens = 2048;
  b.gradient_bytes = 160e9 / 8;
  b.parameters = 40e9;
  const double activations[] = {80e9, 40e9, 20e9, 10e9};
  int i = 0;
  for (int t : {1, 2, 4, 8}) {
    TensorParallelShape s;
    s.tp = t;
    s.dp_memory = {80e9, 80e9, 480e9, activations[i++], 0};
    if (t > 1) s.modes_not_built["fsdp"] = "--tensor-parallel " + std::to_string(t) + " with --parallel fsdp is not built";
    s.activation_bytes = t > 1 ? 4.0 * 80 * 2048 * 8192 * 4 : 0;
    s.activation_ops = t > 1 ? 324 : 0;
    for (int pp : {2, 4}) s.pipelines.push_back(EvenStages(pp, s.dp_memory, 1.0 / pp, 2048 * 8192 * 4.0, 0));
    b.shapes.push_back(s);
  }
  return b;
}

TEST(LayoutSearch, PipelineStagesFitWhatNoOtherLayoutDoes) {
  const PriceFile p = ParsePriceFile(kPipelineFabrics, "p.toml");
  const LayoutChoice choice = ChooseLayout(HugeBasis(), p.fabrics[0], {4, 8}, 40 * kGiB);
  for (const LayoutCandidate& c : choice.candidates) {
    if (c.pp == 1) {
      EXPECT_FALSE(c.Viable()) << c.Name() << " " << c.memory.required_bytes / kGiB << " GiB";
    }
  }
  EXPECT_NEAR(Named(choice, "tp8+zero1").memory.required_bytes, 45e9, 1);
  const LayoutCandidate& two = Named(choice, "pp2+tp8+zero1");
  EXPECT_NEAR(two.memory.required_bytes, 35e9, 1);
  EXPECT_TRUE(two.memory.fits);
  EXPECT_NEAR(Named(choice, "pp4+tp8").memory.required_bytes, 30e9, 1);
  EXPECT_FALSE(Named(choice, "pp4+tp4+zero1").memory.fits);  // 5 + 5 + 15 + 20 = 45 GB
  ASSERT_TRUE(choice.chosen.has_value()) << choice.reason;
  const LayoutCandidate& won = choice.candidates[*choice.chosen];
  EXPECT_GT(won.pp, 1);
  EXPECT_EQ(won.tp, 8);
  EXPECT_LE(won.memory.required_bytes, 40 * kGiB);
  EXPECT_NE(choice.reason.find("pp" + std::to_string(won.pp) + " across 4 nodes: only stage boundaries cross the network"),
            std::string::npos) << choice.reason;
}

// A 6.7B-parameter model (d 4096, 32 layers, a vocabulary of 50304) measured in dp on one node of 8 GPUs, weak
// scaling: 0.82 s of compute and 0.1 s of AdamW per step for 4 micro-batches of 2048 tokens per rank, 26.8 GB of fp32
// gradients, overlap 0.5 (0.1 s hidden). On four nodes:
//   pcie-eth: dp's hierarchical all-reduce sends 2 x 3/4 x 26.8/8 GB across at 0.390625 GB/s per rank: 12.9 s, plus
//     1.75 x 26.8 GB over PCIe at 20 GB/s: 2.3 s; a step of about 16 s (zero1 alike). pp4: M = 4 x 4 = 16; a stage's
//     gradients (a quarter, 6.7 GB) stay in its node: 1.75 x 6.7 / 20 = 0.59 s; only boundary activations cross:
//     2 x 16 exchanges of 2048 x 4096 x 4 B = 33.6 MB at 0.39 GB/s: 2.75 s; compute of the heaviest stage (27% of the
//     FLOPs) on 4 x the tokens: 0.89 s; bubble (0.89 + 2.75) x 3/16 = 0.68 s; the tied embedding (4 x 50304 x 4096 B =
//     824 MB) all-reduced between 2 nodes: 2.1 s; with 0.49 s of the gradients exposed, 6.95 s. Pipeline wins, by over
//     2x (pp2, its stages on 2 nodes each, sends half its gradients across: 10.1 s).
//   nvl-ib: zero1's collectives take 1.75 x 26.8 / 370 + 1.5 x 3.35 / 50 = 0.23 s, a step of 1.05 s.
//     pp4's transfers are 2 x 16 x 0.67 ms = 0.02 s, but its bubble is 3/19 of a pipelined part of 1.08 s and its
//     heaviest stage carries the LM head: it loses to the layouts without stages (pp2 likewise).
ProjectionBasis SevenBBasis() {
  ProjectionBasis b;
  b.run = "gpt6.7b.h5";
  b.k = 8;
  b.optimizer_s = 0.1;
  b.exposed_s = 0.05;
  b.step_s = 0.82 + b.optimizer_s + b.exposed_s;
  b.tokens_per_step = 8 * 4 * 2048;
  b.micro_batch_tokens = 2048;
  b.gradient_bytes = 26.8e9;
  b.overlap = 0.5;
  b.hidden_s = 0.1;
  b.overlap_measured = true;
  b.parameters = 6.7e9;
  b.fsdp_units = 34;
  b.gathered_parameters = 2 * 0.2e9 + 0.4e9;
  TensorParallelShape one;
  one.dp_memory = {13.4e9, 13.4e9, 80.4e9, 4e9, 0};  // 16 B per parameter: 107 GB of states, dp does not fit
  // The heaviest stage: its 32/P layers and the LM head (6 V d = 1.24 GFLOP per token, about a layer's 72 d^2 + 6 T d
  // = 1.26): (32/P + 1) / 33 of the FLOPs.
  for (int pp : {2, 4}) {
    one.pipelines.push_back(EvenStages(pp, one.dp_memory, (32.0 / pp + 1) / 33, 2048 * 4096 * 4.0, 4.0 * 50304 * 4096));
  }
  b.shapes = {one};
  return b;
}

TEST(LayoutSearch, PipelineWinsOnSlowEthernetAndLosesOnInfiniBand) {
  const PriceFile p = ParsePriceFile(kPipelineFabrics, "p.toml");
  const LayoutChoice slow = ChooseLayout(SevenBBasis(), p.fabrics[0], {4, 8}, 80 * kGiB);
  const LayoutChoice fast = ChooseLayout(SevenBBasis(), p.fabrics[1], {4, 8}, 80 * kGiB);
  ASSERT_TRUE(slow.chosen && fast.chosen) << slow.reason << " / " << fast.reason;
  const LayoutCandidate& zero1 = Named(slow, "zero1");
  const LayoutCandidate& pp4 = Named(slow, "pp4+zero1");
  EXPECT_NEAR(zero1.comm_s, 2.0 * 3 / 4 * 26.8e9 / 8 / 0.390625e9 + 1.75 * 26.8e9 / 20e9, 0.01);
  EXPECT_NEAR(pp4.pipeline_s, 2 * 16 * (20e-6 + 2048 * 4096 * 4.0 / 0.390625e9), 1e-9);
  EXPECT_NEAR(pp4.embedding_s, 2 * 20e-6 + 4.0 * 50304 * 4096 / 0.390625e9, 1e-9);
  EXPECT_NEAR(pp4.bubble_s / (pp4.compute_s + pp4.pipeline_s + pp4.bubble_s), 3.0 / 19, 1e-12);
  const LayoutCandidate& slow_won = slow.candidates[*slow.chosen];
  EXPECT_EQ(slow_won.pp, 4) << slow.reason;
  EXPECT_GT(slow_won.tokens_per_s, 2 * Named(slow, "zero1").tokens_per_s);
  EXPECT_GT(slow_won.tokens_per_s, 2 * Named(slow, "dp").tokens_per_s);
  EXPECT_NE(slow.reason.find("pp4 across 4 nodes: only stage boundaries cross the network (each stage's gradients "
                             "inside its node), bubble "),
            std::string::npos) << slow.reason;
  const LayoutCandidate& fast_won = fast.candidates[*fast.chosen];
  EXPECT_EQ(fast_won.pp, 1) << fast.reason;
  EXPECT_LT(Named(fast, "pp4+zero1").tokens_per_s, fast_won.tokens_per_s);
  EXPECT_LT(Named(fast, "pp2+zero1").tokens_per_s, fast_won.tokens_per_s);
}

TEST(LayoutSearch, PipelineSizeTheModelCannotTakeIsListedWithTrainsReason) {
  // gpt2-124m's 12 layers in 8 stages: PlanTrainPoint refuses with MakePipelineStage's words.
  const ModelConfig model = FindPreset("gpt2-124m");
  const std::string why = InputErrorOf([&] { PlanTrainPoint(model, 8, 1, 8, 1, 8, 1024, true); });
  ASSERT_NE(why.find("does not divide the model's 12 layers"), std::string::npos) << why;
  ProjectionBasis basis = EvenBasis();
  PipelineShape eight;
  eight.pp = 8;
  eight.invalid = why;
  basis.shapes[0].pipelines.push_back(eight);
  const PriceFile p = ParsePriceFile(kPipelineFabrics, "p.toml");
  const LayoutChoice choice = ChooseLayout(basis, p.fabrics[1], {8, 8}, 80 * kGiB);
  const LayoutCandidate& pp8 = Named(choice, "pp8+dp");
  EXPECT_FALSE(pp8.considered);
  EXPECT_EQ(pp8.why_not, why);
  EXPECT_TRUE(Named(choice, "pp4+dp").considered);  // 4 divides the 8 nodes too
  EXPECT_NE(choice.reason.find("not possible for this model"), std::string::npos) << choice.reason;
  // Four nodes take no 8 stages: not listed there.
  const LayoutChoice four = ChooseLayout(basis, p.fabrics[1], {4, 8}, 80 * kGiB);
  EXPECT_TRUE(std::none_of(four.candidates.begin(), four.candidates.end(), [](const LayoutCandidate& c) { return c.pp == 8; }));
}

// A pipeline run measured on one node projected with its fitted links to two: its gradients over a stage's replicas,
// its exchanges and tied-embedding all-reduce as measured plus their change from the intra- to the inter-node link.
TEST(StepModel, PipelineRunCarriesItsStagesToAnotherLayout) {
  TrainPointInput p;
  p.k = 4;
  p.nodes = 1;
  p.gpus_per_node = 4;
  p.step_s = 1.0;
  p.comm_total_s = 0.1;
  p.comm_exposed_s = 0.05;
  p.gradient_bytes = 1e8;
  p.buckets = 4;
  p.tokens_per_step = 4096;
  p.pipeline_parallel = 2;
  p.micro_batches = 4;
  p.pipeline_s = 0.2;
  p.embedding_s = 0.01;
  p.edge_bytes = 1e6;
  p.embedding_bytes = 4e7;
  LinkModel links;
  links.intra = {0, 1 / 10e9, true, "", {}};
  links.inter = {5e-6, 8 / 10e9, true, "", {}};
  const StepModel model({p}, true, p);
  // At its own layout: the measured step, stage 0 and 1's two replicas each on the node.
  const ProjectedPoint same = model.Project(links, {1, 4});
  EXPECT_NEAR(same.comm_s, PredictAllReduceSeconds(links, 1, 2, 1e8, 4), 1e-15);
  EXPECT_NEAR(same.pipeline_s, 0.21, 1e-15);
  // Two nodes of 2: each stage on its own node (its replicas inside it), the boundary and the embedding across.
  const ProjectedPoint two = model.Project(links, {2, 2});
  EXPECT_NEAR(two.comm_s, PredictAllReduceSeconds(links, 1, 2, 1e8, 4), 1e-15);
  const double slots = 2.0 * 4 * (4 + 1) / 4;  // 2 M exchanges in (M + P - 1) / M of their time with the bubble
  const double change = slots * ((5e-6 + 1e6 * 8 / 10e9) - 1e6 / 10e9) +
                        PredictAllReduceSeconds(links, 2, 1, 4e7, 1) - PredictAllReduceSeconds(links, 1, 2, 4e7, 1);
  EXPECT_NEAR(two.pipeline_s, 0.21 + change, 1e-12);
  EXPECT_NEAR(two.step_s - same.step_s, change + 0.5 * (two.comm_s - same.comm_s), 1e-12);
}

// A Mixtral-like MoE model (16 experts, 32 MoE blocks, top-2, d 4096; 96% of its parameters in the experts) measured
// with its experts over 8 GPUs of one node: only EP 8 and EP 16 fit 80 GiB.
ProjectionBasis MoeBasis() {
  ProjectionBasis b;
  b.run = "moe.h5";
  b.mode = "dp";
  b.k = 8;
  b.ep = 8;
  b.tokens_per_step = 8 * 4096;
  b.micro_batch_tokens = 4096;
  b.optimizer_s = 0.05;
  b.exposed_s = 0.05;
  b.alltoall_s = 0.2;
  b.step_s = 1.0 + b.optimizer_s + b.exposed_s + b.alltoall_s;
  b.overlap = 0.5;
  b.hidden_s = 0.05;
  b.overlap_measured = true;
  b.parameters = 24e9;
  b.moe.expert_share = 0.96;
  b.moe.alltoall_bytes_per_token = 4.0 * 32 * 2 * 4096 * 2;  // 4 all-to-alls x 32 blocks x top-2 x d x bf16
  b.moe.alltoall_ops_per_micro_batch = 4.0 * 32;
  b.gradient_bytes = 2.0 * 24e9 * b.HeldShare(8);  // bf16 gradients of what a rank holds at EP 8
  TensorParallelShape one;
  for (int ep : {1, 2, 4, 8, 16}) {
    const double held = 24e9 * b.HeldShare(ep);
    one.experts.push_back({ep, "", {2 * held, 2 * held, 12 * held, 10e9, 0}});
  }
  one.dp_memory = one.experts.front().dp_memory;
  b.shapes = {one};
  return b;
}

// Expert parallel on two NVLink nodes and on two PCIe nodes: inside the node the all-to-all goes at the fabric's
// intra-node rate; across nodes 8 of a GPU's 15 peers are behind its share of the NICs. Hand-computed all-to-alls and
// gradient collectives; the reason names the all-to-all, and on PCIe nodes over 2 x 100 Gbit/s says that the
// all-to-all across nodes dominates the chosen layout's step.
TEST(LayoutSearch, ExpertParallelAllToAllInsideANodeAndAcrossNodes) {
  const PriceFile p = ParsePriceFile(kFabricPrices, "p.toml");
  const ProjectionBasis basis = MoeBasis();
  const LayoutChoice nvl = ChooseLayout(basis, p.fabrics[0], {2, 8}, 80 * kGiB);
  const LayoutChoice pcie = ChooseLayout(basis, p.fabrics[1], {2, 8}, 80 * kGiB);
  // dp, zero1, fsdp (all experts on every GPU: none fits), then ep2, ep4, ep8, ep16 with dp across.
  ASSERT_EQ(nvl.candidates.size(), 7u);
  EXPECT_FALSE(nvl.candidates[0].memory.fits);
  const LayoutCandidate& ep8 = nvl.candidates[5];
  const LayoutCandidate& ep16 = nvl.candidates[6];
  ASSERT_EQ(ep8.Name(), "ep8+dp");
  ASSERT_EQ(ep16.Name(), "ep16+dp");
  // 4096 tokens x 2 MiB per token x 7/8 leave the GPU in 128 all-to-alls, all inside the node at 370 GB/s.
  const double bytes8 = 4096 * basis.moe.alltoall_bytes_per_token * 7 / 8;
  EXPECT_NEAR(ep8.alltoall_bytes, bytes8, 1e-3);
  EXPECT_EQ(ep8.alltoall_inter_bytes, 0);
  EXPECT_NEAR(ep8.alltoall_s, 128 * 1e-6 + bytes8 / 370e9, 1e-9);
  // EP 16: 15/16 leave; 7 of 15 peers on the node (370 GB/s), 8 on the other (8 x 400 Gbit/s over 8 GPUs: 50 GB/s).
  const double bytes16 = 4096 * basis.moe.alltoall_bytes_per_token * 15 / 16;
  const double inter = bytes16 * 8 / 15;
  EXPECT_NEAR(ep16.alltoall_inter_bytes, inter, 1e-3);
  EXPECT_NEAR(ep16.alltoall_s, std::max(128 * 1e-6 + (bytes16 - inter) / 370e9, 128 * 5e-6 + inter / 50e9), 1e-9);
  // The compute is the run's without its all-to-all, at any EP.
  EXPECT_NEAR(ep8.compute_s, 1.0, 1e-12);
  EXPECT_NEAR(ep8.step_s, ep8.compute_s + ep8.optimizer_s + ep8.exposed_s + ep8.alltoall_s, 1e-12);
  // The trade: EP 8 keeps the all-to-all inside the node but all-reduces each expert's gradients (96% of the model,
  // 1/8 of it per GPU: 5.76 GB in bf16) between the two GPUs holding it, one per node; EP 16 holds each expert once
  // (no expert gradient to reduce) and sends 8/15 of its all-to-all across. Both fit 80 GiB, EP 4 and below do not.
  const double experts8 = 2.0 * 24e9 * 0.96 / 8;
  const Layout pair{2, 1};
  EXPECT_NEAR(ep8.comm_s, PredictAllReduceSeconds(LinksOnFabric(p.fabrics[0], 2, 8).links, 2, 8,
                                                  2.0 * 24e9 * 0.04, std::ceil(2.0 * 24e9 * 0.04 / basis.bucket_bytes)) +
                              PredictAllReduceSeconds(LinksOnFabric(p.fabrics[0], 2, 8).links, pair.nodes,
                                                      pair.gpus_per_node, experts8, std::ceil(experts8 / basis.bucket_bytes)),
              1e-9);
  EXPECT_FALSE(nvl.candidates[4].memory.fits);
  ASSERT_TRUE(nvl.chosen && pcie.chosen) << nvl.reason << " / " << pcie.reason;
  // On NVLink nodes with 8 x 400 Gbit/s the all-to-all across costs less than the expert gradients across: EP 16.
  EXPECT_EQ(nvl.candidates[*nvl.chosen].Name(), "ep16+dp") << nvl.reason;
  EXPECT_NE(nvl.reason.find("ep16 across nodes: all-to-all 8% of the step, 53% of its bytes over the network"),
            std::string::npos) << nvl.reason;
  EXPECT_NE(nvl.reason.find("next ep8+dp at"), std::string::npos) << nvl.reason;
  EXPECT_NE(nvl.reason.find("all-to-all 2% inside a node"), std::string::npos) << nvl.reason;
  // On PCIe nodes over 2 x 100 Gbit/s: EP 8 inside the node at 20 GB/s; EP 16's all-to-all across takes longer than
  // its compute and still wins (EP 8's expert gradients across are worse): the reason says the all-to-all dominates.
  const LayoutCandidate& pcie_ep16 = pcie.candidates[6];
  EXPECT_NEAR(pcie_ep16.alltoall_s, std::max(128 * 3e-6 + (bytes16 - inter) / 20e9, 128 * 10e-6 + inter / (2 * 100e9 / 8 / 8)),
              1e-9);
  EXPECT_GT(pcie_ep16.alltoall_s, pcie_ep16.compute_s);
  EXPECT_EQ(pcie.candidates[*pcie.chosen].Name(), "ep16+dp") << pcie.reason;
  EXPECT_NE(pcie.reason.find("all-to-all across nodes dominates ep16+dp (53% of its step)"), std::string::npos)
      << pcie.reason;
  EXPECT_GT(pcie.candidates[5].alltoall_s, nvl.candidates[5].alltoall_s * 10);  // PCIe's 20 GB/s against 370
}

}  // namespace
}  // namespace tb
