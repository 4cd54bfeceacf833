// The message of the InputError a test's call throws ("" when it throws none): the one line a user would read.
#pragma once

#include <string>

#include "error.h"

namespace tb {

template <typename F>
std::string InputErrorOf(F&& call) {
  try {
    call();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace tb
