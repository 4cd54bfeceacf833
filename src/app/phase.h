// A measurement phase: collectives, p2p or train. Each declares its own options once, checks them against the
// launch before any work, and measures on a communicator into a CommandRun's report. Run alone it is the command
// of the same name (RunPhaseCommand); `trainbench suite` runs several in one launch into one report.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "communicator.h"
#include "flags.h"
#include "inject.h"

namespace tb {

// How a phase's measurement ended, when it did not throw.
struct PhaseResult {
  bool interrupted = false;  // a stop signal cut it short
  std::string failure;       // "" when it measured; else why the measurement is wrong (one line)
};

class Phase {
 public:
  virtual ~Phase() = default;
  // "collectives", as the command and the report's config prefix name it.
  virtual std::string name() const = 0;
  // "the collectives sweep": what a report reads as "did not finish: interrupted during ...".
  virtual std::string activity() const = 0;
  virtual std::string usage() const = 0;
  // The phase's own options (not --inject nor the common ones), bound to the phase's members.
  virtual void AddOptions(po::options_description& options) = 0;
  virtual std::vector<FlagRule> Rules() const { return {}; }
  // Checks the parsed options against the launch and records what it resolves (`run.RecordAsUsed`). Every rank,
  // agreed by the caller; `faults` are the launch's injected faults, which the phase keeps for its measurement.
  virtual void Configure(CommandRun& run, const InjectionPlan& faults) = 0;
  // The part of Configure that reads no input file (train: the model and its shape against the launch, the layout,
  // the memory), for a suite to refuse a bad profile before it writes the dataset the phase reads. Agreed.
  virtual void ConfigureShape(CommandRun&) {}
  // A check that reads much (train's dataset checksums), run once every option is known to be good; agreed.
  virtual void Verify(CommandRun&) {}
  // Measures into `run`'s report. Collective over `comm` (which carries the injected communicator faults).
  virtual PhaseResult Measure(CommandRun& run, Communicator& comm) = 0;
};

std::unique_ptr<Phase> MakeCollectivesPhase(const RankContext& ctx);
std::unique_ptr<Phase> MakeP2pPhase(const RankContext& ctx);
std::unique_ptr<Phase> MakeTrainPhase(const RankContext& ctx);
// The vocabulary of the model a train phase's parsed options name: what a dataset written for it may hold.
int64_t TrainPhaseVocab(const Phase& train);

// `trainbench <phase>`: parses the phase's options with --inject and the common ones, configures and verifies it
// (agreed; bad input ends here with code 2), measures, and finishes the report. A PhaseResult failure is
// recorded in the report and printed as one line, and the exit code is 1.
int RunPhaseCommand(const CommandInput& input, Phase& phase);

}  // namespace tb
