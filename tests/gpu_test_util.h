// What the GPU tests share: the skip message, seeded random inputs, and the element-wise comparison against the
// CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda/attention.h"
#include "cuda/kernels.h"
#include "device.h"
#include "error.h"
#include "input_error_of.h"

namespace tb::test {

inline std::string NoGpuMessage() { return "no usable GPU: " + GpuUnavailableReason(); }

// Whether a failure to make cuDNN's attention is this build's lack of the cuDNN frontend (the stub): the one reason a
// cuDNN test skips. Any other failure (cuDNN refusing a shape, a cuDNN error) fails the test.
inline bool BuiltWithoutCudnnFrontend(const std::string& message) {
  return message.find(gpu::kBuiltWithoutCudnnFrontend) != std::string::npos;
}

inline std::vector<float> RandomNormal(size_t count, float stddev, uint32_t seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> values(count);
  for (float& value : values) value = normal(generator);
  return values;
}

inline std::vector<int32_t> RandomTokens(size_t count, int vocab, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int32_t> uniform(0, vocab - 1);
  std::vector<int32_t> tokens(count);
  for (int32_t& token : tokens) token = uniform(generator);
  return tokens;
}

// Fails, naming how many elements differ and the first of them, unless every
// |actual - expected| <= abs_tol + rel_tol·|expected|.
inline void ExpectAllNear(const std::vector<float>& actual, const std::vector<float>& expected, float abs_tol,
                          float rel_tol, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  size_t failures = 0;
  size_t first = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const bool near = std::fabs(actual[i] - expected[i]) <= abs_tol + rel_tol * std::fabs(expected[i]);
    if (!near && failures++ == 0) first = i;
  }
  EXPECT_EQ(failures, 0u) << what << ": " << failures << " of " << actual.size() << " differ, first at [" << first
                          << "]: gpu " << actual[first] << ", cpu " << expected[first] << " (tolerance " << abs_tol
                          << " + " << rel_tol << "·|cpu|)";
}

// ||actual - expected|| / ||expected||; 0 when both are zero, infinity when only expected is.
inline double RelativeDifference(const float* actual, const float* expected, size_t count) {
  double difference = 0.0;
  double norm = 0.0;
  for (size_t i = 0; i < count; ++i) {
    difference += (static_cast<double>(actual[i]) - expected[i]) * (static_cast<double>(actual[i]) - expected[i]);
    norm += static_cast<double>(expected[i]) * expected[i];
  }
  if (norm == 0.0) return difference == 0.0 ? 0.0 : INFINITY;
  return std::sqrt(difference / norm);
}

// `count` values of device memory on the host (a model's buffer, a tensor inside a carved allocation), after all
// work queued on any stream.
template <typename T>
std::vector<T> DownloadDevice(const T* device, size_t count) {
  gpu::SynchronizeDevice();
  std::vector<T> host(count);
  CopyDeviceToHost(host.data(), device, count * sizeof(T));
  return host;
}

// Random normal values (RandomNormal's), rounded to bf16: `values` for the CPU reference, `bits` for the device.
struct Bf16Values {
  std::vector<float> values;
  std::vector<gpu::Bf16> bits;
};

inline Bf16Values RandomBf16(size_t count, float stddev, uint32_t seed) {
  Bf16Values result{RandomNormal(count, stddev, seed), {}};
  for (float& value : result.values) {
    result.bits.push_back(gpu::ToBf16(value));
    value = gpu::ToFloat(result.bits.back());
  }
  return result;
}

// Shared with the host tests (input_error_of.h), named here as the GPU tests call it.
using tb::InputErrorOf;

}  // namespace tb::test
