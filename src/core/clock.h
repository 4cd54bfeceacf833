// Monotonic wall clock for host-side phase timing.
#pragma once

#include <chrono>
#include <string>

namespace tb {

inline double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Current UTC time as ISO 8601, e.g. "2026-11-29T21:41:30Z".
std::string UtcNowIso8601();

}  // namespace tb
