// Causal attention from cuBLAS strided-batched GEMMs and two softmax kernels (see attention.h). The reference
// implementation and the fallback where cuDNN's fused attention is not available: simple, and it materialises
// score matrices, so it is far slower and hungrier than flash attention.
//
// Per batch element b and group of heads [h0, h0 + g), with T = seq, hd = C/NH, scale = 1/sqrt(hd):
//   forward    S = scale·Q·Kᵀ (g, T, T) fp32; P = causal softmax(S) → bf16, lse (fp32) = max + log Σ exp(S − max);
//              out = P·V (P is zero above the diagonal, so one full T×T GEMM is causal).
//   backward   S recomputed, P = exp(S − lse) (recomputed from lse, as the CPU reference and cuDNN do: nothing of
//              size T² outlives Forward); dP = dO·Vᵀ fp32; dS = P ⊙ (dP − Σⱼ Pⱼ·dPⱼ) → bf16; dV = Pᵀ·dO;
//              dQ = scale·dS·K; dK = scale·dSᵀ·Q. The row sum Σⱼ Pⱼ·dPⱼ equals rowsum(dO ⊙ O) but is taken from
//              the fp32 P and dP, as cpu::AttentionBackward does, not from the bf16-rounded O: so `out` is unused.
// Heads go in groups sized so that the group's score buffers fit kWorkspaceBudgetBytes (all heads at once for
// GPT-2 shapes), which bounds the workspace at long sequences and many heads.
//
// Row-major GEMMs through column-major cuBLAS: row-major X (r, c) with leading dimension L is the column-major
// Xᵀ with the same L, so row-major Z (M, N) = op(X) (M, K)·op(Y) (K, N) is column-major Zᵀ = op(Y)ᵀ·op(X)ᵀ: call
// cuBLAS with A = Y, B = X, the same op flags, m = N, n = M. Q, K, V of head h are (T, hd) at column h·hd of
// qkv with leading dimension 3C (K, V at +C, +2C); out and dO heads at column h·hd with leading dimension C;
// score matrices (T, T) with leading dimension T. Consecutive heads are hd elements apart (the batch stride of
// the strided-batched calls over a group); score matrices T² apart. Batch elements are separate calls, since
// (b, h) offsets b·T·3C + h·hd are not one stride.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "cuda/attention.h"
#include "cuda/cublas_check.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_raii.h"
#include "error.h"

namespace tb::gpu {
namespace {

constexpr int kWarpSize = 32;
constexpr int kThreadsPerBlock = 256;
constexpr int kWarpsPerBlock = kThreadsPerBlock / kWarpSize;
// Score buffers per group of heads: S and dP in fp32, P and dS in bf16, 12 bytes per score.
constexpr size_t kBytesPerScore = 2 * sizeof(float) + 2 * sizeof(__nv_bfloat16);
constexpr size_t kWorkspaceBudgetBytes = size_t{256} << 20;

__device__ float WarpSum(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

__device__ float WarpMax(float value) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

// One warp per score row (rows = heads·T, row r is query r % T of head r / T). probs (rows, T) gets the causal
// softmax in bf16, zero where the key lies after the query; lse (rows) the log-sum-exp of the row's visible scores.
__global__ void CausalSoftmaxForwardKernel(__nv_bfloat16* probs, float* lse, const float* scores, size_t rows,
                                           int seq) {
  const size_t row = blockIdx.x * static_cast<size_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const int query = static_cast<int>(row % seq);
  const float* s = scores + row * seq;
  float max = -INFINITY;
  for (int j = lane; j <= query; j += kWarpSize) max = fmaxf(max, s[j]);
  max = WarpMax(max);
  float sum = 0.0f;
  for (int j = lane; j <= query; j += kWarpSize) sum += expf(s[j] - max);
  const float row_lse = max + logf(WarpSum(sum));
  __nv_bfloat16* p = probs + row * seq;
  for (int j = lane; j < seq; j += kWarpSize) p[j] = __float2bfloat16(j <= query ? expf(s[j] - row_lse) : 0.0f);
  if (lane == 0) lse[row] = row_lse;
}

// One warp per score row, as the forward kernel: P = exp(S - lse) and dS = P ⊙ (dP − Σⱼ Pⱼ·dPⱼ), both in bf16,
// zero where the key lies after the query.
__global__ void CausalSoftmaxBackwardKernel(__nv_bfloat16* probs, __nv_bfloat16* dscores, const float* scores,
                                            const float* dprobs, const float* lse, size_t rows, int seq) {
  const size_t row = blockIdx.x * static_cast<size_t>(kWarpsPerBlock) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int lane = threadIdx.x % kWarpSize;
  const int query = static_cast<int>(row % seq);
  const float* s = scores + row * seq;
  const float* dp = dprobs + row * seq;
  const float row_lse = lse[row];
  float dot = 0.0f;
  for (int j = lane; j <= query; j += kWarpSize) dot += expf(s[j] - row_lse) * dp[j];
  dot = WarpSum(dot);
  __nv_bfloat16* p_out = probs + row * seq;
  __nv_bfloat16* ds_out = dscores + row * seq;
  for (int j = lane; j < seq; j += kWarpSize) {
    const float p = j <= query ? expf(s[j] - row_lse) : 0.0f;
    p_out[j] = __float2bfloat16(p);
    ds_out[j] = __float2bfloat16(p * (dp[j] - dot));
  }
}

unsigned int RowBlocks(size_t rows) { return static_cast<unsigned int>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

struct CublasDeleter {
  void operator()(cublasHandle_t handle) const noexcept { (void)cublasDestroy(handle); }
};
using CublasHandle = std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDeleter>;

// One strided-batched GEMM over a group of heads, column-major as cuBLAS sees it: bf16 A and B, fp32 accumulation,
// C in c_type.
struct BatchedGemm {
  cublasOperation_t transa, transb;
  int m, n, k;
  float alpha;
  const void* a;
  int lda;
  long long stride_a;
  const void* b;
  int ldb;
  long long stride_b;
  void* c;
  cudaDataType_t c_type;
  int ldc;
  long long stride_c;
};

class CublasAttention final : public Attention {
 public:
  CublasAttention(int channels, int heads, int max_batch, int max_seq, void* stream)
      : channels_(channels),
        heads_(heads),
        head_dim_(channels / heads),
        max_batch_(max_batch),
        max_seq_(max_seq),
        scale_(1.0f / std::sqrt(static_cast<float>(channels / heads))),
        stream_(static_cast<cudaStream_t>(stream)) {
    const size_t scores_per_head = static_cast<size_t>(max_seq) * max_seq;
    heads_per_group_ = static_cast<int>(
        std::clamp<size_t>(kWorkspaceBudgetBytes / (scores_per_head * kBytesPerScore), 1, static_cast<size_t>(heads)));
    const size_t scores = scores_per_head * heads_per_group_;
    scores_ = DeviceBuffer(scores * sizeof(float));
    dprobs_ = DeviceBuffer(scores * sizeof(float));
    probs_ = DeviceBuffer(scores * sizeof(__nv_bfloat16));
    dscores_ = DeviceBuffer(scores * sizeof(__nv_bfloat16));
    cublasHandle_t raw = nullptr;
    TB_CHECK_CUBLAS(cublasCreate(&raw));
    handle_.reset(raw);
    TB_CHECK_CUBLAS(cublasSetStream(raw, stream_));
  }

  std::string name() const override { return "cublas"; }

  size_t workspace_bytes() const override {
    return scores_.bytes() + dprobs_.bytes() + probs_.bytes() + dscores_.bytes();
  }

  void Forward(Bf16* out, float* lse, const Bf16* qkv, int batch, int seq) override {
    CheckShape("Forward", batch, seq);
    const auto* qkv_bf16 = reinterpret_cast<const __nv_bfloat16*>(qkv);
    auto* out_bf16 = reinterpret_cast<__nv_bfloat16*>(out);
    auto* scores = static_cast<float*>(scores_.data());
    auto* probs = static_cast<__nv_bfloat16*>(probs_.data());
    for (int b = 0; b < batch; ++b) {
      for (int h0 = 0; h0 < heads_; h0 += heads_per_group_) {
        const int group = std::min(heads_per_group_, heads_ - h0);
        const __nv_bfloat16* q = qkv_bf16 + static_cast<size_t>(b) * seq * 3 * channels_ + h0 * head_dim_;
        const __nv_bfloat16* k = q + channels_;
        const __nv_bfloat16* v = q + 2 * channels_;
        __nv_bfloat16* y = out_bf16 + static_cast<size_t>(b) * seq * channels_ + h0 * head_dim_;
        float* group_lse = lse + (static_cast<size_t>(b) * heads_ + h0) * seq;
        const size_t rows = static_cast<size_t>(group) * seq;
        ScoresGemm(scores, q, k, seq, group);
        CausalSoftmaxForwardKernel<<<RowBlocks(rows), kThreadsPerBlock, 0, stream_>>>(probs, group_lse, scores, rows,
                                                                                       seq);
        TB_CHECK_CUDA_LAUNCH();
        // out (T, hd) = P (T, T) · V (T, hd)
        Run(BatchedGemm{CUBLAS_OP_N, CUBLAS_OP_N, head_dim_, seq, seq, 1.0f, v, 3 * channels_, head_dim_, probs,
                        seq, SeqSquared(seq), y, CUDA_R_16BF, channels_, head_dim_},
            group);
      }
    }
  }

  void Backward(Bf16* qkv_grad, const Bf16* out_grad, const Bf16* qkv, const Bf16* /*out: see the top comment*/,
                const float* lse, int batch, int seq) override {
    CheckShape("Backward", batch, seq);
    const auto* qkv_bf16 = reinterpret_cast<const __nv_bfloat16*>(qkv);
    const auto* dout_bf16 = reinterpret_cast<const __nv_bfloat16*>(out_grad);
    auto* dqkv_bf16 = reinterpret_cast<__nv_bfloat16*>(qkv_grad);
    auto* scores = static_cast<float*>(scores_.data());
    auto* dprobs = static_cast<float*>(dprobs_.data());
    auto* probs = static_cast<__nv_bfloat16*>(probs_.data());
    auto* dscores = static_cast<__nv_bfloat16*>(dscores_.data());
    const int ld_qkv = 3 * channels_;
    for (int b = 0; b < batch; ++b) {
      for (int h0 = 0; h0 < heads_; h0 += heads_per_group_) {
        const int group = std::min(heads_per_group_, heads_ - h0);
        const size_t head_offset = static_cast<size_t>(b) * seq * ld_qkv + h0 * head_dim_;
        const __nv_bfloat16* q = qkv_bf16 + head_offset;
        const __nv_bfloat16* k = q + channels_;
        const __nv_bfloat16* v = q + 2 * channels_;
        __nv_bfloat16* dq = dqkv_bf16 + head_offset;
        __nv_bfloat16* dk = dq + channels_;
        __nv_bfloat16* dv = dq + 2 * channels_;
        const __nv_bfloat16* dy = dout_bf16 + static_cast<size_t>(b) * seq * channels_ + h0 * head_dim_;
        const float* group_lse = lse + (static_cast<size_t>(b) * heads_ + h0) * seq;
        const size_t rows = static_cast<size_t>(group) * seq;
        ScoresGemm(scores, q, k, seq, group);
        // dP (T, T) = dO (T, hd) · Vᵀ
        Run(BatchedGemm{CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, head_dim_, 1.0f, v, ld_qkv, head_dim_, dy, channels_,
                        head_dim_, dprobs, CUDA_R_32F, seq, SeqSquared(seq)},
            group);
        CausalSoftmaxBackwardKernel<<<RowBlocks(rows), kThreadsPerBlock, 0, stream_>>>(probs, dscores, scores, dprobs,
                                                                                        group_lse, rows, seq);
        TB_CHECK_CUDA_LAUNCH();
        // dV (T, hd) = Pᵀ · dO
        Run(BatchedGemm{CUBLAS_OP_N, CUBLAS_OP_T, head_dim_, seq, seq, 1.0f, dy, channels_, head_dim_, probs, seq,
                        SeqSquared(seq), dv, CUDA_R_16BF, ld_qkv, head_dim_},
            group);
        // dQ (T, hd) = scale · dS · K
        Run(BatchedGemm{CUBLAS_OP_N, CUBLAS_OP_N, head_dim_, seq, seq, scale_, k, ld_qkv, head_dim_, dscores, seq,
                        SeqSquared(seq), dq, CUDA_R_16BF, ld_qkv, head_dim_},
            group);
        // dK (T, hd) = scale · dSᵀ · Q
        Run(BatchedGemm{CUBLAS_OP_N, CUBLAS_OP_T, head_dim_, seq, seq, scale_, q, ld_qkv, head_dim_, dscores, seq,
                        SeqSquared(seq), dk, CUDA_R_16BF, ld_qkv, head_dim_},
            group);
      }
    }
  }

 private:
  static long long SeqSquared(int seq) { return static_cast<long long>(seq) * seq; }

  void CheckShape(const char* caller, int batch, int seq) const {
    if (batch < 1 || batch > max_batch_ || seq < 1 || seq > max_seq_) {
      throw RuntimeError("cuBLAS attention " + std::string(caller) + ": batch " + std::to_string(batch) + ", seq " +
                         std::to_string(seq) + " outside what it was made for (batch 1.." +
                         std::to_string(max_batch_) + ", seq 1.." + std::to_string(max_seq_) + ")");
    }
  }

  // S (T, T) fp32 = scale · Q (T, hd) · Kᵀ, for each head of the group.
  void ScoresGemm(float* scores, const __nv_bfloat16* q, const __nv_bfloat16* k, int seq, int group) {
    Run(BatchedGemm{CUBLAS_OP_T, CUBLAS_OP_N, seq, seq, head_dim_, scale_, k, 3 * channels_, head_dim_, q,
                    3 * channels_, head_dim_, scores, CUDA_R_32F, seq, SeqSquared(seq)},
        group);
  }

  void Run(const BatchedGemm& gemm, int batch_count) {
    const float beta = 0.0f;
    TB_CHECK_CUBLAS(cublasGemmStridedBatchedEx(handle_.get(), gemm.transa, gemm.transb, gemm.m, gemm.n, gemm.k,
                                               &gemm.alpha, gemm.a, CUDA_R_16BF, gemm.lda, gemm.stride_a, gemm.b,
                                               CUDA_R_16BF, gemm.ldb, gemm.stride_b, &beta, gemm.c, gemm.c_type,
                                               gemm.ldc, gemm.stride_c, batch_count, CUBLAS_COMPUTE_32F,
                                               CUBLAS_GEMM_DEFAULT));
  }

  int channels_;
  int heads_;
  int head_dim_;
  int max_batch_;
  int max_seq_;
  int heads_per_group_ = 1;
  float scale_;
  cudaStream_t stream_;
  CublasHandle handle_;
  DeviceBuffer scores_;   // (group, T, T) fp32: S
  DeviceBuffer dprobs_;   // (group, T, T) fp32: dP (backward)
  DeviceBuffer probs_;    // (group, T, T) bf16: P
  DeviceBuffer dscores_;  // (group, T, T) bf16: dS (backward)
};

}  // namespace

std::unique_ptr<Attention> MakeCublasAttention(int channels, int heads, int max_batch, int max_seq, void* stream) {
  if (channels < 1 || heads < 1 || channels % heads != 0 || max_batch < 1 || max_seq < 1) {
    throw RuntimeError("MakeCublasAttention: invalid shape (channels " + std::to_string(channels) + ", heads " +
                       std::to_string(heads) + ", max_batch " + std::to_string(max_batch) + ", max_seq " +
                       std::to_string(max_seq) + ")");
  }
  return std::make_unique<CublasAttention>(channels, heads, max_batch, max_seq, stream);
}

}  // namespace tb::gpu
