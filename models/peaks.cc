#include "peaks.h"

#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "clock.h"

namespace tb {
namespace {

struct PeakEntry {
  const char* match;  // substring of the CUDA device name
  const char* device;
  double bf16_flops;
  double fp32_flops;
  const char* source;
};

// Ordered so that the more specific names match first ("H100 PCIe" before "H100").
constexpr PeakEntry kPeaks[] = {
    {"H200", "H200 SXM", 989e12, 67e12, "NVIDIA H200 Tensor Core GPU datasheet (2024): BF16 1,979 TFLOPS with sparsity = 989 dense; FP32 67 TFLOPS"},
    {"H100 PCIe", "H100 PCIe", 756e12, 51e12, "NVIDIA H100 Tensor Core GPU datasheet (2023): PCIe BF16 1,513 TFLOPS with sparsity = 756 dense; FP32 51 TFLOPS"},
    {"H100", "H100 SXM", 989e12, 67e12, "NVIDIA H100 Tensor Core GPU datasheet (2023): SXM BF16 1,979 TFLOPS with sparsity = 989 dense; FP32 67 TFLOPS"},
    {"A100", "A100", 312e12, 19.5e12, "NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS dense; FP32 19.5 TFLOPS"},
};

}  // namespace

std::optional<DevicePeak> FindDevicePeak(const std::string& device_name) {
  for (const PeakEntry& entry : kPeaks) {
    if (device_name.find(entry.match) != std::string::npos) {
      return DevicePeak{entry.device, entry.bf16_flops, entry.fp32_flops, entry.source};
    }
  }
  return std::nullopt;
}

double MeasureCpuGemmFlops(double seconds) {
  constexpr int kN = 1024;
  std::vector<float> a(static_cast<size_t>(kN) * kN, 0.5f), b(a.size(), 0.25f), c(a.size(), 0.0f);
  auto gemm = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kN, kN, kN, 1.0f, a.data(), kN, b.data(), kN, 0.0f,
                c.data(), kN);
  };
  gemm();  // warm-up: thread pool start, page faults
  int runs = 0;
  const double start = NowSeconds();
  double elapsed = 0;
  do {
    gemm();
    ++runs;
    elapsed = NowSeconds() - start;
  } while (elapsed < seconds);
  return 2.0 * kN * kN * static_cast<double>(kN) * runs / elapsed;
}

double MeasureCpuCopyBytesPerSecond(double seconds) {
  constexpr size_t kBytes = size_t{256} << 20;
  std::vector<char> from(kBytes, 1), to(kBytes, 0);  // written once: the pages are resident before timing
  std::memcpy(to.data(), from.data(), kBytes);
  int runs = 0;
  const double start = NowSeconds();
  double elapsed = 0;
  do {
    std::memcpy(to.data(), from.data(), kBytes);
    from[static_cast<size_t>(runs) % kBytes] = static_cast<char>(runs);  // not a copy the compiler may drop
    ++runs;
    elapsed = NowSeconds() - start;
  } while (elapsed < seconds);
  return 2.0 * kBytes * runs / elapsed;
}

void SetCpuThreadsPerRank(int ranks_on_node) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Never more threads than the CPUs this process may run on (taskset, a cpuset, a launcher's binding).
  cpu_set_t usable;
  const int usable_cpus = sched_getaffinity(0, sizeof(usable), &usable) == 0 ? CPU_COUNT(&usable) : cores;
  openblas_set_num_threads(std::max(1, std::min(cores / std::max(1, ranks_on_node), usable_cpus)));
}

int CpuThreads() { return openblas_get_num_threads(); }

}  // namespace tb
