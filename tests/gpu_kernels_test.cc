// The CUDA implementation's non-GEMM kernels (models/cuda/kernels.h) against the CPU reference
// (models/cpu_kernels.h) on random inputs, and the shared per-element math (models/element_math.h) against the
// reference's own inline functions. The GPU tests skip, saying why, when no GPU is usable (and in a build
// without CUDA); the element-math test runs everywhere.
//
// Tolerances, as |gpu - cpu| <= abs + rel·|cpu|:
// - exact copies and single adds (encoder forward, residual add): 0.
// - atomics in a varying order (encoder backward): 1e-5 absolute on unit-scale sums of a few terms.
// - GELU: 2e-6 + 2e-6·|cpu|: the device's tanhf (2 ulp) against the reference's TanhViaExp (~1e-7 absolute),
//   scaled by x. Its gradient: 1e-5 + 2e-6·|cpu| for inputs of stddev 2 (|x| < ~8): near tanh's saturation
//   both lose ~1 ulp of t in 1 - t², multiplied by 0.5·x·du/dx (up to ~30 there).
// - LayerNorm, cross-entropy and column sums: 1e-5 relative + 1e-5 absolute (or 1e-4 for sums over all rows:
//   weight/bias gradients, column sums): block partial sums and warp-shuffle reductions add in a different order
//   than the reference's loop, and expf differs from cpu::Exp by a few ulp; the online softmax rescales its
//   running sum, a few ulp more. bf16 outputs add one rounding, 2^-8 relative.
// - AdamW: 1e-6 relative + 1e-7 absolute after three steps: the same formula, rounded the same, except that
//   the device may contract a multiply-add into an FMA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cpu_kernels.h"
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
                           d_tokens.as<int32_t>(), kBatch, kSeq, kChannels, nullptr);
  tb::gpu::SynchronizeDevice();

  ExpectAllNear(Download<float>(out, cpu_out.size()), cpu_out, 0.0f, 0.0f, "encoder out");
  ExpectAllNear(Download<float>(wte_grad, cpu_wte_grad.size()), cpu_wte_grad, 1e-5f, 0.0f, "wte_grad");
  ExpectAllNear(Download<float>(wpe_grad, cpu_wpe_grad.size()), cpu_wpe_grad, 1e-5f, 0.0f, "wpe_grad");
}

TEST(GpuKernels, LayerNormForwardAndBackward) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  // More rows than one block of the backward takes (64), the last block partial: the per-block partial sums of the
  // weight and bias gradients and their second pass both run.
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
  tb::gpu::LayerNormBackward(in_grad.as<float>(), weight_grad.as<float>(), bias_grad.as<float>(),
                             d_out_grad.as<float>(), d_in.as<float>(), d_weight.as<float>(), mean.as<float>(),
                             rstd.as<float>(), kNormRows, kChannels, scratch.as<float>(), nullptr);
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

TEST(GpuKernels, CrossEntropyForwardBackward) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  // Padded rows (N, Vp) on the device; the reference sees only the V real columns, (N, V).
  std::vector<float> padded = RandomNormal(kRows * kVocabPadded, 2.0f, 40);
  const std::vector<int32_t> targets = RandomTokens(kRows, kVocab, 41);
  std::vector<float> cpu_grad(kRows * kVocab);  // (N, V)
  for (size_t r = 0; r < kRows; ++r) {
    std::copy_n(padded.begin() + r * kVocabPadded, kVocab, cpu_grad.begin() + r * kVocab);
  }
  const float cpu_loss = tb::cpu::CrossEntropyForward(cpu_grad.data(), targets.data(), kRows, kVocab);
  tb::cpu::CrossEntropyBackward(cpu_grad.data(), targets.data(), kRows, kVocab);
  std::vector<float> expected_grad(padded.size(), 0.0f);  // (N, Vp): zero in the padding columns
  for (size_t r = 0; r < kRows; ++r) {
    std::copy_n(cpu_grad.begin() + r * kVocab, kVocab, expected_grad.begin() + r * kVocabPadded);
  }

  const DeviceMemory logits = Upload(padded), d_targets = Upload(targets);
  const DeviceMemory row_losses(kRows * sizeof(float)), loss(sizeof(float)), bf16_loss(sizeof(float));
  const DeviceMemory bf16_grad(padded.size() * sizeof(tb::gpu::Bf16));
  // The model's way first (bf16 gradient, logits kept), then the fp32 one over the logits themselves.
  tb::gpu::CrossEntropyForwardBackward(bf16_grad.as<tb::gpu::Bf16>(), row_losses.as<float>(), bf16_loss.as<float>(),
                                       logits.as<float>(), d_targets.as<int32_t>(), kRows, kVocab, kVocabPadded,
                                       nullptr);
  tb::gpu::CrossEntropyForwardBackward(logits.as<float>(), row_losses.as<float>(), loss.as<float>(),
                                       logits.as<float>(), d_targets.as<int32_t>(), kRows, kVocab, kVocabPadded,
                                       nullptr);
  tb::gpu::SynchronizeDevice();

  EXPECT_NEAR(Download<float>(loss, 1)[0], cpu_loss, 1e-5f * std::fabs(cpu_loss));
  EXPECT_EQ(Download<float>(bf16_loss, 1)[0], Download<float>(loss, 1)[0]);  // the same pass over the same logits
  // Gradients are probabilities / N: compare on that scale; bf16 adds one rounding (2^-8 relative).
  ExpectAllNear(Download<float>(logits, padded.size()), expected_grad, 1e-5f / kRows, 1e-5f, "cross-entropy grad");
  std::vector<float> from_bf16;
  for (const tb::gpu::Bf16 value : Download<tb::gpu::Bf16>(bf16_grad, padded.size())) {
    from_bf16.push_back(tb::gpu::ToFloat(value));
  }
  ExpectAllNear(from_bf16, expected_grad, 1e-5f / kRows, 1.0f / 256, "cross-entropy bf16 grad");
}

// Column sums (the bias gradients) over more rows than one chunk (256) and columns that are not a multiple of 32,
// against a sum in double; bf16 inputs are exact in fp32, so only the summation order differs.
TEST(GpuKernels, ColumnSumAddsIntoItsOutput) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  constexpr size_t kSumRows = 1000;
  constexpr int kCols = 100;
  std::vector<tb::gpu::Bf16> in;
  for (const float value : RandomNormal(kSumRows * kCols, 1.0f, 60)) in.push_back(tb::gpu::ToBf16(value));
  const std::vector<float> initial = RandomNormal(kCols, 1.0f, 61);  // accumulated into
  std::vector<float> expected(kCols);
  for (int c = 0; c < kCols; ++c) {
    double sum = initial[c];
    for (size_t r = 0; r < kSumRows; ++r) sum += tb::gpu::ToFloat(in[r * kCols + c]);
    expected[c] = static_cast<float>(sum);
  }
  const DeviceMemory d_in = Upload(in), out = Upload(initial);
  const DeviceMemory scratch(tb::gpu::ColumnSumScratchFloats(kSumRows, kCols) * sizeof(float));
  tb::gpu::ColumnSum(out.as<float>(), d_in.as<tb::gpu::Bf16>(), kSumRows, kCols, scratch.as<float>(), nullptr);
  const std::vector<float> first = Download<float>(out, kCols);
  ExpectAllNear(first, expected, 1e-4f, 1e-5f, "column sums");
  // Again from the same start: no atomics, so the same bits.
  const DeviceMemory again = Upload(initial);
  tb::gpu::ColumnSum(again.as<float>(), d_in.as<tb::gpu::Bf16>(), kSumRows, kCols, scratch.as<float>(), nullptr);
  EXPECT_EQ(Download<float>(again, kCols), first);
}

TEST(GpuKernels, AdamWUpdate) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  constexpr size_t kCount = 100003;  // not a multiple of the block size
  std::vector<float> cpu_params = RandomNormal(kCount, 0.02f, 50);
  std::vector<float> cpu_m(kCount, 0.0f), cpu_v(kCount, 0.0f);
  const DeviceMemory params = Upload(cpu_params), m = Upload(cpu_m), v = Upload(cpu_v);
  const tb::AdamWConfig config;
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> grads = RandomNormal(kCount, 1.0f, 50 + static_cast<uint32_t>(step));
    tb::cpu::AdamWUpdate(cpu_params.data(), grads.data(), cpu_m.data(), cpu_v.data(), kCount, config,
                         config.weight_decay, step);
    const DeviceMemory d_grads = Upload(grads);
    tb::gpu::AdamWUpdate(params.as<float>(), d_grads.as<float>(), m.as<float>(), v.as<float>(), kCount, config,
                         config.weight_decay, step, nullptr);
    tb::gpu::SynchronizeDevice();
  }
  ExpectAllNear(Download<float>(params, kCount), cpu_params, 1e-7f, 1e-6f, "adamw params");
  ExpectAllNear(Download<float>(m, kCount), cpu_m, 1e-7f, 1e-6f, "adamw m");
  ExpectAllNear(Download<float>(v, kCount), cpu_v, 1e-7f, 1e-6f, "adamw v");
}

}  // namespace
