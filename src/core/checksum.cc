#include "checksum.h"

#include <array>
#include <cstring>
#include <vector>

namespace tb {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // CRC-32C, reflected

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

uint32_t TableCrc(const unsigned char* p, size_t n, uint32_t crc) {
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// One stream: each crc32 instruction waits for the previous one's result (3 cycles for 8 bytes).
__attribute__((target("sse4.2"))) uint32_t HardwareCrc(const unsigned char* p, size_t n, uint32_t crc) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof word);
    c = __builtin_ia32_crc32di(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}

// The bytes of each of the three interleaved streams.
constexpr size_t kStreamBytes = 4096;

// The CRC register's update over kStreamBytes zero bytes, a linear map of the 32-bit register, as four byte tables:
// Shift(c) = CRC register after kStreamBytes zeros from register c. Because the register update is linear in the
// register and the data together, crc(c, A B) = Shift_|B|(crc(c, A)) ^ crc(0, B): three streams computed side by
// side from registers (c, 0, 0) join as Shift(Shift(a) ^ b) ^ c.
struct ZeroShift {
  ZeroShift() {
    const std::vector<unsigned char> zeros(kStreamBytes, 0);
    uint32_t basis[32];
    for (int bit = 0; bit < 32; ++bit) basis[bit] = HardwareCrc(zeros.data(), zeros.size(), 1u << bit);
    for (int k = 0; k < 4; ++k) {
      for (uint32_t byte = 0; byte < 256; ++byte) {
        uint32_t image = 0;
        for (int bit = 0; bit < 8; ++bit) {
          if (byte & (1u << bit)) image ^= basis[8 * k + bit];
        }
        table[k][byte] = image;
      }
    }
  }
  uint32_t operator()(uint32_t c) const {
    return table[0][c & 0xFFu] ^ table[1][(c >> 8) & 0xFFu] ^ table[2][(c >> 16) & 0xFFu] ^ table[3][c >> 24];
  }
  uint32_t table[4][256];
};

// Three streams at once hide the instruction's latency: about three times one stream's rate.
__attribute__((target("sse4.2"))) uint32_t InterleavedCrc(const unsigned char* p, size_t n, uint32_t crc) {
  static const ZeroShift shift;
  while (n >= 3 * kStreamBytes) {
    uint64_t a = crc, b = 0, c = 0;
    for (size_t i = 0; i < kStreamBytes; i += 8) {
      uint64_t wa, wb, wc;
      std::memcpy(&wa, p + i, 8);
      std::memcpy(&wb, p + kStreamBytes + i, 8);
      std::memcpy(&wc, p + 2 * kStreamBytes + i, 8);
      a = __builtin_ia32_crc32di(a, wa);
      b = __builtin_ia32_crc32di(b, wb);
      c = __builtin_ia32_crc32di(c, wc);
    }
    crc = shift(shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(c);
    p += 3 * kStreamBytes;
    n -= 3 * kStreamBytes;
  }
  return HardwareCrc(p, n, crc);
}

bool HasHardwareCrc() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32c(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (HasHardwareCrc()) return ~InterleavedCrc(p, bytes, crc);
#endif
  return ~TableCrc(p, bytes, crc);
}

}  // namespace tb
