// SIGTERM/SIGINT handling (Slurm time limit, Ctrl-C): the first signal is recorded so that the run can stop
// at the next agreed point, write its report with status "interrupted" and exit 128+signal. A second signal
// ends the process at once.
#pragma once

namespace tb {

void InstallStopSignalHandlers();
// The signal number received, or 0.
int PendingStopSignal();

}  // namespace tb
