// The data loader: worker threads read each sample's window of seq+1 tokens with positioned reads (pread,
// optionally O_DIRECT), or copy it from a memory map of its file (ReadMethod), straight into a pool of row
// buffers, and do nothing else to them: the model unpacks a
// batch into int32 ids itself (UnpackTokens, token_batch.h). Next() hands out batches in a fixed order that every
// rank derives from the seed alone, so that together the ranks read every sample exactly once per epoch and a
// loader restarted from a saved LoaderPosition continues with exactly the batches an uninterrupted one would.
//
// Samples: the dataset is a list of files cut into fixed-size records (record_bytes, by default the seq+1
// tokens of one window), back to back after each file's header; sample i is the i-th record in file order.
// Epoch e is a permutation of all samples keyed by (seed, e); global batch g of an epoch is the positions
// [g*n*B, (g+1)*n*B) of it and rank r takes the B positions starting at g*n*B + r*B. The samples past the last
// whole global batch are dropped (stats().dropped_per_epoch).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "spin_wait.h"
#include "token_batch.h"

namespace tb {

// Where a loader stands: the next batch it hands out. Saved with a checkpoint and given back to resume.
struct LoaderPosition {
  uint64_t epoch = 0;
  uint64_t batch = 0;  // global batch index within the epoch
  uint64_t seed = 0;

  bool operator==(const LoaderPosition&) const = default;
};

// Allocates the pool of row buffers, in one piece (pass pinned-memory functions to copy straight from it to a
// GPU). O_DIRECT needs 4096-byte alignment.
struct HostAllocator {
  std::function<void*(size_t)> allocate;
  std::function<void(void*)> release;
};
// The default: page-aligned host memory; with huge_pages, a block of 256 KiB or more is rounded up to whole 2 MiB
// pages and offered to transparent huge pages (madvise; plain pages where THP is off). A read into physically
// contiguous memory needs one scatter-gather segment instead of one per 4 KiB page: on a virtual disk that pays
// per segment, O_DIRECT reads of 64 KiB ran twice as fast (tests/perf/README.md).
HostAllocator AlignedHostAllocator(bool huge_pages = true);

// How the workers read a record through the page cache (--read). A map saves the read system call and page-cache
// lookup per record (64 KiB records from a warm cache: 1.3x pread's rate on the machine of tests/perf/README.md); a
// record not cached is a page fault in the worker, which reads it with the kernel's read-around: for a dataset
// that stays in the page cache that is data read ahead, for one much larger than memory read and then evicted unused.
enum class ReadMethod {
  kAuto,   // mmap when the dataset's records take at most map_limit_bytes and direct_io is off, else pread
  kPread,  // pread
  kMmap,   // memcpy from a read-only shared map of each file; excludes direct_io
};
// "auto", "pread", "mmap" (--read); anything else is an InputError naming the flag.
ReadMethod ParseReadMethod(const std::string& name);

struct DataLoaderOptions {
  std::string dir;
  // Raw mode: records of record_bytes from every regular file under `dir` (recursively, sorted by path), no
  // headers; token k of a sample = its k-th little-endian integer of TokenBytesForVocab(raw_vocab) bytes
  // modulo raw_vocab.
  bool raw = false;
  uint64_t raw_vocab = 50257;
  int seq = 1024;   // tokens per sequence; a sample is seq+1 tokens
  int batch = 4;    // sequences per rank per batch (B)
  int rank = 0;
  int world = 1;
  uint64_t seed = 1234;
  int workers = 2;   // --loader-workers
  int prefetch = 4;  // --prefetch: batches read ahead of the consumer
  bool direct_io = false;    // --direct-io: O_DIRECT, reading the 4096-aligned superset of each record
  // --read. A mapped file cut short while the loader runs ends the process with SIGBUS, as for any reader of a map.
  ReadMethod read = ReadMethod::kAuto;
  // ReadMethod::kAuto maps the files when samples x record_bytes is at most this; 0 = a quarter of the host's
  // physical memory (the dataset then stays in the page cache beside everything else).
  uint64_t map_limit_bytes = 0;
  uint64_t record_bytes = 0;  // --record-bytes: bytes read per sample; 0 = (seq+1) x token bytes
  double io_throttle_MBps = 0;  // --io-throttle: this rank's read rate limit (MB = 1e6 B); 0 = none
  double io_latency_ms = 0;     // --io-latency-ms: added to every read
  std::optional<LoaderPosition> resume;  // start here (its seed must equal seed); none: epoch 0, batch 0
  // The ring (prefetch + 1 batches of B records) may take at most this much memory; 0 = a quarter of the host's
  // physical memory. Larger is an InputError naming --prefetch and --record-bytes, before anything is allocated.
  uint64_t ring_limit_bytes = 0;
  HostAllocator allocator = AlignedHostAllocator();
};

struct BatchStats {
  uint64_t bytes_read = 0;   // what the reads asked for (the aligned superset under O_DIRECT)
  double read_s = 0;         // sum over the batch's reads (each pread, plus throttle and latency)
  double fill_s = 0;         // from the first read of the batch starting to the last one ending
  double wait_s = 0;         // how long Next() blocked for this batch
  int queue_depth = 0;       // batches ready when Next() was called
  double ReadMBps() const { return fill_s > 0 ? bytes_read / fill_s / 1e6 : 0; }
};

struct LoaderBatch {
  // B windows of seq+1 tokens as read (the file's token width; raw mode wraps ids into raw_vocab); the origin
  // names the file and byte of each token.
  TokenBatch tokens;
  LoaderPosition position;  // this batch's place
  std::vector<uint64_t> samples;  // (B) dataset sample indices
  BatchStats stats;
};

struct LoaderStats {
  uint64_t files = 0;
  uint64_t open_files = 0;         // kept open; the others are opened for each read (more than the fd budget)
  uint64_t mapped_files = 0;       // read from maps (the files kept open, up to 16384); the others with pread
  uint64_t samples = 0;            // in the dataset
  uint64_t record_bytes = 0;
  uint64_t batches_per_epoch = 0;  // global batches
  uint64_t dropped_per_epoch = 0;  // samples past the last whole global batch
  uint64_t batches = 0;            // handed out by Next()
  uint64_t bytes_read = 0;         // by the batches handed out
  uint64_t reads = 0;
  double read_s = 0;
  double wait_s = 0;
  double worker_idle_s = 0;  // summed over the workers: waiting with nothing to claim (prefetch batches ahead)
  uint64_t worker_idles = 0;
};

// Which sample each position of each epoch holds; the arithmetic the loader runs on, shared by every rank.
class SamplePlan {
 public:
  SamplePlan(uint64_t samples, int world, int batch, uint64_t seed);

  uint64_t samples() const { return samples_; }
  uint64_t batches_per_epoch() const { return batches_per_epoch_; }
  uint64_t dropped_per_epoch() const { return samples_ - batches_per_epoch_ * world_ * batch_; }
  // Sample at position i of `rank`'s share of global batch `batch` of `epoch`.
  uint64_t Sample(uint64_t epoch, uint64_t batch, int rank, int i) const;
  // The position after `p`: the next global batch, wrapping into the next epoch.
  LoaderPosition After(const LoaderPosition& p) const;

 private:
  uint64_t Permute(uint64_t epoch, uint64_t position) const;

  uint64_t samples_;
  int world_;
  int batch_;
  uint64_t seed_;
  uint64_t batches_per_epoch_;
  int half_bits_;  // the permutation is a Feistel network over 2 * half_bits_ bits, cycle-walked to samples_
};

class DataLoader {
 public:
  // Opens and checks the dataset (shard headers, or the raw files), checks the options (InputError naming the
  // flag), and starts the workers.
  explicit DataLoader(DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Blocks until the next batch is ready. The batch stays valid until the next call. A worker's read error
  // (InputError/RuntimeError naming the file and byte offset) is rethrown here.
  const LoaderBatch& Next();

  // The position of the batch the next Next() returns.
  LoaderPosition Position() const;
  LoaderStats stats() const;
  const SamplePlan& plan() const { return *plan_; }

 private:
  struct Source;
  struct Slot;
  struct SampleRead {
    uint64_t bytes = 0;
    double start_s = 0;  // NowSeconds
    double end_s = 0;
  };

  // The constructor's steps: the files and their records (returns the bytes of one sample), the samples they
  // hold, the plan over them, the ring of batch buffers, and the O_DIRECT probe.
  uint64_t ListFiles();
  void IndexSamples(uint64_t sample_bytes);
  void PlanSamples();
  void AllocateRing();
  void ProbeDirectIo();
  // Rows of one batch claimed by a worker.
  struct Claim {
    Slot* slot = nullptr;
    uint64_t sequence = 0;
    int first_row = 0;
    int rows = 0;
  };
  void Work();
  Claim ClaimRows(size_t cpu);
  bool FillRows(const Claim& claim, BatchStats& part, double& first_start_s, double& last_end_s);
  bool AddRows(const Claim& claim, const BatchStats& part, double first_start_s, double last_end_s);
  // Reads sample `sample` into row `row` of `slot` (latency, throttle and the pread); bytes 0 when stopped.
  SampleRead ReadSample(uint64_t sample, Slot& slot, int row);
  // Sleeps until `deadline` (NowSeconds) unless the loader stops first; returns false when it stops.
  bool SleepUntil(double deadline);
  LoaderPosition PositionOf(uint64_t sequence) const;
  unsigned char* RowBuffer(uint32_t row) const;
  void ReleaseSlot(int index);
  TokenOrigin OriginOf(uint64_t sample, int token) const;

  DataLoaderOptions options_;
  std::unique_ptr<Source> source_;
  std::unique_ptr<SamplePlan> plan_;
  uint64_t row_stride_ = 0;  // bytes of one row buffer (the record, or its aligned superset under O_DIRECT)
  int claim_rows_ = 1;       // rows a worker claims at once: the batch shared evenly among the workers
  double throttle_free_at_ = 0;  // --io-throttle: when the rank's read timeline is free again (NowSeconds)
  // The row buffers: (prefetch + 1) x B rows of row_stride_ bytes, one allocation. A batch's rows need not be
  // contiguous (TokenBatch holds a pointer per window), so each CPU's workers read into the rows read into on that
  // CPU last: a released batch gives each row back to the stack of the CPU it was read into on, and a claim takes
  // the most recently returned rows of the CPU it runs on first, which are still in that core's cache. Raw reads of
  // 64 KiB records through the page cache, 4 threads on 2 cores, 9 batch buffers: 17.6 GB/s when each thread wrote
  // the same rows every time, 12.3 GB/s when the rows rotated among the threads (tests/perf/README.md).
  std::unique_ptr<void, std::function<void(void*)>> ring_;
  std::vector<std::vector<uint32_t>> free_rows_;  // [cpu], then the shared stack: row indices; back = returned last
  std::vector<uint32_t> row_stack_;               // [row]: the CPU (stack) it was read into on last
  std::vector<std::unique_ptr<Slot>> slots_;      // prefetch + 1 batches in flight (their rows, samples, stats)
  std::vector<int> free_slots_;  // a stack
  std::vector<int> slot_of_;     // [sequence % (prefetch + 1)]: the slot of a claimed batch, -1 before
  int current_slot_ = -1;        // the batch handed out last (valid until the next Next())

  mutable std::mutex mutex_;
  std::condition_variable work_cv_;   // workers: a sample to read, or stop
  std::condition_variable ready_cv_;  // consumer: a batch completed, or an error
  uint64_t handed_ = 0;       // batches handed out by Next()
  // Next() polls this before it sleeps, as consumer_wait_ says: the sequence + 1 of the batch it waits for, stored by
  // the worker that completes it, so that worker need not wake a sleeper (a futex wake and an interrupt per batch:
  // tests/perf/README.md).
  std::atomic<uint64_t> ready_through_{0};
  // How Next() waits (ConsumerWaitFor the workers); oversubscribed (more workers than CPUs): each worker also
  // yields its core after each claim (Work()).
  ConsumerWait consumer_wait_;
  uint64_t next_claim_ = 0;   // next (batch sequence x B + sample) to read
  bool stop_ = false;
  std::exception_ptr error_;
  LoaderStats totals_;
  LoaderBatch current_;
  std::vector<std::thread> threads_;
};

}  // namespace tb
