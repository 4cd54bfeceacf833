#include "hang_diagnosis.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "mpi_util.h"

namespace tb {

namespace {

constexpr size_t kNamedAtMost = 8;  // stuck ranks named one by one; the rest are counted

std::string Fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string Quoted(const std::string& operation) { return "'" + operation + "'"; }

// Where a stuck rank is, in words; `waited_in` is the one operation the waiting ranks are in ("" when not one).
std::string Whereabouts(const std::optional<WatchdogState>& state, const std::string& waited_in) {
  if (!state) return "did not answer (its process is stopped, or its host unreachable)";
  const std::string place = state->operation == waited_in && !waited_in.empty() ? "in the same operation"
                            : !state->operation.empty()      ? "in " + Quoted(state->operation)
                            : !state->last_operation.empty() ? "outside any guarded operation, after " +
                                                                   Quoted(state->last_operation)
                                                             : "outside any guarded operation, before its first";
  return "outside communication for " + Fixed(state->seconds, 1) + " s, " + place;
}

std::string HostOf(const std::vector<std::string>& hosts, size_t rank) {
  return rank < hosts.size() ? hosts[rank] : "?";
}

}  // namespace

std::string EncodeWatchdogState(const WatchdogState& s) {
  return JoinFields({s.operation, s.last_operation, Fixed(s.seconds, 3), s.in_communication ? "1" : "0"});
}

std::optional<WatchdogState> DecodeWatchdogState(const std::string& line) {
  const std::vector<std::string> fields = SplitFields(line);
  if (fields.size() != 4 || (fields[3] != "0" && fields[3] != "1")) return std::nullopt;
  WatchdogState s;
  s.operation = fields[0];
  s.last_operation = fields[1];
  char* end = nullptr;
  s.seconds = std::strtod(fields[2].c_str(), &end);
  if (end == fields[2].c_str() || *end != '\0') return std::nullopt;
  s.in_communication = fields[3] == "1";
  return s;
}

namespace {

// "; host node1 unreachable (no connection to its ranks: down, or its link cut)" for the hosts of the ranks that no
// connection reached; "" when there are none.
std::string UnreachableHosts(const std::set<int>& lost, const std::vector<std::optional<WatchdogState>>& answers,
                             const std::vector<std::string>& hosts) {
  std::set<std::string> names;
  for (int r : lost) {
    if (static_cast<size_t>(r) < answers.size() && !answers[static_cast<size_t>(r)]) names.insert(HostOf(hosts, static_cast<size_t>(r)));
  }
  if (names.empty()) return "";
  std::string list;
  for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
  return "; host" + std::string(names.size() == 1 ? " " : "s ") + list + " unreachable (no connection to " +
         (names.size() == 1 ? "its" : "their") + " ranks: down, or the link cut)";
}

}  // namespace

HangDiagnosis DiagnoseHang(const std::vector<std::optional<WatchdogState>>& answers,
                           const std::vector<std::string>& hosts, double timeout_s, const std::vector<int>& unreachable,
                           const std::vector<int>& cut_off) {
  const std::set<int> unknown(unreachable.begin(), unreachable.end());
  const std::set<int> lost(cut_off.begin(), cut_off.end());
  auto is_stuck = [&](const std::optional<WatchdogState>& a) {
    return !a || (!a->in_communication && a->seconds >= timeout_s / 2);
  };
  std::map<std::string, int> waiting;  // operation -> ranks waiting in communication there
  for (const std::optional<WatchdogState>& a : answers) {
    if (a && a->in_communication) ++waiting[a->operation.empty() ? "no guarded operation" : a->operation];
  }
  int waiters = 0;
  for (const auto& [operation, count] : waiting) waiters += count;
  const std::string waited_in = waiting.size() == 1 ? waiting.begin()->first : "";
  const std::string where = waited_in.empty() ? "" : " in " + Quoted(waited_in);
  HangDiagnosis d;
  std::string named;
  for (size_t r = 0; r < answers.size(); ++r) {
    if (unknown.contains(static_cast<int>(r)) || !is_stuck(answers[r])) continue;
    d.stuck.push_back(static_cast<int>(r));
    if (d.stuck.size() <= kNamedAtMost) {
      named += (named.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " (" + HostOf(hosts, r) + ") ") +
               (lost.contains(static_cast<int>(r)) && !answers[r] ? "could not be reached" : Whereabouts(answers[r], waited_in));
    }
  }
  const std::string unknowns =
      unknown.empty() ? ""
                      : "; " + std::to_string(unknown.size()) + " rank(s) unknown (the probe could not reach them when "
                        "the measurement began: no port, or a firewall)";
  if (d.stuck.empty() && unknown.empty()) {
    d.text = "no rank stayed behind: all " + std::to_string(answers.size()) + " answered, " +
             std::to_string(waiters) + " waiting in communication" + where +
             ", so the stall is inside the communication (a link, a GPU or the network)";
    return d;
  }
  if (d.stuck.empty()) {
    d.text = "no rank that answered stayed behind: " + std::to_string(waiters) + " of " +
             std::to_string(answers.size()) + " ranks wait in communication" + where + unknowns;
    return d;
  }
  if (d.stuck.size() > kNamedAtMost) named += "; and " + std::to_string(d.stuck.size() - kNamedAtMost) + " more";
  d.text = "stuck: " + named + "; " + std::to_string(waiters) + " of " + std::to_string(answers.size()) +
           " ranks wait in communication" + where + unknowns + UnreachableHosts(lost, answers, hosts);
  return d;
}

}  // namespace tb
