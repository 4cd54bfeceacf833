// What a run reads and what it writes, on the file system: an input is a regular file (a FIFO would block the read
// forever, a device is no data); an output is new or a regular file, and never one of the run's inputs.
#pragma once

#include <string>
#include <vector>

namespace tb {

// "" when `path` names a regular file (symbolic links followed); else why it is no input: "no such file",
// "it is a directory", "it is a FIFO, not a regular file", or the OS error.
std::string InputFileProblem(const std::string& path);

// ::open(path, O_RDONLY | O_CLOEXEC | flags) that refuses anything but a regular file without blocking on it (the
// open of a FIFO waits for a writer): the descriptor, or -1 with `why` set as InputFileProblem words it and, when
// given, `error_number` set to the call's errno (0 when the file opened but is not a regular file).
int OpenInputFile(const std::string& path, int flags, std::string& why, int* error_number = nullptr);

// "" when `output` may be written: it does not exist, or it is a regular file that is none of `inputs` (device
// and inode compared, so hard and symbolic links count; an input directory stands for every regular file under
// it). Else why not: "it is a FIFO, not a regular file", "it is the input 'D/shard-00000.tbs'".
std::string OutputFileProblem(const std::string& output, const std::vector<std::string>& inputs);

// Whether the file `path` (existing or not) lies in `dir` or below it, after resolving links; false when `dir` does
// not exist. A file in a directory above `dir` is not inside it.
bool FileIsInside(const std::string& path, const std::string& dir);

// Whether two directories overlap: one is the other or lies inside it (after resolving links); false when either
// does not exist yet and cannot be resolved.
bool DirectoriesOverlap(const std::string& a, const std::string& b);

}  // namespace tb
