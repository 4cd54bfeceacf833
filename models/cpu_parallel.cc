#include "cpu_parallel.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tb {
namespace {

// One ParallelFor call: its indices are handed out one at a time to whichever worker asks next.
struct Job {
  size_t count = 0;
  const std::function<void(size_t, int)>* work = nullptr;
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;  // the first exception thrown by work
};

void Drain(Job& job, int worker) {
  for (size_t i = job.next++; i < job.count; i = job.next++) {
    try {
      (*job.work)(i, worker);
    } catch (...) {
      const std::lock_guard lock(job.error_mutex);
      if (!job.error) job.error = std::current_exception();
      job.next = job.count;  // the remaining indices are skipped
    }
  }
}

// Helper threads that sleep between jobs. Made once per process and never destroyed, so that an exit from any
// thread finds nothing to join.
class Pool {
 public:
  // Runs job on the caller (worker 0) and `helpers` helper threads; returns when every worker is done.
  void Run(Job& job, int helpers) {
    {
      const std::lock_guard lock(mutex_);
      while (static_cast<int>(threads_.size()) < helpers) {
        threads_.emplace_back([this, index = static_cast<int>(threads_.size())] { Serve(index); });
        threads_.back().detach();
      }
      job_ = &job;
      wanted_ = helpers;
      running_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    Drain(job, 0);
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [&] { return running_ == 0; });
    job_ = nullptr;
  }

  // Held by the one ParallelFor that is using the pool.
  std::mutex& owner() { return owner_; }

 private:
  void Serve(int index) {
    uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (index >= wanted_) continue;
      Job& job = *job_;
      lock.unlock();
      Drain(job, index + 1);
      lock.lock();
      if (--running_ == 0) finished_.notify_one();
    }
  }

  std::mutex owner_;
  std::mutex mutex_;  // guards what follows
  std::condition_variable wake_, finished_;
  std::vector<std::thread> threads_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;  // counts jobs, so that a helper sees each one once
  int wanted_ = 0;           // helpers 0 … wanted_-1 take part in the current job
  int running_ = 0;          // of those, the ones not finished yet
};

Pool& ThePool() {
  static Pool* pool = new Pool;
  return *pool;
}

// OpenBLAS single-threaded while it lasts: workers calling sgemm at once would otherwise queue for OpenBLAS's own
// threads (its threaded GEMM takes a process-wide lock).
class SingleThreadedBlas {
 public:
  SingleThreadedBlas() : threads_(openblas_get_num_threads()) { openblas_set_num_threads(1); }
  ~SingleThreadedBlas() { openblas_set_num_threads(threads_); }
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

 private:
  int threads_;
};

}  // namespace

void ParallelFor(size_t count, int threads, const std::function<void(size_t index, int worker)>& work) {
  Pool& pool = ThePool();
  std::unique_lock owner(pool.owner(), std::defer_lock);
  auto inline_run = [&] {
    for (size_t i = 0; i < count; ++i) work(i, 0);
  };
  if (threads < 2 || count == 0 || !owner.try_lock()) return inline_run();
  // Even a single index runs its sgemm calls single-threaded, as it would among others: the same bits either way.
  const SingleThreadedBlas single_threaded_blas;
  const int helpers = static_cast<int>(std::min(count, static_cast<size_t>(threads))) - 1;
  if (helpers == 0) return inline_run();
  Job job;
  job.count = count;
  job.work = &work;
  pool.Run(job, helpers);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace tb
