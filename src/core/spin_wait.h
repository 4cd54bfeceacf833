// Waiting for another thread without sleeping, for a bounded time. Waking a thread that sleeps on a futex costs its
// waker a system call and, where the sleeper's core is idle, an inter-processor interrupt: 20-30 us per wake on
// this project's 2-core VM, about a sixth of a data-loader worker's time when the consumer waits for every 1 MiB
// batch (tests/perf/README.md). A waiter with a core of its own polls first and sleeps only when the wait runs long.
#pragma once

#include <sched.h>

#include "clock.h"

namespace tb {

// The CPUs this process may run on (its affinity mask: what mpirun's binding or a cgroup leaves it); 1 when unknown.
inline int CpusAvailable() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

// A hint to the core that this is a spin loop (x86 pause, arm64 yield): it frees the sibling hyperthread.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How a consumer waits for the batches of `producers` threads, given the CPUs this process may run on. It polls up
// to `poll_s` before it sleeps (0: sleeps at once): ten wake-ups' worth on this project's VM, so a longer wait pays
// at most a tenth more for its wake. Where a core is spare (fewer producers than CPUs) it spins on that core; with
// more producers than CPUs (`oversubscribed`) it yields its core between polls, a peer of producers that yield theirs
// after each unit of work (4 loader workers on 2 cores: +8-14 % read, against a consumer asleep that each batch's
// worker must wake). With as many producers as CPUs it sleeps at once: a poller there, a third thread on two cores,
// held the workers at the prefetch limit once per batch (tests/perf/README.md).
struct ConsumerWait {
  double poll_s = 0;
  bool oversubscribed = false;
};
inline ConsumerWait ConsumerWaitFor(int producers) {
  constexpr double kPoll_s = 200e-6;
  const int cpus = CpusAvailable();
  if (producers == cpus) return {};
  return {kPoll_s, producers > cpus};
}

// Polls `done` until it returns true (returns true) or `max_s` seconds have passed (returns false). With
// `yield_core` each poll hands the core to any other runnable thread (sched_yield) instead of spinning on it: the
// waiter for a thread that needs the core itself.
template <typename Done>
bool SpinUntil(Done done, double max_s, bool yield_core = false) {
  const double until = NowSeconds() + max_s;
  for (;;) {
    for (int i = 0; i < (yield_core ? 1 : 64); ++i) {
      if (done()) return true;
      if (yield_core) {
        ::sched_yield();
      } else {
        CpuRelax();
      }
    }
    if (NowSeconds() >= until) return done();
  }
}

}  // namespace tb
