// An io point's tables read back: its checkpoints, from the `checkpoints` table (schema io_point/checkpoints), which
// holds one row per rank's slice (a checkpoint is the slices of one step, written at once), and the loader's totals
// from its `loader` table (a row per rank). train writes the totals into the report from the tables it wrote;
// report and validate read the same functions, so each figure has one definition.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>

#include "report.h"

namespace tb {

struct CheckpointSummary {
  std::string mode, error;  // the first slice's mode; the first error any slice gave
  int64_t ranks = 0, bytes = 0;
  double stall_s = 0, write_s = 0;  // the slowest slice's
  // The stages of the slice that was slowest to write (NaN in reports written before the stages were recorded).
  double copy_s = NAN, crc_s = NAN, write_calls_s = NAN, commit_s = NAN;
  bool verified = true, ok = true;  // every slice's
  // All its bytes over the slowest slice's write time (the slices are written at once), GB/s; NaN without one.
  double write_GBps() const;
};

// The checkpoints by the step they were taken after; a column the table lacks leaves its field at the default,
// except `verified` and `ok`, which are then false. Empty without a step column.
std::map<int64_t, CheckpointSummary> CheckpointsOf(const Table& slices);

// Every checkpoint's bytes (all ranks) and their rate: those bytes over the sum of each checkpoint's slowest slice
// write, GB/s (NaN without any).
struct CheckpointTotals {
  int64_t bytes = 0;
  double write_GBps = NAN;
};
CheckpointTotals CheckpointTotalsOf(const Table& slices);
double CheckpointWriteGBps(const Table& slices);  // CheckpointTotalsOf(slices).write_GBps

// Every rank's bytes read and the per-read rate: those bytes over the sum of every read's time, MB/s. NaN (both)
// when the table lacks bytes_read or read_s; the rate NaN without read time.
struct LoaderTotals {
  double bytes = NAN;
  double per_read_MBps = NAN;
};
LoaderTotals LoaderTotalsOf(const Table& loader);

}  // namespace tb
