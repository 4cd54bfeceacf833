#include "watchdog.h"

#include <algorithm>
#include <chrono>

#include "clock.h"

namespace tb {

namespace {
std::atomic<int> communication_depth{0};
}

InCommunication::InCommunication() { communication_depth.fetch_add(1, std::memory_order_relaxed); }
InCommunication::~InCommunication() { communication_depth.fetch_sub(1, std::memory_order_relaxed); }
bool InCommunication::Now() { return communication_depth.load(std::memory_order_relaxed) > 0; }

Watchdog::Watchdog(double timeout_s, Handler on_timeout)
    : timeout_s_(timeout_s), on_timeout_(std::move(on_timeout)), changed_s_(NowSeconds()) {
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
    if (active_) last_operation_ = std::move(operation_);
    operation_ = std::move(operation);
    started_s_ = changed_s_ = NowSeconds();
    active_ = true;
    fired_ = false;
  }
  wake_.notify_all();
}

void Watchdog::End() {
  if (timeout_s_ <= 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  active_ = false;
  last_operation_ = operation_;
  changed_s_ = NowSeconds();
}

WatchdogState Watchdog::State() const {
  WatchdogState state;
  state.in_communication = InCommunication::Now();
  std::lock_guard<std::mutex> lock(mutex_);
  state.operation = active_ ? operation_ : "";
  state.last_operation = last_operation_;
  state.seconds = NowSeconds() - changed_s_;
  return state;
}

void Watchdog::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (!active_ || fired_) {
      wake_.wait(lock);
      continue;
    }
    double elapsed = NowSeconds() - started_s_;
    if (elapsed >= timeout_s_) {
      std::string operation = operation_;
      fired_ = true;  // once per operation; State still reports it as in progress
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
