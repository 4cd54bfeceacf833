// verify.h's device side: a collective's buffers filled and checked by kernels, from the same per-element formulas
// as the host's check (verify_math.h). A check counts the wrong elements with atomics (none at all when every element
// is right), keeps the lowest wrong index and a count per source rank, and brings back only those (3 + n words).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/cuda_raii.h"
#include "verify.h"

namespace tb {
namespace {

constexpr int kThreadsPerBlock = 256;
// Grid-stride loops: enough blocks to fill an H100/H200 several times over, never one per element.
constexpr uint64_t kMaxBlocks = 8192;
constexpr unsigned long long kNoIndex = ~0ull;

// The check's tally on the device: [0] wrong count, [1] lowest wrong index, [2] its value (a double's bits),
// [3 + r] wrong elements whose source is rank r.
constexpr int kTallyHeader = 3;

unsigned int BlocksFor(uint64_t count) {
  return static_cast<unsigned int>(std::clamp<uint64_t>((count + kThreadsPerBlock - 1) / kThreadsPerBlock, 1, kMaxBlocks));
}

__global__ void FillInputKernel(DataType type, void* base, uint64_t count, int rank) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    StoreElement(type, base, i, InputValue(rank, i));
  }
}

__global__ void FillSentinelKernel(DataType type, void* base, uint64_t count) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    StoreElement(type, base, i, kSentinel);
  }
}

// Each thread counts its own wrong elements; only threads that found one touch the tally. Its elements ascend, so
// its first is its lowest. Per source rank it adds a run of wrong elements at a time (a source's elements are
// contiguous), not one atomic per element.
__global__ void CountWrongKernel(DataType type, const void* base, uint64_t count, ExpectedLayout layout,
                                 unsigned long long* tally) {
  unsigned long long wrong = 0;
  unsigned long long first = kNoIndex;
  int run_source = -1;
  unsigned long long run = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    if (!ElementWrong(layout, type, i, LoadElement(type, base, i))) continue;
    if (wrong++ == 0) first = i;
    const int source = SourceRank(layout, i);
    if (source != run_source) {
      if (run > 0) atomicAdd(&tally[kTallyHeader + run_source], run);
      run_source = source;
      run = 0;
    }
    if (source >= 0) ++run;
  }
  if (run > 0) atomicAdd(&tally[kTallyHeader + run_source], run);
  if (wrong == 0) return;
  atomicAdd(&tally[0], wrong);
  atomicMin(&tally[1], first);
}

// The value at the lowest wrong index, into the tally, so that it comes back with the counts.
__global__ void ReadFirstWrongKernel(DataType type, const void* base, unsigned long long* tally) {
  if (tally[1] == kNoIndex) return;
  tally[2] = static_cast<unsigned long long>(__double_as_longlong(LoadElement(type, base, tally[1])));
}

}  // namespace

void FillInputOnDevice(DataType type, void* base, uint64_t count, int rank) {
  if (count == 0) return;
  Stream stream;
  FillInputKernel<<<BlocksFor(count), kThreadsPerBlock, 0, stream.get()>>>(type, base, count, rank);
  TB_CHECK_CUDA_LAUNCH();
  TB_CHECK_CUDA(cudaStreamSynchronize(stream.get()));
}

void FillSentinelOnDevice(DataType type, void* base, uint64_t count) {
  if (count == 0) return;
  Stream stream;
  FillSentinelKernel<<<BlocksFor(count), kThreadsPerBlock, 0, stream.get()>>>(type, base, count);
  TB_CHECK_CUDA_LAUNCH();
  TB_CHECK_CUDA(cudaStreamSynchronize(stream.get()));
}

WrongElements CountWrongOnDevice(DataType type, const void* base, uint64_t count, const ExpectedLayout& layout) {
  const size_t words = kTallyHeader + static_cast<size_t>(layout.n);
  std::vector<unsigned long long> tally(words, 0);
  tally[1] = kNoIndex;
  Stream stream;
  DeviceBuffer device_tally(words * sizeof(unsigned long long));
  auto* counters = static_cast<unsigned long long*>(device_tally.data());
  TB_CHECK_CUDA(cudaMemcpyAsync(counters, tally.data(), words * sizeof(unsigned long long), cudaMemcpyHostToDevice,
                                stream.get()));
  if (count > 0) {
    CountWrongKernel<<<BlocksFor(count), kThreadsPerBlock, 0, stream.get()>>>(type, base, count, layout, counters);
    TB_CHECK_CUDA_LAUNCH();
    ReadFirstWrongKernel<<<1, 1, 0, stream.get()>>>(type, base, counters);
    TB_CHECK_CUDA_LAUNCH();
  }
  TB_CHECK_CUDA(cudaMemcpyAsync(tally.data(), counters, words * sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                                stream.get()));
  TB_CHECK_CUDA(cudaStreamSynchronize(stream.get()));

  WrongElements wrong;
  wrong.count = static_cast<int64_t>(tally[0]);
  if (wrong.count > 0) {
    wrong.first_index = static_cast<int64_t>(tally[1]);
    std::memcpy(&wrong.first_value, &tally[2], sizeof(double));
    ExpectedValue(layout, tally[1], &wrong.first_expected);
  }
  wrong.by_source.assign(tally.begin() + kTallyHeader, tally.end());
  return wrong;
}

}  // namespace tb
