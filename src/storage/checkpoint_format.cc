#include "checkpoint_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "checksum.h"
#include "clock.h"
#include "durable_file.h"
#include "error.h"
#include "paths.h"

namespace tb::checkpoint {

namespace {

namespace fs = std::filesystem;

constexpr char kFormatName[] = "trainbench-checkpoint";

std::string Hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

// Reads exactly `bytes` at the current offset. Returns 0, the errno, or -1 when the file ends first.
int ReadAll(int fd, std::byte* data, uint64_t bytes) {
  while (bytes > 0) {
    ssize_t got = ::read(fd, data, std::min<uint64_t>(bytes, 1ull << 30));
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return -1;
    data += got;
    bytes -= static_cast<uint64_t>(got);
  }
  return 0;
}

// CRC-32C of a whole file read back in blocks; sets `error` and returns false when it cannot be read.
bool ChecksumFile(const std::string& path, uint64_t block_bytes, uint32_t& crc, uint64_t& bytes, std::string& error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = "cannot read back " + path + ": " + OsMessage(errno);
    return false;
  }
  std::vector<std::byte> block(block_bytes);
  crc = 0;
  bytes = 0;
  while (true) {
    ssize_t got = ::read(fd, block.data(), block.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      error = "cannot read back " + path + ": " + OsMessage(errno);
      ::close(fd);
      return false;
    }
    if (got == 0) break;
    crc = Crc32c(block.data(), static_cast<size_t>(got), crc);
    bytes += static_cast<uint64_t>(got);
  }
  ::close(fd);
  return true;
}

constexpr uint64_t kNotANumber = UINT64_MAX;  // a manifest word that ParseUnsigned did not read

bool ParseUnsigned(const std::string& text, uint64_t& value, int base = 10) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value, base);
  return ec == std::errc() && ptr == end && !text.empty();
}

// The sync path's sources: host memory as it is, device memory copied block by block into `staging`.
class SourceList final : public SliceSource {
 public:
  SourceList(const std::vector<Source>& sources, const DeviceCopier& copier, std::byte* staging)
      : sources_(sources), copier_(copier), staging_(staging) {}
  size_t parts() const override { return sources_.size(); }
  uint64_t part_bytes(size_t part) const override { return sources_[part].bytes; }
  const std::byte* Acquire(size_t part, uint64_t offset, uint64_t bytes) override {
    const Source& source = sources_[part];
    const std::byte* block = static_cast<const std::byte*>(source.data) + offset;
    if (!source.on_device) return block;
    copier_.to_host(staging_, block, bytes);
    return staging_;
  }

 private:
  const std::vector<Source>& sources_;
  const DeviceCopier& copier_;
  std::byte* const staging_;
};

// Appends the source's parts to `file` block by block, starting the writeback of each; returns their CRC-32C and
// adds each stage's time to `stages` (copy: acquiring the block, a device copy or a wait for a snapshot). A failed
// acquisition is a failed write of `file`.
uint32_t WriteSources(DurableFile& file, SliceSource& source, uint64_t block_bytes, CheckpointStages& stages) {
  uint32_t crc = 0;
  for (size_t part = 0; part < source.parts(); ++part) {
    const uint64_t part_bytes = source.part_bytes(part);
    for (uint64_t done = 0; done < part_bytes;) {
      const uint64_t n = std::min(block_bytes, part_bytes - done);
      const double start = NowSeconds();
      const std::byte* block = nullptr;
      try {
        block = source.Acquire(part, done, n);
      } catch (const std::exception& e) {
        throw RuntimeError("cannot write " + file.temporary() + ": " + e.what());
      }
      struct Releaser {
        SliceSource& source;
        ~Releaser() { source.Release(); }
      } release{source};
      const double copied = NowSeconds();
      crc = Crc32c(block, n, crc);
      const double summed = NowSeconds();
      file.Append(block, n);
      file.StartWriteback();
      const double written = NowSeconds();
      stages.copy_s += copied - start;
      stages.crc_s += summed - copied;
      stages.write_calls_s += written - summed;
      done += n;
    }
  }
  return crc;
}

// Empty when `path` reads back as `bytes` bytes with CRC-32C `crc`; else what is wrong.
std::string ReadBackProblem(const std::string& path, uint64_t block_bytes, uint32_t crc, uint64_t bytes) {
  uint32_t read_crc = 0;
  uint64_t read_bytes = 0;
  std::string problem;
  if (!ChecksumFile(path, block_bytes, read_crc, read_bytes, problem)) return problem;
  if (read_crc == crc && read_bytes == bytes) return "";
  return "read-back of " + path + " does not match what was written (CRC-32C " + Hex32(read_crc) + ", expected " +
         Hex32(crc) + ")";
}

}  // namespace

std::string StepDirName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

std::string RankFileName(int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.bin", rank);
  return name;
}

std::string PartFileName(int part, int slice) {
  char name[48];
  std::snprintf(name, sizeof name, "part-%05d-slice-%05d.bin", part, slice);
  return name;
}

int64_t StepOfDirName(const std::string& name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.size() <= kPrefix.size() || name.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  uint64_t step = 0;
  if (!ParseUnsigned(name.substr(kPrefix.size()), step) || step > static_cast<uint64_t>(INT64_MAX)) return -1;
  return static_cast<int64_t>(step);
}

uint64_t SliceBegin(uint64_t total, int rank, int n) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(total) * static_cast<unsigned>(rank) /
                               static_cast<unsigned>(n));
}

std::vector<Piece> PiecesOf(const std::vector<StateBuffer>& buffers, uint64_t begin, uint64_t end) {
  std::vector<Piece> pieces;
  uint64_t buffer_start = 0;
  for (size_t i = 0; i < buffers.size() && buffer_start < end; ++i) {
    const uint64_t buffer_end = buffer_start + buffers[i].bytes;
    const uint64_t from = std::max(begin, buffer_start), to = std::min(end, buffer_end);
    if (from < to) pieces.push_back({i, from - buffer_start, to - from, from - begin});
    buffer_start = buffer_end;
  }
  return pieces;
}

SliceLayout LayOutSlices(const std::vector<int>& part_of_rank, const std::vector<uint64_t>& part_bytes,
                         int part_count) {
  std::vector<std::vector<int>> ranks_of(static_cast<size_t>(std::max(part_count, 0)));
  for (size_t r = 0; r < part_of_rank.size(); ++r) {
    if (part_of_rank[r] < 0 || part_of_rank[r] >= part_count) {
      throw InputError("checkpoint: rank " + std::to_string(r) + " holds part " + std::to_string(part_of_rank[r]) +
                       ", not one of 0.." + std::to_string(part_count - 1));
    }
    ranks_of[static_cast<size_t>(part_of_rank[r])].push_back(static_cast<int>(r));
  }
  SliceLayout layout;
  layout.file_of_rank.resize(part_of_rank.size());
  for (size_t p = 0; p < ranks_of.size(); ++p) {
    const std::vector<int>& ranks = ranks_of[p];
    if (ranks.empty()) throw InputError("checkpoint: no rank holds part " + std::to_string(p));
    ManifestPart part{layout.total_bytes, part_bytes[ranks[0]], {}, layout.files.size(), ranks.size()};
    const int replicas = static_cast<int>(ranks.size());
    for (int s = 0; s < replicas; ++s) {
      const int r = ranks[s];
      if (part_bytes[r] != part.bytes) {
        throw InputError("checkpoint: ranks " + std::to_string(ranks[0]) + " and " + std::to_string(r) + " both hold part " +
                         std::to_string(p) + " but " + std::to_string(part.bytes) + " and " +
                         std::to_string(part_bytes[r]) + " bytes of state");
      }
      layout.file_of_rank[r] = layout.files.size();
      const std::string name = part_count == 1 ? RankFileName(r) : PartFileName(static_cast<int>(p), s);
      layout.files.push_back({name, part.begin + SliceBegin(part.bytes, s, replicas),
                              part.begin + SliceBegin(part.bytes, s + 1, replicas), 0});
    }
    layout.total_bytes += part.bytes;
    layout.parts.push_back(std::move(part));
  }
  return layout;
}

std::string FormatManifest(const Manifest& m) {
  const bool parted = m.parts.size() != 1;
  std::ostringstream out;
  out << "# trainbench checkpoint: complete because this file exists; each file holds the byte range [begin, end)\n"
      << "# of the buffers laid end to end; file lines: name begin end bytes crc32c\n";
  if (parted) {
    out << "# parts: ranks holding different state (pipeline stages, tensor parallel ranks), laid end to end; part\n"
        << "# lines: index bytes; part_buffer lines: part name bytes\n";
  }
  out << "format " << kFormatName << ' ' << (parted ? kPartsFormatVersion : kFormatVersion) << '\n'
      << "step " << m.step << '\n'
      << "world_size " << m.world_size << '\n'
      << "model_fingerprint " << m.model_fingerprint << '\n'
      << "total_bytes " << m.total_bytes << '\n';
  if (parted) out << "parts " << m.parts.size() << '\n';
  for (size_t p = 0; p < m.parts.size(); ++p) {
    if (parted) out << "part " << p << ' ' << m.parts[p].bytes << '\n';
    for (const auto& [name, bytes] : m.parts[p].buffers) {
      out << (parted ? "part_buffer " + std::to_string(p) + " " : std::string("buffer ")) << name << ' ' << bytes
          << '\n';
    }
  }
  for (const auto& [key, value] : m.values) out << "meta " << key << ' ' << value << '\n';
  for (const ManifestFile& f : m.files) {
    out << "file " << f.name << ' ' << f.begin << ' ' << f.end << ' ' << f.end - f.begin << ' ' << Hex32(f.crc32c)
        << '\n';
  }
  out << "end\n";
  std::string text = out.str();
  text += "crc32c " + Hex32(Crc32c(text.data(), text.size())) + "\n";
  return text;
}

namespace {

// A manifest as it is read line by line: what it holds so far, and which of its required lines were seen.
struct ManifestReader {
  std::string where;  // "checkpoint manifest PATH: "
  Manifest m;
  int version = 0;
  size_t declared_parts = 0;  // version 2's "parts N"
  bool have_format = false, have_step = false, have_world = false, have_fingerprint = false, have_total = false,
       have_end = false;

  InputError Fail(const std::string& what) const { return InputError(where + what); }

  // The length of the text the final "crc32c" line covers, once its checksum matches.
  size_t CheckedLength(const std::string& text) const {
    // The last line holds the checksum of everything before it: a torn or edited manifest is refused whole.
    if (text.empty() || text.back() != '\n') throw Fail("truncated (no final line break)");
    const size_t last_start = text.rfind('\n', text.size() - 2) + 1;  // npos + 1 == 0 for a one-line file
    const std::string last_line = text.substr(last_start, text.size() - 1 - last_start);
    uint64_t stored_crc = 0;
    if (last_line.rfind("crc32c ", 0) != 0 || !ParseUnsigned(last_line.substr(7), stored_crc, 16)) {
      throw Fail("truncated or not a trainbench checkpoint manifest (no final crc32c line)");
    }
    const uint32_t actual_crc = Crc32c(text.data(), last_start);
    if (actual_crc != stored_crc) {
      throw Fail("corrupt: checksum " + Hex32(actual_crc) + " does not match the stored " +
                 Hex32(static_cast<uint32_t>(stored_crc)));
    }
    return last_start;
  }

  void Format(const std::vector<std::string>& words, const std::string& at_line) {
    uint64_t number = 0;
    if (words.size() != 2 || words[0] != kFormatName || !ParseUnsigned(words[1], number)) {
      throw Fail(at_line + "not a trainbench checkpoint manifest");
    }
    if (number != static_cast<uint64_t>(kFormatVersion) && number != static_cast<uint64_t>(kPartsFormatVersion)) {
      throw Fail("format version " + words[1] + " is not supported (this build reads versions " +
                 std::to_string(kFormatVersion) + " and " + std::to_string(kPartsFormatVersion) + ")");
    }
    version = static_cast<int>(number);
    if (version == kFormatVersion) m.parts.emplace_back();  // the one part, sized by total_bytes
    have_format = true;
  }

  void File(const std::vector<std::string>& words, const std::string& at_line) {
    ManifestFile f;
    f.name = words[0];
    uint64_t size = 0, crc = 0;
    if (!ParseUnsigned(words[1], f.begin) || !ParseUnsigned(words[2], f.end) || !ParseUnsigned(words[3], size) ||
        !ParseUnsigned(words[4], crc, 16) || f.end < f.begin || size != f.end - f.begin || crc > UINT32_MAX) {
      throw Fail(at_line + "malformed file line");
    }
    f.crc32c = static_cast<uint32_t>(crc);
    m.files.push_back(f);
  }

  // One "key values..." line; false when it is none of the manifest's lines.
  bool Line(const std::string& key, const std::string& rest, const std::vector<std::string>& words,
            const std::string& at_line) {
    uint64_t number = 0;
    const bool one_number = words.size() == 1 && ParseUnsigned(words[0], number);
    if (key == "format") {
      Format(words, at_line);
    } else if (key == "step" && one_number && number <= INT64_MAX) {
      m.step = static_cast<int64_t>(number);
      have_step = true;
    } else if (key == "world_size" && one_number && number >= 1 && number <= INT32_MAX) {
      m.world_size = static_cast<int>(number);
      have_world = true;
    } else if (key == "model_fingerprint") {
      m.model_fingerprint = rest;
      have_fingerprint = true;
    } else if (key == "total_bytes" && one_number) {
      m.total_bytes = number;
      have_total = true;
    } else if (key == "meta" && !words.empty()) {
      const size_t value_start = rest.find(' ');
      m.values[words[0]] = value_start == std::string::npos ? "" : rest.substr(value_start + 1);
    } else if (key == "file" && words.size() == 5) {
      File(words, at_line);
    } else if (key == "end" && words.empty()) {
      have_end = true;
    } else {
      return PartLine(key, words);
    }
    return true;
  }

  // The lines that say which part holds what: version 1's "buffer NAME BYTES" (its one part), version 2's
  // "parts N", then for each part in order "part P BYTES" followed by its "part_buffer P NAME BYTES".
  bool PartLine(const std::string& key, const std::vector<std::string>& words) {
    std::vector<uint64_t> numbers(words.size());
    for (size_t i = 0; i < words.size(); ++i) {
      if (!ParseUnsigned(words[i], numbers[i])) numbers[i] = kNotANumber;
    }
    return version == kFormatVersion ? BufferLine(key, words, numbers) : PartsLine(key, words, numbers);
  }

  bool BufferLine(const std::string& key, const std::vector<std::string>& words, const std::vector<uint64_t>& numbers) {
    if (key != "buffer" || words.size() != 2 || numbers[1] == kNotANumber) return false;
    m.parts.back().buffers.emplace_back(words[0], numbers[1]);
    return true;
  }

  bool PartsLine(const std::string& key, const std::vector<std::string>& words, const std::vector<uint64_t>& numbers) {
    static const std::map<std::string, size_t> kWords = {{"parts", 1}, {"part", 2}, {"part_buffer", 3}};
    const auto expected = kWords.find(key);
    if (expected == kWords.end() || words.size() != expected->second || numbers.back() == kNotANumber) return false;
    if (key == "parts") {
      if (numbers[0] < 1 || numbers[0] > INT32_MAX) return false;
      declared_parts = numbers[0];
    } else if (key == "part") {
      if (numbers[0] != m.parts.size()) return false;  // in part order
      m.parts.push_back({0, numbers[1], {}, 0, 0});
    } else {
      if (m.parts.empty() || numbers[0] != m.parts.size() - 1) return false;  // right after its part
      m.parts.back().buffers.emplace_back(words[1], numbers[2]);
    }
    return true;
  }

  // The whole: every required line, buffers adding up, one file per rank covering the state in order.
  void CheckWhole() {
    if (!have_step || !have_world || !have_fingerprint || !have_total || !have_end) {
      throw Fail("incomplete (needs step, world_size, model_fingerprint, total_bytes and end)");
    }
    const bool parted = version == kPartsFormatVersion;
    if (parted && (declared_parts == 0 || m.parts.size() != declared_parts)) {
      throw Fail(std::to_string(m.parts.size()) + " part lines for parts " + std::to_string(declared_parts));
    }
    if (!parted) m.parts.front().bytes = m.total_bytes;
    CheckSizes();
    if (m.files.size() != static_cast<size_t>(m.world_size)) {
      throw Fail(std::to_string(m.files.size()) + " file lines for world_size " + std::to_string(m.world_size));
    }
    CheckFiles();
  }

  // Each part's buffers add up to its bytes, and the parts' to total_bytes.
  void CheckSizes() const {
    const bool parted = version == kPartsFormatVersion;
    uint64_t part_sum = 0;
    for (size_t p = 0; p < m.parts.size(); ++p) {
      uint64_t buffer_sum = 0;
      for (const auto& buffer : m.parts[p].buffers) buffer_sum += buffer.second;
      if (buffer_sum != m.parts[p].bytes) {
        throw Fail(parted ? "part " + std::to_string(p) + "'s buffer sizes do not add up to its bytes"
                          : "buffer sizes do not add up to total_bytes");
      }
      part_sum += m.parts[p].bytes;
    }
    if (part_sum != m.total_bytes) throw Fail("the parts' bytes do not add up to total_bytes");
  }

  // Each part's slice files in order, contiguous from the end of the part before, covering the part; sets each
  // part's place and files.
  void CheckFiles() {
    const bool parted = version == kPartsFormatVersion;
    size_t f = 0;
    uint64_t begin = 0;
    for (size_t p = 0; p < m.parts.size(); ++p) {
      ManifestPart& part = m.parts[p];
      part.begin = begin;
      part.first_file = f;
      const auto name = [&](size_t slice) {
        return parted ? PartFileName(static_cast<int>(p), static_cast<int>(slice)) : RankFileName(static_cast<int>(slice));
      };
      for (; f < m.files.size() && m.files[f].name == name(f - part.first_file) && m.files[f].begin == begin; ++f) {
        begin = m.files[f].end;
      }
      part.file_count = f - part.first_file;
      if (part.file_count > 0 && begin == part.begin + part.bytes) continue;
      if (f < m.files.size()) {
        throw Fail("file line " + std::to_string(f) + " is not " + name(f - part.first_file) + " starting at byte " +
                   std::to_string(begin));
      }
      throw Fail(parted ? "the files do not cover part " + std::to_string(p) : "the files do not cover total_bytes");
    }
    if (f < m.files.size()) throw Fail("file line " + std::to_string(f) + " belongs to no part");
  }
};

}  // namespace

Manifest ParseManifest(const std::string& text, const std::string& path) {
  ManifestReader reader;
  reader.where = "checkpoint manifest " + path + ": ";
  std::istringstream lines(text.substr(0, reader.CheckedLength(text)));
  std::string line;
  int line_number = 0;
  while (std::getline(lines, line)) {
    ++line_number;
    if (line.empty() || line[0] == '#') continue;
    const std::string at_line = "line " + std::to_string(line_number) + ": ";
    if (reader.have_end) throw reader.Fail(at_line + "text after 'end'");
    const size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
    std::istringstream fields(rest);
    std::vector<std::string> words;
    for (std::string word; fields >> word;) words.push_back(word);
    if (!reader.have_format && key != "format") {
      throw reader.Fail(at_line + "expected 'format " + kFormatName + " N' first");
    }
    if (!reader.Line(key, rest, words, at_line)) throw reader.Fail(at_line + "cannot parse '" + line + "'");
  }
  reader.CheckWhole();
  return reader.m;
}

WriteResult WriteFileDurably(const std::string& path, const std::vector<Source>& sources, const DeviceCopier& copier,
                             std::byte* staging, uint64_t block_bytes, bool verify) {
  SourceList list(sources, copier, staging);
  return WriteFileDurably(path, list, block_bytes, verify);
}

WriteResult WriteFileDurably(const std::string& path, SliceSource& source, uint64_t block_bytes, bool verify) {
  WriteResult result;
  const double start = NowSeconds();
  try {
    DurableFile file(path, path + ".tmp");
    result.crc32c = WriteSources(file, source, block_bytes, result.stages);
    file.Commit();
    result.stages.commit_s = file.commit_s();
  } catch (const std::exception& e) {
    // The temporary is gone. A file whose directory sync failed after its rename must not pass for a good one
    // either; there is no earlier file at `path` to keep (checkpoint files go to a fresh .partial directory).
    ::unlink(path.c_str());
    result.crc32c = 0;
    result.error = e.what();
    return result;
  }
  for (size_t part = 0; part < source.parts(); ++part) result.bytes += source.part_bytes(part);
  result.seconds = NowSeconds() - start;
  if (verify) {
    result.error = ReadBackProblem(path, block_bytes, result.crc32c, result.bytes);
    if (!result.error.empty()) {
      ::unlink(path.c_str());
      return result;
    }
    result.verified = true;
  }
  result.ok = true;
  return result;
}

DeferredSnapshot::DeferredSnapshot(std::byte* snapshot, std::vector<Part> parts)
    : snapshot_(snapshot), parts_(std::move(parts)) {}

const std::byte* DeferredSnapshot::Acquire(size_t part, uint64_t offset, uint64_t bytes) {
  const Part& p = parts_[part];
  std::unique_lock<std::mutex> lock(mutex_);
  if (frozen_) {
    changed_.wait(lock, [this] { return copied_; });
    return snapshot_ + p.position + offset;
  }
  reading_ = p.live != nullptr;  // a block of the snapshot is not the state: Freeze need not wait for it
  unread_from_ = std::max(unread_from_, p.position + offset + bytes);
  return p.live != nullptr ? p.live + offset : snapshot_ + p.position + offset;
}

void DeferredSnapshot::Release() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    reading_ = false;
  }
  changed_.notify_all();
}

uint64_t DeferredSnapshot::Freeze() {
  uint64_t from = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (frozen_) return 0;
    frozen_ = true;
    changed_.wait(lock, [this] { return !reading_; });
    from = unread_from_;
  }
  uint64_t copied = 0;
  for (const Part& p : parts_) {
    const uint64_t begin = std::max(from, p.position), end = p.position + p.bytes;
    if (p.live == nullptr || begin >= end) continue;
    std::memcpy(snapshot_ + begin, p.live + (begin - p.position), end - begin);
    copied += end - begin;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    copied_ = true;
  }
  changed_.notify_all();
  return copied;
}

uint32_t ReadFileChecked(const std::string& path, std::byte* dst, uint64_t bytes, uint64_t block_bytes) {
  std::string why;
  int fd = OpenInputFile(path, 0, why);
  if (fd < 0) throw InputError("checkpoint file " + path + ": " + why);
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    int error = errno;
    ::close(fd);
    throw InputError("checkpoint file " + path + ": " + OsMessage(error));
  }
  if (static_cast<uint64_t>(info.st_size) != bytes) {
    ::close(fd);
    throw InputError("checkpoint file " + path + " is " + (static_cast<uint64_t>(info.st_size) < bytes ? "truncated" : "too long") +
                     ": " + std::to_string(info.st_size) + " bytes, the manifest says " + std::to_string(bytes));
  }
  uint32_t crc = 0;
  for (uint64_t done = 0; done < bytes;) {
    const uint64_t n = std::min(block_bytes, bytes - done);
    int error = ReadAll(fd, dst + done, n);
    if (error != 0) {
      ::close(fd);
      throw InputError("checkpoint file " + path + ": " +
                       (error < 0 ? "ends at byte " + std::to_string(done) + " (truncated while reading)" : OsMessage(error)));
    }
    crc = Crc32c(dst + done, n, crc);
    done += n;
  }
  ::close(fd);
  return crc;
}

std::string ReadTextFile(const std::string& path, const std::string& what) {
  const std::string problem = InputFileProblem(path);
  if (!problem.empty()) throw InputError(what + " " + path + " cannot be read: " + problem);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(what + " " + path + " cannot be read: " + OsMessage(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError(what + " " + path + " cannot be read: " + OsMessage(errno));
  return text.str();
}

}  // namespace tb::checkpoint
