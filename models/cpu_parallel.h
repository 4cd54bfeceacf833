// Work spread over the CPU's threads: one small pool of persistent threads per process, shared by the CPU
// reference's layers (models/cpu_kernels.h) and the initial weights' draw (layout.cc). A layer of model "tiny" takes
// tens of microseconds, so its threads are woken, not created, for each call; and they spin for 0.1 ms before they
// sleep, since a wake from sleep costs ~40 µs on a VM, and a training step makes 70 to 100 calls.
#pragma once

#include <cstddef>
#include <functional>

namespace tb {

// Calls work(index, worker) for every index in [0, count), on up to `threads` threads, and returns when all calls
// have returned. Worker 0 is the calling thread; helpers are numbered 1 … threads-1, so a worker may use scratch of
// its own. Which worker runs which index is not fixed: work(index, …) must write only what that index owns, or
// results would depend on timing. With threads > 1, OpenBLAS runs single-threaded inside (a sgemm called by a
// worker stays on that worker's thread, and computes the bits it computes at one thread). One call uses the pool at
// a time; a call made while it is busy (from another thread, or from inside work) runs on its own thread alone,
// OpenBLAS as it is set. Exceptions thrown by work are rethrown here (the first one).
void ParallelFor(size_t count, int threads, const std::function<void(size_t index, int worker)>& work);

}  // namespace tb
