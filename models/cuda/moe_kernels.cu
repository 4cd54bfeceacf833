// CUDA kernels of the MoE layer's non-GEMM steps (see moe_kernels.h), each followed by its launcher.
#include "cuda/moe_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include "cuda/cuda_check.h"
#include "cuda/float_access.cuh"
#include "error.h"
#include "moe_math.h"

namespace tb::gpu {
namespace {

constexpr int kThreads = 256;

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// One thread per token: softmax of its logits in place, its top K, their gate weights (moe_math.h, as the CPU).
__global__ void RouteLogitsKernel(float* probs, int* expert, float* gate, size_t tokens, int experts, int top_k) {
  const size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  float* row = probs + t * experts;
  moe::SoftmaxRow(row, experts, row);
  moe::TopK(row, experts, top_k, expert + t * top_k);
  moe::GateWeights(row, expert + t * top_k, top_k, gate + t * top_k);
}

// Block e: every choice of expert e in choice order gets its order among them (a block-wide exclusive scan per
// chunk of kThreads choices, carried over the chunks), kept below the capacity (a row relative to the expert's
// block, fixed by OffsetRowsKernel), -1 beyond; assigned[e] = the count.
__global__ void OrderChoicesKernel(int* row, int* assigned, const int* expert, size_t choices, long long capacity) {
  using Scan = cub::BlockScan<int, kThreads>;
  __shared__ typename Scan::TempStorage scratch;
  const int e = static_cast<int>(blockIdx.x);
  long long before = 0;  // this expert's choices in the chunks before
  for (size_t first = 0; first < choices; first += kThreads) {
    const size_t i = first + threadIdx.x;
    const int mine = i < choices && expert[i] == e ? 1 : 0;
    int order = 0, in_chunk = 0;
    Scan(scratch).ExclusiveSum(mine, order, in_chunk);
    if (mine) {
      const long long position = before + order;
      row[i] = position < capacity ? static_cast<int>(position) : -1;
    }
    before += in_chunk;
    __syncthreads();  // the scan's scratch is reused by the next chunk
  }
  if (threadIdx.x == 0) assigned[e] = static_cast<int>(before);
}

// One thread: block_begin as the exclusive scan of min(assigned, capacity), and the dropped choices.
__global__ void BlockBeginKernel(int* block_begin, int* dropped, const int* assigned, int experts, long long capacity) {
  long long begin = 0, lost = 0;
  for (int e = 0; e < experts; ++e) {
    block_begin[e] = static_cast<int>(begin);
    const long long kept = assigned[e] < capacity ? assigned[e] : capacity;
    begin += kept;
    lost += assigned[e] - kept;
  }
  block_begin[experts] = static_cast<int>(begin);
  *dropped = static_cast<int>(lost);
}

// Each kept choice's row moves to its expert's block: at block_begin, or at expert · stride when stride > 0.
__global__ void OffsetRowsKernel(int* row, const int* expert, const int* block_begin, size_t choices,
                                 long long stride) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= choices || row[i] < 0) return;
  row[i] += stride > 0 ? static_cast<int>(expert[i] * stride) : block_begin[expert[i]];
}

unsigned int BlocksFor(size_t count) { return static_cast<unsigned int>((count + kThreads - 1) / kThreads); }

// Grid-stride over choices x channels: a kept choice's element copied to its row.
__global__ void GatherKernel(__nv_bfloat16* gathered, const __nv_bfloat16* in, const int* row, size_t choices,
                             int top_k, int channels) {
  const size_t total = choices * channels;
  for (size_t at = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; at < total;
       at += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = at / channels, c = at % channels;
    const int r = row[i];
    if (r >= 0) gathered[static_cast<size_t>(r) * channels + c] = in[(i / top_k) * channels + c];
  }
}

// Grid-stride over tokens x channels: out = base (null: 0) plus the token's kept choices' rows, each times its gate
// (null: 1), in choice order. The combine (base: the residual) and the input gradient's scatter (base: the router's
// input gradient, no gates).
template <typename Base>
__global__ void CombineKernel(float* out, const Base* base, const __nv_bfloat16* rows, const int* row,
                              const float* gate, size_t tokens, int top_k, int channels) {
  const size_t total = tokens * channels;
  for (size_t at = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; at < total;
       at += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t t = at / channels, c = at % channels;
    float sum = base != nullptr ? LoadFloat(base + at) : 0.0f;
    for (int j = 0; j < top_k; ++j) {
      const int r = row[t * top_k + j];
      if (r < 0) continue;
      const float value = __bfloat162float(rows[static_cast<size_t>(r) * channels + c]);
      sum += gate != nullptr ? gate[t * top_k + j] * value : value;
    }
    out[at] = sum;
  }
}

// One block: P_e (the token-order sum of probs' column e in double, over N) and f_e into shared memory, then thread 0
// applies moe::AuxLoss to them in expert order, as the CPU layer does.
__global__ void AuxLossKernel(float* aux_loss, const float* probs, const int* assigned, size_t tokens, int experts,
                              int top_k, float coef) {
  extern __shared__ float shared[];  // (2, E): fractions, then mean probabilities
  float* fraction = shared;
  float* mean_prob = shared + experts;
  const double choices = static_cast<double>(tokens) * top_k;
  for (int e = static_cast<int>(threadIdx.x); e < experts; e += blockDim.x) {
    double sum = 0.0;
    for (size_t t = 0; t < tokens; ++t) sum += probs[t * experts + e];
    mean_prob[e] = static_cast<float>(sum / static_cast<double>(tokens));
    fraction[e] = static_cast<float>(static_cast<double>(assigned[e]) / choices);
  }
  __syncthreads();
  if (threadIdx.x == 0) *aux_loss = moe::AuxLoss(coef, experts, fraction, mean_prob);
}

constexpr int kWarp = 32;

// Grid-stride over rows x channels: row i of src to row index[i] of dst (scatter), or row index[i] of src to row i
// of dst (gather).
__global__ void MoveRowsKernel(__nv_bfloat16* dst, const __nv_bfloat16* src, const int* index, size_t rows,
                               int channels, bool scatter) {
  const size_t total = rows * channels;
  for (size_t at = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; at < total;
       at += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = at / channels, c = at % channels;
    const size_t mapped = static_cast<size_t>(index[i]) * channels + c;
    if (scatter) {
      dst[mapped] = src[at];
    } else {
      dst[at] = src[mapped];
    }
  }
}

// One warp per choice: the expert output's gradient (gate · dy) and the gate's (dy · y, a warp sum).
__global__ void CombineBackwardKernel(__nv_bfloat16* expert_out_grad, float* gate_grad, const float* out_grad,
                                      const __nv_bfloat16* expert_out, const int* row, const float* gate,
                                      size_t choices, int top_k, int channels) {
  const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (i >= choices) return;
  const int r = row[i];
  if (r < 0) {
    if (lane == 0) gate_grad[i] = 0.0f;
    return;
  }
  const float* dy = out_grad + (i / top_k) * channels;
  const __nv_bfloat16* y = expert_out + static_cast<size_t>(r) * channels;
  __nv_bfloat16* dexpert = expert_out_grad + static_cast<size_t>(r) * channels;
  float dot = 0.0f;
  for (int c = lane; c < channels; c += kWarp) {
    dexpert[c] = __float2bfloat16_rn(gate[i] * dy[c]);
    dot += dy[c] * __bfloat162float(y[c]);
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) dot += __shfl_down_sync(0xffffffffu, dot, offset);
  if (lane == 0) gate_grad[i] = dot;
}

// One thread per token: d loss / d probs from the aux loss and the gates, through the softmax, in place in the fp32
// row, then rounded.
__global__ void RouterBackwardKernel(__nv_bfloat16* logit_grad, float* logit_grad_float, const float* probs,
                                     const int* expert, const float* gate, const float* gate_grad,
                                     const int* assigned, size_t tokens, int experts, int top_k, float aux_coef) {
  const size_t t = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= tokens) return;
  const double choices = static_cast<double>(tokens) * top_k;
  float* grad = logit_grad_float + t * experts;
  const float* p = probs + t * experts;
  for (int e = 0; e < experts; ++e) {
    const float fraction = static_cast<float>(static_cast<double>(assigned[e]) / choices);
    grad[e] = moe::AuxLossProbGrad(aux_coef, experts, fraction, static_cast<long long>(tokens));
  }
  moe::GateBackward(p, expert + t * top_k, gate + t * top_k, gate_grad + t * top_k, top_k, grad);
  moe::SoftmaxBackwardRow(p, grad, experts, grad);
  for (int e = 0; e < experts; ++e) logit_grad[t * experts + e] = __float2bfloat16_rn(grad[e]);
}

__global__ void AccumulateStatsKernel(long long* assigned_sum, long long* dropped_sum, double* aux_sum,
                                      const int* assigned, const int* dropped, const float* aux_loss, int experts) {
  for (int e = static_cast<int>(threadIdx.x); e < experts; e += blockDim.x) assigned_sum[e] += assigned[e];
  if (threadIdx.x == 0) {
    *dropped_sum += *dropped;
    *aux_sum += *aux_loss;
  }
}

// Grid-stride launches: enough blocks to cover `count` elements, at most 65536.
unsigned int StrideBlocks(size_t count) { return BlocksFor(count) < 65536u ? BlocksFor(count) : 65536u; }

}  // namespace

void MoeRouteLogits(float* probs, int* expert, float* gate, size_t tokens, int experts, int top_k, void* stream) {
  if (tokens == 0) return;
  if (experts < 1 || top_k < 1 || top_k > experts) throw InputError("MoeRouteLogits: top_k must lie in 1..experts");
  RouteLogitsKernel<<<BlocksFor(tokens), kThreads, 0, AsStream(stream)>>>(probs, expert, gate, tokens, experts, top_k);
  TB_CHECK_CUDA_LAUNCH();
}

void MoeAssignRows(int* row, int* assigned, int* block_begin, int* dropped, const int* expert, size_t tokens,
                   int experts, int top_k, long long capacity, long long block_stride, void* stream) {
  if (experts < 1 || top_k < 1 || capacity < 0) throw InputError("MoeAssignRows: bad experts, top_k or capacity");
  if (block_stride > 0 && block_stride < capacity) throw InputError("MoeAssignRows: block_stride below the capacity");
  const size_t choices = tokens * static_cast<size_t>(top_k);
  // Rows of choices no expert block visits keep -1 only if set: every choice is some expert's, so each is written.
  OrderChoicesKernel<<<static_cast<unsigned int>(experts), kThreads, 0, AsStream(stream)>>>(row, assigned, expert,
                                                                                            choices, capacity);
  TB_CHECK_CUDA_LAUNCH();
  BlockBeginKernel<<<1, 1, 0, AsStream(stream)>>>(block_begin, dropped, assigned, experts, capacity);
  TB_CHECK_CUDA_LAUNCH();
  if (choices == 0) return;
  OffsetRowsKernel<<<BlocksFor(choices), kThreads, 0, AsStream(stream)>>>(row, expert, block_begin, choices,
                                                                             block_stride);
  TB_CHECK_CUDA_LAUNCH();
}

void MoeGather(Bf16* gathered, const Bf16* in, const int* row, size_t tokens, int top_k, int channels, void* stream) {
  const size_t choices = tokens * static_cast<size_t>(top_k);
  if (choices == 0 || channels == 0) return;
  GatherKernel<<<StrideBlocks(choices * channels), kThreads, 0, AsStream(stream)>>>(
      reinterpret_cast<__nv_bfloat16*>(gathered), reinterpret_cast<const __nv_bfloat16*>(in), row, choices, top_k,
      channels);
  TB_CHECK_CUDA_LAUNCH();
}

void MoeCombine(float* out, const float* residual, const Bf16* expert_out, const int* row, const float* gate,
                size_t tokens, int top_k, int channels, void* stream) {
  if (tokens == 0 || channels == 0) return;
  CombineKernel<<<StrideBlocks(tokens * channels), kThreads, 0, AsStream(stream)>>>(
      out, residual, reinterpret_cast<const __nv_bfloat16*>(expert_out), row, gate, tokens, top_k, channels);
  TB_CHECK_CUDA_LAUNCH();
}

void MoeScatterRows(Bf16* dst, const Bf16* src, const int* index, size_t rows, int channels, void* stream) {
  if (rows == 0 || channels == 0) return;
  MoveRowsKernel<<<StrideBlocks(rows * channels), kThreads, 0, AsStream(stream)>>>(
      reinterpret_cast<__nv_bfloat16*>(dst), reinterpret_cast<const __nv_bfloat16*>(src), index, rows, channels, true);
  TB_CHECK_CUDA_LAUNCH();
}

void MoeGatherRows(Bf16* dst, const Bf16* src, const int* index, size_t rows, int channels, void* stream) {
  if (rows == 0 || channels == 0) return;
  MoveRowsKernel<<<StrideBlocks(rows * channels), kThreads, 0, AsStream(stream)>>>(
      reinterpret_cast<__nv_bfloat16*>(dst), reinterpret_cast<const __nv_bfloat16*>(src), index, rows, channels,
      false);
  TB_CHECK_CUDA_LAUNCH();
}

void MoeAuxLoss(float* aux_loss, const float* probs, const int* assigned, size_t tokens, int experts, int top_k,
                float coef, void* stream) {
  if (tokens == 0 || experts < 1) return;
  AuxLossKernel<<<1, kThreads, 2 * experts * sizeof(float), AsStream(stream)>>>(aux_loss, probs, assigned, tokens,
                                                                                 experts, top_k, coef);
  TB_CHECK_CUDA_LAUNCH();
}

void MoeCombineBackward(Bf16* expert_out_grad, float* gate_grad, const float* out_grad, const Bf16* expert_out,
                        const int* row, const float* gate, size_t tokens, int top_k, int channels, void* stream) {
  const size_t choices = tokens * static_cast<size_t>(top_k);
  if (choices == 0) return;
  CombineBackwardKernel<<<BlocksFor(choices * kWarp), kThreads, 0, AsStream(stream)>>>(
      reinterpret_cast<__nv_bfloat16*>(expert_out_grad), gate_grad, out_grad,
      reinterpret_cast<const __nv_bfloat16*>(expert_out), row, gate, choices, top_k, channels);
  TB_CHECK_CUDA_LAUNCH();
}

void MoeRouterBackward(Bf16* logit_grad, float* logit_grad_float, const float* probs, const int* expert,
                       const float* gate, const float* gate_grad, const int* assigned, size_t tokens, int experts,
                       int top_k, float aux_coef, void* stream) {
  if (tokens == 0) return;
  RouterBackwardKernel<<<BlocksFor(tokens), kThreads, 0, AsStream(stream)>>>(
      reinterpret_cast<__nv_bfloat16*>(logit_grad), logit_grad_float, probs, expert, gate, gate_grad, assigned,
      tokens, experts, top_k, aux_coef);
  TB_CHECK_CUDA_LAUNCH();
}

void MoeScatterInputGrad(float* in_grad, const Bf16* router_in_grad, const Bf16* expert_in_grad, const int* row,
                         size_t tokens, int top_k, int channels, void* stream) {
  if (tokens == 0 || channels == 0) return;
  CombineKernel<<<StrideBlocks(tokens * channels), kThreads, 0, AsStream(stream)>>>(
      in_grad, reinterpret_cast<const __nv_bfloat16*>(router_in_grad),
      reinterpret_cast<const __nv_bfloat16*>(expert_in_grad), row, static_cast<const float*>(nullptr), tokens, top_k,
      channels);
  TB_CHECK_CUDA_LAUNCH();
}

void MoeAccumulateStats(long long* assigned_sum, long long* dropped_sum, double* aux_sum, const int* assigned,
                        const int* dropped, const float* aux_loss, int experts, void* stream) {
  AccumulateStatsKernel<<<1, kThreads, 0, AsStream(stream)>>>(assigned_sum, dropped_sum, aux_sum, assigned, dropped,
                                                              aux_loss, experts);
  TB_CHECK_CUDA_LAUNCH();
}

}  // namespace tb::gpu
