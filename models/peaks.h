// Peak dense FLOP rates by device, each with its source, for MFU; and the GEMM rate measured on this rank's
// device at start-up, for MFU against what the device actually sustains.
#pragma once

#include <optional>
#include <string>

namespace tb {

struct DevicePeak {
  std::string device;      // the table entry that matched, e.g. "H100 SXM"
  double bf16_flops = 0;   // dense (no sparsity), FLOP/s
  double fp32_flops = 0;   // dense FP32 (not TF32), FLOP/s
  std::string source;
};

// Looks `device_name` (as CUDA reports it, e.g. "NVIDIA H200") up in the table; nullopt when unknown (CPUs
// included): MFU against a peak is then not reported.
std::optional<DevicePeak> FindDevicePeak(const std::string& device_name);

// Sustained fp32 GEMM rate of this process on the CPU (cblas_sgemm, square n=1024, repeated for about
// `seconds`), in FLOP/s.
double MeasureCpuGemmFlops(double seconds = 0.3);

// Sustained bf16 GEMM rate of the current GPU through the transformer's cuBLASLt path (square n = 8192, fp32
// accumulation), timed with CUDA events for about `seconds`, in FLOP/s. Throws in a build without CUDA.
double MeasureDeviceGemmFlops(double seconds = 0.5);

// The memory copy rate `train --op-times` sets memory-bound kernels against: bytes read plus written per second by
// a 256 MiB memcpy on the CPU (this process's one thread), or a 1 GiB device-to-device cudaMemcpyAsync on the current
// GPU (timed with CUDA events; throws in a build without CUDA), repeated for about `seconds`.
double MeasureCpuCopyBytesPerSecond(double seconds = 0.2);
double MeasureDeviceCopyBytesPerSecond(double seconds = 0.2);

// Threads each rank's CPU work uses (OpenBLAS's and the CPU reference's, models/cpu_kernels.h): the cores of the
// node shared by its ranks, at most the CPUs this process may run on (at least one).
void SetCpuThreadsPerRank(int ranks_on_node);
int CpuThreads();

}  // namespace tb
