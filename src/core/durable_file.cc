#include "durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "clock.h"
#include "error.h"

namespace tb {

// The helper thread behind StartWriteback: it asks the kernel to start writing [done, target) whenever the
// writer moved target on, and stops at the first call the file system does not support (nothing to do then:
// fsync writes everything) or fails (kept for Commit to report).
class DurableFile::Writeback {
 public:
  explicit Writeback(int fd) : fd_(fd), thread_([this] { Run(); }) {}
  ~Writeback() { Stop(); }

  void Advance(uint64_t target) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      target_ = target;
    }
    wake_.notify_one();
  }

  // Joins the thread; returns the error of a failed call (0: none).
  int Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
    return error_;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    uint64_t done = 0;
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || target_ > done; });
      if (stop_) return;
      const uint64_t target = target_;
      lock.unlock();
      const int rc = ::sync_file_range(fd_, static_cast<off64_t>(done), static_cast<off64_t>(target - done),
                                       SYNC_FILE_RANGE_WRITE);
      const int error = rc == 0 ? 0 : errno;
      lock.lock();
      if (error != 0) {
        // Unsupported here (EINVAL, ESPIPE, ENOSYS): Commit's fsync writes everything. Otherwise a real error.
        if (error != EINVAL && error != ESPIPE && error != ENOSYS) error_ = error;
        return;
      }
      done = target;
    }
  }

  const int fd_;
  std::mutex mutex_;
  std::condition_variable wake_;
  uint64_t target_ = 0;
  bool stop_ = false;
  int error_ = 0;  // written by the thread before it returns; read after join
  std::thread thread_;
};

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
  StopWriteback();
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temporary_.c_str());
}

int DurableFile::StopWriteback() {
  if (!writeback_) return 0;
  const int error = writeback_->Stop();
  writeback_.reset();
  return error;
}

void DurableFile::Fail(const std::string& file, int error_number) {
  StopWriteback();
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
  if (!writeback_) writeback_ = std::make_unique<Writeback>(fd_);
  writeback_->Advance(appended_);
}

void DurableFile::SyncAndClose() {
  // The helper's pending call is let finish (its error is this file's); what it had not started, fsync writes.
  if (const int error = StopWriteback(); error != 0) Fail(temporary_, error);
  if (::fsync(fd_) != 0) Fail(temporary_, errno);
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) Fail(temporary_, errno);  // some file systems report a failed write only here
}

void DurableFile::Commit() {
  const double start = NowSeconds();
  SyncAndClose();
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) Fail(path_, errno);
  SyncDirectory(std::filesystem::path(path_).parent_path().string());
  commit_s_ = NowSeconds() - start;
}

bool DurableFile::CommitNew() {
  const double start = NowSeconds();
  SyncAndClose();
  // link() fails with EEXIST where rename() would replace: of two writers of one name, exactly one succeeds.
  const int error = ::link(temporary_.c_str(), path_.c_str()) != 0 ? errno : 0;
  ::unlink(temporary_.c_str());
  if (error == EEXIST) return false;
  if (error != 0) Fail(path_, error);
  SyncDirectory(std::filesystem::path(path_).parent_path().string());
  commit_s_ = NowSeconds() - start;
  return true;
}

void ReplaceFileDurably(const std::string& path, const std::string& temporary, const void* data, uint64_t bytes) {
  DurableFile file(path, temporary);
  file.Append(data, bytes);
  file.Commit();
}

void ReplaceFileDurably(const std::string& path, const void* data, uint64_t bytes) {
  ReplaceFileDurably(path, path + ".tmp." + std::to_string(::getpid()), data, bytes);
}

bool CreateFileDurably(const std::string& path, const void* data, uint64_t bytes) {
  DurableFile file(path, path + ".tmp." + std::to_string(::getpid()));
  file.Append(data, bytes);
  return file.CommitNew();
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
