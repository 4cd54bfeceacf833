// The commands of the trainbench executable. Each parses its own flags (args after the command name) and
// returns the process exit code; errors are thrown as tb::Error (see main.cc for how they end the job).
#pragma once

#include <string>
#include <vector>

#include "context.h"

namespace tb {

struct CommandInput {
  std::vector<std::string> args;  // after the command name
  std::string command_line;       // the whole command line, for the report
  RankContext ctx;
};

int RunInfoCommand(const CommandInput& input);
int RunCollectivesCommand(const CommandInput& input);
int RunP2pCommand(const CommandInput& input);
int RunTrainCommand(const CommandInput& input);
int RunDataCommand(const CommandInput& input);
int RunReportCommand(const CommandInput& input);
int RunCostCommand(const CommandInput& input);
int RunValidateCommand(const CommandInput& input);
int RunHistoryCommand(const CommandInput& input);
int RunSuiteCommand(const CommandInput& input);

}  // namespace tb
