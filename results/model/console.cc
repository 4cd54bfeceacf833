#include "console.h"

#include <cmath>
#include <cstdarg>
#include <stdexcept>

namespace tb {

std::string Format(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  int length = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string text(length > 0 ? static_cast<size_t>(length) : 0, '\0');
  if (length > 0) std::vsnprintf(text.data(), text.size() + 1, format, args);
  va_end(args);
  return text;
}

std::string FormatFixed(double value, int decimals) {
  if (std::isnan(value)) return "N/A";
  return Format("%.*f", decimals, value);
}

std::vector<std::string> TextTable::HeaderLines() const {
  // Data rows start in column 0; the header lines start with '#', so the first column is one narrower.
  std::string titles = "#", units = "#";
  bool any_unit = false;
  for (size_t i = 0; i < columns_.size(); ++i) {
    int width = columns_[i].width - (i == 0 ? 1 : 0);
    titles += Format(" %*s", width, columns_[i].title.c_str());
    units += Format(" %*s", width, columns_[i].unit.c_str());
    any_unit = any_unit || !columns_[i].unit.empty();
  }
  if (!any_unit) return {titles};
  return {titles, units};
}

std::string TextTable::Row(const std::vector<std::string>& cells) const {
  if (cells.size() > columns_.size()) throw std::logic_error("TextTable::Row: more cells than columns");
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    line += Format(" %*s", columns_[i].width, cells[i].c_str());
  }
  return line;
}

}  // namespace tb
