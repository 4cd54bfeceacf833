// Fixed-width console tables in the style of nccl-tests: '#' metadata lines, a header and a units row
// (both prefixed with '#'), then plain data rows that scripts can parse by whitespace.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tb {

// The width console tables fit in (nccl-tests' table is as wide): DESIGN.md, "Outputs people read".
constexpr size_t kConsoleWidth = 120;

class TextTable {
 public:
  struct ColumnSpec {
    std::string title;  // "busbw"
    std::string unit;   // "(GB/s)", or "" for none
    int width;          // characters, right-aligned
    // A heading over this column and its neighbours of the same group ("out-of-place"), at the start of the first
    // one; "" for none. The group's columns must be as wide as its heading.
    std::string group = "";
  };

  explicit TextTable(std::vector<ColumnSpec> columns) : columns_(std::move(columns)) {}

  // The group headings' line when a column has one, then "#  title title ..." and "#  (unit) (unit) ..." lines (the
  // units line is omitted when no column has one).
  std::vector<std::string> HeaderLines() const;
  // One data row; cells beyond the column count are an error (std::logic_error).
  std::string Row(const std::vector<std::string>& cells) const;

 private:
  std::vector<ColumnSpec> columns_;
};

// `text` in lines of at most `width` characters: the first line starts with `first`, the others with `rest` ("# ",
// "#   "). A clause ("...; ") that fits a line is not broken; the others break at spaces, and a word longer than a line
// (a long path) is cut where the line ends and goes on in the next.
std::vector<std::string> WrapLines(const std::string& text, const std::string& first, const std::string& rest,
                                   size_t width = kConsoleWidth);
// The clauses of `text`: "a; b" -> "a;", " b".
std::vector<std::string> Clauses(const std::string& text);
// WrapLines of text already in clauses (joined by spaces).
std::vector<std::string> WrapClauses(const std::vector<std::string>& clauses, const std::string& first,
                                     const std::string& rest, size_t width = kConsoleWidth);

// printf-style formatting into a std::string.
std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Fixed-point with `decimals`, or "N/A" for NaN.
std::string FormatFixed(double value, int decimals);

}  // namespace tb
