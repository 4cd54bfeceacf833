// What p2p and the training's link probe share: a measured phase run by every rank so that barriers match, and a
// buffer touched before anything is timed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "clock.h"
#include "communicator.h"
#include "error.h"
#include "watchdog.h"

namespace tb {

constexpr uint64_t kMessageElementBytes = 4;  // messages are sent as float32

// Throws InputError "invalid FLAG BYTES: the message size must be a positive multiple of 4 bytes (it is sent as
// float32)" + `more` unless `bytes` is one.
inline void CheckMessageSize(uint64_t bytes, const std::string& flag, const std::string& more = "") {
  if (bytes < kMessageElementBytes || bytes % kMessageElementBytes != 0) {
    throw InputError("invalid " + flag + " " + std::to_string(bytes) +
                     ": the message size must be a positive multiple of 4 bytes (it is sent as float32)" + more);
  }
}

// One measured phase: the ranks taking part (`in_pair`) do their warm-up, then all ranks meet, the ranks taking part
// run the timed loop, and all ranks meet again. The idle ranks wait inside the phase, so that a stuck pair is named
// by every rank's watchdog. Returns this rank's seconds for the timed loop, 0 when it took no part.
template <typename Describe, typename Step>
double TimePhase(Communicator& comm, Watchdog* watchdog, const Describe& describe, bool in_pair, int warmup, int timed,
                 const Step& step) {
  Watchdog::Scope guard(watchdog, describe);
  if (in_pair) {
    for (int i = 0; i < warmup; ++i) step();
    comm.Synchronize();
  }
  comm.Barrier();
  double elapsed_s = 0;
  if (in_pair) {
    const double start_s = NowSeconds();
    for (int i = 0; i < timed; ++i) step();
    comm.Synchronize();
    elapsed_s = NowSeconds() - start_s;
  }
  comm.Barrier();
  return elapsed_s;
}

// A buffer of `bytes` (a multiple of 4) filled with 1.0f once, so that host pages are mapped and device memory is
// initialised before anything is timed.
inline std::unique_ptr<CommBuffer> AllocateFilled(Communicator& comm, size_t bytes) {
  std::unique_ptr<CommBuffer> buffer = comm.Allocate(bytes);
  std::vector<float> fill(bytes / sizeof(float), 1.0f);
  comm.Upload(*buffer, fill.data(), bytes);
  return buffer;
}

}  // namespace tb
