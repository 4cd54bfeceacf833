// WriteHtmlReport: runs results/analysis/plots.py under Debian's Python (where python3-h5py and python3-matplotlib live) as
// a child process — posix_spawn with an argument vector, no shell, so no path is ever parsed as shell text — and
// turns its exit status into the project's errors. posix_spawn rather than fork: the caller is an MPI process, and
// Open MPI warns about (and some interconnects break on) fork with its memory registered.
#include "html_report.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "console.h"
#include "error.h"
#include "validate.h"

extern char** environ;

namespace tb {
namespace {

constexpr const char* kDefaultPython = "/usr/bin/python3";
constexpr const char* kScriptPrefix = "plots.py: ";  // how plots.py starts its own error lines
constexpr int kScriptInputExit = 2;                   // plots.py: a report, the cost file or the output is bad
constexpr int kScriptMissingPackagesExit = 3;         // plots.py: h5py or matplotlib cannot be imported

std::string EnvironmentOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// TRAINBENCH_SOURCE_DIR is this folder in the source tree (set in results/CMakeLists.txt); an installed or moved
// binary points TRAINBENCH_PLOTS_SCRIPT at its copy of plots.py instead.
std::string PlotsScriptPath() {
  return EnvironmentOr("TRAINBENCH_PLOTS_SCRIPT", std::string(TRAINBENCH_SOURCE_DIR) + "/plots.py");
}

// The last non-empty line the child wrote to stderr: a Python traceback ends with the exception, and plots.py's own
// errors are one line.
std::string LastLine(const std::string& text) {
  size_t end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return text.substr(start, end - start + 1);
}

struct ChildOutcome {
  bool exited = false;
  int code = 0;  // exit status when exited, else the terminating signal
  std::string stderr_text;
};

// Runs argv[0] (an absolute path, not searched on PATH) with argv, capturing stderr; stdout is shared with ours.
// Returns the spawn error (errno) through `spawn_error` when the program could not be started.
ChildOutcome RunCapturingStderr(const std::vector<std::string>& argv, int* spawn_error) {
  std::vector<char*> pointers;
  for (const std::string& arg : argv) pointers.push_back(const_cast<char*>(arg.c_str()));
  pointers.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw RuntimeError(std::string("cannot make the HTML page: pipe: ") + OsMessage(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);  // dup2 clears close-on-exec on fd 2
  pid_t pid = 0;
  *spawn_error = posix_spawn(&pid, pointers[0], &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);

  ChildOutcome outcome;
  if (*spawn_error != 0) {
    close(fds[0]);
    return outcome;
  }
  char buffer[4096];
  for (;;) {
    ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n > 0) {
      outcome.stderr_text.append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw RuntimeError(std::string("cannot make the HTML page: waitpid: ") + OsMessage(errno));
  }
  outcome.exited = WIFEXITED(status);
  outcome.code = outcome.exited ? WEXITSTATUS(status) : WTERMSIG(status);
  return outcome;
}

}  // namespace

namespace {

// Runs plots.py with `args` (after the interpreter and the script), mapping its exit codes and last stderr line.
void RunPlotsScript(const std::vector<std::string>& args) {
  const std::string python = EnvironmentOr("TRAINBENCH_PYTHON", kDefaultPython);
  const std::string script = PlotsScriptPath();
  struct stat info {};
  if (stat(script.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) {
    throw InputError("cannot make the HTML page: the plotting script '" + script +
                     "' is missing (set TRAINBENCH_PLOTS_SCRIPT to results/analysis/plots.py of the trainbench sources)");
  }

  std::vector<std::string> argv = {python, script};
  argv.insert(argv.end(), args.begin(), args.end());

  int spawn_error = 0;
  ChildOutcome outcome = RunCapturingStderr(argv, &spawn_error);
  if (spawn_error != 0) {
    throw InputError("cannot make the HTML page: cannot run '" + python + "': " + OsMessage(spawn_error) +
                     " (install python3-h5py python3-matplotlib, or set TRAINBENCH_PYTHON)");
  }
  if (outcome.exited && outcome.code == 0) return;

  std::string line = LastLine(outcome.stderr_text);
  if (line.rfind(kScriptPrefix, 0) == 0) line.erase(0, std::strlen(kScriptPrefix));
  if (outcome.exited && outcome.code == kScriptMissingPackagesExit) {
    throw InputError("cannot make the HTML page: " + line);
  }
  if (outcome.exited && outcome.code == kScriptInputExit) throw InputError(line);
  const std::string how = outcome.exited ? "exit code " + std::to_string(outcome.code)
                                         : "signal " + std::to_string(outcome.code);
  throw RuntimeError("cannot make the HTML page: '" + script + "' failed (" + how + ")" +
                     (line.empty() ? "" : ": " + line));
}

}  // namespace

void WriteHtmlReport(const std::vector<std::string>& report_paths, const std::string& html_path,
                     const std::string& export_json, HtmlExport kind, const std::vector<std::string>& decision) {
  std::vector<std::string> args = {"--out", html_path};
  const std::string json_path = html_path + ".export.json.tmp";
  if (!export_json.empty()) {
    std::ofstream out(json_path);
    out << export_json;
    if (!out.flush()) throw InputError("--html: cannot write '" + json_path + "' beside the page");
    args.insert(args.end(), {kind == HtmlExport::kCost ? "--cost" : "--export", json_path});
  }
  for (const std::string& line : decision) args.insert(args.end(), {"--decision", line});
  args.push_back("--");  // report names that start with '-' stay names
  args.insert(args.end(), report_paths.begin(), report_paths.end());
  try {
    RunPlotsScript(args);
  } catch (...) {
    if (!export_json.empty()) std::remove(json_path.c_str());
    throw;
  }
  if (!export_json.empty()) std::remove(json_path.c_str());
}

void WriteHistoryHtml(const std::string& history_dir, const std::string& html_path) {
  // The bands validate starts from before a --policy file or the nights' noise change them: the page draws these.
  const ValidatePolicy defaults;
  const std::string bands =
      Format("warn=%g,fail=%g,share_warn=%g,share_fail=%g,nights=%d,min_nights=%d,max_widening=%g",
             defaults.warn, defaults.fail, defaults.share_warn, defaults.share_fail, defaults.history_nights,
             defaults.history_min_nights, defaults.history_max_widening);
  RunPlotsScript({"--out", html_path, "--history", history_dir, "--bands", bands});
}

}  // namespace tb
