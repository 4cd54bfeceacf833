#include "data_loader.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>

#include "clock.h"
#include "context.h"
#include "error.h"
#include "paths.h"
#include "token_dataset.h"
#include "units.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

// O_DIRECT needs offsets, lengths and buffers aligned to the logical block size; 4096 covers every device.
constexpr uint64_t kDirectAlign = 4096;
// Transparent huge pages: their size on x86-64 and arm64 with 4 KiB base pages, and the smallest block offered.
constexpr uint64_t kHugePage = uint64_t{2} << 20;
constexpr uint64_t kHugeFrom = uint64_t{256} << 10;
// A map per file for at most this many files (the rest are read with pread): a quarter of Linux's default
// vm.max_map_count (65530), the rest left to malloc, MPI, CUDA and NCCL.
constexpr uint64_t kMaxMappedFiles = 16384;

// The CPU the calling thread runs on, as an index below `cpus` (0 where unknown).
size_t CurrentCpu(size_t cpus) {
  const int cpu = ::sched_getcpu();
  return cpu >= 0 && static_cast<size_t>(cpu) < cpus ? static_cast<size_t>(cpu) : 0;
}

uint64_t RoundUp(uint64_t value, uint64_t to) { return (value + to - 1) / to * to; }

constexpr int kFeistelRounds = 6;

}  // namespace

ReadMethod ParseReadMethod(const std::string& name) {
  if (name == "auto") return ReadMethod::kAuto;
  if (name == "pread") return ReadMethod::kPread;
  if (name == "mmap") return ReadMethod::kMmap;
  throw InputError("--read '" + name + "' is none of auto, pread, mmap");
}

HostAllocator AlignedHostAllocator(bool huge_pages) {
  return HostAllocator{[huge_pages](size_t bytes) {
                         const bool huge = huge_pages && bytes >= kHugeFrom;
                         const size_t align = huge ? kHugePage : kDirectAlign;
                         const size_t size = RoundUp(std::max<size_t>(bytes, 1), align);
                         void* p = std::aligned_alloc(align, size);
                         if (!p) throw std::bad_alloc();
                         if (huge) ::madvise(p, size, MADV_HUGEPAGE);  // advice: plain pages if refused
                         return p;
                       },
                       [](void* p) { std::free(p); }};
}

// ---- SamplePlan ---------------------------------------------------------------------------------------------

SamplePlan::SamplePlan(uint64_t samples, int world, int batch, uint64_t seed)
    : samples_(samples), world_(world), batch_(batch), seed_(seed) {
  const uint64_t global = static_cast<uint64_t>(world) * static_cast<uint64_t>(batch);
  batches_per_epoch_ = samples / global;
  int bits = 2;
  while (bits < 64 && (uint64_t{1} << bits) < samples) bits += 2;
  half_bits_ = bits / 2;
}

// A keyed bijection on [0, 4^half_bits) (a balanced Feistel network), walked until it lands in [0, samples):
// a permutation of the samples computed per position, so no rank holds a table of the whole epoch.
uint64_t SamplePlan::Permute(uint64_t epoch, uint64_t position) const {
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  uint64_t keys[kFeistelRounds];
  for (int r = 0; r < kFeistelRounds; ++r) keys[r] = SplitMix64(seed_ ^ SplitMix64(epoch * kFeistelRounds + r));
  uint64_t x = position;
  do {
    uint64_t left = x >> half_bits_, right = x & mask;
    for (int r = 0; r < kFeistelRounds; ++r) {
      const uint64_t next = left ^ (SplitMix64(right ^ keys[r]) & mask);
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= samples_);
  return x;
}

uint64_t SamplePlan::Sample(uint64_t epoch, uint64_t batch, int rank, int i) const {
  const uint64_t position = (batch * world_ + rank) * batch_ + i;
  return Permute(epoch, position);
}

LoaderPosition SamplePlan::After(const LoaderPosition& p) const {
  return p.batch + 1 < batches_per_epoch_ ? LoaderPosition{p.epoch, p.batch + 1, p.seed}
                                          : LoaderPosition{p.epoch + 1, 0, p.seed};
}

// ---- the files ----------------------------------------------------------------------------------------------

struct DataLoader::Source {
  struct File {
    std::string path;
    int fd = -1;
    uint64_t data_offset = 0;  // where the records start
    uint64_t first_sample = 0;
    uint64_t records = 0;
    const unsigned char* map = nullptr;  // ReadMethod kMmap: the whole file as it was at open, read-only
    uint64_t map_bytes = 0;

    // Where sample `sample` (one of this file's) starts in the file.
    uint64_t RecordOffset(uint64_t sample, uint64_t record_bytes) const {
      return data_offset + (sample - first_sample) * record_bytes;
    }
  };
  std::vector<File> files;  // fd -1 after opening: more files than descriptors to spare; opened per read
  uint32_t token_bytes = 2;
  uint64_t vocab = 0;
  bool wrap_to_vocab = false;  // raw mode: tokens are bytes modulo vocab; shards: out-of-vocab is corruption
  uint64_t samples = 0;

  ~Source() {
    for (File& f : files) {
      if (f.map) ::munmap(const_cast<unsigned char*>(f.map), f.map_bytes);
      if (f.fd >= 0) ::close(f.fd);
    }
  }

  const File& FileOf(uint64_t sample) const {
    auto it = std::upper_bound(files.begin(), files.end(), sample,
                               [](uint64_t s, const File& f) { return s < f.first_sample; });
    return *(it - 1);
  }
};

struct DataLoader::Slot {
  explicit Slot(int batch) : rows(batch), windows(batch), samples(batch) {}

  std::vector<uint32_t> rows;  // [row]: the row buffer it was read into
  std::vector<const unsigned char*> windows;  // where each row's sample starts in its row buffer
  std::vector<uint64_t> samples;
  uint64_t sequence = UINT64_MAX;  // the batch sequence number it holds
  LoaderPosition position;
  int done = 0;  // samples read
  BatchStats stats;
  double first_start_s = 0;
  double last_end_s = 0;
};

// ---- DataLoader ---------------------------------------------------------------------------------------------

namespace {

// How the loader reads: workers, prefetch, emulated slow storage, the read method.
void CheckReadOptions(const DataLoaderOptions& o) {
  if (o.workers < 1) throw InputError("--loader-workers must be at least 1");
  if (o.prefetch < 1) throw InputError("--prefetch must be at least 1 batch");
  if (o.io_throttle_MBps < 0) throw InputError("--io-throttle must be >= 0 MB/s (0 = no limit)");
  if (o.io_latency_ms < 0) throw InputError("--io-latency-ms must be >= 0");
  if (o.read == ReadMethod::kMmap && o.direct_io) {
    throw InputError("--read mmap and --direct-io exclude each other: a map reads through the page cache");
  }
}

void CheckOptions(const DataLoaderOptions& o) {
  if (o.dir.empty()) throw InputError("--data: no data directory given");
  if (o.seq < 1) throw InputError("--seq must be at least 1 token");
  if (o.batch < 1) throw InputError("the loader's batch (sequences per rank) must be at least 1");
  if (o.world < 1 || o.rank < 0 || o.rank >= o.world) {
    throw InputError("loader rank " + std::to_string(o.rank) + " is not in 0.." + std::to_string(o.world - 1));
  }
  CheckReadOptions(o);
  if (o.raw && (o.raw_vocab < 1 || o.raw_vocab > (uint64_t{1} << 32))) {
    throw InputError("raw mode vocab " + std::to_string(o.raw_vocab) + " out of range 1..2^32");
  }
  if (!o.allocator.allocate || !o.allocator.release) throw InputError("the loader needs an allocator and a release");
}

int OpenForReading(const std::string& path, bool direct, const std::string& dir) {
  std::string why;
  int error = 0;
  int fd = OpenInputFile(path, direct ? O_DIRECT : 0, why, &error);
  if (fd < 0 && direct && error == EINVAL) {
    throw InputError("--direct-io: the filesystem of '" + dir + "' refuses O_DIRECT (" + path +
                     ": Invalid argument); run without --direct-io");
  }
  if (fd < 0) throw InputError(path + ": cannot open: " + why);
  return fd;
}

// The whole of an open file, mapped read-only. InputError where the filesystem cannot map it.
const unsigned char* MapFile(int fd, const std::string& path, uint64_t& bytes) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) throw InputError(path + ": cannot stat: " + OsMessage(errno));
  bytes = static_cast<uint64_t>(st.st_size);
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    throw InputError("--read mmap: cannot map " + path + ": " + OsMessage(errno) + "; use --read pread");
  }
  return static_cast<const unsigned char*>(map);
}

// Reads [at, at + length) of `fd` into `into` until the length or the end of the file; O_DIRECT reads stop at the
// first short block (the end of the file). Returns the bytes read; a failed read is a RuntimeError naming the file.
uint64_t PreadRecord(int fd, const std::string& path, bool direct, unsigned char* into, uint64_t at, uint64_t length) {
  uint64_t got = 0;
  while (got < length) {
    ssize_t n = ::pread(fd, into + got, length - got, static_cast<off_t>(at + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw RuntimeError(path + ": read of " + std::to_string(length - got) + " bytes at byte " +
                         std::to_string(at + got) + " failed: " + OsMessage(errno));
    }
    if (n == 0) break;
    got += static_cast<uint64_t>(n);
    // O_DIRECT reads come back in whole blocks except at the end of the file, where the next one would fail.
    if (direct && got % kDirectAlign != 0) break;
  }
  return got;
}

// Descriptors the loader keeps open: half the soft limit, the rest left to MPI, NCCL and the checkpoint writer.
// Files past it are opened for each read.
uint64_t DescriptorBudget() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1024;
  return std::max<uint64_t>(16, limit.rlim_cur / 2);
}

// A descriptor opened for one read, closed after it.
class ReadDescriptor {
 public:
  ReadDescriptor(int kept, const std::string& path, bool direct, const std::string& dir)
      : fd_(kept >= 0 ? kept : OpenForReading(path, direct, dir)), owned_(kept < 0) {}
  ~ReadDescriptor() {
    if (owned_) ::close(fd_);
  }
  ReadDescriptor(const ReadDescriptor&) = delete;
  ReadDescriptor& operator=(const ReadDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
  bool owned_;
};

}  // namespace

DataLoader::DataLoader(DataLoaderOptions options) : options_(std::move(options)) {
  CheckOptions(options_);
  source_ = std::make_unique<Source>();
  IndexSamples(ListFiles());
  PlanSamples();
  AllocateRing();
  ProbeDirectIo();
  const Source& src = *source_;
  current_.tokens.batch = options_.batch;
  current_.tokens.seq = options_.seq;
  current_.tokens.token_bytes = static_cast<int>(src.token_bytes);
  current_.tokens.wrap_vocab = src.wrap_to_vocab ? src.vocab : 0;
  current_.tokens.origin = [this](int window, int token) { return OriginOf(current_.samples.at(window), token); };
  consumer_wait_ = ConsumerWaitFor(options_.workers);
  for (int w = 0; w < options_.workers; ++w) threads_.emplace_back([this] { Work(); });
}

// Every file of a raw directory (recursively) or every shard, with how many records each holds.
uint64_t DataLoader::ListFiles() {
  Source& src = *source_;
  uint64_t sample_bytes = 0;
  if (options_.raw) {
    src.vocab = options_.raw_vocab;
    src.token_bytes = TokenBytesForVocab(src.vocab);
    src.wrap_to_vocab = true;
    sample_bytes = static_cast<uint64_t>(options_.seq + 1) * src.token_bytes;
    options_.record_bytes = options_.record_bytes ? options_.record_bytes : sample_bytes;
    std::error_code ec;
    if (!fs::is_directory(options_.dir, ec)) {
      throw InputError("data directory '" + options_.dir + "' does not exist or is not a directory");
    }
    std::vector<std::pair<std::string, uint64_t>> found;
    for (fs::recursive_directory_iterator it(options_.dir, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code size_ec;
      if (it->is_regular_file(size_ec)) found.emplace_back(it->path().string(), it->file_size(size_ec));
    }
    if (ec) throw InputError("cannot list data directory '" + options_.dir + "': " + ec.message());
    std::sort(found.begin(), found.end());
    for (const auto& [path, bytes] : found) src.files.push_back({path, -1, 0, 0, bytes / options_.record_bytes});
    return sample_bytes;
  }
  TokenDataset dataset = OpenTokenDataset(options_.dir);
  src.vocab = dataset.vocab;
  src.token_bytes = dataset.token_bytes;
  sample_bytes = static_cast<uint64_t>(options_.seq + 1) * src.token_bytes;
  options_.record_bytes = options_.record_bytes ? options_.record_bytes : sample_bytes;
  for (const ShardFile& shard : dataset.shards) {
    src.files.push_back({shard.path, -1, shard.header.header_bytes, 0,
                         shard.header.payload_bytes() / options_.record_bytes});
  }
  return sample_bytes;
}

// Numbers the samples across the files (those too small for a record are dropped) and opens the files kept open.
void DataLoader::IndexSamples(uint64_t sample_bytes) {
  Source& src = *source_;
  if (options_.record_bytes < sample_bytes) {
    throw InputError("--record-bytes " + std::to_string(options_.record_bytes) + " is smaller than one sample: (" +
                     std::to_string(options_.seq) + " + 1) tokens x " + std::to_string(src.token_bytes) +
                     " B = " + std::to_string(sample_bytes) + " B");
  }
  // Files too small for one record carry no samples and are not opened.
  std::erase_if(src.files, [](const Source::File& f) { return f.records == 0; });
  for (Source::File& f : src.files) {
    f.first_sample = src.samples;
    src.samples += f.records;
  }
  if (src.samples == 0) {
    throw InputError("data directory '" + options_.dir + "' holds no whole record of " +
                     std::to_string(options_.record_bytes) + " bytes (" + std::to_string(options_.seq) +
                     " + 1 tokens per sample)");
  }
  const uint64_t map_limit = options_.map_limit_bytes ? options_.map_limit_bytes : PhysicalMemoryBytes() / 4;
  const bool map = options_.read == ReadMethod::kMmap ||
                   (options_.read == ReadMethod::kAuto && !options_.direct_io &&
                    src.samples <= map_limit / options_.record_bytes);
  const uint64_t keep_open = std::min<uint64_t>(src.files.size(), DescriptorBudget());
  for (uint64_t i = 0; i < keep_open; ++i) {
    Source::File& f = src.files[i];
    f.fd = OpenForReading(f.path, options_.direct_io, options_.dir);
    if (map && i < kMaxMappedFiles) f.map = MapFile(f.fd, f.path, f.map_bytes);
  }
  totals_.open_files = keep_open;
  totals_.mapped_files = map ? std::min(keep_open, kMaxMappedFiles) : 0;
}

// The shuffled plan of global batches, checked against a resumed position.
void DataLoader::PlanSamples() {
  const Source& src = *source_;
  plan_ = std::make_unique<SamplePlan>(src.samples, options_.world, options_.batch, options_.seed);
  if (plan_->batches_per_epoch() == 0) {
    throw InputError("data directory '" + options_.dir + "' holds " + std::to_string(src.samples) +
                     " samples, fewer than one global batch of " + std::to_string(options_.world) + " ranks x " +
                     std::to_string(options_.batch) + " sequences");
  }
  if (options_.resume) {
    const LoaderPosition& r = *options_.resume;
    if (r.seed != options_.seed) {
      throw InputError("the saved loader position has seed " + std::to_string(r.seed) + ", this run --seed " +
                       std::to_string(options_.seed) + "; resume with the same seed");
    }
    if (r.batch >= plan_->batches_per_epoch()) {
      throw InputError("the saved loader position (batch " + std::to_string(r.batch) + ") is past the " +
                       std::to_string(plan_->batches_per_epoch()) + " global batches per epoch of '" +
                       options_.dir + "'; was the dataset or the batch size changed?");
    }
  }
  totals_.files = src.files.size();
  totals_.samples = src.samples;
  totals_.record_bytes = options_.record_bytes;
  totals_.batches_per_epoch = plan_->batches_per_epoch();
  totals_.dropped_per_epoch = plan_->dropped_per_epoch();
}

// prefetch + 1 batch buffers in one allocation, refused before it is made when it would not fit the host.
void DataLoader::AllocateRing() {
  // Rows hold whole records; under O_DIRECT the 4096-aligned superset of one, which starts at most a block early.
  row_stride_ = options_.direct_io ? RoundUp(options_.record_bytes, kDirectAlign) + kDirectAlign
                                   : RoundUp(options_.record_bytes, 64);
  claim_rows_ = (options_.batch + options_.workers - 1) / options_.workers;
  const size_t slot_bytes = static_cast<size_t>(options_.batch) * row_stride_;
  const uint64_t ring_bytes = static_cast<uint64_t>(slot_bytes) * static_cast<uint64_t>(options_.prefetch + 1);
  const uint64_t ring_limit = options_.ring_limit_bytes ? options_.ring_limit_bytes : PhysicalMemoryBytes() / 4;
  if (ring_bytes > ring_limit) {
    throw InputError("the loader's buffers would take " + FormatBytes(ring_bytes) + " (" +
                     std::to_string(options_.prefetch + 1) + " batches = --prefetch + 1, of " +
                     std::to_string(options_.batch) + " records of " + std::to_string(row_stride_) +
                     " B), more than " + FormatBytes(ring_limit) + (options_.ring_limit_bytes ? "" : ", a quarter of this host's memory") +
                     "; lower --prefetch, --record-bytes or --micro-batch");
  }
  ring_ = std::unique_ptr<void, std::function<void(void*)>>(
      options_.allocator.allocate(slot_bytes * static_cast<size_t>(options_.prefetch + 1)), options_.allocator.release);
  // A stack per CPU, and after them the shared stack that holds every row at the start, lowest-addressed on top.
  const size_t rows = static_cast<size_t>(options_.batch) * static_cast<size_t>(options_.prefetch + 1);
  const size_t cpus = static_cast<size_t>(std::max<long>(1, ::sysconf(_SC_NPROCESSORS_CONF)));
  free_rows_.resize(cpus + 1);
  row_stack_.assign(rows, static_cast<uint32_t>(cpus));
  for (size_t r = rows; r-- > 0;) free_rows_[cpus].push_back(static_cast<uint32_t>(r));
  for (int i = 0; i < options_.prefetch + 1; ++i) {
    slots_.push_back(std::make_unique<Slot>(options_.batch));
    free_slots_.push_back(i);
  }
  slot_of_.assign(slots_.size(), -1);
}

unsigned char* DataLoader::RowBuffer(uint32_t row) const {
  return static_cast<unsigned char*>(ring_.get()) + static_cast<size_t>(row) * row_stride_;
}

// Some filesystems accept O_DIRECT at open and refuse the reads; find out before the workers start.
void DataLoader::ProbeDirectIo() {
  if (!options_.direct_io) return;
  const Source::File& first = source_->files.front();
  if (::pread(first.fd, RowBuffer(0), kDirectAlign, 0) < 0 && errno == EINVAL) {
    throw InputError("--direct-io: the filesystem of '" + options_.dir + "' refuses O_DIRECT reads (" + first.path +
                     ": Invalid argument); run without --direct-io");
  }
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

LoaderPosition DataLoader::PositionOf(uint64_t sequence) const {
  const LoaderPosition start = options_.resume.value_or(LoaderPosition{0, 0, options_.seed});
  const uint64_t absolute = start.epoch * plan_->batches_per_epoch() + start.batch + sequence;
  return LoaderPosition{absolute / plan_->batches_per_epoch(), absolute % plan_->batches_per_epoch(), options_.seed};
}

bool DataLoader::SleepUntil(double deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  // The clock counts int64 nanoseconds: a deadline past ~292 years would overflow into the past (a busy spin).
  constexpr double kLatest_s = 1e9;
  const auto until = std::chrono::steady_clock::time_point(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::min(deadline, kLatest_s))));
  return !work_cv_.wait_until(lock, until, [&] { return stop_; });
}

// Under the lock: the next claim_rows_ rows of the oldest batch not yet claimed, and a row buffer for each from the
// stack of `cpu` (the buffers read into on it last), or, when that is empty, from the shared stack (the rows never
// read into yet), or, when that is empty too, from the fullest other CPU's stack (a worker that moved CPUs).
// A batch's first claim takes a slot for it (claims are handed out in order, so before any other claim of it).
DataLoader::Claim DataLoader::ClaimRows(size_t cpu) {
  const uint64_t batch = static_cast<uint64_t>(options_.batch);
  Claim c;
  c.sequence = next_claim_ / batch;
  c.first_row = static_cast<int>(next_claim_ % batch);
  c.rows = std::min(claim_rows_, options_.batch - c.first_row);
  next_claim_ += static_cast<uint64_t>(c.rows);
  int& slot_index = slot_of_[c.sequence % slot_of_.size()];
  if (c.first_row == 0) {
    slot_index = free_slots_.back();
    free_slots_.pop_back();
    Slot& slot = *slots_[slot_index];
    slot.sequence = c.sequence;
    slot.position = PositionOf(c.sequence);
    slot.done = 0;
    slot.stats = BatchStats{};
    slot.first_start_s = 0;
    slot.last_end_s = 0;
  }
  c.slot = slots_[slot_index].get();
  for (int row = c.first_row; row < c.first_row + c.rows; ++row) {
    std::vector<uint32_t>* from = &free_rows_[cpu];
    if (from->empty()) from = &free_rows_.back();
    if (from->empty()) {
      from = &*std::max_element(free_rows_.begin(), free_rows_.end(),
                                [](const auto& a, const auto& b) { return a.size() < b.size(); });
    }
    c.slot->rows[row] = from->back();
    from->pop_back();
    row_stack_[c.slot->rows[row]] = static_cast<uint32_t>(cpu);
  }
  return c;
}

// Without the lock: works out the claimed rows' samples (a pure function of the slot's position, set under the lock
// by the batch's first claim) and reads them. Returns false when the loader stopped while a read slept or when a read
// failed (the error kept for Next() to rethrow, every waiter woken).
bool DataLoader::FillRows(const Claim& c, BatchStats& part, double& first_start_s, double& last_end_s) {
  const LoaderPosition& position = c.slot->position;
  try {
    for (int row = c.first_row; row < c.first_row + c.rows; ++row) {
      c.slot->samples[row] = plan_->Sample(position.epoch, position.batch, options_.rank, row);
      const SampleRead read = ReadSample(c.slot->samples[row], *c.slot, row);
      if (read.bytes == 0) return false;
      part.bytes_read += read.bytes;
      part.read_s += read.end_s - read.start_s;
      first_start_s = row == c.first_row ? read.start_s : std::min(first_start_s, read.start_s);
      last_end_s = std::max(last_end_s, read.end_s);
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_ && !stop_) error_ = std::current_exception();
    ready_cv_.notify_all();
    work_cv_.notify_all();
    return false;
  }
  return true;
}

// A worker claims rows (ClaimRows), reads them without the lock (FillRows), then adds them to their batch and
// claims its next rows in the same critical section: one lock acquisition per claim. The worker that completes the
// batch Next() waits for wakes the consumer after it has released the lock, so that the consumer does not wake into
// a held mutex and sleep on it a second time; a batch completed ahead of it wakes no one. With more workers than
// CPUs a worker yields its core after each claim it has added: the scheduler then switches workers between claims,
// not in the middle of one, where the worker it took the core from would hold its batch for a whole time slice
// (milliseconds) while the others read ahead to the prefetch limit and sleep (tests/perf/README.md).
void DataLoader::Work() {
  const uint64_t batch = static_cast<uint64_t>(options_.batch);
  bool completed = false;  // this worker completed the batch Next() waits for, and has not woken the consumer yet
  std::unique_lock<std::mutex> lock(mutex_);
  auto unlock = [&] {
    lock.unlock();
    if (completed) ready_cv_.notify_all();
    completed = false;
  };
  for (;;) {
    auto claimable = [&] { return stop_ || error_ || next_claim_ / batch < handed_ + options_.prefetch; };
    if (!claimable()) {
      if (completed) {
        unlock();
        lock.lock();
      }
      const double idle_from = NowSeconds();
      work_cv_.wait(lock, claimable);
      totals_.worker_idle_s += NowSeconds() - idle_from;
      ++totals_.worker_idles;
    }
    if (stop_ || error_) return;
    const Claim claim = ClaimRows(CurrentCpu(free_rows_.size() - 1));
    unlock();
    BatchStats part;
    double first_start_s = 0, last_end_s = 0;
    if (!FillRows(claim, part, first_start_s, last_end_s)) return;
    lock.lock();
    completed = AddRows(claim, part, first_start_s, last_end_s);
    if (consumer_wait_.oversubscribed) {  // let a waiting worker take the core now, while this one holds no rows
      unlock();
      ::sched_yield();
      lock.lock();
    }
  }
}

// Under the lock: a claim's rows and their statistics added to their batch. True when that completed the batch
// Next() waits for (a later one is taken without a wait).
bool DataLoader::AddRows(const Claim& c, const BatchStats& part, double first_start_s, double last_end_s) {
  Slot& slot = *c.slot;
  slot.stats.bytes_read += part.bytes_read;
  slot.stats.read_s += part.read_s;
  slot.first_start_s = slot.done == 0 ? first_start_s : std::min(slot.first_start_s, first_start_s);
  slot.last_end_s = std::max(slot.last_end_s, last_end_s);
  slot.done += c.rows;
  if (slot.done < options_.batch) return false;
  slot.stats.fill_s = slot.last_end_s - slot.first_start_s;
  if (slot.sequence != handed_) return false;
  ready_through_.store(slot.sequence + 1, std::memory_order_release);
  return true;
}

DataLoader::SampleRead DataLoader::ReadSample(uint64_t sample, Slot& slot, int row) {
  const Source& src = *source_;
  const Source::File& file = src.FileOf(sample);
  const uint64_t offset = file.RecordOffset(sample, options_.record_bytes);
  uint64_t read_at = offset, length = options_.record_bytes;
  if (options_.direct_io) {
    read_at = offset / kDirectAlign * kDirectAlign;
    length = RoundUp(offset + options_.record_bytes, kDirectAlign) - read_at;
  }
  SampleRead read;
  read.start_s = NowSeconds();
  if (options_.io_latency_ms > 0 && !SleepUntil(read.start_s + options_.io_latency_ms / 1e3)) return read;
  double paced_until = 0;
  if (options_.io_throttle_MBps > 0) {
    // The rank's reads take consecutive turns on one timeline at the throttle rate (no burst), whichever
    // worker issues them; the read runs during its turn, so slow storage below the limit still shows.
    std::lock_guard<std::mutex> lock(mutex_);
    throttle_free_at_ = std::max(throttle_free_at_, NowSeconds()) + length / (options_.io_throttle_MBps * 1e6);
    paced_until = throttle_free_at_;
  }
  unsigned char* buffer = RowBuffer(slot.rows[row]);
  const uint64_t needed = offset - read_at + options_.record_bytes;  // the aligned tail may run past the end
  uint64_t got = 0;
  if (file.map) {
    got = read_at < file.map_bytes ? std::min(length, file.map_bytes - read_at) : 0;
    std::memcpy(buffer, file.map + read_at, got);
  } else {
    const ReadDescriptor fd(file.fd, file.path, options_.direct_io, options_.dir);
    got = PreadRecord(fd.get(), file.path, options_.direct_io, buffer, read_at, length);
  }
  if (got < needed) {
    throw InputError(file.path + ": truncated at byte " + std::to_string(read_at + got) + ": sample " +
                     std::to_string(sample) + " needs bytes " + std::to_string(offset) + ".." +
                     std::to_string(offset + options_.record_bytes) + " (was the file changed after it was checked?)");
  }
  if (paced_until > 0 && !SleepUntil(paced_until)) return read;
  slot.windows[row] = buffer + (offset - read_at);
  read.bytes = length;
  read.end_s = NowSeconds();
  return read;
}

TokenOrigin DataLoader::OriginOf(uint64_t sample, int token) const {
  const Source::File& file = source_->FileOf(sample);
  return TokenOrigin{file.path, file.RecordOffset(sample, options_.record_bytes) + static_cast<uint64_t>(token) * source_->token_bytes};
}

const LoaderBatch& DataLoader::Next() {
  std::unique_lock<std::mutex> lock(mutex_);
  // The previous batch's rows are free from this call on (the caller was told they stay valid only until then), so
  // that while this call waits, the workers read the next batch into them, still in their caches.
  if (current_slot_ >= 0) ReleaseSlot(current_slot_);
  current_slot_ = -1;
  if (error_) std::rethrow_exception(error_);
  const uint64_t sequence = handed_;
  auto ready = [&](uint64_t s) {
    const int index = slot_of_[s % slot_of_.size()];
    return index >= 0 && slots_[index]->sequence == s && slots_[index]->done == options_.batch;
  };
  int depth = 0;
  for (uint64_t s = sequence; s < sequence + options_.prefetch && ready(s); ++s) ++depth;
  const double wait_start = NowSeconds();
  if (consumer_wait_.poll_s > 0 && !ready(sequence)) {  // poll, without the lock, before sleeping (ready_through_)
    lock.unlock();
    SpinUntil([&] { return ready_through_.load(std::memory_order_acquire) > sequence; }, consumer_wait_.poll_s,
              consumer_wait_.oversubscribed);
    lock.lock();
  }
  ready_cv_.wait(lock, [&] { return error_ || ready(sequence); });
  if (error_) std::rethrow_exception(error_);
  const double wait_s = NowSeconds() - wait_start;
  const int index = slot_of_[sequence % slot_of_.size()];
  Slot& slot = *slots_[index];
  current_slot_ = index;
  slot.stats.wait_s = wait_s;
  slot.stats.queue_depth = depth;
  ++handed_;
  current_.tokens.windows = slot.windows;
  current_.position = slot.position;
  current_.samples = slot.samples;
  current_.stats = slot.stats;
  totals_.batches += 1;
  totals_.bytes_read += slot.stats.bytes_read;
  totals_.reads += static_cast<uint64_t>(options_.batch);
  totals_.read_s += slot.stats.read_s;
  totals_.wait_s += wait_s;
  lock.unlock();
  work_cv_.notify_all();  // a slot is free for the workers again
  return current_;
}

// Under the lock: the slot, and its row buffers, each back to the stack of the CPU it was read into on.
void DataLoader::ReleaseSlot(int index) {
  // In the order they were read: the last one read, likeliest still in the cache, is taken first.
  for (uint32_t row : slots_[index]->rows) free_rows_[row_stack_[row]].push_back(row);
  free_slots_.push_back(index);
}

LoaderPosition DataLoader::Position() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return PositionOf(handed_);
}

LoaderStats DataLoader::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return totals_;
}

}  // namespace tb
