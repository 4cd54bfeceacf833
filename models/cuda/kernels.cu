// CUDA kernels for the non-GEMM layers (fp32 math, fp32 or bf16 tensors), each kernel followed by its launcher;
// see kernels.h for the contracts. Row-wise layers reduce in registers with warp shuffles (LayerNorm: one warp per
// row) or through shared memory (cross-entropy: one block per row, since a vocabulary row is far longer than a
// warp). Reductions over rows (LayerNorm's weight gradients, the bias gradients' column sums) write one partial
// sum per block of rows and add those in a second pass, rather than atomics from every row into the same few
// floats or a few blocks walking every row. The kernels that move the most bytes per step (LayerNorm backward,
// cross-entropy, AdamW) load 16 bytes at a time where the shapes and pointers allow it.
#include "cuda/kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/adamw_table.h"
#include "cuda/cuda_check.h"
#include "cuda/float_access.cuh"
#include "element_math.h"
#include "error.h"

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

// LayerNorm backward: up to 8 warps (one row each at a time) per block, each warp with 2C floats of shared memory for
// its sums of the weight gradients, as many blocks as fit each SM at once (by shared memory and threads).
constexpr int kLayerNormMaxWarps = 8;
// Cross-entropy with the row in shared memory: 1024 threads, one block per SM (a GPT-2 row is 201 KB).
constexpr int kCrossEntropyRowThreads = 1024;
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

// What the launch shapes depend on, queried once per device.
struct DeviceLimits {
  int multiprocessors = 0;
  size_t shared_per_multiprocessor = 0;
  size_t shared_per_block_optin = 0;  // what a block may have after cudaFuncAttributeMaxDynamicSharedMemorySize
};

const DeviceLimits& CurrentDeviceLimits() {
  static std::mutex mutex;
  static std::map<int, DeviceLimits> known;
  int device = 0;
  TB_CHECK_CUDA(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  if (const auto found = known.find(device); found != known.end()) return found->second;
  int multiprocessors = 0, per_multiprocessor = 0, optin = 0;
  TB_CHECK_CUDA(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  TB_CHECK_CUDA(cudaDeviceGetAttribute(&per_multiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  TB_CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return known
      .emplace(device, DeviceLimits{multiprocessors, static_cast<size_t>(per_multiprocessor),
                                    static_cast<size_t>(optin)})
      .first->second;
}

// Lets `kernel` take `bytes` of dynamic shared memory (needed above 48 KiB).
template <typename Kernel>
void AllowSharedBytes(Kernel kernel, size_t bytes) {
  if (bytes > kDefaultSharedBytes) {
    TB_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
}

bool Aligned(const void* pointer, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(pointer) % bytes == 0; }

// kVec consecutive values as floats: one 16-byte load for 8 bf16 or (twice) 4 floats, scalar loads for kVec 1.
// Vector loads need the address aligned to their size.
template <int kVec>
__device__ void LoadVec(const float* p, float (&out)[kVec]) {
  if constexpr (kVec % 4 == 0) {
    for (int i = 0; i < kVec; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(p + i);
      out[i] = v.x, out[i + 1] = v.y, out[i + 2] = v.z, out[i + 3] = v.w;
    }
  } else {
    for (int i = 0; i < kVec; ++i) out[i] = p[i];
  }
}

template <int kVec>
__device__ void LoadVec(const Bf16* p, float (&out)[kVec]) {
  if constexpr (kVec == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
    for (int i = 0; i < 4; ++i) {
      const float2 pair = __bfloat1622float2(pairs[i]);
      out[2 * i] = pair.x, out[2 * i + 1] = pair.y;
    }
  } else {
    for (int i = 0; i < kVec; ++i) out[i] = LoadFloat(p + i);
  }
}

template <int kVec>
__device__ void StoreVec(float* p, const float (&values)[kVec]) {
  if constexpr (kVec % 4 == 0) {
    for (int i = 0; i < kVec; i += 4) {
      *reinterpret_cast<float4*>(p + i) = make_float4(values[i], values[i + 1], values[i + 2], values[i + 3]);
    }
  } else {
    for (int i = 0; i < kVec; ++i) p[i] = values[i];
  }
}

// Rounded to nearest even, as StoreFloat; 4 values in one 8-byte store, 8 in one 16-byte store.
template <int kVec>
__device__ void StoreVec(Bf16* p, const float (&values)[kVec]) {
  if constexpr (kVec % 4 == 0) {
    for (int i = 0; i < kVec; i += 4) {
      __nv_bfloat162 pairs[2] = {__floats2bfloat162_rn(values[i], values[i + 1]),
                                 __floats2bfloat162_rn(values[i + 2], values[i + 3])};
      *reinterpret_cast<uint2*>(p + i) = *reinterpret_cast<const uint2*>(pairs);
    }
  } else {
    for (int i = 0; i < kVec; ++i) StoreFloat(p + i, values[i]);
  }
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

// wte_grad += out_grad at each token's row (atomics: tokens repeat).
__global__ void TokenEmbeddingBackwardKernel(float* wte_grad, const float* out_grad, const int32_t* tokens,
                                             int channels, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t row = i / channels;
    atomicAdd(&wte_grad[static_cast<size_t>(tokens[row]) * channels + i % channels], out_grad[i]);
  }
}

// One thread per element (t, c) of wpe_grad (positions, C): the sum over the batch of out_grad (B, seq, C) at
// position t, added in batch order to the old value (accumulate) or to 0; positions past seq get 0 (or keep theirs).
__global__ void PositionEmbeddingBackwardKernel(float* wpe_grad, const float* out_grad, int batch, int seq,
                                                int channels, size_t count, bool accumulate) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t t = i / channels;
    float sum = accumulate ? wpe_grad[i] : 0.0f;
    if (t < static_cast<size_t>(seq)) {
      for (int b = 0; b < batch; ++b) sum += out_grad[static_cast<size_t>(b) * seq * channels + i];
    }
    wpe_grad[i] = sum;
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

// One warp per row, rows blockIdx.x·warps + warp, then a grid's worth of rows further, and so on; each lane takes
// kVec consecutive channels at a time. in_grad (and its bf16 copy) directly; each warp sums its rows' weight and
// bias gradients in its own (2C) stretch of shared memory, each lane only its own channels (no atomics, no
// barrier), and at the end the block adds its warps' sums in warp order into its row of partials (blocks, 2C):
// weight gradient in [0, C), bias gradient in [C, 2C). The rows are read twice (the sums of the row, then in_grad),
// the second time mostly from L1: a warp's row is 6 to 10 bytes per channel.
template <typename OutGrad, int kVec>
__global__ void LayerNormBackwardKernel(float* in_grad, Bf16* in_grad_bf16, float* partials, const OutGrad* out_grad,
                                        const float* in, const float* weight, const float* mean, const float* rstd,
                                        size_t rows, int channels) {
  extern __shared__ float warp_sums[];  // (warps, 2C)
  const int warps = blockDim.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  float* weight_sums = warp_sums + (threadIdx.x / kWarpSize) * 2 * static_cast<size_t>(channels);
  float* bias_sums = weight_sums + channels;
  const int first_channel = lane * kVec;
  constexpr int kChannelStride = kWarpSize * kVec;
  for (int c = first_channel; c < channels; c += kChannelStride) {
    for (int i = 0; i < kVec; ++i) weight_sums[c + i] = bias_sums[c + i] = 0.0f;
  }
  for (size_t row = blockIdx.x * static_cast<size_t>(warps) + threadIdx.x / kWarpSize; row < rows;
       row += static_cast<size_t>(gridDim.x) * warps) {
    const size_t offset = row * channels;
    const float m = mean[row];
    const float s = rstd[row];
    // With n = (x - mean)·rstd and g = out_grad·weight: dx = rstd·(g - mean(g) - n·mean(g·n)).
    float g_sum = 0.0f;
    float gn_sum = 0.0f;
    for (int c = first_channel; c < channels; c += kChannelStride) {
      float dy[kVec], x[kVec], w[kVec];
      LoadVec(out_grad + offset + c, dy);
      LoadVec(in + offset + c, x);
      LoadVec(weight + c, w);
      for (int i = 0; i < kVec; ++i) {
        const float norm = (x[i] - m) * s;
        const float g = dy[i] * w[i];
        g_sum += g;
        gn_sum += g * norm;
        weight_sums[c + i] += dy[i] * norm;
        bias_sums[c + i] += dy[i];
      }
    }
    const float g_mean = WarpSum(g_sum) / channels;
    const float gn_mean = WarpSum(gn_sum) / channels;
    for (int c = first_channel; c < channels; c += kChannelStride) {
      float dy[kVec], x[kVec], w[kVec], dx[kVec];
      LoadVec(out_grad + offset + c, dy);
      LoadVec(in + offset + c, x);
      LoadVec(weight + c, w);
      LoadVec(in_grad + offset + c, dx);
      for (int i = 0; i < kVec; ++i) {
        const float norm = (x[i] - m) * s;
        dx[i] += s * (dy[i] * w[i] - g_mean - norm * gn_mean);
      }
      StoreVec(in_grad + offset + c, dx);
      if (in_grad_bf16 != nullptr) StoreVec(in_grad_bf16 + offset + c, dx);
    }
  }
  __syncthreads();
  float* partial = partials + blockIdx.x * 2 * static_cast<size_t>(channels);
  for (int j = threadIdx.x; j < 2 * channels; j += blockDim.x) {
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += warp_sums[w * 2 * static_cast<size_t>(channels) + j];
    partial[j] = total;
  }
}

// --- column sums ----------------------------------------------------------------------------------------

// Where ColumnSumKernel puts column col's sum: per chunk into partial rows, or written over or added to a final
// vector that may be split in two (columns from `split` on go to `high`: LayerNorm's weight and bias gradients).
struct ColumnSumOut {
  enum Mode { kPartials, kWrite, kAdd };
  Mode mode;
  float* low;
  float* high;  // columns [split, cols), at high[col - split]
  int split;
};

// Column sums of in (rows, cols; leading dimension ld) over chunks of rows_per_chunk rows, one chunk per blockIdx.y
// and 32 columns per blockIdx.x, written to partials[chunk·cols + col] (kPartials), or (one chunk) written to or
// added to out[col]. Each sum runs in a fixed order (each row group's rows, then the groups in order): the same
// result on every run.
template <typename In>
__global__ void ColumnSumKernel(ColumnSumOut out, const In* in, size_t rows, int cols, size_t ld,
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
  if (threadIdx.y != 0 || col >= cols) return;
  float total = 0.0f;
  for (int g = 0; g < kColumnSumRowGroups; ++g) total += partial[g][threadIdx.x];
  if (out.mode == ColumnSumOut::kPartials) {
    out.low[blockIdx.y * static_cast<size_t>(cols) + col] = total;
    return;
  }
  float* target = col < out.split ? &out.low[col] : &out.high[col - out.split];
  *target = out.mode == ColumnSumOut::kAdd ? *target + total : total;
}

// --- elementwise ----------------------------------------------------------------------------------------

__global__ void GeluForwardKernel(float* out, const float* in, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = element::Gelu(in[i]);
  }
}

// fp32, or bf16 (the batched GEMMs' fallback) with fp32 math and one rounding of the product.
template <typename T>
__global__ void GeluBackwardKernel(T* grad, const T* in, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    StoreFloat(&grad[i], LoadFloat(&grad[i]) * element::GeluGrad(LoadFloat(&in[i])));
  }
}

__global__ void ResidualAddKernel(float* out, const float* a, const float* b, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

__global__ void ScaleKernel(float* data, size_t count, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    data[i] *= scale;
  }
}

__global__ void CastToBf16Kernel(Bf16* out, const float* in, size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    StoreFloat(&out[i], in[i]);
  }
}

// Over (batch·rows, cols): bias_b added to the pre-activation (or to out without GELU), then the GELU.
__global__ void BatchedBiasGeluKernel(Bf16* out, Bf16* pre_gelu, const Bf16* bias, size_t rows, int cols,
                                      size_t count) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t col = i % cols;
    const size_t block = i / cols / rows;
    const float b = bias != nullptr ? LoadFloat(&bias[block * cols + col]) : 0.0f;
    if (pre_gelu == nullptr) {
      StoreFloat(&out[i], LoadFloat(&out[i]) + b);
      continue;
    }
    StoreFloat(&pre_gelu[i], LoadFloat(&pre_gelu[i]) + b);
    StoreFloat(&out[i], element::Gelu(LoadFloat(&pre_gelu[i])));
  }
}

// Grid (column tiles, batch): thread (x, block y) sums column x of block y's rows in order.
__global__ void BatchedColumnSumKernel(float* out, const Bf16* in, size_t rows, int cols, bool add) {
  const int col = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (col >= cols) return;
  const size_t block = blockIdx.y;
  const Bf16* first = in + block * rows * cols + col;
  float sum = 0.0f;
  for (size_t r = 0; r < rows; ++r) sum += LoadFloat(first + r * cols);
  float* target = out + block * cols + col;
  *target = add ? *target + sum : sum;
}

// --- cross-entropy --------------------------------------------------------------------------------------

// d (scale · mean loss) / d logit for column j of a row with the given softmax statistics; 0 in the padding columns.
__device__ float LogitGradient(float logit, int j, int vocab, int target, element::SoftmaxAccumulator softmax,
                               float inverse_sum, float scale_over_rows) {
  if (j >= vocab) return 0.0f;
  return (expf(logit - softmax.max) * inverse_sum - (j == target ? 1.0f : 0.0f)) * scale_over_rows;
}

__device__ element::SoftmaxAccumulator BlockSoftmax(element::SoftmaxAccumulator softmax,
                                                    element::SoftmaxAccumulator* scratch) {
  return BlockReduce(softmax, scratch, [](element::SoftmaxAccumulator a, element::SoftmaxAccumulator b) {
    return element::SoftmaxMerge(a, b);
  });
}

// One block per row, the row read once: kVec values at a time into shared memory (vocab_padded floats) while the max
// and the normaliser are taken (online softmax), then the gradient from there. logits_grad may be the logits
// themselves (fp32): the row is in shared memory by then.
template <typename Grad, int kVec>
__global__ void CrossEntropyRowInSharedKernel(Grad* logits_grad, float* row_losses, const float* logits,
                                              const int32_t* targets, int vocab, int vocab_padded,
                                              float scale_over_rows) {
  extern __shared__ float4 shared_storage[];
  float* row = reinterpret_cast<float*>(shared_storage);  // (Vp)
  __shared__ element::SoftmaxAccumulator scratch[kCrossEntropyRowThreads / kWarpSize];
  const size_t offset = static_cast<size_t>(blockIdx.x) * vocab_padded;
  element::SoftmaxAccumulator softmax;
  for (int j = threadIdx.x * kVec; j < vocab_padded; j += blockDim.x * kVec) {
    float values[kVec];
    LoadVec(logits + offset + j, values);
    StoreVec(row + j, values);
    for (int i = 0; i < kVec; ++i) {
      if (j + i < vocab) softmax = element::SoftmaxAdd(softmax, values[i]);
    }
  }
  softmax = BlockSoftmax(softmax, scratch);  // its barriers also make the row visible to every thread
  const float inverse_sum = 1.0f / softmax.sum;
  const int target = targets[blockIdx.x];
  for (int j = threadIdx.x * kVec; j < vocab_padded; j += blockDim.x * kVec) {
    float values[kVec];
    for (int i = 0; i < kVec; ++i) {
      values[i] = LogitGradient(row[j + i], j + i, vocab, target, softmax, inverse_sum, scale_over_rows);
    }
    StoreVec(logits_grad + offset + j, values);
  }
  // -log softmax(target) from the logits themselves: exact even where the probability underflows.
  if (threadIdx.x == 0) row_losses[blockIdx.x] = logf(softmax.sum) + softmax.max - row[target];
}

// One block per row, for rows too long for shared memory: the max and the normaliser in one read of the row, walked
// from its end, then the gradient in a second read from its start, which the first pass touched last (so it is
// likelier still in L2). logits_grad may be the logits themselves (fp32): each element is read before its own thread
// writes it, and the target's logit before the reduction's barriers.
template <typename Grad>
__global__ void CrossEntropyTwoReadsKernel(Grad* logits_grad, float* row_losses, const float* logits,
                                           const int32_t* targets, int vocab, int vocab_padded,
                                           float scale_over_rows) {
  __shared__ element::SoftmaxAccumulator scratch[kThreadsPerBlock / kWarpSize];
  const size_t offset = static_cast<size_t>(blockIdx.x) * vocab_padded;
  const float* row = logits + offset;
  Grad* grad = logits_grad + offset;
  const int target = targets[blockIdx.x];
  const float target_logit = row[target];
  element::SoftmaxAccumulator softmax;
  for (int j = vocab - 1 - static_cast<int>(threadIdx.x); j >= 0; j -= blockDim.x) {
    softmax = element::SoftmaxAdd(softmax, row[j]);
  }
  softmax = BlockSoftmax(softmax, scratch);
  const float inverse_sum = 1.0f / softmax.sum;
  for (int j = threadIdx.x; j < vocab_padded; j += blockDim.x) {
    const float logit = j < vocab ? row[j] : 0.0f;
    StoreFloat(&grad[j], LogitGradient(logit, j, vocab, target, softmax, inverse_sum, scale_over_rows));
  }
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

// The step's scalars, the same for every element (bias corrections computed on the host in double, as
// cpu::AdamWUpdate does).
struct AdamWScalars {
  float learning_rate, beta1, beta2, epsilon, weight_decay, m_correction, v_correction;
};

__device__ void AdamWOne(float& param, float grad, float& m, float& v, const AdamWScalars& s, float weight_decay) {
  element::AdamWElement(param, grad, m, v, s.learning_rate, s.beta1, s.beta2, s.epsilon, weight_decay,
                        s.m_correction, s.v_correction);
}

// Block b updates kAdamWElementsPerBlock elements of the table entry it falls in (FindAdamWEntry), 4 per thread at a
// time: 16-byte loads of the parameters, gradients and moments (and an 8-byte store of the bf16 copy) where the
// entry allows it (`vector`, and the buffers' alignment: allow_vector), scalar otherwise and in a range's tail.
__global__ void AdamWKernel(float* params, const float* grads, float* m, float* v, Bf16* params_bf16,
                            const AdamWTableEntry* table, uint64_t entries, bool allow_vector, AdamWScalars scalars) {
  __shared__ AdamWTableEntry entry;
  if (threadIdx.x == 0) entry = table[FindAdamWEntry(table, entries, blockIdx.x)];
  __syncthreads();
  const uint64_t begin = (blockIdx.x - entry.first_block) * kAdamWElementsPerBlock;
  const uint64_t end = begin + kAdamWElementsPerBlock < entry.count ? begin + kAdamWElementsPerBlock : entry.count;
  const float weight_decay = entry.decay != 0 ? scalars.weight_decay : 0.0f;
  const bool vector = allow_vector && entry.vector != 0;
  for (uint64_t i = begin + 4 * threadIdx.x; i < end; i += 4 * blockDim.x) {
    const uint64_t p = entry.offset + i;
    const uint64_t q = entry.moment + i;
    if (vector && i + 4 <= end) {
      float param[4], grad[4], m4[4], v4[4];
      LoadVec(params + p, param);
      LoadVec(grads + p, grad);
      LoadVec(m + q, m4);
      LoadVec(v + q, v4);
      for (int k = 0; k < 4; ++k) AdamWOne(param[k], grad[k], m4[k], v4[k], scalars, weight_decay);
      StoreVec(params + p, param);
      StoreVec(m + q, m4);
      StoreVec(v + q, v4);
      if (params_bf16 != nullptr) StoreVec(params_bf16 + p, param);
      continue;
    }
    for (uint64_t k = 0; k < 4 && i + k < end; ++k) {
      float param = params[p + k];
      AdamWOne(param, grads[p + k], m[q + k], v[q + k], scalars, weight_decay);
      params[p + k] = param;
      if (params_bf16 != nullptr) StoreFloat(&params_bf16[p + k], param);
    }
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

void PositionEmbeddingBackward(float* wpe_grad, const float* out_grad, int batch, int seq, int channels,
                               int positions, GradientWrite write, void* stream) {
  const size_t count = static_cast<size_t>(positions) * channels;
  if (count == 0) return;
  PositionEmbeddingBackwardKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(
      wpe_grad, out_grad, batch, seq, channels, count, write == GradientWrite::kAccumulate);
  TB_CHECK_CUDA_LAUNCH();
}

void EncoderBackward(float* wte_grad, float* wpe_grad, const float* out_grad, const int32_t* tokens, int batch,
                     int seq, int channels, int positions, GradientWrite wpe_write, void* stream) {
  PositionEmbeddingBackward(wpe_grad, out_grad, batch, seq, channels, positions, wpe_write, stream);
  const size_t count = static_cast<size_t>(batch) * seq * channels;
  if (count == 0) return;
  TokenEmbeddingBackwardKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(
      wte_grad, out_grad, tokens, channels, count);
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
void LaunchColumnSum(ColumnSumOut out, const In* in, size_t rows, int cols, size_t ld, RowBlocks split,
                     cudaStream_t stream) {
  const dim3 block(kColumnTile, kColumnSumRowGroups);
  const dim3 grid(static_cast<unsigned int>((cols + kColumnTile - 1) / kColumnTile),
                  static_cast<unsigned int>(split.blocks));
  ColumnSumKernel<<<grid, block, 0, stream>>>(out, in, rows, cols, ld, split.rows_per_block);
  TB_CHECK_CUDA_LAUNCH();
}

ColumnSumOut::Mode FinalMode(GradientWrite write) {
  return write == GradientWrite::kAccumulate ? ColumnSumOut::kAdd : ColumnSumOut::kWrite;
}

// LayerNorm backward's launch: warps per block and blocks, from the device's shared memory (2C floats per warp).
struct LayerNormShape {
  int warps;
  unsigned int blocks;
  size_t shared_bytes;
};

LayerNormShape LayerNormBackwardShape(size_t rows, int channels) {
  const DeviceLimits& limits = CurrentDeviceLimits();
  const size_t per_warp = 2 * static_cast<size_t>(channels) * sizeof(float);
  if (per_warp > limits.shared_per_block_optin) {
    throw RuntimeError("LayerNormBackward over " + std::to_string(channels) + " channels needs " +
                       std::to_string(per_warp) + " bytes of shared memory per warp; this device gives a block " +
                       std::to_string(limits.shared_per_block_optin) + " HINT: a smaller --d-model");
  }
  // Half a multiprocessor's shared memory per block at most, so that two blocks fit where the warps allow.
  const int warps = static_cast<int>(
      std::clamp<size_t>(limits.shared_per_multiprocessor / 2 / per_warp, 1, kLayerNormMaxWarps));
  const size_t shared_bytes = warps * per_warp;
  // At most 2048 threads per multiprocessor (Hopper's and Ampere's; where fewer fit, the grid takes another wave).
  const size_t per_multiprocessor = std::clamp<size_t>(limits.shared_per_multiprocessor / shared_bytes, 1,
                                                        2048 / (static_cast<size_t>(warps) * kWarpSize));
  const size_t row_groups = (rows + warps - 1) / warps;
  const size_t blocks = std::clamp<size_t>(row_groups, 1, per_multiprocessor * limits.multiprocessors);
  return {warps, static_cast<unsigned int>(blocks), shared_bytes};
}

// 16-byte loads need C a multiple of 8 and every row start aligned: the base pointers 16-byte aligned.
template <typename OutGrad>
bool LayerNormVectorLoads(int channels, const float* in_grad, const Bf16* in_grad_bf16, const OutGrad* out_grad,
                          const float* in, const float* weight) {
  return channels % 8 == 0 && Aligned(in_grad, 16) && Aligned(in_grad_bf16, 16) && Aligned(out_grad, 16) &&
         Aligned(in, 16) && Aligned(weight, 16);
}

template <typename OutGrad>
void LaunchLayerNormBackward(float* in_grad, Bf16* in_grad_bf16, float* weight_grad, float* bias_grad,
                             const OutGrad* out_grad, const float* in, const float* weight, const float* mean,
                             const float* rstd, size_t rows, int channels, GradientWrite write, float* scratch,
                             void* stream) {
  if (rows == 0 || channels < 1) return;
  const LayerNormShape shape = LayerNormBackwardShape(rows, channels);
  const bool vector = LayerNormVectorLoads(channels, in_grad, in_grad_bf16, out_grad, in, weight);
  auto kernel = vector ? LayerNormBackwardKernel<OutGrad, 8> : LayerNormBackwardKernel<OutGrad, 1>;
  AllowSharedBytes(kernel, shape.shared_bytes);
  kernel<<<shape.blocks, shape.warps * kWarpSize, shape.shared_bytes, AsStream(stream)>>>(
      in_grad, in_grad_bf16, scratch, out_grad, in, weight, mean, rstd, rows, channels);
  TB_CHECK_CUDA_LAUNCH();
  // The partial rows (blocks, 2C), summed in block order: weight gradient from [0, C), bias gradient from [C, 2C).
  const int cols = 2 * channels;
  LaunchColumnSum(ColumnSumOut{FinalMode(write), weight_grad, bias_grad, channels}, static_cast<const float*>(scratch),
                  shape.blocks, cols, static_cast<size_t>(cols), RowBlocks{1, shape.blocks}, AsStream(stream));
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

void LayerNormBackward(float* in_grad, Bf16* in_grad_bf16, float* weight_grad, float* bias_grad,
                       const float* out_grad, const float* in, const float* weight, const float* mean,
                       const float* rstd, size_t rows, int channels, GradientWrite write, float* scratch,
                       void* stream) {
  LaunchLayerNormBackward(in_grad, in_grad_bf16, weight_grad, bias_grad, out_grad, in, weight, mean, rstd, rows,
                          channels, write, scratch, stream);
}

void LayerNormBackward(float* in_grad, Bf16* in_grad_bf16, float* weight_grad, float* bias_grad,
                       const Bf16* out_grad, const float* in, const float* weight, const float* mean,
                       const float* rstd, size_t rows, int channels, GradientWrite write, float* scratch,
                       void* stream) {
  LaunchLayerNormBackward(in_grad, in_grad_bf16, weight_grad, bias_grad, out_grad, in, weight, mean, rstd, rows,
                          channels, write, scratch, stream);
}

size_t LayerNormBackwardScratchFloats(size_t rows, int channels) {
  if (rows == 0 || channels < 1) return 0;
  return LayerNormBackwardShape(rows, channels).blocks * 2 * static_cast<size_t>(channels);
}

void ColumnSum(float* out, const Bf16* in, size_t rows, int cols, GradientWrite write, float* scratch,
               void* stream) {
  if (rows == 0 || cols < 1) return;
  const RowBlocks split = SplitRows(rows, kColumnSumRowsPerChunk, kColumnSumMaxChunks);
  LaunchColumnSum(ColumnSumOut{ColumnSumOut::kPartials, scratch, nullptr, cols}, in, rows, cols,
                  static_cast<size_t>(cols), split, AsStream(stream));
  LaunchColumnSum(ColumnSumOut{FinalMode(write), out, nullptr, cols}, static_cast<const float*>(scratch),
                  split.blocks, cols, static_cast<size_t>(cols), RowBlocks{1, split.blocks}, AsStream(stream));
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

void GeluBackward(Bf16* grad, const Bf16* in, size_t count, void* stream) {
  if (count == 0) return;
  GeluBackwardKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(grad, in, count);
  TB_CHECK_CUDA_LAUNCH();
}

void ResidualAdd(float* out, const float* a, const float* b, size_t count, void* stream) {
  if (count == 0) return;
  ResidualAddKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(out, a, b, count);
  TB_CHECK_CUDA_LAUNCH();
}

void ScaleFloats(float* data, size_t count, float scale, void* stream) {
  if (count == 0) return;
  ScaleKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(data, count, scale);
  TB_CHECK_CUDA_LAUNCH();
}

void CastToBf16(Bf16* out, const float* in, size_t count, void* stream) {
  if (count == 0) return;
  CastToBf16Kernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(out, in, count);
  TB_CHECK_CUDA_LAUNCH();
}

void BatchedBiasGelu(Bf16* out, Bf16* pre_gelu, const Bf16* bias, size_t rows, int cols, int batch, void* stream) {
  const size_t count = rows * static_cast<size_t>(cols) * static_cast<size_t>(batch);
  if (count == 0 || (bias == nullptr && pre_gelu == nullptr)) return;
  BatchedBiasGeluKernel<<<ElementwiseBlocks(count), kThreadsPerBlock, 0, AsStream(stream)>>>(out, pre_gelu, bias,
                                                                                            rows, cols, count);
  TB_CHECK_CUDA_LAUNCH();
}

void BatchedColumnSum(float* out, const Bf16* in, size_t rows, int cols, int batch, GradientWrite write,
                      void* stream) {
  if (cols < 1 || batch < 1) return;
  const dim3 grid(static_cast<unsigned int>((cols + kThreadsPerBlock - 1) / kThreadsPerBlock),
                  static_cast<unsigned int>(batch));
  BatchedColumnSumKernel<<<grid, kThreadsPerBlock, 0, AsStream(stream)>>>(out, in, rows, cols,
                                                                          write == GradientWrite::kAccumulate);
  TB_CHECK_CUDA_LAUNCH();
}

namespace {

// Shared memory the one-read cross-entropy needs for a row: the row, and the reduction's static scratch.
size_t CrossEntropyRowBytes(int vocab_padded) {
  return static_cast<size_t>(vocab_padded) * sizeof(float) +
         kCrossEntropyRowThreads / kWarpSize * sizeof(element::SoftmaxAccumulator);
}

template <typename Grad>
void LaunchCrossEntropy(Grad* logits_grad, float* row_losses, float* loss, const float* logits,
                        const int32_t* targets, size_t rows, int vocab, int vocab_padded, float gradient_scale,
                        void* stream) {
  if (rows == 0) return;
  if (rows > 0x7fffffffu) {
    throw RuntimeError("cross-entropy over " + std::to_string(rows) + " rows: more than one grid of one block per row");
  }
  const float scale_over_rows = gradient_scale / static_cast<float>(rows);
  const auto grid = static_cast<unsigned int>(rows);
  if (CrossEntropyReadsLogitsOnce(vocab_padded)) {
    // 16-byte loads (and 8- or 16-byte stores) where every row starts aligned.
    const bool vector = vocab_padded % 4 == 0 && Aligned(logits, 16) && Aligned(logits_grad, 16);
    auto kernel = vector ? CrossEntropyRowInSharedKernel<Grad, 4> : CrossEntropyRowInSharedKernel<Grad, 1>;
    const size_t shared_bytes = static_cast<size_t>(vocab_padded) * sizeof(float);
    AllowSharedBytes(kernel, shared_bytes);
    kernel<<<grid, kCrossEntropyRowThreads, shared_bytes, AsStream(stream)>>>(
        logits_grad, row_losses, logits, targets, vocab, vocab_padded, scale_over_rows);
  } else {
    CrossEntropyTwoReadsKernel<<<grid, kThreadsPerBlock, 0, AsStream(stream)>>>(
        logits_grad, row_losses, logits, targets, vocab, vocab_padded, scale_over_rows);
  }
  TB_CHECK_CUDA_LAUNCH();
  MeanLossKernel<<<1, kThreadsPerBlock, 0, AsStream(stream)>>>(loss, row_losses, rows);
  TB_CHECK_CUDA_LAUNCH();
}

}  // namespace

bool CrossEntropyReadsLogitsOnce(int vocab_padded) {
  return CrossEntropyRowBytes(vocab_padded) <= CurrentDeviceLimits().shared_per_block_optin;
}

void CrossEntropyForwardBackward(Bf16* logits_grad, float* row_losses, float* loss, const float* logits,
                                 const int32_t* targets, size_t rows, int vocab, int vocab_padded,
                                 float gradient_scale, void* stream) {
  LaunchCrossEntropy(logits_grad, row_losses, loss, logits, targets, rows, vocab, vocab_padded, gradient_scale,
                     stream);
}

void CrossEntropyForwardBackward(float* logits_grad, float* row_losses, float* loss, const float* logits,
                                 const int32_t* targets, size_t rows, int vocab, int vocab_padded,
                                 float gradient_scale, void* stream) {
  LaunchCrossEntropy(logits_grad, row_losses, loss, logits, targets, rows, vocab, vocab_padded, gradient_scale,
                     stream);
}

AdamWPlan::AdamWPlan(const std::vector<AdamWRange>& ranges, size_t moment_offset)
    : ranges_(0), blocks_(0), table_(0) {
  const std::vector<AdamWTableEntry> table = MakeAdamWTable(ranges, moment_offset);
  ranges_ = table.size();
  blocks_ = AdamWBlocks(table);
  table_ = Upload(table);
}

void AdamWUpdate(float* params, const float* grads, float* m, float* v, const AdamWPlan& plan,
                 const AdamWConfig& config, int64_t step, void* stream, Bf16* params_bf16) {
  if (plan.blocks() == 0) return;
  if (plan.blocks() > 0x7fffffffu) {
    throw RuntimeError("AdamW over " + std::to_string(plan.blocks()) + " blocks: more than one grid takes");
  }
  // Bias corrections in double on the host, exactly as cpu::AdamWUpdate computes them.
  const AdamWScalars scalars{config.learning_rate,
                             config.beta1,
                             config.beta2,
                             config.epsilon,
                             config.weight_decay,
                             static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(config.beta1), step))),
                             static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(config.beta2), step)))};
  const bool allow_vector = Aligned(params, 16) && Aligned(grads, 16) && Aligned(m, 16) && Aligned(v, 16) &&
                            Aligned(params_bf16, 8);
  AdamWKernel<<<static_cast<unsigned int>(plan.blocks()), kThreadsPerBlock, 0, AsStream(stream)>>>(
      params, grads, m, v, params_bf16, static_cast<const AdamWTableEntry*>(plan.table()), plan.ranges(),
      allow_vector, scalars);
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
