// Parsing and formatting of byte sizes and lists given on the command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tb {

// Parses a byte size: a whole number with an optional suffix. K, M, G, T and KiB, MiB, GiB, TiB are powers of
// 1024 (nccl-tests' convention for -b/-e); KB, MB, GB, TB are powers of 1000. Zero is refused (no size here means
// nothing). Throws InputError naming `flag`.
uint64_t ParseSize(const std::string& text, const std::string& flag);

// `text` without leading and trailing spaces and tabs.
std::string Trim(const std::string& text);

// The items of a comma-separated list, each trimmed; empty items are kept ("a,,b" gives "a", "", "b"), so that
// callers decide what an empty one means (SplitFlagList refuses it).
std::vector<std::string> SplitItems(const std::string& text);

// Parses a comma-separated list of sizes, e.g. "1K,64K,1M" (no empty items).
std::vector<uint64_t> ParseSizeList(const std::string& text, const std::string& flag);

// Joins names for messages: {"sum", "avg"} -> "sum|avg".
std::string JoinNames(const std::vector<std::string>& names, const char* separator = "|");

// "1.5 GiB"-style rendering for messages (binary units).
std::string FormatBytes(double bytes);

}  // namespace tb
