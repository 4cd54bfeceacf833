// Durable file writes on plain POSIX calls, so that a failure is one OS error naming the file (a full disk is
// "No space left on device"). The one implementation behind every file trainbench writes in place of another:
// reports, checkpoint slices and manifests, token shards.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace tb {

// Writes all `bytes` to `fd`, resuming after short writes and signals. Returns 0 or the errno.
int WriteAll(int fd, const void* data, uint64_t bytes);

// A file written under a temporary name in the destination's directory and put in place by Commit(): fsync,
// rename over `path`, fsync of the directory so that the rename is durable too. Every failure throws
// RuntimeError "cannot write FILE: OS message" naming the file the failing call was on (the directory:
// "cannot sync directory DIR: ..."). Destroyed uncommitted, or after a failure before the rename, it removes the
// temporary, and any previous file at `path` is left as it was.
class DurableFile {
 public:
  DurableFile(std::string path, std::string temporary);
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void Append(const void* data, uint64_t bytes);
  // Overwrites bytes already appended (a header written last, once the payload's checksum is known).
  void WriteAt(uint64_t offset, const void* data, uint64_t bytes);
  // Starts writeback of what was appended since the last call, so that the disk works while the caller makes
  // the next block instead of the whole file waiting in the page cache for Commit's fsync. The
  // sync_file_range(WRITE) calls run on a helper thread of this file: they wait whenever the device's queue is
  // full, and the caller must not (its next write() goes to the page cache meanwhile). A no-op on file systems
  // without sync_file_range.
  void StartWriteback();
  void Commit();
  // Commit, except that an existing `path` is left as it is: false then (the temporary removed), true when this
  // file was put in place. Two writers of one path: exactly one gets true, whatever the timing.
  bool CommitNew();

  const std::string& temporary() const { return temporary_; }
  // Seconds Commit spent in fsync (after the helper's last writeback call returned), rename and directory sync.
  double commit_s() const { return commit_s_; }

 private:
  class Writeback;

  [[noreturn]] void Fail(const std::string& file, int error_number);
  // Stops the helper, fsyncs and closes the temporary (Commit's and CommitNew's first steps).
  void SyncAndClose();
  // Stops the helper; its error (0: none).
  int StopWriteback();

  std::string path_;
  std::string temporary_;
  int fd_ = -1;
  uint64_t appended_ = 0;
  double commit_s_ = 0;
  std::unique_ptr<Writeback> writeback_;  // from the first StartWriteback
};

// Replaces `path` with `bytes` through a DurableFile named `temporary`.
void ReplaceFileDurably(const std::string& path, const std::string& temporary, const void* data, uint64_t bytes);
// The same through the temporary `path.tmp.<pid>` in the same directory (reports, validate's outputs and history).
void ReplaceFileDurably(const std::string& path, const void* data, uint64_t bytes);

// Creates `path` with `bytes` through the temporary `path.tmp.<pid>` (DurableFile::CommitNew): false, and nothing
// changed, when `path` exists already.
bool CreateFileDurably(const std::string& path, const void* data, uint64_t bytes);

// fsync of a directory, so that renames and removals in it are durable. Throws RuntimeError.
void SyncDirectory(const std::string& dir);

}  // namespace tb
