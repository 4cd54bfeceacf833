// A Communicator that marks this process as inside communication (InCommunication, watchdog.h) for the length of
// every call that talks to the peers, and of every wait on an operation started earlier. The watchdog's state,
// which the rank probe reports when a job is stuck, thereby tells a rank waiting for its peers from one that never
// got to the communication (stuck in compute, in I/O, or before the call). Every command's communicator has it.
#pragma once

#include <memory>

#include "forwarding_communicator.h"

namespace tb {

class MarkingCommunicator : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;

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
  void SendRecv(const void* s, int d, void* r, int src, size_t c, DataType t) override;
  void Synchronize() override;
  void Barrier() override;
  std::unique_ptr<Communicator> Split(int color, int key) override;
};

std::unique_ptr<Communicator> WithCommunicationMarks(std::unique_ptr<Communicator> comm);

}  // namespace tb
