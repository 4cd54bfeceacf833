// The MoE layer's routing on the device (models/cuda/moe_kernels.h) against the CPU layer's (cpu::RouteLogits,
// cpu::AssignRows in models/cpu_moe.h) on the same logits: top-1 and top-2, with and without dropped choices, over
// more choices than one block scans at once, and with ties (equal logits go to the lower expert, as on the CPU); and
// the gather and combine against the CPU layer's arithmetic on the same bf16 rows.
// Tolerances: the choices, rows, counts, block starts and gathered rows exactly; probabilities and gate weights 2e-6
// relative + 1e-7 absolute (the device's expf against the host's differs by a few ulp, and a sum over E of them); the
// combine 1e-6 relative + 1e-7 (the device may fuse a multiply and an add). The whole layer (moe_layer.h) against
// cpu::MoeForward / MoeBackward on the same bf16-rounded input and weights: the choices and drops exactly, the output
// and every gradient within 3e-2 of its norm (the CUDA transformer's tolerance: the experts' activations are rounded
// to bf16 three times, and the routers' logits come from a bf16 GEMM). Skips, saying why, without a usable GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "communicator.h"
#include "cpu_moe.h"
#include "cuda/autotune.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "cuda/moe_kernels.h"
#include "cuda/moe_layer.h"
#include "device.h"
#include "gpu_test_util.h"
#include "moe_math.h"
#include "nccl_communicator.h"
#include "scoped_env.h"
#include "transformer.h"

namespace {

using tb::gpu::DeviceMemory;
using tb::gpu::Download;
using tb::gpu::Upload;
using tb::test::Bf16Values;
using tb::test::DownloadDevice;
using tb::test::NoGpuMessage;
using tb::test::RandomBf16;
using tb::test::RandomNormal;
using tb::test::RelativeDifference;

// Logits (N, E): normal, or with every other token's row all equal (ties everywhere).
std::vector<float> Logits(size_t tokens, int experts, unsigned seed, bool ties) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> logits(tokens * experts);
  for (size_t t = 0; t < tokens; ++t) {
    for (int e = 0; e < experts; ++e) logits[t * experts + e] = ties && t % 2 == 0 ? 0.5f : normal(rng);
  }
  return logits;
}

void ExpectRoutingMatchesCpu(int top_k, double capacity_factor, bool drops, bool ties) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const size_t tokens = 300;  // 600 choices at top-2: three chunks of the scan's 256
  tb::MoeConfig moe;
  moe.experts = 6;
  moe.top_k = top_k;
  moe.capacity_factor = capacity_factor;
  tb::cpu::MoeRouting cpu;
  cpu.probs = Logits(tokens, moe.experts, 7 + top_k, ties);
  const DeviceMemory probs = Upload(cpu.probs);
  tb::cpu::RouteLogits(cpu, moe, tokens);
  tb::cpu::AssignRows(cpu, moe, tokens);
  const size_t choices = tokens * top_k;
  DeviceMemory expert(choices * sizeof(int)), gate(choices * sizeof(float)), row(choices * sizeof(int));
  DeviceMemory assigned(moe.experts * sizeof(int)), block_begin((moe.experts + 1) * sizeof(int)), dropped(sizeof(int));
  tb::gpu::MoeRouteLogits(static_cast<float*>(probs.data()), static_cast<int*>(expert.data()),
                          static_cast<float*>(gate.data()), tokens, moe.experts, top_k, nullptr);
  tb::gpu::MoeAssignRows(static_cast<int*>(row.data()), static_cast<int*>(assigned.data()),
                         static_cast<int*>(block_begin.data()), static_cast<int*>(dropped.data()),
                         static_cast<const int*>(expert.data()), tokens, moe.experts, top_k, cpu.capacity, 0, nullptr);
  tb::gpu::SynchronizeDevice();
  EXPECT_EQ(Download<int>(expert, choices), cpu.expert);
  EXPECT_EQ(Download<int>(row, choices), cpu.row);
  EXPECT_EQ(Download<int>(block_begin, moe.experts + 1), cpu.block_begin);
  const std::vector<int> counts = Download<int>(assigned, moe.experts);
  for (int e = 0; e < moe.experts; ++e) EXPECT_EQ(counts[e], cpu.assigned[e]) << "expert " << e;
  EXPECT_EQ(Download<int>(dropped, 1).front(), cpu.dropped);
  EXPECT_EQ(drops, cpu.dropped > 0) << cpu.dropped << " dropped";
  const std::vector<float> device_probs = Download<float>(probs, cpu.probs.size());
  const std::vector<float> device_gate = Download<float>(gate, choices);
  for (size_t i = 0; i < cpu.probs.size(); ++i) {
    ASSERT_NEAR(device_probs[i], cpu.probs[i], 1e-7 + 2e-6 * cpu.probs[i]) << "probability " << i;
  }
  for (size_t i = 0; i < choices; ++i) {
    ASSERT_NEAR(device_gate[i], cpu.gate[i], 1e-7 + 2e-6 * cpu.gate[i]) << "gate " << i;
  }
}

// Token rows into their experts' blocks and the experts' outputs back, gated, onto the residual.
TEST(GpuMoe, GatherAndCombineMatchTheCpuLayersArithmetic) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const size_t tokens = 50;
  const int channels = 24, top_k = 2;
  tb::MoeConfig moe;
  moe.experts = 4;
  moe.top_k = top_k;
  moe.capacity_factor = 0.75;  // some choices dropped
  tb::cpu::MoeRouting cpu;
  cpu.probs = Logits(tokens, moe.experts, 3, false);
  tb::cpu::RouteLogits(cpu, moe, tokens);
  tb::cpu::AssignRows(cpu, moe, tokens);
  ASSERT_GT(cpu.dropped, 0);
  const size_t rows = static_cast<size_t>(cpu.block_begin.back());
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto bf16_rows = [&](size_t count, std::vector<tb::gpu::Bf16>& bits, std::vector<float>& values) {
    for (size_t i = 0; i < count; ++i) {
      bits.push_back(tb::gpu::ToBf16(normal(rng)));
      values.push_back(tb::gpu::ToFloat(bits.back()));
    }
  };
  std::vector<tb::gpu::Bf16> in_bits, out_bits;
  std::vector<float> in, expert_out, residual;
  bf16_rows(tokens * channels, in_bits, in);
  bf16_rows(rows * channels, out_bits, expert_out);
  for (size_t i = 0; i < tokens * channels; ++i) residual.push_back(normal(rng));
  const DeviceMemory d_in = Upload(in_bits), d_out_rows = Upload(out_bits), d_residual = Upload(residual);
  const DeviceMemory d_row = Upload(cpu.row), d_gate = Upload(cpu.gate);
  DeviceMemory gathered(rows * channels * sizeof(tb::gpu::Bf16)), out(tokens * channels * sizeof(float));
  tb::gpu::MoeGather(static_cast<tb::gpu::Bf16*>(gathered.data()), static_cast<const tb::gpu::Bf16*>(d_in.data()),
                     static_cast<const int*>(d_row.data()), tokens, top_k, channels, nullptr);
  tb::gpu::MoeCombine(static_cast<float*>(out.data()), static_cast<const float*>(d_residual.data()),
                      static_cast<const tb::gpu::Bf16*>(d_out_rows.data()), static_cast<const int*>(d_row.data()),
                      static_cast<const float*>(d_gate.data()), tokens, top_k, channels, nullptr);
  tb::gpu::SynchronizeDevice();
  const std::vector<tb::gpu::Bf16> got = Download<tb::gpu::Bf16>(gathered, rows * channels);
  const std::vector<float> combined = Download<float>(out, tokens * channels);
  for (size_t i = 0; i < tokens * top_k; ++i) {
    if (cpu.row[i] < 0) continue;
    for (int c = 0; c < channels; ++c) {
      ASSERT_EQ(got[cpu.row[i] * channels + c].bits, in_bits[(i / top_k) * channels + c].bits) << "choice " << i;
    }
  }
  for (size_t t = 0; t < tokens; ++t) {
    for (int c = 0; c < channels; ++c) {
      float want = residual[t * channels + c];  // cpu_moe.cc's CombineOutputs, in its order
      for (int j = 0; j < top_k; ++j) {
        const int r = cpu.row[t * top_k + j];
        if (r >= 0) want += cpu.gate[t * top_k + j] * expert_out[r * channels + c];
      }
      ASSERT_NEAR(combined[t * channels + c], want, 1e-7 + 1e-6 * std::fabs(want)) << "token " << t << " channel " << c;
    }
  }
}

TEST(GpuMoe, TopTwoRoutingWithDropsMatchesCpu) { ExpectRoutingMatchesCpu(2, 0.5, true, false); }
TEST(GpuMoe, TopTwoRoutingWithoutDropsMatchesCpu) { ExpectRoutingMatchesCpu(2, 3.0, false, false); }
TEST(GpuMoe, TopOneRoutingWithDropsMatchesCpu) { ExpectRoutingMatchesCpu(1, 0.5, true, false); }
TEST(GpuMoe, TiesGoToTheLowerExpertAsOnTheCpu) { ExpectRoutingMatchesCpu(2, 1.25, true, true); }

// --- the whole layer ------------------------------------------------------------------------------------------

void ExpectNormNear(const std::vector<float>& gpu, const std::vector<float>& cpu, const char* what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  EXPECT_LT(RelativeDifference(gpu.data(), cpu.data(), cpu.size()), 3e-2) << what;
}

// One layer's inputs: bf16-rounded input and weights, fp32 residual and output gradient.
struct LayerInputs {
  tb::MoeConfig moe;
  size_t tokens = 96;
  int channels = 32;
  Bf16Values in, router, fc, fc_bias, proj, proj_bias;
  std::vector<float> residual, out_grad;
  float aux_loss_grad = 0.5f;

  LayerInputs(int top_k, double capacity_factor) {
    moe.experts = 4;
    moe.top_k = top_k;
    moe.expert_ffn = 48;
    moe.capacity_factor = capacity_factor;
    moe.aux_loss_coef = 0.05;
    const size_t e = moe.experts, f = moe.expert_ffn, c = channels;
    in = RandomBf16(tokens * c, 1.0f, 81);
    router = RandomBf16(e * c, 0.5f, 82);
    fc = RandomBf16(e * f * c, 0.2f, 83);
    fc_bias = RandomBf16(e * f, 0.1f, 84);
    proj = RandomBf16(e * c * f, 0.15f, 85);
    proj_bias = RandomBf16(e * c, 0.1f, 86);
    residual = RandomNormal(tokens * c, 1.0f, 87);
    out_grad = RandomNormal(tokens * c, 1.0f, 88);
  }
};

// What a layer gives: its output, input gradient and weight gradients (router, fc, fc bias, proj, proj bias), and its
// routing (choices, drops, choices per expert, aux loss).
struct LayerResult {
  std::vector<float> out, in_grad;
  std::vector<std::vector<float>> grads;
  std::vector<int> expert;
  int64_t dropped = 0;
  std::vector<int64_t> assigned;
  float aux_loss = 0;
};

LayerResult RunCpuLayer(const LayerInputs& x) {
  tb::cpu::MoeActivations cpu;
  LayerResult r;
  r.out.resize(x.tokens * x.channels);
  r.in_grad.resize(x.tokens * x.channels);
  const tb::cpu::MoeWeights weights{x.router.values.data(), x.fc.values.data(), x.fc_bias.values.data(),
                                    x.proj.values.data(), x.proj_bias.values.data()};
  tb::cpu::MoeForward(cpu, r.out.data(), x.in.values.data(), x.residual.data(), weights, x.moe, x.tokens, x.channels);
  for (const Bf16Values* t : {&x.router, &x.fc, &x.fc_bias, &x.proj, &x.proj_bias}) {
    r.grads.emplace_back(t->values.size(), 0.0f);
  }
  tb::cpu::MoeBackward(r.in_grad.data(),
                       {r.grads[0].data(), r.grads[1].data(), r.grads[2].data(), r.grads[3].data(), r.grads[4].data()},
                       x.out_grad.data(), x.aux_loss_grad, x.in.values.data(), weights, cpu, x.moe, x.tokens,
                       x.channels);
  r.expert = cpu.routing.expert;
  r.dropped = cpu.routing.dropped;
  r.assigned = cpu.routing.assigned;
  r.aux_loss = cpu.aux_loss;
  return r;
}

// The device layer on the same inputs, its gradients over NaN (overwritten); with `experts`, dispatched over its
// group.
LayerResult RunGpuLayer(const LayerInputs& x, tb::MoeExperts* experts) {
  using tb::gpu::Bf16;
  tb::gpu::Gemm gemm(nullptr);
  const tb::gpu::MoeShape shape = tb::gpu::MoeShapeOf(x.moe, x.tokens, x.channels, experts);
  tb::gpu::MoeLayerActivations a;
  tb::gpu::MoeLayerScratch scratch;
  const DeviceMemory activations(tb::gpu::PointMoeActivations(a, nullptr, shape));
  const DeviceMemory scratch_memory(tb::gpu::PointMoeScratch(scratch, nullptr, shape));
  tb::gpu::PointMoeActivations(a, activations.as<char>(), shape);
  tb::gpu::PointMoeScratch(scratch, scratch_memory.as<char>(), shape);
  const DeviceMemory d_in = Upload(x.in.bits), d_router = Upload(x.router.bits), d_fc = Upload(x.fc.bits);
  const DeviceMemory d_fc_bias = Upload(x.fc_bias.bits), d_proj = Upload(x.proj.bits);
  const DeviceMemory d_proj_bias = Upload(x.proj_bias.bits);
  const DeviceMemory d_residual = Upload(x.residual), d_out_grad = Upload(x.out_grad);
  const size_t values = x.tokens * x.channels;
  DeviceMemory d_out(values * sizeof(float)), d_in_grad(values * sizeof(float));
  std::vector<DeviceMemory> d_grads;
  for (const Bf16Values* t : {&x.router, &x.fc, &x.fc_bias, &x.proj, &x.proj_bias}) {
    d_grads.push_back(Upload(std::vector<float>(t->values.size(), NAN)));
  }
  const tb::gpu::MoeLayerWeights weights{d_router.as<Bf16>(), d_fc.as<Bf16>(), d_fc_bias.as<Bf16>(),
                                         d_proj.as<Bf16>(), d_proj_bias.as<Bf16>()};
  tb::gpu::MoeLayerForward(gemm, a, scratch, d_out.as<float>(), d_residual.as<float>(), d_in.as<Bf16>(), weights,
                           x.moe, x.tokens, x.channels, nullptr, experts);
  tb::gpu::MoeLayerBackward(gemm, scratch, d_in_grad.as<float>(),
                            {d_grads[0].as<float>(), d_grads[1].as<float>(), d_grads[2].as<float>(),
                             d_grads[3].as<float>(), d_grads[4].as<float>()},
                            d_out_grad.as<float>(), x.aux_loss_grad, d_in.as<Bf16>(), weights, a, x.moe, x.tokens,
                            x.channels, tb::GradientWrite::kOverwrite, nullptr, experts);
  tb::gpu::SynchronizeDevice();
  LayerResult r;
  r.out = Download<float>(d_out, values);
  r.in_grad = Download<float>(d_in_grad, values);
  for (const DeviceMemory& g : d_grads) r.grads.push_back(Download<float>(g, g.bytes() / sizeof(float)));
  r.expert = DownloadDevice(a.expert, x.tokens * x.moe.top_k);
  r.dropped = DownloadDevice(a.dropped, 1).front();
  for (const int count : DownloadDevice(a.assigned, x.moe.experts)) r.assigned.push_back(count);
  r.aux_loss = DownloadDevice(a.aux_loss, 1).front();
  return r;
}

const char* const kGradientNames[] = {"router gradient", "fc weight gradient", "fc bias gradient",
                                      "proj weight gradient", "proj bias gradient"};

void ExpectLayerMatchesCpu(int top_k, double capacity_factor, bool drops) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const LayerInputs x(top_k, capacity_factor);
  const LayerResult cpu = RunCpuLayer(x);
  ASSERT_EQ(drops, cpu.dropped > 0) << cpu.dropped << " dropped";
  const LayerResult gpu = RunGpuLayer(x, nullptr);
  ASSERT_EQ(gpu.expert, cpu.expert) << "the routing differs (a near tie of the bf16 GEMM's logits?)";
  EXPECT_EQ(gpu.dropped, cpu.dropped);
  EXPECT_EQ(gpu.assigned, cpu.assigned);
  EXPECT_NEAR(gpu.aux_loss, cpu.aux_loss, 1e-3 * cpu.aux_loss);
  ExpectNormNear(gpu.out, cpu.out, "out");
  ExpectNormNear(gpu.in_grad, cpu.in_grad, "in_grad");
  for (size_t i = 0; i < cpu.grads.size(); ++i) ExpectNormNear(gpu.grads[i], cpu.grads[i], kGradientNames[i]);
}

TEST(GpuMoe, LayerTopTwoWithDropsMatchesCpu) { ExpectLayerMatchesCpu(2, 0.75, true); }
TEST(GpuMoe, LayerTopTwoWithoutDropsMatchesCpu) { ExpectLayerMatchesCpu(2, 2.0, false); }
TEST(GpuMoe, LayerTopOneWithDropsMatchesCpu) { ExpectLayerMatchesCpu(1, 0.75, true); }

// Expert parallel's path (the compact gather, the host's dispatch plan, NCCL's all-to-alls, the regrouping into padded
// expert rows and back) over a group of one rank, which one GPU can run: the same expert rows as without a group, so
// the same bits, and no bytes counted (the rows go to this rank itself). Expert parallel over more ranks needs a GPU
// each (NCCL refuses two ranks on one device): tests/perf/gpu_check.sh's parallel part runs it where there are two.
TEST(GpuMoe, LayerOverAOneRankExpertGroupEqualsTheLayerWithout) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  // The heuristic's first algorithm for each GEMM: autotuning times candidates, and may pick another for the second
  // layer's equal shapes (another split of K, other bits).
  const tb::test::ScopedEnv no_autotune(tb::gpu::kAutotuneVariable, "0");
  const LayerInputs x(2, 0.75);
  const LayerResult alone = RunGpuLayer(x, nullptr);
  const std::unique_ptr<tb::Communicator> group = tb::MakeNcclCommunicator(MPI_COMM_SELF);
  tb::MoeExperts experts;
  experts.group = group.get();
  const LayerResult grouped = RunGpuLayer(x, &experts);
  EXPECT_EQ(grouped.expert, alone.expert);
  EXPECT_EQ(grouped.dropped, alone.dropped);
  EXPECT_EQ(grouped.out, alone.out);
  EXPECT_EQ(grouped.in_grad, alone.in_grad);
  for (size_t i = 0; i < alone.grads.size(); ++i) EXPECT_EQ(grouped.grads[i], alone.grads[i]) << kGradientNames[i];
  EXPECT_GT(experts.figures.dispatch_s, 0.0);
  EXPECT_GT(experts.figures.combine_s, 0.0);
  EXPECT_EQ(experts.figures.dispatch_bytes, 0u);
  EXPECT_EQ(experts.figures.combine_bytes, 0u);
}

}  // namespace
