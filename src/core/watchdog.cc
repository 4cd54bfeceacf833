#include "watchdog.h"

#include <algorithm>
#include <chrono>

#include "clock.h"

namespace tb {

Watchdog::Watchdog(double timeout_s, Handler on_timeout) : timeout_s_(timeout_s), on_timeout_(std::move(on_timeout)) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { Run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::Begin(std::string operation) {
  if (timeout_s_ <= 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    operation_ = std::move(operation);
    started_s_ = NowSeconds();
    active_ = true;
  }
  wake_.notify_all();
}

void Watchdog::End() {
  if (timeout_s_ <= 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  active_ = false;
}

void Watchdog::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (!active_) {
      wake_.wait(lock);
      continue;
    }
    double elapsed = NowSeconds() - started_s_;
    if (elapsed >= timeout_s_) {
      std::string operation = operation_;
      active_ = false;
      lock.unlock();
      on_timeout_(operation, elapsed);  // normally does not return (MPI_Abort)
      lock.lock();
      continue;
    }
    // Wake at the deadline, or earlier when a new operation begins or we are stopped. The wait is sliced: a
    // duration past the clock's int64 nanoseconds would overflow into a deadline already past (a busy spin).
    constexpr double kLongestWait_s = 3600;
    wake_.wait_for(lock, std::chrono::duration<double>(std::min(timeout_s_ - elapsed, kLongestWait_s)));
  }
}

}  // namespace tb
