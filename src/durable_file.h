// Durable file writes on plain POSIX calls, so that a failure is one OS error naming the file (a full disk is
// "No space left on device"), shared by the checkpoint writer and the report writer.
#pragma once

#include <cstdint>
#include <string>

namespace tb {

// Writes all `bytes` to `fd`, resuming after short writes and signals. Returns 0 or the errno.
int WriteAll(int fd, const void* data, uint64_t bytes);

// Replaces `path` with `bytes`: written to `temporary` (same directory), fsync'd, renamed over `path`, then the
// directory fsync'd so that the rename is durable too. Throws RuntimeError ("cannot write FILE: OS message",
// naming the file the failing call was on). A failure before the rename removes the temporary and leaves any
// previous file at `path` as it was.
void ReplaceFileDurably(const std::string& path, const std::string& temporary, const void* data, uint64_t bytes);

}  // namespace tb
