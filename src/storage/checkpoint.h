// Checkpoints of a training state (a list of named buffers) held in parts: every rank holds one part, the ranks
// holding the same part (its data parallel replicas) hold the same bytes, and ranks of different parts (pipeline
// stages, tensor parallel ranks) different ones; data parallel alone is one part. Replica r of N writes only its
// slice [r*S/N, (r+1)*S/N) of its part's concatenated bytes, rank 0 adds a text manifest once every part's slices
// are durable, and a checkpoint exists only when its manifest does. Layout, manifest format and guarantees:
// src/README.md ("Checkpoints").
//
// No CUDA here: device memory is read and written through caller-supplied callbacks (DeviceCopier).
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tb {
namespace checkpoint {
struct Piece;
struct SliceLayout;
}  // namespace checkpoint

// One named piece of the training state, e.g. "params" (fp32 master weights), "adam_m", "adam_v". The memory
// must stay valid (and keep its size) for the Checkpointer's lifetime.
struct StateBuffer {
  std::string name;  // no whitespace
  void* data = nullptr;
  uint64_t bytes = 0;
  bool on_device = false;  // read/written through DeviceCopier
};

// Device memory access for buffers with on_device, so that src/ needs no CUDA header. Both copies must be
// complete when they return. The pinned allocator is optional: with it, snapshots and staging buffers are
// page-locked (faster device copies); without it they are ordinary, pre-touched host memory.
struct DeviceCopier {
  std::function<void(void* host_dst, const void* device_src, uint64_t bytes)> to_host;
  std::function<void(void* device_dst, const void* host_src, uint64_t bytes)> to_device;
  std::function<void*(uint64_t bytes)> allocate_pinned;  // both or neither
  std::function<void(void* pointer)> free_pinned;
};

// What a checkpoint records besides the buffer bytes.
struct CheckpointMeta {
  int64_t step = 0;
  std::string model_fingerprint;              // model name and shapes; a resume with another one is refused
  std::map<std::string, std::string> values;  // RNG/data seeds, loader position...: key without whitespace,
                                              // value without line breaks
};

enum class CheckpointMode { kSync, kAsync };
enum class CheckpointErrorPolicy { kFail, kWarn };

// "sync"|"async" and "fail"|"warn"; InputError naming the flag and the accepted values otherwise.
CheckpointMode ParseCheckpointMode(const std::string& text, const std::string& flag = "--checkpoint-mode");
CheckpointErrorPolicy ParseCheckpointErrorPolicy(const std::string& text,
                                                 const std::string& flag = "--on-checkpoint-error");
const char* CheckpointModeName(CheckpointMode mode);

// The part of a checkpoint a rank holds: ranks holding different state (pipeline stages, tensor parallel ranks) hold
// different parts; the ranks holding one part (its data parallel replicas) share its write.
struct CheckpointPart {
  int index = 0;  // 0 .. count-1
  int count = 1;  // the same on every rank
};

struct CheckpointOptions {
  std::string dir;                                                // root: DIR/step-00000050/...
  CheckpointMode mode = CheckpointMode::kSync;
  int keep = 0;                                                   // complete checkpoints kept; 0 = all
  CheckpointErrorPolicy on_error = CheckpointErrorPolicy::kFail;  // a failed write: throw, or warn and go on
  bool verify = false;                  // read each slice back after fsync and compare its CRC-32C
  uint64_t block_bytes = 8ull << 20;    // bytes per write() (and per device copy when staging)
  // Async: the caller calls Checkpointer::BeforeUpdate() before it changes the buffers after a Save(), so that
  // Save() leaves host buffers where they are (the writer reads them in place) instead of copying them.
  bool deferred_snapshot = false;
  CheckpointPart part;                  // this rank's; every part must be held by at least one rank
};

// Where a rank's slice write's time went, by stage: the device-to-host copies of device sources, the CRC-32C, the
// write() calls (page cache, or waiting for the device when its dirty limit is reached), and the commit (fsync of
// what writeback had not yet written, rename, directory sync). They add up to CheckpointEvent::write_s but for
// the clock reads between them.
struct CheckpointStages {
  double copy_s = 0;
  double crc_s = 0;
  double write_calls_s = 0;
  double commit_s = 0;
};

// One checkpoint as one rank saw it. Complete (ok) means the manifest exists: every rank's slice is durable.
struct CheckpointEvent {
  int64_t step = 0;
  int rank = 0;
  CheckpointMode mode = CheckpointMode::kSync;
  uint64_t bytes = 0;       // this rank's slice
  double stall_s = 0;       // time the caller was blocked for this checkpoint: its Save() (the whole write in sync
                            // mode; async: the device buffers' snapshot), async's BeforeUpdate() (what the writer
                            // had not read yet, copied), then any Poll/Drain/next Save waiting for it to complete
  double write_s = 0;       // write + fsync + rename of this rank's slice file
  double write_gbps = 0;    // bytes / write_s / 1e9
  CheckpointStages stages;  // write_s by stage
  uint32_t crc32c = 0;      // of this rank's slice
  bool verified = false;    // read back after fsync with the same CRC-32C (CheckpointOptions::verify)
  bool ok = false;
  std::string error;        // why not ok: one line naming the rank, the file and the OS message
};

// Writes checkpoints of `buffers` under options.dir. Every method except WriterBusy() and events() is
// collective over the communicator: call them on every rank, in the same order.
//
// Sync:  Save() blocks for the write, the fsync and the manifest; the checkpoint is complete when it returns.
// Async: Save() copies this rank's slice into a host snapshot and returns; a background thread writes and fsyncs
//        it while training goes on (and on rank 0 then writes the manifest and prunes). With
//        options.deferred_snapshot, Save() copies only device buffers and the writer reads host buffers where they
//        are: the caller calls BeforeUpdate() before it next changes them (the optimizer step), which copies into
//        the snapshot only what the writer has not read yet (nothing when the writer kept ahead). Save()'s and
//        BeforeUpdate()'s time is the stall. Poll() (once per step) completes the checkpoint without blocking when
//        every rank's writer is done; the next Save() or Drain() waits for whatever is left.
// A failed checkpoint leaves no files and the previous checkpoint intact. With kFail every rank throws the
// same RuntimeError, in async mode at the next Save() or Drain(); with kWarn rank 0 prints a warning, the
// event records the error and training goes on.
class Checkpointer {
 public:
  // Collective. Creates options.dir (InputError when it cannot), duplicates `comm`, lays the parts' slices out
  // (InputError when a part has no rank or its ranks hold other buffers), allocates the snapshot (async) or a
  // staging buffer (device buffers), so that no allocation happens at a checkpoint.
  Checkpointer(MPI_Comm comm, CheckpointOptions options, std::vector<StateBuffer> buffers, DeviceCopier copier = {});
  // Waits for a running writer thread; a checkpoint not yet completed by Save/Poll/Drain stays incomplete.
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Checkpoints the buffers' current contents as meta.step. Collective.
  void Save(const CheckpointMeta& meta);
  // Async with deferred_snapshot: call before the buffers change (the optimizer step) while a checkpoint may be
  // in flight; until then its writer may read them. Waits for the block being read and copies what is left into the snapshot. Not
  // collective (no MPI); a no-op in sync mode and when nothing is in flight.
  void BeforeUpdate();
  // Async: advances the checkpoint in flight without blocking on other ranks. Cheap; call once per step on
  // every rank (or not at all: Save/Drain complete it anyway). Collective in the non-blocking sense.
  void Poll();
  // Completes the checkpoint in flight, if any (call before the end of training). Collective.
  void Drain();

  // True while this rank's background thread works: writing its slice, and on rank 0 also the manifest and the
  // pruning (to measure how much slower steps run meanwhile).
  bool WriterBusy() const { return writer_busy_.load(std::memory_order_acquire); }
  // Completed checkpoints (ok or failed), oldest first.
  const std::vector<CheckpointEvent>& events() const { return events_; }
  uint64_t state_bytes() const { return checkpoint_bytes_; }  // every part's
  uint64_t slice_bytes() const { return slice_end_ - slice_begin_; }

 private:
  struct Pending;
  // Moves the checkpoint in flight on by as much as possible; with `block`, to its end. True when it ended.
  bool Advance(bool block);
  // Rank 0, once every slice status is in: manifest, publication and pruning, or removal of the partial files.
  // No MPI (it runs on the background thread in async mode).
  void Conclude(Pending& pending);
  void Publish(const Pending& pending);
  void Prune(int64_t newest_step);
  void Finish(Pending& pending);
  void ThrowIfFailed();
  void CloseStallClock(Pending& pending);
  void StartDeferredWrite(Pending& pending, const std::string& file, const std::vector<checkpoint::Piece>& pieces);
  // Collective: where every rank's slice goes (every rank) and which buffers each part holds (rank 0).
  void LayOutParts(MPI_Comm comm);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  CheckpointOptions options_;
  std::vector<StateBuffer> buffers_;
  DeviceCopier copier_;
  uint64_t total_bytes_ = 0;       // this rank's state (its part)
  uint64_t checkpoint_bytes_ = 0;  // every part's
  std::unique_ptr<checkpoint::SliceLayout> layout_;
  uint64_t slice_begin_ = 0;       // in this rank's state
  uint64_t slice_end_ = 0;
  struct HostMemory;
  std::unique_ptr<HostMemory> snapshot_;  // async: this rank's slice
  std::unique_ptr<HostMemory> staging_;   // sync with device buffers: one block
  std::unique_ptr<Pending> pending_;
  std::atomic<bool> writer_busy_{false};
  std::vector<CheckpointEvent> events_;
  std::string failure_;  // kFail: a failed checkpoint's message, thrown at the next Save/Drain
};

// Option-time checks, on one rank, no MPI (the CLI runs them in its agreed setup so that a bad path is
// reported before any rank starts work).
// --checkpoint-dir: creates the directory if needed; InputError naming `flag` when it cannot or is not writable.
void PrepareCheckpointDir(const std::string& dir, const std::string& flag = "--checkpoint-dir");
// --resume: `path` is a checkpoint (a directory with manifest.txt) or a root holding step-N checkpoints, of which
// the newest complete one is taken. Returns that checkpoint's directory; InputError when there is none.
std::string ResolveCheckpoint(const std::string& path, const std::string& flag = "--resume");

// What the manifest of the checkpoint at `path` (see ResolveCheckpoint) records: step, model fingerprint and
// values, for option-time checks on one rank, before any rank loads it. InputError for a missing or corrupt
// manifest.
CheckpointMeta ReadCheckpointMeta(const std::string& path, const std::string& flag = "--resume");

struct LoadedCheckpoint {
  std::string dir;          // the checkpoint read (path resolved)
  CheckpointMeta meta;
  int saved_world_size = 0;
  uint64_t bytes = 0;       // this rank's part
  uint64_t read_bytes = 0;  // read from files by this rank
  double seconds = 0;       // whole load on this rank
};

inline constexpr uint64_t kCheckpointGatherChunkBytes = 64ull << 20;

// Restores `buffers` (same names and sizes as saved in part `part`) from the checkpoint at `path` (see
// ResolveCheckpoint), written by any number of replicas of each part. Collective over `comm`. Each rank reads and
// verifies (size, CRC-32C) a contiguous run of its part's slice files, then the ranks holding that part all-gather
// the bytes in rounds of at most `gather_chunk_bytes` per rank. Every problem (missing path or manifest, corrupt
// manifest, another model, another count of parts, other buffers, a missing, truncated or corrupt slice) is an
// InputError with one line, thrown on every rank.
LoadedCheckpoint LoadCheckpoint(MPI_Comm comm, const std::string& path, const std::vector<StateBuffer>& buffers,
                                const std::string& model_fingerprint, const DeviceCopier& copier = {},
                                uint64_t gather_chunk_bytes = kCheckpointGatherChunkBytes, CheckpointPart part = {});

}  // namespace tb
