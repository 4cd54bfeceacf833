// The MoE layer's routing on the device (models/cuda/moe_kernels.h) against the CPU layer's (cpu::RouteLogits,
// cpu::AssignRows in models/cpu_moe.h) on the same logits: top-1 and top-2, with and without dropped choices, over
// more choices than one block scans at once, and with ties (equal logits go to the lower expert, as on the CPU); and
// the gather and combine against the CPU layer's arithmetic on the same bf16 rows.
// Tolerances: the choices, rows, counts, block starts and gathered rows exactly; probabilities and gate weights 2e-6
// relative + 1e-7 absolute (the device's expf against the host's differs by a few ulp, and a sum over E of them); the
// combine 1e-6 relative + 1e-7 (the device may fuse a multiply and an add). Skips, saying why, without a usable GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu_moe.h"
#include "cuda/kernels.h"
#include "cuda/moe_kernels.h"
#include "device.h"
#include "gpu_test_util.h"
#include "moe_math.h"

namespace {

using tb::gpu::DeviceMemory;
using tb::gpu::Download;
using tb::gpu::Upload;
using tb::test::NoGpuMessage;

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

}  // namespace
