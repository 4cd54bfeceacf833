// Saving checkpoints: slices, the manifest, publication and pruning, sync and async modes, agreement on failure.
#include "checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>
#include <thread>

#include "checkpoint_format.h"
#include "clock.h"
#include "durable_file.h"
#include "error.h"
#include "mpi_util.h"
#include "log.h"
#include "units.h"

namespace tb {

namespace fs = std::filesystem;
using checkpoint::Manifest;
using checkpoint::Source;
using checkpoint::WriteResult;

namespace {

constexpr size_t kStatusMessageBytes = 480;
constexpr uint64_t kPageBytes = 4096;
constexpr std::chrono::microseconds kLongestPause{1000};

// One rank's slice outcome (gathered to rank 0), or the checkpoint's outcome (broadcast by rank 0). A plain
// fixed-size record, so that it travels as MPI_BYTE in one non-blocking collective.
struct Status {
  int32_t failed = 0;
  uint32_t crc32c = 0;
  char message[kStatusMessageBytes] = {};
};

void SetMessage(Status& status, const std::string& message) {
  std::strncpy(status.message, message.c_str(), kStatusMessageBytes - 1);
}

bool HasLineBreak(const std::string& text) { return text.find_first_of("\r\n") != std::string::npos; }

bool IsName(const std::string& text) {
  return !text.empty() && text.find_first_of(" \t\r\n") == std::string::npos;
}

void CheckMeta(const CheckpointMeta& meta) {
  if (meta.step < 0) throw InputError("checkpoint step " + std::to_string(meta.step) + " is negative");
  if (HasLineBreak(meta.model_fingerprint)) throw InputError("checkpoint model fingerprint holds a line break");
  for (const auto& [key, value] : meta.values) {
    if (!IsName(key)) throw InputError("checkpoint metadata key '" + key + "' is empty or holds whitespace");
    if (HasLineBreak(value)) throw InputError("checkpoint metadata value of '" + key + "' holds a line break");
  }
}

// Waits for (block) or tests a request. True when it is complete. The wait sleeps between tests (50 us, doubling
// to 1 ms) rather than spin in MPI_Wait: a rank whose slice is written waits for the slowest rank's write and
// fsync, and its core is better left to that rank (where ranks share cores) and to the kernel's writeback than
// burnt polling. It adds at most 1 ms to a wait that lasts as long as a storage write.
bool Complete(MPI_Request& request, bool block) {
  int done = 0;
  TB_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
  for (auto pause = std::chrono::microseconds(50); block && !done; pause = std::min(2 * pause, kLongestPause)) {
    std::this_thread::sleep_for(pause);
    TB_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
  }
  return done != 0;
}

// Renames `from` to `to`, then removes it: a directory that disappears by rename can never be seen half deleted.
void RemoveDirectoryAtomically(const fs::path& from, const std::string& suffix) {
  const fs::path doomed = from.string() + suffix;
  std::error_code ec;
  fs::remove_all(doomed, ec);
  fs::rename(from, doomed, ec);
  if (ec) throw RuntimeError("cannot remove " + from.string() + ": " + ec.message());
  fs::remove_all(doomed, ec);
  if (ec) throw RuntimeError("cannot remove " + doomed.string() + ": " + ec.message());
}

}  // namespace

CheckpointMode ParseCheckpointMode(const std::string& text, const std::string& flag) {
  if (text == "sync") return CheckpointMode::kSync;
  if (text == "async") return CheckpointMode::kAsync;
  throw InputError(flag + " '" + text + "': expected sync|async");
}

CheckpointErrorPolicy ParseCheckpointErrorPolicy(const std::string& text, const std::string& flag) {
  if (text == "fail") return CheckpointErrorPolicy::kFail;
  if (text == "warn") return CheckpointErrorPolicy::kWarn;
  throw InputError(flag + " '" + text + "': expected fail|warn");
}

const char* CheckpointModeName(CheckpointMode mode) { return mode == CheckpointMode::kSync ? "sync" : "async"; }

void PrepareCheckpointDir(const std::string& dir, const std::string& flag) {
  if (dir.empty()) throw InputError(flag + ": the path is empty");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(flag + " " + dir + ": cannot create the directory: " + ec.message());
  if (!fs::is_directory(dir, ec)) throw InputError(flag + " " + dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw InputError(flag + " " + dir + " is not writable: " + OsMessage(errno));
  }
}

// Host memory for snapshots and staging: pinned through the caller's allocator when there is one, else
// page-aligned and touched now, so that the first checkpoint does not pay for page faults in its stall.
struct Checkpointer::HostMemory {
  HostMemory(uint64_t bytes, const DeviceCopier& copier) : free_pinned(copier.free_pinned) {
    const uint64_t rounded = std::max<uint64_t>(kPageBytes, (bytes + kPageBytes - 1) / kPageBytes * kPageBytes);
    if (copier.allocate_pinned) {
      data = static_cast<std::byte*>(copier.allocate_pinned(rounded));
    } else {
      data = static_cast<std::byte*>(std::aligned_alloc(kPageBytes, rounded));
      if (data) std::memset(data, 0, rounded);
    }
    if (!data) throw RuntimeError("cannot allocate " + FormatBytes(rounded) + " of host memory for checkpoints");
  }
  ~HostMemory() {
    if (free_pinned) {
      free_pinned(data);
    } else {
      std::free(data);
    }
  }
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  std::byte* data = nullptr;
  std::function<void(void*)> free_pinned;
};

// One checkpoint from its Save() to the end of the agreement on its outcome.
struct Checkpointer::Pending {
  enum class Stage { kWriting, kGathering, kConcluding, kAnnouncing };
  Stage stage = Stage::kWriting;
  int64_t step = 0;
  CheckpointMeta meta;
  std::string partial_dir;
  std::string final_dir;
  CheckpointEvent event;
  WriteResult result;        // written by the writer thread; read only after join
  std::thread writer;        // async: this rank's slice write, then on rank 0 the conclusion
  std::unique_ptr<checkpoint::DeferredSnapshot> deferred;  // async: what the writer reads
  double stall_since = 0;    // > 0 while the caller is blocked in one of our calls for this checkpoint
  Status mine;
  std::vector<Status> gathered;  // rank 0
  Status outcome;
  MPI_Request request = MPI_REQUEST_NULL;
};

Checkpointer::Checkpointer(MPI_Comm comm, CheckpointOptions options, std::vector<StateBuffer> buffers,
                           DeviceCopier copier)
    : options_(std::move(options)), buffers_(std::move(buffers)), copier_(std::move(copier)) {
  TB_CHECK_MPI(MPI_Comm_rank(comm, &rank_));
  TB_CHECK_MPI(MPI_Comm_size(comm, &size_));
  AgreeOnStep(comm, [&] {
    if (options_.keep < 0) throw InputError("--checkpoint-keep " + std::to_string(options_.keep) + ": expected >= 0");
    if (options_.block_bytes == 0) throw InputError("checkpoint block size must be positive");
    if (static_cast<bool>(copier_.allocate_pinned) != static_cast<bool>(copier_.free_pinned)) {
      throw InputError("checkpoint pinned allocator: give both allocate_pinned and free_pinned, or neither");
    }
    std::set<std::string> names;
    for (const StateBuffer& buffer : buffers_) {
      if (!IsName(buffer.name) || !names.insert(buffer.name).second) {
        throw InputError("checkpoint buffer name '" + buffer.name + "' is empty, holds whitespace or is repeated");
      }
      if (buffer.on_device && (!copier_.to_host || !copier_.to_device)) {
        throw InputError("checkpoint buffer '" + buffer.name + "' is in device memory but no device copier was given");
      }
    }
    if (rank_ == 0) PrepareCheckpointDir(options_.dir);
  });
  for (const StateBuffer& buffer : buffers_) total_bytes_ += buffer.bytes;
  LayOutParts(comm);
  TB_CHECK_MPI(MPI_Comm_dup(comm, &comm_));
  if (options_.mode == CheckpointMode::kAsync) {
    snapshot_ = std::make_unique<HostMemory>(slice_bytes(), copier_);
  } else if (std::any_of(buffers_.begin(), buffers_.end(), [](const StateBuffer& b) { return b.on_device; })) {
    staging_ = std::make_unique<HostMemory>(options_.block_bytes, copier_);
  }
}

void Checkpointer::LayOutParts(MPI_Comm comm) {
  struct Held {
    int32_t part, count;
    uint64_t bytes;
  };
  const Held mine{options_.part.index, options_.part.count, total_bytes_};
  std::vector<Held> held(static_cast<size_t>(size_));
  TB_CHECK_MPI(MPI_Allgather(&mine, sizeof(Held), MPI_BYTE, held.data(), sizeof(Held), MPI_BYTE, comm));
  std::vector<std::string> names;
  for (const StateBuffer& buffer : buffers_) names.push_back(buffer.name);
  std::vector<uint64_t> bytes;
  for (const StateBuffer& buffer : buffers_) bytes.push_back(buffer.bytes);
  const std::vector<std::vector<std::string>> all_names = GatherStringLists(comm, names);
  const std::vector<std::vector<uint64_t>> all_bytes = GatherRecords(comm, bytes);
  layout_ = std::make_unique<checkpoint::SliceLayout>();
  AgreeOnStep(comm, [&] {
    std::vector<int> part_of_rank;
    std::vector<uint64_t> part_bytes;
    for (const Held& h : held) {
      if (h.count != options_.part.count) {
        throw InputError("checkpoint: the ranks disagree on the number of parts (" + std::to_string(h.count) + " and " +
                         std::to_string(options_.part.count) + ")");
      }
      part_of_rank.push_back(h.part);
      part_bytes.push_back(h.bytes);
    }
    *layout_ = checkpoint::LayOutSlices(part_of_rank, part_bytes, options_.part.count);
    std::vector<bool> described(layout_->parts.size(), false);
    for (size_t r = 0; r < all_names.size(); ++r) {  // rank 0: the buffers each part holds, the same on its replicas
      checkpoint::BufferSizes buffers;
      for (size_t i = 0; i < all_names[r].size(); ++i) buffers.emplace_back(all_names[r][i], all_bytes[r][i]);
      checkpoint::ManifestPart& part = layout_->parts[static_cast<size_t>(part_of_rank[r])];
      if (described[static_cast<size_t>(part_of_rank[r])] && part.buffers != buffers) {
        throw InputError("checkpoint: rank " + std::to_string(r) + " holds part " + std::to_string(part_of_rank[r]) +
                         " with other buffers than the part's first rank");
      }
      part.buffers = std::move(buffers);
      described[static_cast<size_t>(part_of_rank[r])] = true;
    }
  });
  const checkpoint::ManifestFile& file = layout_->files[layout_->file_of_rank[static_cast<size_t>(rank_)]];
  const uint64_t part_begin = layout_->parts[static_cast<size_t>(options_.part.index)].begin;
  slice_begin_ = file.begin - part_begin;
  slice_end_ = file.end - part_begin;
  checkpoint_bytes_ = layout_->total_bytes;
}

Checkpointer::~Checkpointer() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
  // MPI may still write into the buffers of an unfinished non-blocking collective (we are unwinding from an
  // error): leave them allocated rather than free memory under it.
  if (pending_ && pending_->request != MPI_REQUEST_NULL) static_cast<void>(pending_.release());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void Checkpointer::Save(const CheckpointMeta& meta) {
  if (pending_) {
    // The previous checkpoint's writer, and the other ranks', must be done first: that wait is its stall.
    pending_->stall_since = NowSeconds();
    Advance(/*block=*/true);
  }
  ThrowIfFailed();

  auto pending = std::make_unique<Pending>();
  Pending& p = *pending;
  p.stall_since = NowSeconds();
  p.step = meta.step;
  p.meta = meta;
  p.final_dir = (fs::path(options_.dir) / checkpoint::StepDirName(meta.step)).string();
  p.partial_dir = p.final_dir + checkpoint::kPartialSuffix;
  p.event.step = meta.step;
  p.event.rank = rank_;
  p.event.mode = options_.mode;
  p.event.bytes = slice_bytes();

  // Rank 0 starts from an empty partial directory (an interrupted run may have left one) before anyone writes.
  try {
    AgreeOnStep(comm_, [&] {
      CheckMeta(meta);
      if (rank_ != 0) return;
      std::error_code ec;
      fs::remove_all(p.partial_dir, ec);
      if (!ec) fs::create_directories(p.partial_dir, ec);
      if (ec) throw RuntimeError("cannot create " + p.partial_dir + ": " + ec.message());
    });
  } catch (const InputError&) {
    throw;  // bad metadata: the caller's mistake, not a storage failure
  } catch (const RuntimeError& e) {
    p.result.error = e.what();  // storage: a failed checkpoint, handled by the error policy below
  }

  const std::string& name = layout_->files[layout_->file_of_rank[static_cast<size_t>(rank_)]].name;
  const std::string file = (fs::path(p.partial_dir) / name).string();
  const std::vector<checkpoint::Piece> pieces = checkpoint::PiecesOf(buffers_, slice_begin_, slice_end_);
  const bool started = p.result.error.empty();
  if (started && options_.mode == CheckpointMode::kSync) {
    std::vector<Source> sources;
    for (const checkpoint::Piece& piece : pieces) {
      const StateBuffer& buffer = buffers_[piece.buffer];
      sources.push_back({static_cast<const std::byte*>(buffer.data) + piece.offset, piece.bytes, buffer.on_device});
    }
    p.result = checkpoint::WriteFileDurably(file, sources, copier_, staging_ ? staging_->data : nullptr,
                                            options_.block_bytes, options_.verify);
  } else if (started) {
    StartDeferredWrite(p, file, pieces);
  }
  pending_ = std::move(pending);
  if (options_.mode == CheckpointMode::kSync) {
    Advance(/*block=*/true);
  } else {
    CloseStallClock(*pending_);
  }
  ThrowIfFailed();
}

// Async: device pieces copied into the snapshot now, and host pieces too unless the snapshot is deferred: then the
// writer reads them from the state itself until BeforeUpdate freezes what it has not read yet.
void Checkpointer::StartDeferredWrite(Pending& p, const std::string& file, const std::vector<checkpoint::Piece>& pieces) {
  std::vector<checkpoint::DeferredSnapshot::Part> parts;
  try {
    for (const checkpoint::Piece& piece : pieces) {
      const StateBuffer& buffer = buffers_[piece.buffer];
      const std::byte* from = static_cast<const std::byte*>(buffer.data) + piece.offset;
      const bool deferred = options_.deferred_snapshot && !buffer.on_device;
      if (buffer.on_device) {
        copier_.to_host(snapshot_->data + piece.position, from, piece.bytes);
      } else if (!deferred) {
        std::memcpy(snapshot_->data + piece.position, from, piece.bytes);
      }
      parts.push_back({deferred ? from : nullptr, piece.position, piece.bytes});
    }
  } catch (const std::exception& e) {
    p.result.error = std::string("cannot snapshot the state for ") + file + ": " + e.what();
    return;
  }
  p.deferred = std::make_unique<checkpoint::DeferredSnapshot>(snapshot_->data, std::move(parts));
  writer_busy_.store(true, std::memory_order_release);
  p.writer = std::thread([this, &p, file] {
    p.result = checkpoint::WriteFileDurably(file, *p.deferred, options_.block_bytes, options_.verify);
    writer_busy_.store(false, std::memory_order_release);
  });
}

void Checkpointer::BeforeUpdate() {
  if (!pending_ || !pending_->deferred) return;
  pending_->stall_since = NowSeconds();
  pending_->deferred->Freeze();
  CloseStallClock(*pending_);
}

void Checkpointer::Poll() {
  if (!pending_) return;
  pending_->stall_since = NowSeconds();
  if (!Advance(/*block=*/false)) CloseStallClock(*pending_);
}

void Checkpointer::Drain() {
  if (pending_) {
    pending_->stall_since = NowSeconds();
    Advance(/*block=*/true);
  }
  ThrowIfFailed();
}

bool Checkpointer::Advance(bool block) {
  Pending& p = *pending_;
  using Stage = Pending::Stage;
  if (p.stage == Stage::kWriting) {
    if (p.writer.joinable()) {
      if (!block && WriterBusy()) return false;
      p.writer.join();
    }
    p.event.write_s = p.result.seconds;
    p.event.stages = p.result.stages;
    p.event.write_gbps = p.result.seconds > 0 ? static_cast<double>(p.result.bytes) / p.result.seconds / 1e9 : 0;
    p.event.crc32c = p.result.crc32c;
    p.event.verified = p.result.verified;
    p.mine.failed = p.result.ok ? 0 : 1;
    p.mine.crc32c = p.result.crc32c;
    SetMessage(p.mine, p.result.error);
    p.gathered.resize(rank_ == 0 ? size_ : 0);
    TB_CHECK_MPI(MPI_Igather(&p.mine, sizeof(Status), MPI_BYTE, p.gathered.data(), sizeof(Status), MPI_BYTE, 0,
                             comm_, &p.request));
    p.stage = Stage::kGathering;
  }
  if (p.stage == Stage::kGathering) {
    if (!Complete(p.request, block)) return false;
    if (rank_ == 0 && options_.mode == CheckpointMode::kAsync) {
      // The manifest's fsync, the renames and the pruning of old checkpoints (deleting gigabytes) would stall
      // rank 0's training loop, and with it every rank: the background thread does them too.
      writer_busy_.store(true, std::memory_order_release);
      p.writer = std::thread([this, &p] {
        Conclude(p);
        writer_busy_.store(false, std::memory_order_release);
      });
    } else if (rank_ == 0) {
      Conclude(p);
    }
    p.stage = Stage::kConcluding;
  }
  if (p.stage == Stage::kConcluding) {
    if (p.writer.joinable()) {
      if (!block && WriterBusy()) return false;
      p.writer.join();
    }
    TB_CHECK_MPI(MPI_Ibcast(&p.outcome, sizeof(Status), MPI_BYTE, 0, comm_, &p.request));
    p.stage = Stage::kAnnouncing;
  }
  if (!Complete(p.request, block)) return false;
  Finish(p);
  pending_.reset();
  return true;
}

void Checkpointer::Conclude(Pending& p) {
  const std::string failed_at = "checkpoint at step " + std::to_string(p.step) + " failed on rank ";
  for (int r = 0; r < size_ && !p.outcome.failed; ++r) {
    if (p.gathered[r].failed) {
      p.outcome.failed = 1;
      SetMessage(p.outcome, failed_at + std::to_string(r) + ": " + p.gathered[r].message);
    }
  }
  if (!p.outcome.failed) {
    try {
      Manifest manifest;
      manifest.step = p.step;
      manifest.world_size = size_;
      manifest.model_fingerprint = p.meta.model_fingerprint;
      manifest.total_bytes = layout_->total_bytes;
      manifest.parts = layout_->parts;
      manifest.values = p.meta.values;
      manifest.files = layout_->files;
      for (int r = 0; r < size_; ++r) manifest.files[layout_->file_of_rank[r]].crc32c = p.gathered[r].crc32c;
      const std::string text = checkpoint::FormatManifest(manifest);
      const WriteResult written = checkpoint::WriteFileDurably(
          (fs::path(p.partial_dir) / checkpoint::kManifestName).string(), {Source{text.data(), text.size(), false}},
          copier_, nullptr, options_.block_bytes, false);
      if (!written.ok) throw RuntimeError(written.error);
      Publish(p);
    } catch (const std::exception& e) {
      p.outcome.failed = 1;
      SetMessage(p.outcome, failed_at + "0: " + e.what());
    }
  }
  if (p.outcome.failed) {
    std::error_code ec;
    fs::remove_all(p.partial_dir, ec);
    if (ec) Warn("cannot remove the failed checkpoint's files in " + p.partial_dir + ": " + ec.message());
    return;
  }
  Prune(p.step);
}

void Checkpointer::Publish(const Pending& p) {
  // The partial directory, manifest included, appears under its final name in one rename. A complete
  // checkpoint of the same step from an earlier run is moved aside first and removed only afterwards.
  const std::string replaced = p.final_dir + ".replaced";
  std::error_code ec;
  const bool had_old = fs::exists(p.final_dir, ec);
  if (had_old) {
    fs::remove_all(replaced, ec);
    fs::rename(p.final_dir, replaced, ec);
    if (ec) throw RuntimeError("cannot move the earlier " + p.final_dir + " aside: " + ec.message());
  }
  fs::rename(p.partial_dir, p.final_dir, ec);
  if (ec) {
    std::error_code restore;
    if (had_old) fs::rename(replaced, p.final_dir, restore);
    throw RuntimeError("cannot rename " + p.partial_dir + " to " + p.final_dir + ": " + ec.message());
  }
  SyncDirectory(options_.dir);
  if (had_old) fs::remove_all(replaced, ec);
}

void Checkpointer::Prune(int64_t newest) {
  // Older complete checkpoints beyond keep, and what interrupted runs left behind (step-N.partial, .replaced,
  // .pruned) for steps before the new one. Newer steps (a later run in the same directory) are left alone.
  std::vector<std::pair<int64_t, fs::path>> older;
  std::vector<fs::path> leftovers;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = entry.path().filename().string();
    const int64_t step = checkpoint::StepOfDirName(name);
    if (step >= 0) {
      if (step < newest && fs::exists(entry.path() / checkpoint::kManifestName)) older.emplace_back(step, entry.path());
      continue;
    }
    const size_t dot = name.find('.');
    const int64_t leftover_step = dot == std::string::npos ? -1 : checkpoint::StepOfDirName(name.substr(0, dot));
    if (leftover_step >= 0 && leftover_step < newest) leftovers.push_back(entry.path());
  }
  if (ec) {
    Warn("cannot list " + options_.dir + " to prune old checkpoints: " + ec.message());
    return;
  }
  std::sort(older.rbegin(), older.rend());
  try {
    for (const fs::path& leftover : leftovers) {
      fs::remove_all(leftover, ec);
      if (ec) throw RuntimeError("cannot remove " + leftover.string() + ": " + ec.message());
    }
    const size_t keep_older = options_.keep > 0 ? static_cast<size_t>(options_.keep - 1) : older.size();
    for (size_t i = keep_older; i < older.size(); ++i) RemoveDirectoryAtomically(older[i].second, ".pruned");
    SyncDirectory(options_.dir);
  } catch (const std::exception& e) {
    Warn(std::string("pruning old checkpoints: ") + e.what());
  }
}

void Checkpointer::Finish(Pending& p) {
  CloseStallClock(p);
  p.event.ok = p.outcome.failed == 0;
  if (!p.event.ok) {
    p.event.error = p.outcome.message;
    if (options_.on_error == CheckpointErrorPolicy::kFail) {
      failure_ = p.event.error;
    } else if (rank_ == 0) {
      Warn(p.event.error + "; the previous checkpoint is kept, training goes on");
    }
  }
  events_.push_back(p.event);
}

void Checkpointer::ThrowIfFailed() {
  if (failure_.empty()) return;
  std::string message = std::move(failure_);
  failure_.clear();
  throw RuntimeError(message);
}

void Checkpointer::CloseStallClock(Pending& p) {
  if (p.stall_since <= 0) return;
  p.event.stall_s += NowSeconds() - p.stall_since;
  p.stall_since = 0;
}

}  // namespace tb
