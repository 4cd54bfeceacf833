// Which rank a stuck job waits for: from every rank's state at the moment a watchdog fired (RankProbe), the ranks
// that stayed behind (no answer, or long outside any communication) and the words that name them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "watchdog.h"

namespace tb {

// A WatchdogState as one line (the probe's answer) and back; nullopt for a line that is not one.
std::string EncodeWatchdogState(const WatchdogState& state);
std::optional<WatchdogState> DecodeWatchdogState(const std::string& line);

struct HangDiagnosis {
  std::vector<int> stuck;  // the ranks that stayed behind, in rank order
  std::string text;        // one clause: "stuck: rank 1 (host a) in '...' for 3.1 s, outside communication; ..."
};

// `answers[r]` is rank r's state (nullopt: it did not answer), `hosts[r]` its host. A rank is stuck when it did
// not answer, or when it has been outside communication, in the same place, for at least half the timeout: a rank
// that is running does not stay there while its peers wait a whole timeout for it. When no rank is stuck, every
// rank waits in communication, and the stall is in the communication itself. The ranks in `unreachable` (the probe
// could not reach them when it was set up) are neither: their silence says nothing, and the text counts them. The
// ranks in `cut_off` were reached then and not now (no connection could be made): stuck, and their hosts are named
// as unreachable (a host down, or its link cut).
HangDiagnosis DiagnoseHang(const std::vector<std::optional<WatchdogState>>& answers,
                           const std::vector<std::string>& hosts, double timeout_s,
                           const std::vector<int>& unreachable = {}, const std::vector<int>& cut_off = {});

}  // namespace tb
