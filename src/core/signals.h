// SIGTERM/SIGINT handling (Slurm time limit, mpirun passing on its own SIGTERM or Ctrl-C): the first signal is
// recorded so that the run can stop at the next agreed point, write its report with status "interrupted" and exit
// 128+signal. A second SIGINT (Ctrl-C pressed again) ends the process at once; a repeated SIGTERM does not, because
// launchers send it more than once (Slurm signals every process of a job, mpirun passes its own on to the ranks a
// second later) and follow it with SIGKILL when they stop waiting.
#pragma once

#include <functional>
#include <string>
#include <thread>

namespace tb {

// Installs the handlers (once; later calls do nothing). main() calls it first, before MPI starts, so that a signal
// during start-up is recorded rather than ending the process with no word.
void InstallStopSignalHandlers();
// The signal number received, or 0.
int PendingStopSignal();
// "SIGTERM", "SIGINT", or "signal N".
std::string StopSignalName(int signal_number);

// Calls `on_stop(signal)` on a thread of its own as soon as a stop signal arrives (at once when one already has),
// at most once. For what must not wait until the main thread reaches its next stop check: a launcher's SIGKILL may
// follow its SIGTERM before that (Open MPI's mpirun: 1 s). The destructor ends the thread, waiting for a call in
// progress. Needs InstallStopSignalHandlers first.
class StopSignalListener {
 public:
  explicit StopSignalListener(std::function<void(int)> on_stop);
  ~StopSignalListener();
  StopSignalListener(const StopSignalListener&) = delete;
  StopSignalListener& operator=(const StopSignalListener&) = delete;

 private:
  int quit_[2] = {-1, -1};  // a pipe: the destructor closes its write end to wake the thread
  std::thread thread_;
};

}  // namespace tb
