// CUDA kernels of tensor parallelism's vocab-parallel layers and of the add after a row-parallel all-reduce, each
// kernel followed by its launcher; see tp_kernels.h for the contracts and vocab_parallel_math.h for the formulas.
// Elementwise kernels loop with a grid stride, as kernels.cu's do; the cross-entropy's stages run one block per row
// (a vocabulary slice is far longer than a warp) and reduce through CUB's BlockReduce.
#include "cuda/tp_kernels.h"

#include <cub/block/block_reduce.cuh>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "cuda/cuda_check.h"
#include "error.h"
#include "vocab_parallel_math.h"

namespace tb::gpu {
namespace {

constexpr int kThreadsPerBlock = 256;
// The grid of an elementwise kernel stops growing here; the grid stride covers the rest.
constexpr size_t kMaxElementwiseBlocks = 65536;

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

unsigned int ElementwiseBlocks(size_t count) {
  return static_cast<unsigned int>(std::min((count + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxElementwiseBlocks));
}

__device__ size_t GridStart() { return blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; }
__device__ size_t GridStride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

using FloatBlockReduce = cub::BlockReduce<float, kThreadsPerBlock>;
using DoubleBlockReduce = cub::BlockReduce<double, kThreadsPerBlock>;

// --- embedding ------------------------------------------------------------------------------------------

__global__ void VocabEmbeddingForwardKernel(float* out, const int32_t* tokens, const float* wte_local, int channels,
                                            int vocab_begin, int vocab_rows, size_t count) {
  for (size_t i = GridStart(); i < count; i += GridStride()) {
    const size_t row = i / channels;
    const int local_row = vocab_parallel::LocalRow(tokens[row], vocab_begin, vocab_rows);
    out[i] = vocab_parallel::EmbeddingShare(wte_local, local_row, channels, static_cast<int>(i % channels));
  }
}

__global__ void AddPositionEmbeddingKernel(float* out, const float* wpe, int seq, int channels, size_t count) {
  for (size_t i = GridStart(); i < count; i += GridStride()) {
    const size_t row = i / channels;
    out[i] += wpe[(row % seq) * channels + i % channels];
  }
}

__global__ void VocabEmbeddingBackwardKernel(float* wte_local_grad, const float* out_grad, const int32_t* tokens,
                                             int channels, int vocab_begin, int vocab_rows, size_t count) {
  for (size_t i = GridStart(); i < count; i += GridStride()) {
    const size_t row = i / channels;
    const int local_row = vocab_parallel::LocalRow(tokens[row], vocab_begin, vocab_rows);
    if (local_row < 0) continue;
    atomicAdd(&wte_local_grad[static_cast<size_t>(local_row) * channels + i % channels], out_grad[i]);
  }
}

// --- row-parallel output --------------------------------------------------------------------------------

__global__ void BiasResidualAddKernel(float* out, const float* residual, const float* bias, const float* partial,
                                      int channels, size_t count) {
  for (size_t i = GridStart(); i < count; i += GridStride()) {
    out[i] = vocab_parallel::BiasResidual(residual[i], bias[i % channels], partial[i]);
  }
}

// --- vocab-parallel cross-entropy -----------------------------------------------------------------------

__global__ void RowMaxKernel(float* row_max, const float* logits, int vocab_rows, int used) {
  __shared__ FloatBlockReduce::TempStorage scratch;
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab_rows;
  float local = -INFINITY;
  for (int j = threadIdx.x; j < used; j += blockDim.x) local = vocab_parallel::MaxOf(local, row[j]);
  const float total =
      FloatBlockReduce(scratch).Reduce(local, [](float a, float b) { return vocab_parallel::MaxOf(a, b); });
  if (threadIdx.x == 0) row_max[blockIdx.x] = total;  // BlockReduce's result is thread 0's
}

__global__ void RowSumsKernel(float* sums, float* target_logits, const float* logits, const float* row_max,
                              const int32_t* targets, int vocab_rows, int used, int vocab_begin) {
  __shared__ FloatBlockReduce::TempStorage scratch;
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab_rows;
  const float max = row_max[blockIdx.x];
  float local = 0.0f;
  for (int j = threadIdx.x; j < used; j += blockDim.x) local += vocab_parallel::ShiftedExp(row[j], max);
  const float total = FloatBlockReduce(scratch).Sum(local);
  if (threadIdx.x == 0) {
    sums[blockIdx.x] = total;
    const int local_target = vocab_parallel::LocalRow(targets[blockIdx.x], vocab_begin, used);
    target_logits[blockIdx.x] = vocab_parallel::TargetLogit(row, local_target);
  }
}

__global__ void LossAndGradientKernel(Bf16* logits_grad, float* row_losses, const float* logits,
                                      const float* row_max, const float* sums, const float* target_logits,
                                      const int32_t* targets, int vocab_rows, int used, int vocab_begin,
                                      float scale_over_rows) {
  const size_t offset = static_cast<size_t>(blockIdx.x) * vocab_rows;
  const float max = row_max[blockIdx.x];
  const float sum = sums[blockIdx.x];
  const float inverse_sum = 1.0f / sum;
  const int local_target = vocab_parallel::LocalRow(targets[blockIdx.x], vocab_begin, used);
  auto* grad = reinterpret_cast<__nv_bfloat16*>(logits_grad) + offset;
  for (int j = threadIdx.x; j < vocab_rows; j += blockDim.x) {
    const float value =
        vocab_parallel::LogitGradient(logits[offset + j], j, used, local_target, max, inverse_sum, scale_over_rows);
    grad[j] = __float2bfloat16_rn(value);
  }
  if (threadIdx.x == 0) row_losses[blockIdx.x] = vocab_parallel::RowLoss(sum, max, target_logits[blockIdx.x]);
}

// The mean of row_losses into loss (1), summed in double as the reference sums it; one block, so no atomics and the
// same result every run.
__global__ void MeanLossKernel(float* loss, const float* row_losses, size_t rows) {
  __shared__ DoubleBlockReduce::TempStorage scratch;
  double sum = 0.0;
  for (size_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_losses[r];
  const double total = DoubleBlockReduce(scratch).Sum(sum);
  if (threadIdx.x == 0) *loss = static_cast<float>(total / static_cast<double>(rows));
}

// One block per row, up to CUDA's 2^31 − 1 blocks of a grid's x dimension.
unsigned int RowBlocks(size_t rows) {
  if (rows > 0x7fffffffu) throw RuntimeError("vocab-parallel cross-entropy over " + std::to_string(rows) +
                                             " rows: more than one grid of one block per row");
  return static_cast<unsigned int>(rows);
}

}  // namespace

void VocabEmbeddingForward(float* out, const int32_t* tokens, const float* wte_local, size_t rows, int channels,
                           int vocab_begin, int vocab_rows, void* stream) {
  const size_t count = rows * channels;
  if (count == 0) return;
  VocabEmbeddingForwardKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(
      out, tokens, wte_local, channels, vocab_begin, vocab_rows, count);
  TB_CHECK_CUDA_LAUNCH();
}

void AddPositionEmbedding(float* out, const float* wpe, size_t rows, int seq, int channels, void* stream) {
  const size_t count = rows * channels;
  if (count == 0) return;
  AddPositionEmbeddingKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(out, wpe, seq,
                                                                                                channels, count);
  TB_CHECK_CUDA_LAUNCH();
}

void VocabEmbeddingBackward(float* wte_local_grad, const float* out_grad, const int32_t* tokens, size_t rows,
                            int channels, int vocab_begin, int vocab_rows, void* stream) {
  const size_t count = rows * channels;
  if (count == 0) return;
  VocabEmbeddingBackwardKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(
      wte_local_grad, out_grad, tokens, channels, vocab_begin, vocab_rows, count);
  TB_CHECK_CUDA_LAUNCH();
}

void BiasResidualAdd(float* out, const float* residual, const float* bias, const float* partial, size_t rows,
                     int channels, void* stream) {
  const size_t count = rows * channels;
  if (count == 0) return;
  BiasResidualAddKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(out, residual, bias,
                                                                                           partial, channels, count);
  TB_CHECK_CUDA_LAUNCH();
}

void VocabParallelRowMax(float* row_max, const float* logits, size_t rows, int vocab_rows, int used, void* stream) {
  if (rows == 0) return;
  RowMaxKernel<<<RowBlocks(rows), kThreadsPerBlock, 0, AsStream(stream)>>>(row_max, logits, vocab_rows, used);
  TB_CHECK_CUDA_LAUNCH();
}

void VocabParallelRowSums(float* sums, float* target_logits, const float* logits, const float* row_max,
                          const int32_t* targets, size_t rows, int vocab_rows, int used, int vocab_begin,
                          void* stream) {
  if (rows == 0) return;
  RowSumsKernel<<<RowBlocks(rows), kThreadsPerBlock, 0, AsStream(stream)>>>(sums, target_logits, logits, row_max,
                                                                           targets, vocab_rows, used, vocab_begin);
  TB_CHECK_CUDA_LAUNCH();
}

void VocabParallelLossAndGradient(Bf16* logits_grad, float* row_losses, float* loss, const float* logits,
                                  const float* row_max, const float* sums, const float* target_logits,
                                  const int32_t* targets, size_t rows, int vocab_rows, int used, int vocab_begin,
                                  float gradient_scale, void* stream) {
  if (rows == 0) return;
  const float scale_over_rows = gradient_scale / static_cast<float>(rows);
  LossAndGradientKernel<<<RowBlocks(rows), kThreadsPerBlock, 0, AsStream(stream)>>>(
      logits_grad, row_losses, logits, row_max, sums, target_logits, targets, vocab_rows, used, vocab_begin,
      scale_over_rows);
  TB_CHECK_CUDA_LAUNCH();
  MeanLossKernel<<<1, kThreadsPerBlock, 0, AsStream(stream)>>>(loss, row_losses, rows);
  TB_CHECK_CUDA_LAUNCH();
}

}  // namespace tb::gpu
