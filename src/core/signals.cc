#include "signals.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <system_error>

namespace tb {
namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs a lock-free atomic");
// A pipe the handler writes one byte to on the first signal and nobody reads: it stays readable, so every
// listener's poll() wakes, whenever it starts.
int g_signal_pipe[2] = {-1, -1};

void OnStopSignal(int signal_number) {
  int none = 0;
  if (g_signal.compare_exchange_strong(none, signal_number)) {
    const int saved_errno = errno;
    const char byte = 1;
    [[maybe_unused]] const ssize_t written = ::write(g_signal_pipe[1], &byte, 1);
    errno = saved_errno;
    return;
  }
  if (signal_number == SIGINT) {
    // Ctrl-C pressed again: the user wants out now.
    std::signal(signal_number, SIG_DFL);
    std::raise(signal_number);
  }
  // A repeated SIGTERM is the launcher's, not a second request: the stop in progress goes on.
}

}  // namespace

void InstallStopSignalHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) g_signal_pipe[0] = g_signal_pipe[1] = -1;
    struct sigaction action {};
    action.sa_handler = OnStopSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
    // A parent may have blocked them (the mask survives exec): one pending since then is recorded now.
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGINT);
    pthread_sigmask(SIG_UNBLOCK, &stops, nullptr);
  });
}

int PendingStopSignal() { return g_signal.load(); }

std::string StopSignalName(int signal_number) {
  if (signal_number == SIGTERM) return "SIGTERM";
  if (signal_number == SIGINT) return "SIGINT";
  return "signal " + std::to_string(signal_number);
}

StopSignalListener::StopSignalListener(std::function<void(int)> on_stop) {
  if (::pipe2(quit_, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  thread_ = std::thread([this, on_stop = std::move(on_stop)] {
    pollfd fds[2] = {{g_signal_pipe[0], POLLIN, 0}, {quit_[0], POLLIN, 0}};
    while (true) {
      const int ready = ::poll(fds, 2, -1);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0 || fds[1].revents != 0) return;
      if (fds[0].revents != 0) {
        on_stop(g_signal.load());
        return;
      }
    }
  });
}

StopSignalListener::~StopSignalListener() {
  ::close(quit_[1]);
  thread_.join();
  ::close(quit_[0]);
}

}  // namespace tb
