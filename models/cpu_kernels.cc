#include "cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <vector>

#include "cpu_parallel.h"
#include "peaks.h"

// The per-element loops below are compiled for AVX-512 and AVX2 too, the variant picked at load time for the CPU
// (function multiversioning): a baseline x86-64 build otherwise runs them 4 floats wide. models/CMakeLists.txt
// compiles this file with -ffp-contract=off, so that no variant fuses a multiply and an add: all give the same bits.
// The helpers they call are inlined into each variant (TB_INLINE), or would run in the baseline's width.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TB_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define TB_INLINE __attribute__((always_inline)) inline
#else
#define TB_VECTOR_CLONES
#define TB_INLINE inline
#endif

namespace tb::cpu {
namespace {

// Reductions over eight independent lanes: the compiler may not reorder a single float accumulator, so one
// accumulator would keep these loops scalar and bound by the latency of each add.
constexpr int kLanes = 8;

TB_INLINE float MaxOf(const float* x, int count) {
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, x[0]);
  int i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] = x[i + k] > lanes[k] ? x[i + k] : lanes[k];
  }
  for (; i < count; ++i) lanes[0] = x[i] > lanes[0] ? x[i] : lanes[0];
  return *std::max_element(lanes, lanes + kLanes);
}

TB_INLINE float SumOf(const float* x, int count) {
  float lanes[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] += x[i + k];
  }
  for (; i < count; ++i) lanes[0] += x[i];
  return std::accumulate(lanes, lanes + kLanes, 0.0f);
}

TB_INLINE float DotOf(const float* x, const float* y, int count) {
  float lanes[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] += x[i + k] * y[i + k];
  }
  for (; i < count; ++i) lanes[0] += x[i] * y[i];
  return std::accumulate(lanes, lanes + kLanes, 0.0f);
}

// x[i] = Exp(x[i] - shift), in place.
TB_INLINE void ExpShifted(float* x, int count, float shift) {
  for (int i = 0; i < count; ++i) x[i] = Exp(x[i] - shift);
}

// --- spreading a layer over the threads ---------------------------------------------------------------------

// Work of at least this many floats per piece: a smaller piece costs more to hand to a thread than it saves.
constexpr size_t kMinPieceFloats = 16384;
// Pieces per thread, so that a thread slowed by another process leaves its share to the others.
constexpr size_t kPiecesPerThread = 4;
// Column pieces start at multiples of 16 floats (64 bytes), so that no two share a cache line.
constexpr size_t kColumnAlign = 16;

// Calls body(begin, end) over consecutive pieces of [0, count) on CpuThreads() threads, each piece at least `grain`
// items long (but the last) and starting at a multiple of `align`. The bodies must write only what their piece owns;
// then no result depends on how [0, count) was split.
void ForPieces(size_t count, size_t grain, size_t align, const std::function<void(size_t, size_t)>& body) {
  if (count == 0) return;
  const size_t threads = static_cast<size_t>(std::max(1, CpuThreads()));
  const size_t wanted = std::clamp(count / std::max<size_t>(grain, 1), size_t{1}, threads * kPiecesPerThread);
  const size_t piece = ((count + wanted - 1) / wanted + align - 1) / align * align;
  ParallelFor((count + piece - 1) / piece, static_cast<int>(threads),
              [&](size_t i, int) { body(i * piece, std::min(count, (i + 1) * piece)); });
}

// Rows [begin, end) of a (rows, width) tensor whose rows are independent.
void ForRows(size_t rows, size_t width, const std::function<void(size_t, size_t)>& body) {
  ForPieces(rows, std::max<size_t>(1, kMinPieceFloats / std::max<size_t>(width, 1)), 1, body);
}

// Column pieces of a reduction over rows are at least this wide: each piece walks every row, and a narrower one
// spends more on the walk than on its columns.
constexpr size_t kMinColumnPiece = 64;

// Columns [begin, end) of a (rows, columns) reduction over rows: each piece walks every row in order, so every
// column's sum is added in row order, the same bits at any thread count.
void ForColumns(size_t columns, size_t rows, const std::function<void(size_t, size_t)>& body) {
  ForPieces(columns, std::max(kMinColumnPiece, kMinPieceFloats / std::max<size_t>(rows, 1)), kColumnAlign, body);
}

// Products below this many multiply-adds run as one sgemm call: too little work to split (OpenBLAS's own threshold).
constexpr double kMinSplitGemm = 1 << 18;
// Pieces of a split GEMM start at multiples of 16 rows or columns (64 bytes of C's rows).
constexpr int kGemmAlign = 16;

// C (M, N) = alpha·op(A)·op(B) + beta·C, row-major, on CpuThreads() threads, each piece a single-threaded sgemm on
// the pool (OpenBLAS's own threads would spin between calls, taking a core from the layers in between): C's rows
// split one piece per thread when it has at least as many rows as columns (each piece packs all of B), else its
// columns (each packs all of A). The split depends on the shape and the thread count only.
void Gemm(CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  const int threads = CpuThreads();
  if (threads < 2 || static_cast<double>(m) * n * k < kMinSplitGemm) {
    cblas_sgemm(CblasRowMajor, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const bool split_rows = m >= n;
  const int extent = split_rows ? m : n;
  const int piece = ((extent + threads - 1) / threads + kGemmAlign - 1) / kGemmAlign * kGemmAlign;
  ParallelFor((extent + piece - 1) / piece, threads, [&](size_t i, int) {
    const int begin = static_cast<int>(i) * piece, size = std::min(piece, extent - begin);
    if (split_rows) {  // rows begin… of op(A) and of C
      const float* a_rows = trans_a == CblasTrans ? a + begin : a + static_cast<size_t>(begin) * lda;
      cblas_sgemm(CblasRowMajor, trans_a, trans_b, size, n, k, alpha, a_rows, lda, b, ldb, beta,
                  c + static_cast<size_t>(begin) * ldc, ldc);
    } else {  // columns begin… of op(B) and of C
      const float* b_columns = trans_b == CblasTrans ? b + static_cast<size_t>(begin) * ldb : b + begin;
      cblas_sgemm(CblasRowMajor, trans_a, trans_b, m, size, k, alpha, a, lda, b_columns, ldb, beta, c + begin, ldc);
    }
  });
}

// Worker 0 (the calling thread) uses the caller's scratch; every other worker a buffer of its thread's own, kept
// for the next call.
float* WorkerScratch(float* caller_scratch, int worker, size_t floats) {
  if (worker == 0) return caller_scratch;
  thread_local std::vector<float> own;
  if (own.size() < floats) own.resize(floats);
  return own.data();
}

}  // namespace

void LayerNormRowForward(float* out, float* mean, float* rstd, const float* in, const float* weight,
                         const float* bias, int channels) {
  float sum = 0.0f;
  for (int c = 0; c < channels; ++c) sum += in[c];
  const float m = sum / channels;
  // Two passes: the variance of centred values does not cancel catastrophically when |mean| >> stddev.
  float squares = 0.0f;
  for (int c = 0; c < channels; ++c) {
    const float centred = in[c] - m;
    squares += centred * centred;
  }
  const float s = 1.0f / std::sqrt(squares / channels + kLayerNormEpsilon);
  for (int c = 0; c < channels; ++c) out[c] = (in[c] - m) * s * weight[c] + bias[c];
  *mean = m;
  *rstd = s;
}

void LayerNormRowBackward(float* in_grad, const float* out_grad, const float* in, const float* weight, float mean,
                          float rstd, int channels) {
  // With n = (x - mean)·rstd and g = out_grad·weight: dx = rstd·(g - mean(g) - n·mean(g·n)).
  float g_sum = 0.0f;
  float gn_sum = 0.0f;
  for (int c = 0; c < channels; ++c) {
    const float norm = (in[c] - mean) * rstd;
    const float g = out_grad[c] * weight[c];
    g_sum += g;
    gn_sum += g * norm;
  }
  const float g_mean = g_sum / channels;
  const float gn_mean = gn_sum / channels;
  for (int c = 0; c < channels; ++c) {
    const float norm = (in[c] - mean) * rstd;
    const float g = out_grad[c] * weight[c];
    in_grad[c] += rstd * (g - g_mean - norm * gn_mean);
  }
}

namespace {

TB_INLINE float SoftmaxRowInline(float* row, int length, int width) {
  const float max = MaxOf(row, length);
  ExpShifted(row, length, max);
  const float sum = SumOf(row, length);
  const float inverse = 1.0f / sum;
  for (int j = 0; j < length; ++j) row[j] *= inverse;
  std::fill(row + length, row + width, 0.0f);
  return max + std::log(sum);
}

}  // namespace

float CausalSoftmaxRow(float* row, int length, int width) { return SoftmaxRowInline(row, length, width); }

namespace {

// The column reductions over rows, columns [begin, end) of each row in row order (ForColumns), in the vector width of
// the CPU. A gradient row and the row read never overlap (__restrict), which lets each row's loop vectorise.

// wte_grad[tokens[r]] and wpe_grad[r % seq] += out_grad[r].
TB_VECTOR_CLONES void EncoderGradColumns(float* wte_grad, float* wpe_grad, const float* out_grad, const int32_t* tokens,
                                         size_t rows, int seq, int channels, size_t begin, size_t end) {
  for (size_t row = 0; row < rows; ++row) {
    const float* __restrict g = out_grad + row * channels;
    float* __restrict token_row = wte_grad + static_cast<size_t>(tokens[row]) * channels;
    float* __restrict position_row = wpe_grad + (row % seq) * channels;
    for (size_t c = begin; c < end; ++c) {
      token_row[c] += g[c];
      position_row[c] += g[c];
    }
  }
}

// weight_grad += out_grad · normalised in, bias_grad += out_grad, summed over rows.
TB_VECTOR_CLONES void LayerNormParamGradColumns(float* __restrict weight_grad, float* __restrict bias_grad,
                                                const float* out_grad, const float* in, const float* mean,
                                                const float* rstd, size_t rows, int channels, size_t begin,
                                                size_t end) {
  for (size_t r = 0; r < rows; ++r) {
    const float* __restrict g = out_grad + r * channels;
    const float* __restrict x = in + r * channels;
    const float row_mean = mean[r], row_rstd = rstd[r];
    for (size_t c = begin; c < end; ++c) {
      weight_grad[c] += g[c] * ((x[c] - row_mean) * row_rstd);
      bias_grad[c] += g[c];
    }
  }
}

// bias_grad += out_grad, summed over rows.
TB_VECTOR_CLONES void BiasGradColumns(float* __restrict bias_grad, const float* out_grad, size_t rows, int channels,
                                      size_t begin, size_t end) {
  for (size_t r = 0; r < rows; ++r) {
    const float* __restrict g = out_grad + r * channels;
    for (size_t c = begin; c < end; ++c) bias_grad[c] += g[c];
  }
}

}  // namespace

void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int batch, int seq,
                    int channels) {
  ForRows(static_cast<size_t>(batch) * seq, channels, [&](size_t begin, size_t end) {
    for (size_t row = begin; row < end; ++row) {
      float* o = out + row * channels;
      const float* token_row = wte + static_cast<size_t>(tokens[row]) * channels;
      const float* position_row = wpe + (row % seq) * channels;
      for (int c = 0; c < channels; ++c) o[c] = token_row[c] + position_row[c];
    }
  });
}

void EncoderBackward(float* wte_grad, float* wpe_grad, const float* out_grad, const int32_t* tokens, int batch,
                     int seq, int channels) {
  // Split by channels: rows that share a token or a position add into the same gradient row, in row order.
  const size_t rows = static_cast<size_t>(batch) * seq;
  ForColumns(channels, rows, [&](size_t begin, size_t end) {
    EncoderGradColumns(wte_grad, wpe_grad, out_grad, tokens, rows, seq, channels, begin, end);
  });
}

void LayerNormForward(float* out, float* mean, float* rstd, const float* in, const float* weight,
                      const float* bias, size_t rows, int channels) {
  ForRows(rows, channels, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      LayerNormRowForward(out + r * channels, mean + r, rstd + r, in + r * channels, weight, bias, channels);
    }
  });
}

void LayerNormBackward(float* in_grad, float* weight_grad, float* bias_grad, const float* out_grad,
                       const float* in, const float* weight, const float* mean, const float* rstd, size_t rows,
                       int channels) {
  ForRows(rows, channels, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) {
      LayerNormRowBackward(in_grad + r * channels, out_grad + r * channels, in + r * channels, weight, mean[r], rstd[r],
                           channels);
    }
  });
  ForColumns(channels, rows, [&](size_t begin, size_t end) {
    LayerNormParamGradColumns(weight_grad, bias_grad, out_grad, in, mean, rstd, rows, channels, begin, end);
  });
}

void MatmulForward(float* out, const float* in, const float* weight, const float* bias, const float* residual,
                   size_t rows, int in_channels, int out_channels) {
  // Start from residual + bias so that one sgemm with beta = 1 adds the product in its own pass.
  const bool preset = bias != nullptr || residual != nullptr;
  if (preset) {
    ForRows(rows, out_channels, [&](size_t begin, size_t end) {
      for (size_t r = begin; r < end; ++r) {
        float* o = out + r * out_channels;
        if (residual != nullptr) {
          std::memcpy(o, residual + r * out_channels, sizeof(float) * out_channels);
        } else {
          std::fill(o, o + out_channels, 0.0f);
        }
        if (bias != nullptr) {
          for (int c = 0; c < out_channels; ++c) o[c] += bias[c];
        }
      }
    });
  }
  Gemm(CblasNoTrans, CblasTrans, static_cast<int>(rows), out_channels, in_channels, 1.0f, in, in_channels, weight,
       in_channels, preset ? 1.0f : 0.0f, out, out_channels);
}

void MatmulBackward(float* in_grad, float* weight_grad, float* bias_grad, const float* out_grad, const float* in,
                    const float* weight, size_t rows, int in_channels, int out_channels) {
  const int n = static_cast<int>(rows);
  Gemm(CblasTrans, CblasNoTrans, out_channels, in_channels, n, 1.0f, out_grad, out_channels, in, in_channels, 1.0f,
       weight_grad, in_channels);
  Gemm(CblasNoTrans, CblasNoTrans, n, in_channels, out_channels, 1.0f, out_grad, out_channels, weight, in_channels,
       0.0f, in_grad, in_channels);
  if (bias_grad == nullptr) return;
  ForColumns(out_channels, rows,
             [&](size_t begin, size_t end) { BiasGradColumns(bias_grad, out_grad, rows, out_channels, begin, end); });
}

namespace {

// One (sequence, head) pair of the attention, its tensors with their strides: q, k, v (T, hs) at stride 3C in
// qkv, y and dy (T, hs) at stride C, lse (T).
struct AttentionHead {
  int seq, channels, head_dim;
  float scale;
  size_t qkv_offset;  // of q's first element in qkv and qkv_grad
  size_t y_offset;    // of y's first element in out and out_grad
  size_t lse_offset;
};

AttentionHead HeadOf(size_t pair, int seq, int channels, int heads) {
  const size_t b = pair / heads, h = pair % heads;
  const int head_dim = channels / heads;
  return {seq,
          channels,
          head_dim,
          1.0f / std::sqrt(static_cast<float>(head_dim)),
          b * seq * 3 * channels + h * head_dim,
          b * seq * channels + h * head_dim,
          pair * seq};
}

// Rows r0 … r0+rows-1 of a block of scores (stride `stride`, keys up to `width`): their causal softmax in place and
// its log-sum-exp.
TB_VECTOR_CLONES void SoftmaxRows(float* att, float* lse, int r0, int rows, int width, int stride) {
  for (int i = 0; i < rows; ++i) lse[r0 + i] = SoftmaxRowInline(att + i * stride, r0 + i + 1, width);
}

void AttentionHeadForward(float* y, float* lse, float* att, const float* q, const AttentionHead& head) {
  const int seq = head.seq, hs = head.head_dim, qkv_stride = 3 * head.channels;
  const float* k = q + head.channels;
  const float* v = q + 2 * head.channels;
  for (int r0 = 0; r0 < seq; r0 += kAttentionBlockRows) {
    const int r1 = std::min(r0 + kAttentionBlockRows, seq);
    const int rows = r1 - r0;
    // att (rows, r1), stride T: queries r0..r1 against keys 0..r1
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, head.scale, q + r0 * qkv_stride, qkv_stride, k,
                qkv_stride, 0.0f, att, seq);
    SoftmaxRows(att, lse, r0, rows, r1, seq);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f, att, seq, v, qkv_stride, 0.0f,
                y + r0 * head.channels, head.channels);
  }
}

// Rows r0 … r0+rows-1 of a block: the probabilities p from the saved log-sum-exp, then the softmax backward in
// place of dp, d score_j = p_j·(d p_j - Σ_k p_k·d p_k), both zero where the mask hid the key (up to width).
TB_VECTOR_CLONES void SoftmaxBackwardRows(float* att, float* datt, const float* lse, int r0, int rows, int width, int stride) {
  for (int i = 0; i < rows; ++i) {
    const int length = r0 + i + 1;
    float* p = att + i * stride;
    float* dp = datt + i * stride;
    ExpShifted(p, length, lse[r0 + i]);
    const float dot = DotOf(p, dp, length);
    for (int j = 0; j < length; ++j) dp[j] = p[j] * (dp[j] - dot);
    std::fill(p + length, p + width, 0.0f);
    std::fill(dp + length, dp + width, 0.0f);
  }
}

void AttentionHeadBackward(float* dq, float* scratch, const float* dy, const float* q, const float* lse,
                           const AttentionHead& head) {
  const int seq = head.seq, hs = head.head_dim, c = head.channels, qkv_stride = 3 * c;
  const float* k = q + c;
  const float* v = q + 2 * c;
  float* dk = dq + c;
  float* dv = dq + 2 * c;
  float* att = scratch;                               // (rows, r1), stride T
  float* datt = scratch + kAttentionBlockRows * seq;  // (rows, r1), stride T
  // The last block reaches every key, so it writes dk and dv whole (beta = 0); earlier blocks add to them.
  const int last_block = (seq - 1) / kAttentionBlockRows * kAttentionBlockRows;
  for (int r0 = last_block; r0 >= 0; r0 -= kAttentionBlockRows) {
    const int r1 = std::min(r0 + kAttentionBlockRows, seq);
    const int rows = r1 - r0;
    const float beta = r0 == last_block ? 0.0f : 1.0f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, head.scale, q + r0 * qkv_stride, qkv_stride, k,
                qkv_stride, 0.0f, att, seq);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f, dy + r0 * c, c, v, qkv_stride, 0.0f,
                datt, seq);
    SoftmaxBackwardRows(att, datt, lse, r0, rows, r1, seq);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.0f, att, seq, dy + r0 * c, c, beta, dv,
                qkv_stride);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, head.scale, datt, seq, k, qkv_stride, 0.0f,
                dq + r0 * qkv_stride, qkv_stride);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, head.scale, datt, seq, q + r0 * qkv_stride,
                qkv_stride, beta, dk, qkv_stride);
  }
}

}  // namespace

void AttentionForward(float* out, float* lse, float* scratch, const float* qkv, int batch, int seq, int channels,
                      int heads) {
  const size_t scratch_floats = static_cast<size_t>(kAttentionBlockRows) * seq;
  ParallelFor(static_cast<size_t>(batch) * heads, CpuThreads(), [&](size_t pair, int worker) {
    const AttentionHead head = HeadOf(pair, seq, channels, heads);
    AttentionHeadForward(out + head.y_offset, lse + head.lse_offset, WorkerScratch(scratch, worker, scratch_floats),
                         qkv + head.qkv_offset, head);
  });
}

void AttentionBackward(float* qkv_grad, float* scratch, const float* out_grad, const float* qkv, const float* lse,
                       int batch, int seq, int channels, int heads) {
  const size_t scratch_floats = 2 * static_cast<size_t>(kAttentionBlockRows) * seq;
  ParallelFor(static_cast<size_t>(batch) * heads, CpuThreads(), [&](size_t pair, int worker) {
    const AttentionHead head = HeadOf(pair, seq, channels, heads);
    AttentionHeadBackward(qkv_grad + head.qkv_offset, WorkerScratch(scratch, worker, scratch_floats),
                          out_grad + head.y_offset, qkv + head.qkv_offset, lse + head.lse_offset, head);
  });
}

namespace {

TB_VECTOR_CLONES void GeluRange(float* out, const float* in, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) out[i] = Gelu(in[i]);
}

TB_VECTOR_CLONES void GeluGradRange(float* grad, const float* in, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) grad[i] *= GeluGrad(in[i]);
}

// Rows [begin, end) of the logits become probabilities; losses[r] = -log softmax(target) from the logits themselves,
// exact even where the probability underflows.
TB_VECTOR_CLONES void CrossEntropyRows(float* logits, const int32_t* targets, float* losses, int vocab, size_t begin,
                                       size_t end) {
  for (size_t r = begin; r < end; ++r) {
    float* row = logits + r * vocab;
    const float target_logit = row[targets[r]];
    const float max = MaxOf(row, vocab);
    ExpShifted(row, vocab, max);
    const float sum = SumOf(row, vocab);
    const float inverse = 1.0f / sum;
    for (int j = 0; j < vocab; ++j) row[j] *= inverse;
    losses[r] = std::log(sum) + max - target_logit;
  }
}

TB_VECTOR_CLONES void CrossEntropyGradRows(float* probs, const int32_t* targets, int vocab, float inverse_rows,
                                           size_t begin, size_t end) {
  for (size_t r = begin; r < end; ++r) {
    float* row = probs + r * vocab;
    row[targets[r]] -= 1.0f;
    for (int j = 0; j < vocab; ++j) row[j] *= inverse_rows;
  }
}

struct AdamWArgs {
  float* params;
  const float* grads;
  float* m;
  float* v;
  AdamWConfig config;
  float weight_decay, m_correction, v_correction;
};

TB_VECTOR_CLONES void AdamWRange(const AdamWArgs& a, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    AdamWElement(a.params[i], a.grads[i], a.m[i], a.v[i], a.config.learning_rate, a.config.beta1, a.config.beta2,
                 a.config.epsilon, a.weight_decay, a.m_correction, a.v_correction);
  }
}

}  // namespace

void GeluForward(float* out, const float* in, size_t count) {
  ForPieces(count, kMinPieceFloats, kColumnAlign, [&](size_t begin, size_t end) { GeluRange(out, in, begin, end); });
}

void GeluBackward(float* grad, const float* in, size_t count) {
  ForPieces(count, kMinPieceFloats, kColumnAlign, [&](size_t begin, size_t end) { GeluGradRange(grad, in, begin, end); });
}

float CrossEntropyForward(float* logits, const int32_t* targets, size_t rows, int vocab) {
  std::vector<float> losses(rows);
  ForRows(rows, vocab, [&](size_t begin, size_t end) { CrossEntropyRows(logits, targets, losses.data(), vocab, begin, end); });
  double loss_sum = 0.0;  // in row order: the same bits at any thread count
  for (const float loss : losses) loss_sum += loss;
  return static_cast<float>(loss_sum / rows);
}

void CrossEntropyBackward(float* probs, const int32_t* targets, size_t rows, int vocab) {
  const float inverse_rows = 1.0f / rows;
  ForRows(rows, vocab,
          [&](size_t begin, size_t end) { CrossEntropyGradRows(probs, targets, vocab, inverse_rows, begin, end); });
}

void AdamWUpdate(float* params, const float* grads, float* m, float* v, size_t count, const AdamWConfig& config,
                 float weight_decay, int64_t step) {
  const AdamWArgs args{params, grads, m, v, config, weight_decay,
                       static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(config.beta1), step))),
                       static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(config.beta2), step)))};
  ForPieces(count, kMinPieceFloats, kColumnAlign, [&](size_t begin, size_t end) { AdamWRange(args, begin, end); });
}

}  // namespace tb::cpu
