// Driver of loader_vs_fio.sh: runs the data loader alone (no training) for a fixed time and prints its read
// throughput, counted as fio counts it (bytes the reads asked for / wall time).
//   perf_loader_bench DIR SEQ BATCH WORKERS PREFETCH READ RECORD_BYTES SECONDS [HUGE_PAGES(0|1), default 1]
//                     [ENGINE: loader (default) | raw]
// READ: buffered (pread through the page cache: --read pread), direct (O_DIRECT pread: --direct-io) or mmap (copies
// from memory maps of the files: --read mmap).
// HUGE_PAGES 0 gives the loader's ring plain 4 KiB pages, as fio's default buffers have.
// Output: one line "loader_MBps <MB/s> bytes <B> seconds <s> batches <n> wait_s <s> read_us <mean pread latency>".
//
// ENGINE raw is the raw baseline, the floor of any loader that keeps what it reads until a consumer takes it:
// WORKERS threads pread (or copy from the maps) random records of the same files (the same READ and record size)
// into two batch buffers from the same allocator as the loader's ring, the one being filled and the one a consumer
// would hold; thread w fills rows w, w + WORKERS, ... of one buffer, then of the other, and a consumer thread waits
// for every B records read as the loader's consumer waits for each batch (polling first unless the readers fill the
// CPUs exactly). No sample plan, no order, no locks among the readers. Where fio reads every record into one 64 KiB
// buffer that never leaves the core's L2 cache, a loader's batches are distinct memory: raw against fio measures
// what that costs on this machine, loader against raw what the loader's own machinery costs.
// Output: "raw_MBps <MB/s> bytes <B> seconds <s> cpu_s <s>".
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <functional>
#include <memory>
#include <utility>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "clock.h"
#include "data_loader.h"
#include "error.h"
#include "random.h"
#include "spin_wait.h"
#include "token_dataset.h"

// User + system CPU seconds of the process or of the calling thread.
double CpuSeconds(int who) {
  rusage usage{};
  ::getrusage(who, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// The dataset's shards opened for the raw baseline, and where each sample's record is.
struct RawFiles {
  struct File {
    int fd;
    uint64_t first, data_offset;
    const unsigned char* map;  // READ mmap: the whole file
    uint64_t map_bytes;
  };
  std::vector<File> files;
  uint64_t samples = 0;

  explicit RawFiles(const tb::DataLoaderOptions& o) {
    for (const tb::ShardFile& shard : tb::OpenTokenDataset(o.dir).shards) {
      const uint64_t records = shard.header.payload_bytes() / o.record_bytes;
      if (records == 0) continue;
      const int fd = ::open(shard.path.c_str(), O_RDONLY | O_CLOEXEC | (o.direct_io ? O_DIRECT : 0));
      if (fd < 0) throw tb::RuntimeError("cannot open " + shard.path);
      const uint64_t bytes = static_cast<uint64_t>(::lseek(fd, 0, SEEK_END));
      void* map = o.read == tb::ReadMethod::kMmap ? ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0) : nullptr;
      if (map == MAP_FAILED) throw tb::RuntimeError("cannot map " + shard.path);
      files.push_back({fd, samples, shard.header.header_bytes, static_cast<const unsigned char*>(map), bytes});
      samples += records;
    }
    if (samples == 0) throw tb::InputError("no whole record in " + o.dir);
  }
  ~RawFiles() {
    for (const File& f : files) {
      if (f.map) ::munmap(const_cast<unsigned char*>(f.map), f.map_bytes);
      ::close(f.fd);
    }
  }
  // Reads (or copies from the map) the record of `sample` into `into`; false when a read comes back short.
  bool Read(uint64_t sample, uint64_t record_bytes, unsigned char* into) const {
    const File& f = *(std::upper_bound(files.begin(), files.end(), sample,
                                       [](uint64_t s, const File& file) { return s < file.first; }) - 1);
    const uint64_t at = f.data_offset + (sample - f.first) * record_bytes;
    if (f.map) {
      std::memcpy(into, f.map + at, record_bytes);
      return true;
    }
    return ::pread(f.fd, into, record_bytes, static_cast<off_t>(at)) == static_cast<ssize_t>(record_bytes);
  }
};

// The raw baseline's consumer: a thread that waits until a batch's worth of rows (B) has been read since the last
// one, as a loader's consumer waits for each batch: the one hand-off per batch that any loader whose consumer waits
// pays (a poll on a spare core; else a futex wake, the consumer's run, the reader it preempts).
class RawConsumer {
 public:
  RawConsumer(int batch, int readers)
      : batch_(static_cast<uint64_t>(batch)),
        wait_(tb::ConsumerWaitFor(readers)),
        thread_([this] { Run(); }) {}
  ~RawConsumer() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    ready_.notify_one();
    thread_.join();
  }
  // A reader finished a row; every B-th row completes a batch and wakes the consumer.
  void RowDone() {
    if ((rows_.fetch_add(1, std::memory_order_relaxed) + 1) % batch_ != 0) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++batches_;
    }
    ready_.notify_one();
  }

 private:
  // Waits for each batch as DataLoader::Next() does (tb::ConsumerWaitFor): polls, spinning or yielding its core,
  // before it sleeps, unless the readers fill the CPUs exactly.
  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (uint64_t taken = 0; !stop_; taken = batches_) {
      if (wait_.poll_s > 0) {
        lock.unlock();
        tb::SpinUntil([&] { return batches_.load(std::memory_order_acquire) > taken; }, wait_.poll_s,
                      wait_.oversubscribed);
        lock.lock();
      }
      ready_.wait(lock, [&] { return stop_ || batches_ > taken; });
    }
  }

  const uint64_t batch_;
  const tb::ConsumerWait wait_;
  std::atomic<uint64_t> rows_{0};
  std::mutex mutex_;
  std::condition_variable ready_;
  std::atomic<uint64_t> batches_{0};  // written under the mutex; polled without it
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is constructed
};

// The raw baseline (ENGINE raw, see the top of the file). Returns the bytes read; sets `elapsed_s`.
uint64_t RawReads(const tb::DataLoaderOptions& o, double seconds, double& elapsed_s) {
  const RawFiles files(o);
  const uint64_t row = (o.record_bytes + 4095) / 4096 * 4096;  // O_DIRECT: whole, aligned blocks
  const size_t batch_bytes = static_cast<size_t>(o.batch) * row;
  const std::unique_ptr<void, std::function<void(void*)>> ring(o.allocator.allocate(2 * batch_bytes),
                                                               o.allocator.release);
  auto* base = static_cast<unsigned char*>(ring.get());
  std::vector<uint64_t> bytes(static_cast<size_t>(o.workers), 0);
  std::atomic<bool> failed{false};
  RawConsumer consumer(o.batch, o.workers);
  const double start = tb::NowSeconds();
  std::vector<std::thread> threads;
  for (int w = 0; w < o.workers; ++w) {
    threads.emplace_back([&, w] {
      uint64_t state = tb::SplitMix64(0x5eed + static_cast<uint64_t>(w)), mine = 0;
      for (int buffer = 0; tb::NowSeconds() - start < seconds && !failed; buffer ^= 1) {
        for (int r = w; r < o.batch && !failed; r += o.workers) {
          state = tb::SplitMix64(state);
          unsigned char* into = base + buffer * batch_bytes + static_cast<size_t>(r) * row;
          if (!files.Read(state % files.samples, o.record_bytes, into)) failed = true;
          mine += o.record_bytes;
          consumer.RowDone();
        }
      }
      bytes[static_cast<size_t>(w)] = mine;
    });
  }
  for (std::thread& t : threads) t.join();
  elapsed_s = tb::NowSeconds() - start;
  if (failed) throw tb::RuntimeError("a raw read failed or came back short");
  uint64_t total = 0;
  for (uint64_t b : bytes) total += b;
  return total;
}

// ENGINE raw: prints "raw_MBps ...".
void RunRaw(const tb::DataLoaderOptions& o, double seconds) {
  if (o.workers < 1 || o.batch < 1 || o.record_bytes == 0) {
    throw tb::InputError("raw: WORKERS, BATCH and RECORD must be positive");
  }
  const double start_cpu_s = CpuSeconds(RUSAGE_SELF);
  double elapsed = 0;
  const uint64_t bytes = RawReads(o, seconds, elapsed);
  std::printf("raw_MBps %.1f bytes %llu seconds %.3f cpu_s %.3f\n", bytes / elapsed / 1e6,
              static_cast<unsigned long long>(bytes), elapsed, CpuSeconds(RUSAGE_SELF) - start_cpu_s);
}

// ENGINE loader: a consumer calling Next() in a loop; prints "loader_MBps ...".
void RunLoader(const tb::DataLoaderOptions& o, double seconds) {
  tb::DataLoader loader(o);
  const double start = tb::NowSeconds();
  const double start_cpu_s = CpuSeconds(RUSAGE_SELF), start_consumer_s = CpuSeconds(RUSAGE_THREAD);
  while (tb::NowSeconds() - start < seconds) loader.Next();
  const double elapsed = tb::NowSeconds() - start;
  const tb::LoaderStats stats = loader.stats();
  const double consumer_cpu_s = CpuSeconds(RUSAGE_THREAD), process_cpu_s = CpuSeconds(RUSAGE_SELF);
  std::printf("loader_MBps %.1f bytes %llu seconds %.3f batches %llu wait_s %.3f read_us %.1f cpu_s %.3f "
              "consumer_cpu_s %.3f worker_idle_s %.3f idles %llu\n",
              stats.bytes_read / elapsed / 1e6, static_cast<unsigned long long>(stats.bytes_read), elapsed,
              static_cast<unsigned long long>(stats.batches), stats.wait_s,
              stats.reads ? stats.read_s / static_cast<double>(stats.reads) * 1e6 : 0.0, process_cpu_s - start_cpu_s,
              consumer_cpu_s - start_consumer_s, stats.worker_idle_s,
              static_cast<unsigned long long>(stats.worker_idles));
}

int main(int argc, char** argv) {
  const std::string engine = argc == 11 ? argv[10] : "loader";
  const std::string read = argc > 6 ? argv[6] : "";
  if (argc < 9 || argc > 11 || (engine != "loader" && engine != "raw") ||
      (read != "buffered" && read != "direct" && read != "mmap")) {
    std::fprintf(stderr,
                 "usage: %s DIR SEQ BATCH WORKERS PREFETCH buffered|direct|mmap RECORD_BYTES SECONDS [HUGE_PAGES(0|1) "
                 "[loader|raw]]\n",
                 argv[0]);
    return 2;
  }
  tb::DataLoaderOptions o;
  o.dir = argv[1];
  o.seq = std::atoi(argv[2]);
  o.batch = std::atoi(argv[3]);
  o.workers = std::atoi(argv[4]);
  o.prefetch = std::atoi(argv[5]);
  o.direct_io = read == "direct";
  o.read = read == "mmap" ? tb::ReadMethod::kMmap : tb::ReadMethod::kPread;
  o.record_bytes = std::strtoull(argv[7], nullptr, 10);
  const double seconds = std::atof(argv[8]);
  o.allocator = tb::AlignedHostAllocator(argc == 9 || std::atoi(argv[9]) != 0);
  try {
    if (engine == "raw") {
      RunRaw(o, seconds);
    } else {
      RunLoader(o, seconds);
    }
  } catch (const tb::Error& e) {
    std::fprintf(stderr, "perf_loader_bench: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  return 0;
}
