// trainbench: benchmark for distributed GPU training clusters. Entry point: MPI start-up, command dispatch,
// and the failure rules of README.md ("Exit codes and failures") (one clear line per error, exit codes 0/1/2, MPI_Abort rather than a
// hang when one rank fails).
#include <mpi.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "build_info.h"
#include "cli.h"
#include "commands.h"
#include "console.h"
#include "context.h"
#include "error.h"
#include "log.h"
#include "signals.h"

namespace {

struct CommandEntry {
  const char* name;
  int (*run)(const tb::CommandInput&);
  const char* summary;
  bool reads_reports_only;  // runs without MPI unless a launcher started it (tb::LaunchedByMpi)
  bool stops_at_signal;     // SIGTERM/SIGINT: finishes its step and writes its report as interrupted (tb::CommandRun)
};

constexpr CommandEntry kCommands[] = {
    {"info", tb::RunInfoCommand, "build, backends, devices and topology of this launch", false, false},
    {"collectives", tb::RunCollectivesCommand, "nccl-tests-style sweep of collective operations (busbw, verified)",
     false, true},
    {"p2p", tb::RunP2pCommand, "rank-pair bandwidth and latency matrices; flags weak links", false, true},
    {"train", tb::RunTrainCommand, "synthetic-transformer training steps: phases, MFU, overlap, scaling sweep", false,
     true},
    {"suite", tb::RunSuiteCommand, "collectives, p2p and train (real loader, checkpoints) in one launch, one report",
     false, true},
    {"data", tb::RunDataCommand, "data generate / data verify: write or check a token-shard dataset for the loader",
     false, true},
    {"report", tb::RunReportCommand, "tables of one or more reports side by side (text, CSV, JSON); --html plots",
     true, false},
    {"cost", tb::RunCostCommand, "total task cost, time to train and memory fit per price offering; projection", true,
     false},
    {"history", tb::RunHistoryCommand, "trends of the key figures over the nights of a validate --history directory",
     true, false},
    {"validate", tb::RunValidateCommand, "checks and a verdict against policy, baseline and history; JUnit, Prometheus",
     true, false},
};

// The entry named `command`; nullptr when there is none.
const CommandEntry* FindCommand(const std::string& command) {
  for (const CommandEntry& c : kCommands) {
    if (command == c.name) return &c;
  }
  return nullptr;
}

std::string Usage() {
  std::string text =
      "usage: [mpirun -np N] trainbench <command> [options]\n"
      "       trainbench <command> --help      options of one command\n"
      "       trainbench --version\n\ncommands:\n";
  for (const CommandEntry& c : kCommands) text += tb::Format("  %-13s %s\n", c.name, c.summary);
  text += "\nexit codes: 0 ok, 1 runtime failure, 2 invalid input, 128+N stopped by signal N";
  return text;
}

std::string Join(int argc, char** argv) {
  std::string line;
  for (int i = 0; i < argc; ++i) {
    if (i) line += ' ';
    line += argv[i];
  }
  return line;
}

// Whether the command stops cleanly on SIGTERM/SIGINT (its handlers then go in before MPI starts, so that a signal
// during start-up is recorded); `data verify` does not (the signal ends it, as it ends report, cost and the rest).
bool StopsAtSignal(const CommandEntry& entry, const std::vector<std::string>& args) {
  return entry.stops_at_signal && (std::string(entry.name) != "data" || (!args.empty() && args[0] == "generate"));
}

// The command's exit code; every failure rule of README.md ("Exit codes and failures") applies here.
int RunCommand(const std::string& command, const CommandEntry* entry, const std::vector<std::string>& args,
               const std::string& command_line, const tb::RankContext& ctx) {
  if (command == "--help" || command == "-h" || command == "help") {
    tb::Print(Usage(), true);
    return 0;
  }
  if (command == "--version") {
    tb::Print(std::string("trainbench ") + tb::kToolVersion + " (" + tb::kGitRevision + ")", true);
    return 0;
  }
  if (!entry) {
    std::string names;
    for (const CommandEntry& c : kCommands) names += (names.empty() ? "" : ", ") + std::string(c.name);
    if (ctx.world_rank == 0) {
      tb::ErrorLine((command.empty() ? std::string("no command given") : "unknown command '" + command + "'") +
                        " (accepted: " + names + "; see 'trainbench --help')",
                    false);
    }
    return static_cast<int>(tb::ExitCode::kInput);
  }

  try {
    return entry->run(tb::CommandInput{args, command_line, ctx});
  } catch (const tb::AgreedFailure& e) {
    return static_cast<int>(e.code());  // every rank knows; the failing rank has printed the reason
  } catch (const tb::SharedError& e) {
    // Every rank of the failing communicator holds this error; one prints it and ends the job (ranks outside that
    // communicator may be waiting for it). The others wait to be ended, so that the abort cannot cut the line.
    if (e.reporter()) {
      tb::ErrorLine(e.what());
      if (ctx.world_size > 1) MPI_Abort(MPI_COMM_WORLD, static_cast<int>(e.code()));
      return static_cast<int>(e.code());
    }
    std::this_thread::sleep_for(std::chrono::seconds(30));
    MPI_Abort(MPI_COMM_WORLD, static_cast<int>(e.code()));  // the reporter could not: end the job anyway
    return static_cast<int>(e.code());
  } catch (const tb::Error& e) {
    tb::ErrorLine(e.what());
    if (ctx.world_size > 1) MPI_Abort(MPI_COMM_WORLD, static_cast<int>(e.code()));
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    tb::ErrorLine(std::string("unexpected failure: ") + e.what());
    if (ctx.world_size > 1) MPI_Abort(MPI_COMM_WORLD, static_cast<int>(tb::ExitCode::kRuntime));
    return static_cast<int>(tb::ExitCode::kRuntime);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  const CommandEntry* entry = FindCommand(command);
  if (entry && StopsAtSignal(*entry, std::vector<std::string>(argv + (argc > 1 ? 2 : 1), argv + argc))) {
    tb::InstallStopSignalHandlers();
  }
  // A command that reads reports, --help, --version or a mistyped command needs MPI only under a launcher (one
  // rank then prints); every other command starts it.
  std::optional<tb::MpiSession> mpi;
  if (tb::LaunchedByMpi() || (entry && !entry->reads_reports_only)) mpi.emplace(&argc, &argv);
  tb::RankContext ctx = mpi ? tb::DiscoverContext(MPI_COMM_WORLD) : tb::LocalContext();
  tb::SetLogIdentity(ctx.world_rank, ctx.host, ctx.world_size);

  const std::vector<std::string> args(argv + (argc > 1 ? 2 : 1), argv + argc);
  const int code = RunCommand(command, entry, args, Join(argc, argv), ctx);
  if (mpi) mpi->Finalize(code);
  return code;
}
