#include "units.h"

#include <cctype>
#include <cstdio>
#include <limits>

#include "error.h"
#include "flags.h"

namespace tb {
namespace {

struct Suffix {
  const char* name;
  uint64_t multiplier;
};

constexpr uint64_t kKi = 1024ULL;
constexpr Suffix kSuffixes[] = {
    {"", 1},         {"B", 1},
    {"K", kKi},      {"KIB", kKi},      {"KB", 1000ULL},
    {"M", kKi * kKi}, {"MIB", kKi * kKi}, {"MB", 1000ULL * 1000},
    {"G", kKi * kKi * kKi}, {"GIB", kKi * kKi * kKi}, {"GB", 1000ULL * 1000 * 1000},
    {"T", kKi * kKi * kKi * kKi}, {"TIB", kKi * kKi * kKi * kKi}, {"TB", 1000ULL * 1000 * 1000 * 1000},
};


}  // namespace

std::string Trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(" \t");
  return text.substr(begin, end - begin + 1);
}

std::vector<std::string> SplitItems(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    items.push_back(Trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

uint64_t ParseSize(const std::string& raw, const std::string& flag) {
  const std::string text = Trim(raw);
  auto invalid = [&](const std::string& why) {
    return InputError("invalid size '" + raw + "' for " + flag + ": " + why +
                      " (expected a whole number with an optional suffix K, M, G, T (x1024), KiB..TiB, or KB..TB (x1000))");
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) throw invalid("no number");
  std::string suffix;
  for (size_t i = digits; i < text.size(); ++i) suffix += static_cast<char>(std::toupper(static_cast<unsigned char>(text[i])));
  uint64_t multiplier = 0;
  for (const Suffix& s : kSuffixes) {
    if (suffix == s.name) multiplier = s.multiplier;
  }
  if (multiplier == 0) throw invalid("unknown suffix '" + text.substr(digits) + "'");
  uint64_t value = 0;
  for (size_t i = 0; i < digits; ++i) {
    uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) throw invalid("too large");
    value = value * 10 + digit;
  }
  if (value > std::numeric_limits<uint64_t>::max() / multiplier) throw invalid("too large");
  if (value == 0) throw invalid("must be at least 1 byte");
  return value * multiplier;
}

std::vector<uint64_t> ParseSizeList(const std::string& text, const std::string& flag) {
  std::vector<uint64_t> sizes;
  for (const std::string& item : SplitFlagList(text, flag)) sizes.push_back(ParseSize(item, flag));
  return sizes;
}

std::string JoinNames(const std::vector<std::string>& names, const char* separator) {
  std::string joined;
  for (const std::string& name : names) joined += (joined.empty() ? "" : separator) + name;
  return joined;
}

std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = bytes;
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  char buffer[64];
  if (unit == 0) {
    std::snprintf(buffer, sizeof buffer, "%.0f B", value);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.4g %s", value, units[unit]);
  }
  return buffer;
}

}  // namespace tb
