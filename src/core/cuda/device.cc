// device.h for a CUDA build: CUDA runtime queries, NVML for links, library versions.
#include "device.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include <cctype>
#include <cstdio>

#include "cuda/cuda_check.h"
#include "nvml.h"

namespace tb {
namespace {

// CUDA encodes versions as 1000 * major + 10 * minor (13000 is "13.0").
std::string CudaVersionText(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// NCCL (since 2.9) and cuDNN (since 9) encode 10000 * major + 100 * minor + patch; older ones 1000 * major + ...
std::string LibraryVersionText(long long code) {
  const long long major_unit = code >= 10000 ? 10000 : 1000;
  return std::to_string(code / major_unit) + "." + std::to_string(code % major_unit / 100) + "." +
         std::to_string(code % 100);
}

struct DeviceCount {
  int count = 0;
  std::string unavailable;  // why count is 0; "" otherwise
};

// cudaGetDeviceCount, where a missing driver or device means "no GPU" rather than a failure.
DeviceCount CountDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaSuccess) return {count, count > 0 ? "" : "CUDA reports no device"};
  if (error != cudaErrorNoDevice && error != cudaErrorInsufficientDriver && error != cudaErrorStubLibrary) {
    cuda_detail::ThrowCudaError(error, "cudaGetDeviceCount(&count)", __FILE__, __LINE__);
  }
  // These errors are not sticky: clear them so that the next TB_CHECK_CUDA_LAUNCH does not report them.
  (void)cudaGetLastError();
  const std::string code = std::string(" (") + cudaGetErrorName(error) + ")";
  if (error == cudaErrorNoDevice) return {0, "no CUDA device is visible" + code + "; is CUDA_VISIBLE_DEVICES right?"};
  if (error == cudaErrorStubLibrary) return {0, "only the CUDA stub driver library was found" + code};
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) return {0, "no NVIDIA driver is loaded" + code};
  int runtime = 0;
  TB_CHECK_CUDA(cudaRuntimeGetVersion(&runtime));
  return {0, "the NVIDIA driver supports CUDA " + CudaVersionText(driver) + ", older than the CUDA " +
                 CudaVersionText(runtime) + " runtime this trainbench was built with" + code};
}

// Clearer than cudaErrorInvalidDevice for the usual mistake: more ranks per node than GPUs, or none visible.
void CheckIndex(int index) {
  const DeviceCount devices = CountDevices();
  if (index >= 0 && index < devices.count) return;
  if (devices.count == 0) throw RuntimeError("there is no GPU " + std::to_string(index) + ": " + devices.unavailable);
  throw RuntimeError("there is no GPU " + std::to_string(index) + ": this process sees " +
                     std::to_string(devices.count) +
                     " GPU(s); is CUDA_VISIBLE_DEVICES right, and does the number of ranks per node match the GPUs?");
}

// Lower case, as Linux writes it under /sys/bus/pci ("0000:1b:00.0").
std::string PciBusId(int index) {
  char buffer[64] = {};
  TB_CHECK_CUDA(cudaDeviceGetPCIBusId(buffer, sizeof(buffer), index));
  std::string text = buffer;
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// "GPU-8d0e4b4c-1f6b-2a7e-9c3d-0123456789ab", as nvidia-smi -L prints it.
std::string UuidText(const cudaUUID_t& uuid) {
  std::string text = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    char hex[3] = {};
    std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned>(static_cast<unsigned char>(uuid.bytes[i])));
    text += hex;
  }
  return text;
}

}  // namespace

bool BuiltWithCuda() { return true; }

int GpuCount() { return CountDevices().count; }

std::string GpuUnavailableReason() { return CountDevices().unavailable; }

GpuInfo QueryGpu(int index) {
  CheckIndex(index);
  cudaDeviceProp properties = {};
  TB_CHECK_CUDA(cudaGetDeviceProperties(&properties, index));
  GpuInfo info;
  info.index = index;
  info.name = properties.name;
  info.uuid = UuidText(properties.uuid);
  info.pci_bus_id = PciBusId(index);
  info.memory_bytes = properties.totalGlobalMem;
  info.compute_major = properties.major;
  info.compute_minor = properties.minor;
  info.multiprocessors = properties.multiProcessorCount;
  return info;
}

bool GpuPeerAccess(int a, int b) {
  CheckIndex(a);
  CheckIndex(b);
  if (a == b) return true;  // peer access is not defined for a GPU and itself, which always reaches its memory
  int can_access = 0;
  TB_CHECK_CUDA(cudaDeviceCanAccessPeer(&can_access, a, b));
  return can_access != 0;
}

std::string GpuLinkType(int a, int b) {
  CheckIndex(a);
  CheckIndex(b);
  if (a == b) return "same GPU";
  return nvml::LinkBetween(PciBusId(a), PciBusId(b));
}

void BindGpu(int index) {
  CheckIndex(index);
  TB_CHECK_CUDA(cudaSetDevice(index));
}

void* AllocatePinnedHost(uint64_t bytes) {
  void* pointer = nullptr;
  TB_CHECK_CUDA(cudaHostAlloc(&pointer, bytes, cudaHostAllocDefault));
  return pointer;
}

void FreePinnedHost(void* pointer) {
  if (pointer != nullptr) TB_CHECK_CUDA(cudaFreeHost(pointer));
}

void CopyDeviceToHost(void* host, const void* device, uint64_t bytes) {
  if (bytes == 0) return;
  TB_CHECK_CUDA(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}

void CopyHostToDevice(void* device, const void* host, uint64_t bytes) {
  if (bytes == 0) return;
  TB_CHECK_CUDA(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
  // From pageable memory cudaMemcpy may return before the DMA lands, and streams created non-blocking do not
  // wait for the legacy stream: make the copy complete before anything else reads the memory.
  TB_CHECK_CUDA(cudaDeviceSynchronize());
}

std::string CudaRuntimeVersion() {
  int version = 0;
  TB_CHECK_CUDA(cudaRuntimeGetVersion(&version));
  return CudaVersionText(version);
}

std::string CudaDriverVersion() {
  int version = 0;
  // Without a driver this either fails or reports 0; both mean there is none.
  if (cudaDriverGetVersion(&version) != cudaSuccess || version == 0) return "none";
  return CudaVersionText(version);
}

std::string NcclVersion() {
  int code = 0;
  TB_CHECK_NCCL(ncclGetVersion(&code));
  return LibraryVersionText(code);
}

std::string CudnnVersion() { return LibraryVersionText(static_cast<long long>(cudnnGetVersion())); }

}  // namespace tb
