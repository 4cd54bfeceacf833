#include "cli.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <stdexcept>
#include <sstream>
#include <thread>

#include "build_info.h"
#include "clock.h"
#include "console.h"
#include "device.h"
#include "error.h"
#include "hang_diagnosis.h"
#include "log.h"
#include "marking_communicator.h"
#include "mpi_communicator.h"
#include "mpi_util.h"
#include "nccl_communicator.h"
#include "paths.h"
#include "pcie_emulation.h"
#include "report_view.h"
#include "reporter.h"
#include "schema.h"
#include "signals.h"
#include "topology_section.h"
#include "units.h"

namespace tb {

void AgreeOnSetup(const std::function<void()>& step) {
  const std::optional<AgreedError> failure = AgreeOnFailure(MPI_COMM_WORLD, step);
  if (!failure) return;
  // An error every rank shares (a bad flag) is one untagged line; one rank's own problem names the rank.
  if (failure->self == failure->rank) ErrorLine(failure->message, failure->failing_ranks < failure->ranks);
  throw AgreedFailure(failure->code);
}

void AddCommonOptions(po::options_description& options, CommonOptions& common, bool with_backend) {
  if (with_backend) {
    options.add_options()("backend", Choice(&common.backend, {"auto", "cpu", "cuda"})->default_value("auto"),
                          "cuda (NCCL, device memory) when every rank has a GPU (auto), else cpu (MPI)");
  }
  options.add_options()
      ("output,o", po::value(&common.output), "write the HDF5 report to this file")
      ("timeout", Number(&common.timeout_s, RealRange::Between(0, kMaxTimeoutSeconds))->default_value(600),
       "watchdog: abort the job when one operation takes longer than this many seconds (0 = off)")
      ("quiet", po::bool_switch(&common.quiet), "print only the verdict lines")
      ("help,h", "show this help");
}

void AddEmulatePcieOption(po::options_description& options, bool* emulate) {
  options.add_options()("emulate-pcie", po::bool_switch(emulate),
                        "measure a PCIe node on an NVLink one: NCCL without GPU peer-to-peer and NVLink SHARP "
                        "(NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0), intra-node traffic through PCIe and host memory; "
                        "the report is marked (emulated_fabric); NCCL backend only");
}

namespace {

// An empty text value (`--history ''`, a variable that expanded to nothing) names no file: refused for every text
// flag and positional word alike, instead of being read as "not given". Numbers and choices refuse it in their own
// parsers (flags.h), with the values they accept.
void RefuseEmptyValues(const po::parsed_options& parsed, const po::options_description& options,
                       const std::string& command, const std::string& positional) {
  for (const po::option& option : parsed.options) {
    const po::option_description* described = options.find_nothrow(option.string_key, false);
    const po::value_semantic* semantic = described ? described->semantic().get() : nullptr;
    const bool text = dynamic_cast<const po::typed_value<std::string>*>(semantic) ||
                      dynamic_cast<const po::typed_value<std::vector<std::string>>*>(semantic);
    if (!text || dynamic_cast<const ChoiceValue*>(semantic)) continue;
    for (const std::string& value : option.value) {
      if (!value.empty()) continue;
      if (option.string_key == positional) {
        throw InputError("an empty " + positional + " name (see 'trainbench " + command + " --help')");
      }
      throw InputError("--" + option.string_key + " '': an empty value (give one, or leave the flag out; see " +
                       "'trainbench " + command + " --help')");
    }
  }
}

}  // namespace

bool ParseCommandLine(const std::string& command, const std::vector<std::string>& args,
                      const po::options_description& options, const std::string& usage, const ParseSpec& spec) {
  po::options_description all;
  all.add(options);
  po::positional_options_description positional;
  po::command_line_parser parser(args);
  parser.options(all);
  if (!spec.positional.empty()) {
    all.add_options()(spec.positional.c_str(), po::value<std::vector<std::string>>());
    positional.add(spec.positional.c_str(), -1);
    parser.positional(positional);
  }
  po::variables_map local;
  po::variables_map& values = spec.given ? *spec.given : local;
  try {
    const po::parsed_options parsed = parser.run();
    // Without a positional slot, boost keeps stray words aside instead of refusing them.
    const std::vector<std::string> stray = spec.positional.empty()
        ? po::collect_unrecognized(parsed.options, po::include_positional) : std::vector<std::string>{};
    if (!stray.empty()) {
      throw InputError("unexpected argument '" + stray.front() + "' (every value follows its flag; see 'trainbench " +
                       command + " --help')");
    }
    RefuseEmptyValues(parsed, all, command, spec.positional);
    po::store(parsed, values);
    if (values.count("help")) {
      std::ostringstream text;
      text << usage << "\n\n" << options;
      Print(text.str(), true);
      return false;
    }
    po::notify(values);
  } catch (const po::error& e) {
    throw InputError(std::string(e.what()) + " (see 'trainbench " + command + " --help')");
  }
  CheckFlagRules(values, spec.rules);
  if (!spec.positional.empty() && spec.positional_target) {
    if (values.count(spec.positional)) *spec.positional_target = values[spec.positional].as<std::vector<std::string>>();
  }
  return true;
}

namespace {

// 128 random bits as 32 hex digits: unique to this run (two runs started in the same second differ).
std::string RandomRunId() {
  std::random_device device;
  std::string id;
  for (int i = 0; i < 4; ++i) id += Format("%08x", static_cast<unsigned>(device()));
  return id;
}

}  // namespace

CommandRun::CommandRun(std::string command, std::string command_line, CommonOptions common, RankContext ctx)
    : command_(std::move(command)), common_(std::move(common)), ctx_(std::move(ctx)) {
  SetQuiet(common_.quiet);
  Group& root = report_.root;
  namespace r = schema::root;
  schema::Set(root, r::schema, kReportSchemaName);
  schema::Set(root, r::schema_version, kReportSchemaVersion);
  schema::Set(root, r::tool_version, kToolVersion);
  schema::Set(root, r::git_revision, kGitRevision);
  schema::Set(root, r::command, command_);
  schema::Set(root, r::command_line, command_line);
  schema::Set(root, r::start_utc, UtcNowIso8601());
  schema::Set(root, r::run_id, RandomRunId());
  schema::Set(root, r::n_ranks, ctx_.world_size);
  schema::Set(root, r::n_nodes, ctx_.node_count);
  InstallStopSignalHandlers();
}

namespace {

// "--check-iters" is recorded as "check_iters".
std::string ConfigName(std::string flag) {
  std::replace(flag.begin(), flag.end(), '-', '_');
  return flag;
}

// A parsed option's value as a report attribute; nullopt for a type a report does not hold.
std::optional<AttributeValue> OptionValue(const boost::any& value) {
  if (const auto* text = boost::any_cast<std::string>(&value)) return *text;
  if (const auto* number = boost::any_cast<int>(&value)) return int64_t{*number};
  if (const auto* number = boost::any_cast<int64_t>(&value)) return *number;
  if (const auto* real = boost::any_cast<double>(&value)) return *real;
  if (const auto* flag = boost::any_cast<bool>(&value)) return int64_t{*flag ? 1 : 0};
  if (const auto* list = boost::any_cast<std::vector<std::string>>(&value)) return JoinNames(*list, ",");
  return std::nullopt;
}

}  // namespace

void CommandRun::RecordOptions(const po::options_description& options, const po::variables_map& values) {
  Group& cfg = config();
  for (const auto& option : options.options()) {
    const std::string& flag = option->long_name();
    if (flag == "help") continue;
    const std::string name = config_prefix_ + ConfigName(flag);
    option_names_.insert(name);
    auto it = values.find(flag);
    if (it != values.end() && !it->second.empty()) {
      std::optional<AttributeValue> value = OptionValue(it->second.value());
      if (!value) throw std::logic_error("--" + flag + " holds a value type a report cannot record");
      cfg.Set(name, std::move(*value));
    } else if (dynamic_cast<const po::typed_value<std::string>*>(option->semantic().get()) ||
               dynamic_cast<const po::typed_value<std::vector<std::string>>*>(option->semantic().get())) {
      cfg.Set(name, std::string());
    }
  }
}

void CommandRun::RecordAsUsed(const std::string& option, AttributeValue value) {
  const std::string name = config_prefix_ + option;
  if (!option_names_.contains(name)) {
    throw std::logic_error("report config: '" + name + "' is not an option of " + command_);
  }
  config().Set(name, std::move(value));
}

InjectionPlan CommandRun::PlanInjection(const std::vector<std::string>& specs) {
  InjectionPlan plan = ParseInjection(specs, ctx_.world_size);
  RequireInjectable(plan, command_);
  injected_faults_ = plan.Describe();
  schema::Set(report_.root, schema::root::injected_faults, injected_faults_);
  return plan;
}

void CommandRun::EmulatePcie(bool emulate) {
  std::string environment;
  if (emulate) {
    if (backend_ != "nccl") throw InputError("--emulate-pcie needs the NCCL backend (a GPU build on GPUs)");
    const std::vector<EnvSetting> settings = EmulatedPcieEnvironment(ProcessEnvironment);
    SetEnvironment(settings);
    emulated_fabric_ = kEmulatedPcie;
    environment = DescribeEnvironment(settings);
  }
  schema::Set(report_.root, schema::root::emulated_fabric, emulated_fabric_);
  schema::Set(report_.root, schema::root::emulated_fabric_environment, environment);
}

std::string CommandRun::ResolveBackend() {
  int has_gpu = GpuCount() > 0 ? 1 : 0;
  int all_have_gpu = 0;
  TB_CHECK_MPI(MPI_Allreduce(&has_gpu, &all_have_gpu, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  std::string& backend = backend_;
  if (common_.backend == "cpu") {
    backend = "mpi";
  } else if (common_.backend == "cuda") {
    if (!BuiltWithCuda()) {
      throw InputError("--backend cuda: this trainbench was built without CUDA (reconfigure with -DTRAINBENCH_WITH_CUDA=ON)");
    }
    if (!all_have_gpu) throw InputError("--backend cuda: not every rank has a usable GPU (see 'trainbench info')");
    backend = "nccl";
  } else {
    backend = all_have_gpu ? "nccl" : "mpi";
  }
  if (backend == "nccl") BindRankToGpu(ctx_, true);
  schema::Set(report_.root, schema::root::backend, backend);
  return backend;
}

std::unique_ptr<Communicator> CommandRun::MakeCommunicator() {
  std::unique_ptr<Communicator> comm =
      backend_ == "nccl" ? MakeNcclCommunicator(MPI_COMM_WORLD) : MakeMpiCommunicator(MPI_COMM_WORLD);
  communicator_ready_s_ = NowSeconds();
  return WithCommunicationMarks(std::move(comm));
}

std::unique_ptr<CommandRun> StartCommand(const std::string& name, const CommandInput& input,
                                         const po::options_description& options, const std::string& usage,
                                         const CommonOptions& common,
                                         const std::function<void(CommandRun&)>& configure,
                                         const std::vector<FlagRule>& rules) {
  std::unique_ptr<CommandRun> run;
  AgreeOnSetup([&] {
    ParseSpec spec;
    spec.rules = rules;
    po::variables_map values;
    spec.given = &values;
    if (!ParseCommandLine(name, input.args, options, usage, spec)) throw AgreedFailure(ExitCode::kOk);
    run = std::make_unique<CommandRun>(name, input.command_line, common, input.ctx);
    run->RecordOptions(options, values);
  });
  AgreeOnSetup([&] { run->ResolveBackend(); });
  AgreeOnSetup([&] {
    configure(*run);
    run->CheckOutputWritable();
  });
  run->StopIfSignalledBeforeMeasurement();
  return run;
}

void CheckOutputPath(const std::string& path, const std::string& flag, const std::vector<std::string>& inputs,
                     const std::vector<OwnedDirectory>& owned) {
  const std::string problem = OutputFileProblem(path, inputs);
  if (!problem.empty()) throw InputError("refusing to write " + flag + " '" + path + "': " + problem);
  for (const OwnedDirectory& dir : owned) {
    if (!dir.path.empty() && FileIsInside(path, dir.path)) {
      throw InputError("refusing to write " + flag + " '" + path + "': it is inside " + dir.flag + " '" + dir.path +
                       "', " + dir.why);
    }
  }
  CheckWritable(path, flag == "-o" ? "report" : flag);  // -o writes the report: "cannot write report 'X': ..."
}

void CheckMemoryFits(const CommandRun& run, const MemoryNeed& need) {
  const std::string lower = "; lower " + need.lower;
  if (run.backend() == "nccl" && need.device_bytes > 0) {
    const GpuInfo gpu = QueryGpu(run.ctx().gpu_index);
    if (need.device_bytes > static_cast<double>(gpu.memory_bytes)) {
      throw InputError("the run needs an estimated " + FormatBytes(need.device_bytes) + " of GPU memory per rank (" +
                       need.device_parts + "), more than the " + FormatBytes(gpu.memory_bytes) + " of " + gpu.name +
                       lower);
    }
  }
  const double node = need.host_bytes * run.ctx().local_size;
  const double host = static_cast<double>(PhysicalMemoryBytes());
  if (node > host) {
    throw InputError(Format("the run needs an estimated %s of host memory: %d rank(s) on this node, %s each (%s), "
                            "more than the host's %s", FormatBytes(node).c_str(), run.ctx().local_size,
                            FormatBytes(need.host_bytes).c_str(), need.host_parts.c_str(), FormatBytes(host).c_str()) +
                     lower + " (or run fewer ranks per node)");
  }
}

void CommandRun::CheckOutputWritable() {
  if (common_.output.empty()) return;
  std::string problem;
  if (ctx_.world_rank == 0) {
    try {
      CheckOutputPath(common_.output, "-o", inputs_);
    } catch (const InputError& e) {
      problem = e.what();
    }
  }
  BroadcastString(MPI_COMM_WORLD, problem, 0);  // every rank throws it: one untagged line
  if (!problem.empty()) throw InputError(problem);
}

int CommandRun::AgreedStopSignal(MPI_Comm comm) {
  // A rank that never arrives here (dead or stuck) must not leave the others waiting forever.
  Watchdog::Scope guard(watchdog_.get(), [] { return std::string("agreement on stop signals between measurements"); });
  InCommunication waiting;
  int mine = PendingStopSignal(), any = 0;
  TB_CHECK_MPI(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm));
  return any;
}

bool CommandRun::StopRequested(MPI_Comm comm) { return AgreedStopSignal(comm) != 0; }

void CommandRun::StopIfSignalledBeforeMeasurement() {
  const int signal = AgreedStopSignal(MPI_COMM_WORLD);
  if (signal == 0) return;
  if (ctx_.world_rank == 0) {
    ErrorLine("stopped by " + StopSignalName(signal) + " before the measurement began: nothing measured, no report "
              "written", false);
  }
  throw AgreedFailure(static_cast<ExitCode>(128 + signal));
}

const Topology& CommandRun::GatherTopologyIntoReport() {
  topology_ = GatherTopology(MPI_COMM_WORLD, ctx_);
  if (ctx_.world_rank == 0) {
    AddTopologyToReport(schema::GroupOf(report_.root, schema::kTopology), topology_);
    // Every command's header says it: figures of ranks that must share CPUs are not the cluster's.
    const std::string warning = PlacementWarning(FindSharedCpus(topology_));
    if (!warning.empty()) Print("# warning: " + warning);
  }
  return topology_;
}

const Topology& CommandRun::BeginMeasurement(const std::string& phase) {
  if (!injected_faults_.empty() && ctx_.world_rank == 0) {
    Warn("faults injected on purpose (--inject " + injected_faults_ + "): this run's figures are not a real "
         "measurement");
  }
  GatherTopologyIntoReport();
  if (!emulated_fabric_.empty() && ctx_.world_rank == 0) Print("# " + EmulatedFabricLine(report_));
  StartRankProbe();
  gpu_health_ = std::make_unique<GpuHealthSampler>(ctx_);
  WriteReportInProgress(phase);
  if (ctx_.world_rank == 0 && !common_.output.empty()) {
    stop_listener_ = std::make_unique<StopSignalListener>([this](int signal) { MarkInterruptedOnDisk(signal); });
  }
  return topology_;
}

int CommandRun::RecordingFailures(const std::function<int()>& measurement) {
  try {
    return measurement();
  } catch (const ReportWriteFailed&) {
    throw;  // the report is what failed: WriteReportNow has recorded what it could
  } catch (const Error& e) {
    try {
      RecordGpuHealthOfThisNode();
      WriteReportNow("failed", e.what());
    } catch (const ReportWriteFailed& write) {
      Warn(write.what());  // the run's own failure stays the error line
    }
    throw;
  }
}

Watchdog* CommandRun::EnsureWatchdog() {
  if (!watchdog_) {
    watchdog_ = std::make_unique<Watchdog>(
        common_.timeout_s, [this](const std::string& operation, double elapsed) { OnTimeout(operation, elapsed); });
  }
  return watchdog_.get();
}

Watchdog& CommandRun::watchdog(Communicator* comm) {
  abort_target_ = comm;
  return *EnsureWatchdog();
}

void CommandRun::StartRankProbe() {
  if (common_.timeout_s <= 0 || probe_) return;
  Watchdog* watchdog = EnsureWatchdog();
  for (const RankTopology& rank : topology_.ranks) hosts_.push_back(rank.host);
  probe_ = std::make_unique<RankProbe>(
      MPI_COMM_WORLD, [watchdog] { return EncodeWatchdogState(watchdog->State()); },
      [this, watchdog](int rank, const std::string& operation) { OnPeerTimeout(*watchdog, rank, operation); });
}

void CommandRun::OnPeerTimeout(const Watchdog& watchdog, int rank, const std::string& operation) {
  // Rank 0 waiting in an operation of its own times out in it soon (the ranks' clocks start their operations a
  // little apart): its own line, naming its own operation, is the one to give. Only a rank 0 outside any guarded
  // operation, or one whose watchdog stays silent past this grace, answers for the peer. The peer waits 20 s.
  constexpr double kOwnTimeoutGrace_s = 5;
  const double deadline = NowSeconds() + kOwnTimeoutGrace_s;
  while (!watchdog.State().operation.empty() && NowSeconds() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  OnTimeout("on rank " + std::to_string(rank) + ", " + operation, -1);
}

HangDiagnosis CommandRun::DiagnoseHangNow() const {
  constexpr double kAnswerDeadline_s = 3;
  std::vector<std::optional<WatchdogState>> states;
  std::vector<int> unreachable, cut_off;
  for (const ProbeAnswer& answer : probe_->AskAll(kAnswerDeadline_s)) {
    const int r = static_cast<int>(states.size());
    states.push_back(answer.line ? DecodeWatchdogState(*answer.line) : std::nullopt);
    if (!probe_->Reachable(r)) {
      unreachable.push_back(r);
    } else if (!answer.connected) {
      cut_off.push_back(r);
    }
  }
  return DiagnoseHang(states, hosts_, common_.timeout_s, unreachable, cut_off);
}

void CommandRun::OnTimeout(const std::string& operation, double elapsed_s) {
  // The watchdog and a peer's word (rank 0's probe thread) may both come: the first ends the job.
  if (timing_out_.exchange(true)) BlockForever();
  std::string what = "timeout: " + operation + " did not complete within " + Format("%g", common_.timeout_s) + " s" +
                     (elapsed_s >= 0 ? " (waited " + Format("%.1f", elapsed_s) + " s)" : "") +
                     " on a communicator of " + std::to_string(ctx_.world_size) + " ranks";
  std::optional<HangDiagnosis> diagnosis;
  if (ctx_.world_rank == 0 && probe_) {
    diagnosis = DiagnoseHangNow();
    what += "; " + diagnosis->text;
  }
  ErrorLine(what + "; aborting the job. HINT: a rank may be stuck or dead; look for its own error above, or raise "
                   "--timeout for very large sizes");
  if (ctx_.world_rank == 0) {
    RecordTimeout(what, diagnosis);
  } else {
    // Rank 0 may be stuck outside any guarded operation, its own watchdog silent: it is told. The other ranks
    // stuck in the same operation time out at about the same moment: give rank 0 the time to ask every rank and
    // record the reason before this abort ends it (its probe, 3 s, its wait for the lock, 10 s, and the rewrite on
    // a busy machine). When rank 0 is done sooner, its MPI_Abort ends this rank first.
    constexpr double kTellDeadline_s = 2, kReportGrace_s = 20;
    if (probe_) probe_->TellRoot(operation, kTellDeadline_s);
    std::this_thread::sleep_for(std::chrono::duration<double>(kReportGrace_s));
  }
  if (Communicator* target = abort_target_.load()) target->Abort();
  MPI_Abort(MPI_COMM_WORLD, static_cast<int>(ExitCode::kRuntime));
  std::abort();  // MPI_Abort does not return
}

void CommandRun::RecordTimeout(const std::string& what, const std::optional<HangDiagnosis>& diagnosis) {
  std::map<std::string, std::string> stuck;
  if (diagnosis) {
    std::vector<std::string> ranks;
    for (int rank : diagnosis->stuck) ranks.push_back(std::to_string(rank));
    stuck[schema::root::stuck_ranks.name] = JoinNames(ranks, ",");
  }
  // A write in progress on the main thread finishes first; one that hangs (stuck storage) is not waited for.
  std::unique_lock<std::timed_mutex> lock(report_mutex_, std::chrono::seconds(10));
  const std::string problem = lock.owns_lock() ? RewriteStatusOnDisk(what + "; the job was aborted", stuck)
                                               : "a report write on the main thread did not finish";
  if (lock.owns_lock()) in_progress_.clear();  // failed it stays, whatever signal comes
  if (!problem.empty()) Warn("the report keeps its earlier status: " + problem);
}

std::string CommandRun::RewriteStatusOnDisk(const std::string& reason, const std::map<std::string, std::string>& more) {
  if (common_.output.empty() || !report_on_disk_) return "";
  try {
    RewriteReportStatus(common_.output, "failed", reason, UtcNowIso8601(), more);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

namespace {

// A report's status reason when a stop signal came while `activity` ran and the report on disk is the one written
// when it began.
std::string StoppedDuring(int signal, const std::string& activity) {
  return "stopped by " + StopSignalName(signal) + " during " + activity +
         "; the report as of the phase boundary before it";
}

}  // namespace

void CommandRun::WriteReportNow(const std::string& status, const std::string& reason) {
  WriteReport(status, reason, "");
}

void CommandRun::WriteReportInProgress(const std::string& activity) {
  if (const int signal = PendingStopSignal()) {
    WriteReport("interrupted", StoppedDuring(signal, activity), activity);
  } else {
    WriteReport("failed", "did not finish: interrupted during " + activity, activity);
  }
}

void CommandRun::MarkInterruptedOnDisk(int signal) {
  // A write in progress on the main thread finishes first; one that hangs (stuck storage) is not waited for.
  std::unique_lock<std::timed_mutex> lock(report_mutex_, std::chrono::seconds(10));
  if (!lock.owns_lock() || in_progress_.empty() || !report_on_disk_) return;
  try {
    RewriteReportStatus(common_.output, "interrupted", StoppedDuring(signal, in_progress_), UtcNowIso8601());
  } catch (const std::exception& e) {
    Warn(std::string("the report keeps its earlier status: ") + e.what());
  }
}

void CommandRun::WriteReport(const std::string& status, const std::string& reason, const std::string& in_progress) {
  if (common_.output.empty() || ctx_.world_rank != 0) return;
  std::lock_guard<std::timed_mutex> lock(report_mutex_);
  schema::Set(report_.root, schema::root::status, status);
  schema::Set(report_.root, schema::root::status_reason, reason);
  schema::Set(report_.root, schema::root::end_utc, UtcNowIso8601());
  try {
    Hdf5Reporter hdf5(common_.output);
    hdf5.ReportContext({command_, inputs_});
    hdf5.ReportRuns(report_);
    hdf5.Finalize();
    report_on_disk_ = true;
    in_progress_ = in_progress;
  } catch (const RuntimeError& e) {
    if (!report_on_disk_) throw ReportWriteFailed(e.what());
    in_progress_.clear();  // the file on disk is now marked failed: a stop signal does not change that
    // One line says it all: the write's error, and what the file on disk now is.
    const bool rewritten =
        RewriteStatusOnDisk("this is the report as of an earlier phase boundary: writing the next one (status " +
                            status + (reason.empty() ? "" : ": " + reason) + ") failed: " + e.what())
            .empty();
    throw ReportWriteFailed(e.what() + std::string(rewritten ? "; the earlier report stays, marked failed with this "
                                                               "reason"
                                                             : "; the earlier report stays as it was (its status could "
                                                               "not be rewritten either)"));
  }
}

int CommandRun::Finish(bool interrupted) {
  const int any_signal = AgreedStopSignal(MPI_COMM_WORLD);
  RecordGpuHealth();
  if (interrupted) {
    WriteReportNow("interrupted", "stopped by signal " + std::to_string(any_signal) + " (SIGTERM/SIGINT)");
    if (!common_.output.empty()) Print("# Report (interrupted): " + common_.output, true);
    return 128 + any_signal;
  }
  WriteReportNow("complete", "");
  if (!common_.output.empty()) Print("# Report: " + common_.output);
  return 0;
}

}  // namespace tb
