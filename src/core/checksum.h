// CRC-32C (Castagnoli), the checksum of token shards and checkpoint files: the polynomial iSCSI, ext4 and
// Google's storage formats use, with SSE4.2's crc32 instruction where the CPU has it (several GB/s per core)
// and a table-driven fallback elsewhere. Same value either way; Crc32c("123456789") = 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tb {

// The CRC-32C of `bytes` bytes at `data`, continuing from `crc` (the value returned for the bytes before; 0 to
// start). Crc32c(b, m + n) == Crc32c(b + m, n, Crc32c(b, m)).
uint32_t Crc32c(const void* data, size_t bytes, uint32_t crc = 0);

}  // namespace tb
