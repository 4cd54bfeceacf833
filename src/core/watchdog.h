// Watchdog: a thread that notices when the operation in progress on this rank has run longer than the
// timeout, and calls a handler (which names the operation, aborts communicators and MPI_Abort's), so that a
// stuck collective ends the job instead of hanging it.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace tb {

class Watchdog {
 public:
  // Called from the watchdog thread with the operation's description and how long it has been running.
  using Handler = std::function<void(const std::string& operation, double elapsed_s)>;

  // timeout_s <= 0 disables the watchdog (no thread is started).
  Watchdog(double timeout_s, Handler on_timeout);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Marks the start and end of a guarded operation. Operations do not nest.
  void Begin(std::string operation);
  void End();
  double timeout_s() const { return timeout_s_; }

  // Guards one operation for the lifetime of the scope; a null watchdog guards nothing. The description is
  // built only when there is a watchdog to read it.
  class Scope {
   public:
    template <typename Describe>
    Scope(Watchdog* watchdog, Describe&& describe) : watchdog_(watchdog) {
      if (watchdog_) watchdog_->Begin(describe());
    }
    ~Scope() {
      if (watchdog_) watchdog_->End();
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Watchdog* watchdog_;
  };

 private:
  void Run();

  double timeout_s_;
  Handler on_timeout_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::string operation_;
  double started_s_ = 0;
  bool active_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tb
