// CUDA kernels for the non-GEMM layers (fp32 math, fp32 or bf16 tensors), each kernel followed by its launcher;
// see kernels.h for the contracts. Row-wise layers reduce in registers with warp shuffles (LayerNorm: one warp per
// row) or through shared memory (cross-entropy: one block per row, since a vocabulary row is far longer than a
// warp). Reductions over rows (LayerNorm's weight gradients, the bias gradients' column sums) write one partial
// sum per block of rows and add those in a second pass, rather than atomics from every row into the same few
// floats or a few blocks walking every row.
#include "cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "cuda/cuda_check.h"
#include "element_math.h"

namespace tb::gpu {
namespace {

constexpr int kWarpSize = 32;
constexpr int kThreadsPerBlock = 256;
constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarpSize;
// Elementwise kernels loop over the buffer with a grid stride, so the grid need not grow with the buffer.
constexpr size_t kMaxElementwiseBlocks = 65536;

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

unsigned int ElementwiseBlocks(size_t count) {
  return static_cast<unsigned int>(std::min((count + kThreadsPerBlock - 1) / kThreadsPerBlock, kMaxElementwiseBlocks));
}

unsigned int WarpPerRowBlocks(size_t rows) {
  return static_cast<unsigned int>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

// A reduction over rows spread over blocks: at most max_blocks of up to rows_per_block rows each (more when the
// cap binds). Launchers and the scratch sizes they publish both come from here.
struct RowBlocks {
  size_t blocks;
  size_t rows_per_block;
};

RowBlocks SplitRows(size_t rows, size_t rows_per_block, size_t max_blocks) {
  const size_t blocks = std::clamp<size_t>((rows + rows_per_block - 1) / rows_per_block, 1, max_blocks);
  return {blocks, (rows + blocks - 1) / blocks};
}

// LayerNorm backward: 64 rows per block (8 per warp) give gpt2-124m's 16k rows 256 blocks, two per SM and more;
// the second pass then sums at most 512 partial rows.
constexpr size_t kLayerNormRowsPerBlock = 64;
constexpr size_t kLayerNormMaxBlocks = 512;
// Column sums: chunks of 256 rows (32 loads per thread), at most 256 chunks.
constexpr size_t kColumnSumRowsPerChunk = 256;
constexpr size_t kColumnSumMaxChunks = 256;
constexpr int kColumnTile = 32;
constexpr int kColumnSumRowGroups = kThreadsPerBlock / kColumnTile;
// Dynamic shared memory a kernel gets without opting in (cudaFuncAttributeMaxDynamicSharedMemorySize).
constexpr size_t kDefaultSharedBytes = 48 * 1024;

__device__ float WarpSum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ float ShuffleXor(float value, int offset) { return __shfl_xor_sync(0xffffffffu, value, offset); }
__device__ double ShuffleXor(double value, int offset) { return __shfl_xor_sync(0xffffffffu, value, offset); }
__device__ element::SoftmaxAccumulator ShuffleXor(element::SoftmaxAccumulator value, int offset) {
  return {ShuffleXor(value.max, offset), ShuffleXor(value.sum, offset)};
}

// The sum (or max, or merge) over the whole block, returned to every thread. `scratch` holds one value per warp; the
// leading __syncthreads lets a caller reuse it for consecutive reductions.
template <typename T, typename Combine>
__device__ T BlockReduce(T value, T* scratch, Combine combine) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = combine(value, ShuffleXor(value, offset));
  }
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int warps = blockDim.x / kWarpSize;
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  T total = scratch[0];
  for (int w = 1; w < warps; ++w) total = combine(total, scratch[w]);
  return total;
}

// fp32 in registers, fp32 or bf16 in memory: templated kernels read and write either through these.
__device__ float LoadFloat(const float* p) { return *p; }
__device__ float LoadFloat(const Bf16* p) { return __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(p)); }
__device__ void StoreFloat(float* p, float value) { *p = value; }
__device__ void StoreFloat(Bf16* p, float value) {
  *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(value);
}

// --- encoder --------------------------------------------------------------------------------------------

__global__ void EncoderForwardKernel(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                                     int seq, int channels, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / channels;
    const int c = static_cast<int>(i % channels);
    const int t = static_cast<int>(row % seq);
    out[i] = wte[static_cast<size_t>(tokens[row]) * channels + c] + wpe[static_cast<size_t>(t) * channels + c];
  }
}

__global__ void EncoderBackwardKernel(float* wte_grad, float* wpe_grad, const float* out_grad,
                                      const int32_t* tokens, int seq, int channels, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / channels;
    const int c = static_cast<int>(i % channels);
    const int t = static_cast<int>(row % seq);
    atomicAdd(&wte_grad[static_cast<size_t>(tokens[row]) * channels + c], out_grad[i]);
    atomicAdd(&wpe_grad[static_cast<size_t>(t) * channels + c], out_grad[i]);
  }
}

// --- LayerNorm ------------------------------------------------------------------------------------------

template <typename Out>
__global__ void LayerNormForwardKernel(Out* out, float* mean, float* rstd, const float* in, const float* weight,
                                       const float* bias, size_t rows, int channels) {
  const size_t row = blockIdx.x * static_cast<size_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const float* x = in + row * channels;
  Out* y = out + row * channels;
  float sum = 0.0f;
  for (int c = lane; c < channels; c += kWarpSize) sum += x[c];
  const float m = WarpSum(sum) / channels;
  // Two passes, as the reference: the variance of centred values does not cancel when |mean| >> stddev.
  float squares = 0.0f;
  for (int c = lane; c < channels; c += kWarpSize) {
    const float centred = x[c] - m;
    squares += centred * centred;
  }
  const float s = rsqrtf(WarpSum(squares) / channels + 1e-5f);
  for (int c = lane; c < channels; c += kWarpSize) StoreFloat(&y[c], (x[c] - m) * s * weight[c] + bias[c]);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// One warp per row, the block's rows [blockIdx.x·rows_per_block, ...) shared by its warps; in_grad directly, the
// weight and bias gradients of the block's rows summed in shared memory, then written to its row of partials
// (blocks, 2C): weight gradient in [0, C), bias gradient in [C, 2C).
template <typename OutGrad>
__global__ void LayerNormBackwardKernel(float* in_grad, float* partials, const OutGrad* out_grad, const float* in,
                                        const float* weight, const float* mean, const float* rstd, size_t rows,
                                        int channels, size_t rows_per_block) {
  extern __shared__ float block_sums[];  // (2C)
  for (int c = threadIdx.x; c < 2 * channels; c += blockDim.x) block_sums[c] = 0.0f;
  __syncthreads();
  const int lane = threadIdx.x % kWarpSize;
  const size_t first = blockIdx.x * rows_per_block;
  const size_t last = first + rows_per_block < rows ? first + rows_per_block : rows;
  for (size_t row = first + threadIdx.x / kWarpSize; row < last; row += kWarpsPerBlock) {
    const float* x = in + row * channels;
    const OutGrad* dy = out_grad + row * channels;
    float* dx = in_grad + row * channels;
    const float m = mean[row];
    const float s = rstd[row];
    // With n = (x - mean)·rstd and g = out_grad·weight: dx = rstd·(g - mean(g) - n·mean(g·n)).
    float g_sum = 0.0f;
    float gn_sum = 0.0f;
    for (int c = lane; c < channels; c += kWarpSize) {
      const float g = LoadFloat(&dy[c]) * weight[c];
      g_sum += g;
      gn_sum += g * (x[c] - m) * s;
    }
    const float g_mean = WarpSum(g_sum) / channels;
    const float gn_mean = WarpSum(gn_sum) / channels;
    for (int c = lane; c < channels; c += kWarpSize) {
      const float norm = (x[c] - m) * s;
      const float out_grad_c = LoadFloat(&dy[c]);
      const float g = out_grad_c * weight[c];
      dx[c] += s * (g - g_mean - norm * gn_mean);
      atomicAdd(&block_sums[c], out_grad_c * norm);  // shared memory: the block's warps, not the grid
      atomicAdd(&block_sums[channels + c], out_grad_c);
    }
  }
  __syncthreads();
  float* partial = partials + blockIdx.x * 2 * static_cast<size_t>(channels);
  for (int c = threadIdx.x; c < 2 * channels; c += blockDim.x) partial[c] = block_sums[c];
}

// --- column sums ----------------------------------------------------------------------------------------

// Column sums of in (rows, cols; leading dimension ld) over chunks of rows_per_chunk rows, one chunk per blockIdx.y
// and 32 columns per blockIdx.x, written to out[chunk·cols + col]; with `accumulate` (one chunk) added to
// out[col] instead. Each sum runs in a fixed order (each row group's rows, then the groups in order): the same
// result on every run.
template <typename In>
__global__ void ColumnSumKernel(float* out, bool accumulate, const In* in, size_t rows, int cols, size_t ld,
                                size_t rows_per_chunk) {
  __shared__ float partial[kColumnSumRowGroups][kColumnTile + 1];
  const int col = blockIdx.x * kColumnTile + threadIdx.x;
  const size_t first = blockIdx.y * rows_per_chunk;
  const size_t last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
  float sum = 0.0f;
  if (col < cols) {
    for (size_t r = first + threadIdx.y; r < last; r += kColumnSumRowGroups) sum += LoadFloat(&in[r * ld + col]);
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int g = 0; g < kColumnSumRowGroups; ++g) total += partial[g][threadIdx.x];
    if (accumulate) {
      out[col] += total;
    } else {
      out[blockIdx.y * static_cast<size_t>(cols) + col] = total;
    }
  }
}

// --- elementwise ----------------------------------------------------------------------------------------

__global__ void GeluForwardKernel(float* out, const float* in, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = element::Gelu(in[i]);
  }
}

__global__ void GeluBackwardKernel(float* grad, const float* in, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    grad[i] *= element::GeluGrad(in[i]);
  }
}

__global__ void ResidualAddKernel(float* out, const float* a, const float* b, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

__global__ void CastToBf16Kernel(Bf16* out, const float* in, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    StoreFloat(&out[i], in[i]);
  }
}

// --- cross-entropy --------------------------------------------------------------------------------------

// One block per row: the max and the normaliser in one read of the row (online softmax), then the gradient in a
// second. logits_grad may be the logits themselves (fp32): each element is read before its own thread writes it,
// and the target's logit before the reduction's barriers.
template <typename Grad>
__global__ void CrossEntropyForwardBackwardKernel(Grad* logits_grad, float* row_losses, const float* logits,
                                                  const int32_t* targets, int vocab, int vocab_padded,
                                                  float inverse_rows) {
  __shared__ element::SoftmaxAccumulator scratch[kThreadsPerBlock / kWarpSize];
  const size_t offset = static_cast<size_t>(blockIdx.x) * vocab_padded;
  const float* row = logits + offset;
  Grad* grad = logits_grad + offset;
  const int target = targets[blockIdx.x];
  const float target_logit = row[target];
  element::SoftmaxAccumulator softmax;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) softmax = element::SoftmaxAdd(softmax, row[j]);
  softmax = BlockReduce(softmax, scratch, [](element::SoftmaxAccumulator a, element::SoftmaxAccumulator b) {
    return element::SoftmaxMerge(a, b);
  });
  const float inverse_sum = 1.0f / softmax.sum;
  for (int j = threadIdx.x; j < vocab_padded; j += blockDim.x) {
    float value = 0.0f;  // the padding columns
    if (j < vocab) value = (expf(row[j] - softmax.max) * inverse_sum - (j == target ? 1.0f : 0.0f)) * inverse_rows;
    StoreFloat(&grad[j], value);
  }
  // -log softmax(target) from the logits themselves: exact even where the probability underflows.
  if (threadIdx.x == 0) row_losses[blockIdx.x] = logf(softmax.sum) + softmax.max - target_logit;
}

// The mean of row_losses into loss (1), in double as the reference sums it; one block, so no atomics and the
// same result every run.
__global__ void MeanLossKernel(float* loss, const float* row_losses, size_t rows) {
  __shared__ double scratch[kThreadsPerBlock / kWarpSize];
  double sum = 0.0;
  for (size_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_losses[r];
  sum = BlockReduce(sum, scratch, [](double a, double b) { return a + b; });
  if (threadIdx.x == 0) *loss = static_cast<float>(sum / static_cast<double>(rows));
}

// --- AdamW ----------------------------------------------------------------------------------------------

__global__ void AdamWKernel(float* params, const float* grads, float* m, float* v, Bf16* params_bf16, size_t count,
                            float learning_rate, float beta1, float beta2, float epsilon, float weight_decay,
                            float m_correction, float v_correction) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float param = params[i];
    element::AdamWElement(param, grads[i], m[i], v[i], learning_rate, beta1, beta2, epsilon, weight_decay,
                          m_correction, v_correction);
    params[i] = param;
    if (params_bf16 != nullptr) StoreFloat(&params_bf16[i], param);
  }
}

}  // namespace

void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int batch, int seq,
                    int channels, void* stream) {
  const size_t count = static_cast<size_t>(batch) * seq * channels;
  if (count == 0) return;
  EncoderForwardKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(out, tokens, wte, wpe,
                                                                                          seq, channels, count);
  TB_CHECK_CUDA_LAUNCH();
}

void EncoderBackward(float* wte_grad, float* wpe_grad, const float* out_grad, const int32_t* tokens, int batch,
                     int seq, int channels, void* stream) {
  const size_t count = static_cast<size_t>(batch) * seq * channels;
  if (count == 0) return;
  EncoderBackwardKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(
      wte_grad, wpe_grad, out_grad, tokens, seq, channels, count);
  TB_CHECK_CUDA_LAUNCH();
}

namespace {

template <typename Out>
void LaunchLayerNormForward(Out* out, float* mean, float* rstd, const float* in, const float* weight,
                            const float* bias, size_t rows, int channels, void* stream) {
  if (rows == 0) return;
  LayerNormForwardKernel<<<WarpPerRowBlocks(rows), kThreadsPerBlock, 0, AsStream(stream)>>>(
      out, mean, rstd, in, weight, bias, rows, channels);
  TB_CHECK_CUDA_LAUNCH();
}

template <typename In>
void LaunchColumnSum(float* out, bool accumulate, const In* in, size_t rows, int cols, size_t ld, RowBlocks split,
                     cudaStream_t stream) {
  const dim3 block(kColumnTile, kColumnSumRowGroups);
  const dim3 grid(static_cast<unsigned int>((cols + kColumnTile - 1) / kColumnTile),
                  static_cast<unsigned int>(split.blocks));
  ColumnSumKernel<<<grid, block, 0, stream>>>(out, accumulate, in, rows, cols, ld, split.rows_per_block);
  TB_CHECK_CUDA_LAUNCH();
}

// Adds the (blocks, ld) partial sums' first `cols` columns, block by block, into out (cols).
void AddPartialSums(float* out, const float* partials, size_t blocks, int cols, size_t ld, cudaStream_t stream) {
  LaunchColumnSum(out, true, partials, blocks, cols, ld, RowBlocks{1, blocks}, stream);
}

template <typename OutGrad>
void LaunchLayerNormBackward(float* in_grad, float* weight_grad, float* bias_grad, const OutGrad* out_grad,
                             const float* in, const float* weight, const float* mean, const float* rstd, size_t rows,
                             int channels, float* scratch, void* stream) {
  if (rows == 0) return;
  const RowBlocks split = SplitRows(rows, kLayerNormRowsPerBlock, kLayerNormMaxBlocks);
  const size_t shared_bytes = 2 * static_cast<size_t>(channels) * sizeof(float);
  if (shared_bytes > kDefaultSharedBytes) {  // d_model above 6144; Hopper allows up to 227 KiB (C = 29056)
    TB_CHECK_CUDA(cudaFuncSetAttribute(LayerNormBackwardKernel<OutGrad>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared_bytes)));
  }
  LayerNormBackwardKernel<<<static_cast<unsigned int>(split.blocks), kThreadsPerBlock, shared_bytes,
                            AsStream(stream)>>>(in_grad, scratch, out_grad, in, weight, mean, rstd, rows, channels,
                                                split.rows_per_block);
  TB_CHECK_CUDA_LAUNCH();
  const size_t ld = 2 * static_cast<size_t>(channels);
  AddPartialSums(weight_grad, scratch, split.blocks, channels, ld, AsStream(stream));
  AddPartialSums(bias_grad, scratch + channels, split.blocks, channels, ld, AsStream(stream));
}

}  // namespace

void LayerNormForward(float* out, float* mean, float* rstd, const float* in, const float* weight,
                      const float* bias, size_t rows, int channels, void* stream) {
  LaunchLayerNormForward(out, mean, rstd, in, weight, bias, rows, channels, stream);
}

void LayerNormForward(Bf16* out, float* mean, float* rstd, const float* in, const float* weight, const float* bias,
                      size_t rows, int channels, void* stream) {
  LaunchLayerNormForward(out, mean, rstd, in, weight, bias, rows, channels, stream);
}

void LayerNormBackward(float* in_grad, float* weight_grad, float* bias_grad, const float* out_grad,
                       const float* in, const float* weight, const float* mean, const float* rstd, size_t rows,
                       int channels, float* scratch, void* stream) {
  LaunchLayerNormBackward(in_grad, weight_grad, bias_grad, out_grad, in, weight, mean, rstd, rows, channels, scratch,
                          stream);
}

void LayerNormBackward(float* in_grad, float* weight_grad, float* bias_grad, const Bf16* out_grad, const float* in,
                       const float* weight, const float* mean, const float* rstd, size_t rows, int channels,
                       float* scratch, void* stream) {
  LaunchLayerNormBackward(in_grad, weight_grad, bias_grad, out_grad, in, weight, mean, rstd, rows, channels, scratch,
                          stream);
}

size_t LayerNormBackwardScratchFloats(size_t rows, int channels) {
  return SplitRows(rows, kLayerNormRowsPerBlock, kLayerNormMaxBlocks).blocks * 2 * static_cast<size_t>(channels);
}

void ColumnSum(float* out, const Bf16* in, size_t rows, int cols, float* scratch, void* stream) {
  if (rows == 0 || cols < 1) return;
  const RowBlocks split = SplitRows(rows, kColumnSumRowsPerChunk, kColumnSumMaxChunks);
  LaunchColumnSum(scratch, false, in, rows, cols, static_cast<size_t>(cols), split, AsStream(stream));
  AddPartialSums(out, scratch, split.blocks, cols, static_cast<size_t>(cols), AsStream(stream));
}

size_t ColumnSumScratchFloats(size_t rows, int cols) {
  return SplitRows(rows, kColumnSumRowsPerChunk, kColumnSumMaxChunks).blocks * static_cast<size_t>(std::max(cols, 0));
}

void GeluForward(float* out, const float* in, size_t count, void* stream) {
  if (count == 0) return;
  GeluForwardKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(out, in, count);
  TB_CHECK_CUDA_LAUNCH();
}

void GeluBackward(float* grad, const float* in, size_t count, void* stream) {
  if (count == 0) return;
  GeluBackwardKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(grad, in, count);
  TB_CHECK_CUDA_LAUNCH();
}

void ResidualAdd(float* out, const float* a, const float* b, size_t count, void* stream) {
  if (count == 0) return;
  ResidualAddKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(out, a, b, count);
  TB_CHECK_CUDA_LAUNCH();
}

void CastToBf16(Bf16* out, const float* in, size_t count, void* stream) {
  if (count == 0) return;
  CastToBf16Kernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(out, in, count);
  TB_CHECK_CUDA_LAUNCH();
}

namespace {

template <typename Grad>
void LaunchCrossEntropy(Grad* logits_grad, float* row_losses, float* loss, const float* logits,
                        const int32_t* targets, size_t rows, int vocab, int vocab_padded, void* stream) {
  if (rows == 0) return;
  const float inverse_rows = 1.0f / static_cast<float>(rows);
  CrossEntropyForwardBackwardKernel<<<static_cast<unsigned int>(rows), kThreadsPerBlock, 0, AsStream(stream)>>>(
      logits_grad, row_losses, logits, targets, vocab, vocab_padded, inverse_rows);
  TB_CHECK_CUDA_LAUNCH();
  MeanLossKernel<<<1, kThreadsPerBlock, 0, AsStream(stream)>>>(loss, row_losses, rows);
  TB_CHECK_CUDA_LAUNCH();
}

}  // namespace

void CrossEntropyForwardBackward(Bf16* logits_grad, float* row_losses, float* loss, const float* logits,
                                 const int32_t* targets, size_t rows, int vocab, int vocab_padded, void* stream) {
  LaunchCrossEntropy(logits_grad, row_losses, loss, logits, targets, rows, vocab, vocab_padded, stream);
}

void CrossEntropyForwardBackward(float* logits_grad, float* row_losses, float* loss, const float* logits,
                                 const int32_t* targets, size_t rows, int vocab, int vocab_padded, void* stream) {
  LaunchCrossEntropy(logits_grad, row_losses, loss, logits, targets, rows, vocab, vocab_padded, stream);
}

void AdamWUpdate(float* params, const float* grads, float* m, float* v, size_t count, const AdamWConfig& config,
                 float weight_decay, int64_t step, void* stream, Bf16* params_bf16) {
  if (count == 0) return;
  // Bias corrections in double on the host, exactly as cpu::AdamWUpdate computes them.
  const float m_correction = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(config.beta1), step)));
  const float v_correction = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(config.beta2), step)));
  AdamWKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(
      params, grads, m, v, params_bf16, count, config.learning_rate, config.beta1, config.beta2, config.epsilon,
      weight_decay, m_correction, v_correction);
  TB_CHECK_CUDA_LAUNCH();
}

DeviceMemory::DeviceMemory(size_t bytes) : bytes_(bytes) {
  if (bytes_ > 0) TB_CHECK_CUDA(cudaMalloc(&data_, bytes_));
}

// A failed cudaFree means the context is already broken, and the call that broke it has reported.
DeviceMemory::~DeviceMemory() {
  if (data_ != nullptr) (void)cudaFree(data_);
}

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) (void)cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void SynchronizeDevice() { TB_CHECK_CUDA(cudaDeviceSynchronize()); }

}  // namespace tb::gpu
