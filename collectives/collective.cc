#include "collective.h"

#include <cmath>
#include <cstring>

#include "error.h"

namespace tb {
namespace {

// IEEE half and bfloat16 conversions (round to nearest even), for host-side init and checks only.
uint16_t FloatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  int32_t exponent = static_cast<int32_t>((bits >> 23) & 0xffu) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffffu;
  if (((bits >> 23) & 0xffu) == 0xffu) return static_cast<uint16_t>(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
  if (exponent >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to infinity
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent: correct
  return static_cast<uint16_t>(half);
}

float HalfToFloat(uint16_t half) {
  uint32_t sign = (static_cast<uint32_t>(half) & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int shift = 0;
      while (!(mantissa & 0x400u)) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      bits = sign | (static_cast<uint32_t>(127 - 15 - shift + 1) << 23) | (mantissa << 13);
    }
  } else {
    bits = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

uint16_t FloatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN stays NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float BFloat16ToFloat(uint16_t value) {
  uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, 4);
  return result;
}

double Epsilon(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 1.0 / (1 << 23);
    case DataType::kFloat64: return 1.0 / (1LL << 52);
    case DataType::kInt32: return 0.0;
    case DataType::kFloat16: return 1.0 / (1 << 10);
    case DataType::kBFloat16: return 1.0 / (1 << 7);
  }
  return 0.0;
}

}  // namespace

const std::vector<const CollectiveDef*>& AllCollectives() {
  static const std::vector<const CollectiveDef*> all = {&kAllReduce, &kAllGather, &kReduceScatter, &kAllToAll,
                                                        &kBroadcast, &kReduce,    &kSendRecv};
  return all;
}

bool HasPerNicRate(const CollectiveDef& def) { return &def == &kAllReduce || &def == &kReduceScatter || &def == &kAllGather; }

const CollectiveDef& FindCollective(const std::string& name, const std::string& flag) {
  std::string accepted;
  for (const CollectiveDef* def : AllCollectives()) {
    if (name == def->name) return *def;
    accepted += (accepted.empty() ? "" : ", ") + std::string(def->name);
  }
  throw InputError("unknown operation '" + name + "' for " + flag + " (accepted: " + accepted + ", all)");
}

double InputValue(int rank, size_t i) { return static_cast<double>((i * 7 + static_cast<size_t>(rank) * 3) % 4); }

double ReduceInputs(size_t i, int n, ReduceOp op) {
  double result = InputValue(0, i);
  for (int r = 1; r < n; ++r) {
    double v = InputValue(r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: result += v; break;
      case ReduceOp::kMax: result = std::max(result, v); break;
      case ReduceOp::kMin: result = std::min(result, v); break;
    }
  }
  return op == ReduceOp::kAvg ? result / n : result;
}

void StoreElement(DataType type, void* base, size_t i, double value) {
  switch (type) {
    case DataType::kFloat32: static_cast<float*>(base)[i] = static_cast<float>(value); return;
    case DataType::kFloat64: static_cast<double*>(base)[i] = value; return;
    case DataType::kInt32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(value); return;
    case DataType::kFloat16: static_cast<uint16_t*>(base)[i] = FloatToHalf(static_cast<float>(value)); return;
    case DataType::kBFloat16: static_cast<uint16_t*>(base)[i] = FloatToBFloat16(static_cast<float>(value)); return;
  }
}

double LoadElement(DataType type, const void* base, size_t i) {
  switch (type) {
    case DataType::kFloat32: return static_cast<const float*>(base)[i];
    case DataType::kFloat64: return static_cast<const double*>(base)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(base)[i];
    case DataType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(base)[i]);
    case DataType::kBFloat16: return BFloat16ToFloat(static_cast<const uint16_t*>(base)[i]);
  }
  return 0.0;
}

double RoundForType(DataType type, double value) {
  uint64_t scratch = 0;
  StoreElement(type, &scratch, 0, type == DataType::kInt32 ? std::trunc(value) : value);
  return LoadElement(type, &scratch, 0);
}

bool ValueMatches(DataType type, double got, double expected, int n) {
  if (std::isnan(got)) return false;
  double want = RoundForType(type, expected);
  if (type == DataType::kInt32) return got == want;
  // Partial sums may round in any order: allow one rounding step per rank on the result's magnitude.
  double tolerance = Epsilon(type) * n * std::max(1.0, std::fabs(expected));
  return std::fabs(got - want) <= tolerance;
}

CollectiveCounts SingleBufferCounts(uint64_t requested_bytes, size_t type_size) {
  CollectiveCounts c;
  c.op_count = requested_bytes / type_size;
  c.send_elements = c.recv_elements = c.op_count;
  c.size_bytes = c.op_count * type_size;
  return c;
}

double FactorOne(int) { return 1.0; }
double FactorNMinusOneOverN(int n) { return static_cast<double>(n - 1) / n; }

}  // namespace tb
