// Filling and checking a collective's buffers where they live, from the per-element formulas of verify_math.h:
// element loops over host memory (the MPI backend), kernels over device memory (the NCCL backend,
// collectives/cuda/verify.cu), whose only traffic to the host is the count of wrong elements, the first of them and
// the count per source rank. No CUDA header; a build without CUDA links a stub whose device functions throw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "communicator.h"
#include "verify_math.h"

namespace tb {

// The check of one receive buffer.
struct WrongElements {
  int64_t count = 0;               // elements that failed
  int64_t first_index = -1;        // the lowest of them; -1 when none did
  double first_value = 0;          // what it held
  double first_expected = 0;       // what it should have held
  std::vector<int64_t> by_source;  // failed elements per source rank of the communicator (copies; n entries, else 0)
};

// Elements [0, count) of `base` set to InputValue(rank, i), or to kSentinel; elements counted against `layout`.
void FillInputOnHost(DataType type, void* base, uint64_t count, int rank);
void FillSentinelOnHost(DataType type, void* base, uint64_t count);
WrongElements CountWrongOnHost(DataType type, const void* base, uint64_t count, const ExpectedLayout& layout);

// The same on device memory of the current device, by kernels; each returns once they have finished. They run on a
// stream of their own: the caller orders them against the collectives by synchronising the communicator.
void FillInputOnDevice(DataType type, void* base, uint64_t count, int rank);
void FillSentinelOnDevice(DataType type, void* base, uint64_t count);
WrongElements CountWrongOnDevice(DataType type, const void* base, uint64_t count, const ExpectedLayout& layout);

// The functions for buffers of `memory`, and where they run ("host", "device").
struct BufferChecks {
  void (*fill_input)(DataType type, void* base, uint64_t count, int rank);
  void (*fill_sentinel)(DataType type, void* base, uint64_t count);
  WrongElements (*count_wrong)(DataType type, const void* base, uint64_t count, const ExpectedLayout& layout);
  const char* where;
};
const BufferChecks& ChecksFor(MemoryKind memory);

// "element 17 = 5, expected 6": the first wrong element of a check that found some.
std::string DescribeFirstWrong(const WrongElements& wrong);

}  // namespace tb
