// `trainbench suite`: one launch, one report. The topology (what `info` shows), then the profile's phases:
// a collectives sweep, the p2p matrices and training with the data loader reading a dataset the suite writes
// and checkpoints written beside it, once per repeat. A phase that fails is recorded (suite/phases) with its
// reason and the phases after it still run, as long as every rank can go on.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <set>

#include "cli.h"
#include "clock.h"
#include "commands.h"
#include "console.h"
#include "data_generate.h"
#include "error.h"
#include "injecting_communicator.h"
#include "injection.h"
#include "log.h"
#include "mpi_util.h"
#include "paths.h"
#include "phase.h"
#include "schema.h"
#include "signals.h"
#include "suite_profile.h"
#include "units.h"
#include "validate.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

constexpr const char* kUsage =
    "usage: [mpirun -np N] trainbench suite [--profile quick|nightly|FILE.toml] [--repeats N] [--workdir DIR]\n"
    "                                      [--keep-workdir] [--confirm-within S] [--history DIR] [--baseline B.h5]\n"
    "                                      [--policy P.toml] [-o FILE]\n"
    "Runs a profile's phases in one launch into one report: the topology, a collectives sweep (all_reduce,\n"
    "all_gather, reduce_scatter, alltoall, every element verified), the p2p matrices, and training whose data loader\n"
    "reads a dataset the suite writes under --workdir, with checkpoints written there too (storage read and write\n"
    "rates). A phase that fails is recorded with its reason (suite/phases) and the next phases still run; the exit\n"
    "code is then 1. When a figure fails (judged as validate judges it, with the same --history, --baseline and\n"
    "--policy), its phases are measured again before the launch ends (--confirm-within), and validate fails the\n"
    "figure only when the confirmation fails too. Profiles and their keys: launch/suite/README.md; check a report\n"
    "with 'trainbench validate'.";

struct SuiteFlags {
  std::string profile = "quick";
  int repeats = 0;  // 0: the profile's
  std::string workdir;
  bool keep_workdir = false;
  std::vector<std::string> inject;
  double confirm_within_s = 600;  // 0: never measure a failing phase again
  ExpectationFiles expectations;  // validate's --policy, --baseline, --history: what a figure fails against
};

struct PhaseRow {
  std::string phase;
  int64_t repeat = 1;
  std::string status;
  std::string reason;
  double seconds = 0;
};

// How the report's config names a phase's options: train's as train names them (cost and validate read them),
// the others' as "<phase>.<option>".
std::string ConfigPrefix(const std::string& phase) { return phase == "train" ? "" : phase + "."; }

std::unique_ptr<Phase> MakePhase(const std::string& name, const RankContext& ctx) {
  if (name == "collectives") return MakeCollectivesPhase(ctx);
  if (name == "p2p") return MakeP2pPhase(ctx);
  return MakeTrainPhase(ctx);
}

bool HasWord(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

// This run's own directory name: the same on every rank (rank 0's clock and process id).
std::string RunDirectoryName() {
  std::string name;
  int rank = 0;
  TB_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  if (rank == 0) {
    std::string utc = UtcNowIso8601();
    utc.erase(std::remove_if(utc.begin(), utc.end(), [](char c) { return c == '-' || c == ':'; }), utc.end());
    name = "trainbench-suite-" + utc + "-" + std::to_string(::getpid());
  }
  BroadcastString(MPI_COMM_WORLD, name, 0);
  return name;
}

class SuiteCommand {
 public:
  explicit SuiteCommand(const CommandInput& input) : input_(input), run_directory_(RunDirectoryName()) {}
  void Plan();
  int Run();

 private:
  void Configure(CommandRun& r);
  void CheckFaultsApply() const;
  void ParsePhase(CommandRun& r, const std::string& name);
  std::vector<std::string> TrainWords();
  void PrepareWorkdir();
  void ConfigureTrain();
  bool RunRepeat(int repeat, Communicator& comm);
  std::vector<std::string> PhasesToConfirm();
  bool ConfirmFailures(Communicator& comm);
  std::string RepeatLabel(int64_t repeat) const;
  const PhaseRow& RunPhase(Phase& phase, int repeat, Communicator& comm);
  void ConcludeRow(PhaseRow& row, const std::optional<AgreedError>& failure, const PhaseResult& result) const;
  void MoveRepeatGroups(int repeat);
  void RecordSuite();
  void RemoveWorkdir();
  void WatchWorkdir();
  void SetWorkdirInUse(bool in_use);
  void RemoveWorkdirIfIdle();
  int Conclude(bool interrupted);
  std::vector<std::string> SuiteInputs() const;

  const CommandInput& input_;
  std::string run_directory_;
  SuiteFlags f_;
  CommonOptions common_;
  std::unique_ptr<CommandRun> run_;
  SuiteProfile profile_;
  InjectionPlan faults_;
  std::vector<std::unique_ptr<Phase>> phases_;
  std::string workdir_;            // this run's own directory under --workdir
  bool write_data_ = false;        // the suite writes the dataset train reads
  int64_t data_vocab_ = 0;
  double data_write_GBps_ = std::nan("");
  std::vector<PhaseRow> rows_;
  MPI_Comm control_ = MPI_COMM_NULL;  // the phases' outcomes are agreed here, apart from their own traffic
  // Rank 0 removes this run's directory the moment a stop signal comes while nothing reads or writes it (collectives,
  // p2p, between phases): a launcher's SIGKILL may follow before the phase in progress ends (mpirun: 1 s).
  std::mutex workdir_mutex_;
  bool workdir_in_use_ = true;  // under workdir_mutex_: the dataset's write and checks, the train phase
  std::unique_ptr<StopSignalListener> workdir_listener_;  // goes first
};

void SuiteCommand::Plan() {
  po::options_description options("suite options");
  options.add_options()
      ("profile", po::value(&f_.profile)->default_value(f_.profile),
       "quick, nightly (launch/suite/*.toml, built in), or a profile file (.toml)")
      ("repeats", Number(&f_.repeats, IntRange::Between(1, kMaxRepeats)),
       "run the phases N times (default: the profile's [suite] repeats); validate takes the median and the spread")
      ("workdir", po::value(&f_.workdir),
       "where the dataset and checkpoints are written (default: the report's directory, else the current one): "
       "the suite makes a subdirectory of its own there and removes it at the end")
      ("keep-workdir", po::bool_switch(&f_.keep_workdir), "keep the dataset and checkpoints")
      ("confirm-within", Number(&f_.confirm_within_s, RealRange::Between(0, kMaxTimeoutSeconds))->default_value(600),
       "when a figure fails, measure its phases again within this many seconds (each phase at most as long as it "
       "took) before the launch ends; validate fails it only when the confirmation fails too (0: never)")
      ("history", po::value(&f_.expectations.history),
       "validate's history directory (read only): what a figure fails against, for --confirm-within")
      ("baseline", po::value(&f_.expectations.baseline), "validate's baseline report, for --confirm-within")
      ("policy", po::value(&f_.expectations.policy), "validate's policy file, for --confirm-within");
  AddInjectOption(options, &f_.inject);
  AddCommonOptions(options, common_);
  run_ = StartCommand("suite", input_, options, kUsage, common_, [&](CommandRun& r) { Configure(r); });
  try {
    WatchWorkdir();
    PrepareWorkdir();
    run_->StopIfSignalledBeforeMeasurement();  // the dataset's write stops at a signal: nothing is measured then
    AgreeOnSetup([&] { ConfigureTrain(); });
    // The expensive checks (train's dataset checksums) last, once every option is known to be good.
    AgreeOnSetup([&] {
      for (const std::unique_ptr<Phase>& phase : phases_) phase->Verify(*run_);
    });
    run_->StopIfSignalledBeforeMeasurement();
    SetWorkdirInUse(false);
  } catch (const AgreedFailure&) {
    RemoveWorkdir();  // every rank is here: nothing of a run that never started is left behind
    throw;
  }
}

// Every rank, agreed: the profile, the faults, the directory, and each phase's options parsed and checked against
// the launch (train's once the dataset it reads exists: ConfigureTrain).
void SuiteCommand::Configure(CommandRun& r) {
  profile_ = ReadSuiteProfile(f_.profile, r.backend() == "mpi");
  if (f_.repeats > 0) profile_.repeats = f_.repeats;
  r.RecordAsUsed("repeats", int64_t{profile_.repeats});
  faults_ = r.PlanInjection(f_.inject);
  CheckFaultsApply();
  const std::string base = !f_.workdir.empty()     ? f_.workdir
                           : !common_.output.empty() ? fs::path(common_.output).parent_path().string()
                                                     : std::string();
  workdir_ = (fs::path(base.empty() ? "." : base) / run_directory_).string();
  r.RecordAsUsed("workdir", base.empty() ? "." : base);
  for (const std::string& name : profile_.phases) ParsePhase(r, name);
  for (const std::unique_ptr<Phase>& phase : phases_) {
    r.SetConfigPrefix(ConfigPrefix(phase->name()));
    // Train's files are checked once the dataset the suite writes for it exists; its shape now, before the write.
    if (phase->name() == "train") {
      phase->ConfigureShape(r);
    } else {
      phase->Configure(r, faults_);
    }
  }
  r.SetConfigPrefix("");
  // The expectations, read now so that a bad file is bad input before any work (the history's nights of this
  // configuration are chosen once the run has its report: ConfirmFailures).
  ReadValidateInputs(Report{}, f_.expectations);
  r.AddInputs(SuiteInputs());  // the report (-o) must be none of them: StartCommand checks next
}

// The files the suite reads: the expectations, the profile itself (not a built-in one), and train's own dataset and
// checkpoint to resume from.
std::vector<std::string> SuiteCommand::SuiteInputs() const {
  std::vector<std::string> inputs = f_.expectations.Given();
  if (InputFileProblem(f_.profile).empty()) inputs.push_back(f_.profile);  // a file, not a built-in name
  const auto train = profile_.args.find("train");
  const std::vector<std::string> none;
  const std::vector<std::string>& words = train == profile_.args.end() ? none : train->second;
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] == "--data" || words[i] == "--data-raw" || words[i] == "--resume") inputs.push_back(words[i + 1]);
  }
  return inputs;
}

// A fault no phase of the profile can inject would make a clean-looking run of a test that did nothing.
void SuiteCommand::CheckFaultsApply() const {
  for (const InjectedFault& fault : faults_.faults()) {
    const bool applies = std::any_of(profile_.phases.begin(), profile_.phases.end(),
                                     [&](const std::string& phase) { return CanInject(fault.kind, phase); });
    if (!applies) {
      throw InputError("--inject '" + fault.spec + "': profile " + profile_.name + " runs no phase that can inject " +
                       FaultKindName(fault.kind) + " (its phases: " + JoinNames(profile_.phases, ", ") + ")");
    }
  }
}

// The phase's words from the profile, parsed as its command would parse them, and recorded in config.
void SuiteCommand::ParsePhase(CommandRun& r, const std::string& name) {
  std::unique_ptr<Phase> phase = MakePhase(name, input_.ctx);
  po::options_description options(name + " options");
  phase->AddOptions(options);
  const std::vector<std::string> words = name == "train" ? TrainWords() : profile_.args[name];
  po::variables_map values;
  ParseSpec spec;
  spec.rules = phase->Rules();
  spec.given = &values;
  try {
    if (!ParseCommandLine(name, words, options, phase->usage(), spec)) throw InputError("help is not an option");
    if (name == "train" && write_data_) data_vocab_ = TrainPhaseVocab(*phase);
  } catch (const InputError& e) {
    throw InputError("profile " + profile_.name + " [" + name + "]: " + e.what());
  }
  r.SetConfigPrefix(ConfigPrefix(name));
  r.RecordOptions(options, values);
  phases_.push_back(std::move(phase));
}

// Train's words: the profile's, reading the dataset the suite writes and checkpointing into its directory unless
// the profile names its own.
std::vector<std::string> SuiteCommand::TrainWords() {
  std::vector<std::string> words = profile_.args["train"];
  write_data_ = !HasWord(words, "--data") && !HasWord(words, "--data-raw");
  if (write_data_) {
    words.push_back("--data");
    words.push_back((fs::path(workdir_) / "data").string());
  }
  if (HasWord(words, "--checkpoint-every") && !HasWord(words, "--checkpoint-dir")) {
    words.push_back("--checkpoint-dir");
    words.push_back((fs::path(workdir_) / "checkpoints").string());
  }
  return words;
}

// Collective: makes this run's directory and writes the dataset train's loader reads.
void SuiteCommand::PrepareWorkdir() {
  AgreeOnSetup([&] {
    if (input_.ctx.world_rank != 0) return;
    std::error_code ec;
    fs::create_directories(workdir_, ec);
    if (ec) throw InputError("--workdir: cannot create '" + workdir_ + "': " + ec.message());
  });
  if (!write_data_) return;
  const std::string dir = (fs::path(workdir_) / "data").string();
  Print("# trainbench suite: writing " + profile_.data_tokens + " tokens for the training phase's loader to " + dir);
  const double start_s = NowSeconds();
  const DatasetWritten written =
      WriteDataset({dir, profile_.data_tokens, profile_.data_shard_tokens, data_vocab_, 1234}, input_.ctx);
  rows_.push_back({"data", 1, written.complete ? "complete" : "interrupted", "", NowSeconds() - start_s});
  data_write_GBps_ = static_cast<double>(written.bytes) / written.seconds / 1e9;
  Print(Format("# suite: dataset written: %.3f GB in %.2f s, %.3f GB/s", written.bytes / 1e9, written.seconds,
               data_write_GBps_));
}

void SuiteCommand::ConfigureTrain() {
  for (const std::unique_ptr<Phase>& phase : phases_) {
    if (phase->name() != "train") continue;
    run_->SetConfigPrefix("");
    phase->Configure(*run_, faults_);
  }
}

int SuiteCommand::Run() {
  std::unique_ptr<Communicator> comm = WithInjectedFaults(run_->MakeCommunicator(), faults_);
  TB_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &control_));
  return run_->RecordingFailures([&] {
    run_->BeginMeasurement("the suite");
    Print(Format("# trainbench suite: profile %s, phases %s, %d repeat(s), %d ranks on %d nodes, backend %s",
                 profile_.name.c_str(), JoinNames(profile_.phases, ", ").c_str(), profile_.repeats,
                 input_.ctx.world_size, input_.ctx.node_count, run_->backend().c_str()), true);
    bool interrupted = false;
    for (int repeat = 1; repeat <= profile_.repeats && !interrupted; ++repeat) interrupted = RunRepeat(repeat, *comm);
    if (!interrupted) interrupted = ConfirmFailures(*comm);
    RemoveWorkdir();
    MPI_Comm_free(&control_);
    return Conclude(interrupted);
  });
}

// One repeat of every phase. Returns whether a stop signal ended it.
bool SuiteCommand::RunRepeat(int repeat, Communicator& comm) {
  if (repeat > 1) MoveRepeatGroups(repeat - 1);
  for (const std::unique_ptr<Phase>& phase : phases_) {
    if (RunPhase(*phase, repeat, comm).status == "interrupted") return true;
  }
  return false;
}

// The phases to measure again (rank 0 judges the report as validate would; agreed): those with a failing figure,
// in the profile's order, as long as their last durations fit --confirm-within together.
std::vector<std::string> SuiteCommand::PhasesToConfirm() {
  std::string chosen;
  if (input_.ctx.world_rank == 0 && f_.confirm_within_s > 0) {
    std::set<std::string> failing;
    try {
      RecordSuite();
      const Report& report = run_->report();
      for (const Check& c : ValidateReport(report, ReadValidateInputs(report, f_.expectations))) {
        if (c.verdict == Verdict::kFail && !PhaseOfFamily(c.figure.family).empty()) {
          failing.insert(PhaseOfFamily(c.figure.family));
        }
      }
    } catch (const Error& e) {
      Warn(std::string("suite: cannot judge the figures to confirm them: ") + e.what());
    }
    double budget_s = f_.confirm_within_s;
    std::vector<std::string> phases;
    for (const std::string& phase : profile_.phases) {
      const auto last = std::find_if(rows_.rbegin(), rows_.rend(), [&](const PhaseRow& r) { return r.phase == phase; });
      // A phase that failed (an error, wrong elements) has no figure to confirm: its failure stands.
      if (!failing.contains(phase) || last == rows_.rend() || last->status != "complete") continue;
      const double took_s = last->seconds;
      if (took_s > budget_s) {
        Warn(Format("suite: %s failed a check but took %.0f s, more than the %.0f s left of --confirm-within: not "
                    "measured again", phase.c_str(), took_s, budget_s));
        continue;
      }
      budget_s -= took_s;
      phases.push_back(phase);
    }
    chosen = JoinNames(phases, ",");
  }
  BroadcastString(MPI_COMM_WORLD, chosen, 0);
  std::vector<std::string> phases = SplitItems(chosen);
  std::erase(phases, std::string());
  return phases;
}

// The report groups a phase writes besides summary (which every phase adds to).
std::vector<std::string> GroupsOfPhase(const std::string& phase) {
  if (phase == "train") return {"train", "io"};
  return {phase};
}

// Measures the phases with a failing figure again (PhasesToConfirm) into confirm/, the root keeping the first
// measurement. While they run, confirm/ holds the first measurement of those phases (so that a crash loses only the
// phase in progress; such a report's suite/phases row of the confirmation says `running`), the root their new one;
// once done the two swap. Returns whether a stop signal ended it.
bool SuiteCommand::ConfirmFailures(Communicator& comm) {
  const std::vector<std::string> phases = PhasesToConfirm();
  if (phases.empty()) return false;
  Print("# suite: a figure failed: measuring " + JoinNames(phases, ", ") + " again to confirm it", true);
  Group& root = run_->report().root;
  Group& confirm = schema::GroupOf(root, schema::kConfirm);
  std::vector<std::string> moved;
  for (const std::string& phase : phases) {
    for (const std::string& name : GroupsOfPhase(phase)) {
      if (std::unique_ptr<Group> group = root.Release(name)) confirm.Attach(name, std::move(group));
      moved.push_back(name);
    }
  }
  const Group* summary = root.FindChild("summary");
  std::unique_ptr<Group> first_summary = summary ? std::make_unique<Group>(*summary) : nullptr;
  bool interrupted = false;
  for (const std::unique_ptr<Phase>& phase : phases_) {
    if (interrupted || std::find(phases.begin(), phases.end(), phase->name()) == phases.end()) continue;
    interrupted = RunPhase(*phase, schema::suite::kConfirmRepeat, comm).status == "interrupted";
  }
  // The swap: the new measurement (with the summary as it now stands) to confirm/, the first back to the root.
  moved.push_back("summary");
  for (const std::string& name : moved) {
    std::unique_ptr<Group> first = name == "summary" ? std::move(first_summary) : confirm.Release(name);
    if (std::unique_ptr<Group> again = root.Release(name)) confirm.Attach(name, std::move(again));
    if (first) root.Attach(name, std::move(first));
  }
  return interrupted;
}

// " (repeat 2)" with repeats, " (confirmation)" for a phase measured again; "" otherwise.
std::string SuiteCommand::RepeatLabel(int64_t repeat) const {
  if (repeat == schema::suite::kConfirmRepeat) return " (confirmation)";
  return profile_.repeats > 1 ? Format(" (repeat %lld)", static_cast<long long>(repeat)) : "";
}

// Runs one phase; its failure on any rank is agreed over the control communicator, so that every rank records
// it and goes on to the next phase. A rank stuck inside the phase is ended by the watchdog, as alone.
const PhaseRow& SuiteCommand::RunPhase(Phase& phase, int repeat, Communicator& comm) {
  SetWorkdirInUse(phase.name() == "train");  // before the agreement: from here a signal leaves the directory to it
  rows_.push_back({phase.name(), repeat, "running", "", 0});
  if (run_->StopRequested()) {  // a stop signal between phases: the next one does not begin
    rows_.back().status = "interrupted";
    return rows_.back();
  }
  RecordSuite();
  run_->WriteReportInProgress(phase.activity() + RepeatLabel(repeat));
  const double start_s = NowSeconds();
  PhaseResult result;
  const std::optional<AgreedError> failure = AgreeOnFailure(control_, [&] {
    try {
      result = phase.Measure(*run_, comm);
    } catch (const AgreedFailure&) {
      throw;
    } catch (const Error& e) {
      Warn(phase.name() + " failed here: " + e.what());  // said at once: the agreement may never come
      throw;
    }
  });
  SetWorkdirInUse(false);  // every rank is past the phase (the agreement)
  PhaseRow& row = rows_.back();
  row.seconds = NowSeconds() - start_s;
  ConcludeRow(row, failure, result);
  Print(Format("# suite: %s%s: %s in %.1f s%s", phase.name().c_str(), RepeatLabel(repeat).c_str(), row.status.c_str(),
               row.seconds,
               row.reason.empty() ? "" : (": " + row.reason).c_str()), true);
  return row;
}

void SuiteCommand::ConcludeRow(PhaseRow& row, const std::optional<AgreedError>& failure,
                               const PhaseResult& result) const {
  if (failure) {
    row.status = "failed";
    row.reason = (failure->failing_ranks < input_.ctx.world_size ? Format("rank %d: ", failure->rank) : "") +
                 failure->message;
  } else if (result.interrupted) {
    row.status = "interrupted";
  } else if (!result.failure.empty()) {
    row.status = "failed";
    row.reason = result.failure;
  } else {
    row.status = "complete";
  }
}

// Moves the groups of repeat `repeat` (at the root) under repeats/r<repeat>: before repeat r > 1 runs, repeat
// r-1's go there, so that the root always holds the latest repeat and a report cut short stays consistent.
void SuiteCommand::MoveRepeatGroups(int repeat) {
  Group& root = run_->report().root;
  Group& holder = root.Child("repeats").Child("r" + std::to_string(repeat));
  for (const std::string& name : schema::kRepeatGroups) {
    if (std::unique_ptr<Group> group = root.Release(name)) holder.Attach(name, std::move(group));
  }
}

void SuiteCommand::RecordSuite() {
  Group& suite = schema::GroupOf(run_->report().root, schema::kSuite);
  namespace s = schema::suite;
  schema::Set(suite, s::profile, profile_.name);
  schema::Set(suite, s::phase_order, JoinNames(profile_.phases, ","));
  schema::Set(suite, s::repeats, int64_t{profile_.repeats});
  schema::Set(suite, s::workdir, workdir_);
  schema::Set(suite, s::data_write_GBps, data_write_GBps_);
  suite.tables.erase(s::kPhases.name);
  namespace p = s::phases;
  schema::RecordTable<PhaseRow>(s::kPhases)
      .Column(p::phase, [](const PhaseRow& r) { return r.phase; })
      .Column(p::repeat, [](const PhaseRow& r) { return r.repeat; })
      .Column(p::status, [](const PhaseRow& r) { return r.status; })
      .Column(p::reason, [](const PhaseRow& r) { return r.reason; })
      .Column(p::seconds, [](const PhaseRow& r) { return r.seconds; })
      .Write(suite, rows_);
}

// Collective: rank 0 removes this run's directory once every rank is done with it (unless --keep-workdir).
void SuiteCommand::RemoveWorkdir() {
  SleepingBarrier(MPI_COMM_WORLD);
  if (input_.ctx.world_rank != 0) return;
  if (f_.keep_workdir) {
    Print("# suite: kept the dataset and checkpoints in " + workdir_);
    return;
  }
  SetWorkdirInUse(false);  // every rank is done with it
  RemoveWorkdirIfIdle();
}

// Rank 0, unless --keep-workdir: a stop signal removes this run's directory at once while it is not in use (else
// the end of what uses it does: RemoveWorkdir).
void SuiteCommand::WatchWorkdir() {
  if (input_.ctx.world_rank != 0 || f_.keep_workdir) return;
  workdir_listener_ = std::make_unique<StopSignalListener>([this](int) { RemoveWorkdirIfIdle(); });
}

// Rank 0: whether anything may read or write this run's directory from now on. Set before the agreement that lets
// it, cleared after the one that ends it, so that the listener never removes it under a reader.
void SuiteCommand::SetWorkdirInUse(bool in_use) {
  std::lock_guard<std::mutex> lock(workdir_mutex_);
  workdir_in_use_ = in_use;
}

void SuiteCommand::RemoveWorkdirIfIdle() {
  std::lock_guard<std::mutex> lock(workdir_mutex_);
  if (workdir_in_use_) return;
  std::error_code ec;
  fs::remove_all(workdir_, ec);
  if (ec) Warn("could not remove the suite's directory " + workdir_ + ": " + ec.message());
}

// The report's final status: failed (code 1) when any phase failed, naming each; else as Finish says.
int SuiteCommand::Conclude(bool interrupted) {
  RecordSuite();
  std::vector<std::string> failed;
  for (const PhaseRow& row : rows_) {
    if (row.status != "failed") continue;
    failed.push_back(row.phase + RepeatLabel(row.repeat) + ": " + row.reason);
  }
  if (interrupted || failed.empty()) return run_->Finish(interrupted);
  const std::string reason = "phase " + JoinNames(failed, "; phase ");
  run_->RecordGpuHealth();
  run_->WriteReportNow("failed", reason);
  if (input_.ctx.world_rank == 0) ErrorLine("suite: " + reason, false);
  if (!common_.output.empty()) Print("# Report (failed phases): " + common_.output, true);
  return static_cast<int>(ExitCode::kRuntime);
}

}  // namespace

int RunSuiteCommand(const CommandInput& input) {
  SuiteCommand command(input);
  command.Plan();
  return command.Run();
}

}  // namespace tb
