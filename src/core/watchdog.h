// Watchdog: a thread that notices when the operation in progress on this rank has run longer than the
// timeout, and calls a handler (which names the operation, aborts communicators and MPI_Abort's), so that a
// stuck collective ends the job instead of hanging it. It also keeps where this rank is (State), which the rank
// probe (rank_probe.h) reports when another rank's watchdog fires: that is how the rank that stayed behind is
// told from the ranks that wait for it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace tb {

// Marks this process as inside a call into a communicator (waiting for its peers) for the lifetime of the scope:
// the communicators' calls are marked (collectives/marking_communicator.h), and so is host-side agreement under a
// watchdog. Scopes nest; cheap (one atomic increment and decrement).
class InCommunication {
 public:
  InCommunication();
  ~InCommunication();
  InCommunication(const InCommunication&) = delete;
  InCommunication& operator=(const InCommunication&) = delete;
  // Whether any thread of this process is inside a marked scope now.
  static bool Now();
};

// Where this rank is, as its watchdog knows it.
struct WatchdogState {
  std::string operation;       // the guarded operation in progress; "" when none
  std::string last_operation;  // the one before it (or the last one, when none is in progress); "" at the start
  double seconds = 0;          // since `operation` began, or since the last one ended
  bool in_communication = false;  // InCommunication::Now()
};

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
  // Safe to call from any thread.
  WatchdogState State() const;

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
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::string operation_;
  std::string last_operation_;
  double started_s_ = 0;
  double changed_s_ = 0;  // the last Begin or End
  bool active_ = false;
  bool fired_ = false;  // the handler has run for the operation in progress
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace tb
