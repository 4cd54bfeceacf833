// device.h for a build without CUDA: no GPUs, and every GPU-only call says plainly why it cannot work.
#include "device.h"

#include "error.h"

namespace tb {
namespace {

constexpr const char* kNotBuilt = "not built";

[[noreturn]] void ThrowBuiltWithoutCuda(const char* function) {
  throw RuntimeError(std::string(function) +
                     " is part of the CUDA backend, and this trainbench was built without CUDA (reconfigure with "
                     "-DTRAINBENCH_WITH_CUDA=ON on a machine with the CUDA toolkit, NCCL and cuDNN)");
}

}  // namespace

bool BuiltWithCuda() { return false; }

int GpuCount() { return 0; }

std::string GpuUnavailableReason() { return "this trainbench was built without CUDA"; }

GpuInfo QueryGpu(int) { ThrowBuiltWithoutCuda("QueryGpu"); }

bool GpuPeerAccess(int, int) { ThrowBuiltWithoutCuda("GpuPeerAccess"); }

std::string GpuLinkType(int, int) { ThrowBuiltWithoutCuda("GpuLinkType"); }

void BindGpu(int) { ThrowBuiltWithoutCuda("BindGpu"); }
void* AllocatePinnedHost(uint64_t) { ThrowBuiltWithoutCuda("AllocatePinnedHost"); }
void FreePinnedHost(void*) { ThrowBuiltWithoutCuda("FreePinnedHost"); }
void CopyDeviceToHost(void*, const void*, uint64_t) { ThrowBuiltWithoutCuda("CopyDeviceToHost"); }
void CopyHostToDevice(void*, const void*, uint64_t) { ThrowBuiltWithoutCuda("CopyHostToDevice"); }

std::string CudaRuntimeVersion() { return kNotBuilt; }
std::string CudaDriverVersion() { return kNotBuilt; }
std::string NcclVersion() { return kNotBuilt; }
std::string CudnnVersion() { return kNotBuilt; }

}  // namespace tb
