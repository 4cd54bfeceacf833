// Timing kernel candidates on a stream (for gemm.cu's cuBLASLt algorithms and attention_cudnn.cc's cuDNN plans;
// the choice among them is autotune.h's). Host code over the CUDA runtime: included by .cu and .cc files alike.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "cuda/autotune.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_raii.h"

namespace tb::gpu {

// Whether candidates may be timed on `stream` now: not while it is being captured into a CUDA graph (event
// synchronisation and allocation are not allowed there).
inline bool CanTimeOn(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TB_CHECK_CUDA(cudaStreamIsCapturing(stream, &capture));
  return capture == cudaStreamCaptureStatusNone;
}

// Device memory for a timing's outputs, stream-ordered (cudaMallocAsync / cudaFreeAsync on the stream that uses it):
// no device-wide synchronisation, which a plain cudaFree would be, and which could wait on another thread's
// collective. data() is null when the memory was not there: the caller keeps the heuristic's first candidate.
class TimingScratch {
 public:
  TimingScratch(size_t bytes, cudaStream_t stream) : stream_(stream) {
    const cudaError_t status = cudaMallocAsync(&data_, bytes, stream);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // not sticky: clear it so that no later check reports it
      data_ = nullptr;
      return;
    }
    TB_CHECK_CUDA(status);
    // Defined contents: an accumulating candidate reads them.
    TB_CHECK_CUDA(cudaMemsetAsync(data_, 0, bytes, stream));
  }
  ~TimingScratch() {
    if (data_ != nullptr) (void)cudaFreeAsync(data_, stream_);
  }
  TimingScratch(const TimingScratch&) = delete;
  TimingScratch& operator=(const TimingScratch&) = delete;

  void* data() const { return data_; }

 private:
  cudaStream_t stream_;
  void* data_ = nullptr;
};

// The median seconds of kAutotuneRepeats runs of `run` on `stream` (CUDA events around each), after one warm-up
// run; nullopt when any run reports failure (`run` returns false: the candidate cannot run this problem).
template <typename Run>
std::optional<double> MedianRunSeconds(cudaStream_t stream, Run&& run) {
  if (!run()) return std::nullopt;
  std::vector<Event> marks(kAutotuneRepeats + 1);
  marks[0].Record(stream);
  for (int i = 1; i <= kAutotuneRepeats; ++i) {
    if (!run()) return std::nullopt;
    marks[i].Record(stream);
  }
  std::vector<double> seconds;
  for (int i = 1; i <= kAutotuneRepeats; ++i) seconds.push_back(Event::ElapsedSeconds(marks[i - 1], marks[i]));
  return MedianSeconds(std::move(seconds));
}

}  // namespace tb::gpu
