// An uneven alltoallv layout for the tests of Communicator::AllToAllV (MPI at 2 and 4 ranks, NCCL on one GPU): counts
// of 0 to 3 elements that vary with both ranks, no elements at all for the last rank of two or more (a rank that
// receives nothing), and blocks placed in reverse rank order with a gap before each, so that a block written to the
// wrong place, or past its end, shows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tb::test {

// Elements rank `from` sends rank `to` of `n`.
inline size_t UnevenCount(int from, int to, int n) {
  if (n > 1 && to == n - 1) return 0;
  return static_cast<size_t>((3 * from + 5 * to + 1) % 4);
}

// The value of element i of the block `from` sends `to`: small integers, exact in every type the tests use.
inline uint16_t BlockValue(int from, int to, size_t i) {
  return static_cast<uint16_t>(1 + 64 * from + 8 * to + static_cast<int>(i));
}
// What the gaps and a block nobody wrote hold.
constexpr uint16_t kUntouched = 60000;

struct VLayout {
  std::vector<size_t> counts;
  std::vector<size_t> offsets;
  size_t elements = 0;  // the buffer's length, gaps included
};

// Blocks of `counts` in reverse rank order, one element of gap before each.
inline VLayout ReversedWithGaps(std::vector<size_t> counts) {
  VLayout layout;
  layout.offsets.resize(counts.size());
  for (size_t p = counts.size(); p-- > 0;) {
    layout.offsets[p] = layout.elements + 1;
    layout.elements += 1 + counts[p];
  }
  layout.counts = std::move(counts);
  return layout;
}

// This rank's send layout (by destination) or receive layout (by source).
inline VLayout SendLayout(int rank, int n) {
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) counts[static_cast<size_t>(p)] = UnevenCount(rank, p, n);
  return ReversedWithGaps(std::move(counts));
}
inline VLayout RecvLayout(int rank, int n) {
  std::vector<size_t> counts(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) counts[static_cast<size_t>(p)] = UnevenCount(p, rank, n);
  return ReversedWithGaps(std::move(counts));
}

// The send buffer of `rank`: every block's values, the gaps untouched.
template <typename T>
std::vector<T> SendBuffer(const VLayout& layout, int rank) {
  std::vector<T> buffer(layout.elements, static_cast<T>(kUntouched));
  for (size_t p = 0; p < layout.counts.size(); ++p) {
    for (size_t i = 0; i < layout.counts[p]; ++i) {
      buffer[layout.offsets[p] + i] = static_cast<T>(BlockValue(rank, static_cast<int>(p), i));
    }
  }
  return buffer;
}

// What `rank`'s receive buffer must hold afterwards: each source's block at its place, the gaps untouched.
template <typename T>
std::vector<T> ExpectedRecvBuffer(const VLayout& layout, int rank) {
  std::vector<T> buffer(layout.elements, static_cast<T>(kUntouched));
  for (size_t p = 0; p < layout.counts.size(); ++p) {
    for (size_t i = 0; i < layout.counts[p]; ++i) {
      buffer[layout.offsets[p] + i] = static_cast<T>(BlockValue(static_cast<int>(p), rank, i));
    }
  }
  return buffer;
}

}  // namespace tb::test
