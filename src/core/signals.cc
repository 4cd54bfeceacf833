#include "signals.h"

#include <csignal>

namespace tb {
namespace {

volatile std::sig_atomic_t g_signal = 0;

void OnStopSignal(int signal_number) {
  if (g_signal != 0) {
    // Second signal: the user wants out now.
    std::signal(signal_number, SIG_DFL);
    std::raise(signal_number);
    return;
  }
  g_signal = signal_number;
}

}  // namespace

void InstallStopSignalHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

int PendingStopSignal() { return g_signal; }

}  // namespace tb
