// The CPU reference's layers, one function each, in fp32 over a real BLAS: what the CUDA implementation
// mirrors kernel by kernel. Shapes: N = B*T rows (tokens), C channels, NH heads, V vocabulary. Weights are
// (out_features, in_features) row-major, as nn.Linear stores them. Backward functions accumulate (+=) into
// parameter gradients; how each treats its input gradient is said beside it.
//
// Threads: each layer runs on CpuThreads() threads (models/peaks.h) of the pool of models/cpu_parallel.h, split by rows
// (tokens), columns, elements or (sequence, head) pairs; the Matmuls' GEMMs split C's rows or columns into one
// single-threaded sgemm per thread (OpenBLAS's own threads stay asleep: they would spin between calls, taking a core
// from the layers in between). The per-element loops run in AVX-512 or AVX2 variants where the CPU has them, with the
// same bits. One layer call at a time per buffer; calls from two threads on different buffers are safe.
// Determinism: no result depends on timing; at a given thread count every run gives the same bits. Each output
// element is written by one thread; sums across rows (LayerNorm's weight and bias gradients, bias gradients, the wte
// and wpe scatter-adds, the mean loss) are split by columns, so that each column is still added in row order; the
// attention's GEMMs run whole per (sequence, head) pair. So every layer gives the bits of one thread at any thread
// count, except the Matmuls: their GEMM pieces follow the thread count, and a piece may take another of OpenBLAS's
// kernels than the whole product, so across thread counts they agree to rounding (tests/cpu_threads_test.cc checks
// both).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "transformer.h"

namespace tb::cpu {

constexpr float kLayerNormEpsilon = 1e-5f;
// Rows of the causal attention score matrix computed per GEMM: each block multiplies only against the keys
// up to its last row, so the masked upper triangle costs little work.
constexpr int kAttentionBlockRows = 64;

// --- per-element and per-row math -----------------------------------------------------------------------

// exp(x) within 2 ulp, written as arithmetic that the compiler vectorises (a call to expf stays scalar, and
// softmax, cross-entropy and GELU spend most of their time in it). Saturates to exp(±87.5) outside that range
// (1e38, 1e-38: sums and tanh come out as with inf and 0) and propagates NaN.
inline float Exp(float x) {
  // Clamp with integer operations on the bits: a float comparison, which may trap, keeps the loop scalar.
  // A NaN, whose magnitude bits lie above infinity's, passes through.
  constexpr float kLimit = 87.5f;
  const int32_t bits = std::bit_cast<int32_t>(x);
  const int32_t magnitude = bits & 0x7fffffff;
  const bool saturate = magnitude > std::bit_cast<int32_t>(kLimit) && magnitude <= 0x7f800000;
  x = std::bit_cast<float>(saturate ? (bits & ~0x7fffffff) | std::bit_cast<int32_t>(kLimit) : bits);
  // exp(x) = 2^n · exp(r), n = round(x·log2(e)), |r| <= ln(2)/2, where a degree-8 Taylor series is exact to
  // float precision. Adding 1.5·2^23 rounds x·log2(e) to an integer and leaves it in the low mantissa bits
  // (IEEE rounding: -ffast-math would fold the add and subtract away); ln 2 is split so that n·kLn2High is
  // exact.
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f;
  constexpr float kLn2Low = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;
  const float shifted = x * kLog2e + kRoundMagic;
  const float n = shifted - kRoundMagic;
  const float r = x - n * kLn2High - n * kLn2Low;
  float p = 1.0f / 40320;
  p = p * r + 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t exponent = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kRoundMagic);
  return p * std::bit_cast<float>((exponent + 127) << 23);
}

// tanh(u) = 1 - 2/(1 + exp(2u)): one Exp, against libm's tanhf at five times the cost of expf. Absolute error
// ~1e-7.
inline float TanhViaExp(float u) { return 1.0f - 2.0f / (1.0f + Exp(2.0f * u)); }

// GPT-2's GELU, tanh approximation: 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))).
inline float Gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + TanhViaExp(u));
}

// d Gelu(x) / dx.
inline float GeluGrad(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
  const float t = TanhViaExp(u);
  const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
}

// Normalises one row of C values; keeps mean and 1/stddev for backward.
void LayerNormRowForward(float* out, float* mean, float* rstd, const float* in, const float* weight,
                         const float* bias, int channels);
// in_grad += d loss / d in for one row (the weight and bias gradients are sums over rows: LayerNormBackward).
void LayerNormRowBackward(float* in_grad, const float* out_grad, const float* in, const float* weight, float mean,
                          float rstd, int channels);

// Softmax in place over row[0, length), the keys a causal query may see; zeroes row[length, width) so that a
// GEMM over the whole width adds nothing from masked keys. Returns log(sum(exp(row))) of the raw scores, which
// is all backward needs to recompute the probabilities.
float CausalSoftmaxRow(float* row, int length, int width);

// One AdamW element, bias-corrected, with decoupled weight decay.
inline void AdamWElement(float& param, float grad, float& m, float& v, float learning_rate, float beta1,
                         float beta2, float epsilon, float weight_decay, float m_correction, float v_correction) {
  m = beta1 * m + (1.0f - beta1) * grad;
  v = beta2 * v + (1.0f - beta2) * grad * grad;
  const float m_hat = m * m_correction;
  const float v_hat = v * v_correction;
  param -= learning_rate * (m_hat / (std::sqrt(v_hat) + epsilon) + weight_decay * param);
}

// --- layers ---------------------------------------------------------------------------------------------

// out (B, T, C) = wte[tokens] + wpe[t].
void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int batch, int seq,
                    int channels);
// wte_grad and wpe_grad accumulate the embedding gradient out_grad (B, T, C).
void EncoderBackward(float* wte_grad, float* wpe_grad, const float* out_grad, const int32_t* tokens, int batch,
                     int seq, int channels);

// out (N, C) = LayerNorm(in (N, C)); mean, rstd (N) kept for backward.
void LayerNormForward(float* out, float* mean, float* rstd, const float* in, const float* weight,
                      const float* bias, size_t rows, int channels);
// in_grad (N, C) += d loss / d in, so the residual stream's gradient collects it directly.
void LayerNormBackward(float* in_grad, float* weight_grad, float* bias_grad, const float* out_grad,
                       const float* in, const float* weight, const float* mean, const float* rstd, size_t rows,
                       int channels);

// out (N, OC) = residual (N, OC) + in (N, IC) · weightᵀ + bias; bias and residual may be null.
void MatmulForward(float* out, const float* in, const float* weight, const float* bias, const float* residual,
                   size_t rows, int in_channels, int out_channels);
// in_grad (N, IC) = out_grad · weight (overwritten); weight_grad (OC, IC) += out_gradᵀ · in;
// bias_grad (OC) += column sums of out_grad (null when there is no bias).
void MatmulBackward(float* in_grad, float* weight_grad, float* bias_grad, const float* out_grad, const float* in,
                    const float* weight, size_t rows, int in_channels, int out_channels);

// Causal multi-head attention over qkv (B, T, 3C) = [q | k | v] per token: out (B, T, C); lse (B, NH, T)
// holds each query row's log-sum-exp so that backward recomputes the probabilities instead of keeping
// B·NH·T² of them. The (sequence, head) pairs are spread over the threads, each with its own GEMMs and scratch:
// `scratch` (kAttentionBlockRows·T floats) is the calling thread's, the pool's threads keep their own.
void AttentionForward(float* out, float* lse, float* scratch, const float* qkv, int batch, int seq, int channels,
                      int heads);
// qkv_grad (B, T, 3C) is overwritten. scratch holds 2·kAttentionBlockRows·T floats, for the calling thread as in
// AttentionForward.
void AttentionBackward(float* qkv_grad, float* scratch, const float* out_grad, const float* qkv, const float* lse,
                       int batch, int seq, int channels, int heads);

// out = Gelu(in), elementwise over count values.
void GeluForward(float* out, const float* in, size_t count);
// grad *= GeluGrad(in), in place: the MLP's hidden gradient becomes the gradient before GELU.
void GeluBackward(float* grad, const float* in, size_t count);

// Softmax cross-entropy over logits (N, V), turned into probabilities in place; returns the mean loss.
float CrossEntropyForward(float* logits, const int32_t* targets, size_t rows, int vocab);
// probs (N, V) become d mean-loss / d logits in place: (probs - onehot(target)) / N.
void CrossEntropyBackward(float* probs, const int32_t* targets, size_t rows, int vocab);

// AdamW over count elements; step counts from 1.
void AdamWUpdate(float* params, const float* grads, float* m, float* v, size_t count, const AdamWConfig& config,
                 float weight_decay, int64_t step);

}  // namespace tb::cpu
