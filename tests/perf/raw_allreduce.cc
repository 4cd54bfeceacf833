// Raw MPI_Allreduce baseline for tests/perf/allreduce_overhead.sh. No trainbench code: the same timing
// methodology as `trainbench collectives` (collectives/sweep.cc), so that trainbench/raw measures only the
// harness's own overhead.
//
// usage: mpirun -np N raw_allreduce -n ITERS -w WARMUP SIZE_BYTES [SIZE_BYTES ...]
//
// Per size: page-aligned float buffers (sized once for the largest size and touched before timing, as
// trainbench does), WARMUP untimed MPI_Allreduce(MPI_SUM, out of place, MPI_COMM_WORLD) calls, a barrier,
// then a timed loop of ITERS back-to-back calls on a monotonic clock; each rank's mean per call, then the
// max over ranks. Rank 0 prints one line per size: "size_bytes time_us".
#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void* AllocatePageAligned(size_t bytes) {
  void* data = nullptr;
  if (posix_memalign(&data, 4096, bytes ? bytes : 1) != 0) return nullptr;
  std::memset(data, 0, bytes ? bytes : 1);  // touch every page now, not inside the timed loop
  return data;
}

// Parses a whole decimal integer >= `minimum`.
bool ParseInteger(const char* text, long long minimum, long long* value) {
  char* end = nullptr;
  long long parsed = std::strtoll(text, &end, 10);
  if (end == text || *end != '\0' || parsed < minimum) return false;
  *value = parsed;
  return true;
}

int Usage(int rank, const std::string& problem) {
  if (rank == 0) {
    std::fprintf(stderr, "raw_allreduce: %s\nusage: mpirun -np N raw_allreduce -n ITERS -w WARMUP SIZE_BYTES...\n",
                 problem.c_str());
  }
  return 2;
}

// This rank's mean seconds per MPI_Allreduce over `iters` calls, after `warmup` untimed calls and a barrier.
double TimeAllreduce(const float* send, float* recv, int count, long long iters, long long warmup) {
  for (long long i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double start = NowSeconds();
  for (long long i = 0; i < iters; ++i) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return (NowSeconds() - start) / static_cast<double>(iters);
}

int Run(int argc, char** argv, int rank) {
  long long iters = 0, warmup = -1;
  std::vector<long long> sizes;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "-n" || arg == "-w") && i + 1 < argc) {
      const char* text = argv[++i];
      if (!ParseInteger(text, arg == "-n" ? 1 : 0, arg == "-n" ? &iters : &warmup)) {
        return Usage(rank, "bad value for " + arg + ": " + text);
      }
    } else {
      long long size = 0;
      if (!ParseInteger(arg.c_str(), 1, &size) || size % 4 != 0 || size / 4 > INT_MAX) {
        return Usage(rank, "size must be a positive multiple of 4 bytes, at most 8 GiB: " + arg);
      }
      sizes.push_back(size);
    }
  }
  if (iters <= 0 || warmup < 0 || sizes.empty()) return Usage(rank, "need -n, -w and at least one size");

  long long largest = 0;
  for (long long size : sizes) largest = size > largest ? size : largest;
  float* send = static_cast<float*>(AllocatePageAligned(static_cast<size_t>(largest)));
  float* recv = static_cast<float*>(AllocatePageAligned(static_cast<size_t>(largest)));
  if (send == nullptr || recv == nullptr) {
    std::fprintf(stderr, "raw_allreduce: cannot allocate %lld bytes\n", largest);
    return 1;
  }
  for (long long size : sizes) {
    const int count = static_cast<int>(size / static_cast<long long>(sizeof(float)));
    double mine = TimeAllreduce(send, recv, count, iters, warmup);
    double slowest = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) std::printf("%lld %.3f\n", size, slowest * 1e6);
  }
  std::fflush(stdout);
  std::free(send);
  std::free(recv);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int status = Run(argc, argv, rank);
  MPI_Finalize();
  return status;
}
