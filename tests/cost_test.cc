// `trainbench cost` building blocks: the cost of a job against hand-computed cases, Young/Daly, the alpha-beta fit
// (exact on noise-free synthetic measurements, close with noise), the step projection and its held-out error, price
// files (TOML read by toml++) and their checks, GPU model matching, the memory fit against ZeRO's 16 bytes per
// parameter, and reading a run's measurements from a report.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cost.h"
#include "error.h"
#include "input_error_of.h"
#include "memory_fit.h"
#include "model_config.h"
#include "prices.h"
#include "projection.h"
#include "run_measurement.h"

namespace tb {
namespace {

Offering TestOffering() {
  Offering o;
  o.name = "test";
  o.gpu = "H100 SXM";
  o.gpus_per_node = 8;
  o.usd_per_gpu_hour = 2.0;  // a node-hour costs $16
  o.storage_usd_per_gb_month = 0.1;
  o.egress_usd_per_gb = 0.05;
  o.mtbf_node_hours = 1000;
  o.restart_hours = 0.5;
  return o;
}

CostAssumptions TestAssumptions() {
  CostAssumptions a;
  a.checkpoints_kept = 2;
  a.dataset_gb = 100;
  a.egress_gb = 20;
  a.checkpoint_interval_hours = 1.0;
  return a;
}

CostInputs TestInputs() {
  CostInputs in;
  in.target_tokens = 3.6e9;
  in.tokens_per_s = 1e5;
  in.gpus = 16;
  in.startup_s = 360;         // 0.1 h
  in.checkpoint_stall_s = 36;  // 0.01 h
  in.checkpoint_gb = 50;
  return in;
}

// ---- cost ------------------------------------------------------------------------------------------------------

TEST(Cost, HandComputedFixedInterval) {
  // 16 GPUs on nodes of 8: 2 nodes, 16 billed GPUs, 2 x $16 = $32 an hour.
  // work = 3.6e9 tokens / 1e5 tokens/s = 36,000 s = 10 h; start-up 0.1 h; checkpoint every 1 h, each stalls 0.01 h:
  //   overhead = 10 / 1 x 0.01 = 0.1 h; run = 0.1 + 10 + 0.1 = 10.2 h.
  // job MTBF = 1000 / 2 = 500 h; failures = 10.2 / 500 = 0.0204; each loses 0.5 (restart) + 0.1 (start-up) + 0.5
  //   (half an interval) = 1.1 h; retry = 0.0204 x 1.1 = 0.02244 h; time to train = 10.22244 h.
  // GPU $ = 32 x 10.2 = 326.4; storage = (100 + 2 x 50) GB x $0.1 x 10.22244 / 730 = 0.28006685; egress = 20 x 0.05 = 1;
  // retry $ = 32 x 0.02244 = 0.71808; total = 328.39814685; per 1M tokens = total / 3600 = 0.09122170746.
  // Young/Daly = sqrt(2 x 0.01 h x 500 h) = sqrt(10) = 3.16227766 h.
  const CostBreakdown c = ComputeCost(TestInputs(), TestOffering(), TestAssumptions());
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.billed_gpus, 16);
  EXPECT_DOUBLE_EQ(c.job_usd_per_hour, 32.0);
  EXPECT_DOUBLE_EQ(c.work_hours, 10.0);
  EXPECT_NEAR(c.checkpoint_overhead_hours, 0.1, 1e-12);
  EXPECT_NEAR(c.run_hours, 10.2, 1e-12);
  EXPECT_DOUBLE_EQ(c.job_mtbf_hours, 500.0);
  EXPECT_NEAR(c.expected_failures, 0.0204, 1e-12);
  EXPECT_NEAR(c.lost_hours_per_failure, 1.1, 1e-12);
  EXPECT_NEAR(c.retry_hours, 0.02244, 1e-12);
  EXPECT_NEAR(c.time_to_train_hours, 10.22244, 1e-12);
  EXPECT_NEAR(c.gpu_usd, 326.4, 1e-9);
  EXPECT_DOUBLE_EQ(c.storage_gb, 200.0);
  EXPECT_NEAR(c.storage_usd, 0.28006685, 1e-8);
  EXPECT_DOUBLE_EQ(c.transfer_usd, 1.0);
  EXPECT_NEAR(c.retry_usd, 0.71808, 1e-9);
  EXPECT_NEAR(c.total_usd, 328.39814685, 1e-7);
  EXPECT_NEAR(c.usd_per_million_tokens, 0.09122170746, 1e-10);
  ASSERT_TRUE(c.young_daly_hours.has_value());
  EXPECT_NEAR(*c.young_daly_hours, 3.16227766, 1e-8);
  EXPECT_FALSE(c.interval_is_young_daly);
  EXPECT_DOUBLE_EQ(c.checkpoint_interval_hours, 1.0);
}

// The offering's provisioning time: billed at the job's rate, shown apart from the GPU time, and part of the run that
// failures are drawn over. The fixed-interval case with 0.3 h of provisioning: run = 0.3 + 10.2 = 10.5 h; failures =
// 10.5 / 500 = 0.021, retry = 0.021 x 1.1 = 0.0231 h; time to train = 10.5231 h. GPU $ = 32 x 10.2 = 326.4 as
// before, provisioning $ = 32 x 0.3 = 9.6; storage = 200 GB x $0.1 x 10.5231 / 730 = 0.288304109589; retry $ = 32 x
// 0.0231 = 0.7392; total = 326.4 + 9.6 + 0.288304109589 + 1 + 0.7392 = 338.027504109589.
TEST(Cost, ProvisioningIsBilledAndShownApart) {
  Offering o = TestOffering();
  o.provisioning_hours = 0.3;
  const CostBreakdown c = ComputeCost(TestInputs(), o, TestAssumptions());
  EXPECT_DOUBLE_EQ(c.provisioning_hours, 0.3);
  EXPECT_NEAR(c.run_hours, 10.5, 1e-12);
  EXPECT_NEAR(c.expected_failures, 0.021, 1e-12);
  EXPECT_NEAR(c.time_to_train_hours, 10.5231, 1e-12);
  EXPECT_NEAR(c.gpu_usd, 326.4, 1e-9);
  EXPECT_NEAR(c.provisioning_usd, 9.6, 1e-9);
  EXPECT_NEAR(c.storage_usd, 0.288304109589, 1e-9);
  EXPECT_NEAR(c.retry_usd, 0.7392, 1e-9);
  EXPECT_NEAR(c.total_usd, 338.027504109589, 1e-7);
}

TEST(Cost, HandComputedYoungDalyInterval) {
  // As above, but checkpointing at the Young/Daly interval sqrt(10) = 3.16227766 h:
  //   overhead = 10 / 3.16227766 x 0.01 = 0.0316227766 h; run = 10.1316227766 h; failures = run / 500 = 0.0202632456;
  //   lost = 0.5 + 0.1 + 1.58113883 = 2.18113883 h; retry = 0.0441969509 h; GPU $ = 32 x run = 324.211928851.
  CostAssumptions a = TestAssumptions();
  a.young_daly_interval = true;
  const CostBreakdown c = ComputeCost(TestInputs(), TestOffering(), a);
  EXPECT_TRUE(c.interval_is_young_daly);
  EXPECT_NEAR(c.checkpoint_interval_hours, 3.16227766, 1e-8);
  EXPECT_NEAR(c.checkpoint_overhead_hours, 0.0316227766, 1e-10);
  EXPECT_NEAR(c.run_hours, 10.1316227766, 1e-9);
  EXPECT_NEAR(c.expected_failures, 0.0202632456, 1e-10);
  EXPECT_NEAR(c.lost_hours_per_failure, 2.18113883, 1e-8);
  EXPECT_NEAR(c.retry_hours, 0.0441969509, 1e-9);
  EXPECT_NEAR(c.gpu_usd, 324.211928851, 1e-6);
}

TEST(Cost, NodePriceWholeNodesAndNoMeasuredStall) {
  // 12 GPUs on nodes of 8 at $100 a node-hour: 2 nodes (16 GPUs billed), $200 an hour. No stall measured: no
  // checkpoint overhead, no Young/Daly; lost work still counts half the assumed 1 h interval.
  // work = 7.2e8 / 2e5 = 3600 s = 1 h; run = 1 h (no start-up); failures = 1 / 500 = 0.002; lost = 0.5 + 0 + 0.5 = 1 h;
  // retry $ = 200 x 0.002 = 0.4; GPU $ = 200; storage = 100 GB x 0.1 x 1.002 / 730 = 0.0137260274; egress = 1.
  Offering o = TestOffering();
  o.usd_per_gpu_hour.reset();
  o.usd_per_node_hour = 100.0;
  CostInputs in;
  in.target_tokens = 7.2e8;
  in.tokens_per_s = 2e5;
  in.gpus = 12;
  const CostBreakdown c = ComputeCost(in, o, TestAssumptions());
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.billed_gpus, 16);
  EXPECT_DOUBLE_EQ(c.job_usd_per_hour, 200.0);
  EXPECT_FALSE(c.young_daly_hours.has_value());
  EXPECT_DOUBLE_EQ(c.checkpoint_overhead_hours, 0.0);
  EXPECT_NEAR(c.retry_usd, 0.4, 1e-12);
  EXPECT_NEAR(c.storage_usd, 0.0137260274, 1e-10);
  EXPECT_NEAR(c.total_usd, 200 + 0.0137260274 + 1 + 0.4, 1e-9);
}

TEST(Cost, LayoutOfNNodesRentsNWholeNodes) {
  // 4 GPUs as 2 nodes of 2 on nodes of 8: 2 machines, 16 GPUs billed ($32 an hour), job MTBF 1000 / 2 = 500 h.
  // Packed (no layout) the same 4 GPUs fit one node: 8 billed, $16 an hour, MTBF 1000 h. Same throughput, so the
  // run takes as long (10.2 h) and the layout expects twice the failures: 10.2 / 500 = 0.0204 vs 0.0102.
  CostInputs in = TestInputs();
  in.gpus = 4;
  const CostBreakdown packed = ComputeCost(in, TestOffering(), TestAssumptions());
  EXPECT_EQ(packed.nodes, 1);
  EXPECT_EQ(packed.billed_gpus, 8);
  EXPECT_DOUBLE_EQ(packed.job_usd_per_hour, 16.0);
  EXPECT_DOUBLE_EQ(packed.job_mtbf_hours, 1000.0);
  EXPECT_NEAR(packed.expected_failures, 0.0102, 1e-12);

  in.nodes = 2;
  in.gpus_per_node = 2;
  const CostBreakdown spread = ComputeCost(in, TestOffering(), TestAssumptions());
  EXPECT_EQ(spread.nodes, 2);
  EXPECT_EQ(spread.billed_gpus, 16);
  EXPECT_DOUBLE_EQ(spread.job_usd_per_hour, 32.0);
  EXPECT_DOUBLE_EQ(spread.job_mtbf_hours, packed.job_mtbf_hours / 2);
  EXPECT_NEAR(spread.expected_failures, 0.0204, 1e-12);
  EXPECT_NEAR(spread.gpu_usd, 32 * 10.2, 1e-9);

  // A layout 1x8 on one 8-GPU node packs as before; an uneven one (3 ranks as 2 nodes, at most 2 on one) rents 2.
  in.gpus = 8;
  in.nodes = 1;
  in.gpus_per_node = 8;
  EXPECT_EQ(ComputeCost(in, TestOffering(), TestAssumptions()).nodes, 1);
  in.gpus = 3;
  in.nodes = 2;
  in.gpus_per_node = 2;
  EXPECT_EQ(ComputeCost(in, TestOffering(), TestAssumptions()).billed_gpus, 16);
}

TEST(Cost, LayoutWiderThanTheOfferingsNodesDoesNotFit) {
  CostInputs in = TestInputs();
  in.gpus = 8;
  in.nodes = 1;
  in.gpus_per_node = 8;
  Offering four = TestOffering();
  four.gpus_per_node = 4;
  EXPECT_TRUE(LayoutFits(in, TestOffering()));
  EXPECT_FALSE(LayoutFits(in, four));
  EXPECT_EQ(InputErrorOf([&] { ComputeCost(in, four, TestAssumptions()); }),
            "offering test has 4 GPUs per node; the layout needs 8 on one node");
  in.nodes = in.gpus_per_node = 0;  // no layout: packed into 2 nodes of 4
  EXPECT_TRUE(LayoutFits(in, four));
  EXPECT_EQ(ComputeCost(in, four, TestAssumptions()).nodes, 2);
}

TEST(Cost, MeasuredEnergyPricedWhereTheOfferingGivesAPrice) {
  // 16 GPUs at a measured 500 W each for the 10 h of work: 500 x 16 x 10 / 1000 = 80 kWh; per token 80 x 3.6e6 J /
  // 3.6e9 tokens = 0.08 J; at $0.15 a kWh $12, added to the total of HandComputedFixedInterval (328.39814685).
  CostInputs in = TestInputs();
  in.power_per_gpu_W = 500;
  Offering o = TestOffering();
  o.usd_per_kwh = 0.15;
  const CostBreakdown c = ComputeCost(in, o, TestAssumptions());
  ASSERT_TRUE(c.energy_kwh && c.energy_J_per_token && c.energy_usd);
  EXPECT_NEAR(*c.energy_kwh, 80.0, 1e-9);
  EXPECT_NEAR(*c.energy_J_per_token, 0.08, 1e-12);
  EXPECT_NEAR(*c.energy_usd, 12.0, 1e-9);
  EXPECT_NEAR(c.total_usd, 328.39814685 + 12.0, 1e-7);
  EXPECT_NEAR(c.usd_per_million_tokens, (328.39814685 + 12.0) / 3600, 1e-10);
  // Without a price the energy is shown and nothing is added; without a measurement there is no energy at all.
  const CostBreakdown unpriced = ComputeCost(in, TestOffering(), TestAssumptions());
  EXPECT_TRUE(unpriced.energy_kwh.has_value());
  EXPECT_FALSE(unpriced.energy_usd.has_value());
  EXPECT_NEAR(unpriced.total_usd, 328.39814685, 1e-7);
  const CostBreakdown unmeasured = ComputeCost(TestInputs(), o, TestAssumptions());
  EXPECT_FALSE(unmeasured.energy_kwh || unmeasured.energy_J_per_token || unmeasured.energy_usd);
  EXPECT_NEAR(unmeasured.total_usd, 328.39814685, 1e-7);
}

TEST(Prices, EnergyPriceIsOptionalAndNeverNegative) {
  const std::string offering = "[[offering]]\nname = 'x'\ngpu = 'H100 SXM'\ngpus_per_node = 8\nusd_per_gpu_hour = 2\n"
                               "storage_usd_per_gb_month = 0\negress_usd_per_gb = 0\nmtbf_node_hours = 1\n"
                               "restart_hours = 0\n";
  EXPECT_FALSE(ParsePriceFile(offering, "p.toml").offerings[0].usd_per_kwh.has_value());
  EXPECT_DOUBLE_EQ(*ParsePriceFile(offering + "usd_per_kwh = 0.12\n", "p.toml").offerings[0].usd_per_kwh, 0.12);
  EXPECT_NE(InputErrorOf([&] { ParsePriceFile(offering + "usd_per_kwh = -0.1\n", "p.toml"); })
                .find("p.toml:10: offering 'x': usd_per_kwh must be >= 0"),
            std::string::npos);
  EXPECT_NE(InputErrorOf([&] { ParsePriceFile(offering + "usd_per_kwh = 'cheap'\n", "p.toml"); })
                .find("usd_per_kwh must be a number"),
            std::string::npos);
}

TEST(Cost, RejectsNonPositiveThroughput) {
  CostInputs in = TestInputs();
  in.tokens_per_s = 0;
  EXPECT_NE(InputErrorOf([&] { ComputeCost(in, TestOffering(), TestAssumptions()); }), "");
}

TEST(Cost, YoungDaly) {
  // sqrt(2 x 60 s x 86400 s) = sqrt(10,368,000) = 3219.937888 s.
  EXPECT_NEAR(YoungDalyInterval(60, 86400), 3219.937888, 1e-6);
  EXPECT_DOUBLE_EQ(YoungDalyInterval(0.5, 100), 10.0);
}

TEST(Cost, Decide) {
  std::vector<CostBreakdown> rows(3);
  rows[0].total_usd = 100; rows[0].time_to_train_hours = 50;
  rows[1].total_usd = 80;  rows[1].time_to_train_hours = 90;
  rows[2].total_usd = 120; rows[2].time_to_train_hours = 30;
  CostDecision d = Decide(rows, 60.0);
  EXPECT_EQ(d.cheapest, 1u);
  EXPECT_EQ(d.fastest, 2u);
  EXPECT_EQ(d.cheapest_within_deadline, 0u);  // 100 within 60 h beats 120
  d = Decide(rows, 10.0);
  EXPECT_FALSE(d.cheapest_within_deadline.has_value());  // none meets the deadline
  d = Decide(rows, std::nullopt);
  EXPECT_FALSE(d.cheapest_within_deadline.has_value());
}

// ---- alpha-beta fit and projection ---------------------------------------------------------------------------

LinkModel KnownLinks() {
  LinkModel links;
  links.intra = {5e-6, 1.0 / 100e9, true, ""};  // 5 us, 100 GB/s
  links.inter = {20e-6, 1.0 / 25e9, true, ""};  // 20 us, 25 GB/s
  return links;
}

// An nccl-tests-style sweep 8 B .. 1 GiB (x4) on nodes x gpus_per_node ranks, timed by the model itself.
std::vector<AllReduceSample> Sweep(const LinkModel& links, int nodes, int gpus_per_node) {
  std::vector<AllReduceSample> samples;
  for (double bytes = 8; bytes <= 1024.0 * 1024 * 1024; bytes *= 4) {
    samples.push_back({nodes, gpus_per_node, bytes, 1, PredictAllReduceSeconds(links, nodes, gpus_per_node, bytes, 1), ""});
  }
  return samples;
}

TEST(Projection, RingCoefficients) {
  // One node of 8: 2(n-1) = 14 alpha steps, 2(n-1)/n = 1.75 bytes factor; 40 buckets count 40 x 14 alpha steps.
  const auto c = AllReduceCoefficients(1, 8, 1e9, 40);
  EXPECT_DOUBLE_EQ(c[0], 560);
  EXPECT_DOUBLE_EQ(c[1], 1.75e9);
  EXPECT_DOUBLE_EQ(c[2], 0);
  EXPECT_DOUBLE_EQ(c[3], 0);
}

TEST(Projection, HierarchicalByHand) {
  // 2 nodes x 8, G = 1e9 bytes in 40 buckets, with the known links:
  //   intra: 2*7/8 * 1e9 * 1e-11 = 0.0175 s, 40 * 14 * 5e-6 = 0.0028 s;
  //   inter: 2*1/2 * (1e9/8) * 4e-11 = 0.005 s, 40 * 2 * 20e-6 = 0.0016 s;  total 0.0269 s.
  EXPECT_NEAR(PredictAllReduceSeconds(KnownLinks(), 2, 8, 1e9, 40), 0.0269, 1e-12);
}

TEST(Projection, RecoversIntraExactlyWithoutNoise) {
  const AlphaBetaFit fit = FitAlphaBeta(Sweep(KnownLinks(), 1, 8));
  EXPECT_TRUE(fit.links.intra.fitted);
  EXPECT_FALSE(fit.links.inter.fitted);
  EXPECT_NEAR(fit.links.intra.alpha_s / 5e-6, 1.0, 1e-9);
  EXPECT_NEAR(fit.links.intra.beta_s_per_byte * 100e9, 1.0, 1e-9);
  EXPECT_LT(fit.rms_relative_error, 1e-9);
  EXPECT_TRUE(fit.notes.empty());
}

TEST(Projection, RecoversBothClassesExactlyWithoutNoise) {
  std::vector<AllReduceSample> samples = Sweep(KnownLinks(), 1, 8);
  for (const AllReduceSample& s : Sweep(KnownLinks(), 2, 8)) samples.push_back(s);
  for (const AllReduceSample& s : Sweep(KnownLinks(), 4, 8)) samples.push_back(s);
  const AlphaBetaFit fit = FitAlphaBeta(samples);
  ASSERT_TRUE(fit.links.inter.fitted);
  EXPECT_NEAR(fit.links.intra.alpha_s / 5e-6, 1.0, 1e-8);
  EXPECT_NEAR(fit.links.intra.beta_s_per_byte * 100e9, 1.0, 1e-8);
  EXPECT_NEAR(fit.links.inter.alpha_s / 20e-6, 1.0, 1e-8);
  EXPECT_NEAR(fit.links.inter.beta_s_per_byte * 25e9, 1.0, 1e-8);
}

TEST(Projection, RecoversWithinToleranceWithNoise) {
  // Every time off by up to +-5% (uniform, fixed seed), 4 repeats per size: beta within 3%, alpha within 15%.
  std::mt19937 random(42);
  std::uniform_real_distribution<double> noise(-0.05, 0.05);
  std::vector<AllReduceSample> samples;
  for (int repeat = 0; repeat < 4; ++repeat) {
    for (AllReduceSample s : Sweep(KnownLinks(), 1, 8)) {
      s.time_s *= 1 + noise(random);
      samples.push_back(s);
    }
  }
  const AlphaBetaFit fit = FitAlphaBeta(samples);
  EXPECT_NEAR(fit.links.intra.beta_s_per_byte * 100e9, 1.0, 0.03);
  EXPECT_NEAR(fit.links.intra.alpha_s / 5e-6, 1.0, 0.15);
  EXPECT_GT(fit.rms_relative_error, 0.005);  // the noise shows in the residual
  EXPECT_LT(fit.rms_relative_error, 0.05);
}

TEST(Projection, OneMessageSizeFixesAlphaAtZero) {
  // A single training point: one equation, alpha cannot be told from beta; beta explains all of it.
  const std::vector<AllReduceSample> one = {{1, 4, 4e8, 16, 0.012, "train k=4"}};
  const AlphaBetaFit fit = FitAlphaBeta(one);
  ASSERT_EQ(fit.notes.size(), 1u);
  EXPECT_NE(fit.notes[0].find("alpha_intra"), std::string::npos);
  EXPECT_EQ(fit.links.intra.alpha_s, 0.0);
  // 0.012 s = 2*3/4 * 4e8 B * beta  =>  beta = 0.012 / 6e8 = 2e-11 s/B (50 GB/s).
  EXPECT_NEAR(fit.links.intra.beta_s_per_byte, 2e-11, 1e-22);
}

TEST(Projection, NegativeParameterFixedAtZero) {
  // Times that fall faster than the bytes: the unconstrained alpha would be negative; it is fixed at 0 instead.
  const std::vector<AllReduceSample> samples = {{1, 2, 1e3, 1, 1e-9, ""}, {1, 2, 1e6, 1, 2e-5, ""}};
  const AlphaBetaFit fit = FitAlphaBeta(samples);
  EXPECT_GE(fit.links.intra.alpha_s, 0.0);
  EXPECT_GT(fit.links.intra.beta_s_per_byte, 0.0);
  ASSERT_FALSE(fit.notes.empty());
  EXPECT_NE(fit.notes.back().find("negative"), std::string::npos);
}

TEST(Projection, Layouts) {
  const std::vector<Layout> layouts = ParseLayouts("4,16,32,2x4", 8, "--project");
  ASSERT_EQ(layouts.size(), 4u);
  EXPECT_EQ(layouts[0].Name(), "1x4");
  EXPECT_EQ(layouts[1].Name(), "2x8");
  EXPECT_EQ(layouts[2].Name(), "4x8");
  EXPECT_EQ(layouts[3].Name(), "2x4");
  EXPECT_NE(InputErrorOf([] { ParseLayouts("12", 8, "--project"); }).find("not a multiple of --gpus-per-node 8"),
            std::string::npos);
  EXPECT_NE(InputErrorOf([] { ParseLayouts("0", 8, "--project"); }), "");
  EXPECT_NE(InputErrorOf([] { ParseLayouts("2xy", 8, "--project"); }), "");
  EXPECT_NE(InputErrorOf([] { ParseLayouts(",", 8, "--project"); }), "");
}

TEST(Projection, ResolveAndMissingLinks) {
  AlphaBetaFit intra_only = FitAlphaBeta(Sweep(KnownLinks(), 1, 8));
  LinkOverrides none;
  LinkModel links = ResolveLinks(intra_only, none);
  EXPECT_EQ(MissingLinks(links, {1, 8}), "");
  EXPECT_NE(MissingLinks(links, {2, 8}).find("--inter-node-gbps"), std::string::npos);
  LinkOverrides rate;
  rate.inter_node_gbps = 400;  // 400 Gbit/s = 50 GB/s per GPU
  links = ResolveLinks(intra_only, rate);
  EXPECT_EQ(MissingLinks(links, {2, 8}), "");
  EXPECT_NEAR(links.inter.beta_s_per_byte, 1.0 / 50e9, 1e-24);
  EXPECT_DOUBLE_EQ(links.inter.alpha_s, 5e-6);  // the default assumed latency
  EXPECT_NE(MissingLinks(ResolveLinks(FitAlphaBeta({}), none), {1, 8}).find("intra-node"), std::string::npos);
}

// Training points made by the step model itself: compute 1 s per step, half of the communication exposed, 1 GB of
// gradients in 40 buckets, 4096 tokens per rank per step, on one node.
std::vector<TrainPointInput> SyntheticPoints(const LinkModel& links) {
  std::vector<TrainPointInput> points;
  for (int k : {1, 2, 4, 8}) {
    TrainPointInput p;
    p.k = k;
    p.nodes = 1;
    p.gpus_per_node = k;
    p.gradient_bytes = 1e9;
    p.buckets = 40;
    p.comm_total_s = k > 1 ? PredictAllReduceSeconds(links, 1, k, p.gradient_bytes, p.buckets) : 0;
    p.comm_exposed_s = 0.5 * p.comm_total_s;
    p.step_s = 1.0 + p.comm_exposed_s;
    p.tokens_per_step = 4096.0 * k;
    points.push_back(p);
  }
  return points;
}

// A mode's collectives as all-reduces: a reduce-scatter or all-gather is half an all-reduce, in bytes and latency.
TEST(Projection, ModeCollectivesInAllReduces) {
  const ModeCollectives dp = CollectivesOf("dp", 100, 4);
  EXPECT_DOUBLE_EQ(dp.bytes, 100);
  EXPECT_DOUBLE_EQ(dp.ops, 4);
  const ModeCollectives zero1 = CollectivesOf("zero1", 100, 1);  // RS + AG of 100 B: one all-reduce of 100 B
  EXPECT_DOUBLE_EQ(zero1.bytes, 100);
  EXPECT_DOUBLE_EQ(zero1.ops, 1);
  // fsdp, 4 units (2 blocks): 4 reduce-scatters, 6 all-gathers; ZeRO's 3 Psi = 1.5 all-reduces of Psi, or what was
  // gathered.
  const ModeCollectives fsdp = CollectivesOf("fsdp", 100, 4);
  EXPECT_DOUBLE_EQ(fsdp.bytes, 150);
  EXPECT_DOUBLE_EQ(fsdp.ops, 5);
  EXPECT_DOUBLE_EQ(CollectivesOf("fsdp", 100, 4, 160).bytes, 130);
  EXPECT_THROW(CollectivesOf("tp", 100, 4), InputError);
  // The projection moves the mode's bytes: fsdp's comm is 1.5 times dp's on the same links.
  LinkModel links;
  links.intra = {0, 1e-9, true, "test"};
  TrainPointInput point;
  point.k = 4;
  point.gpus_per_node = 4;
  point.step_s = 1;
  point.tokens_per_step = 4;
  point.gradient_bytes = 1e6;
  point.buckets = 1;
  const double dp_comm = StepModel({point}, true, point).Project(links, {1, 8}).comm_s;
  point.comm_bytes = 1.5e6;
  EXPECT_NEAR(StepModel({point}, true, point).Project(links, {1, 8}).comm_s, 1.5 * dp_comm, 1e-12);
}

// A tensor parallel point's activation all-reduces measure the intra-node link over its T ranks: a run of one group
// (no gradient sync) still fits the link, and a run of several adds its gradient buckets over the groups.
TEST(Projection, TensorParallelActivationAllReducesFitTheIntraNodeLink) {
  TrainPointInput p;
  p.k = 4;
  p.gpus_per_node = 4;
  p.tensor_parallel = 4;
  p.step_s = 1;
  p.tokens_per_step = 4;
  p.gradient_bytes = 1e6;
  p.activation_bytes = 3e6;
  p.activation_ops = 12;
  // 12 all-reduces of 3e6 B in all over 4 ranks on known links: 2·3/4·3e6·1e-11 + 12·6·5e-6.
  p.activation_s = PredictAllReduceSeconds(KnownLinks(), 1, 4, 3e6, 12);
  std::vector<AllReduceSample> samples = TrainSamples({p});
  ASSERT_EQ(samples.size(), 1u);  // one group: no gradient sample
  EXPECT_EQ(samples[0].gpus_per_node, 4);
  EXPECT_EQ(samples[0].nodes, 1);
  EXPECT_DOUBLE_EQ(samples[0].ops, 12);
  EXPECT_NE(samples[0].source.find("activation all-reduces (tensor parallel 4)"), std::string::npos);
  p.k = 8;
  p.gpus_per_node = 8;
  p.comm_total_s = 0.01;
  samples = TrainSamples({p});
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1].gpus_per_node, 2);  // the gradients over the 8 / 4 groups
  // Groups across nodes (--allow-cross-node-tp) say nothing of one link class: left out.
  p.nodes = 2;
  p.gpus_per_node = 2;
  samples = TrainSamples({p});
  for (const AllReduceSample& s : samples) EXPECT_EQ(s.source.find("activation"), std::string::npos);
}

TEST(Projection, StepModelWeakScaling) {
  const std::vector<TrainPointInput> points = SyntheticPoints(KnownLinks());
  const StepModel model(points, true, points.front());
  EXPECT_TRUE(model.overlap_measured());
  EXPECT_NEAR(model.overlap(), 0.5, 1e-12);
  // 2x8: comm = 0.0269 s (HierarchicalByHand), exposed half of it, step = 1 + 0.01345 s; 16 x 4096 tokens per step;
  // efficiency = (65536 / 1.01345) / (16 x 4096 / 1) = 1 / 1.01345.
  const ProjectedPoint p = model.Project(KnownLinks(), {2, 8});
  EXPECT_NEAR(p.comm_s, 0.0269, 1e-12);
  EXPECT_NEAR(p.step_s, 1.01345, 1e-12);
  EXPECT_DOUBLE_EQ(p.tokens_per_step, 65536.0);
  EXPECT_NEAR(p.efficiency, 1 / 1.01345, 1e-12);
}

TEST(Projection, StepModelStrongScalingDividesCompute) {
  // Global batch fixed: the reference k=8 does 1 s of compute; at 16 GPUs each does half: 0.5 s + exposed comm.
  std::vector<TrainPointInput> points = SyntheticPoints(KnownLinks());
  for (TrainPointInput& p : points) p.tokens_per_step = 32768;
  const StepModel model(points, false, points.front());
  const ProjectedPoint p = model.Project(KnownLinks(), {2, 8});
  EXPECT_NEAR(p.step_s, 0.5 + 0.01345, 1e-12);
  EXPECT_DOUBLE_EQ(p.tokens_per_step, 32768.0);
}

TEST(Projection, HeldOutExactOnModelDataAndReportsError) {
  const std::vector<TrainPointInput> points = SyntheticPoints(KnownLinks());
  // Fit on k = 2, 4 (their bucket times identify alpha and beta exactly), predict k = 8.
  std::optional<HeldOutCheck> check = CheckHeldOut(points, {}, true, LinkOverrides{});
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ(check->k, 8);
  EXPECT_LT(check->relative_error, 1e-9);
  // Measured 10% slower than the model: error = |p - 1.1 p| / (1.1 p) = 0.1 / 1.1.
  std::vector<TrainPointInput> slower = points;
  slower.back().step_s *= 1.1;
  check = CheckHeldOut(slower, {}, true, LinkOverrides{});
  ASSERT_TRUE(check.has_value());
  EXPECT_NEAR(check->relative_error, 0.1 / 1.1, 1e-9);
  EXPECT_NEAR(check->measured_step_s, points.back().step_s * 1.1, 1e-12);
}

TEST(Projection, HeldOutNeedsTwoPointsAndAFit) {
  const std::vector<TrainPointInput> points = SyntheticPoints(KnownLinks());
  EXPECT_FALSE(CheckHeldOut({points[2]}, {}, true, LinkOverrides{}).has_value());
  // k = 1 and 2: nothing below k = 2 communicated and no collectives: no intra-node fit to predict with.
  EXPECT_FALSE(CheckHeldOut({points[0], points[1]}, {}, true, LinkOverrides{}).has_value());
  // With a collective sweep the same two points can be checked; overlap below k = 2 is unknown (assumed 0).
  std::optional<HeldOutCheck> check =
      CheckHeldOut({points[0], points[1]}, Sweep(KnownLinks(), 1, 2), true, LinkOverrides{});
  ASSERT_TRUE(check.has_value());
  EXPECT_NEAR(check->predicted_step_s, 1.0 + points[1].comm_total_s, 1e-12);
  ASSERT_FALSE(check->notes.empty());
  EXPECT_NE(check->notes.back().find("overlap assumed 0"), std::string::npos);
}

// ---- price files ---------------------------------------------------------------------------------------------

const char* kGoodPrices =
    "[assumptions]\n"
    "checkpoint_size_gb = 40\n"
    "dataset_gb = 600\n"
    "young_daly_interval = true\n"
    "[[offering]]\n"
    "name = \"node\"\n"
    "gpu = \"h100-sxm\"\n"
    "gpus_per_node = 8\n"
    "usd_per_node_hour = 98.32\n"
    "storage_usd_per_gb_month = 0.023\n"
    "egress_usd_per_gb = 0.09\n"
    "mtbf_node_hours = 6335\n"
    "restart_hours = 0.5\n"
    "[[offering]]\n"
    "name = \"gpu\"\n"
    "gpu = \"A100 SXM 80GB\"\n"
    "gpus_per_node = 8\n"
    "usd_per_gpu_hour = 1.79\n"
    "gpu_memory_gib = 79\n"
    "storage_usd_per_gb_month = 0.2\n"
    "egress_usd_per_gb = 0\n"
    "mtbf_node_hours = 6335\n"
    "restart_hours = 0\n";

TEST(Prices, ParsesOfferingsAndAssumptions) {
  const PriceFile p = ParsePriceFile(kGoodPrices, "p.toml");
  ASSERT_EQ(p.offerings.size(), 2u);
  EXPECT_EQ(p.offerings[0].gpu, "H100 SXM");  // the model's own spelling
  EXPECT_DOUBLE_EQ(p.offerings[0].NodeHourUsd(), 98.32);
  EXPECT_DOUBLE_EQ(p.offerings[0].gpu_memory_gib, 80);  // the model's default
  EXPECT_DOUBLE_EQ(p.offerings[1].NodeHourUsd(), 1.79 * 8);
  EXPECT_DOUBLE_EQ(p.offerings[1].gpu_memory_gib, 79);
  EXPECT_EQ(p.offerings[1].line, 14);
  EXPECT_EQ(p.assumptions.checkpoint_size, CheckpointSizeSource::kGigabytes);
  EXPECT_DOUBLE_EQ(p.assumptions.checkpoint_gb, 40);
  EXPECT_DOUBLE_EQ(p.assumptions.dataset_gb, 600);
  EXPECT_EQ(p.assumptions.checkpoints_kept, 2);
  EXPECT_TRUE(p.assumptions.young_daly_interval);
  EXPECT_DOUBLE_EQ(p.offerings[0].provisioning_hours, 0);  // optional
}

// kGoodPrices with `from` replaced by `to` (once).
std::string Edited(const std::string& from, const std::string& to) {
  std::string text = kGoodPrices;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(Prices, ProvisioningHoursAreOptional) {
  EXPECT_DOUBLE_EQ(ParsePriceFile(Edited("restart_hours = 0.5", "restart_hours = 0.5\nprovisioning_hours = 0.25"),
                                  "p.toml").offerings[0].provisioning_hours, 0.25);
}

TEST(Prices, ErrorsNameFileLineAndField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {Edited("gpu = \"h100-sxm\"", "gpu = \"H100 SXN\""),
       "p.toml:7: offering 'node': unknown GPU 'H100 SXN' (known: B200, GH200"},
      {Edited("usd_per_node_hour = 98.32\n", ""), "p.toml:5: offering 'node': missing price: give usd_per_gpu_hour or"},
      {Edited("usd_per_node_hour = 98.32", "usd_per_node_hour = 98.32\nusd_per_gpu_hour = 12.29"),
       "offering 'node': give usd_per_gpu_hour or usd_per_node_hour, not both"},
      {Edited("usd_per_node_hour = 98.32", "usd_per_node_hour = -1"), "p.toml:9: offering 'node': usd_per_node_hour must be > 0, got -1"},
      {Edited("storage_usd_per_gb_month = 0.023", "storage_usd_per_gb_month = -0.5"),
       "p.toml:10: offering 'node': storage_usd_per_gb_month must be >= 0, got -0.5"},
      {Edited("egress_usd_per_gb = 0.09\n", ""), "p.toml:5: offering 'node': missing egress_usd_per_gb"},
      {Edited("mtbf_node_hours = 6335", "mtbf_node_hours = 0"), "mtbf_node_hours must be > 0"},
      {Edited("restart_hours = 0.5", "restart_hours = 0.5\nprovisioning_hours = -0.25"),
       "offering 'node': provisioning_hours must be >= 0, got -0.25"},
      {Edited("gpus_per_node = 8", "gpus_per_node = 8.0"), "gpus_per_node must be a whole number"},
      {Edited("usd_per_node_hour = 98.32", "usd_per_node_hour = \"98.32\""), "usd_per_node_hour must be a number"},
      {Edited("restart_hours = 0.5", "restart_hours = 0.5\nusd_per_gpu_hr = 1"), "p.toml:14: offering 'node': unknown key 'usd_per_gpu_hr'"},
      {Edited("name = \"gpu\"", "name = \"node\""), "p.toml:14: offering name 'node' used twice"},
      {Edited("name = \"node\"\n", ""), "offering '#1': missing name"},
      {Edited("[assumptions]", "[assumption]"), "p.toml:1: unknown table [assumption]"},
      {Edited("dataset_gb = 600", "dataset_gb = 600\nstorage_gb = 1"), "p.toml:4: [assumptions] unknown key 'storage_gb'"},
      {Edited("checkpoint_size_gb = 40", "checkpoint_size_gb = \"big\""), "checkpoint_size_gb must be \"measured\" or a number"},
      {Edited("[assumptions]", "x = 1\n[assumptions]"), "p.toml:1: key 'x' outside a table"},
      {"[assumptions]\n", "p.toml: no [[offering]] tables"},
  };
  for (const auto& [text, want] : cases) {
    const std::string got = InputErrorOf([&] { ParsePriceFile(text, "p.toml"); });
    EXPECT_NE(got.find(want), std::string::npos) << "got: " << got << "\nwant: " << want;
  }
  EXPECT_NE(InputErrorOf([] { ReadPriceFile("/nonexistent/p.toml"); }).find("cannot read price file '/nonexistent/p.toml'"),
            std::string::npos);
}

// Price files are TOML 1.0, read by toml++: what the spec allows is accepted (hex, octal and underscored integers,
// exponents, literal and multi-line strings, quoted keys, inline tables, an array of inline tables).
TEST(Prices, ReadsTomlAsTheSpecDefines) {
  const PriceFile p = ParsePriceFile(
      "# comment\n"
      "assumptions = { dataset_gb = 6e2, checkpoints_kept = 0x3 }  # trailing comment\n"
      "\n"
      "[[offering]]\n"
      "name = 'node \\n literal'\n"
      "\"gpu\" = \"\"\"H100 SXM\"\"\"\n"
      "gpus_per_node = 0o10\n"
      "usd_per_node_hour = 9_8.32\n"
      "storage_usd_per_gb_month = 2.3E-2\n"
      "egress_usd_per_gb = 0\n"
      "mtbf_node_hours = 6_335\n"
      "restart_hours = +0.5\n",
      "t.toml");
  ASSERT_EQ(p.offerings.size(), 1u);
  const Offering& o = p.offerings[0];
  EXPECT_EQ(o.name, "node \\n literal");
  EXPECT_EQ(o.gpu, "H100 SXM");
  EXPECT_EQ(o.gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(o.NodeHourUsd(), 98.32);
  EXPECT_DOUBLE_EQ(o.storage_usd_per_gb_month, 0.023);
  EXPECT_DOUBLE_EQ(o.mtbf_node_hours, 6335);
  EXPECT_DOUBLE_EQ(o.restart_hours, 0.5);
  EXPECT_EQ(o.line, 4);
  EXPECT_DOUBLE_EQ(p.assumptions.dataset_gb, 600);
  EXPECT_EQ(p.assumptions.checkpoints_kept, 3);

  const PriceFile inline_offerings = ParsePriceFile(
      "offering = [\n"
      "  {name = \"a\", gpu = \"L4\", gpus_per_node = 1, usd_per_gpu_hour = 1, storage_usd_per_gb_month = 0,"
      " egress_usd_per_gb = 0, mtbf_node_hours = 1e4, restart_hours = 0},\n"
      "]\n",
      "t.toml");
  ASSERT_EQ(inline_offerings.offerings.size(), 1u);
  EXPECT_EQ(inline_offerings.offerings[0].gpu, "L4");
}

// Anything that is not TOML: the file, the line and toml++'s words for what is wrong.
TEST(Prices, TomlSyntaxErrorsNameFileAndLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a = 01", "p.toml:1: not valid TOML: "},
      {"a = 1__0", "p.toml:1: not valid TOML: "},
      {"a = 1.", "p.toml:1: not valid TOML: "},
      {"a = 1e", "p.toml:1: not valid TOML: "},
      {"a = 1e999", "p.toml:1: not valid TOML: "},
      {"a = 99999999999999999999", "p.toml:1: not valid TOML: "},
      {"a = hello", "p.toml:1: not valid TOML: "},
      {"a = \"open", "p.toml:1: not valid TOML: "},
      {"a = \"\\x\"", "p.toml:1: not valid TOML: "},
      {"a = \"\xff\"", "p.toml:1: not valid TOML: "},  // invalid UTF-8
      {"a = 1 b", "p.toml:1: not valid TOML: "},
      {"a =", "p.toml:1: not valid TOML: "},
      {"a 1", "p.toml:1: not valid TOML: "},
      {"= 1", "p.toml:1: not valid TOML: "},
      {"a = 1\na = 2", "p.toml:2: not valid TOML: "},
      {"[t]\n[t]", "p.toml:2: not valid TOML: "},
      {"[t\n", "p.toml:1: not valid TOML: "},
      {"[t]\n[[t]]", "p.toml:2: not valid TOML: "},
      {Edited("restart_hours = 0.5", "restart_hours = 0.5 0.5"), "p.toml:13: not valid TOML: "},
  };
  for (const auto& [text, want] : cases) {
    const std::string got = InputErrorOf([&] { ParsePriceFile(text, "p.toml"); });
    EXPECT_EQ(got.rfind(want, 0), 0u) << "input: " << text << "\ngot: " << got << "\nwant: " << want;
    EXPECT_NE(got.find("(column "), std::string::npos) << got;
  }
  // toml++'s own words follow, e.g. for a duplicate key:
  EXPECT_NE(InputErrorOf([] { ParsePriceFile("a = 1\na = 2", "p.toml"); }).find("redefine"), std::string::npos);
}

// Valid TOML whose values a price file cannot use: the key, its line and what the value is.
TEST(Prices, ValuesOfTheWrongKindNameTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {Edited("gpus_per_node = 8", "gpus_per_node = [8]"),
       "p.toml:8: offering 'node': gpus_per_node must be a whole number (got an array)"},
      {Edited("usd_per_node_hour = 98.32", "usd_per_node_hour = {x = 1}"),
       "p.toml:9: offering 'node': usd_per_node_hour must be a number (got a table)"},
      {Edited("usd_per_node_hour = 98.32", "usd_per_node_hour = 1979-05-27"),
       "p.toml:9: offering 'node': usd_per_node_hour must be a number (got a date)"},
      {Edited("usd_per_node_hour = 98.32", "usd_per_node_hour = 07:32:00"), "must be a number (got a time)"},
      {Edited("usd_per_node_hour = 98.32", "usd_per_node_hour = inf"),
       "p.toml:9: offering 'node': usd_per_node_hour must be a finite number, got inf"},
      {Edited("mtbf_node_hours = 6335", "mtbf_node_hours = nan"), "p.toml:12: offering 'node': mtbf_node_hours must be a finite number"},
      {Edited("name = \"node\"", "name.first = \"node\""), "p.toml:6: offering '#1': name must be a string in quotes (got a table)"},
      {Edited("young_daly_interval = true", "young_daly_interval = 1"),
       "p.toml:4: [assumptions] young_daly_interval must be true or false (got an integer)"},
      {Edited("[assumptions]", "a.b = 1\n[assumptions]"), "p.toml:1: unknown table [a]"},
      {Edited("[assumptions]", "[[assumptions]]"), "p.toml:1: unknown table [[assumptions]]"},
  };
  for (const auto& [text, want] : cases) {
    const std::string got = InputErrorOf([&] { ParsePriceFile(text, "p.toml"); });
    EXPECT_NE(got.find(want), std::string::npos) << "input: " << text << "\ngot: " << got << "\nwant: " << want;
  }
}

TEST(Prices, GpuModelMatching) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"NVIDIA H100 80GB HBM3", "H100 SXM"},   {"NVIDIA H100 PCIe", "H100 PCIe"},
      {"NVIDIA H100 NVL", "H100 NVL"},         {"NVIDIA H200", "H200 SXM"},
      {"NVIDIA H200 NVL", "H200 NVL"},         {"NVIDIA GH200 480GB", "GH200"},
      {"NVIDIA B200", "B200"},                 {"NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"},
      {"NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"}, {"NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"},
      {"NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"}, {"NVIDIA L4", "L4"},
      {"NVIDIA L40S", "L40S"},                 {"NVIDIA A10G", "A10G"},
      {"Tesla V100-SXM2-16GB", "V100 16GB"},
  };
  for (const auto& [device, model] : cases) {
    const std::optional<GpuModel> match = MatchGpuModel(device);
    ASSERT_TRUE(match.has_value()) << device;
    EXPECT_EQ(match->name, model) << device;
  }
  EXPECT_FALSE(MatchGpuModel("cpu").has_value());
  EXPECT_FALSE(MatchGpuModel("NVIDIA GeForce RTX 4090").has_value());
  EXPECT_EQ(FindGpuModel("h100_sxm", "x").name, "H100 SXM");
  EXPECT_NE(InputErrorOf([] { FindGpuModel("H100", "here"); }).find("here: unknown GPU 'H100' (known: "), std::string::npos);
}

// ---- memory fit ----------------------------------------------------------------------------------------------

TEST(MemoryFit, ZeroMixedPrecisionAdamSixteenBytesPerParameter) {
  // ZeRO (Rajbhandari et al. 2020, section 3.1): mixed-precision Adam keeps 2 + 2 bytes of fp16 weights and
  // gradients and 12 bytes of fp32 weights, momentum and variance: 16 bytes per parameter, so a 7.5B model needs
  // 120 GB for its model states. EstimateMemory's per-parameter figures, scaled to 7.5B parameters, must say so.
  const ModelConfig config = FindPreset("gpt-6.7b");
  const MemoryEstimate e = EstimateMemory(config, 1, 1024, true);
  const double allocated = static_cast<double>(CountParameters(config).total) +
                           static_cast<double>(config.vocab_padded - config.vocab) * config.d_model;
  const double psi = 7.5e9;
  const MemoryBreakdown zero{e.weights_bytes / allocated * psi, e.gradients_bytes / allocated * psi,
                             e.optimizer_bytes / allocated * psi, 0};
  EXPECT_NEAR(zero.model_states_bytes(), 120e9, 1e-3);
  const MemoryFit on_80 = FitMemory(zero, 80 * kGiB, std::nullopt);
  EXPECT_FALSE(on_80.fits);
  EXPECT_NEAR(on_80.margin_bytes, 80 * kGiB - 120e9, 1e-3);  // short by 34.1 GB
  EXPECT_TRUE(FitMemory(zero, 141 * kGiB, std::nullopt).fits);
}

TEST(MemoryFit, CalibrationScalesTheTotal) {
  // Measured 30 GiB where 25 GiB was estimated: x1.2. A 20 GiB estimate then needs 24 GiB: fits 32 GiB with 8 to
  // spare, misses 23 GiB by 1.
  const std::optional<MemoryCalibration> c = CalibrateMemory(30 * kGiB, 25 * kGiB, "run.h5");
  ASSERT_TRUE(c.has_value());
  EXPECT_DOUBLE_EQ(c->factor, 1.2);
  EXPECT_NE(c->source.find("run.h5"), std::string::npos);
  const MemoryBreakdown estimate{5 * kGiB, 5 * kGiB, 6 * kGiB, 4 * kGiB};
  MemoryFit fit = FitMemory(estimate, 32 * kGiB, c);
  EXPECT_TRUE(fit.fits);
  EXPECT_NEAR(fit.required_bytes, 24 * kGiB, 1);
  EXPECT_NEAR(fit.margin_bytes, 8 * kGiB, 1);
  fit = FitMemory(estimate, 23 * kGiB, c);
  EXPECT_FALSE(fit.fits);
  EXPECT_NEAR(fit.margin_bytes, -1 * kGiB, 1);
  EXPECT_FALSE(CalibrateMemory(0, 25 * kGiB, "cpu.h5").has_value());  // the CPU backend measures no device memory
}

// ZeRO's table (section 3, Psi = 7.5B, N = 64, mixed precision): dp 120 GB of model states, zero1 (P_os) 31.4 GB,
// fsdp (P_os+g+p) 1.9 GB; fsdp adds the units it holds gathered at dp's 4 bytes per parameter (2 + 2).
TEST(MemoryFit, ModesShardAsZeroSays) {
  const double psi = 7.5e9;
  const MemoryBreakdown dp{2 * psi, 2 * psi, 12 * psi, 1e9};
  EXPECT_DOUBLE_EQ(ModeMemory(dp, "dp", 64, 0, psi).model_states_bytes(), 120e9);
  EXPECT_NEAR(ModeMemory(dp, "zero1", 64, 0, psi).model_states_bytes(), 4 * psi + 12 * psi / 64, 1);  // 31.4 GB
  const MemoryBreakdown fsdp = ModeMemory(dp, "fsdp", 64, 1e8, psi);
  EXPECT_NEAR(fsdp.model_states_bytes(), 16 * psi / 64, 1);  // 1.88 GB
  EXPECT_NEAR(fsdp.working_bytes, 4 * 1e8, 1);
  EXPECT_NEAR(fsdp.total_bytes(), 16 * psi / 64 + 4e8 + 1e9, 1);
  EXPECT_THROW(ModeMemory(dp, "zero3", 64, 0, psi), InputError);
  EXPECT_THROW(ModeMemory(dp, "fsdp", 0, 0, psi), InputError);
  // Tensor parallel 8 over 16 GPUs with dp across the 2 groups: 1/8 of the states each, activations whole.
  const MemoryBreakdown tp = ModeMemory(dp, "dp", 16, 0, psi, 8);
  EXPECT_NEAR(tp.model_states_bytes(), 16 * psi / 8, 1);
  EXPECT_DOUBLE_EQ(tp.activations_bytes, 1e9);
  EXPECT_NEAR(ModeMemory(dp, "zero1", 16, 0, psi, 8).optimizer_bytes, 12 * psi / 8 / 2, 1);
  EXPECT_THROW(ModeMemory(dp, "dp", 12, 0, psi, 8), InputError);
}

// ---- reading a run -------------------------------------------------------------------------------------------

// A report of `train --scaling 1,2` on two nodes of one rank, with checkpoints at k=2.
Report SyntheticRun() {
  Report report;
  report.root.Set("command", std::string("train"));
  report.root.Set("n_ranks", int64_t{2});
  report.root.Child("topology").tables["ranks"]
      .Add("rank", "", std::vector<int64_t>{0, 1})
      .Add("node", "", std::vector<int64_t>{0, 1})
      .Add("gpu_index", "", std::vector<int64_t>{0, 0})
      .Add("gpu_name", "", std::vector<std::string>{"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"});
  report.root.Child("config").Set("bucket_mb", 25.0);
  report.root.Child("config").Set("seq", int64_t{32});
  Group& train = report.root.Child("train");
  train.Set("scaling_mode", std::string("weak"));
  train.Set("startup_s", 3.5);
  train.Set("peak_device_memory_bytes_max", 12.0 * kGiB);
  for (int k : {1, 2}) {
    Group& point = train.Child("k" + std::to_string(k));
    point.Set("comm_total_s", k == 2 ? 0.2 : 0.0);
    point.Set("comm_exposed_s", k == 2 ? 0.05 : 0.0);
    point.Set("gradient_bytes", 60.0 * 1024 * 1024);  // 60 MiB in 25 MiB buckets: 3 all-reduces
    point.Set("tokens_per_step", static_cast<int64_t>(128 * k));
    point.Set("step_s", 1.0);
    point.Set("tokens_per_s", 128.0 * k);
    point.Set("micro_batch", int64_t{4});
    // Rank r, step s: step time 1 + 0.1 r (+ a 0.5 s checkpoint stall at step 3); step 0 is warm-up.
    std::vector<int64_t> rank, step, warmup;
    std::vector<double> step_s, stall;
    for (int r = 0; r < k; ++r) {
      for (int s = 0; s < 4; ++s) {
        rank.push_back(r);
        step.push_back(s);
        warmup.push_back(s == 0);
        stall.push_back(s == 3 ? 0.5 : 0.0);
        step_s.push_back((s == 0 ? 9.0 : 1.0 + 0.1 * r) + stall.back());
      }
    }
    point.tables["steps"].Add("rank", "", rank).Add("step", "", step).Add("warmup", "", warmup)
        .Add("step_s", "s", step_s).Add("checkpoint_stall_s", "s", stall);
  }
  train.Child("k2_throttle100").Set("ranks", int64_t{2});  // a storage-sweep group: not a scaling point
  Group& io = report.root.Child("io").Child("k2");
  io.Set("checkpoint_state_bytes", int64_t{3000000000});
  io.tables["checkpoints"].Add("stall_s", "s", std::vector<double>{0.4, 0.6, 0.5, 0.7});
  Group& model = report.root.Child("model");
  model.Set("name", std::string("gpt2-124m"));
  model.Set("parameters", int64_t{124439808});
  model.Set("memory_weights_bytes", 2.0 * kGiB);
  model.Set("memory_gradients_bytes", 2.0 * kGiB);
  model.Set("memory_optimizer_bytes", 4.0 * kGiB);
  model.Set("memory_activations_bytes", 2.0 * kGiB);
  return report;
}

TEST(RunMeasurement, ReadsPointsLayoutsAndCheckpoints) {
  const RunMeasurement run = ReadRunMeasurement(SyntheticRun(), "run.h5");
  EXPECT_EQ(run.device, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(run.nodes, 2);
  EXPECT_DOUBLE_EQ(run.startup_s, 3.5);
  ASSERT_EQ(run.points.size(), 2u);  // the throttle group is skipped
  const MeasuredPoint& k2 = run.points[1];
  EXPECT_EQ(k2.train.k, 2);
  EXPECT_EQ(k2.train.nodes, 2);
  EXPECT_EQ(k2.train.gpus_per_node, 1);
  // Slowest rank per measured step without its stall: 1.1 s at steps 1, 2, 3.
  EXPECT_NEAR(k2.train.step_s, 1.1, 1e-12);
  EXPECT_DOUBLE_EQ(k2.train.buckets, 3.0);  // estimated: the report does not say
  Report recorded = SyntheticRun();
  recorded.root.Child("train").Child("k2").Set("gradient_buckets", int64_t{7});
  EXPECT_DOUBLE_EQ(ReadRunMeasurement(recorded, "run.h5").points.at(1).train.buckets, 7.0);
  ASSERT_TRUE(k2.checkpoint_stall_s.has_value());
  EXPECT_NEAR(*k2.checkpoint_stall_s, 0.55, 1e-12);  // mean of 0.4, 0.6, 0.5, 0.7
  EXPECT_EQ(k2.checkpoint_events, 4);
  EXPECT_DOUBLE_EQ(k2.checkpoint_state_bytes, 3e9);
  EXPECT_FALSE(run.points[0].checkpoint_stall_s.has_value());
  EXPECT_DOUBLE_EQ(run.memory_estimate.total_bytes(), 10 * kGiB);
  EXPECT_DOUBLE_EQ(run.peak_device_memory_bytes, 12 * kGiB);
}

TEST(RunMeasurement, NoTrainingMeasurement) {
  Report collectives;
  collectives.root.Set("command", std::string("collectives"));
  EXPECT_NE(InputErrorOf([&] { ReadRunMeasurement(collectives, "c.h5"); })
                .find("'c.h5': no training measurement (a report of 'collectives'"),
            std::string::npos);
  EXPECT_NE(InputErrorOf([&] { ReadAllReduceSamples(collectives, "c.h5"); }).find("'c.h5': no all_reduce measurement"),
            std::string::npos);
  Report empty_train = SyntheticRun();
  empty_train.root.Child("train") = Group();
  EXPECT_NE(InputErrorOf([&] { ReadRunMeasurement(empty_train, "t.h5"); }).find("no training measurement"),
            std::string::npos);
}

}  // namespace
}  // namespace tb
