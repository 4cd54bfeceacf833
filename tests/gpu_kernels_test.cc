// The CUDA implementation's non-GEMM kernels (models/cuda/kernels.h) against the CPU reference
// (models/cpu_kernels.h) on random inputs, and the shared per-element math (models/element_math.h) against the
// reference's own inline functions. The GPU tests skip, saying why, when no GPU is usable (and in a build
// without CUDA); the element-math test runs everywhere.
//
// Tolerances, as |gpu - cpu| <= abs + rel·|cpu|:
// - exact copies and single adds (encoder forward, residual add): 0. wpe's gradient: 0 too, the batch added in the
//   reference's order.
// - atomics in a varying order (wte's gradient): 1e-5 absolute on unit-scale sums of a few terms.
// - GELU: 2e-6 + 2e-6·|cpu|: the device's tanhf (2 ulp) against the reference's TanhViaExp (~1e-7 absolute),
//   scaled by x. Its gradient: 1e-5 + 2e-6·|cpu| for inputs of stddev 2 (|x| < ~8): near tanh's saturation
//   both lose ~1 ulp of t in 1 - t², multiplied by 0.5·x·du/dx (up to ~30 there).
// - LayerNorm, cross-entropy and column sums: 1e-5 relative + 1e-5 absolute (or 1e-4 for sums over all rows:
//   weight/bias gradients, column sums): block partial sums and warp-shuffle reductions add in a different order
//   than the reference's loop, and expf differs from cpu::Exp by a few ulp; the online softmax rescales its
//   running sum, a few ulp more. bf16 outputs add one rounding, 2^-8 relative.
// - AdamW: 1e-6 relative + 1e-7 absolute after three steps: the same formula, rounded the same, except that
//   the device may contract a multiply-add into an FMA.
// - A gradient scale (cross-entropy) that is a power of two: the same tolerances, scaled.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "cuda/adamw_table.h"
#include "cuda/kernels.h"
#include "device.h"
#include "element_math.h"
#include "gpu_test_util.h"

namespace {

using tb::test::ExpectAllNear;
using tb::test::NoGpuMessage;
using tb::test::RandomNormal;
using tb::test::RandomTokens;

using tb::gpu::DeviceMemory;
using tb::gpu::Download;
using tb::gpu::Upload;




// --- shared per-element math, CPU only ---------------------------------------------------------------------

TEST(ElementMath, GeluMatchesCpuReference) {
  const auto expect_same = [](float x) {
    const float gelu = tb::cpu::Gelu(x);
    const float gelu_grad = tb::cpu::GeluGrad(x);
    ASSERT_NEAR(tb::element::Gelu(x), gelu, 1e-6f * std::max(1.0f, std::fabs(gelu))) << "x = " << x;
    // GeluGrad's 0.5·x·(1 - t²)·du/dx loses ~1 ulp of t to cancellation where tanh saturates, in both
    // versions alike: scale the tolerance by that factor (|x| = 5: 12) rather than by the result.
    const float du_dx = tb::element::kSqrt2OverPi * (1.0f + 3.0f * tb::element::kGeluCubic * x * x);
    const float cancellation_scale = std::max(1.0f, std::fabs(0.5f * x * du_dx));
    ASSERT_NEAR(tb::element::GeluGrad(x), gelu_grad, 1e-6f * cancellation_scale) << "x = " << x;
  };
  // Dense where tanh is neither 0 nor ±1, then coarser out to where it has long saturated.
  for (int i = -100000; i <= 100000; ++i) expect_same(i * 1e-4f);
  for (int i = 1000; i <= 10000; ++i) {
    expect_same(i * 1e-2f);
    expect_same(-i * 1e-2f);
  }
}

TEST(ElementMath, AdamWElementMatchesCpuReference) {
  const std::vector<float> grads = RandomNormal(10000, 1.0f, 1);
  const std::vector<float> params = RandomNormal(grads.size(), 0.02f, 2);
  const tb::AdamWConfig config;
  for (size_t i = 0; i < grads.size(); ++i) {
    float cpu_param = params[i], cpu_m = 0.0f, cpu_v = 0.0f;
    float shared_param = params[i], shared_m = 0.0f, shared_v = 0.0f;
    for (int64_t step = 1; step <= 3; ++step) {
      const float m_correction = 1.0f / (1.0f - std::pow(config.beta1, static_cast<float>(step)));
      const float v_correction = 1.0f / (1.0f - std::pow(config.beta2, static_cast<float>(step)));
      const float grad = grads[i] / static_cast<float>(step);
      tb::cpu::AdamWElement(cpu_param, grad, cpu_m, cpu_v, config.learning_rate, config.beta1, config.beta2,
                            config.epsilon, config.weight_decay, m_correction, v_correction);
      tb::element::AdamWElement(shared_param, grad, shared_m, shared_v, config.learning_rate, config.beta1,
                                config.beta2, config.epsilon, config.weight_decay, m_correction, v_correction);
    }
    ASSERT_NEAR(shared_param, cpu_param, 1e-6f * std::max(1.0f, std::fabs(cpu_param))) << "i = " << i;
    ASSERT_NEAR(shared_m, cpu_m, 1e-6f * std::max(1.0f, std::fabs(cpu_m))) << "i = " << i;
    ASSERT_NEAR(shared_v, cpu_v, 1e-6f * std::max(1.0f, std::fabs(cpu_v))) << "i = " << i;
  }
}

// The online softmax accumulator against the two-pass max and sum, over values fed one at a time and merged in
// pieces (as a block's threads do), including empty pieces and a first value that is not the largest.
TEST(ElementMath, OnlineSoftmaxMatchesTwoPasses) {
  const std::vector<float> values = RandomNormal(5000, 4.0f, 3);
  const float max = *std::max_element(values.begin(), values.end());
  double sum = 0.0;
  for (const float value : values) sum += std::exp(static_cast<double>(value) - max);
  for (const size_t piece : {size_t{1}, size_t{7}, size_t{256}, values.size()}) {
    tb::element::SoftmaxAccumulator total;
    for (size_t begin = 0; begin < values.size(); begin += piece) {
      tb::element::SoftmaxAccumulator part;
      for (size_t i = begin; i < std::min(values.size(), begin + piece); ++i) {
        part = tb::element::SoftmaxAdd(part, values[i]);
      }
      total = tb::element::SoftmaxMerge(tb::element::SoftmaxMerge(total, tb::element::SoftmaxAccumulator{}), part);
    }
    EXPECT_EQ(total.max, max) << "pieces of " << piece;
    EXPECT_NEAR(total.sum, sum, 1e-5 * sum) << "pieces of " << piece;
  }
  const tb::element::SoftmaxAccumulator empty = tb::element::SoftmaxMerge({}, {});
  EXPECT_EQ(empty.sum, 0.0f);
  EXPECT_TRUE(std::isinf(empty.max) && empty.max < 0);
}

// AdamW's table (one launch over all ranges): ranges split where a 16-byte load could not start, blocks counted per
// range, and each block finds its range.
TEST(AdamWTable, SplitsUnalignedHeadsAndFindsEachBlocksRange) {
  using tb::gpu::kAdamWElementsPerBlock;
  // A zero1-like moment offset of 6 (the shard begins at 6): every offset and its moment offset (offset - 6) then
  // differ modulo 4, so every range stays whole and scalar; the empty one is dropped.
  const std::vector<tb::AdamWRange> ranges = {
      {6, 10, true}, {17, 3, false}, {24, 2 * kAdamWElementsPerBlock + 5, true}, {9000000, 0, false}};
  const std::vector<tb::gpu::AdamWTableEntry> table = tb::gpu::MakeAdamWTable(ranges, 6);
  ASSERT_EQ(table.size(), 3u);
  EXPECT_EQ(table[0].offset, 6u);
  EXPECT_EQ(table[0].vector, 0u);
  EXPECT_EQ(table[1].offset, 17u);
  EXPECT_EQ(table[1].count, 3u);
  EXPECT_EQ(table[1].vector, 0u);
  EXPECT_EQ(table[1].decay, 0u);
  EXPECT_EQ(table[2].moment, 18u);
  EXPECT_EQ(table[2].vector, 0u);
  // Without a moment offset the big range is aligned both ways, and one at offset 2 splits into a head and a rest.
  const std::vector<tb::gpu::AdamWTableEntry> aligned =
      tb::gpu::MakeAdamWTable({{2, 9, false}, {24, 2 * kAdamWElementsPerBlock + 5, true}}, 0);
  ASSERT_EQ(aligned.size(), 3u);
  EXPECT_EQ(aligned[0].offset, 2u);
  EXPECT_EQ(aligned[0].count, 2u);
  EXPECT_EQ(aligned[0].vector, 0u);
  EXPECT_EQ(aligned[1].offset, 4u);
  EXPECT_EQ(aligned[1].count, 7u);
  EXPECT_EQ(aligned[1].vector, 1u);
  EXPECT_EQ(aligned[2].vector, 1u);
  EXPECT_EQ(aligned[2].decay, 1u);
  EXPECT_EQ(aligned[2].first_block, 2u);
  EXPECT_EQ(tb::gpu::AdamWBlocks(aligned), 5u);  // 1 + 1 + 3
  const uint64_t expected_entry[] = {0, 1, 2, 2, 2};
  for (uint64_t block = 0; block < 5; ++block) {
    EXPECT_EQ(tb::gpu::FindAdamWEntry(aligned.data(), aligned.size(), block), expected_entry[block]) << block;
  }
  EXPECT_EQ(tb::gpu::AdamWBlocks({}), 0u);
}

// --- GPU kernels against the CPU reference -----------------------------------------------------------------

// Shapes with channels that are not a multiple of the warp size, so the tails of every loop run.
constexpr int kBatch = 3;
constexpr int kSeq = 17;
constexpr int kChannels = 100;
constexpr int kVocab = 1000;
constexpr int kVocabPadded = 1024;
constexpr size_t kRows = static_cast<size_t>(kBatch) * kSeq;

TEST(GpuKernels, EncoderForwardAndBackward) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const std::vector<int32_t> tokens = RandomTokens(kRows, kVocab, 3);  // (B, T)
  const std::vector<float> wte = RandomNormal(static_cast<size_t>(kVocabPadded) * kChannels, 0.02f, 4);  // (Vp, C)
  const std::vector<float> wpe = RandomNormal(static_cast<size_t>(kSeq) * kChannels, 0.02f, 5);          // (T, C)
  const std::vector<float> out_grad = RandomNormal(kRows * kChannels, 1.0f, 6);                          // (B, T, C)

  std::vector<float> cpu_out(kRows * kChannels);
  tb::cpu::EncoderForward(cpu_out.data(), tokens.data(), wte.data(), wpe.data(), kBatch, kSeq, kChannels);
  // Gradients start non-zero: backward accumulates.
  std::vector<float> cpu_wte_grad = RandomNormal(wte.size(), 1.0f, 7);
  std::vector<float> cpu_wpe_grad = RandomNormal(wpe.size(), 1.0f, 8);
  const DeviceMemory wte_grad = Upload(cpu_wte_grad);
  const DeviceMemory wpe_grad = Upload(cpu_wpe_grad);
  tb::cpu::EncoderBackward(cpu_wte_grad.data(), cpu_wpe_grad.data(), out_grad.data(), tokens.data(), kBatch, kSeq,
                           kChannels);

  const DeviceMemory d_tokens = Upload(tokens), d_wte = Upload(wte), d_wpe = Upload(wpe);
  const DeviceMemory d_out_grad = Upload(out_grad);
  const DeviceMemory out(cpu_out.size() * sizeof(float));
  tb::gpu::EncoderForward(out.as<float>(), d_tokens.as<int32_t>(), d_wte.as<float>(), d_wpe.as<float>(), kBatch,
                          kSeq, kChannels, nullptr);
  tb::gpu::EncoderBackward(wte_grad.as<float>(), wpe_grad.as<float>(), d_out_grad.as<float>(),
                           d_tokens.as<int32_t>(), kBatch, kSeq, kChannels, kSeq, tb::GradientWrite::kAccumulate,
                           nullptr);
  tb::gpu::SynchronizeDevice();

  ExpectAllNear(Download<float>(out, cpu_out.size()), cpu_out, 0.0f, 0.0f, "encoder out");
  ExpectAllNear(Download<float>(wte_grad, cpu_wte_grad.size()), cpu_wte_grad, 1e-5f, 0.0f, "wte_grad");
  ExpectAllNear(Download<float>(wpe_grad, cpu_wpe_grad.size()), cpu_wpe_grad, 0.0f, 0.0f, "wpe_grad");

  // Overwriting wpe's gradient (NaN before, as an FSDP working buffer may hold), with 3 more positions than the
  // batch has: those get 0; wte's still adds.
  constexpr int kPositions = kSeq + 3;
  std::vector<float> expected_wpe(static_cast<size_t>(kPositions) * kChannels, 0.0f);
  std::vector<float> scratch_wte(wte.size(), 0.0f);
  tb::cpu::EncoderBackward(scratch_wte.data(), expected_wpe.data(), out_grad.data(), tokens.data(), kBatch, kSeq,
                           kChannels);
  const DeviceMemory fresh_wpe_grad = Upload(std::vector<float>(expected_wpe.size(), NAN));
  tb::gpu::EncoderBackward(wte_grad.as<float>(), fresh_wpe_grad.as<float>(), d_out_grad.as<float>(),
                           d_tokens.as<int32_t>(), kBatch, kSeq, kChannels, kPositions, tb::GradientWrite::kOverwrite,
                           nullptr);
  tb::gpu::SynchronizeDevice();
  ExpectAllNear(Download<float>(fresh_wpe_grad, expected_wpe.size()), expected_wpe, 0.0f, 0.0f, "overwritten wpe_grad");
  for (size_t i = 0; i < cpu_wte_grad.size(); ++i) cpu_wte_grad[i] += scratch_wte[i];
  ExpectAllNear(Download<float>(wte_grad, cpu_wte_grad.size()), cpu_wte_grad, 2e-5f, 0.0f, "wte_grad added twice");
}

TEST(GpuKernels, LayerNormForwardAndBackward) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  // 100 channels: the scalar loads (not a multiple of 8). More rows than one block's warps take, the last row group
  // partial: the per-block partial sums of the weight and bias gradients and their second pass both run.
  constexpr size_t kNormRows = 700;
  // A large common offset checks that the variance is taken of centred values.
  std::vector<float> in = RandomNormal(kNormRows * kChannels, 1.0f, 10);  // (N, C)
  for (float& value : in) value += 30.0f;
  std::vector<float> weight = RandomNormal(kChannels, 0.1f, 11);  // (C)
  for (float& value : weight) value += 1.0f;
  const std::vector<float> bias = RandomNormal(kChannels, 0.1f, 12);           // (C)
  const std::vector<float> out_grad = RandomNormal(in.size(), 1.0f, 13);       // (N, C)
  std::vector<float> cpu_in_grad = RandomNormal(in.size(), 1.0f, 14);          // (N, C), accumulated into
  std::vector<float> cpu_weight_grad = RandomNormal(kChannels, 1.0f, 15);      // (C), accumulated into
  std::vector<float> cpu_bias_grad = RandomNormal(kChannels, 1.0f, 16);        // (C), accumulated into
  const DeviceMemory in_grad = Upload(cpu_in_grad);
  const DeviceMemory weight_grad = Upload(cpu_weight_grad);
  const DeviceMemory bias_grad = Upload(cpu_bias_grad);

  std::vector<float> cpu_out(in.size()), cpu_mean(kNormRows), cpu_rstd(kNormRows);
  tb::cpu::LayerNormForward(cpu_out.data(), cpu_mean.data(), cpu_rstd.data(), in.data(), weight.data(),
                            bias.data(), kNormRows, kChannels);
  tb::cpu::LayerNormBackward(cpu_in_grad.data(), cpu_weight_grad.data(), cpu_bias_grad.data(), out_grad.data(),
                             in.data(), weight.data(), cpu_mean.data(), cpu_rstd.data(), kNormRows, kChannels);

  const DeviceMemory d_in = Upload(in), d_weight = Upload(weight), d_bias = Upload(bias);
  const DeviceMemory d_out_grad = Upload(out_grad);
  const DeviceMemory out(in.size() * sizeof(float)), mean(kNormRows * sizeof(float)), rstd(kNormRows * sizeof(float));
  const DeviceMemory scratch(tb::gpu::LayerNormBackwardScratchFloats(kNormRows, kChannels) * sizeof(float));
  tb::gpu::LayerNormForward(out.as<float>(), mean.as<float>(), rstd.as<float>(), d_in.as<float>(),
                            d_weight.as<float>(), d_bias.as<float>(), kNormRows, kChannels, nullptr);
  tb::gpu::LayerNormBackward(in_grad.as<float>(), nullptr, weight_grad.as<float>(), bias_grad.as<float>(),
                             d_out_grad.as<float>(), d_in.as<float>(), d_weight.as<float>(), mean.as<float>(),
                             rstd.as<float>(), kNormRows, kChannels, tb::GradientWrite::kAccumulate,
                             scratch.as<float>(), nullptr);
  tb::gpu::SynchronizeDevice();

  // The offset of 30 costs float its low bits: the mean of 100 values near 30, summed in another order on the
  // device, differs by a few ulps of their sum (2.4e-4 each, / 100), and every normalised value inherits that
  // (seen on an H200: 1.2e-5). out and the weight gradient (a sum of 700 rows of it) get room for that, two orders of
  // magnitude under any wrong formula's error.
  ExpectAllNear(Download<float>(out, cpu_out.size()), cpu_out, 1e-4f, 1e-5f, "layernorm out");
  ExpectAllNear(Download<float>(mean, kNormRows), cpu_mean, 1e-5f, 1e-5f, "layernorm mean");
  ExpectAllNear(Download<float>(rstd, kNormRows), cpu_rstd, 1e-5f, 1e-5f, "layernorm rstd");
  ExpectAllNear(Download<float>(in_grad, cpu_in_grad.size()), cpu_in_grad, 1e-5f, 1e-5f, "layernorm in_grad");
  ExpectAllNear(Download<float>(weight_grad, kChannels), cpu_weight_grad, 1e-3f, 1e-5f, "layernorm weight_grad");
  ExpectAllNear(Download<float>(bias_grad, kChannels), cpu_bias_grad, 1e-4f, 1e-5f, "layernorm bias_grad");
}

TEST(GpuKernels, GeluForwardAndBackward) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const std::vector<float> in = RandomNormal(kRows * 4 * kChannels, 2.0f, 20);  // (N, 4C)
  std::vector<float> cpu_grad = RandomNormal(in.size(), 1.0f, 21);             // (N, 4C), scaled in place
  const DeviceMemory grad = Upload(cpu_grad);
  std::vector<float> cpu_out(in.size());
  tb::cpu::GeluForward(cpu_out.data(), in.data(), in.size());
  tb::cpu::GeluBackward(cpu_grad.data(), in.data(), in.size());

  const DeviceMemory d_in = Upload(in);
  const DeviceMemory out(in.size() * sizeof(float));
  tb::gpu::GeluForward(out.as<float>(), d_in.as<float>(), in.size(), nullptr);
  tb::gpu::GeluBackward(grad.as<float>(), d_in.as<float>(), in.size(), nullptr);
  tb::gpu::SynchronizeDevice();

  ExpectAllNear(Download<float>(out, in.size()), cpu_out, 2e-6f, 2e-6f, "gelu out");
  ExpectAllNear(Download<float>(grad, in.size()), cpu_grad, 1e-5f, 2e-6f, "gelu grad");
}

TEST(GpuKernels, ResidualAdd) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const std::vector<float> a = RandomNormal(kRows * kChannels, 1.0f, 30);  // (N, C)
  const std::vector<float> b = RandomNormal(a.size(), 1.0f, 31);          // (N, C)
  std::vector<float> expected(a.size());
  for (size_t i = 0; i < a.size(); ++i) expected[i] = a[i] + b[i];

  const DeviceMemory d_a = Upload(a), d_b = Upload(b);
  const DeviceMemory out(a.size() * sizeof(float));
  tb::gpu::ResidualAdd(out.as<float>(), d_a.as<float>(), d_b.as<float>(), a.size(), nullptr);
  tb::gpu::SynchronizeDevice();
  ExpectAllNear(Download<float>(out, a.size()), expected, 0.0f, 0.0f, "residual out");
}

// The vector path (channels a multiple of 8, 776 = 3·256 + 8: a partial last chunk) over more rows than the grid
// has warps, from a bf16 out_grad: weight and bias gradients overwritten over NaN, then added to (twice the
// reference), the bf16 copy of in_grad the device's own fp32 in_grad rounded, and the same bits on a second run.
TEST(GpuKernels, LayerNormBackwardVectorLoadsOverwriteAccumulateAndBf16Copy) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  constexpr size_t kNormRows = 5000;
  constexpr int kWide = 776;
  const std::vector<float> in = RandomNormal(kNormRows * kWide, 1.0f, 70);
  std::vector<float> weight = RandomNormal(kWide, 0.1f, 71);
  for (float& value : weight) value += 1.0f;
  const std::vector<float> bias = RandomNormal(kWide, 0.1f, 72);
  std::vector<tb::gpu::Bf16> out_grad;
  for (const float value : RandomNormal(in.size(), 1.0f, 73)) out_grad.push_back(tb::gpu::ToBf16(value));
  std::vector<float> out_grad_values;
  for (const tb::gpu::Bf16 value : out_grad) out_grad_values.push_back(tb::gpu::ToFloat(value));
  const std::vector<float> start_in_grad = RandomNormal(in.size(), 1.0f, 74);
  std::vector<float> cpu_in_grad = start_in_grad;
  std::vector<float> cpu_weight_grad(kWide, 0.0f), cpu_bias_grad(kWide, 0.0f);
  std::vector<float> cpu_out(in.size()), cpu_mean(kNormRows), cpu_rstd(kNormRows);
  tb::cpu::LayerNormForward(cpu_out.data(), cpu_mean.data(), cpu_rstd.data(), in.data(), weight.data(), bias.data(),
                            kNormRows, kWide);
  tb::cpu::LayerNormBackward(cpu_in_grad.data(), cpu_weight_grad.data(), cpu_bias_grad.data(),
                             out_grad_values.data(), in.data(), weight.data(), cpu_mean.data(), cpu_rstd.data(),
                             kNormRows, kWide);

  const DeviceMemory d_in = Upload(in), d_weight = Upload(weight), d_out_grad = Upload(out_grad);
  const DeviceMemory mean = Upload(cpu_mean), rstd = Upload(cpu_rstd);
  const DeviceMemory scratch(tb::gpu::LayerNormBackwardScratchFloats(kNormRows, kWide) * sizeof(float));
  const DeviceMemory in_grad_bf16(in.size() * sizeof(tb::gpu::Bf16));
  std::vector<float> first_weight_grad;
  for (int run = 0; run < 2; ++run) {
    const DeviceMemory in_grad = Upload(start_in_grad);
    const DeviceMemory weight_grad = Upload(std::vector<float>(kWide, NAN));
    const DeviceMemory bias_grad = Upload(std::vector<float>(kWide, NAN));
    auto backward = [&](tb::GradientWrite write, tb::gpu::Bf16* bf16) {
      tb::gpu::LayerNormBackward(in_grad.as<float>(), bf16, weight_grad.as<float>(), bias_grad.as<float>(),
                                 d_out_grad.as<tb::gpu::Bf16>(), d_in.as<float>(), d_weight.as<float>(),
                                 mean.as<float>(), rstd.as<float>(), kNormRows, kWide, write, scratch.as<float>(),
                                 nullptr);
    };
    backward(tb::GradientWrite::kOverwrite, in_grad_bf16.as<tb::gpu::Bf16>());
    tb::gpu::SynchronizeDevice();
    const std::vector<float> device_in_grad = Download<float>(in_grad, in.size());
    ExpectAllNear(device_in_grad, cpu_in_grad, 1e-5f, 1e-5f, "layernorm in_grad");
    ExpectAllNear(Download<float>(weight_grad, kWide), cpu_weight_grad, 1e-3f, 1e-5f, "overwritten weight_grad");
    ExpectAllNear(Download<float>(bias_grad, kWide), cpu_bias_grad, 1e-3f, 1e-5f, "overwritten bias_grad");
    const std::vector<tb::gpu::Bf16> copy = Download<tb::gpu::Bf16>(in_grad_bf16, in.size());
    size_t copy_mismatches = 0;
    for (size_t i = 0; i < copy.size(); ++i) copy_mismatches += copy[i].bits != tb::gpu::ToBf16(device_in_grad[i]).bits;
    EXPECT_EQ(copy_mismatches, 0u) << "the bf16 copy is in_grad rounded to nearest even";
    if (run == 0) first_weight_grad = Download<float>(weight_grad, kWide);
    if (run == 1) {
      EXPECT_EQ(Download<float>(weight_grad, kWide), first_weight_grad) << "no atomics: the same bits";
    }

    backward(tb::GradientWrite::kAccumulate, nullptr);
    tb::gpu::SynchronizeDevice();
    std::vector<float> twice_weight(kWide), twice_bias(kWide);
    for (int c = 0; c < kWide; ++c) twice_weight[c] = 2 * cpu_weight_grad[c], twice_bias[c] = 2 * cpu_bias_grad[c];
    ExpectAllNear(Download<float>(weight_grad, kWide), twice_weight, 2e-3f, 1e-5f, "accumulated weight_grad");
    ExpectAllNear(Download<float>(bias_grad, kWide), twice_bias, 2e-3f, 1e-5f, "accumulated bias_grad");
  }
}

// Runs the bf16 and the in-place fp32 cross-entropy over random padded logits (rows, vocab_padded) and compares
// both with the reference (scaled by `scale`); the loss stays unscaled.
void CheckCrossEntropy(size_t rows, int vocab, int vocab_padded, float scale) {
  const std::string what = "cross-entropy (" + std::to_string(rows) + " x " + std::to_string(vocab_padded) +
                           ", scale " + std::to_string(scale) + ")";
  // Padded rows (N, Vp) on the device; the reference sees only the V real columns, (N, V).
  std::vector<float> padded = RandomNormal(rows * vocab_padded, 2.0f, 40);
  const std::vector<int32_t> targets = RandomTokens(rows, vocab, 41);
  std::vector<float> cpu_grad(rows * vocab);  // (N, V)
  for (size_t r = 0; r < rows; ++r) {
    std::copy_n(padded.begin() + r * vocab_padded, vocab, cpu_grad.begin() + r * vocab);
  }
  const float cpu_loss = tb::cpu::CrossEntropyForward(cpu_grad.data(), targets.data(), rows, vocab);
  tb::cpu::CrossEntropyBackward(cpu_grad.data(), targets.data(), rows, vocab);
  std::vector<float> expected_grad(padded.size(), 0.0f);  // (N, Vp): zero in the padding columns
  for (size_t r = 0; r < rows; ++r) {
    for (int j = 0; j < vocab; ++j) expected_grad[r * vocab_padded + j] = scale * cpu_grad[r * vocab + j];
  }

  const DeviceMemory logits = Upload(padded), d_targets = Upload(targets);
  const DeviceMemory row_losses(rows * sizeof(float)), loss(sizeof(float)), bf16_loss(sizeof(float));
  const DeviceMemory bf16_grad(padded.size() * sizeof(tb::gpu::Bf16));
  // The model's way first (bf16 gradient, logits kept), then the fp32 one over the logits themselves.
  tb::gpu::CrossEntropyForwardBackward(bf16_grad.as<tb::gpu::Bf16>(), row_losses.as<float>(), bf16_loss.as<float>(),
                                       logits.as<float>(), d_targets.as<int32_t>(), rows, vocab, vocab_padded, scale,
                                       nullptr);
  tb::gpu::CrossEntropyForwardBackward(logits.as<float>(), row_losses.as<float>(), loss.as<float>(),
                                       logits.as<float>(), d_targets.as<int32_t>(), rows, vocab, vocab_padded, scale,
                                       nullptr);
  tb::gpu::SynchronizeDevice();

  EXPECT_NEAR(Download<float>(loss, 1)[0], cpu_loss, 1e-5f * std::fabs(cpu_loss)) << what;
  EXPECT_EQ(Download<float>(bf16_loss, 1)[0], Download<float>(loss, 1)[0]) << what;  // the same pass, same logits
  // Gradients are scale · probabilities / N: compare on that scale; bf16 adds one rounding (2^-8 relative).
  const float abs_tol = 1e-5f * scale / static_cast<float>(rows);
  ExpectAllNear(Download<float>(logits, padded.size()), expected_grad, abs_tol, 1e-5f, what + " grad");
  std::vector<float> from_bf16;
  for (const tb::gpu::Bf16 value : Download<tb::gpu::Bf16>(bf16_grad, padded.size())) {
    from_bf16.push_back(tb::gpu::ToFloat(value));
  }
  ExpectAllNear(from_bf16, expected_grad, abs_tol, 1.0f / 256, what + " bf16 grad");
}

TEST(GpuKernels, CrossEntropyForwardBackward) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  ASSERT_TRUE(tb::gpu::CrossEntropyReadsLogitsOnce(kVocabPadded));  // the row in shared memory
  CheckCrossEntropy(kRows, kVocab, kVocabPadded, 1.0f);
  CheckCrossEntropy(kRows, kVocab, kVocabPadded, 0.25f);  // 1/M for M = 4 micro-batches
  // Vp not a multiple of 4: scalar loads.
  CheckCrossEntropy(kRows, kVocab, kVocab + 2, 1.0f);
}

// A row longer than shared memory takes the two-read kernel (2^18 floats: 1 MiB, more than any GPU's block gets).
TEST(GpuKernels, CrossEntropyOverRowsLongerThanSharedMemory) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  constexpr int kLongPadded = 1 << 18;
  ASSERT_FALSE(tb::gpu::CrossEntropyReadsLogitsOnce(kLongPadded));
  CheckCrossEntropy(4, kLongPadded - 100, kLongPadded, 0.5f);
}

// Column sums (the bias gradients) over more rows than one chunk (256) and columns that are not a multiple of 32,
// against a sum in double; bf16 inputs are exact in fp32, so only the summation order differs. Added to the output,
// then written over it (NaN before).
TEST(GpuKernels, ColumnSumAddsIntoOrOverwritesItsOutput) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  constexpr size_t kSumRows = 1000;
  constexpr int kCols = 100;
  std::vector<tb::gpu::Bf16> in;
  for (const float value : RandomNormal(kSumRows * kCols, 1.0f, 60)) in.push_back(tb::gpu::ToBf16(value));
  const std::vector<float> initial = RandomNormal(kCols, 1.0f, 61);  // accumulated into
  std::vector<float> expected(kCols), expected_sums(kCols);
  for (int c = 0; c < kCols; ++c) {
    double sum = 0.0;
    for (size_t r = 0; r < kSumRows; ++r) sum += tb::gpu::ToFloat(in[r * kCols + c]);
    expected_sums[c] = static_cast<float>(sum);
    expected[c] = static_cast<float>(sum + initial[c]);
  }
  const DeviceMemory d_in = Upload(in), out = Upload(initial);
  const DeviceMemory scratch(tb::gpu::ColumnSumScratchFloats(kSumRows, kCols) * sizeof(float));
  auto column_sum = [&](const DeviceMemory& target, tb::GradientWrite write) {
    tb::gpu::ColumnSum(target.as<float>(), d_in.as<tb::gpu::Bf16>(), kSumRows, kCols, write, scratch.as<float>(),
                       nullptr);
  };
  column_sum(out, tb::GradientWrite::kAccumulate);
  const std::vector<float> first = Download<float>(out, kCols);
  ExpectAllNear(first, expected, 1e-4f, 1e-5f, "column sums");
  // Again from the same start: no atomics, so the same bits.
  const DeviceMemory again = Upload(initial);
  column_sum(again, tb::GradientWrite::kAccumulate);
  EXPECT_EQ(Download<float>(again, kCols), first);
  const DeviceMemory overwritten = Upload(std::vector<float>(kCols, NAN));
  column_sum(overwritten, tb::GradientWrite::kOverwrite);
  ExpectAllNear(Download<float>(overwritten, kCols), expected_sums, 1e-4f, 1e-5f, "overwritten column sums");
}

// One launch over a model-like set of ranges (AdamWPlan) against the reference range by range: decay per range, a
// zero1-like moment offset, heads that are not 16-byte aligned, a range ending mid-block, and elements between the
// ranges (wte's padding rows) that must stay exactly as they were. Also the bf16 copy, bit for bit.
void CheckAdamWPlan(const std::vector<tb::AdamWRange>& ranges, size_t elements, size_t moment_offset) {
  const std::string what = "adamw (moment offset " + std::to_string(moment_offset) + ")";
  std::vector<float> cpu_params = RandomNormal(elements, 0.02f, 50);
  const size_t moments = elements - moment_offset;
  std::vector<float> cpu_m(moments, 0.0f), cpu_v(moments, 0.0f);
  const DeviceMemory params = Upload(cpu_params), m = Upload(cpu_m), v = Upload(cpu_v);
  const std::vector<tb::gpu::Bf16> untouched_bf16(elements, tb::gpu::Bf16{0x7fc1});  // a NaN AdamW never writes
  const DeviceMemory params_bf16 = Upload(untouched_bf16);
  const tb::gpu::AdamWPlan plan(ranges, moment_offset);
  const tb::AdamWConfig config;
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> grads = RandomNormal(elements, 1.0f, 50 + static_cast<uint32_t>(step));
    for (const tb::AdamWRange& range : ranges) {
      const size_t moment = range.offset - moment_offset;
      tb::cpu::AdamWUpdate(cpu_params.data() + range.offset, grads.data() + range.offset, cpu_m.data() + moment,
                           cpu_v.data() + moment, range.count, config, range.decay ? config.weight_decay : 0.0f,
                           step);
    }
    const DeviceMemory d_grads = Upload(grads);
    tb::gpu::AdamWUpdate(params.as<float>(), d_grads.as<float>(), m.as<float>(), v.as<float>(), plan, config, step,
                         nullptr, params_bf16.as<tb::gpu::Bf16>());
    tb::gpu::SynchronizeDevice();
  }
  const std::vector<float> device_params = Download<float>(params, elements);
  ExpectAllNear(device_params, cpu_params, 1e-7f, 1e-6f, what + " params");
  ExpectAllNear(Download<float>(m, moments), cpu_m, 1e-7f, 1e-6f, what + " m");
  ExpectAllNear(Download<float>(v, moments), cpu_v, 1e-7f, 1e-6f, what + " v");
  std::vector<bool> updated(elements, false);
  for (const tb::AdamWRange& range : ranges) std::fill_n(updated.begin() + range.offset, range.count, true);
  const std::vector<tb::gpu::Bf16> bf16 = Download<tb::gpu::Bf16>(params_bf16, elements);
  size_t wrong = 0;
  for (size_t i = 0; i < elements; ++i) {
    const uint16_t expected = updated[i] ? tb::gpu::ToBf16(device_params[i]).bits : untouched_bf16[i].bits;
    wrong += bf16[i].bits != expected;
    if (!updated[i]) wrong += device_params[i] != cpu_params[i];  // the reference leaves them as drawn
  }
  EXPECT_EQ(wrong, 0u) << what << ": bf16 copy (and untouched elements)";
}

TEST(GpuKernels, AdamWUpdateOverRangesInOneLaunch) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  constexpr size_t kElements = 100003;  // not a multiple of the block size
  // Whole buffer in one range.
  CheckAdamWPlan({{0, kElements, true}}, kElements, 0);
  // Ranges like a model's: embeddings with a gap (padding rows), biases without decay, odd boundaries.
  const std::vector<tb::AdamWRange> ranges = {{0, 40000, true}, {40960, 3001, true}, {43961, 7, false},
                                              {43968, 50000, true}, {93970, 6033, false}};
  CheckAdamWPlan(ranges, kElements, 0);
  // zero1: the moments start at the shard's begin (6: no range and its moment agree modulo 4 → scalar loads).
  const std::vector<tb::AdamWRange> shard = {{6, 39994, true}, {40960, 3001, true}, {43961, 7, false}};
  CheckAdamWPlan(shard, kElements, 6);
}

}  // namespace
