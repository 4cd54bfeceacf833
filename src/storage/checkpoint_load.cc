// Resuming: finding the checkpoint, verifying it, and rebuilding the whole state on every rank.
#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "checkpoint.h"
#include "checkpoint_format.h"
#include "clock.h"
#include "error.h"
#include "mpi_util.h"

namespace tb {

namespace fs = std::filesystem;
using checkpoint::Manifest;

namespace {

constexpr uint64_t kReadBlockBytes = 8ull << 20;
// Bytes of one all-gather round over all ranks: MPI counts and displacements are ints.
constexpr uint64_t kMaxRoundBytes = 1ull << 30;

std::string DescribeBuffers(const checkpoint::BufferSizes& buffers) {
  std::string text;
  for (const auto& [name, bytes] : buffers) {
    if (!text.empty()) text += ", ";
    text += name + " " + std::to_string(bytes) + " B";
  }
  return text.empty() ? "none" : text;
}

std::string Hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

}  // namespace

std::string ResolveCheckpoint(const std::string& path, const std::string& flag) {
  if (path.empty()) throw InputError(flag + ": the path is empty");
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) throw InputError(flag + " " + path + ": no such directory");
  if (!fs::is_directory(status)) throw InputError(flag + " " + path + " is not a directory");
  if (fs::exists(fs::path(path) / checkpoint::kManifestName, ec)) return path;
  fs::path normal = fs::path(path).lexically_normal();
  if (normal.filename().empty()) normal = normal.parent_path();  // "root/step-5/"
  if (normal.filename().string().rfind("step-", 0) == 0) {
    throw InputError(flag + " " + path + " holds no " + checkpoint::kManifestName + ": an incomplete checkpoint");
  }
  int64_t newest = -1;
  std::string newest_dir;
  for (const fs::directory_entry& entry : fs::directory_iterator(path, ec)) {
    const int64_t step = checkpoint::StepOfDirName(entry.path().filename().string());
    if (step > newest && fs::exists(entry.path() / checkpoint::kManifestName)) {
      newest = step;
      newest_dir = entry.path().string();
    }
  }
  if (ec) throw InputError(flag + " " + path + " cannot be listed: " + ec.message());
  if (newest < 0) {
    throw InputError(flag + " " + path + " holds no complete checkpoint (no step-N/" + checkpoint::kManifestName + ")");
  }
  return newest_dir;
}

CheckpointMeta ReadCheckpointMeta(const std::string& path, const std::string& flag) {
  const std::string manifest_path = (fs::path(ResolveCheckpoint(path, flag)) / checkpoint::kManifestName).string();
  const Manifest manifest =
      checkpoint::ParseManifest(checkpoint::ReadTextFile(manifest_path, "checkpoint manifest"), manifest_path);
  return {manifest.step, manifest.model_fingerprint, manifest.values};
}

namespace {

std::string Parts(size_t count) { return std::to_string(count) + (count == 1 ? " part" : " parts"); }

// That the checkpoint holds `part` as this rank holds it: as many parts, and this rank's part with its buffers.
void CheckPart(const Manifest& manifest, const std::string& dir, CheckpointPart part,
               const checkpoint::BufferSizes& ours) {
  const size_t count = manifest.parts.size();
  if (count != static_cast<size_t>(part.count)) {
    throw InputError("checkpoint " + dir + " holds the state in " + Parts(count) + ", this run in " +
                     Parts(static_cast<size_t>(part.count)) +
                     " (one per pipeline stage and tensor parallel rank): resume with the same layout");
  }
  const checkpoint::BufferSizes& saved = manifest.parts[static_cast<size_t>(part.index)].buffers;
  if (ours == saved) return;
  const std::string which = count == 1 ? "" : " part " + std::to_string(part.index) + " of " + Parts(count);
  throw InputError("checkpoint " + dir + which + " holds " + DescribeBuffers(saved) + "; this run has " +
                   DescribeBuffers(ours));
}

// Rank 0 finds the checkpoint and reads its manifest; every rank then parses the same text and checks that it
// holds this run's model and this rank's part and buffers. Collective; sets loaded.dir.
Manifest ReadAgreedManifest(MPI_Comm comm, int rank, const std::string& path, const std::vector<StateBuffer>& buffers,
                            const std::string& model_fingerprint, const DeviceCopier& copier,
                            uint64_t gather_chunk_bytes, CheckpointPart part, LoadedCheckpoint& loaded) {
  std::string text;
  AgreeOnStep(comm, [&] {
    if (gather_chunk_bytes == 0) throw InputError("checkpoint gather chunk size must be positive");
    if (part.count < 1 || part.index < 0 || part.index >= part.count) {
      throw InputError("checkpoint part " + std::to_string(part.index) + " of " + std::to_string(part.count) +
                       " does not exist");
    }
    if (rank != 0) return;
    loaded.dir = ResolveCheckpoint(path);
    text = checkpoint::ReadTextFile((fs::path(loaded.dir) / checkpoint::kManifestName).string(), "checkpoint manifest");
  });
  BroadcastString(comm, loaded.dir, 0);
  BroadcastString(comm, text, 0);
  Manifest manifest;
  AgreeOnStep(comm, [&] {
    manifest = checkpoint::ParseManifest(text, (fs::path(loaded.dir) / checkpoint::kManifestName).string());
    if (manifest.model_fingerprint != model_fingerprint) {
      throw InputError("checkpoint " + loaded.dir + " was written for model '" + manifest.model_fingerprint +
                       "', this run's model is '" + model_fingerprint + "'");
    }
    checkpoint::BufferSizes ours;
    for (const StateBuffer& buffer : buffers) {
      ours.emplace_back(buffer.name, buffer.bytes);
      if (buffer.on_device && !copier.to_device) {
        throw InputError("checkpoint buffer '" + buffer.name + "' is in device memory but no device copier was given");
      }
    }
    CheckPart(manifest, loaded.dir, part, ours);
  });
  return manifest;
}

// The ranks holding the same part as this one (its replicas), which read its files and gather its bytes.
class Replicas {
 public:
  Replicas(MPI_Comm comm, int part, int rank) {
    TB_CHECK_MPI(MPI_Comm_split(comm, part, rank, &comm_));
    TB_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    TB_CHECK_MPI(MPI_Comm_size(comm_, &size_));
  }
  ~Replicas() { MPI_Comm_free(&comm_); }
  Replicas(const Replicas&) = delete;
  Replicas& operator=(const Replicas&) = delete;
  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

// A part's slice files, their byte ranges counted from the part's start (its buffers' bytes laid end to end).
std::vector<checkpoint::ManifestFile> FilesOf(const Manifest& manifest, const checkpoint::ManifestPart& part) {
  std::vector<checkpoint::ManifestFile> files(manifest.files.begin() + static_cast<ptrdiff_t>(part.first_file),
                                              manifest.files.begin() +
                                                  static_cast<ptrdiff_t>(part.first_file + part.file_count));
  for (checkpoint::ManifestFile& file : files) {
    file.begin -= part.begin;
    file.end -= part.begin;
  }
  return files;
}

// The contiguous run of whole files each rank reads: where it starts in the state and how many bytes it holds.
struct Blocks {
  std::vector<uint64_t> begin, bytes;
};
Blocks BlocksOf(const std::vector<checkpoint::ManifestFile>& files, uint64_t total_bytes, int size) {
  const auto file_count = static_cast<uint64_t>(files.size());
  Blocks blocks{std::vector<uint64_t>(size), std::vector<uint64_t>(size)};
  for (int r = 0; r < size; ++r) {
    const uint64_t first = checkpoint::SliceBegin(file_count, r, size);
    const uint64_t last = checkpoint::SliceBegin(file_count, r + 1, size);
    blocks.begin[r] = first < file_count ? files[first].begin : total_bytes;
    blocks.bytes[r] = first < last ? files[last - 1].end - blocks.begin[r] : 0;
  }
  return blocks;
}

// This replica's files read into `block`, each checksum verified (agreed over `comm`, every part's ranks: a corrupt
// file fails every rank).
void ReadBlock(MPI_Comm comm, const Replicas& replicas, const std::vector<checkpoint::ManifestFile>& files,
               const std::string& dir, uint64_t block_begin, std::vector<std::byte>& block) {
  const auto file_count = static_cast<uint64_t>(files.size());
  const int rank = replicas.rank(), size = replicas.size();
  AgreeOnStep(comm, [&] {
    for (uint64_t f = checkpoint::SliceBegin(file_count, rank, size); f < checkpoint::SliceBegin(file_count, rank + 1, size);
         ++f) {
      const checkpoint::ManifestFile& file = files[f];
      const std::string file_path = (fs::path(dir) / file.name).string();
      const uint32_t crc = checkpoint::ReadFileChecked(file_path, block.data() + (file.begin - block_begin),
                                                       file.end - file.begin, kReadBlockBytes);
      if (crc != file.crc32c) {
        throw InputError("checkpoint file " + file_path + " is corrupt: CRC-32C " + Hex32(crc) + ", the manifest says " +
                         Hex32(file.crc32c));
      }
    }
  });
}

// Every replica's block to every replica in rounds of up to `chunk` bytes each, copied into the state buffers.
void GatherBlocks(const Replicas& replicas, const Blocks& blocks, const std::vector<std::byte>& block,
                  const std::vector<StateBuffer>& buffers, const DeviceCopier& copier, uint64_t gather_chunk_bytes) {
  const int rank = replicas.rank(), size = replicas.size();
  const uint64_t chunk = std::max<uint64_t>(1, std::min(gather_chunk_bytes, kMaxRoundBytes / size));
  const uint64_t largest = *std::max_element(blocks.bytes.begin(), blocks.bytes.end());
  const uint64_t rounds = (largest + chunk - 1) / chunk;
  std::vector<std::byte> gathered;
  std::vector<int> counts(size), displacements(size);
  for (uint64_t round = 0; round < rounds; ++round) {
    const uint64_t round_start = round * chunk;
    int total = 0;
    for (int r = 0; r < size; ++r) {
      counts[r] = static_cast<int>(blocks.bytes[r] > round_start ? std::min(chunk, blocks.bytes[r] - round_start) : 0);
      displacements[r] = total;
      total += counts[r];
    }
    gathered.resize(static_cast<size_t>(total));
    TB_CHECK_MPI(MPI_Allgatherv(block.data() + std::min<uint64_t>(round_start, block.size()), counts[rank], MPI_BYTE,
                                gathered.data(), counts.data(), displacements.data(), MPI_BYTE, replicas.comm()));
    for (int r = 0; r < size; ++r) {
      const uint64_t begin = blocks.begin[r] + round_start;
      for (const checkpoint::Piece& piece : checkpoint::PiecesOf(buffers, begin, begin + counts[r])) {
        const StateBuffer& buffer = buffers[piece.buffer];
        std::byte* to = static_cast<std::byte*>(buffer.data) + piece.offset;
        const std::byte* from = gathered.data() + displacements[r] + piece.position;
        if (buffer.on_device) {
          copier.to_device(to, from, piece.bytes);
        } else {
          std::memcpy(to, from, piece.bytes);
        }
      }
    }
  }
}

}  // namespace

LoadedCheckpoint LoadCheckpoint(MPI_Comm comm, const std::string& path, const std::vector<StateBuffer>& buffers,
                                const std::string& model_fingerprint, const DeviceCopier& copier,
                                uint64_t gather_chunk_bytes, CheckpointPart part) {
  const double start = NowSeconds();
  int rank = 0;
  TB_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  LoadedCheckpoint loaded;
  const Manifest manifest =
      ReadAgreedManifest(comm, rank, path, buffers, model_fingerprint, copier, gather_chunk_bytes, part, loaded);
  // Each replica of a part reads and verifies a contiguous run of the part's whole files, so that every file's
  // checksum is checked exactly once whichever number of replicas wrote the checkpoint and whichever reads it.
  const checkpoint::ManifestPart& mine = manifest.parts[static_cast<size_t>(part.index)];
  const std::vector<checkpoint::ManifestFile> files = FilesOf(manifest, mine);
  const Replicas replicas(comm, part.index, rank);
  const Blocks blocks = BlocksOf(files, mine.bytes, replicas.size());
  std::vector<std::byte> block(blocks.bytes[replicas.rank()]);
  ReadBlock(comm, replicas, files, loaded.dir, blocks.begin[replicas.rank()], block);
  GatherBlocks(replicas, blocks, block, buffers, copier, gather_chunk_bytes);

  loaded.meta.step = manifest.step;
  loaded.meta.model_fingerprint = manifest.model_fingerprint;
  loaded.meta.values = manifest.values;
  loaded.saved_world_size = manifest.world_size;
  loaded.bytes = mine.bytes;
  loaded.read_bytes = blocks.bytes[replicas.rank()];
  loaded.seconds = NowSeconds() - start;
  return loaded;
}

}  // namespace tb
