#include "toml_reader.h"

#include <cctype>
#include <fstream>
#include <sstream>

#include "error.h"
#include "paths.h"

namespace tb {

int NodeLine(const toml::node& node) { return static_cast<int>(node.source().begin.line); }

std::string At(const std::string& file, int line) { return file + ":" + std::to_string(line) + ": "; }

// "an array", "a date", ...: what a value of the wrong kind is, for its error.
std::string KindOf(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
    default: return "nothing";
  }
}

// The document (toml++, TOML 1.0); a syntax error is "FILE:LINE: not valid TOML: <toml++'s words> (column C)".
toml::table ParseToml(const std::string& text, const std::string& file) {
  try {
    return toml::parse(text, std::string_view(file));
  } catch (const toml::parse_error& e) {
    std::string what(e.description());
    if (!what.empty()) what[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(what[0])));
    throw InputError(At(file, static_cast<int>(e.source().begin.line)) + "not valid TOML: " + what + " (column " +
                     std::to_string(e.source().begin.column) + ")");
  }
}

std::string ReadTextFile(const std::string& path, const std::string& what) {
  const std::string problem = InputFileProblem(path);
  if (!problem.empty()) throw InputError("cannot read " + what + " '" + path + "': " + problem);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read " + what + " '" + path + "': no such file or not readable");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw InputError("cannot read " + what + " '" + path + "': read error");
  return text.str();
}

std::string FieldReader::Text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

}  // namespace tb
