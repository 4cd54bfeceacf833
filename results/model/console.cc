#include "console.h"

#include <algorithm>
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
  std::string groups = "#", titles = "#", units = "#";
  bool any_group = false, any_unit = false;
  for (size_t i = 0; i < columns_.size(); ++i) {
    int width = columns_[i].width - (i == 0 ? 1 : 0);
    const std::string& group = columns_[i].group;
    if (!group.empty() && (i == 0 || columns_[i - 1].group != group)) {
      groups.resize(titles.size() + 1, ' ');  // the group's heading starts where its first column does
      groups += group;
      any_group = true;
    }
    titles += Format(" %*s", width, columns_[i].title.c_str());
    units += Format(" %*s", width, columns_[i].unit.c_str());
    any_unit = any_unit || !columns_[i].unit.empty();
  }
  std::vector<std::string> lines;
  if (any_group) lines.push_back(groups);
  lines.push_back(titles);
  if (any_unit) lines.push_back(units);
  return lines;
}

std::string TextTable::Row(const std::vector<std::string>& cells) const {
  if (cells.size() > columns_.size()) throw std::logic_error("TextTable::Row: more cells than columns");
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    line += Format(" %*s", columns_[i].width, cells[i].c_str());
  }
  return line;
}

std::vector<std::string> Clauses(const std::string& text) {
  std::vector<std::string> clauses;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find("; ", start);
    end = end == std::string::npos ? text.size() : end + 1;
    clauses.push_back(text.substr(start, end - start));
    start = end;
  }
  return clauses;
}

std::vector<std::string> WrapLines(const std::string& text, const std::string& first, const std::string& rest,
                                   size_t width) {
  return WrapClauses(Clauses(text), first, rest, width);
}

std::vector<std::string> WrapClauses(const std::vector<std::string>& clauses, const std::string& first,
                                     const std::string& rest, size_t width) {
  std::vector<std::string> lines = {first};
  bool line_empty = true;  // nothing after the prefix yet
  auto room = [&] {
    const size_t used = lines.back().size() + (line_empty ? 0 : 1);
    return width > used ? width - used : 0;
  };
  auto append = [&](const std::string& part) {
    lines.back() += (line_empty ? "" : " ") + part;
    line_empty = false;
  };
  auto new_line = [&] {
    lines.push_back(rest);
    line_empty = true;
  };
  const size_t fresh_room = width > rest.size() ? width - rest.size() : 1;
  // Words of a clause too long for a line; a word longer than a line is cut where the line ends.
  auto add_words = [&](const std::string& clause) {
    size_t start = 0;
    while (start < clause.size()) {
      size_t end = clause.find(' ', start);
      if (end == std::string::npos) end = clause.size();
      std::string word = clause.substr(start, end - start);
      start = end + 1;
      if (word.empty()) continue;
      if (word.size() > room() && !line_empty && word.size() <= fresh_room) new_line();
      while (word.size() > room()) {
        const size_t take = std::max<size_t>(room(), line_empty ? 1 : 0);
        if (take > 0) append(word.substr(0, take));
        word.erase(0, take);
        new_line();
      }
      if (!word.empty()) append(word);
    }
  };
  // A clause goes whole onto a line when it fits one, so that a line ends where a thought does.
  for (const std::string& clause : clauses) {
    if (clause.find_first_not_of(' ') == std::string::npos) continue;
    const std::string trimmed = clause.substr(clause.find_first_not_of(' '));
    if (trimmed.size() > room() && !line_empty && trimmed.size() <= fresh_room) new_line();
    if (trimmed.size() <= room()) {
      append(trimmed);
    } else {
      add_words(trimmed);
    }
  }
  return lines;
}

}  // namespace tb
