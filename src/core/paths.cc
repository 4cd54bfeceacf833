#include "paths.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <filesystem>

#include "error.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

std::string KindProblem(mode_t mode) {
  if (S_ISREG(mode)) return "";
  if (S_ISDIR(mode)) return "it is a directory";
  if (S_ISFIFO(mode)) return "it is a FIFO, not a regular file";
  if (S_ISCHR(mode)) return "it is a character device, not a regular file";
  if (S_ISBLK(mode)) return "it is a block device, not a regular file";
  if (S_ISSOCK(mode)) return "it is a socket, not a regular file";
  return "it is not a regular file";
}

std::string ErrnoProblem(int error) { return error == ENOENT ? "no such file" : OsMessage(error); }

bool SameFile(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// The input that is `output` (by identity), or "".
std::string MatchingInput(const struct stat& output, const std::string& input) {
  struct stat info {};
  if (::stat(input.c_str(), &info) != 0) return "";
  if (!S_ISDIR(info.st_mode)) return SameFile(output, info) ? input : "";
  std::error_code ec;
  for (fs::recursive_directory_iterator it(input, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat entry {};
    if (::stat(it->path().c_str(), &entry) == 0 && S_ISREG(entry.st_mode) && SameFile(output, entry)) {
      return it->path().string();
    }
  }
  return "";
}

}  // namespace

std::string InputFileProblem(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return ErrnoProblem(errno);
  return KindProblem(info.st_mode);
}

int OpenInputFile(const std::string& path, int flags, std::string& why, int* error_number) {
  int error = 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | flags);
  struct stat info {};
  if (fd < 0) {
    error = errno;
    why = ErrnoProblem(error);
  } else if (::fstat(fd, &info) != 0 || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    error = errno;
    why = ErrnoProblem(error);
  } else {
    why = KindProblem(info.st_mode);
  }
  if (fd >= 0 && !why.empty()) {
    ::close(fd);
    fd = -1;
  }
  if (error_number) *error_number = error;
  return fd;
}

std::string OutputFileProblem(const std::string& output, const std::vector<std::string>& inputs) {
  struct stat info {};
  if (::stat(output.c_str(), &info) != 0) return "";  // new (or unreachable: the write will say why)
  if (!S_ISREG(info.st_mode)) return KindProblem(info.st_mode);
  for (const std::string& input : inputs) {
    const std::string match = MatchingInput(info, input);
    if (!match.empty()) return "it is the input '" + match + "' of this run";
  }
  return "";
}

bool FileIsInside(const std::string& path, const std::string& dir) {
  std::error_code ec_file, ec_dir;
  const fs::path file = fs::weakly_canonical(fs::absolute(path, ec_file), ec_file).lexically_normal();
  const fs::path directory = fs::canonical(dir, ec_dir);
  if (ec_file || ec_dir) return false;
  const fs::path parent = file.parent_path();
  auto [end, unused] = std::mismatch(directory.begin(), directory.end(), parent.begin(), parent.end());
  return end == directory.end();
}

bool DirectoriesOverlap(const std::string& a, const std::string& b) {
  auto resolved = [](const std::string& path, std::error_code& ec) {
    fs::path p = fs::weakly_canonical(path, ec).lexically_normal();
    return p.has_filename() ? p : p.parent_path();  // "d/" and "d" are the same directory
  };
  std::error_code ec_a, ec_b;
  const fs::path x = resolved(a, ec_a), y = resolved(b, ec_b);
  if (ec_a || ec_b) return false;
  auto inside = [](const fs::path& inner, const fs::path& outer) {
    auto [end, unused] = std::mismatch(outer.begin(), outer.end(), inner.begin(), inner.end());
    return end == outer.end();
  };
  return inside(x, y) || inside(y, x);
}

}  // namespace tb
