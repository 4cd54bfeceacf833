#include "io_tables.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "schema.h"

namespace tb {

namespace {

namespace c = schema::io_point::checkpoints;

template <typename T>
const T* Row(const std::vector<T>* column, size_t row) {
  return column != nullptr && row < column->size() ? &(*column)[row] : nullptr;
}

}  // namespace

double CheckpointSummary::write_GBps() const { return write_s > 0 ? bytes / write_s / 1e9 : std::nan(""); }

std::map<int64_t, CheckpointSummary> CheckpointsOf(const Table& slices) {
  std::map<int64_t, CheckpointSummary> by_step;
  const auto* step = schema::Values(slices, c::step);
  if (step == nullptr) return by_step;
  const auto* mode = schema::Values(slices, c::mode);
  const auto* error = schema::Values(slices, c::error);
  const auto* bytes = schema::Values(slices, c::bytes);
  const auto* stall_s = schema::Values(slices, c::stall_s);
  const auto* write_s = schema::Values(slices, c::write_s);
  const auto* verified = schema::Values(slices, c::verified);
  const auto* ok = schema::Values(slices, c::ok);
  const auto* copy_s = schema::Values(slices, c::copy_s);
  const auto* crc_s = schema::Values(slices, c::crc_s);
  const auto* write_calls_s = schema::Values(slices, c::write_calls_s);
  const auto* commit_s = schema::Values(slices, c::commit_s);
  auto value = [](const std::vector<double>* column, size_t r) { return Row(column, r) ? *Row(column, r) : NAN; };
  for (size_t r = 0; r < step->size(); ++r) {
    CheckpointSummary& ck = by_step[(*step)[r]];
    const bool first = ck.ranks++ == 0;
    if (first && Row(mode, r)) ck.mode = *Row(mode, r);
    if (Row(bytes, r)) ck.bytes += *Row(bytes, r);
    if (Row(stall_s, r)) ck.stall_s = std::max(ck.stall_s, *Row(stall_s, r));
    if (Row(write_s, r) && (first || *Row(write_s, r) > ck.write_s)) {
      ck.write_s = *Row(write_s, r);
      ck.copy_s = value(copy_s, r);
      ck.crc_s = value(crc_s, r);
      ck.write_calls_s = value(write_calls_s, r);
      ck.commit_s = value(commit_s, r);
    }
    ck.verified = ck.verified && Row(verified, r) && *Row(verified, r) == 1;
    ck.ok = ck.ok && Row(ok, r) && *Row(ok, r) == 1;
    if (ck.error.empty() && Row(error, r)) ck.error = *Row(error, r);
  }
  return by_step;
}

CheckpointTotals CheckpointTotalsOf(const Table& slices) {
  CheckpointTotals totals;
  double seconds = 0;
  for (const auto& [step, ck] : CheckpointsOf(slices)) {
    totals.bytes += ck.bytes;
    seconds += ck.write_s;
  }
  if (seconds > 0) totals.write_GBps = static_cast<double>(totals.bytes) / seconds / 1e9;
  return totals;
}

double CheckpointWriteGBps(const Table& slices) { return CheckpointTotalsOf(slices).write_GBps; }

LoaderTotals LoaderTotalsOf(const Table& loader) {
  namespace l = schema::io_point::loader;
  const auto* bytes = schema::Values(loader, l::bytes_read);
  const auto* read_s = schema::Values(loader, l::read_s);
  LoaderTotals totals;
  if (bytes == nullptr || read_s == nullptr) return totals;
  double seconds = 0;
  totals.bytes = 0;
  for (double b : *bytes) totals.bytes += b;
  for (double s : *read_s) seconds += s;
  if (seconds > 0) totals.per_read_MBps = totals.bytes / seconds / 1e6;
  return totals;
}

}  // namespace tb
