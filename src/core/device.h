// What the core needs to know about GPUs, without any CUDA header. Implemented by src/core/cuda/device.cc in a
// CUDA build and by src/core/nocuda/device_stub.cc otherwise (where GpuCount() is 0 and the rest throws
// "built without CUDA").
#pragma once

#include <cstdint>
#include <string>

namespace tb {

struct GpuInfo {
  int index = -1;             // CUDA ordinal on this host
  std::string name;           // "NVIDIA H200"
  std::string uuid;           // "GPU-8d0e..."
  std::string pci_bus_id;     // "0000:1b:00.0"
  uint64_t memory_bytes = 0;  // total device memory
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
};

// True when this binary contains the CUDA/NCCL backend.
bool BuiltWithCuda();

// Number of usable GPUs on this host: 0 without CUDA, without a driver, or without devices.
int GpuCount();

// Why GpuCount() is 0, in words ("built without CUDA", "no NVIDIA driver: ..."), or "" when GPUs are usable.
std::string GpuUnavailableReason();

// Properties of GPU `index`. Throws RuntimeError naming the CUDA call on failure.
GpuInfo QueryGpu(int index);

// Whether GPU `a` can access GPU `b`'s memory directly (cudaDeviceCanAccessPeer).
bool GpuPeerAccess(int a, int b);

// How GPUs a and b are connected, read through NVML when it can be loaded at run time: "NVLink xN" (N active
// links between them), "PCIe <level>" (common ancestor: same switch, host bridge, across CPUs), or
// "unknown (<why>)".
std::string GpuLinkType(int a, int b);

// Makes GPU `index` the current device of this process.
void BindGpu(int index);

// Page-locked host memory (cudaHostAlloc) for fast, asynchronous copies to and from the current GPU, and its
// release. Throws RuntimeError when it cannot be had (or in a build without CUDA).
void* AllocatePinnedHost(uint64_t bytes);
void FreePinnedHost(void* pointer);

// Device memory copies on the current GPU, complete when they return. They do not wait for work on streams
// created non-blocking: the caller makes sure such work is done (or not yet issued).
void CopyDeviceToHost(void* host, const void* device, uint64_t bytes);
void CopyHostToDevice(void* device, const void* host, uint64_t bytes);

// Library versions as text ("12.8", "2.28.3", ...), or "not built" without CUDA.
std::string CudaRuntimeVersion();
std::string CudaDriverVersion();
std::string NcclVersion();
std::string CudnnVersion();

}  // namespace tb
