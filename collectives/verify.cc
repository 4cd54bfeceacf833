// The host side of verify.h: element loops over host memory, and the choice between them and the device's kernels.
#include "verify.h"

#include "console.h"

namespace tb {

void FillInputOnHost(DataType type, void* base, uint64_t count, int rank) {
  for (uint64_t i = 0; i < count; ++i) StoreElement(type, base, i, InputValue(rank, i));
}

void FillSentinelOnHost(DataType type, void* base, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) StoreElement(type, base, i, kSentinel);
}

WrongElements CountWrongOnHost(DataType type, const void* base, uint64_t count, const ExpectedLayout& layout) {
  WrongElements wrong;
  wrong.by_source.assign(static_cast<size_t>(layout.n), 0);
  for (uint64_t i = 0; i < count; ++i) {
    const double got = LoadElement(type, base, i);
    if (!ElementWrong(layout, type, i, got)) continue;
    if (wrong.count++ == 0) {
      wrong.first_index = static_cast<int64_t>(i);
      wrong.first_value = got;
      ExpectedValue(layout, i, &wrong.first_expected);
    }
    const int source = SourceRank(layout, i);
    if (source >= 0) ++wrong.by_source[static_cast<size_t>(source)];
  }
  return wrong;
}

const BufferChecks& ChecksFor(MemoryKind memory) {
  static const BufferChecks host = {FillInputOnHost, FillSentinelOnHost, CountWrongOnHost, "host"};
  static const BufferChecks device = {FillInputOnDevice, FillSentinelOnDevice, CountWrongOnDevice, "device"};
  return memory == MemoryKind::kDevice ? device : host;
}

std::string DescribeFirstWrong(const WrongElements& wrong) {
  return Format("element %lld = %g, expected %g", static_cast<long long>(wrong.first_index), wrong.first_value,
                wrong.first_expected);
}

}  // namespace tb
