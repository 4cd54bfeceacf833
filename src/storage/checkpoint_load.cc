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

std::string DescribeBuffers(const std::vector<std::pair<std::string, uint64_t>>& buffers) {
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

// Rank 0 finds the checkpoint and reads its manifest; every rank then parses the same text and checks that it
// holds this run's model and buffers. Collective; sets loaded.dir.
Manifest ReadAgreedManifest(MPI_Comm comm, int rank, const std::string& path, const std::vector<StateBuffer>& buffers,
                            const std::string& model_fingerprint, const DeviceCopier& copier,
                            uint64_t gather_chunk_bytes, LoadedCheckpoint& loaded) {
  std::string text;
  AgreeOnStep(comm, [&] {
    if (gather_chunk_bytes == 0) throw InputError("checkpoint gather chunk size must be positive");
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
    std::vector<std::pair<std::string, uint64_t>> ours;
    for (const StateBuffer& buffer : buffers) {
      ours.emplace_back(buffer.name, buffer.bytes);
      if (buffer.on_device && !copier.to_device) {
        throw InputError("checkpoint buffer '" + buffer.name + "' is in device memory but no device copier was given");
      }
    }
    if (ours != manifest.buffers) {
      throw InputError("checkpoint " + loaded.dir + " holds " + DescribeBuffers(manifest.buffers) + "; this run has " +
                       DescribeBuffers(ours));
    }
  });
  return manifest;
}

// The contiguous run of whole files each rank reads: where it starts in the state and how many bytes it holds.
struct Blocks {
  std::vector<uint64_t> begin, bytes;
};
Blocks BlocksOf(const Manifest& manifest, int size) {
  const auto file_count = static_cast<uint64_t>(manifest.files.size());
  Blocks blocks{std::vector<uint64_t>(size), std::vector<uint64_t>(size)};
  for (int r = 0; r < size; ++r) {
    const uint64_t first = checkpoint::SliceBegin(file_count, r, size);
    const uint64_t last = checkpoint::SliceBegin(file_count, r + 1, size);
    blocks.begin[r] = first < file_count ? manifest.files[first].begin : manifest.total_bytes;
    blocks.bytes[r] = first < last ? manifest.files[last - 1].end - blocks.begin[r] : 0;
  }
  return blocks;
}

// This rank's files read into `block`, each checksum verified (agreed: a corrupt file fails every rank).
void ReadBlock(MPI_Comm comm, int rank, int size, const Manifest& manifest, const std::string& dir,
               uint64_t block_begin, std::vector<std::byte>& block) {
  const auto file_count = static_cast<uint64_t>(manifest.files.size());
  AgreeOnStep(comm, [&] {
    for (uint64_t f = checkpoint::SliceBegin(file_count, rank, size); f < checkpoint::SliceBegin(file_count, rank + 1, size);
         ++f) {
      const checkpoint::ManifestFile& file = manifest.files[f];
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

// Every rank's block to every rank in rounds of up to `chunk` bytes each, copied into the state buffers.
void GatherBlocks(MPI_Comm comm, int rank, int size, const Blocks& blocks, const std::vector<std::byte>& block,
                  const std::vector<StateBuffer>& buffers, const DeviceCopier& copier, uint64_t gather_chunk_bytes) {
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
                                gathered.data(), counts.data(), displacements.data(), MPI_BYTE, comm));
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
                                uint64_t gather_chunk_bytes) {
  const double start = NowSeconds();
  int rank = 0, size = 1;
  TB_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  TB_CHECK_MPI(MPI_Comm_size(comm, &size));
  LoadedCheckpoint loaded;
  const Manifest manifest =
      ReadAgreedManifest(comm, rank, path, buffers, model_fingerprint, copier, gather_chunk_bytes, loaded);
  // Each rank reads and verifies a contiguous run of whole files, so that every file's checksum is checked
  // exactly once whichever world size wrote the checkpoint and whichever reads it.
  const Blocks blocks = BlocksOf(manifest, size);
  std::vector<std::byte> block(blocks.bytes[rank]);
  ReadBlock(comm, rank, size, manifest, loaded.dir, blocks.begin[rank], block);
  GatherBlocks(comm, rank, size, blocks, block, buffers, copier, gather_chunk_bytes);

  loaded.meta.step = manifest.step;
  loaded.meta.model_fingerprint = manifest.model_fingerprint;
  loaded.meta.values = manifest.values;
  loaded.saved_world_size = manifest.world_size;
  loaded.bytes = manifest.total_bytes;
  loaded.read_bytes = blocks.bytes[rank];
  loaded.seconds = NowSeconds() - start;
  return loaded;
}

}  // namespace tb
