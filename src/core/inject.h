// Faults injected on purpose, for testing the checks that must catch them: `--inject KIND` on collectives, p2p
// and train (one parser, so that suite can take it too). Off unless asked; a run with any fault says so in one
// warning line and in its report (root attribute `injected_faults`). The kinds:
//   slow-rank=R:MS    rank R sleeps MS ms in each training step, and before each timed batch of collectives
//   slow-link=A-B:US  every message between ranks A and B is delayed US microseconds (a communicator wrapper)
//   wrong-value=R     rank R corrupts its input of each verified collective run
//   hang=R            rank R blocks for ever in its first collective or point-to-point operation
//   io-stall=MS       every data-loader read is delayed MS ms (train with --data or --data-raw)
// Like fault.h, this is used only by the commands: they pass hooks and wrappers to the benchmarks, which know
// nothing of faults.
#pragma once

#include <string>
#include <vector>

namespace tb {

enum class FaultKind { kSlowRank, kSlowLink, kWrongValue, kHang, kIoStall };

struct InjectedFault {
  FaultKind kind = FaultKind::kHang;
  int rank = -1;       // slow-rank, wrong-value, hang: the rank; slow-link: one end
  int peer = -1;       // slow-link: the other end
  double amount = 0;   // slow-rank and io-stall: milliseconds; slow-link: microseconds
  std::string spec;    // as typed, e.g. "slow-rank=1:300"
};

class InjectionPlan {
 public:
  InjectionPlan() = default;
  explicit InjectionPlan(std::vector<InjectedFault> faults) : faults_(std::move(faults)) {}

  const std::vector<InjectedFault>& faults() const { return faults_; }
  bool empty() const { return faults_.empty(); }
  // The specs joined by commas ("slow-rank=1:300,hang=0"); "" when nothing is injected.
  std::string Describe() const;
  // The first fault of `kind`, or null.
  const InjectedFault* Find(FaultKind kind) const;
  // Totals over the faults of a kind that concern `rank` (or the pair): 0 when none does.
  double SlowRankMs(int rank) const;
  double LinkDelayUs(int rank, int peer) const;
  double IoStallMs() const;
  bool Hangs(int rank) const;
  bool WrongValue(int rank) const;

 private:
  std::vector<InjectedFault> faults_;
};

// "slow-rank", "slow-link", ... as typed.
std::string FaultKindName(FaultKind kind);

// Parses --inject's values (the flag may be repeated; each value is a comma-separated list) for a launch of
// `world_size` ranks. Throws one InputError line naming --inject for an unknown kind, a rank outside the launch,
// an amount that is not a positive decimal number, a link from a rank to itself, or a malformed item.
InjectionPlan ParseInjection(const std::vector<std::string>& values, int world_size);

// Throws InputError naming the first fault `command` cannot inject and the commands that can.
void RequireInjectable(const InjectionPlan& plan, const std::string& command);
// Whether `command` can inject faults of `kind` (the table RequireInjectable checks against).
bool CanInject(FaultKind kind, const std::string& command);

// Sleeps `ms` milliseconds (nothing for ms <= 0).
void SleepMilliseconds(double ms);

// Blocks the calling thread for ever (a watchdog or a signal ends the process).
[[noreturn]] void BlockForever();

}  // namespace tb
