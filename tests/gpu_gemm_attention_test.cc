// The CUDA transformer's GEMMs (models/cuda/gemm.h, cuBLASLt) and attention (models/cuda/attention.h, cuBLAS and
// cuDNN) against the CPU reference (models/cpu_kernels.h) on random inputs rounded to bf16 first, so that both sides
// multiply the same numbers. Every GPU test skips, saying why, when no GPU is usable; in a build without CUDA the
// stubs are checked instead.
//
// Tolerances, as |gpu - cpu| <= abs + rel·|cpu|, from where the two sides differ:
// - Products of bf16 values are exact in fp32, so a GEMM differs from the reference only by the order of its fp32
//   additions (K terms of unit-scale values: ~sqrt(K)·2^-24·sqrt(K) ≈ 2e-4 at K = 3072, and the tensor cores'
//   accumulation may truncate rather than round: allow 1e-3 absolute) and, for bf16 outputs, by the final rounding
//   to bf16, at most half an ulp = 2^-8 relative (8 significant bits). bf16 outputs: 2e-3 + 2^-8·|cpu|; fp32
//   outputs: 1e-3 + 1e-4·|cpu|.
// - The GELU epilogues compute tanh on the device, possibly with the hardware's tanh.approx (relative error
//   2^-10.99), so GELU and its gradient may differ by 0.5·|x|·2^-11·(...) more than the exact tanh: 4e-3 +
//   2^-7·|cpu|.
// - Attention rounds the probabilities P (and in backward dS) to bf16 before the second GEMMs, as flash attention
//   does, so each term of Σⱼ Pⱼ·Vⱼ carries up to 2^-8 relative error; cuDNN also takes rowsum(dO ⊙ O) from the
//   bf16 output. The error is a fraction of a percent of the tensor's scale, not of each element (a sum of terms
//   of both signs may be near 0). So: element-wise 2^-7·|cpu| + 2^-4·rms(cpu), and overall
//   ‖gpu - cpu‖ / ‖cpu‖ <= 2^-6 (observed bf16 error is ~0.3%; a wrong stride, head or transpose gives ~100%).
//   lse is fp32 throughout: 5e-4 absolute on values of ~5.
// Shapes: small ones with sizes that are not multiples of 8 where the API allows them (rows and sequence lengths
// always; features and head sizes where no epilogue or cuDNN needs a multiple of 8), and the transformer's real
// ones: C = 768 with 12 heads (gpt2-124m) and C = 1600 with 25 heads (gpt2-1.5b), head size 64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "cuda/attention.h"
#include "cuda/autotune.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "device.h"
#include "error.h"
#include "model_config.h"
#include "transformer.h"

namespace {

using tb::test::ExpectAllNear;
using tb::test::NoGpuMessage;
using tb::test::Bf16Values;
using tb::test::RandomBf16;
using tb::test::RandomNormal;

using tb::gpu::Bf16;
using tb::gpu::DeviceMemory;
using tb::gpu::Download;
using tb::gpu::Upload;



std::vector<float> DownloadBf16(const DeviceMemory& device, size_t count) {
  const std::vector<Bf16> bits = Download<Bf16>(device, count);
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = tb::gpu::ToFloat(bits[i]);
  return values;
}


double Rms(const std::vector<float>& values) {
  double sum = 0.0;
  for (float value : values) sum += static_cast<double>(value) * value;
  return std::sqrt(sum / static_cast<double>(values.size()));
}

// The attention tolerance of the comment at the top: element-wise against the tensor's scale, and overall.
void ExpectAttentionNear(const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what,
                         double scale = 1.0) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  const double rms = Rms(expected);
  if (rms == 0.0) {  // T = 1: a query with one key has zero dQ and dK, exactly, on both sides
    ExpectAllNear(actual, expected, 0.0f, 0.0f, what);
    return;
  }
  ExpectAllNear(actual, expected, static_cast<float>(scale * rms / 16), static_cast<float>(scale / 128), what);
  double error = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double difference = static_cast<double>(actual[i]) - expected[i];
    error += difference * difference;
  }
  const double relative_error = std::sqrt(error / static_cast<double>(actual.size())) / rms;
  EXPECT_LE(relative_error, scale / 64) << what << ": relative RMS error " << relative_error;
}

template <typename Call>
void ExpectRuntimeErrorContaining(const std::string& text, Call call) {
  try {
    call();
    ADD_FAILURE() << "no RuntimeError; expected one saying '" << text << "'";
  } catch (const tb::RuntimeError& error) {
    EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
  }
}

// --- Gemm ------------------------------------------------------------------------------------------------------

struct LinearShape {
  size_t rows;
  int in_features;
  int out_features;
};

std::string Describe(const LinearShape& shape) {
  return "rows " + std::to_string(shape.rows) + ", " + std::to_string(shape.in_features) + " -> " +
         std::to_string(shape.out_features);
}

// Non-multiples of 8 everywhere (features even), and the transformer's qkv layer at both real widths.
const std::vector<LinearShape> kPlainShapes = {{37, 100, 60}, {5, 6, 2}, {128, 768, 2304}, {64, 1600, 4800}};
// The GELU epilogues need the GELU side's features to be a multiple of 8: the MLP's fc layer.
const std::vector<LinearShape> kGeluShapes = {{37, 100, 200}, {128, 768, 3072}, {64, 1600, 6400}};

// Inputs of one linear layer, host and device; weights scaled so that outputs are of unit scale.
struct LinearInputs {
  Bf16Values in;      // (N, IC)
  Bf16Values weight;  // (OC, IC)
  Bf16Values bias;    // (OC)
  DeviceMemory d_in, d_weight, d_bias;

  explicit LinearInputs(const LinearShape& shape, uint32_t seed)
      : in(RandomBf16(shape.rows * shape.in_features, 1.0f, seed)),
        weight(RandomBf16(static_cast<size_t>(shape.out_features) * shape.in_features,
                          1.0f / std::sqrt(static_cast<float>(shape.in_features)), seed + 1)),
        bias(RandomBf16(shape.out_features, 0.5f, seed + 2)),
        d_in(Upload(in.bits)),
        d_weight(Upload(weight.bits)),
        d_bias(Upload(bias.bits)) {}
};

TEST(GpuGemm, LinearForwardWithAndWithoutBias) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  tb::gpu::Gemm gemm(nullptr);
  for (const LinearShape& shape : kPlainShapes) {
    const LinearInputs inputs(shape, 10);
    for (const bool with_bias : {false, true}) {
      const std::string what = Describe(shape) + (with_bias ? ", bias" : ", no bias");
      const size_t out_count = shape.rows * shape.out_features;
      std::vector<float> expected(out_count);
      tb::cpu::MatmulForward(expected.data(), inputs.in.values.data(), inputs.weight.values.data(),
                             with_bias ? inputs.bias.values.data() : nullptr, nullptr, shape.rows, shape.in_features,
                             shape.out_features);
      const DeviceMemory out(out_count * sizeof(Bf16));
      gemm.LinearForward(out.as<Bf16>(), nullptr, inputs.d_in.as<Bf16>(), inputs.d_weight.as<Bf16>(),
                         with_bias ? inputs.d_bias.as<Bf16>() : nullptr, shape.rows, shape.in_features,
                         shape.out_features);
      tb::gpu::SynchronizeDevice();
      ExpectAllNear(DownloadBf16(out, out_count), expected, 2e-3f, 1.0f / 256, what);
    }
  }
}

TEST(GpuGemm, LinearForwardGeluKeepsPreActivation) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  tb::gpu::Gemm gemm(nullptr);
  for (const LinearShape& shape : kGeluShapes) {
    const LinearInputs inputs(shape, 20);
    for (const bool with_bias : {false, true}) {
      const std::string what = Describe(shape) + (with_bias ? ", bias" : ", no bias");
      const size_t out_count = shape.rows * shape.out_features;
      std::vector<float> expected_pre(out_count);
      tb::cpu::MatmulForward(expected_pre.data(), inputs.in.values.data(), inputs.weight.values.data(),
                             with_bias ? inputs.bias.values.data() : nullptr, nullptr, shape.rows, shape.in_features,
                             shape.out_features);
      std::vector<float> expected_out(out_count);
      tb::cpu::GeluForward(expected_out.data(), expected_pre.data(), out_count);
      const DeviceMemory out(out_count * sizeof(Bf16));
      const DeviceMemory pre(out_count * sizeof(Bf16));
      gemm.LinearForward(out.as<Bf16>(), pre.as<Bf16>(), inputs.d_in.as<Bf16>(), inputs.d_weight.as<Bf16>(),
                         with_bias ? inputs.d_bias.as<Bf16>() : nullptr, shape.rows, shape.in_features,
                         shape.out_features);
      tb::gpu::SynchronizeDevice();
      // As for out: with the bias the epilogue rounds the product to bf16 before adding the bias (seen on an H200:
      // -1 for -1.0074, a whole ulp of 2^-7 off; -0.1133 for -0.1167, where a product near 1 nearly cancelled its
      // bias), so the error is up to half an ulp of the product (2e-3 near 1) and half of the result's.
      ExpectAllNear(DownloadBf16(pre, out_count), expected_pre, 4e-3f, 1.0f / 128, what + ": pre_gelu");
      ExpectAllNear(DownloadBf16(out, out_count), expected_out, 4e-3f, 1.0f / 128, what + ": out");
    }
  }
}

TEST(GpuGemm, LinearForwardFloatResidualBiasAndInPlace) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  tb::gpu::Gemm gemm(nullptr);
  // The projections into the residual stream, and the LM head's logits (no residual, no bias; Vp = 50304 rows of
  // wte would make the CPU side slow, 1024 columns exercise the same path).
  const std::vector<LinearShape> shapes = {{37, 100, 60}, {128, 768, 768}, {64, 6400, 1600}, {64, 768, 1024}};
  for (const LinearShape& shape : shapes) {
    const LinearInputs inputs(shape, 30);
    const size_t out_count = shape.rows * shape.out_features;
    const std::vector<float> residual = RandomNormal(out_count, 1.0f, 33);
    const std::vector<float> bias = RandomNormal(shape.out_features, 0.5f, 34);
    const DeviceMemory d_bias = Upload(bias);
    for (const bool with_residual : {false, true}) {
      for (const bool with_bias : {false, true}) {
        for (const bool in_place : {false, true}) {
          if (in_place && !with_residual) continue;
          const std::string what = Describe(shape) + (with_residual ? ", residual" : "") + (with_bias ? ", bias" : "") +
                                   (in_place ? ", in place" : "");
          std::vector<float> expected(out_count);
          tb::cpu::MatmulForward(expected.data(), inputs.in.values.data(), inputs.weight.values.data(),
                                 with_bias ? bias.data() : nullptr, with_residual ? residual.data() : nullptr,
                                 shape.rows, shape.in_features, shape.out_features);
          const DeviceMemory d_residual = Upload(residual);
          const DeviceMemory separate_out(out_count * sizeof(float));
          float* out = in_place ? d_residual.as<float>() : separate_out.as<float>();
          gemm.LinearForwardFloat(out, with_residual ? d_residual.as<float>() : nullptr, inputs.d_in.as<Bf16>(),
                                  inputs.d_weight.as<Bf16>(), with_bias ? d_bias.as<float>() : nullptr, shape.rows,
                                  shape.in_features, shape.out_features);
          tb::gpu::SynchronizeDevice();
          ExpectAllNear(Download<float>(in_place ? d_residual : separate_out, out_count), expected, 1e-3f, 1e-4f,
                        what);
        }
      }
    }
  }
}

TEST(GpuGemm, LinearBackwardInputWithAndWithoutGeluGradient) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  tb::gpu::Gemm gemm(nullptr);
  // With GELU: the MLP projection's input gradient, IC = 4C (a multiple of 8, as the epilogue needs).
  const std::vector<LinearShape> shapes = {{37, 200, 60}, {5, 8, 2}, {128, 3072, 768}, {64, 6400, 1600}};
  for (const LinearShape& shape : shapes) {
    const LinearInputs inputs(shape, 40);
    const size_t in_count = shape.rows * shape.in_features;
    const size_t out_count = shape.rows * shape.out_features;
    const Bf16Values out_grad = RandomBf16(out_count, 1.0f, 43);
    const Bf16Values gelu_pre = RandomBf16(in_count, 1.5f, 44);
    const DeviceMemory d_out_grad = Upload(out_grad.bits);
    const DeviceMemory d_gelu_pre = Upload(gelu_pre.bits);
    std::vector<float> expected(in_count);
    std::vector<float> unused_weight_grad(static_cast<size_t>(shape.out_features) * shape.in_features);
    tb::cpu::MatmulBackward(expected.data(), unused_weight_grad.data(), nullptr, out_grad.values.data(),
                            inputs.in.values.data(), inputs.weight.values.data(), shape.rows, shape.in_features,
                            shape.out_features);
    const DeviceMemory in_grad(in_count * sizeof(Bf16));
    gemm.LinearBackwardInput(in_grad.as<Bf16>(), d_out_grad.as<Bf16>(), inputs.d_weight.as<Bf16>(), nullptr,
                             shape.rows, shape.in_features, shape.out_features);
    tb::gpu::SynchronizeDevice();
    ExpectAllNear(DownloadBf16(in_grad, in_count), expected, 2e-3f, 1.0f / 256, Describe(shape) + ", no GELU");

    tb::cpu::GeluBackward(expected.data(), gelu_pre.values.data(), in_count);
    gemm.LinearBackwardInput(in_grad.as<Bf16>(), d_out_grad.as<Bf16>(), inputs.d_weight.as<Bf16>(),
                             d_gelu_pre.as<Bf16>(), shape.rows, shape.in_features, shape.out_features);
    tb::gpu::SynchronizeDevice();
    ExpectAllNear(DownloadBf16(in_grad, in_count), expected, 4e-3f, 1.0f / 128, Describe(shape) + ", GELU");

    // The GELU layer's bias gradient from the DGELU_BGRAD epilogue (when cuBLASLt has it): the column sums of the
    // fp32 in_grad, before its rounding to bf16; 1e-3 of the sum's scale (sqrt(rows)·|x|) for the summation order.
    std::vector<float> expected_bias(shape.in_features, 0.0f);
    for (size_t r = 0; r < shape.rows; ++r) {
      for (int c = 0; c < shape.in_features; ++c) expected_bias[c] += expected[r * shape.in_features + c];
    }
    const DeviceMemory bias_grad = Upload(std::vector<float>(shape.in_features, NAN));  // overwritten
    if (gemm.LinearBackwardInput(in_grad.as<Bf16>(), d_out_grad.as<Bf16>(), inputs.d_weight.as<Bf16>(),
                                 d_gelu_pre.as<Bf16>(), shape.rows, shape.in_features, shape.out_features,
                                 bias_grad.as<float>())) {
      tb::gpu::SynchronizeDevice();
      ExpectAllNear(DownloadBf16(in_grad, in_count), expected, 4e-3f, 1.0f / 128, Describe(shape) + ", DGELU_BGRAD");
      const float scale = 1e-3f * std::sqrt(static_cast<float>(shape.rows));
      ExpectAllNear(Download<float>(bias_grad, shape.in_features), expected_bias, scale, 1e-3f,
                    Describe(shape) + ", DGELU_BGRAD's bias gradient");
    } else {
      std::printf("note: cuBLASLt has no DGELU_BGRAD algorithm for %s; the model sums that bias with ColumnSum\n",
                  Describe(shape).c_str());
    }
  }
}

TEST(GpuGemm, LinearBackwardWeightsAccumulates) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  tb::gpu::Gemm gemm(nullptr);
  for (const LinearShape& shape : kPlainShapes) {
    const LinearInputs inputs(shape, 50);
    const size_t weight_count = static_cast<size_t>(shape.out_features) * shape.in_features;
    const Bf16Values out_grad = RandomBf16(shape.rows * shape.out_features, 1.0f, 53);
    const DeviceMemory d_out_grad = Upload(out_grad.bits);
    for (const bool with_bias : {false, true}) {
      const std::string what = Describe(shape) + (with_bias ? ", bias" : ", no bias");
      // Gradients start non-zero: backward adds to them.
      std::vector<float> weight_grad = RandomNormal(weight_count, 1.0f, 54);
      std::vector<float> bias_grad = RandomNormal(shape.out_features, 1.0f, 55);
      const DeviceMemory d_weight_grad = Upload(weight_grad);
      const DeviceMemory d_bias_grad = Upload(bias_grad);
      std::vector<float> unused_in_grad(shape.rows * shape.in_features);
      tb::cpu::MatmulBackward(unused_in_grad.data(), weight_grad.data(), with_bias ? bias_grad.data() : nullptr,
                              out_grad.values.data(), inputs.in.values.data(), inputs.weight.values.data(),
                              shape.rows, shape.in_features, shape.out_features);
      gemm.LinearBackwardWeights(d_weight_grad.as<float>(), with_bias ? d_bias_grad.as<float>() : nullptr,
                                 d_out_grad.as<Bf16>(), inputs.d_in.as<Bf16>(), shape.rows, shape.in_features,
                                 shape.out_features, tb::GradientWrite::kAccumulate);
      tb::gpu::SynchronizeDevice();
      ExpectAllNear(Download<float>(d_weight_grad, weight_count), weight_grad, 1e-3f, 1e-4f, what + ": weight");
      // Without a bias, the bias gradient is untouched (still its starting values).
      ExpectAllNear(Download<float>(d_bias_grad, bias_grad.size()), bias_grad, 1e-3f, 1e-4f, what + ": bias");
    }
  }
}

// kOverwrite over gradients that hold NaN (what an FSDP working buffer may hold): beta 0 must not read them. The bias
// gradient from the BGRADB epilogue where cuBLASLt has it, and from ColumnSum with epilogues turned off: both against
// the reference from zero, and against each other.
TEST(GpuGemm, LinearBackwardWeightsOverwritesWithAndWithoutBgradb) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  tb::gpu::Gemm gemm(nullptr);
  for (const LinearShape& shape : kPlainShapes) {
    const LinearInputs inputs(shape, 60);
    const size_t weight_count = static_cast<size_t>(shape.out_features) * shape.in_features;
    const Bf16Values out_grad = RandomBf16(shape.rows * shape.out_features, 1.0f, 63);
    const DeviceMemory d_out_grad = Upload(out_grad.bits);
    std::vector<float> weight_grad(weight_count, 0.0f), bias_grad(shape.out_features, 0.0f);
    std::vector<float> unused_in_grad(shape.rows * shape.in_features);
    tb::cpu::MatmulBackward(unused_in_grad.data(), weight_grad.data(), bias_grad.data(), out_grad.values.data(),
                            inputs.in.values.data(), inputs.weight.values.data(), shape.rows, shape.in_features,
                            shape.out_features);
    std::vector<float> bias_by[2];
    for (const bool fused : {false, true}) {
      const std::string what = Describe(shape) + (fused ? ", BGRADB allowed" : ", ColumnSum");
      gemm.set_fused_bias_gradients(fused);
      const size_t fused_before = gemm.fused_bias_gradients();
      const DeviceMemory d_weight_grad = Upload(std::vector<float>(weight_count, NAN));
      const DeviceMemory d_bias_grad = Upload(std::vector<float>(shape.out_features, NAN));
      gemm.LinearBackwardWeights(d_weight_grad.as<float>(), d_bias_grad.as<float>(), d_out_grad.as<Bf16>(),
                                 inputs.d_in.as<Bf16>(), shape.rows, shape.in_features, shape.out_features,
                                 tb::GradientWrite::kOverwrite);
      tb::gpu::SynchronizeDevice();
      if (fused && gemm.fused_bias_gradients() == fused_before) {
        std::printf("note: cuBLASLt has no BGRADB algorithm for %s; ColumnSum ran\n", Describe(shape).c_str());
      }
      if (!fused) {
        EXPECT_EQ(gemm.fused_bias_gradients(), fused_before) << what;
      }
      ExpectAllNear(Download<float>(d_weight_grad, weight_count), weight_grad, 1e-3f, 1e-4f, what + ": weight");
      bias_by[fused] = Download<float>(d_bias_grad, shape.out_features);
      ExpectAllNear(bias_by[fused], bias_grad, 1e-3f, 1e-4f, what + ": bias");
    }
    ExpectAllNear(bias_by[1], bias_by[0], 1e-3f, 1e-4f, Describe(shape) + ": BGRADB against ColumnSum");
  }
}

// The strided-batched calls (a mixture of experts' experts): each block of rows against the CPU reference with that
// block's weights, with the tolerances of the unbatched calls above, whether the epilogues or the fallback kernels
// ran. Gradients start as NaN when overwritten (beta 0 must not read them), and random when accumulated.
struct BatchedShape {
  size_t rows;  // per block
  int in_features, out_features, batch;
};

// One batched case: its inputs on both sides and the reference, block by block.
struct BatchedCase {
  BatchedShape shape;
  std::string what;
  Bf16Values in, weight, bias, out_grad, gelu_pre;
  DeviceMemory d_in, d_weight, d_bias, d_out_grad, d_gelu_pre;
  std::vector<float> pre, out, plain, in_grad, in_grad_gelu, weight_grad, bias_grad;
  std::vector<float> start_weight_grad, start_bias_grad, accumulated_weight_grad, accumulated_bias_grad;

  explicit BatchedCase(const BatchedShape& s)
      : shape(s),
        what("batch " + std::to_string(s.batch) + " of " + Describe({s.rows, s.in_features, s.out_features})),
        in(RandomBf16(s.batch * s.rows * s.in_features, 1.0f, 70)),
        weight(RandomBf16(static_cast<size_t>(s.batch) * s.out_features * s.in_features,
                          1.0f / std::sqrt(static_cast<float>(s.in_features)), 71)),
        bias(RandomBf16(static_cast<size_t>(s.batch) * s.out_features, 0.5f, 72)),
        out_grad(RandomBf16(s.batch * s.rows * s.out_features, 1.0f, 73)),
        gelu_pre(RandomBf16(s.batch * s.rows * s.in_features, 1.5f, 74)),
        d_in(Upload(in.bits)),
        d_weight(Upload(weight.bits)),
        d_bias(Upload(bias.bits)),
        d_out_grad(Upload(out_grad.bits)),
        d_gelu_pre(Upload(gelu_pre.bits)) {
    const size_t ic = s.in_features, oc = s.out_features, b = s.batch, rows = s.rows;
    pre.resize(b * rows * oc);
    plain.resize(b * rows * oc);
    in_grad.resize(b * rows * ic);
    weight_grad.assign(b * oc * ic, 0.0f);
    bias_grad.assign(b * oc, 0.0f);
    start_weight_grad = accumulated_weight_grad = RandomNormal(b * oc * ic, 1.0f, 75);
    start_bias_grad = accumulated_bias_grad = RandomNormal(b * oc, 1.0f, 76);
    std::vector<float> unused(rows * ic);
    for (size_t k = 0; k < b; ++k) {
      const float* x = in.values.data() + k * rows * ic;
      const float* w = weight.values.data() + k * oc * ic;
      const float* dy = out_grad.values.data() + k * rows * oc;
      tb::cpu::MatmulForward(&pre[k * rows * oc], x, w, bias.values.data() + k * oc, nullptr, rows, ic, oc);
      tb::cpu::MatmulForward(&plain[k * rows * oc], x, w, nullptr, nullptr, rows, ic, oc);
      tb::cpu::MatmulBackward(&in_grad[k * rows * ic], &weight_grad[k * oc * ic], &bias_grad[k * oc], dy, x, w, rows,
                              ic, oc);
      tb::cpu::MatmulBackward(unused.data(), &accumulated_weight_grad[k * oc * ic], &accumulated_bias_grad[k * oc], dy,
                              x, w, rows, ic, oc);
    }
    out.resize(pre.size());
    tb::cpu::GeluForward(out.data(), pre.data(), out.size());
    in_grad_gelu = in_grad;
    tb::cpu::GeluBackward(in_grad_gelu.data(), gelu_pre.values.data(), in_grad_gelu.size());
  }
};

const BatchedShape kBatchedShapes[] = {{37, 24, 40, 3}, {128, 256, 512, 8}};

TEST(GpuGemm, BatchedLinearForwardMatchesEachBlockOnTheCpu) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  tb::gpu::Gemm gemm(nullptr);
  for (const BatchedShape& shape : kBatchedShapes) {
    const BatchedCase c(shape);
    const DeviceMemory d_out(c.out.size() * sizeof(Bf16)), d_pre(c.out.size() * sizeof(Bf16));
    const auto forward = [&](Bf16* pre, const DeviceMemory* bias) {
      gemm.BatchedLinearForward(d_out.as<Bf16>(), pre, c.d_in.as<Bf16>(), c.d_weight.as<Bf16>(),
                                bias ? bias->as<Bf16>() : nullptr, shape.rows, shape.in_features, shape.out_features,
                                shape.batch);
      tb::gpu::SynchronizeDevice();
    };
    forward(d_pre.as<Bf16>(), &c.d_bias);
    ExpectAllNear(DownloadBf16(d_pre, c.pre.size()), c.pre, 4e-3f, 1.0f / 128, c.what + ": pre_gelu");
    ExpectAllNear(DownloadBf16(d_out, c.out.size()), c.out, 4e-3f, 1.0f / 128, c.what + ": GELU out");
    forward(nullptr, &c.d_bias);
    ExpectAllNear(DownloadBf16(d_out, c.out.size()), c.pre, 4e-3f, 1.0f / 128, c.what + ": biased out");
    forward(nullptr, nullptr);
    ExpectAllNear(DownloadBf16(d_out, c.out.size()), c.plain, 2e-3f, 1.0f / 256, c.what + ": plain out");
  }
}

TEST(GpuGemm, BatchedLinearBackwardMatchesEachBlockOnTheCpu) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  tb::gpu::Gemm gemm(nullptr);
  for (const BatchedShape& shape : kBatchedShapes) {
    const BatchedCase c(shape);
    const int ic = shape.in_features, oc = shape.out_features, b = shape.batch;
    const DeviceMemory d_in_grad(c.in_grad.size() * sizeof(Bf16));
    gemm.BatchedLinearBackwardInput(d_in_grad.as<Bf16>(), c.d_out_grad.as<Bf16>(), c.d_weight.as<Bf16>(), nullptr,
                                    shape.rows, ic, oc, b);
    tb::gpu::SynchronizeDevice();
    ExpectAllNear(DownloadBf16(d_in_grad, c.in_grad.size()), c.in_grad, 2e-3f, 1.0f / 256, c.what + ": in_grad");
    gemm.BatchedLinearBackwardInput(d_in_grad.as<Bf16>(), c.d_out_grad.as<Bf16>(), c.d_weight.as<Bf16>(),
                                    c.d_gelu_pre.as<Bf16>(), shape.rows, ic, oc, b);
    tb::gpu::SynchronizeDevice();
    ExpectAllNear(DownloadBf16(d_in_grad, c.in_grad.size()), c.in_grad_gelu, 4e-3f, 1.0f / 128,
                  c.what + ": GELU in_grad");
    for (const tb::GradientWrite write : {tb::GradientWrite::kOverwrite, tb::GradientWrite::kAccumulate}) {
      const bool overwrite = write == tb::GradientWrite::kOverwrite;
      // Overwritten over NaN (beta 0 must not read them), accumulated onto the starting values.
      std::vector<float> weight_start = c.start_weight_grad, bias_start = c.start_bias_grad;
      if (overwrite) {
        std::fill(weight_start.begin(), weight_start.end(), NAN);
        std::fill(bias_start.begin(), bias_start.end(), NAN);
      }
      const DeviceMemory d_weight_grad = Upload(weight_start), d_bias_grad = Upload(bias_start);
      gemm.BatchedLinearBackwardWeights(d_weight_grad.as<float>(), d_bias_grad.as<float>(), c.d_out_grad.as<Bf16>(),
                                        c.d_in.as<Bf16>(), shape.rows, ic, oc, b, write);
      tb::gpu::SynchronizeDevice();
      const std::string what = c.what + (overwrite ? ": overwritten " : ": accumulated ");
      ExpectAllNear(Download<float>(d_weight_grad, c.weight_grad.size()),
                    overwrite ? c.weight_grad : c.accumulated_weight_grad, 1e-3f, 1e-4f, what + "weight");
      ExpectAllNear(Download<float>(d_bias_grad, c.bias_grad.size()), overwrite ? c.bias_grad : c.accumulated_bias_grad,
                    1e-3f, 1e-4f, what + "bias");
    }
  }
}

// --- algorithm choice (autotune) -----------------------------------------------------------------------------

// A timed choice as kernel_choices() records it: some candidates tried, a winner among them, finite times.
void ExpectTimedChoice(const tb::KernelChoice& choice) {
  const std::string what = choice.what + " " + choice.shape;
  EXPECT_GE(choice.candidates, 1) << what;
  EXPECT_GE(choice.chosen, 0) << what;
  EXPECT_LT(choice.chosen, choice.candidates) << what;
  EXPECT_TRUE(std::isfinite(choice.chosen_s) && choice.chosen_s > 0) << what << ": chosen_s " << choice.chosen_s;
  if (std::isfinite(choice.first_s)) {
    EXPECT_LE(choice.chosen_s, choice.first_s * (1 + tb::gpu::kAutotuneTieMargin)) << what;
  }
}

// The timed algorithm and the heuristic's first each match the CPU reference (different algorithms may split K
// differently, so not bit for bit), and each other within twice that; the records say what each did.
TEST(GpuGemm, AutotunedAndHeuristicFirstBothMatchCpu) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  tb::gpu::Gemm timed(nullptr), first(nullptr);
  timed.set_autotune(true);
  first.set_autotune(false);
  for (const LinearShape& shape : kGeluShapes) {
    const LinearInputs inputs(shape, 110);
    const size_t out_count = shape.rows * shape.out_features;
    std::vector<float> expected_pre(out_count), expected(out_count);
    tb::cpu::MatmulForward(expected_pre.data(), inputs.in.values.data(), inputs.weight.values.data(),
                           inputs.bias.values.data(), nullptr, shape.rows, shape.in_features, shape.out_features);
    tb::cpu::GeluForward(expected.data(), expected_pre.data(), out_count);
    std::vector<float> outs[2];
    for (int which = 0; which < 2; ++which) {
      tb::gpu::Gemm& gemm = which == 0 ? timed : first;
      const DeviceMemory out(out_count * sizeof(Bf16)), pre(out_count * sizeof(Bf16));
      gemm.LinearForward(out.as<Bf16>(), pre.as<Bf16>(), inputs.d_in.as<Bf16>(), inputs.d_weight.as<Bf16>(),
                         inputs.d_bias.as<Bf16>(), shape.rows, shape.in_features, shape.out_features);
      tb::gpu::SynchronizeDevice();
      const std::string what = Describe(shape) + (which == 0 ? ", autotuned" : ", heuristic's first");
      outs[which] = DownloadBf16(out, out_count);
      ExpectAllNear(outs[which], expected, 4e-3f, 1.0f / 128, what + ": out");
      ExpectAllNear(DownloadBf16(pre, out_count), expected_pre, 4e-3f, 1.0f / 128, what + ": pre_gelu");
    }
    ExpectAllNear(outs[0], outs[1], 8e-3f, 1.0f / 64, Describe(shape) + ": autotuned vs heuristic's first");
  }
  const std::vector<tb::KernelChoice> timed_choices = timed.kernel_choices();
  const std::vector<tb::KernelChoice> first_choices = first.kernel_choices();
  ASSERT_EQ(timed_choices.size(), kGeluShapes.size());
  ASSERT_EQ(first_choices.size(), kGeluShapes.size());
  for (size_t i = 0; i < kGeluShapes.size(); ++i) {
    EXPECT_EQ(timed_choices[i].what, "gemm LinearForward GELU_AUX_BIAS");
    ExpectTimedChoice(timed_choices[i]);
    std::printf("note: %s %s: %d candidates, chose %d (%.3g s against the first's %.3g s)\n",
                timed_choices[i].what.c_str(), timed_choices[i].shape.c_str(), timed_choices[i].candidates,
                timed_choices[i].chosen, timed_choices[i].chosen_s, timed_choices[i].first_s);
    EXPECT_EQ(first_choices[i].shape, timed_choices[i].shape);
    EXPECT_EQ(first_choices[i].candidates, 0);
    EXPECT_EQ(first_choices[i].chosen, 0);
    EXPECT_TRUE(std::isnan(first_choices[i].chosen_s));
  }
  // A second call of a shape reuses its plan: no new choice.
  const LinearInputs inputs(kGeluShapes.front(), 111);
  const DeviceMemory out(kGeluShapes.front().rows * kGeluShapes.front().out_features * sizeof(Bf16));
  const DeviceMemory pre(kGeluShapes.front().rows * kGeluShapes.front().out_features * sizeof(Bf16));
  timed.LinearForward(out.as<Bf16>(), pre.as<Bf16>(), inputs.d_in.as<Bf16>(), inputs.d_weight.as<Bf16>(),
                      inputs.d_bias.as<Bf16>(), kGeluShapes.front().rows, kGeluShapes.front().in_features,
                      kGeluShapes.front().out_features);
  tb::gpu::SynchronizeDevice();
  EXPECT_EQ(timed.kernel_choices().size(), kGeluShapes.size());
}

// The timing runs (6 per candidate) write scratch outputs: an accumulating call on a buffer of known contents adds
// its product exactly once, and an in-place residual add once, on the call that built (and timed) the plan.
TEST(GpuGemm, TimingLeavesTheCallersOutputsAlone) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  for (const LinearShape& shape : kPlainShapes) {
    tb::gpu::Gemm gemm(nullptr);
    gemm.set_autotune(true);
    const LinearInputs inputs(shape, 120);
    const size_t weight_count = static_cast<size_t>(shape.out_features) * shape.in_features;
    const Bf16Values out_grad = RandomBf16(shape.rows * shape.out_features, 1.0f, 123);
    const DeviceMemory d_out_grad = Upload(out_grad.bits);
    std::vector<float> weight_grad = RandomNormal(weight_count, 1.0f, 124);
    std::vector<float> bias_grad = RandomNormal(shape.out_features, 1.0f, 125);
    const DeviceMemory d_weight_grad = Upload(weight_grad);
    const DeviceMemory d_bias_grad = Upload(bias_grad);
    std::vector<float> unused_in_grad(shape.rows * shape.in_features);
    tb::cpu::MatmulBackward(unused_in_grad.data(), weight_grad.data(), bias_grad.data(), out_grad.values.data(),
                            inputs.in.values.data(), inputs.weight.values.data(), shape.rows, shape.in_features,
                            shape.out_features);
    gemm.LinearBackwardWeights(d_weight_grad.as<float>(), d_bias_grad.as<float>(), d_out_grad.as<Bf16>(),
                               inputs.d_in.as<Bf16>(), shape.rows, shape.in_features, shape.out_features,
                               tb::GradientWrite::kAccumulate);
    tb::gpu::SynchronizeDevice();
    const std::string what = Describe(shape) + ", accumulate";
    ExpectAllNear(Download<float>(d_weight_grad, weight_count), weight_grad, 1e-3f, 1e-4f, what + ": weight");
    ExpectAllNear(Download<float>(d_bias_grad, bias_grad.size()), bias_grad, 1e-3f, 1e-4f, what + ": bias");

    const size_t out_count = shape.rows * shape.out_features;
    const std::vector<float> residual = RandomNormal(out_count, 1.0f, 126);
    std::vector<float> expected(out_count);
    tb::cpu::MatmulForward(expected.data(), inputs.in.values.data(), inputs.weight.values.data(), nullptr,
                           residual.data(), shape.rows, shape.in_features, shape.out_features);
    const DeviceMemory d_residual = Upload(residual);
    gemm.LinearForwardFloat(d_residual.as<float>(), d_residual.as<float>(), inputs.d_in.as<Bf16>(),
                            inputs.d_weight.as<Bf16>(), nullptr, shape.rows, shape.in_features, shape.out_features);
    tb::gpu::SynchronizeDevice();
    ExpectAllNear(Download<float>(d_residual, out_count), expected, 1e-3f, 1e-4f,
                  Describe(shape) + ", residual add in place");
    const std::vector<tb::KernelChoice> choices = gemm.kernel_choices();
    ASSERT_EQ(choices.size(), 2u) << Describe(shape);  // the weight gradient's plan and the residual add's
    for (const tb::KernelChoice& choice : choices) ExpectTimedChoice(choice);
  }
}

TEST(GpuGemm, RefusesWhatItsEpiloguesCannotDo) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  tb::gpu::Gemm gemm(nullptr);
  const LinearShape shape{8, 16, 24};
  const LinearInputs inputs(shape, 60);
  const DeviceMemory out(shape.rows * shape.out_features * sizeof(Bf16));
  const DeviceMemory pre(shape.rows * 64 * sizeof(Bf16));
  // A bias one bf16 past an aligned address.
  const DeviceMemory bias(static_cast<size_t>(shape.out_features + 1) * sizeof(Bf16));
  ExpectRuntimeErrorContaining("16-byte aligned", [&] {
    gemm.LinearForward(out.as<Bf16>(), nullptr, inputs.d_in.as<Bf16>(), inputs.d_weight.as<Bf16>(),
                       bias.as<Bf16>() + 1, shape.rows, shape.in_features, shape.out_features);
  });
  // The GELU aux matrix's leading dimension (out_features) must be a multiple of 8.
  const LinearShape odd{8, 16, 20};
  const LinearInputs odd_inputs(odd, 61);
  ExpectRuntimeErrorContaining("multiple of 8", [&] {
    gemm.LinearForward(out.as<Bf16>(), pre.as<Bf16>(), odd_inputs.d_in.as<Bf16>(), odd_inputs.d_weight.as<Bf16>(),
                       nullptr, odd.rows, odd.in_features, odd.out_features);
  });
}

// --- attention -------------------------------------------------------------------------------------------------

struct AttentionShape {
  int batch;
  int seq;
  int channels;
  int heads;
};

std::string Describe(const AttentionShape& shape) {
  return "B " + std::to_string(shape.batch) + ", T " + std::to_string(shape.seq) + ", C " +
         std::to_string(shape.channels) + ", NH " + std::to_string(shape.heads);
}

// What both implementations run: cuDNN needs head sizes that are multiples of 8; sequence lengths are free.
const std::vector<AttentionShape> kAttentionShapes = {
    {2, 17, 128, 2}, {3, 70, 96, 3}, {2, 128, 768, 12}, {1, 200, 1600, 25}};
// cuBLAS runs any head size.
const std::vector<AttentionShape> kCublasOnlyShapes = {{2, 9, 30, 3}, {1, 1, 8, 2}};

// The CPU reference's forward and backward on one random input, and the same input on the device.
struct AttentionCase {
  AttentionShape shape;
  size_t qkv_count, out_count, lse_count;
  Bf16Values qkv, out_grad;
  std::vector<float> out, lse, qkv_grad;  // CPU results
  DeviceMemory d_qkv, d_out_grad;

  explicit AttentionCase(const AttentionShape& s, uint32_t seed)
      : shape(s),
        qkv_count(static_cast<size_t>(s.batch) * s.seq * 3 * s.channels),
        out_count(static_cast<size_t>(s.batch) * s.seq * s.channels),
        lse_count(static_cast<size_t>(s.batch) * s.heads * s.seq),
        // q and k of stddev 1.5: scaled scores of stddev ~2, so rows mix peaked and spread probabilities.
        qkv(RandomBf16(qkv_count, 1.5f, seed)),
        out_grad(RandomBf16(out_count, 1.0f, seed + 1)),
        out(out_count),
        lse(lse_count),
        qkv_grad(qkv_count),
        d_qkv(Upload(qkv.bits)),
        d_out_grad(Upload(out_grad.bits)) {
    std::vector<float> scratch(2 * static_cast<size_t>(tb::cpu::kAttentionBlockRows) * s.seq);
    tb::cpu::AttentionForward(out.data(), lse.data(), scratch.data(), qkv.values.data(), s.batch, s.seq, s.channels,
                              s.heads);
    tb::cpu::AttentionBackward(qkv_grad.data(), scratch.data(), out_grad.values.data(), qkv.values.data(), lse.data(),
                               s.batch, s.seq, s.channels, s.heads);
  }
};

// What one implementation produced for a case: Forward's out and lse, then Backward's qkv_grad from those.
struct AttentionResult {
  std::vector<float> out, lse, qkv_grad;
};

AttentionResult RunAttention(tb::gpu::Attention& attention, const AttentionCase& c) {
  const DeviceMemory out(c.out_count * sizeof(Bf16));
  const DeviceMemory lse(c.lse_count * sizeof(float));
  const DeviceMemory qkv_grad(c.qkv_count * sizeof(Bf16));
  attention.Forward(out.as<Bf16>(), lse.as<float>(), c.d_qkv.as<Bf16>(), c.shape.batch, c.shape.seq);
  attention.Backward(qkv_grad.as<Bf16>(), c.d_out_grad.as<Bf16>(), c.d_qkv.as<Bf16>(), out.as<Bf16>(),
                     lse.as<float>(), c.shape.batch, c.shape.seq);
  tb::gpu::SynchronizeDevice();
  return {DownloadBf16(out, c.out_count), Download<float>(lse, c.lse_count), DownloadBf16(qkv_grad, c.qkv_count)};
}

// The q (part 0), k (1) or v (2) columns of a (B, T, 3C) tensor: dQ, dK and dV differ in scale, so each is held
// to its own.
std::vector<float> QkvPart(const std::vector<float>& qkv, int channels, int part) {
  const size_t rows = qkv.size() / (3 * static_cast<size_t>(channels));
  std::vector<float> values(rows * channels);
  for (size_t r = 0; r < rows; ++r) {
    for (int c = 0; c < channels; ++c) values[r * channels + c] = qkv[(r * 3 + part) * channels + c];
  }
  return values;
}

// Attention tolerances for out and for each of dQ, dK, dV; `scale` widens them (two implementations compared
// with each other).
void ExpectAttentionOutputsNear(const AttentionResult& actual, const std::vector<float>& out,
                                const std::vector<float>& qkv_grad, int channels, const std::string& what,
                                double scale = 1.0) {
  ExpectAttentionNear(actual.out, out, what + ": out", scale);
  const char* const names[] = {": dq", ": dk", ": dv"};
  for (int part = 0; part < 3; ++part) {
    ExpectAttentionNear(QkvPart(actual.qkv_grad, channels, part), QkvPart(qkv_grad, channels, part),
                        what + names[part], scale);
  }
}

void ExpectMatchesCpu(const AttentionResult& result, const AttentionCase& c, const std::string& name) {
  const std::string what = name + ", " + Describe(c.shape);
  ExpectAttentionOutputsNear(result, c.out, c.qkv_grad, c.shape.channels, what);
  ExpectAllNear(result.lse, c.lse, 5e-4f, 0.0f, what + ": lse");
}

// cuDNN's attention for `shape`, or null with the reason when this build has no cuDNN frontend.
std::unique_ptr<tb::gpu::Attention> MakeCudnnOrSkipReason(const AttentionShape& shape, int max_batch, int max_seq,
                                                          std::string& skip_reason) {
  try {
    return tb::gpu::MakeCudnnAttention(shape.channels, shape.heads, max_batch, max_seq, nullptr);
  } catch (const tb::RuntimeError& error) {
    const std::string message = error.what();
    if (!tb::test::BuiltWithoutCudnnFrontend(message)) throw;
    skip_reason = message;
    return nullptr;
  }
}

TEST(GpuAttention, CublasForwardAndBackwardMatchCpu) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  std::vector<AttentionShape> shapes = kAttentionShapes;
  shapes.insert(shapes.end(), kCublasOnlyShapes.begin(), kCublasOnlyShapes.end());
  for (const AttentionShape& shape : shapes) {
    const AttentionCase c(shape, 70);
    // Made for more than it runs: the workspace is sized by the maxima, the calls by (batch, seq).
    const auto attention =
        tb::gpu::MakeCublasAttention(shape.channels, shape.heads, shape.batch + 1, shape.seq + 5, nullptr);
    EXPECT_EQ(attention->name(), "cublas");
    EXPECT_GT(attention->workspace_bytes(), 0u);
    ExpectMatchesCpu(RunAttention(*attention, c), c, "cublas");
  }
}

TEST(GpuAttention, CudnnForwardAndBackwardMatchCpuAndCublas) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  for (const AttentionShape& shape : kAttentionShapes) {
    const AttentionCase c(shape, 80);
    std::string skip_reason;
    const auto cudnn = MakeCudnnOrSkipReason(shape, shape.batch + 1, shape.seq + 5, skip_reason);
    if (cudnn == nullptr) GTEST_SKIP() << skip_reason;
    EXPECT_EQ(cudnn->name(), "cudnn-sdpa");
    const AttentionResult from_cudnn = RunAttention(*cudnn, c);
    ExpectMatchesCpu(from_cudnn, c, "cudnn");
    // Both implementations agree with each other within twice the tolerance each has against the reference.
    const auto cublas = tb::gpu::MakeCublasAttention(shape.channels, shape.heads, shape.batch, shape.seq, nullptr);
    const AttentionResult from_cublas = RunAttention(*cublas, c);
    const std::string what = "cudnn vs cublas, " + Describe(shape);
    ExpectAttentionOutputsNear(from_cudnn, from_cublas.out, from_cublas.qkv_grad, shape.channels, what, 2.0);
    ExpectAllNear(from_cudnn.lse, from_cublas.lse, 1e-3f, 0.0f, what + ": lse");
  }
}

TEST(GpuAttention, CudnnRunsSmallerBatchesAndSequencesThanItsMaxima) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const AttentionShape largest{3, 64, 128, 2};
  std::string skip_reason;
  const auto cudnn = MakeCudnnOrSkipReason(largest, largest.batch, largest.seq, skip_reason);
  if (cudnn == nullptr) GTEST_SKIP() << skip_reason;
  for (const AttentionShape& shape : {AttentionShape{1, 33, 128, 2}, largest, AttentionShape{2, 64, 128, 2}}) {
    const AttentionCase c(shape, 90);
    ExpectMatchesCpu(RunAttention(*cudnn, c), c, "cudnn");
  }
}

TEST(GpuAttention, ShapesOutsideTheMaximaAndUnsupportedHeadSizesThrow) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const auto cublas = tb::gpu::MakeCublasAttention(64, 2, 2, 16, nullptr);
  ExpectRuntimeErrorContaining("outside what it was made for",
                               [&] { cublas->Forward(nullptr, nullptr, nullptr, 3, 16); });
  ExpectRuntimeErrorContaining("outside what it was made for",
                               [&] { cublas->Backward(nullptr, nullptr, nullptr, nullptr, nullptr, 2, 17); });
  ExpectRuntimeErrorContaining("invalid shape", [] { tb::gpu::MakeCublasAttention(100, 3, 1, 1, nullptr); });
  // A head size of 3 (odd, so bf16 heads are not even 4-byte aligned): cuDNN refuses, saying so.
  ExpectRuntimeErrorContaining("cuDNN", [] { tb::gpu::MakeCudnnAttention(6, 2, 1, 16, nullptr); });
}

// cuDNN's SDPA backward fails on sequences of 1 token: refused when made for them, and when called with them.
TEST(GpuAttention, CudnnRefusesOneTokenSequences) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const AttentionShape shape{2, 16, 128, 2};
  std::string skip_reason;
  const auto cudnn = MakeCudnnOrSkipReason(shape, shape.batch, shape.seq, skip_reason);
  if (cudnn == nullptr) GTEST_SKIP() << skip_reason;
  ExpectRuntimeErrorContaining("1 token", [] { tb::gpu::MakeCudnnAttention(128, 2, 2, 1, nullptr); });
  ExpectRuntimeErrorContaining("1 token", [] { tb::gpu::MakeCudnnAttention(128, 2, 2, 16, nullptr, 1); });
  ExpectRuntimeErrorContaining("1 token", [&] { cudnn->Forward(nullptr, nullptr, nullptr, 1, 1); });
  ExpectRuntimeErrorContaining("1 token",
                               [&] { cudnn->Backward(nullptr, nullptr, nullptr, nullptr, nullptr, 2, 1); });
}

// Each graph's plan is chosen by timing on its first run and recorded; the chosen plan's results match the CPU, on
// the first run (which also timed) and on a later one.
TEST(GpuAttention, CudnnTimesItsPlansAndRecordsTheChoice) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const AttentionShape shape{2, 128, 768, 12};
  const AttentionCase c(shape, 130);
  std::string skip_reason;
  const auto cudnn = MakeCudnnOrSkipReason(shape, shape.batch, shape.seq, skip_reason);
  if (cudnn == nullptr) GTEST_SKIP() << skip_reason;
  EXPECT_TRUE(cudnn->kernel_choices().empty());  // built, not yet run
  ExpectMatchesCpu(RunAttention(*cudnn, c), c, "cudnn, first run");
  ExpectMatchesCpu(RunAttention(*cudnn, c), c, "cudnn, second run");
  const std::vector<tb::KernelChoice> choices = cudnn->kernel_choices();
  ASSERT_EQ(choices.size(), 2u);
  EXPECT_EQ(choices[0].what, "cudnn-sdpa forward");
  EXPECT_EQ(choices[1].what, "cudnn-sdpa backward");
  for (const tb::KernelChoice& choice : choices) {
    EXPECT_EQ(choice.shape, "B 2 T 128 NH 12 hd 64");
    std::printf("note: %s: %d plans, chose %d (%.3g s against the first's %.3g s)\n", choice.what.c_str(),
                choice.candidates, choice.chosen, choice.chosen_s, choice.first_s);
    if (tb::gpu::AutotuneFromEnvironment()) ExpectTimedChoice(choice);
  }
}

// The CUDA model reports its GEMMs' and attention's choices after a step.
TEST(GpuKernelChoices, TheModelRecordsItsChoicesAfterAStep) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const tb::ModelConfig config = tb::CustomModel(2, 128, 2, 100, 16);
  tb::CudaTransformerOptions options;
  options.max_batch = 2;
  const auto model = tb::MakeCudaTransformer(config, 1, options);
  std::vector<int32_t> tokens(2 * 16);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7 % 100);
  model->ForwardBatch(tokens.data(), tokens.data(), 2, 16);
  model->Backward({});
  tb::gpu::SynchronizeDevice();
  const std::vector<tb::KernelChoice> choices = model->kernel_choices();
  ASSERT_FALSE(choices.empty());
  size_t gemms = 0, attention = 0;
  for (const tb::KernelChoice& choice : choices) {
    gemms += choice.what.rfind("gemm ", 0) == 0;
    attention += choice.what.rfind("cudnn-sdpa ", 0) == 0;
    if (tb::gpu::AutotuneFromEnvironment()) ExpectTimedChoice(choice);
  }
  EXPECT_GE(gemms, 6u);  // qkv, projection, fc, MLP projection, LM head forward; their backward plans
  EXPECT_EQ(attention, model->attention() == "cudnn-sdpa" ? 2u : 0u) << model->attention();
}

// --- a build without CUDA ---------------------------------------------------------------------------------------

TEST(GpuGemmAttentionStubs, BuildWithoutCudaSaysSo) {
  if (tb::BuiltWithCuda()) GTEST_SKIP() << "this trainbench was built with CUDA: there are no stubs to check";
  ExpectRuntimeErrorContaining("built without CUDA", [] { tb::gpu::Gemm gemm(nullptr); });
  ExpectRuntimeErrorContaining("built without CUDA", [] { tb::gpu::MakeCublasAttention(768, 12, 1, 64, nullptr); });
  ExpectRuntimeErrorContaining("built without CUDA", [] { tb::gpu::MakeCudnnAttention(768, 12, 1, 64, nullptr); });
}

}  // namespace
