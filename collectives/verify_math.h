// What every element of a collective's buffers holds, as one set of functions that the host (the MPI backend's check,
// the tests) and the device (collectives/cuda/verify.cu, the NCCL backend's check) both compile: each rank's input,
// the expected output of each element of a receive buffer, whether a value read back matches it for its type, and
// the element conversions (fp16/bf16 in software). No CUDA header: `TB_HOST_DEVICE` is empty for a host compiler.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "data_types.h"

#ifndef TB_HOST_DEVICE
#if defined(__CUDACC__)
#define TB_HOST_DEVICE __host__ __device__
#else
#define TB_HOST_DEVICE
#endif
#endif

namespace tb {

// The value rank `rank` puts at element `i` of its send buffer: small non-negative integers, so that sums over many
// ranks stay exact in every type (bf16 holds integers exactly up to 256).
TB_HOST_DEVICE inline double InputValue(int rank, uint64_t i) {
  return static_cast<double>((i * 7 + static_cast<uint64_t>(rank) * 3) % 4);
}

// Fills receive buffers before a check, so that an operation that writes nothing is caught.
inline constexpr double kSentinel = -7.0;

// Reduction of InputValue(r, i) over ranks 0..n-1 with `op`, as the device computes it (avg: sum / n, with integer
// division for int32 applied through RoundForType).
TB_HOST_DEVICE inline double ReduceInputs(uint64_t i, int n, ReduceOp op) {
  double result = InputValue(0, i);
  for (int r = 1; r < n; ++r) {
    const double v = InputValue(r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: result += v; break;
      case ReduceOp::kMax: result = v > result ? v : result; break;
      case ReduceOp::kMin: result = v < result ? v : result; break;
    }
  }
  return op == ReduceOp::kAvg ? result / n : result;
}

// Where the expected value of element i of a receive buffer comes from:
//   kReduction  ReduceInputs(input_offset + i, n, op)                         (all_reduce, reduce_scatter, reduce's root)
//   kCopy       InputValue(source rank, input_offset + i mod block), the source rank i / block, or `source` for the
//               whole buffer when block is 0                                  (all_gather, alltoall, broadcast, sendrecv)
//   kUndefined  no element is defined (reduce's receive buffer on a rank other than root)
enum class ExpectedKind { kUndefined, kReduction, kCopy };

struct ExpectedLayout {
  ExpectedKind kind = ExpectedKind::kUndefined;
  int n = 1;                  // ranks: of the reduction, and the rounding a sum over them may add
  ReduceOp op = ReduceOp::kSum;
  uint64_t input_offset = 0;  // elements of the source's input before the ones this buffer holds
  uint64_t block = 0;         // kCopy: elements per source rank, in rank order; 0: one source for the whole buffer
  int source = -1;            // kCopy with block 0: that source
};

inline ExpectedLayout ReductionLayout(int n, ReduceOp op, uint64_t input_offset = 0) {
  return {ExpectedKind::kReduction, n, op, input_offset, 0, -1};
}
inline ExpectedLayout BlocksLayout(int n, uint64_t block, uint64_t input_offset = 0) {
  return {ExpectedKind::kCopy, n, ReduceOp::kSum, input_offset, block, -1};
}
inline ExpectedLayout CopyLayout(int n, int source) { return {ExpectedKind::kCopy, n, ReduceOp::kSum, 0, 0, source}; }

// The rank whose input element i is a copy of; -1 for a reduction (every element mixes all ranks) or undefined.
TB_HOST_DEVICE inline int SourceRank(const ExpectedLayout& layout, uint64_t i) {
  if (layout.kind != ExpectedKind::kCopy) return -1;
  return layout.block == 0 ? layout.source : static_cast<int>(i / layout.block);
}

// The expected value of element i; false when the operation does not define it.
TB_HOST_DEVICE inline bool ExpectedValue(const ExpectedLayout& layout, uint64_t i, double* value) {
  switch (layout.kind) {
    case ExpectedKind::kUndefined: return false;
    case ExpectedKind::kReduction: *value = ReduceInputs(layout.input_offset + i, layout.n, layout.op); return true;
    case ExpectedKind::kCopy: {
      const uint64_t j = layout.input_offset + (layout.block == 0 ? i : i % layout.block);
      *value = InputValue(SourceRank(layout, i), j);
      return true;
    }
  }
  return false;
}

// ---- element conversions (IEEE half and bfloat16, round to nearest even) ----------------------------------------

TB_HOST_DEVICE inline uint32_t FloatBits(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  memcpy(&bits, &value, 4);
  return bits;
#endif
}

TB_HOST_DEVICE inline float FloatOfBits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  memcpy(&value, &bits, 4);
  return value;
#endif
}

TB_HOST_DEVICE inline uint16_t FloatToHalf(float value) {
  const uint32_t bits = FloatBits(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xffu) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffffu;
  if (((bits >> 23) & 0xffu) == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
  if (exponent >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to infinity
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent: correct
  return static_cast<uint16_t>(half);
}

TB_HOST_DEVICE inline float HalfToFloat(uint16_t half) {
  const uint32_t sign = (static_cast<uint32_t>(half) & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f) return FloatOfBits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return FloatOfBits(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
  if (mantissa == 0) return FloatOfBits(sign);
  int shift = 0;  // subnormal: normalise
  while (!(mantissa & 0x400u)) {
    mantissa <<= 1;
    ++shift;
  }
  mantissa &= 0x3ffu;
  return FloatOfBits(sign | (static_cast<uint32_t>(127 - 15 - shift + 1) << 23) | (mantissa << 13));
}

TB_HOST_DEVICE inline uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN stays NaN
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

TB_HOST_DEVICE inline float BFloat16ToFloat(uint16_t value) { return FloatOfBits(static_cast<uint32_t>(value) << 16); }

// Element `i` of a buffer of `type` (host memory on the host, device memory on the device).
TB_HOST_DEVICE inline void StoreElement(DataType type, void* base, uint64_t i, double value) {
  switch (type) {
    case DataType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(value); return;
    case DataType::kFloat64: static_cast<double*>(base)[i] = value; return;
    case DataType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(value); return;
    case DataType::kFloat16: static_cast<uint16_t*>(base)[i] = FloatToHalf(static_cast<float>(value)); return;
    case DataType::kBFloat16: static_cast<uint16_t*>(base)[i] = FloatToBFloat16(static_cast<float>(value)); return;
  }
}

TB_HOST_DEVICE inline double LoadElement(DataType type, const void* base, uint64_t i) {
  switch (type) {
    case DataType::kFloat32: return static_cast<const float*>(base)[i];
    case DataType::kFloat64: return static_cast<const double*>(base)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DataType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBFloat16: return BFloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
  }
  return 0.0;
}

// The value `value` becomes when stored in `type` (rounding, or truncation for int32, as the type does it).
TB_HOST_DEVICE inline double RoundForType(DataType type, double value) {
  uint64_t scratch = 0;
  StoreElement(type, &scratch, 0, type == DataType::kInt32 ? trunc(value) : value);
  return LoadElement(type, &scratch, 0);
}

TB_HOST_DEVICE inline double Epsilon(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 1.0 / (1 << 23);
    case DataType::kFloat64: return 1.0 / (1LL << 52);
    case DataType::kInt32: return 0.0;
    case DataType::kFloat16: return 1.0 / (1 << 10);
    case DataType::kBFloat16: return 1.0 / (1 << 7);
  }
  return 0.0;
}

// Whether `got` matches `expected` for `type`, allowing the rounding that summing over n ranks can add.
TB_HOST_DEVICE inline bool ValueMatches(DataType type, double got, double expected, int n) {
  if (got != got) return false;  // NaN
  const double want = RoundForType(type, expected);
  if (type == DataType::kInt32) return got == want;
  // Partial sums may round in any order: allow one rounding step per rank on the result's magnitude.
  const double magnitude = fabs(expected) > 1.0 ? fabs(expected) : 1.0;
  return fabs(got - want) <= Epsilon(type) * n * magnitude;
}

// Whether element i of a receive buffer of `type` holding `got` is wrong under `layout` (false when undefined).
TB_HOST_DEVICE inline bool ElementWrong(const ExpectedLayout& layout, DataType type, uint64_t i, double got) {
  double expected = 0;
  return ExpectedValue(layout, i, &expected) && !ValueMatches(type, got, expected, layout.n);
}

}  // namespace tb
