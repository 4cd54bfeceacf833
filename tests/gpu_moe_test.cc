// The MoE layer's routing on the device (models/cuda/moe_kernels.h) against the CPU layer's (cpu::RouteLogits,
// cpu::AssignRows in models/cpu_moe.h) on the same logits: top-1 and top-2, with and without dropped choices, over
// more choices than one block scans at once, and with ties (equal logits go to the lower expert, as on the CPU).
// Tolerances: the choices, rows, counts and block starts exactly; probabilities and gate weights 2e-6 relative +
// 1e-7 absolute (the device's expf against the host's differs by a few ulp, and a sum over E of them). Skips, saying
// why, without a usable GPU.
#include <gtest/gtest.h>

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
                         static_cast<const int*>(expert.data()), tokens, moe.experts, top_k, cpu.capacity, nullptr);
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

TEST(GpuMoe, TopTwoRoutingWithDropsMatchesCpu) { ExpectRoutingMatchesCpu(2, 0.5, true, false); }
TEST(GpuMoe, TopTwoRoutingWithoutDropsMatchesCpu) { ExpectRoutingMatchesCpu(2, 3.0, false, false); }
TEST(GpuMoe, TopOneRoutingWithDropsMatchesCpu) { ExpectRoutingMatchesCpu(1, 0.5, true, false); }
TEST(GpuMoe, TiesGoToTheLowerExpertAsOnTheCpu) { ExpectRoutingMatchesCpu(2, 1.25, true, true); }

}  // namespace
