// What every command shares: common flags, option parsing that turns every mistake into one InputError
// line, the runtime context, the report header, stop-signal agreement, the watchdog and the final write.
#pragma once

#include <boost/program_options.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "communicator.h"
#include "context.h"
#include "error.h"
#include "schema.h"
#include "flags.h"
#include "gpu_health.h"
#include "hang_diagnosis.h"
#include "inject.h"
#include "rank_probe.h"
#include "report.h"
#include "signals.h"
#include "topology.h"
#include "watchdog.h"

namespace tb {

namespace po = boost::program_options;

struct CommonOptions {
  std::string backend = "auto";  // auto | cpu | cuda
  std::string output;            // report path; empty = no report
  double timeout_s = 600;        // watchdog; 0 disables
  bool quiet = false;
};

// Adds --backend, -o/--output, --timeout, --quiet, -h/--help.
void AddCommonOptions(po::options_description& options, CommonOptions& common, bool with_backend = true);

// Adds --emulate-pcie (pcie_emulation.h) to a measuring command's options.
void AddEmulatePcieOption(po::options_description& options, bool* emulate);

// --timeout's ceiling: far past any real operation, and far inside the watchdog clock's int64 nanoseconds.
constexpr double kMaxTimeoutSeconds = 1e7;
// The most repeats `--repeats` takes (train: of each point's measured phase; suite: of its phases).
constexpr int kMaxRepeats = 100;

// How a command line is read beyond its options: the rules between flags, a name for positional words (report
// files; none: a stray word is an error) and where they go, and a place for what was typed.
struct ParseSpec {
  std::vector<FlagRule> rules;
  std::string positional;
  std::vector<std::string>* positional_target = nullptr;
  po::variables_map* given = nullptr;
};

// Parses args (after the command name) into `options`; throws InputError for any parse error, a stray word or a
// broken flag rule. Returns false when --help was given (the help has been printed by rank 0).
bool ParseCommandLine(const std::string& command, const std::vector<std::string>& args,
                      const po::options_description& options, const std::string& usage, const ParseSpec& spec = {});

// One launch of one command.
class CommandRun {
 public:
  CommandRun(std::string command, std::string command_line, CommonOptions common, RankContext ctx);

  const RankContext& ctx() const { return ctx_; }
  const CommonOptions& common() const { return common_; }
  Report& report() { return report_; }
  Group& config() { return schema::GroupOf(report_.root, schema::kConfig); }
  // Records every option of the command in `config`, named as its long flag with dashes as underscores: the value
  // given or its default (a switch as 0/1); a text option neither given nor defaulted as "" (a number without a
  // default is left for the command to record as used). Each flag is thus declared once, in `options`.
  void RecordOptions(const po::options_description& options, const po::variables_map& values);
  // Replaces an option's recorded value by the value as used (`--layers` resolved from the preset, a size in
  // bytes, an alias's canonical name). `option` must be one of the command's options (config name).
  void RecordAsUsed(const std::string& option, AttributeValue value);

  // --inject's faults (inject.h), checked against the launch and this command, recorded as the root's
  // injected_faults ("" when none); when there are any, BeginMeasurement announces them in one warning line.
  InjectionPlan PlanInjection(const std::vector<std::string>& specs);

  // --emulate-pcie, after ResolveBackend and before any communicator: when `emulate`, sets on this rank the NCCL
  // environment that keeps intra-node traffic off NVLink (InputError on the MPI backend, or for a variable already set
  // to a conflicting value); records the root's emulated_fabric and emulated_fabric_environment ("" when not).
  // BeginMeasurement then says so in the header.
  void EmulatePcie(bool emulate);

  // Resolves --backend (collective: every rank must agree), binding a GPU per rank for cuda, and records it.
  // Returns "mpi" or "nccl", as backend() does afterwards.
  std::string ResolveBackend();
  const std::string& backend() const { return backend_; }
  // A communicator over MPI_COMM_WORLD on the resolved backend.
  std::unique_ptr<Communicator> MakeCommunicator();
  // When the last MakeCommunicator returned (NowSeconds): what train reports as the communicator's start-up.
  double communicator_ready_s() const { return communicator_ready_s_; }
  // Names the options RecordOptions and RecordAsUsed record from now on "<prefix><option>" (suite: a phase's
  // options as "collectives.iters"); "" by default.
  void SetConfigPrefix(std::string prefix) { config_prefix_ = std::move(prefix); }

  // Files (or directories of files) this run reads: -o must be none of them.
  void AddInputs(const std::vector<std::string>& paths) { inputs_.insert(inputs_.end(), paths.begin(), paths.end()); }
  // Collective: InputError on every rank when rank 0 cannot write the report path, or it is one of the inputs.
  void CheckOutputWritable();
  // Collective over `comm` (all ranks by default, or the ranks of one scaling point): true on every rank when
  // any of them has received SIGTERM/SIGINT.
  bool StopRequested(MPI_Comm comm = MPI_COMM_WORLD);
  // Gathers the topology and adds it to the report (collective).
  const Topology& GatherTopologyIntoReport();
  // Collective, before the measurement: when any rank has received SIGTERM/SIGINT, one line from rank 0 and
  // AgreedFailure(128+signal) on every rank. Nothing was measured, so no report is written.
  void StopIfSignalledBeforeMeasurement();
  // GatherTopologyIntoReport, then a first write of the report (WriteReportInProgress(phase)), so that a crash
  // during the measurement leaves an honest file. From here on a stop signal marks the report on disk interrupted
  // at once (rank 0, on a thread of its own): a launcher's SIGKILL may come before the step in progress ends.
  const Topology& BeginMeasurement(const std::string& phase);
  // Runs the measurement; a failure is recorded in the report (status failed, its message) as it propagates.
  int RecordingFailures(const std::function<int()>& measurement);
  const Topology& topology() const { return topology_; }

  // The watchdog, whose timeout handler names the operation, aborts `comm` and ends the job.
  Watchdog& watchdog(Communicator* comm);
  // For a communicator that goes before the run ends (a split, a scaling point's): while the scope lives, a timeout
  // aborts `comm`; after it, nothing (MPI_Abort still ends the job).
  class AbortTargetScope {
   public:
    AbortTargetScope(CommandRun& run, Communicator& comm) : run_(run), comm_(&comm) {}
    ~AbortTargetScope() { run_.abort_target_.compare_exchange_strong(comm_, nullptr); }
    AbortTargetScope(const AbortTargetScope&) = delete;
    AbortTargetScope& operator=(const AbortTargetScope&) = delete;

   private:
    CommandRun& run_;
    Communicator* comm_;
  };

  // Rank 0 writes the report with this status (no-op without -o). Phase-boundary writes use "failed" with
  // the reason "did not finish", so that a crash leaves an honest file. When the write fails (disk full), the
  // file this run wrote last stays, its status rewritten to failed with the reason where that still fits, and
  // ReportWriteFailed (one line naming the report and the OS error) is thrown.
  void WriteReportNow(const std::string& status, const std::string& reason);
  // A phase-boundary write while `activity` runs: status failed, "did not finish: interrupted during <activity>",
  // which is what a crash leaves; once a stop signal has come, interrupted, "stopped by SIGTERM during <activity>;
  // ...", which is also what the stop listener writes when the signal comes later.
  void WriteReportInProgress(const std::string& activity);
  // Final status and exit code: complete (0) or interrupted (128+signal).
  int Finish(bool interrupted);

  // GPU health (gpu_health.h), sampled from BeginMeasurement on (use it only after that). RecordGpuHealth
  // (collective; Finish calls it) stops the sampler and adds the gpu_health group; after a failure rank 0 adds its
  // own node's (gpu_health_run.cc).
  GpuHealthSampler& gpu_health() { return *gpu_health_; }
  void RecordGpuHealth();

 private:
  // The highest stop signal any rank of `comm` has received (0: none), agreed under the watchdog.
  int AgreedStopSignal(MPI_Comm comm);
  Watchdog* EnsureWatchdog();
  // Collective (BeginMeasurement): each rank's probe port, from which rank 0 learns after a timeout where every
  // rank is (rank_probe.h); none without a watchdog.
  void StartRankProbe();
  // Rank 0's probe thread, when `rank`'s watchdog fired in `operation`: OnTimeout for it, unless rank 0's own watchdog
  // fires first (OnTimeout runs once).
  [[noreturn]] void OnPeerTimeout(const Watchdog& watchdog, int rank, const std::string& operation);
  // Rank 0: asks every rank where it is, and names those the others wait for.
  HangDiagnosis DiagnoseHangNow() const;
  // The watchdog thread's handler (and rank 0's probe thread's, when another rank's watchdog fired; elapsed_s < 0:
  // unknown here): names the operation and, on rank 0, the ranks the others wait for; records it in the report,
  // aborts the job.
  [[noreturn]] void OnTimeout(const std::string& operation, double elapsed_s);
  // Rank 0: the timeout's line and the stuck ranks into the report file on disk.
  void RecordTimeout(const std::string& what, const std::optional<HangDiagnosis>& diagnosis);
  // Rank 0: status failed and `reason` (and the root text attributes in `more`) in the report file this run last
  // wrote, without touching report_ (which the main thread may be changing). Call with report_mutex_ held. Returns
  // why it could not ("" when done, or when this run has written no file yet).
  std::string RewriteStatusOnDisk(const std::string& reason, const std::map<std::string, std::string>& more = {});
  void RecordGpuHealthOfThisNode();
  // Rank 0's stop listener: the report on disk, when it is a phase-boundary write, becomes interrupted.
  void MarkInterruptedOnDisk(int signal);
  void WriteReport(const std::string& status, const std::string& reason, const std::string& in_progress);

  std::string command_;
  std::string backend_;
  CommonOptions common_;
  RankContext ctx_;
  Report report_;
  std::set<std::string> option_names_;  // config names of the command's options (RecordOptions)
  Topology topology_;
  std::vector<std::string> inputs_;
  std::atomic<Communicator*> abort_target_{nullptr};
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<RankProbe> probe_;      // after BeginMeasurement, with a watchdog
  std::vector<std::string> hosts_;        // rank 0: each rank's host, for naming stuck ranks
  std::atomic<bool> timing_out_{false};   // OnTimeout has begun
  // The main thread's report writes and the watchdog's status rewrite, which run on different threads.
  std::timed_mutex report_mutex_;
  std::string injected_faults_;  // PlanInjection's faults, as typed ("" when none)
  std::string emulated_fabric_;  // EmulatePcie: kEmulatedPcie, or "" for the node's own fabric
  bool report_on_disk_ = false;  // this run has written -o: a status rewrite must not touch another run's file
  double communicator_ready_s_ = 0;
  std::string config_prefix_;
  std::unique_ptr<GpuHealthSampler> gpu_health_;
  bool gpu_health_recorded_ = false;
  std::string in_progress_;  // under report_mutex_: the activity of the report on disk, "" once it is final
  std::unique_ptr<StopSignalListener> stop_listener_;  // rank 0 with -o, from BeginMeasurement; goes first
};

// The report could not be written (rank 0); the message is one line naming the file and the OS error.
class ReportWriteFailed : public RuntimeError {
 public:
  explicit ReportWriteFailed(const std::string& message) : RuntimeError(message) {}
};

// A directory whose every file a command reads as its own (a --history directory: each file a night): no output may
// be written inside it. `why` ends the refusal: "where every file is read as a night".
struct OwnedDirectory {
  std::string path;  // "" when the flag was not given
  std::string flag;  // "--history"
  std::string why;
};

// A validate --history directory (named by `flag`) as an OwnedDirectory.
inline OwnedDirectory HistoryDirectory(const std::string& dir, const std::string& flag = "--history") {
  return {dir, flag, "where every file is read as a night (validate refuses the directory after that)"};
}

// The check every command runs on each file it will write, before any work (the one place for it): InputError
// "refusing to write <flag> '<path>': <why>" when `path` is a FIFO or device or one of `inputs` (paths.h's
// OutputFileProblem), or lies inside one of `owned` (a directory above one is fine); "cannot write <flag> '<path>':
// <why>" when its directory is missing, not a directory, or refuses a new file (report.h's CheckWritable: a
// read-only mount, /proc).
void CheckOutputPath(const std::string& path, const std::string& flag, const std::vector<std::string>& inputs,
                     const std::vector<OwnedDirectory>& owned = {});

// What a run will allocate per rank, estimated before it starts, and what each part is made of.
struct MemoryNeed {
  double host_bytes = 0;
  std::string host_parts;    // "weights 3.6 MiB, ..." for the message
  double device_bytes = 0;   // on the rank's GPU (cuda backend)
  std::string device_parts;
  std::string lower;         // the flags that lower it: "--micro-batch, --seq or --layers"
};

// InputError, before anything is allocated, when `need` cannot fit: device_bytes against the rank's GPU (cuda
// backend), host_bytes times the ranks of this node against the host's physical memory. The message names the
// estimate, its parts and the flags to lower.
void CheckMemoryFits(const CommandRun& run, const MemoryNeed& need);

// AgreeOnFailure (mpi_util.h) over MPI_COMM_WORLD for a setup step: when it failed anywhere, the lowest failing
// rank prints its message (one line) and every rank throws AgreedFailure (error.h) with that rank's exit code.
void AgreeOnSetup(const std::function<void()>& step);

// The setup every command shares, each step agreed across ranks: parse the flags (--help prints and ends
// with code 0), create the run, resolve the backend, then `configure` (validate the command's own flags and
// record them in the config group), then check that the report path is writable.
std::unique_ptr<CommandRun> StartCommand(const std::string& name, const CommandInput& input,
                                         const po::options_description& options, const std::string& usage,
                                         const CommonOptions& common,
                                         const std::function<void(CommandRun&)>& configure,
                                         const std::vector<FlagRule>& rules = {});


}  // namespace tb
