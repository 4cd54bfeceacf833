// Move-only owners of CUDA runtime objects. Constructors throw RuntimeError (via TB_CHECK_CUDA); destructors
// never throw: a failed release means the context is already broken, and the call that broke it has reported.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <utility>

#include "cuda/cuda_check.h"

namespace tb {

// A non-blocking stream on the current device: it never synchronises implicitly with the legacy default stream.
class Stream {
 public:
  Stream() { TB_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { Release(); }
  Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  Stream& operator=(Stream&& other) noexcept {
    if (this != &other) {
      Release();
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  void Synchronize() const { TB_CHECK_CUDA(cudaStreamSynchronize(stream_)); }

 private:
  void Release() noexcept {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  cudaStream_t stream_ = nullptr;
};

// A timing-enabled event, for timing GPU work on the stream that does it.
class Event {
 public:
  Event() { TB_CHECK_CUDA(cudaEventCreateWithFlags(&event_, cudaEventDefault)); }
  ~Event() { Release(); }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&& other) noexcept {
    if (this != &other) {
      Release();
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  void Record(cudaStream_t stream) { TB_CHECK_CUDA(cudaEventRecord(event_, stream)); }
  void Synchronize() const { TB_CHECK_CUDA(cudaEventSynchronize(event_)); }

  // Seconds between two recorded events; waits for `stop` to complete.
  static double ElapsedSeconds(const Event& start, const Event& stop) {
    stop.Synchronize();
    float milliseconds = 0.0f;
    TB_CHECK_CUDA(cudaEventElapsedTime(&milliseconds, start.event_, stop.event_));
    return static_cast<double>(milliseconds) * 1e-3;
  }

 private:
  void Release() noexcept {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
    event_ = nullptr;
  }

  cudaEvent_t event_ = nullptr;
};

// Device memory from cudaMalloc on the current device. Empty (null, 0 bytes) when default-constructed or moved from.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) TB_CHECK_CUDA(cudaMalloc(&data_, bytes_));
  }
  ~DeviceBuffer() { Release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void Release() noexcept {
    if (data_ != nullptr) (void)cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory from cudaMallocHost, so that copies to and from the device can be asynchronous.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) TB_CHECK_CUDA(cudaMallocHost(&data_, bytes_));
  }
  ~PinnedBuffer() { Release(); }
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
      Release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void Release() noexcept {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
    data_ = nullptr;
    bytes_ = 0;
  }

  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A CUDA graph of what one stream was given while captured, instantiated and uploaded, to launch on that stream (or
// another of the device). Empty (launches nothing) when default-constructed or moved from.
class CapturedGraph {
 public:
  CapturedGraph() = default;
  // Captures what `issue` enqueues on `stream` (none of it runs now) in thread-local mode, so that other threads' CUDA
  // calls (NCCL setting up a connection, a checkpoint's copies) do not break the capture; instantiates and uploads the
  // graph, so that its first launch pays no setup. A capture that fails (`issue` throws, or calls something a capture
  // refuses) is ended before the error goes on: the stream is usable again.
  static CapturedGraph Capture(cudaStream_t stream, const std::function<void()>& issue) {
    TB_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      issue();
    } catch (...) {
      if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) (void)cudaGraphDestroy(graph);
      throw;
    }
    TB_CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CapturedGraph captured;
    const cudaError_t instantiated = cudaGraphInstantiate(&captured.exec_, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (instantiated != cudaSuccess) {
      cuda_detail::ThrowCudaError(instantiated, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
    TB_CHECK_CUDA(cudaGraphUpload(captured.exec_, stream));
    return captured;
  }
  ~CapturedGraph() { Release(); }
  CapturedGraph(CapturedGraph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  CapturedGraph& operator=(CapturedGraph&& other) noexcept {
    if (this != &other) {
      Release();
      exec_ = std::exchange(other.exec_, nullptr);
    }
    return *this;
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  bool empty() const { return exec_ == nullptr; }
  void Launch(cudaStream_t stream) const {
    if (exec_ != nullptr) TB_CHECK_CUDA(cudaGraphLaunch(exec_, stream));
  }

 private:
  void Release() noexcept {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }

  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace tb
