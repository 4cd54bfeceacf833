// The CUDA transformer (models/cuda/cuda_transformer.cu) against the CPU reference (MakeCpuTransformer) on tiny
// models, and the bf16 kernels it added (models/cuda/kernels.h) against the reference's layers. Every GPU test skips,
// saying why, when no GPU is usable (and in a build without CUDA, where the stub is checked instead).
//
// Tolerances:
// - the bf16 kernels: a bf16 store rounds to nearest, a relative error of at most 2^-9; a LayerNorm output rounded
//   once is checked at 2^-8 relative (twice that, for the fp32 result differing from the reference's by ~1e-5 and
//   rounding the other way at a tie) + 1e-5 absolute. Kernels whose inputs are bf16 get the same bf16 values as the
//   reference, so their fp32 results keep the fp32 tolerances of gpu_kernels_test.cc (1e-5; 1e-4 for sums over all
//   rows). Casts and the bf16 copy written by AdamW are compared bit for bit with the host's ToBf16.
// - the whole model: activations and GEMM operands are bf16 (8 bits of mantissa: ~2e-3 relative per rounding),
//   accumulation fp32. The loss is a mean over tokens of log-sum-exps of logits whose errors are ~1e-3 relative and
//   average out: 1e-2 relative is far above that noise and far below what any wrong layer gives (O(1)). Gradients
//   pass through ~20 bf16 roundings between the loss and wte (each ~1e-3 rms, independent, so adding in quadrature)
//   and the column sums of the bias gradients cancel: per tensor ||g_gpu - g_cpu|| / ||g_cpu|| < 3e-2. A wrong
//   transpose, layer or scale gives O(1). AdamW on identical gradients is the same formula in fp32: 1e-6 relative.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "clock.h"
#include "cpu_kernels.h"
#include "cuda/autotune.h"
#include "cuda/kernels.h"
#include "gpu_test_util.h"
#include "token_windows.h"
#include "device.h"
#include "error.h"
#include "fsdp.h"
#include "nccl_communicator.h"
#include "model_config.h"
#include "moe_stats.h"
#include "scoped_env.h"
#include "transformer.h"

namespace tb {
namespace {

using tb::test::ExpectAllNear;
using tb::test::DownloadDevice;
using tb::test::InputErrorOf;
using tb::test::NoGpuMessage;
using tb::test::RelativeDifference;
using tb::test::RandomNormal;

using gpu::Bf16;
using gpu::DeviceMemory;
using gpu::Download;
using gpu::Upload;


std::vector<Bf16> ToBf16(const std::vector<float>& values) {
  std::vector<Bf16> rounded(values.size());
  for (size_t i = 0; i < values.size(); ++i) rounded[i] = gpu::ToBf16(values[i]);
  return rounded;
}

std::vector<float> ToFloat(const std::vector<Bf16>& values) {
  std::vector<float> widened(values.size());
  for (size_t i = 0; i < values.size(); ++i) widened[i] = gpu::ToFloat(values[i]);
  return widened;
}


// Host values into a model's device buffer; returns once the copy has landed (a copy from pageable memory may
// return before its DMA ends, and the model's stream does not wait for the legacy stream).
void UploadDevice(float* device, const float* host, size_t count) {
  gpu::SynchronizeDevice();
  CopyHostToDevice(device, host, count * sizeof(float));
  gpu::SynchronizeDevice();
}

// --- bf16 on the host, CPU only ------------------------------------------------------------------------------

TEST(Bf16Host, RoundsToNearestEven) {
  EXPECT_EQ(gpu::ToBf16(1.0f).bits, 0x3f80u);
  EXPECT_EQ(gpu::ToFloat(gpu::ToBf16(257.0f)), 256.0f);  // halfway: to even
  EXPECT_EQ(gpu::ToFloat(gpu::ToBf16(259.0f)), 260.0f);  // halfway: to even
  EXPECT_EQ(gpu::ToFloat(gpu::ToBf16(257.5f)), 258.0f);  // above halfway: up
  EXPECT_EQ(gpu::ToFloat(gpu::ToBf16(-3.0f)), -3.0f);
  EXPECT_EQ(gpu::ToBf16(-0.0f).bits, 0x8000u);
  EXPECT_EQ(gpu::ToBf16(3.4e38f).bits, 0x7f80u);  // rounds up to infinity
  EXPECT_EQ(gpu::ToBf16(-INFINITY).bits, 0xff80u);
  EXPECT_TRUE(std::isnan(gpu::ToFloat(gpu::ToBf16(NAN))));
}

// --- bf16 kernels against the CPU reference ------------------------------------------------------------------

// Channels not a multiple of the warp size, so that the tails of every loop run.
constexpr int kRowsBatch = 3;
constexpr int kRowsSeq = 17;
constexpr int kChannels = 100;
constexpr size_t kRows = static_cast<size_t>(kRowsBatch) * kRowsSeq;

TEST(GpuBf16Kernels, CastToBf16MatchesHostRounding) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  std::vector<float> in = RandomNormal(100003, 3.0f, 1);
  // Ties both ways, signed zeros, infinities, overflow to infinity, the smallest normal.
  for (float value : {257.0f, 259.0f, -257.0f, 0.0f, -0.0f, INFINITY, -INFINITY, 3.4e38f, -3.4e38f, 1.17549435e-38f}) {
    in.push_back(value);
  }
  const DeviceMemory d_in = Upload(in);
  const DeviceMemory out(in.size() * sizeof(Bf16));
  gpu::CastToBf16(out.as<Bf16>(), d_in.as<float>(), in.size(), nullptr);
  gpu::SynchronizeDevice();
  const std::vector<Bf16> device = Download<Bf16>(out, in.size());
  size_t failures = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (device[i].bits != gpu::ToBf16(in[i]).bits && failures++ < 5) {
      ADD_FAILURE() << "cast of " << in[i] << " at [" << i << "]: device 0x" << std::hex << device[i].bits
                    << ", host 0x" << gpu::ToBf16(in[i]).bits;
    }
  }
  EXPECT_EQ(failures, 0u);
}

TEST(GpuBf16Kernels, LayerNormForwardWritesBf16) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  std::vector<float> in = RandomNormal(kRows * kChannels, 1.0f, 2);  // (N, C), the fp32 residual stream
  for (float& value : in) value += 30.0f;
  std::vector<float> weight = RandomNormal(kChannels, 0.1f, 3);  // (C)
  for (float& value : weight) value += 1.0f;
  const std::vector<float> bias = RandomNormal(kChannels, 0.1f, 4);  // (C)
  std::vector<float> cpu_out(in.size()), cpu_mean(kRows), cpu_rstd(kRows);
  cpu::LayerNormForward(cpu_out.data(), cpu_mean.data(), cpu_rstd.data(), in.data(), weight.data(), bias.data(),
                        kRows, kChannels);

  const DeviceMemory d_in = Upload(in), d_weight = Upload(weight), d_bias = Upload(bias);
  const DeviceMemory out(in.size() * sizeof(Bf16)), mean(kRows * sizeof(float)), rstd(kRows * sizeof(float));
  gpu::LayerNormForward(out.as<Bf16>(), mean.as<float>(), rstd.as<float>(), d_in.as<float>(), d_weight.as<float>(),
                        d_bias.as<float>(), kRows, kChannels, nullptr);
  gpu::SynchronizeDevice();

  ExpectAllNear(ToFloat(Download<Bf16>(out, in.size())), cpu_out, 1e-5f, 1.0f / 256, "bf16 layernorm out");
  ExpectAllNear(Download<float>(mean, kRows), cpu_mean, 1e-5f, 1e-5f, "layernorm mean");
  ExpectAllNear(Download<float>(rstd, kRows), cpu_rstd, 1e-5f, 1e-5f, "layernorm rstd");
}

TEST(GpuBf16Kernels, LayerNormBackwardReadsBf16OutGrad) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  std::vector<float> in = RandomNormal(kRows * kChannels, 1.0f, 10);  // (N, C)
  for (float& value : in) value += 30.0f;
  std::vector<float> weight = RandomNormal(kChannels, 0.1f, 11);  // (C)
  for (float& value : weight) value += 1.0f;
  const std::vector<float> bias = RandomNormal(kChannels, 0.1f, 12);  // (C)
  // The gradient as a backward GEMM leaves it: bf16. The reference gets the same values in fp32.
  const std::vector<Bf16> out_grad = ToBf16(RandomNormal(in.size(), 1.0f, 13));  // (N, C)
  std::vector<float> cpu_in_grad = RandomNormal(in.size(), 1.0f, 14);            // (N, C), accumulated into
  std::vector<float> cpu_weight_grad = RandomNormal(kChannels, 1.0f, 15);        // (C), accumulated into
  std::vector<float> cpu_bias_grad = RandomNormal(kChannels, 1.0f, 16);          // (C), accumulated into
  const DeviceMemory in_grad = Upload(cpu_in_grad);
  const DeviceMemory weight_grad = Upload(cpu_weight_grad);
  const DeviceMemory bias_grad = Upload(cpu_bias_grad);

  std::vector<float> cpu_out(in.size()), cpu_mean(kRows), cpu_rstd(kRows);
  cpu::LayerNormForward(cpu_out.data(), cpu_mean.data(), cpu_rstd.data(), in.data(), weight.data(), bias.data(),
                        kRows, kChannels);
  cpu::LayerNormBackward(cpu_in_grad.data(), cpu_weight_grad.data(), cpu_bias_grad.data(), ToFloat(out_grad).data(),
                         in.data(), weight.data(), cpu_mean.data(), cpu_rstd.data(), kRows, kChannels);

  // The device's own statistics, as in the model.
  const DeviceMemory d_in = Upload(in), d_weight = Upload(weight), d_bias = Upload(bias);
  const DeviceMemory d_out_grad = Upload(out_grad);
  const DeviceMemory out(in.size() * sizeof(Bf16)), mean(kRows * sizeof(float)), rstd(kRows * sizeof(float));
  const DeviceMemory scratch(gpu::LayerNormBackwardScratchFloats(kRows, kChannels) * sizeof(float));
  const DeviceMemory in_grad_bf16(in.size() * sizeof(Bf16));
  gpu::LayerNormForward(out.as<Bf16>(), mean.as<float>(), rstd.as<float>(), d_in.as<float>(), d_weight.as<float>(),
                        d_bias.as<float>(), kRows, kChannels, nullptr);
  gpu::LayerNormBackward(in_grad.as<float>(), in_grad_bf16.as<Bf16>(), weight_grad.as<float>(), bias_grad.as<float>(),
                         d_out_grad.as<Bf16>(), d_in.as<float>(), d_weight.as<float>(), mean.as<float>(),
                         rstd.as<float>(), kRows, kChannels, GradientWrite::kAccumulate, scratch.as<float>(), nullptr);
  gpu::SynchronizeDevice();

  const std::vector<float> device_in_grad = Download<float>(in_grad, cpu_in_grad.size());
  ExpectAllNear(device_in_grad, cpu_in_grad, 1e-5f, 1e-5f, "layernorm in_grad");
  // The bf16 copy written in the same pass (what the model's next GEMM reads): in_grad rounded, bit for bit.
  const std::vector<Bf16> copy = Download<Bf16>(in_grad_bf16, in.size());
  size_t copy_mismatches = 0;
  for (size_t i = 0; i < copy.size(); ++i) copy_mismatches += copy[i].bits != gpu::ToBf16(device_in_grad[i]).bits;
  EXPECT_EQ(copy_mismatches, 0u);
  ExpectAllNear(Download<float>(weight_grad, kChannels), cpu_weight_grad, 1e-4f, 1e-5f, "layernorm weight_grad");
  ExpectAllNear(Download<float>(bias_grad, kChannels), cpu_bias_grad, 1e-4f, 1e-5f, "layernorm bias_grad");
}

TEST(GpuBf16Kernels, AdamWWritesTheBf16Copy) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  constexpr size_t kCount = 100003;  // not a multiple of the block size
  std::vector<float> cpu_params = RandomNormal(kCount, 0.02f, 50);
  std::vector<float> cpu_m(kCount, 0.0f), cpu_v(kCount, 0.0f);
  const DeviceMemory params = Upload(cpu_params), m = Upload(cpu_m), v = Upload(cpu_v);
  const DeviceMemory params_bf16(kCount * sizeof(Bf16));
  const gpu::AdamWPlan plan({{0, kCount, true}}, 0);
  const AdamWConfig config;
  for (int64_t step = 1; step <= 3; ++step) {
    const std::vector<float> grads = RandomNormal(kCount, 1.0f, 50 + static_cast<uint32_t>(step));
    cpu::AdamWUpdate(cpu_params.data(), grads.data(), cpu_m.data(), cpu_v.data(), kCount, config, config.weight_decay,
                     step);
    const DeviceMemory d_grads = Upload(grads);
    gpu::AdamWUpdate(params.as<float>(), d_grads.as<float>(), m.as<float>(), v.as<float>(), plan, config, step, nullptr,
                     params_bf16.as<Bf16>());
    gpu::SynchronizeDevice();
  }
  const std::vector<float> device_params = Download<float>(params, kCount);
  ExpectAllNear(device_params, cpu_params, 1e-7f, 1e-6f, "adamw params");
  ExpectAllNear(Download<float>(m, kCount), cpu_m, 1e-7f, 1e-6f, "adamw m");
  ExpectAllNear(Download<float>(v, kCount), cpu_v, 1e-7f, 1e-6f, "adamw v");
  const std::vector<Bf16> device_bf16 = Download<Bf16>(params_bf16, kCount);
  size_t failures = 0;
  for (size_t i = 0; i < kCount; ++i) failures += device_bf16[i].bits != gpu::ToBf16(device_params[i]).bits;
  EXPECT_EQ(failures, 0u) << "bf16 copies that are not the updated fp32 parameter rounded to nearest even";
}

// --- the whole model against the CPU reference ---------------------------------------------------------------

constexpr int kBatch = 2;
constexpr int kSeq = 16;
constexpr double kLossTolerance = 1e-2;      // relative; see the top of the file
constexpr double kGradientTolerance = 3e-2;  // relative norm per tensor

// Head size 16 (cuDNN may or may not take it; auto falls back to cuBLAS when it does not); vocabulary 100, padded to
// 128.
ModelConfig SmallHeadsConfig() { return CustomModel(2, 64, 4, 100, kSeq); }
// Head size 64, which cuDNN's fused attention supports on every device it runs on.
ModelConfig Head64Config() { return CustomModel(2, 128, 2, 100, kSeq); }

struct Batch {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

Batch RandomBatch(int vocab, int batch, int seq, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  Batch b;
  for (int i = 0; i < batch * seq; ++i) {
    b.inputs.push_back(token(generator));
    b.targets.push_back(token(generator));
  }
  return b;
}

std::unique_ptr<Transformer> MakeGpuModel(const ModelConfig& config, uint64_t seed,
                                          AttentionChoice attention = AttentionChoice::kAuto) {
  CudaTransformerOptions options;
  options.max_batch = kBatch;
  options.attention = attention;
  return MakeCudaTransformer(config, seed, options);
}

TEST(CudaTransformer, StartsFromTheCpuReferenceWeights) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = SmallHeadsConfig();
  auto cpu = MakeCpuTransformer(config, 7);
  auto gpu = MakeGpuModel(config, 7);
  EXPECT_EQ(gpu->backend(), "cuda");
  EXPECT_NE(gpu->stream(), nullptr);
  ASSERT_EQ(gpu->parameter_elements(), cpu->parameter_elements());
  ASSERT_EQ(gpu->layout().size(), cpu->layout().size());
  for (size_t s = 0; s < cpu->layout().size(); ++s) {
    EXPECT_EQ(gpu->layout()[s].name, cpu->layout()[s].name);
    EXPECT_EQ(gpu->layout()[s].offset, cpu->layout()[s].offset);
  }
  const size_t n = cpu->parameter_elements();
  const std::vector<float> params = DownloadDevice(gpu->parameters(), n);
  size_t different = 0;
  for (size_t i = 0; i < n; ++i) different += params[i] != cpu->parameters()[i];
  EXPECT_EQ(different, 0u) << "of " << n << " initial parameters differ from the CPU reference's";
  for (float* buffer : {gpu->gradients(), gpu->adam_m(), gpu->adam_v()}) {
    const std::vector<float> values = DownloadDevice(buffer, n);
    size_t nonzero = 0;
    for (float value : values) nonzero += value != 0.0f;
    EXPECT_EQ(nonzero, 0u);
  }
  EXPECT_GT(gpu->peak_device_memory_bytes(), 18 * n);  // at least the flat buffers: 4 fp32 + 1 bf16 per element
}

// Slot `slot`'s elements of a whole flat buffer.
std::vector<float> SlotOf(const std::vector<float>& all, const tb::TensorSlot& slot) {
  return {all.begin() + static_cast<std::ptrdiff_t>(slot.offset),
          all.begin() + static_cast<std::ptrdiff_t>(slot.offset + slot.count)};
}

// Fills `count` floats of device memory with `value`.
void FillDevice(float* device, size_t count, float value) {
  const std::vector<float> host(count, value);
  CopyHostToDevice(device, host.data(), count * sizeof(float));
}

// Each tensor's gradient against the reference's, by relative norm.
void ExpectGradientsMatchCpu(Transformer& cpu, Transformer& gpu, const std::string& what) {
  const std::vector<float> grads = DownloadDevice(gpu.gradients(), cpu.parameter_elements());
  for (const TensorSlot& slot : cpu.layout()) {
    const double difference = RelativeDifference(grads.data() + slot.offset, cpu.gradients() + slot.offset, slot.count);
    EXPECT_LT(difference, kGradientTolerance) << slot.name << " (" << what << ")";
  }
}

// A model with MoE blocks: the routing of both forwards the same on both sides (choices per expert and block, drops),
// and the aux loss within the loss tolerance.
void ExpectSameRouting(Transformer& cpu, Transformer& gpu) {
  tb::MoeStatsSource* cpu_moe = tb::MoeStatsOf(cpu);
  tb::MoeStatsSource* gpu_moe = tb::MoeStatsOf(gpu);
  ASSERT_EQ(cpu_moe == nullptr, gpu_moe == nullptr);
  if (cpu_moe == nullptr) return;
  const tb::MoeStepStats want = cpu_moe->TakeMoeStats();
  const tb::MoeStepStats got = gpu_moe->TakeMoeStats();
  EXPECT_EQ(got.forwards, want.forwards);
  EXPECT_EQ(got.assigned, want.assigned);
  EXPECT_EQ(got.choices, want.choices);
  EXPECT_EQ(got.dropped, want.dropped);
  EXPECT_NEAR(got.aux_loss(), want.aux_loss(), kLossTolerance * want.aux_loss());
  EXPECT_EQ(gpu_moe->TakeMoeStats().forwards, 0);  // taken: counted afresh
}

// Forward and backward on both implementations: the loss, each tensor's gradient (overwritten over NaN) and the order
// gradient_ready reports them in; then a second, smaller batch of odd length (its targets sit at a different offset),
// its gradient scaled and accumulated.
void ExpectForwardAndBackwardMatchCpu(const ModelConfig& config) {
  auto cpu = MakeCpuTransformer(config, 11);
  std::string fallback_reason;
  CudaTransformerOptions options;
  options.max_batch = kBatch;
  auto gpu = MakeCudaTransformer(config, 11, options, &fallback_reason);
  std::string attention = std::string("attention ") + gpu->attention();
  if (!fallback_reason.empty()) attention += std::string(" (") + fallback_reason + ")";
  SCOPED_TRACE(attention);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 12);

  std::vector<size_t> cpu_order;
  std::vector<size_t> gpu_order;
  const size_t n = cpu->parameter_elements();
  FillDevice(gpu->gradients(), n, NAN);  // overwritten: what was there must not matter
  const float cpu_loss = cpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  const float gpu_loss = gpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  EXPECT_NEAR(gpu_loss, cpu_loss, kLossTolerance * cpu_loss);
  cpu->Backward([&](size_t slot) { cpu_order.push_back(slot); });
  gpu->Backward([&](size_t slot) { gpu_order.push_back(slot); });
  EXPECT_EQ(gpu_order, cpu_order);
  size_t held = 0;  // the slots that hold elements (not a dense block's empty router slot)
  for (const TensorSlot& slot : cpu->layout()) held += slot.count > 0 ? 1 : 0;
  EXPECT_EQ(gpu_order.size(), held);

  ExpectGradientsMatchCpu(*cpu, *gpu, "overwritten");
  // wte's padding rows get no gradient.
  const std::vector<float> grads = DownloadDevice(gpu->gradients(), n);
  const TensorSlot& wte = cpu->layout()[0];
  for (size_t i = static_cast<size_t>(config.vocab) * config.d_model; i < wte.count; ++i) {
    ASSERT_EQ(grads[wte.offset + i], 0.0f) << "wte padding element " << i;
  }

  // A second micro-batch, shorter (wpe's later rows get nothing) and with the gradient scale of two micro-batches,
  // accumulated into the first's gradients; the loss stays unscaled.
  cpu->SetGradientScale(0.5f);
  gpu->SetGradientScale(0.5f);
  const Batch shorter = RandomBatch(config.vocab, 1, kSeq - 7, 13);
  const float cpu_shorter = cpu->ForwardBatch(shorter.inputs.data(), shorter.targets.data(), 1, kSeq - 7);
  const float gpu_shorter = gpu->ForwardBatch(shorter.inputs.data(), shorter.targets.data(), 1, kSeq - 7);
  EXPECT_NEAR(gpu_shorter, cpu_shorter, kLossTolerance * cpu_shorter);
  cpu->Backward({}, GradientWrite::kAccumulate);
  gpu->Backward({}, GradientWrite::kAccumulate);
  ExpectGradientsMatchCpu(*cpu, *gpu, "accumulated, scaled");
  ExpectSameRouting(*cpu, *gpu);
}

TEST(CudaTransformer, ForwardAndBackwardMatchCpuReferenceHeadSize16) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  ExpectForwardAndBackwardMatchCpu(SmallHeadsConfig());
}

// MoE blocks (an MoE block, then a dense one; and two MoE blocks) against the reference. Every token chooses every
// expert (top-k = E) with room for all (no drops): the activations' bf16 rounding (about 1% of the residual stream
// here) cannot then tip a choice between two near-equal experts, which would move a token to another expert on one
// side only; the router's softmax, the gates' and the aux loss's gradients and the batched experts are all exercised.
// Top-1 and top-2 routing with dropped choices are compared on identical inputs in gpu_moe_test.cc.
TEST(CudaTransformer, MoeBlocksMatchCpuReference) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  for (const int every : {2, 1}) {
    tb::MoeConfig moe;
    moe.experts = 4;
    moe.top_k = 4;
    moe.expert_ffn = 96;
    moe.every = every;
    moe.capacity_factor = 1.0;  // capacity N·K/E = N: room for every token
    moe.aux_loss_coef = 0.05;
    SCOPED_TRACE("MoE every " + std::to_string(every) + " blocks");
    ExpectForwardAndBackwardMatchCpu(tb::WithMoe(SmallHeadsConfig(), moe));
  }
}

// Expert parallel's path through the whole model over a one-rank expert group (what one GPU can run: NCCL refuses two
// ranks on one device): the same loss and gradients, bit for bit, as the model without a group, top-2 with dropped
// choices, and the all-to-alls' figures in the routing stats (no bytes: the rows go to this rank itself).
TEST(CudaTransformer, MoeOverAOneRankExpertGroupEqualsTheModelWithout) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  tb::MoeConfig moe;
  moe.experts = 4;
  moe.top_k = 2;
  moe.expert_ffn = 96;
  moe.capacity_factor = 0.75;
  const ModelConfig config = tb::WithMoe(SmallHeadsConfig(), moe);
  // The heuristic's first algorithm everywhere: autotuning may pick another for the second model's equal shapes.
  const tb::test::ScopedEnv no_autotune(tb::gpu::kAutotuneVariable, "0");
  const std::unique_ptr<tb::Communicator> group = tb::MakeNcclCommunicator(MPI_COMM_SELF);
  CudaTransformerOptions options;
  options.max_batch = kBatch;
  options.attention = AttentionChoice::kCublas;
  auto alone = MakeCudaTransformer(config, 5, options);
  options.placement.experts.group = group.get();
  auto grouped = MakeCudaTransformer(config, 5, options);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 6);
  const float alone_loss = alone->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  const float grouped_loss = grouped->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  EXPECT_EQ(grouped_loss, alone_loss);
  alone->Backward({});
  grouped->Backward({});
  const size_t n = alone->parameter_elements();
  ASSERT_EQ(grouped->parameter_elements(), n);
  const std::vector<float> want = DownloadDevice(alone->gradients(), n), got = DownloadDevice(grouped->gradients(), n);
  for (const TensorSlot& slot : alone->layout()) {
    const std::vector<float> a = SlotOf(want, slot), b = SlotOf(got, slot);
    if (slot.name == alone->layout()[kWteSlot].name) {  // its embedding scatter adds with atomics, in any order
      EXPECT_LT(RelativeDifference(b.data(), a.data(), a.size()), 1e-6) << slot.name;
    } else {
      EXPECT_EQ(b, a) << slot.name;
    }
  }
  const tb::MoeStepStats alone_stats = tb::MoeStatsOf(*alone)->TakeMoeStats();
  const tb::MoeStepStats grouped_stats = tb::MoeStatsOf(*grouped)->TakeMoeStats();
  EXPECT_EQ(grouped_stats.assigned, alone_stats.assigned);
  EXPECT_GT(grouped_stats.dropped, 0);
  EXPECT_EQ(grouped_stats.dropped, alone_stats.dropped);
  EXPECT_GT(grouped_stats.alltoall.dispatch_s, 0.0);
  EXPECT_GT(grouped_stats.alltoall.combine_s, 0.0);
  EXPECT_EQ(grouped_stats.alltoall.dispatch_bytes, 0u);
  EXPECT_EQ(alone_stats.alltoall.dispatch_s, 0.0);
}

// CUDA graphs (train --cuda-graph): the same passes replayed. Two models from one seed, one with graphs, step after
// step of two micro-batches (scale 1/2: the first backward overwrites, the second accumulates), so that each of the
// three passes runs eagerly, is captured at its second call and replayed after; then a smaller batch (the graphs
// dropped, the passes run, captured and replayed again). Each step the losses and gradients agree: bit for bit with
// cuBLAS's attention (wte's embedding scatter adds with atomics in any order: 1e-6 of its norm), within `tolerance`
// of each tensor's norm with cuDNN's (its backward need not sum in one order); then the graphed model takes the eager
// one's gradients, so that both step from the same state. The replays are counted: a model that never replayed
// fails.
void ExpectGraphedPassesEqualEager(const ModelConfig& config, AttentionChoice attention, double tolerance) {
  const tb::test::ScopedEnv no_autotune(tb::gpu::kAutotuneVariable, "0");  // the same algorithms in both models
  CudaTransformerOptions options;
  options.max_batch = kBatch;
  options.attention = attention;
  auto eager = MakeCudaTransformer(config, 31, options);
  options.cuda_graphs = true;
  auto graphed = MakeCudaTransformer(config, 31, options);
  eager->SetGradientScale(0.5f);
  graphed->SetGradientScale(0.5f);
  const size_t n = eager->parameter_elements();
  const AdamWConfig adamw;
  int64_t step = 0;
  for (const int batch : {kBatch, kBatch, kBatch, 1, 1, 1}) {
    ++step;
    for (const GradientWrite write : {GradientWrite::kOverwrite, GradientWrite::kAccumulate}) {
      const Batch tokens = RandomBatch(config.vocab, batch, kSeq, static_cast<uint64_t>(100 + 2 * step) +
                                                                      (write == GradientWrite::kAccumulate ? 1 : 0));
      const float want = eager->ForwardBatch(tokens.inputs.data(), tokens.targets.data(), batch, kSeq);
      const float got = graphed->ForwardBatch(tokens.inputs.data(), tokens.targets.data(), batch, kSeq);
      if (tolerance == 0) {
        EXPECT_EQ(got, want) << "step " << step;
      } else {
        EXPECT_NEAR(got, want, tolerance * std::fabs(want)) << "step " << step;
      }
      eager->Backward({}, write);
      graphed->Backward({}, write);
    }
    const std::vector<float> want = DownloadDevice(eager->gradients(), n);
    const std::vector<float> got = DownloadDevice(graphed->gradients(), n);
    for (const TensorSlot& slot : eager->layout()) {
      const std::vector<float> a = SlotOf(want, slot), b = SlotOf(got, slot);
      if (tolerance == 0 && slot.name != eager->layout()[kWteSlot].name) {
        EXPECT_EQ(b, a) << slot.name << ", step " << step;
      } else {
        EXPECT_LT(RelativeDifference(b.data(), a.data(), a.size()), std::max(tolerance, 1e-6))
            << slot.name << ", step " << step;
      }
    }
    UploadDevice(graphed->gradients(), want.data(), n);
    eager->AdamWStep(adamw, step);
    graphed->AdamWStep(adamw, step);
  }
  // Per shape: of forward's 6 calls all but the first launched from its graph (the second right after capturing it),
  // of each backward's 3 calls the last 2.
  EXPECT_EQ(eager->graph_replays(), 0u);
  EXPECT_EQ(graphed->graph_replays(), 2u * (5 + 2 + 2));
}

TEST(CudaTransformer, CudaGraphsReplayTheSamePassesWithCublasAttention) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  ExpectGraphedPassesEqualEager(SmallHeadsConfig(), AttentionChoice::kCublas, 0);
}

TEST(CudaTransformer, CudaGraphsReplayTheSamePassesWithCudnnAttention) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  try {
    ExpectGraphedPassesEqualEager(Head64Config(), AttentionChoice::kCudnn, 1e-3);
  } catch (const RuntimeError& error) {
    if (!test::BuiltWithoutCudnnFrontend(error.what())) throw;  // a GPU where cuDNN fails is a failure, not a skip
    GTEST_SKIP() << error.what();
  }
}

// What graphs cannot replay is refused before any device memory is taken.
TEST(CudaTransformer, CudaGraphsRefuseHostWorkInsideThePasses) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  CudaTransformerOptions options;
  options.max_batch = kBatch;
  options.cuda_graphs = true;
  tb::MoeConfig moe;
  moe.experts = 4;
  moe.expert_ffn = 96;
  EXPECT_NE(InputErrorOf([&] { MakeCudaTransformer(tb::WithMoe(SmallHeadsConfig(), moe), 1, options); })
                .find("not built with mixture-of-experts blocks"),
            std::string::npos);
  const ModelConfig config = SmallHeadsConfig();
  options.placement.fsdp = MakeFsdpLayout(MakeLayout(config), 1, 0);
  EXPECT_NE(InputErrorOf([&] { MakeCudaTransformer(config, 1, options); }).find("not built with fsdp"),
            std::string::npos);
}

TEST(CudaTransformer, ForwardAndBackwardMatchCpuReferenceHeadSize64) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  ExpectForwardAndBackwardMatchCpu(Head64Config());
}

// Gradient accumulation on the device alone, where the reference's tolerance would hide a lost or doubled term: two
// micro-batches at scale 1/2, the second accumulated into the first (over NaN: overwritten), against half the sum
// of each one's own overwritten gradients. Scaling by a power of two is exact, so the differences are the fp32
// rounding of the final add, the order of wte's atomic adds, and the bias gradients' summation order (the epilogues
// write them when overwriting, ColumnSum adds them when accumulating): 1e-5 of each tensor's largest value. fc's
// bias more: DGELU_BGRAD sums the fp32 hidden gradient, ColumnSum its bf16 rounding (2^-9 relative per term).
TEST(CudaTransformer, AccumulatedScaledMicroBatchesAreTheMeanOfTheirGradients) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = SmallHeadsConfig();
  auto gpu = MakeGpuModel(config, 17);
  const size_t n = gpu->parameter_elements();
  const Batch first = RandomBatch(config.vocab, kBatch, kSeq, 18);
  const Batch second = RandomBatch(config.vocab, kBatch, kSeq, 19);
  auto gradients_of = [&](const Batch& batch) {
    const float loss = gpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
    gpu->Backward({});
    return std::make_pair(loss, DownloadDevice(gpu->gradients(), n));
  };
  const auto [first_loss, first_grads] = gradients_of(first);
  const auto [second_loss, second_grads] = gradients_of(second);

  FillDevice(gpu->gradients(), n, NAN);
  gpu->SetGradientScale(0.5f);
  EXPECT_EQ(gpu->ForwardBatch(first.inputs.data(), first.targets.data(), kBatch, kSeq), first_loss);  // unscaled
  gpu->Backward({}, GradientWrite::kOverwrite);
  EXPECT_EQ(gpu->ForwardBatch(second.inputs.data(), second.targets.data(), kBatch, kSeq), second_loss);
  gpu->Backward({}, GradientWrite::kAccumulate);
  const std::vector<float> accumulated = DownloadDevice(gpu->gradients(), n);
  std::vector<float> expected(n);
  for (size_t i = 0; i < n; ++i) expected[i] = 0.5f * (first_grads[i] + second_grads[i]);
  for (const TensorSlot& slot : gpu->layout()) {
    const std::vector<float> want = SlotOf(expected, slot);
    float largest = 0.0f;
    for (const float value : want) largest = std::max(largest, std::fabs(value));
    const bool fc_bias = slot.name.find("mlp.fc.bias") != std::string::npos;
    ExpectAllNear(SlotOf(accumulated, slot), want, (fc_bias ? 1e-2f : 1e-5f) * largest, 1e-5f,
                  "accumulated " + slot.name);
  }
}

// AdamW from identical gradients (the CPU's, copied into the device's buffer): the master weights and moments agree
// to fp32 rounding; the bf16 weights follow (the next forward's loss moves as the reference's does); wte's padding
// rows stay zero.
TEST(CudaTransformer, AdamWStepMatchesCpuReference) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = SmallHeadsConfig();
  auto cpu = MakeCpuTransformer(config, 21);
  auto gpu = MakeGpuModel(config, 21);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 22);
  const size_t n = cpu->parameter_elements();
  AdamWConfig adamw;
  adamw.learning_rate = 1e-2f;  // large steps, so that a forward with stale bf16 weights would show
  const float cpu_before = cpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  const float gpu_before = gpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  for (int64_t step = 1; step <= 2; ++step) {
    cpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
    cpu->Backward({});
    UploadDevice(gpu->gradients(), cpu->gradients(), n);
    cpu->AdamWStep(adamw, step);
    gpu->AdamWStep(adamw, step);
  }
  ExpectAllNear(DownloadDevice(gpu->parameters(), n), std::vector<float>(cpu->parameters(), cpu->parameters() + n),
                1e-7f, 1e-6f, "parameters after AdamW");
  ExpectAllNear(DownloadDevice(gpu->adam_m(), n), std::vector<float>(cpu->adam_m(), cpu->adam_m() + n), 1e-7f, 1e-6f,
                "AdamW m");
  ExpectAllNear(DownloadDevice(gpu->adam_v(), n), std::vector<float>(cpu->adam_v(), cpu->adam_v() + n), 1e-7f, 1e-6f,
                "AdamW v");
  const std::vector<float> params = DownloadDevice(gpu->parameters(), n);
  const TensorSlot& wte = cpu->layout()[0];
  for (size_t i = static_cast<size_t>(config.vocab) * config.d_model; i < wte.count; ++i) {
    ASSERT_EQ(params[wte.offset + i], 0.0f) << "wte padding element " << i;
  }

  const float cpu_after = cpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  const float gpu_after = gpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  EXPECT_NEAR(gpu_after, cpu_after, kLossTolerance * cpu_after);
  // The loss moved (two steps down the gradient of this very batch), and the device's moved with it: the change
  // through the GEMM weights, which only the bf16 copy carries, is most of it. Measured on the CPU reference: 4.596
  // -> 3.511, and 4.284 with the GEMM weights left at their initial values (what stale bf16 weights would give).
  const float cpu_change = cpu_after - cpu_before;
  const float gpu_change = gpu_after - gpu_before;
  ASSERT_LT(cpu_change, -0.1f) << "the reference's loss went from " << cpu_before << " to " << cpu_after;
  EXPECT_NEAR(gpu_change, cpu_change, 0.1f * std::fabs(cpu_change) + 0.01f);
}

// Weights written from outside (as a checkpoint restore writes them) reach the GEMMs after ParametersChanged().
// The loader's form of a batch (windows of seq+1 uint16 tokens, unpacked into the pinned staging buffer) gives
// the same loss as the equivalent int32 arrays.
TEST(CudaTransformer, TokenWindowsEqualTheirArrays) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = SmallHeadsConfig();
  auto gpu = MakeGpuModel(config, 17);
  test::WindowBatch b(config.vocab, kBatch, kSeq, 23);
  gpu->SetBatch(b.windows);
  gpu->Forward();
  const float from_windows = gpu->Loss();
  EXPECT_EQ(from_windows, gpu->ForwardBatch(b.inputs.data(), b.targets.data(), kBatch, kSeq));
  b.tokens[kSeq + 3] = static_cast<uint16_t>(config.vocab);
  EXPECT_NE(InputErrorOf([&] { gpu->SetBatch(b.windows); }).find("token 100 at sequence 1, position 2"),
            std::string::npos);
}

TEST(CudaTransformer, ParametersChangedRefreshesTheBf16Weights) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = SmallHeadsConfig();
  auto cpu = MakeCpuTransformer(config, 21);
  auto gpu = MakeGpuModel(config, 21);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 22);
  AdamWConfig adamw;
  adamw.learning_rate = 1e-2f;
  for (int64_t step = 1; step <= 2; ++step) {  // as in AdamWStepMatchesCpuReference: the loss moves by ~1
    cpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
    cpu->Backward({});
    cpu->AdamWStep(adamw, step);
  }
  UploadDevice(gpu->parameters(), cpu->parameters(), cpu->parameter_elements());
  gpu->ParametersChanged();
  const float cpu_loss = cpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  const float gpu_loss = gpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  EXPECT_NEAR(gpu_loss, cpu_loss, kLossTolerance * cpu_loss);
}

TEST(CudaTransformer, OverfitsOneBatch) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = SmallHeadsConfig();
  auto gpu = MakeGpuModel(config, 31);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 32);
  AdamWConfig adamw;
  adamw.learning_rate = 1e-2f;
  float first = 0.0f;
  float last = 0.0f;
  for (int64_t step = 1; step <= 30; ++step) {
    last = gpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
    if (step == 1) first = last;
    gpu->Backward({});
    gpu->AdamWStep(adamw, step);
  }
  // The CPU reference goes from 4.58 to 0.010 over these 30 steps.
  EXPECT_LT(last, 0.2f * first) << "loss went from " << first << " to " << last;
  const std::vector<float> params = DownloadDevice(gpu->parameters(), gpu->parameter_elements());
  const TensorSlot& wte = gpu->layout()[0];
  for (size_t i = static_cast<size_t>(config.vocab) * config.d_model; i < wte.count; ++i) {
    ASSERT_EQ(params[wte.offset + i], 0.0f) << "wte padding element " << i;
  }
}

// cuDNN's fused attention and the cuBLAS path on the same model: the same loss and gradients within the bf16
// tolerances (each is checked against the CPU above; this pins the two against each other on one device).
TEST(CudaTransformer, BothAttentionsAgree) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = Head64Config();
  std::unique_ptr<Transformer> cudnn;
  try {
    cudnn = MakeGpuModel(config, 41, AttentionChoice::kCudnn);
  } catch (const RuntimeError& error) {
    if (!test::BuiltWithoutCudnnFrontend(error.what())) throw;  // a GPU where cuDNN fails is a failure, not a skip
    GTEST_SKIP() << error.what();
  }
  auto cublas = MakeGpuModel(config, 41, AttentionChoice::kCublas);
  EXPECT_EQ(cudnn->attention(), "cudnn-sdpa");
  EXPECT_EQ(cublas->attention(), "cublas");
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 42);
  const float cudnn_loss = cudnn->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  const float cublas_loss = cublas->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  EXPECT_NEAR(cudnn_loss, cublas_loss, kLossTolerance * cublas_loss);
  cudnn->Backward({});
  cublas->Backward({});
  const size_t n = cublas->parameter_elements();
  const std::vector<float> cudnn_grads = DownloadDevice(cudnn->gradients(), n);
  const std::vector<float> cublas_grads = DownloadDevice(cublas->gradients(), n);
  for (const TensorSlot& slot : cublas->layout()) {
    EXPECT_LT(RelativeDifference(cudnn_grads.data() + slot.offset, cublas_grads.data() + slot.offset, slot.count),
              kGradientTolerance)
        << slot.name;
  }
}

// A run of 1-token sequences is decided before its first step: auto takes cuBLAS and says why, cudnn is refused.
TEST(CudaTransformer, OneTokenSequencesDoNotGetCudnn) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  CudaTransformerOptions options;
  options.seq = 1;
  std::string fallback_reason;
  auto model = MakeCudaTransformer(Head64Config(), 1, options, &fallback_reason);
  EXPECT_EQ(model->attention(), "cublas");
  const Batch batch = RandomBatch(Head64Config().vocab, 1, 1, 3);
  EXPECT_TRUE(std::isfinite(model->ForwardBatch(batch.inputs.data(), batch.targets.data(), 1, 1)));
  model->Backward({});
  options.attention = AttentionChoice::kCudnn;
  try {
    MakeCudaTransformer(Head64Config(), 1, options);
    ADD_FAILURE() << "attention 'cudnn' with 1-token sequences was not refused";
  } catch (const RuntimeError& error) {
    if (test::BuiltWithoutCudnnFrontend(error.what())) GTEST_SKIP() << error.what();
    EXPECT_NE(std::string(error.what()).find("1 token"), std::string::npos) << error.what();
    EXPECT_NE(fallback_reason.find("1 token"), std::string::npos) << fallback_reason;
  }
}

TEST(CudaTransformer, AutoAttentionSaysWhatRuns) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  for (const ModelConfig& config : {SmallHeadsConfig(), Head64Config()}) {
    std::string fallback_reason = "not written";
    CudaTransformerOptions options;
    auto gpu = MakeCudaTransformer(config, 1, options, &fallback_reason);
    if (gpu->attention() == "cudnn-sdpa") {
      EXPECT_EQ(fallback_reason, "");
    } else {
      EXPECT_EQ(gpu->attention(), "cublas");
      EXPECT_NE(fallback_reason, "");
      EXPECT_NE(fallback_reason, "not written");
    }
  }
}

TEST(CudaTransformer, RejectsBadBatchesAndCalls) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = SmallHeadsConfig();
  auto gpu = MakeGpuModel(config, 1);
  Batch batch = RandomBatch(config.vocab, kBatch + 1, kSeq, 51);
  const int32_t* in = batch.inputs.data();
  const int32_t* tg = batch.targets.data();
  EXPECT_THROW(gpu->Forward(), RuntimeError);  // before any SetBatch
  EXPECT_THROW(gpu->Backward({}), RuntimeError);
  const std::string too_many = InputErrorOf([&] { gpu->SetBatch(in, tg, kBatch + 1, kSeq); });
  EXPECT_NE(too_many.find("max_batch"), std::string::npos) << too_many;
  EXPECT_NE(InputErrorOf([&] { gpu->SetBatch(in, tg, 1, kSeq + 1); }).find("sequence length"), std::string::npos);
  batch.inputs[kSeq + 5] = config.vocab;
  const std::string message = InputErrorOf([&] { gpu->SetBatch(in, tg, 2, kSeq); });
  EXPECT_NE(message.find("input token 100 at sequence 1, position 5"), std::string::npos) << message;
  batch.inputs[kSeq + 5] = 0;
  gpu->ForwardBatch(in, tg, kBatch, kSeq);
  gpu->Backward({});
  EXPECT_THROW(gpu->Backward({}), RuntimeError);  // once per Forward
  EXPECT_NE(InputErrorOf([&] { gpu->AdamWStep(AdamWConfig{}, 0); }), "");
  CudaTransformerOptions no_batch;
  no_batch.max_batch = 0;
  EXPECT_THROW(MakeCudaTransformer(config, 1, no_batch), InputError);
  const std::string unaligned = InputErrorOf([] { MakeGpuModel(CustomModel(1, 20, 2, 37, 8), 1); });
  EXPECT_NE(unaligned.find("multiple of 8"), std::string::npos) << unaligned;
}

// A model far larger than any device: refused before anything is allocated, naming what it needs and what to do.
TEST(CudaTransformer, RefusesAModelThatDoesNotFit) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = FindPreset("gpt-70b");  // 65e9 parameters: over 1 TB of weights and optimizer state
  try {
    MakeGpuModel(config, 1);
    ADD_FAILURE() << "a 70B-parameter model fitted on one device";
  } catch (const RuntimeError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("free"), std::string::npos) << message;
    EXPECT_NE(message.find("--layers"), std::string::npos) << message;
    EXPECT_NE(message.find("--micro-batch"), std::string::npos) << message;
  }
}

// The phases of one step timed by events on the model's stream: non-negative, and together the host's wall time
// from the first mark to the end of Intervals (a sleep between two marks, with the device idle, shows as such).
TEST(CudaTransformer, PhaseClockIntervalsAddUpToWallTime) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = SmallHeadsConfig();
  auto gpu = MakeGpuModel(config, 61);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 62);
  std::unique_ptr<PhaseClock> clock = gpu->MakePhaseClock();
  for (int step = 0; step < 3; ++step) {  // the same events serve every step
    gpu::SynchronizeDevice();
    const double start = NowSeconds();
    clock->Mark();
    gpu->SetBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
    clock->Mark();
    gpu->Forward();
    clock->Mark();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    clock->Mark();
    gpu->Backward({});
    gpu->AdamWStep(AdamWConfig{}, step + 1);
    clock->Mark();
    const std::vector<double> intervals = clock->Intervals();
    const double wall = NowSeconds() - start;
    ASSERT_EQ(intervals.size(), 4u);
    double sum = 0.0;
    for (double interval : intervals) {
      EXPECT_GE(interval, 0.0);
      sum += interval;
    }
    EXPECT_GE(intervals[2], 0.015) << "the 20 ms sleep between two marks";
    EXPECT_LE(sum, wall + 1e-3);
    EXPECT_GE(sum, 0.8 * wall - 2e-3) << "wall " << wall;
  }
  EXPECT_TRUE(clock->Intervals().empty());
}

// --- pipeline stages on one device ------------------------------------------------------------------------------

// The model in P = 2 stages of one layer each on one GPU (two model objects), two micro-batches in flight on each, run
// as 1F1B runs a stage (F0 F1 B0 B1), the edges carried between the stage objects through the host, against the
// whole CPU reference over the same two micro-batches (gradient scale 1/2, the second accumulated). Each stage
// starts from the whole model's weights for what it holds; the last stage's losses are the reference's; each held
// tensor's gradient is the reference's (wte's the sum of the first stage's embedding copy and the last stage's LM
// head copy), within the whole model's tolerances; each Backward reports the held tensors in the reference's order.
// Every gradient starts as NaN: overwriting must not read it (the first stage's wte, which only the embeddings'
// scatter adds to, included). Slot 0's edges are read after slot 1's Forward or Backward, so a slot that shared its
// activations or edges with the other would show.
TEST(CudaTransformer, PipelineStagesMatchTheWholeCpuReference) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = SmallHeadsConfig();
  constexpr int kStages = 2;
  constexpr int kMicroBatches = 2;
  auto cpu = MakeCpuTransformer(config, 11);
  const std::vector<TensorSlot>& whole = cpu->layout();
  std::vector<std::unique_ptr<Transformer>> stages;
  for (int s = 0; s < kStages; ++s) {
    CudaTransformerOptions options;
    options.max_batch = kBatch;
    options.placement.stage = MakePipelineStage(config, kStages, s, kMicroBatches);
    stages.push_back(MakeCudaTransformer(config, 11, options));
  }
  Transformer& first = *stages.front();
  Transformer& last = *stages.back();

  for (const std::unique_ptr<Transformer>& stage : stages) {
    const int s = stage->placement().stage.stage;
    const std::vector<TensorSlot> expected = StageLayout(whole, stage->placement().stage);
    ASSERT_EQ(stage->layout().size(), whole.size());
    const std::vector<float> params = DownloadDevice(stage->parameters(), stage->parameter_elements());
    for (size_t slot = 0; slot < whole.size(); ++slot) {
      const TensorSlot& held = stage->layout()[slot];
      ASSERT_EQ(held.count, expected[slot].count) << held.name << " on stage " << s;
      EXPECT_EQ(held.offset, expected[slot].offset) << held.name << " on stage " << s;
      size_t different = 0;
      for (size_t i = 0; i < held.count; ++i) {
        different += params[held.offset + i] != cpu->parameters()[whole[slot].offset + i];
      }
      EXPECT_EQ(different, 0u) << "initial " << held.name << " on stage " << s;
    }
    FillDevice(stage->gradients(), stage->parameter_elements(), NAN);
    stage->SetGradientScale(0.5f);
  }
  EXPECT_THROW(first.SelectMicroBatch(kMicroBatches), std::logic_error);

  std::vector<Batch> batches;
  std::vector<float> cpu_losses;
  std::vector<size_t> cpu_order;
  cpu->SetGradientScale(0.5f);
  for (int i = 0; i < kMicroBatches; ++i) {
    batches.push_back(RandomBatch(config.vocab, kBatch, kSeq, 12 + static_cast<uint32_t>(i)));
    cpu_losses.push_back(cpu->ForwardBatch(batches[i].inputs.data(), batches[i].targets.data(), kBatch, kSeq));
    cpu->Backward([&](size_t slot) { cpu_order.push_back(slot); },
                  i == 0 ? GradientWrite::kOverwrite : GradientWrite::kAccumulate);
  }

  const size_t edge_count = static_cast<size_t>(kBatch) * kSeq * config.d_model;
  auto write = [](int i) { return i == 0 ? GradientWrite::kOverwrite : GradientWrite::kAccumulate; };
  std::vector<size_t> orders[kStages];
  for (int i = 0; i < kMicroBatches; ++i) {
    first.SelectMicroBatch(i);
    first.SetBatch(batches[i].inputs.data(), batches[i].targets.data(), kBatch, kSeq);
    first.Forward();
    EXPECT_TRUE(std::isnan(first.Loss())) << "a stage before the last has no loss";
  }
  for (int i = 0; i < kMicroBatches; ++i) {
    first.SelectMicroBatch(i);
    last.SelectMicroBatch(i);
    last.SetBatch(batches[i].inputs.data(), batches[i].targets.data(), kBatch, kSeq);
    const Transformer::StageEdges from = first.stage_edges();
    const Transformer::StageEdges to = last.stage_edges();
    ASSERT_EQ(from.count, edge_count);
    ASSERT_EQ(to.count, edge_count);
    ASSERT_NE(from.output, nullptr);
    ASSERT_NE(to.input, nullptr);
    EXPECT_EQ(from.input, nullptr);
    EXPECT_EQ(from.input_grad, nullptr);
    EXPECT_EQ(to.output, nullptr);
    EXPECT_EQ(to.output_grad, nullptr);
    UploadDevice(to.input, DownloadDevice(from.output, edge_count).data(), edge_count);
    last.Forward();
    EXPECT_NEAR(last.Loss(), cpu_losses[i], kLossTolerance * cpu_losses[i]) << "micro-batch " << i;
  }
  for (int i = 0; i < kMicroBatches; ++i) {
    last.SelectMicroBatch(i);
    last.Backward([&](size_t slot) { orders[1].push_back(slot); }, write(i));
  }
  for (int i = 0; i < kMicroBatches; ++i) {
    last.SelectMicroBatch(i);
    first.SelectMicroBatch(i);
    const Transformer::StageEdges from = last.stage_edges();
    const Transformer::StageEdges to = first.stage_edges();
    ASSERT_NE(from.input_grad, nullptr);
    ASSERT_NE(to.output_grad, nullptr);
    UploadDevice(to.output_grad, DownloadDevice(from.input_grad, edge_count).data(), edge_count);
    first.Backward([&](size_t slot) { orders[0].push_back(slot); }, write(i));
  }

  for (int s = 0; s < kStages; ++s) {
    std::vector<size_t> expected;
    for (size_t slot : cpu_order) {  // both backwards'
      if (StageHoldsSlot(stages[s]->placement().stage, whole, slot)) expected.push_back(slot);
    }
    EXPECT_EQ(orders[s], expected) << "stage " << s;
  }
  std::vector<std::vector<float>> grads;
  for (const std::unique_ptr<Transformer>& stage : stages) {
    grads.push_back(DownloadDevice(stage->gradients(), stage->parameter_elements()));
  }
  for (size_t slot = 0; slot < whole.size(); ++slot) {
    std::vector<float> sum(whole[slot].count, 0.0f);
    int holders = 0;
    for (size_t s = 0; s < stages.size(); ++s) {
      const TensorSlot& held = stages[s]->layout()[slot];
      if (held.count == 0) continue;
      ++holders;
      for (size_t i = 0; i < held.count; ++i) sum[i] += grads[s][held.offset + i];
    }
    EXPECT_EQ(holders, slot == kWteSlot ? 2 : 1) << whole[slot].name;
    EXPECT_LT(RelativeDifference(sum.data(), cpu->gradients() + whole[slot].offset, whole[slot].count),
              kGradientTolerance)
        << whole[slot].name;
  }
}

// fsdp over pipeline stages is not built, and a stage that does not divide the layers is refused, both before any
// device memory is taken; zero1 shards a stage's own elements.
TEST(CudaTransformer, PipelineStageOptions) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = SmallHeadsConfig();
  CudaTransformerOptions options;
  options.max_batch = kBatch;
  options.placement.stage = MakePipelineStage(config, 2, 1, 1);
  options.placement.fsdp = MakeFsdpLayout(MakeLayout(config), 2, 0);
  const std::string fsdp = InputErrorOf([&] { MakeCudaTransformer(config, 1, options); });
  EXPECT_NE(fsdp.find("not built"), std::string::npos) << fsdp;
  options.placement.fsdp = {};
  options.placement.stage.stages = 3;
  const std::string undivided = InputErrorOf([&] { MakeCudaTransformer(config, 1, options); });
  EXPECT_NE(undivided.find("does not divide"), std::string::npos) << undivided;

  options.placement.stage = MakePipelineStage(config, 2, 1, 1);
  const std::vector<TensorSlot> stage_layout = StageLayout(MakeLayout(config), options.placement.stage);
  const size_t elements = stage_layout.back().offset + stage_layout.back().count;
  options.placement.shard = ShardOf(elements, 2, 1);
  auto zero1 = MakeCudaTransformer(config, 1, options);
  EXPECT_EQ(zero1->parameter_elements(), elements);
  EXPECT_EQ(zero1->placement().shard.end, elements);
  EXPECT_EQ(zero1->state_bytes().optimizer,
            4.0 * (options.placement.shard.capacity + 2.0 * options.placement.shard.elements()));
}

// --- FSDP on the device --------------------------------------------------------------------------------------

// The FSDP model alone, without the gatherer or NCCL: over one rank its store is the flat layout, so a flat
// UnitAccess over the store hands each unit its final place, and one step's loss and gradients must be dp's, slot by
// slot. Beside FsdpOverOneRankMatchesDp, this tells a fault of the model's unit views from one of the gatherer.
TEST(CudaTransformer, FsdpModelOverFlatAccessMatchesDp) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  BindGpu(0);
  const ModelConfig config = SmallHeadsConfig();
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 31);
  auto dp = MakeGpuModel(config, 21);
  const size_t n = dp->parameter_elements();
  const float dp_loss = dp->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  dp->Backward({});
  dp->Synchronize();
  const std::vector<float> dp_grads = DownloadDevice(dp->gradients(), n);

  CudaTransformerOptions options;
  options.max_batch = kBatch;
  options.placement.fsdp = MakeFsdpLayout(dp->layout(), 1, 0);
  auto fsdp = MakeCudaTransformer(config, 21, options);
  ASSERT_EQ(fsdp->placement().fsdp.store_elements, n);
  const std::unique_ptr<tb::UnitAccess> access =
      tb::MakeFlatUnitAccess(fsdp->parameters(), fsdp->gradients(), ParameterUnits(dp->layout()));
  fsdp->SetUnitAccess(access.get());
  const float loss = fsdp->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  fsdp->Backward({});
  fsdp->Synchronize();
  EXPECT_NEAR(loss, dp_loss, 1e-5 * dp_loss);
  const std::vector<float> grads = DownloadDevice(fsdp->gradients(), n);
  for (const tb::TensorSlot& slot : dp->layout()) {
    ExpectAllNear(SlotOf(grads, slot), SlotOf(dp_grads, slot), 1e-7f, 1e-5f, "flat access: gradient of " + slot.name);
  }
  fsdp->SetUnitAccess(nullptr);
}

// One step of a model under FSDP, as the train loop takes it: the gatherer's step around forward and backward, then
// AdamW on the shards. Returns the loss.
float FsdpStep(FsdpGatherer& gatherer, Transformer& model, const Batch& batch, const AdamWConfig& adamw, int64_t step,
               FsdpTiming* timing) {
  gatherer.BeginStep();
  const float loss = model.ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  model.Backward({});
  *timing = gatherer.Finish();
  model.AdamWStep(adamw, step);
  return loss;
}

// FSDP on one GPU over a one-rank NCCL communicator: the gatherer's all-gathers and reduce-scatters on device memory
// (started on the communicator's stream after the model's work, and blocking), the model casting each gathered unit
// to bf16 for its GEMMs. Over one rank the shard store is the flat layout itself and the average of one gradient is
// that gradient, so three AdamW steps give the dp model's losses and weights: the same kernels on the same values (the
// bf16 weights cast from the same fp32 ones round alike: both casts are ToBf16, see AdamWWritesTheBf16Copy). The
// tolerances (1e-5 relative) leave room only for kernels that add with atomics in another order. The multi-rank
// split itself is checked on the CPU reference (tests/train_mpi_test.cc), with the same gatherer.
TEST(CudaTransformer, FsdpOverOneRankMatchesDp) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  BindGpu(0);
  const std::unique_ptr<Communicator> comm = MakeNcclCommunicator(MPI_COMM_SELF);
  const ModelConfig config = SmallHeadsConfig();
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 31);
  AdamWConfig adamw;
  adamw.learning_rate = 1e-2f;  // large steps: a stale or wrongly cast unit would show in the next loss
  constexpr int kSteps = 3;
  auto dp = MakeGpuModel(config, 21);
  const size_t n = dp->parameter_elements();
  std::vector<float> dp_losses;
  for (int64_t step = 1; step <= kSteps; ++step) {
    dp_losses.push_back(dp->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq));
    dp->Backward({});
    dp->AdamWStep(adamw, step);
  }
  const std::vector<float> dp_params = DownloadDevice(dp->parameters(), n);
  // The first step's gradients of a fresh dp model, slot by slot below: a slot that differs names the unit whose
  // gather, cast or scatter is wrong.
  auto dp_first = MakeGpuModel(config, 21);
  dp_first->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  dp_first->Backward({});
  const std::vector<float> dp_first_grads = DownloadDevice(dp_first->gradients(), n);
  dp_first->AdamWStep(adamw, 1);
  const std::vector<float> dp_first_params = DownloadDevice(dp_first->parameters(), n);
  const std::vector<ParameterUnit> units = ParameterUnits(dp->layout());
  const size_t block_elements = units[BlockUnit(0)].elements() * static_cast<size_t>(config.layers);
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlapped" : "blocking");
    CudaTransformerOptions options;
    options.max_batch = kBatch;
    options.placement.fsdp = MakeFsdpLayout(dp->layout(), 1, 0);
    auto fsdp = MakeCudaTransformer(config, 21, options);
    ASSERT_EQ(fsdp->placement().fsdp.store_elements, n);
    EXPECT_EQ(fsdp->state_bytes().optimizer, 8.0 * n);
    FsdpGatherer gatherer(*comm, *fsdp, overlap);
    for (int64_t step = 1; step <= kSteps; ++step) {
      FsdpTiming timing;
      const float loss = FsdpStep(gatherer, *fsdp, batch, adamw, step, &timing);
      EXPECT_NEAR(loss, dp_losses[step - 1], 1e-5 * dp_losses[step - 1]) << "step " << step;
      // Every unit gathered for forward and the blocks again for backward; every unit's gradients scattered once.
      EXPECT_EQ(timing.gathered_bytes, (n + block_elements) * sizeof(float));
      EXPECT_EQ(timing.scattered_bytes, n * sizeof(float));
      EXPECT_GT(timing.comm_total_s, 0.0);
      if (step == 1) {  // over one rank the store is the flat layout: the scattered gradients are dp's
        const std::vector<float> grads = DownloadDevice(fsdp->gradients(), n);
        const std::vector<float> params = DownloadDevice(fsdp->parameters(), n);
        for (const tb::TensorSlot& slot : dp->layout()) {
          ExpectAllNear(SlotOf(grads, slot), SlotOf(dp_first_grads, slot), 1e-7f, 1e-5f,
                        "step 1 gradient of " + slot.name);
          ExpectAllNear(SlotOf(params, slot), SlotOf(dp_first_params, slot), 1e-7f, 1e-5f,
                        "step 1 weights of " + slot.name);
        }
      }
    }
    ExpectAllNear(DownloadDevice(fsdp->parameters(), n), dp_params, 1e-7f, 1e-5f, "weights after three steps");
  }
}

// A model is sharded by zero1 or by fsdp, not both: refused before any device memory is taken.
TEST(CudaTransformer, RefusesZero1AndFsdpTogether) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const ModelConfig config = SmallHeadsConfig();
  CudaTransformerOptions options;
  options.max_batch = kBatch;
  options.placement.fsdp = MakeFsdpLayout(MakeLayout(config), 2, 0);
  options.placement.shard = ShardOf(options.placement.fsdp.units.back().end, 2, 0);
  EXPECT_NE(InputErrorOf([&] { MakeCudaTransformer(config, 1, options); }).find("zero1 or by fsdp"), std::string::npos);
}

// --- a build without CUDA --------------------------------------------------------------------------------------

TEST(CudaTransformerStub, SaysBuiltWithoutCuda) {
  if (BuiltWithCuda()) GTEST_SKIP() << "this trainbench was built with CUDA: there is no stub to check";
  try {
    MakeCudaTransformer(CustomModel(1, 16, 2, 37, 8), 1, CudaTransformerOptions{});
    ADD_FAILURE() << "MakeCudaTransformer did not throw in a build without CUDA";
  } catch (const RuntimeError& error) {
    EXPECT_NE(std::string(error.what()).find("built without CUDA"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace tb
