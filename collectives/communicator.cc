#include "communicator.h"

#include "console.h"
#include "error.h"

namespace tb {
namespace {

struct TypeEntry {
  DataType type;
  const char* name;
  size_t size;
};

constexpr TypeEntry kTypes[] = {
    {DataType::kFloat32, "float", 4}, {DataType::kFloat64, "double", 8}, {DataType::kInt32, "int32", 4},
    {DataType::kFloat16, "half", 2},  {DataType::kBFloat16, "bfloat16", 2},
};

const TypeEntry& Entry(DataType type) {
  for (const TypeEntry& entry : kTypes) {
    if (entry.type == type) return entry;
  }
  throw RuntimeError("unknown data type");
}

}  // namespace

size_t DataTypeSize(DataType type) { return Entry(type).size; }
std::string DataTypeName(DataType type) { return Entry(type).name; }

namespace {

// nccl-tests' names plus the common aliases.
constexpr std::pair<const char*, DataType> kDataTypeAliases[] = {
    {"float", DataType::kFloat32},   {"fp32", DataType::kFloat32},    {"float32", DataType::kFloat32},
    {"double", DataType::kFloat64},  {"fp64", DataType::kFloat64},    {"float64", DataType::kFloat64},
    {"int32", DataType::kInt32},     {"int", DataType::kInt32},       {"half", DataType::kFloat16},
    {"fp16", DataType::kFloat16},    {"float16", DataType::kFloat16}, {"bfloat16", DataType::kBFloat16},
    {"bf16", DataType::kBFloat16},
};

}  // namespace

std::vector<std::string> DataTypeAliases() {
  std::vector<std::string> names;
  for (const auto& [name, type] : kDataTypeAliases) names.push_back(name);
  return names;
}

DataType ParseDataType(const std::string& text, const std::string& flag) {
  for (const auto& [name, type] : kDataTypeAliases) {
    if (text == name) return type;
  }
  throw InputError("unknown data type '" + text + "' for " + flag +
                   " (accepted: float|fp32, double|fp64, int32, half|fp16, bfloat16|bf16)");
}

std::string ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "unknown";
}

std::unique_ptr<Communicator> Communicator::Prefix(int k) {
  if (k < 1 || k > size()) {
    throw InputError("cannot make a communicator of the first " + std::to_string(k) + " ranks of " +
                     std::to_string(size()) + " (accepted: 1 to " + std::to_string(size()) + ")");
  }
  return Split(rank() < k ? 0 : -1, rank());
}

void CheckAllToAllVLayout(int ranks, const void* send, std::span<const size_t> send_counts,
                          std::span<const size_t> send_offsets, const void* recv, std::span<const size_t> recv_counts,
                          std::span<const size_t> recv_offsets) {
  const size_t n = static_cast<size_t>(ranks);
  if (send_counts.size() != n || send_offsets.size() != n || recv_counts.size() != n || recv_offsets.size() != n) {
    throw RuntimeError(Format("alltoallv on %d ranks needs one count and one offset per rank on each side; got %zu send "
                              "counts, %zu send offsets, %zu receive counts, %zu receive offsets",
                              ranks, send_counts.size(), send_offsets.size(), recv_counts.size(),
                              recv_offsets.size()));
  }
  if (send == recv) throw RuntimeError("alltoallv cannot run in place: give it separate send and receive buffers");
}

std::unique_ptr<CapturedOps> Communicator::Capture(const std::function<void()>&) {
  throw RuntimeError(Format("the %s backend cannot capture its operations into a CUDA graph (--cuda-graph needs the "
                            "NCCL backend)", backend().c_str()));
}

}  // namespace tb
