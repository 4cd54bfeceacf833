// JSON output of the commands (`trainbench report --format json`, `trainbench cost --format json`): documents are
// built as nlohmann::ordered_json (keys stay in the order they were added) and written by DumpJson, the one place
// that decides how JSON text looks.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace tb {

using Json = nlohmann::ordered_json;

// `value` as JSON text, indented by `indent` spaces per level (-1: on one line). Doubles in the shortest form that
// reads back as the same double; NaN and infinities as null; strings escaped as JSON requires, UTF-8 passed
// through and invalid UTF-8 replaced by U+FFFD (never an exception).
std::string DumpJson(const Json& value, int indent = 2);

// The value, or null.
template <typename T>
Json JsonOrNull(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

}  // namespace tb
