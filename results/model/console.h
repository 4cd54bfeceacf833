// Fixed-width console tables in the style of nccl-tests: '#' metadata lines, a header and a units row
// (both prefixed with '#'), then plain data rows that scripts can parse by whitespace.
#pragma once

#include <string>
#include <vector>

namespace tb {

class TextTable {
 public:
  struct ColumnSpec {
    std::string title;  // "busbw"
    std::string unit;   // "(GB/s)", or "" for none
    int width;          // characters, right-aligned
  };

  explicit TextTable(std::vector<ColumnSpec> columns) : columns_(std::move(columns)) {}

  // "#  title title ..." and "#  (unit) (unit) ..." lines (the units line is omitted when no column has one).
  std::vector<std::string> HeaderLines() const;
  // One data row; cells beyond the column count are an error (std::logic_error).
  std::string Row(const std::vector<std::string>& cells) const;

 private:
  std::vector<ColumnSpec> columns_;
};

// printf-style formatting into a std::string.
std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Fixed-point with `decimals`, or "N/A" for NaN.
std::string FormatFixed(double value, int decimals);

}  // namespace tb
