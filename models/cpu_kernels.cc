#include "cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <numeric>

namespace tb::cpu {
namespace {

// Reductions over eight independent lanes: the compiler may not reorder a single float accumulator, so one
// accumulator would keep these loops scalar and bound by the latency of each add.
constexpr int kLanes = 8;

float MaxOf(const float* x, int count) {
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, x[0]);
  int i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] = x[i + k] > lanes[k] ? x[i + k] : lanes[k];
  }
  for (; i < count; ++i) lanes[0] = x[i] > lanes[0] ? x[i] : lanes[0];
  return *std::max_element(lanes, lanes + kLanes);
}

float SumOf(const float* x, int count) {
  float lanes[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] += x[i + k];
  }
  for (; i < count; ++i) lanes[0] += x[i];
  return std::accumulate(lanes, lanes + kLanes, 0.0f);
}

float DotOf(const float* x, const float* y, int count) {
  float lanes[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= count; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) lanes[k] += x[i + k] * y[i + k];
  }
  for (; i < count; ++i) lanes[0] += x[i] * y[i];
  return std::accumulate(lanes, lanes + kLanes, 0.0f);
}

// x[i] = Exp(x[i] - shift), in place.
void ExpShifted(float* x, int count, float shift) {
  for (int i = 0; i < count; ++i) x[i] = Exp(x[i] - shift);
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

void LayerNormRowBackward(float* in_grad, float* weight_grad, float* bias_grad, const float* out_grad,
                          const float* in, const float* weight, float mean, float rstd, int channels) {
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
    weight_grad[c] += out_grad[c] * norm;
    bias_grad[c] += out_grad[c];
  }
}

float CausalSoftmaxRow(float* row, int length, int width) {
  const float max = MaxOf(row, length);
  ExpShifted(row, length, max);
  const float sum = SumOf(row, length);
  const float inverse = 1.0f / sum;
  for (int j = 0; j < length; ++j) row[j] *= inverse;
  std::fill(row + length, row + width, 0.0f);
  return max + std::log(sum);
}

void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int batch, int seq,
                    int channels) {
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < seq; ++t) {
      const size_t row = static_cast<size_t>(b) * seq + t;
      float* o = out + row * channels;
      const float* token_row = wte + static_cast<size_t>(tokens[row]) * channels;
      const float* position_row = wpe + static_cast<size_t>(t) * channels;
      for (int c = 0; c < channels; ++c) o[c] = token_row[c] + position_row[c];
    }
  }
}

void EncoderBackward(float* wte_grad, float* wpe_grad, const float* out_grad, const int32_t* tokens, int batch,
                     int seq, int channels) {
  for (int b = 0; b < batch; ++b) {
    for (int t = 0; t < seq; ++t) {
      const size_t row = static_cast<size_t>(b) * seq + t;
      const float* g = out_grad + row * channels;
      float* token_row = wte_grad + static_cast<size_t>(tokens[row]) * channels;
      float* position_row = wpe_grad + static_cast<size_t>(t) * channels;
      for (int c = 0; c < channels; ++c) {
        token_row[c] += g[c];
        position_row[c] += g[c];
      }
    }
  }
}

void LayerNormForward(float* out, float* mean, float* rstd, const float* in, const float* weight,
                      const float* bias, size_t rows, int channels) {
  for (size_t r = 0; r < rows; ++r) {
    LayerNormRowForward(out + r * channels, mean + r, rstd + r, in + r * channels, weight, bias, channels);
  }
}

void LayerNormBackward(float* in_grad, float* weight_grad, float* bias_grad, const float* out_grad,
                       const float* in, const float* weight, const float* mean, const float* rstd, size_t rows,
                       int channels) {
  for (size_t r = 0; r < rows; ++r) {
    LayerNormRowBackward(in_grad + r * channels, weight_grad, bias_grad, out_grad + r * channels,
                         in + r * channels, weight, mean[r], rstd[r], channels);
  }
}

void MatmulForward(float* out, const float* in, const float* weight, const float* bias, const float* residual,
                   size_t rows, int in_channels, int out_channels) {
  // Start from residual + bias so that one sgemm with beta = 1 adds the product in its own pass.
  const bool preset = bias != nullptr || residual != nullptr;
  if (preset) {
    for (size_t r = 0; r < rows; ++r) {
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
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), out_channels, in_channels, 1.0f, in,
              in_channels, weight, in_channels, preset ? 1.0f : 0.0f, out, out_channels);
}

void MatmulBackward(float* in_grad, float* weight_grad, float* bias_grad, const float* out_grad, const float* in,
                    const float* weight, size_t rows, int in_channels, int out_channels) {
  const int n = static_cast<int>(rows);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out_channels, in_channels, n, 1.0f, out_grad, out_channels,
              in, in_channels, 1.0f, weight_grad, in_channels);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in_channels, out_channels, 1.0f, out_grad,
              out_channels, weight, in_channels, 0.0f, in_grad, in_channels);
  if (bias_grad != nullptr) {
    for (size_t r = 0; r < rows; ++r) {
      const float* g = out_grad + r * out_channels;
      for (int c = 0; c < out_channels; ++c) bias_grad[c] += g[c];
    }
  }
}

void AttentionForward(float* out, float* lse, float* scratch, const float* qkv, int batch, int seq, int channels,
                      int heads) {
  const int head_dim = channels / heads;
  const int qkv_stride = 3 * channels;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads; ++h) {
      const float* q = qkv + static_cast<size_t>(b) * seq * qkv_stride + h * head_dim;  // (T, hs), stride 3C
      const float* k = q + channels;
      const float* v = q + 2 * channels;
      float* y = out + static_cast<size_t>(b) * seq * channels + h * head_dim;  // (T, hs), stride C
      float* row_lse = lse + (static_cast<size_t>(b) * heads + h) * seq;       // (T)
      for (int r0 = 0; r0 < seq; r0 += kAttentionBlockRows) {
        const int r1 = std::min(r0 + kAttentionBlockRows, seq);
        const int rows = r1 - r0;
        float* att = scratch;  // (rows, r1), stride T: queries r0..r1 against keys 0..r1
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, head_dim, scale, q + r0 * qkv_stride,
                    qkv_stride, k, qkv_stride, 0.0f, att, seq);
        for (int i = 0; i < rows; ++i) row_lse[r0 + i] = CausalSoftmaxRow(att + i * seq, r0 + i + 1, r1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, r1, 1.0f, att, seq, v, qkv_stride,
                    0.0f, y + r0 * channels, channels);
      }
    }
  }
}

void AttentionBackward(float* qkv_grad, float* scratch, const float* out_grad, const float* qkv, const float* lse,
                       int batch, int seq, int channels, int heads) {
  const int head_dim = channels / heads;
  const int qkv_stride = 3 * channels;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int last_block = (seq - 1) / kAttentionBlockRows * kAttentionBlockRows;
  for (int b = 0; b < batch; ++b) {
    for (int h = 0; h < heads; ++h) {
      const size_t head = static_cast<size_t>(b) * seq * qkv_stride + h * head_dim;
      const float* q = qkv + head;  // (T, hs), stride 3C
      const float* k = q + channels;
      const float* v = q + 2 * channels;
      float* dq = qkv_grad + head;
      float* dk = dq + channels;
      float* dv = dq + 2 * channels;
      const float* dy = out_grad + static_cast<size_t>(b) * seq * channels + h * head_dim;  // (T, hs), stride C
      const float* row_lse = lse + (static_cast<size_t>(b) * heads + h) * seq;
      // The last block reaches every key, so it writes dk and dv whole (beta = 0); earlier blocks add to them.
      for (int r0 = last_block; r0 >= 0; r0 -= kAttentionBlockRows) {
        const int r1 = std::min(r0 + kAttentionBlockRows, seq);
        const int rows = r1 - r0;
        const float beta = r0 == last_block ? 0.0f : 1.0f;
        float* att = scratch;                                    // (rows, r1), stride T
        float* datt = scratch + kAttentionBlockRows * seq;  // (rows, r1), stride T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, head_dim, scale, q + r0 * qkv_stride,
                    qkv_stride, k, qkv_stride, 0.0f, att, seq);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, head_dim, 1.0f, dy + r0 * channels, channels,
                    v, qkv_stride, 0.0f, datt, seq);
        for (int i = 0; i < rows; ++i) {
          // Probabilities from the saved log-sum-exp; then the softmax backward,
          // d score_j = p_j·(d p_j - Σ_k p_k·d p_k), zero where the mask hid the key.
          const int length = r0 + i + 1;
          float* p = att + i * seq;
          float* dp = datt + i * seq;
          ExpShifted(p, length, row_lse[r0 + i]);
          const float dot = DotOf(p, dp, length);
          for (int j = 0; j < length; ++j) dp[j] = p[j] * (dp[j] - dot);
          std::fill(p + length, p + r1, 0.0f);
          std::fill(dp + length, dp + r1, 0.0f);
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, head_dim, rows, 1.0f, att, seq,
                    dy + r0 * channels, channels, beta, dv, qkv_stride);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, head_dim, r1, scale, datt, seq, k, qkv_stride,
                    0.0f, dq + r0 * qkv_stride, qkv_stride);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, head_dim, rows, scale, datt, seq,
                    q + r0 * qkv_stride, qkv_stride, beta, dk, qkv_stride);
      }
    }
  }
}

void GeluForward(float* out, const float* in, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = Gelu(in[i]);
}

void GeluBackward(float* grad, const float* in, size_t count) {
  for (size_t i = 0; i < count; ++i) grad[i] *= GeluGrad(in[i]);
}

float CrossEntropyForward(float* logits, const int32_t* targets, size_t rows, int vocab) {
  double loss_sum = 0.0;
  for (size_t r = 0; r < rows; ++r) {
    float* row = logits + r * vocab;
    const float target_logit = row[targets[r]];
    const float max = MaxOf(row, vocab);
    ExpShifted(row, vocab, max);
    const float sum = SumOf(row, vocab);
    const float inverse = 1.0f / sum;
    for (int j = 0; j < vocab; ++j) row[j] *= inverse;
    // -log softmax(target) from the logits themselves: exact even where the probability underflows.
    loss_sum += std::log(sum) + max - target_logit;
  }
  return static_cast<float>(loss_sum / rows);
}

void CrossEntropyBackward(float* probs, const int32_t* targets, size_t rows, int vocab) {
  const float inverse_rows = 1.0f / rows;
  for (size_t r = 0; r < rows; ++r) {
    float* row = probs + r * vocab;
    row[targets[r]] -= 1.0f;
    for (int j = 0; j < vocab; ++j) row[j] *= inverse_rows;
  }
}

void AdamWUpdate(float* params, const float* grads, float* m, float* v, size_t count, const AdamWConfig& config,
                 float weight_decay, int64_t step) {
  const float m_correction = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(config.beta1), step)));
  const float v_correction = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(config.beta2), step)));
  for (size_t i = 0; i < count; ++i) {
    AdamWElement(params[i], grads[i], m[i], v[i], config.learning_rate, config.beta1, config.beta2, config.epsilon,
                 weight_decay, m_correction, v_correction);
  }
}

}  // namespace tb::cpu
