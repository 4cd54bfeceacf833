// Per-element math shared by host and device code: the same formulas as the CPU reference's inline functions
// in cpu_kernels.h (GPT-2's tanh-approximated GELU and its derivative, one AdamW element), written once so that
// the CUDA kernels and any host code compute them identically. tanh comes from tanhf rather than the
// reference's TanhViaExp (a vectorising host trick with no use on the device), so results differ from the
// reference by the two tanh approximations' error, ~1e-7 absolute. Measured over x in [-100, 100]: Gelu within
// 3.2e-7·max(1, |value|); GeluGrad within 3.4e-7·max(1, |0.5·x·du/dx|), because where tanh saturates its
// 1 - t² cancels and both versions lose the same ~1 ulp of t, amplified by that factor (12 at |x| = 5), so the
// absolute difference reaches 2e-6 there (tests/gpu_kernels_test.cc checks 1e-6 times those scales). On the
// device, tanhf (2 ulp) adds about as much again.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define TB_HOST_DEVICE __host__ __device__
#else
#define TB_HOST_DEVICE
#endif

namespace tb::element {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// GPT-2's GELU, tanh approximation: 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))).
TB_HOST_DEVICE inline float Gelu(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// d Gelu(x) / dx.
TB_HOST_DEVICE inline float GeluGrad(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float t = tanhf(u);
  const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
}

// One AdamW element, bias-corrected (m_correction = 1/(1 - beta1^step), likewise v), with decoupled weight
// decay: the same arithmetic in the same order as cpu::AdamWElement, so the two agree to rounding.
TB_HOST_DEVICE inline void AdamWElement(float& param, float grad, float& m, float& v, float learning_rate,
                                        float beta1, float beta2, float epsilon, float weight_decay,
                                        float m_correction, float v_correction) {
  m = beta1 * m + (1.0f - beta1) * grad;
  v = beta2 * v + (1.0f - beta2) * grad * grad;
  const float m_hat = m * m_correction;
  const float v_hat = v * v_correction;
  param -= learning_rate * (m_hat / (sqrtf(v_hat) + epsilon) + weight_decay * param);
}

// The softmax normaliser of a stream of logits in one pass (the online softmax of Milakov and Gimelshein, 2018):
// the largest value so far and Σ exp(x − max) over the values so far. Two of them (two threads' shares of a row)
// merge into the one of the values of both. Empty: max −∞, sum 0. Logits are finite.
struct SoftmaxAccumulator {
  float max = -INFINITY;
  float sum = 0.0f;
};

TB_HOST_DEVICE inline SoftmaxAccumulator SoftmaxAdd(SoftmaxAccumulator a, float x) {
  if (x > a.max) {
    a.sum = a.sum * expf(a.max - x) + 1.0f;  // rescale what was summed against the new max (0 when empty)
    a.max = x;
  } else {
    a.sum += expf(x - a.max);
  }
  return a;
}

TB_HOST_DEVICE inline SoftmaxAccumulator SoftmaxMerge(SoftmaxAccumulator a, SoftmaxAccumulator b) {
  if (a.max < b.max) {
    const SoftmaxAccumulator larger = b;
    b = a;
    a = larger;
  }
  if (b.sum == 0.0f) return a;  // b is empty (and so is a, if its max is −∞ too)
  a.sum += b.sum * expf(b.max - a.max);
  return a;
}

}  // namespace tb::element
