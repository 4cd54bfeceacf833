// The element types and reductions of the collectives, with no other dependency: shared by the Communicator
// interface and by the per-element formulas that the host and the device both compile (verify_math.h).
#pragma once

namespace tb {

enum class DataType { kFloat32, kFloat64, kInt32, kFloat16, kBFloat16 };
enum class ReduceOp { kSum, kAvg, kMax, kMin };

}  // namespace tb
