#include "inject.h"

#include <chrono>
#include <algorithm>
#include <cstdlib>
#include <thread>
#include <utility>

#include "error.h"
#include "flags.h"
#include "units.h"

namespace tb {
namespace {

// Far past any useful delay (1e7 ms is 2.8 hours), and far inside what the sleeps' clocks hold.
constexpr double kMaxAmount = 1e7;

// Each kind once: its name, its form and the commands that can inject it.
struct KindSpec {
  FaultKind kind;
  std::string name;
  std::string form;
  std::vector<std::string> commands;
};

const std::vector<KindSpec>& Kinds() {
  static const std::vector<KindSpec> kinds = {
      {FaultKind::kSlowRank, "slow-rank", "slow-rank=R:MS", {"collectives", "train", "suite"}},
      {FaultKind::kSlowLink, "slow-link", "slow-link=A-B:US", {"collectives", "p2p", "train", "suite"}},
      {FaultKind::kWrongValue, "wrong-value", "wrong-value=R", {"collectives", "suite"}},
      {FaultKind::kHang, "hang", "hang=R", {"collectives", "p2p", "train", "suite"}},
      {FaultKind::kIoStall, "io-stall", "io-stall=MS", {"train", "suite"}},
  };
  return kinds;
}

const KindSpec& SpecOf(FaultKind kind) {
  for (const KindSpec& spec : Kinds()) {
    if (spec.kind == kind) return spec;
  }
  throw std::logic_error("FaultKind without a KindSpec");
}

[[noreturn]] void Bad(const std::string& spec, const std::string& why) {
  throw InputError("--inject '" + spec + "': " + why);
}

int ParseRank(const std::string& text, const std::string& spec, int world_size) {
  if (!IsDecimalNumber(text, false) || text.size() > 10) Bad(spec, "'" + text + "' is not a rank (a decimal integer)");
  const long long rank = std::strtoll(text.c_str(), nullptr, 10);
  if (rank < 0 || rank >= world_size) {
    Bad(spec, "rank " + text + " is outside this launch's " + std::to_string(world_size) + " ranks (0.." +
                  std::to_string(world_size - 1) + ")");
  }
  return static_cast<int>(rank);
}

double ParseAmount(const std::string& text, const std::string& spec, const std::string& unit) {
  const std::string accepted = " (accepted: a decimal number of " + unit + " in (0, 1e7])";
  if (!IsDecimalNumber(text, true)) Bad(spec, "'" + text + "' is not a decimal number" + accepted);
  const double value = std::strtod(text.c_str(), nullptr);
  if (!(value > 0 && value <= kMaxAmount)) Bad(spec, "'" + text + "' is out of range" + accepted);
  return value;
}

// `text` split at the first `separator`; both halves must be there.
std::pair<std::string, std::string> SplitAt(const std::string& text, char separator, const std::string& spec,
                                            const KindSpec& kind) {
  const size_t at = text.find(separator);
  if (at == std::string::npos) Bad(spec, "expected " + kind.form);
  return {text.substr(0, at), text.substr(at + 1)};
}

std::vector<std::string> Forms() {
  std::vector<std::string> forms;
  for (const KindSpec& kind : Kinds()) forms.push_back(kind.form);
  return forms;
}

InjectedFault ParseOne(const std::string& spec, int world_size) {
  const size_t equals = spec.find('=');
  const std::string name = spec.substr(0, equals);
  const KindSpec* kind = nullptr;
  for (const KindSpec& candidate : Kinds()) {
    if (candidate.name == name) kind = &candidate;
  }
  if (!kind) Bad(spec, "unknown kind '" + name + "' (accepted: " + JoinNames(Forms(), ", ") + ")");
  if (equals == std::string::npos) Bad(spec, "expected " + kind->form);
  const std::string value = spec.substr(equals + 1);
  InjectedFault fault;
  fault.kind = kind->kind;
  fault.spec = spec;
  if (kind->kind == FaultKind::kSlowRank) {
    const auto [rank, ms] = SplitAt(value, ':', spec, *kind);
    fault.rank = ParseRank(rank, spec, world_size);
    fault.amount = ParseAmount(ms, spec, "milliseconds");
  } else if (kind->kind == FaultKind::kSlowLink) {
    const auto [ends, us] = SplitAt(value, ':', spec, *kind);
    const auto [a, b] = SplitAt(ends, '-', spec, *kind);
    fault.rank = ParseRank(a, spec, world_size);
    fault.peer = ParseRank(b, spec, world_size);
    if (fault.rank == fault.peer) Bad(spec, "a link joins two different ranks (A != B)");
    fault.amount = ParseAmount(us, spec, "microseconds");
  } else if (kind->kind == FaultKind::kIoStall) {
    fault.amount = ParseAmount(value, spec, "milliseconds");
  } else {
    fault.rank = ParseRank(value, spec, world_size);
  }
  return fault;
}

}  // namespace

std::string FaultKindName(FaultKind kind) { return SpecOf(kind).name; }

InjectionPlan ParseInjection(const std::vector<std::string>& values, int world_size) {
  std::vector<InjectedFault> faults;
  for (const std::string& value : values) {
    for (const std::string& spec : SplitFlagList(value, "--inject")) faults.push_back(ParseOne(spec, world_size));
  }
  return InjectionPlan(std::move(faults));
}

bool CanInject(FaultKind kind, const std::string& command) {
  const std::vector<std::string>& commands = SpecOf(kind).commands;
  return std::find(commands.begin(), commands.end(), command) != commands.end();
}

void RequireInjectable(const InjectionPlan& plan, const std::string& command) {
  for (const InjectedFault& fault : plan.faults()) {
    const std::vector<std::string>& commands = SpecOf(fault.kind).commands;
    if (CanInject(fault.kind, command)) continue;
    throw InputError("--inject '" + fault.spec + "': " + command + " cannot inject " + FaultKindName(fault.kind) +
                     " (it applies to " + JoinNames(commands, ", ") + ")");
  }
}

std::string InjectionPlan::Describe() const {
  std::vector<std::string> specs;
  for (const InjectedFault& fault : faults_) specs.push_back(fault.spec);
  return JoinNames(specs, ",");
}

const InjectedFault* InjectionPlan::Find(FaultKind kind) const {
  for (const InjectedFault& fault : faults_) {
    if (fault.kind == kind) return &fault;
  }
  return nullptr;
}

double InjectionPlan::SlowRankMs(int rank) const {
  double ms = 0;
  for (const InjectedFault& f : faults_) ms += f.kind == FaultKind::kSlowRank && f.rank == rank ? f.amount : 0;
  return ms;
}

double InjectionPlan::LinkDelayUs(int rank, int peer) const {
  double us = 0;
  for (const InjectedFault& f : faults_) {
    const bool on_link = (f.rank == rank && f.peer == peer) || (f.rank == peer && f.peer == rank);
    us += f.kind == FaultKind::kSlowLink && on_link ? f.amount : 0;
  }
  return us;
}

double InjectionPlan::IoStallMs() const {
  double ms = 0;
  for (const InjectedFault& f : faults_) ms += f.kind == FaultKind::kIoStall ? f.amount : 0;
  return ms;
}

bool InjectionPlan::Hangs(int rank) const {
  for (const InjectedFault& f : faults_) {
    if (f.kind == FaultKind::kHang && f.rank == rank) return true;
  }
  return false;
}

bool InjectionPlan::WrongValue(int rank) const {
  for (const InjectedFault& f : faults_) {
    if (f.kind == FaultKind::kWrongValue && f.rank == rank) return true;
  }
  return false;
}

void SleepMilliseconds(double ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

void BlockForever() {
  while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace tb
