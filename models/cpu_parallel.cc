#include "cpu_parallel.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tb {
namespace {

// A hint to the core that this thread is spinning (fewer pipeline flushes, the sibling hyperthread served first).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

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

// How long a thread spins for the next event before it sleeps: a layer of model "tiny" takes tens of microseconds
// and the next one follows within a few, while a wake from sleep (a futex, on a VM) costs as much as a small layer.
// Spinning with `pause` on a core of its own takes nothing from the other threads; past this it sleeps.
constexpr auto kSpin = std::chrono::microseconds(100);

// Calls done() until it returns true or kSpin has passed; returns its last answer.
template <typename Done>
bool SpinUntil(const Done& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 1;; ++i) {
    if (done()) return true;
    CpuRelax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return done();
  }
}

// Helper threads that spin briefly, then sleep, between jobs. Made once per process and never destroyed, so that an
// exit from any thread finds nothing to join.
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
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    Drain(job, 0);
    if (SpinUntil([&] { return running_.load(std::memory_order_acquire) == 0; })) return;
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [&] { return running_.load(std::memory_order_acquire) == 0; });
  }

  // Held by the one ParallelFor that is using the pool.
  std::mutex& owner() { return owner_; }

 private:
  void Serve(int index) {
    uint64_t seen = 0;
    for (;;) {
      SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; });
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
      // The job is read under the lock: a helper that missed a job sees the latest one whole.
      seen = generation_.load(std::memory_order_relaxed);
      if (index >= wanted_) continue;
      Job& job = *job_;
      lock.unlock();
      Drain(job, index + 1);
      // The last helper out wakes Run if it sleeps; taking the lock first, it cannot slip in between Run's check of
      // running_ and its wait.
      if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        { const std::lock_guard wait_for_sleeper(mutex_); }
        finished_.notify_one();
      }
    }
  }

  std::mutex owner_;
  std::mutex mutex_;  // guards what follows; the atomics are also read without it, and running_ counted down
  std::condition_variable wake_, finished_;
  std::vector<std::thread> threads_;
  Job* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // counts jobs, so that a helper sees each one once
  int wanted_ = 0;                       // helpers 0 … wanted_-1 take part in the current job
  std::atomic<int> running_{0};          // of those, the ones not finished yet
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
