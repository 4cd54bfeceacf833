#include "durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "error.h"

namespace tb {
namespace {

// "cannot write FILE: No space left on device"
RuntimeError Failure(const std::string& what, int error_number) {
  return RuntimeError("cannot " + what + ": " + std::system_category().message(error_number));
}

// Writes and fsyncs `temporary`; the errno of the first failing call, or 0.
int WriteAndSync(const std::string& temporary, const void* data, uint64_t bytes) {
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int error = WriteAll(fd, data, bytes);
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;  // some file systems report a failed write only here
  return error;
}

}  // namespace

int WriteAll(int fd, const void* data, uint64_t bytes) {
  const auto* at = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t written = ::write(fd, at, std::min<uint64_t>(bytes, 1ull << 30));
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    at += written;
    bytes -= static_cast<uint64_t>(written);
  }
  return 0;
}

void ReplaceFileDurably(const std::string& path, const std::string& temporary, const void* data, uint64_t bytes) {
  if (const int error = WriteAndSync(temporary, data, bytes); error != 0) {
    ::unlink(temporary.c_str());
    throw Failure("write " + temporary, error);
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    throw Failure("write " + path, error);
  }
  const std::string parent = std::filesystem::path(path).parent_path().string();
  const std::string directory = parent.empty() ? std::string(".") : parent;
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Failure("sync directory " + directory, errno);
  const int error = ::fsync(fd) != 0 ? errno : 0;
  ::close(fd);
  if (error != 0) throw Failure("sync directory " + directory, error);
}

}  // namespace tb
