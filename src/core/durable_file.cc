#include "durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "error.h"

namespace tb {

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

DurableFile::DurableFile(std::string path, std::string temporary)
    : path_(std::move(path)), temporary_(std::move(temporary)) {
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw RuntimeError("cannot write " + temporary_ + ": " + OsMessage(errno));
}

DurableFile::~DurableFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temporary_.c_str());
}

void DurableFile::Fail(const std::string& file, int error_number) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temporary_.c_str());
  throw RuntimeError("cannot write " + file + ": " + OsMessage(error_number));
}

void DurableFile::Append(const void* data, uint64_t bytes) {
  if (const int error = WriteAll(fd_, data, bytes); error != 0) Fail(temporary_, error);
  appended_ += bytes;
}

void DurableFile::WriteAt(uint64_t offset, const void* data, uint64_t bytes) {
  const auto* at = static_cast<const char*>(data);
  for (uint64_t done = 0; done < bytes;) {
    const ssize_t n = ::pwrite(fd_, at + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Fail(temporary_, errno);
    done += static_cast<uint64_t>(n);
  }
}

void DurableFile::StartWriteback() {
  if (!writeback_ || appended_ == written_back_) return;
  if (::sync_file_range(fd_, static_cast<off64_t>(written_back_), static_cast<off64_t>(appended_ - written_back_),
                        SYNC_FILE_RANGE_WRITE) != 0) {
    if (errno != EINVAL && errno != ESPIPE && errno != ENOSYS) Fail(temporary_, errno);
    writeback_ = false;  // not supported by this file system
  }
  written_back_ = appended_;
}

void DurableFile::Commit() {
  if (::fsync(fd_) != 0) Fail(temporary_, errno);
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) Fail(temporary_, errno);  // some file systems report a failed write only here
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) Fail(path_, errno);
  SyncDirectory(std::filesystem::path(path_).parent_path().string());
}

void ReplaceFileDurably(const std::string& path, const std::string& temporary, const void* data, uint64_t bytes) {
  DurableFile file(path, temporary);
  file.Append(data, bytes);
  file.Commit();
}

void ReplaceFileDurably(const std::string& path, const void* data, uint64_t bytes) {
  ReplaceFileDurably(path, path + ".tmp." + std::to_string(::getpid()), data, bytes);
}

void SyncDirectory(const std::string& dir) {
  const std::string directory = dir.empty() ? std::string(".") : dir;
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw RuntimeError("cannot open directory " + directory + " to sync it: " + OsMessage(errno));
  const int error = ::fsync(fd) != 0 ? errno : 0;
  ::close(fd);
  if (error != 0) throw RuntimeError("cannot sync directory " + directory + ": " + OsMessage(error));
}

}  // namespace tb
