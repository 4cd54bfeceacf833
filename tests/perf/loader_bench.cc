// Driver of loader_vs_fio.sh: runs the data loader alone (no training) for a fixed time and prints its read
// throughput, counted as fio counts it (bytes the reads asked for / wall time).
//   perf_loader_bench DIR SEQ BATCH WORKERS PREFETCH DIRECT(0|1) RECORD_BYTES SECONDS [HUGE_PAGES(0|1), default 1]
// HUGE_PAGES 0 gives the loader's ring plain 4 KiB pages, as fio's default buffers have.
// Output: one line "loader_MBps <MB/s> bytes <B> seconds <s> batches <n> wait_s <s> read_us <mean pread latency>".
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "clock.h"
#include "data_loader.h"
#include "error.h"

// User + system CPU seconds of the process or of the calling thread.
double CpuSeconds(int who) {
  rusage usage{};
  ::getrusage(who, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char** argv) {
  if (argc != 9 && argc != 10) {
    std::fprintf(stderr, "usage: %s DIR SEQ BATCH WORKERS PREFETCH DIRECT(0|1) RECORD_BYTES SECONDS [HUGE_PAGES(0|1)]\n",
                 argv[0]);
    return 2;
  }
  tb::DataLoaderOptions o;
  o.dir = argv[1];
  o.seq = std::atoi(argv[2]);
  o.batch = std::atoi(argv[3]);
  o.workers = std::atoi(argv[4]);
  o.prefetch = std::atoi(argv[5]);
  o.direct_io = std::atoi(argv[6]) != 0;
  o.record_bytes = std::strtoull(argv[7], nullptr, 10);
  const double seconds = std::atof(argv[8]);
  o.allocator = tb::AlignedHostAllocator(argc == 9 || std::atoi(argv[9]) != 0);
  try {
    tb::DataLoader loader(o);
    const double start = tb::NowSeconds();
    const double start_cpu_s = CpuSeconds(RUSAGE_SELF), start_consumer_s = CpuSeconds(RUSAGE_THREAD);
    while (tb::NowSeconds() - start < seconds) loader.Next();
    const double elapsed = tb::NowSeconds() - start;
    const tb::LoaderStats stats = loader.stats();
    const double consumer_cpu_s = CpuSeconds(RUSAGE_THREAD), process_cpu_s = CpuSeconds(RUSAGE_SELF);
    std::printf("loader_MBps %.1f bytes %llu seconds %.3f batches %llu wait_s %.3f read_us %.1f cpu_s %.3f "
                "consumer_cpu_s %.3f\n",
                stats.bytes_read / elapsed / 1e6, static_cast<unsigned long long>(stats.bytes_read), elapsed,
                static_cast<unsigned long long>(stats.batches), stats.wait_s,
                stats.reads ? stats.read_s / static_cast<double>(stats.reads) * 1e6 : 0.0, process_cpu_s - start_cpu_s,
                consumer_cpu_s - start_consumer_s);
  } catch (const tb::Error& e) {
    std::fprintf(stderr, "perf_loader_bench: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  return 0;
}
