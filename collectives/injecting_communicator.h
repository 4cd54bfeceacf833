// The communicator faults of `--inject` (src/core/inject.h), as a wrapper the commands put around their
// communicator, so that the benchmarks run on it unchanged:
//   slow-link=A-B:US  on ranks A and B, each point-to-point message between them (SendRecv with the other as
//                     peer) waits US microseconds first (both sides wait at once, so a message takes US longer
//                     and a round trip 2*US), and so does each collective of a communicator that holds both:
//                     it moves data over their link;
//   hang=R            rank R blocks for ever in its first operation that moves data (a collective, SendRecv or
//                     StartAllReduce), inside the caller's watchdog guard, which then names it.
// Ranks are the plan's (the launch's) numbers: sub-communicators (Split, Prefix) keep the wrapper and know which
// launch rank each of their ranks is.
#pragma once

#include <memory>
#include <vector>

#include "forwarding_communicator.h"
#include "inject.h"

namespace tb {

class InjectingCommunicator : public ForwardingCommunicator {
 public:
  InjectingCommunicator(std::unique_ptr<Communicator> inner, InjectionPlan plan);
  // `launch_ranks[r]`: the launch's number of this communicator's rank r.
  InjectingCommunicator(std::unique_ptr<Communicator> inner, InjectionPlan plan, std::vector<int> launch_ranks);

  void AllReduce(const void* s, void* r, size_t c, DataType t, ReduceOp op) override;
  std::unique_ptr<PendingOp> StartAllReduce(const void* s, void* r, size_t c, DataType t, ReduceOp op,
                                            void* stream) override;
  std::unique_ptr<PendingOp> StartReduceScatter(const void* s, void* r, size_t c, DataType t, ReduceOp op,
                                                void* stream) override;
  std::unique_ptr<PendingOp> StartAllGather(const void* s, void* r, size_t c, DataType t, void* stream) override;
  void ReduceScatter(const void* s, void* r, size_t c, DataType t, ReduceOp op) override;
  void AllGather(const void* s, void* r, size_t c, DataType t) override;
  void AllToAll(const void* s, void* r, size_t c, DataType t) override;
  void AllToAllV(const void* s, std::span<const size_t> sc, std::span<const size_t> so, void* r,
                 std::span<const size_t> rc, std::span<const size_t> ro, DataType t) override;
  void Broadcast(const void* s, void* r, size_t c, DataType t, int root) override;
  void Reduce(const void* s, void* r, size_t c, DataType t, ReduceOp op, int root) override;
  void SendRecv(const void* s, int dst, void* r, int src, size_t c, DataType t) override;
  std::unique_ptr<Communicator> Split(int color, int key) override;

 private:
  // Before a collective: hang, or wait for the slow links this rank has inside the communicator.
  void BeforeCollective();
  // Before a message to `dst` and/or from `src` (-1: none).
  void BeforeMessage(int dst, int src);
  int Launch(int r) const { return launch_ranks_[static_cast<size_t>(r)]; }
  int Me() const { return Launch(rank()); }

  InjectionPlan plan_;
  std::vector<int> launch_ranks_;
  double collective_delay_us_ = 0;  // the slowest link from this rank to another of the communicator
};

// `comm` wrapped in an InjectingCommunicator when `plan` has a slow-link or hang fault; `comm` itself otherwise.
std::unique_ptr<Communicator> WithInjectedFaults(std::unique_ptr<Communicator> comm, const InjectionPlan& plan);

}  // namespace tb
