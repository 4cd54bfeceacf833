// AdamW's ranges as the one-launch kernel reads them (kernels.h's AdamWPlan): a table built on the host once, and the
// lookup of a block's range, both plain code (TB_HOST_DEVICE) so that the CPU tests check them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "element_math.h"
#include "transformer.h"

namespace tb::gpu {

// Elements one block of the AdamW kernel updates: 256 threads, 4 elements (one 16-byte load of each buffer) each,
// 4 times over.
inline constexpr uint64_t kAdamWElementsPerBlock = 4096;

// No default member initializers: the kernel keeps one in __shared__ memory, which takes only trivially constructible
// types.
struct AdamWTableEntry {
  uint64_t offset;       // into the parameter and gradient buffers (and the bf16 copy)
  uint64_t moment;       // into the moment buffers
  uint64_t count;        // elements
  uint64_t first_block;  // of the launch; the range has ceil(count / kAdamWElementsPerBlock) blocks
  uint32_t decay;        // weight decay applies
  uint32_t vector;       // offset and moment are multiples of 4: 16-byte loads of both
};

// The table of `ranges`, whose moments lie at offset - moment_offset. A range whose offset and moment offset agree
// modulo 4 but are not multiples of 4 gives a short scalar head (up to the next multiple of 4) and a vector rest;
// one whose offsets disagree stays scalar. Empty ranges are dropped. The last entry's first_block + its blocks is the
// launch's grid.
inline std::vector<AdamWTableEntry> MakeAdamWTable(const std::vector<AdamWRange>& ranges, size_t moment_offset) {
  std::vector<AdamWTableEntry> table;
  uint64_t blocks = 0;
  auto add = [&](uint64_t offset, uint64_t count, bool decay, bool vector) {
    if (count == 0) return;
    table.push_back({offset, offset - moment_offset, count, blocks, decay ? 1u : 0u, vector ? 1u : 0u});
    blocks += (count + kAdamWElementsPerBlock - 1) / kAdamWElementsPerBlock;
  };
  for (const AdamWRange& range : ranges) {
    const uint64_t moment = range.offset - moment_offset;
    if (range.offset % 4 != moment % 4) {
      add(range.offset, range.count, range.decay, false);
      continue;
    }
    const uint64_t head = std::min<uint64_t>((4 - range.offset % 4) % 4, range.count);
    add(range.offset, head, range.decay, false);
    add(range.offset + head, range.count - head, range.decay, true);
  }
  return table;
}

// The launch's block count for `table`.
inline uint64_t AdamWBlocks(const std::vector<AdamWTableEntry>& table) {
  if (table.empty()) return 0;
  const AdamWTableEntry& last = table.back();
  return last.first_block + (last.count + kAdamWElementsPerBlock - 1) / kAdamWElementsPerBlock;
}

// The entry of `table` (`entries` long, first_block ascending from 0) that block `block` of the launch updates: the
// last whose first_block is at most `block`.
TB_HOST_DEVICE inline uint64_t FindAdamWEntry(const AdamWTableEntry* table, uint64_t entries, uint64_t block) {
  uint64_t low = 0, high = entries;  // table[low].first_block <= block < table[high].first_block (high: past the end)
  while (high - low > 1) {
    const uint64_t middle = low + (high - low) / 2;
    if (table[middle].first_block <= block) {
      low = middle;
    } else {
      high = middle;
    }
  }
  return low;
}

}  // namespace tb::gpu
