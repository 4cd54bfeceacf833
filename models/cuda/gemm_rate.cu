// The bf16 GEMM rate this rank's GPU sustains, for MFU against what the device actually does (beside MFU against
// the datasheet peak): the same cuBLASLt path the transformer's linear layers take (gpu::Gemm), square n = 8192,
// operands filled with non-zero values (tensor cores draw less power, and may clock higher, on zeros), timed with
// CUDA events on its own stream after a warm-up.
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/cuda_raii.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "peaks.h"

namespace tb {
namespace {

// Values in [-1, 1) from a hash of the index: cheap, non-zero, not all alike.
__global__ void FillKernel(__nv_bfloat16* data, size_t count, uint32_t salt) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ salt;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    data[i] = __float2bfloat16(static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

// Device seconds per call of `issue` (work enqueued on `stream`), timed with CUDA events in batches of
// `first_batch`, doubling, until about `seconds` have passed.
template <typename Issue>
double SecondsPerCall(cudaStream_t stream, double seconds, int first_batch, const Issue& issue) {
  Event start, stop;
  int64_t repeats = 0;
  double elapsed = 0;
  for (int batch = first_batch; elapsed < seconds; batch *= 2) {
    start.Record(stream);
    for (int i = 0; i < batch; ++i) issue();
    stop.Record(stream);
    elapsed += Event::ElapsedSeconds(start, stop);
    repeats += batch;
  }
  return elapsed / static_cast<double>(repeats);
}

}  // namespace

double MeasureDeviceGemmFlops(double seconds) {
  constexpr int kN = 8192;
  constexpr size_t kElements = static_cast<size_t>(kN) * kN;
  Stream stream;
  gpu::DeviceMemory a(kElements * sizeof(__nv_bfloat16));
  gpu::DeviceMemory b(kElements * sizeof(__nv_bfloat16));
  gpu::DeviceMemory c(kElements * sizeof(__nv_bfloat16));
  FillKernel<<<1024, 256, 0, stream.get()>>>(a.as<__nv_bfloat16>(), kElements, 1u);
  TB_CHECK_CUDA(cudaGetLastError());
  FillKernel<<<1024, 256, 0, stream.get()>>>(b.as<__nv_bfloat16>(), kElements, 2u);
  TB_CHECK_CUDA(cudaGetLastError());
  gpu::Gemm gemm(stream.get());
  auto multiply = [&] {
    gemm.LinearForward(c.as<gpu::Bf16>(), nullptr, a.as<gpu::Bf16>(), b.as<gpu::Bf16>(), nullptr, kN, kN, kN);
  };
  for (int i = 0; i < 3; ++i) multiply();  // plan, heuristics and clocks settle
  return 2.0 * kN * static_cast<double>(kN) * kN / SecondsPerCall(stream.get(), seconds, 5, multiply);
}

double MeasureDeviceCopyBytesPerSecond(double seconds) {
  constexpr size_t kBytes = size_t{1} << 30;
  Stream stream;
  gpu::DeviceMemory from(kBytes);
  gpu::DeviceMemory to(kBytes);
  auto copy = [&] {
    TB_CHECK_CUDA(cudaMemcpyAsync(to.data(), from.data(), kBytes, cudaMemcpyDeviceToDevice, stream.get()));
  };
  copy();  // first touch and clocks
  return 2.0 * static_cast<double>(kBytes) / SecondsPerCall(stream.get(), seconds, 2, copy);
}

}  // namespace tb
