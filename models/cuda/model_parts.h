// What the two CUDA transformers (cuda_transformer.cu, cuda_tp_transformer.cu) share besides the kernels: how their
// tensors are carved out of one allocation, what they keep free for the libraries, and their PhaseClock.
#pragma once

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/cuda_raii.h"
#include "transformer.h"

namespace tb::cuda_model {

// Every tensor is carved at this alignment: cuBLASLt and cuDNN pick their fastest kernels for 16-byte aligned
// operands, and 256 bytes is what cudaMalloc itself guarantees.
inline constexpr size_t kTensorAlignment = 256;
// Device memory the libraries may still take after construction (cuBLASLt plans, cuDNN graphs and their
// workspaces are built on first use of a shape), kept free by the memory check so that a model which passes it
// does not fail in its first step. cuBLASLt's recommended workspace on Hopper is 32 MiB.
inline constexpr uint64_t kLibraryReserveBytes = 256ull << 20;

// Typed tensors carved out of one allocation. Run twice: first with a null base to count the bytes, then over the
// allocation to point every tensor, so that the layout is written down once.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* Take(size_t count) {
    const size_t offset = used_;
    used_ += (count * sizeof(T) + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    return base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + offset);
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// PhaseClock over CUDA events recorded on the model's stream. The events are created as marks first need them
// and reused every step after, so a step allocates nothing. Host waits between marks (the tensor-parallel model's
// blocking all-reduces) leave the stream idle, so an interval includes them.
class CudaPhaseClock : public PhaseClock {
 public:
  explicit CudaPhaseClock(cudaStream_t stream) : stream_(stream) {}

  void Mark() override {
    if (marks_ == events_.size()) events_.emplace_back();
    events_[marks_++].Record(stream_);
  }

  // NVTX ranges (header-only NVTX 3: nothing happens unless a profiler such as Nsight Systems is attached).
  void Range(const char* name) override {
    if (range_open_) nvtxRangePop();
    range_open_ = name != nullptr;
    if (range_open_) nvtxRangePushA(name);
  }

  std::vector<double> Intervals() override {
    const size_t marks = marks_;
    marks_ = 0;
    std::vector<double> intervals;
    if (marks == 1) events_[0].Synchronize();
    for (size_t i = 1; i < marks; ++i) intervals.push_back(Event::ElapsedSeconds(events_[i - 1], events_[i]));
    return intervals;
  }

 private:
  cudaStream_t stream_;
  std::vector<Event> events_;
  size_t marks_ = 0;
  bool range_open_ = false;
};

}  // namespace tb::cuda_model
