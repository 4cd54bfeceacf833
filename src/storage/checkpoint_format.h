// Internals shared by checkpoint.cc (save) and checkpoint_load.cc: the manifest text format, durable file
// writes, reads with checksums, and the mapping of byte ranges of the concatenated state onto its buffers.
// Not part of the public API (checkpoint.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "checkpoint.h"

namespace tb::checkpoint {

// Version 1 holds one part (data parallel: every rank the same state), version 2 several (pipeline stages, tensor
// parallel ranks). A one-part checkpoint is still written as version 1, so that older builds read it.
inline constexpr int kFormatVersion = 1;
inline constexpr int kPartsFormatVersion = 2;
inline constexpr char kManifestName[] = "manifest.txt";
inline constexpr char kPartialSuffix[] = ".partial";

// "step-00000050", "rank-00003.bin" (one part), "part-00001-slice-00000.bin" (several).
std::string StepDirName(int64_t step);
std::string RankFileName(int rank);
std::string PartFileName(int part, int slice);
// The step of a directory named exactly step-<digits>; -1 for any other name (partial ones included).
int64_t StepOfDirName(const std::string& name);

// First byte of rank r's slice of `total` bytes over n ranks: r*total/n, without overflow.
uint64_t SliceBegin(uint64_t total, int rank, int n);

// One contiguous part of a byte range of the concatenated state that lies in a single buffer.
struct Piece {
  size_t buffer = 0;        // index into the buffers
  uint64_t offset = 0;      // within that buffer
  uint64_t bytes = 0;
  uint64_t position = 0;    // from the start of the range
};
// The pieces of [begin, end) of the buffers laid end to end, in order.
std::vector<Piece> PiecesOf(const std::vector<StateBuffer>& buffers, uint64_t begin, uint64_t end);

struct ManifestFile {
  std::string name;
  uint64_t begin = 0;  // byte range of the concatenated state
  uint64_t end = 0;
  uint32_t crc32c = 0;
};

using BufferSizes = std::vector<std::pair<std::string, uint64_t>>;  // name, bytes, in state order

// The state of the ranks that hold the same part (its replicas), laid end to end after the parts before it.
struct ManifestPart {
  uint64_t begin = 0;  // in the concatenated state of every part
  uint64_t bytes = 0;
  BufferSizes buffers;
  size_t first_file = 0;  // its slices: files[first_file, first_file + file_count), one per replica
  size_t file_count = 0;
};

struct Manifest {
  int64_t step = 0;
  int world_size = 0;
  std::string model_fingerprint;
  uint64_t total_bytes = 0;          // every part's
  std::vector<ManifestPart> parts;   // in part order; one for a data parallel checkpoint (format version 1)
  std::map<std::string, std::string> values;
  std::vector<ManifestFile> files;  // one per rank, part by part, contiguous, covering [0, total_bytes)
};

// Where every rank's slice goes: the parts (buffers left empty) and the files of a manifest, and each rank's file.
struct SliceLayout {
  std::vector<ManifestPart> parts;
  std::vector<ManifestFile> files;  // crc32c left 0
  std::vector<size_t> file_of_rank;
  uint64_t total_bytes = 0;
};
// Rank r holds part part_of_rank[r] (of part_count) of part_bytes[r] bytes; the ranks of one part, in rank order,
// write its consecutive slices. InputError when a part has no rank or its ranks disagree on its size.
SliceLayout LayOutSlices(const std::vector<int>& part_of_rank, const std::vector<uint64_t>& part_bytes,
                         int part_count);

// The manifest text; its last line is the CRC-32C of every byte before it.
std::string FormatManifest(const Manifest& manifest);
// Parses and checks a manifest (format, version, checksum, consistency); InputError naming `path` otherwise.
Manifest ParseManifest(const std::string& text, const std::string& path);

// Where a write came from: host memory, or device memory copied block by block through a staging buffer.
struct Source {
  const void* data = nullptr;
  uint64_t bytes = 0;
  bool on_device = false;
};

struct WriteResult {
  bool ok = false;
  std::string error;  // "cannot write FILE: OS message"
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  double seconds = 0;
  CheckpointStages stages;
  bool verified = false;
};

// What a file write reads, block by block: parts in order, a block never spanning two. Acquire gives a block's
// bytes, readable until Release.
class SliceSource {
 public:
  virtual ~SliceSource() = default;
  virtual size_t parts() const = 0;
  virtual uint64_t part_bytes(size_t part) const = 0;
  virtual const std::byte* Acquire(size_t part, uint64_t offset, uint64_t bytes) = 0;
  virtual void Release() {}
};

// The async writer's view of a rank's slice: the state's own memory until the caller is about to change it
// (Freeze), a snapshot of it after. Device parts are copied into the snapshot before the writer starts (device
// memory is not read from the writer's thread); host parts only when Freeze finds them not yet read, so that a
// writer that keeps ahead of the next optimizer step costs no copy at all.
class DeferredSnapshot final : public SliceSource {
 public:
  struct Part {
    const std::byte* live = nullptr;  // the state's memory; nullptr: already in the snapshot
    uint64_t position = 0;            // in the slice (and the snapshot)
    uint64_t bytes = 0;
  };
  // `snapshot` holds the whole slice's bytes at their positions.
  DeferredSnapshot(std::byte* snapshot, std::vector<Part> parts);

  size_t parts() const override { return parts_.size(); }
  uint64_t part_bytes(size_t part) const override { return parts_[part].bytes; }
  // Writer: live memory before Freeze, the snapshot after (waiting while Freeze copies).
  const std::byte* Acquire(size_t part, uint64_t offset, uint64_t bytes) override;
  void Release() override;
  // Caller, before the state changes: waits for the block being read, then copies every host byte the writer has
  // not acquired into the snapshot. Once it returns the state may change. Idempotent; returns the bytes copied.
  uint64_t Freeze();

 private:
  std::byte* const snapshot_;
  const std::vector<Part> parts_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool frozen_ = false;  // under mutex_, as the three below
  bool copied_ = false;
  bool reading_ = false;
  uint64_t unread_from_ = 0;  // slice position of the first byte not yet acquired from live memory
};

// Writes the sources, in order, to `path` through a DurableFile (durable_file.h) named path.tmp; with
// `verify`, reads the file back and compares its CRC-32C. Never throws (runs on the writer thread); on failure
// nothing is left at path or path.tmp. `staging` (block_bytes) is needed only for device sources.
WriteResult WriteFileDurably(const std::string& path, const std::vector<Source>& sources, const DeviceCopier& copier,
                             std::byte* staging, uint64_t block_bytes, bool verify);
// The same from any SliceSource.
WriteResult WriteFileDurably(const std::string& path, SliceSource& source, uint64_t block_bytes, bool verify);

// Reads exactly `bytes` from `path` into `dst` and returns their CRC-32C; InputError when the file is missing,
// shorter or longer than `bytes`, or unreadable.
uint32_t ReadFileChecked(const std::string& path, std::byte* dst, uint64_t bytes, uint64_t block_bytes);

// Reads a small text file whole; InputError naming `what` when it cannot be read.
std::string ReadTextFile(const std::string& path, const std::string& what);

}  // namespace tb::checkpoint
