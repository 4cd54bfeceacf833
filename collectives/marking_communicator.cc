#include "marking_communicator.h"

#include "watchdog.h"

namespace tb {

namespace {

// Waiting on a started operation is waiting for the peers; testing it is not (the caller goes on with its work).
class MarkedPendingOp : public PendingOp {
 public:
  explicit MarkedPendingOp(std::unique_ptr<PendingOp> inner) : inner_(std::move(inner)) {}
  bool Test() override { return inner_->Test(); }
  void Wait() override {
    InCommunication mark;
    inner_->Wait();
  }
  double Seconds() const override { return inner_->Seconds(); }
  std::optional<LinkSeconds> LinkSplit() const override { return inner_->LinkSplit(); }

 private:
  std::unique_ptr<PendingOp> inner_;
};

}  // namespace

void MarkingCommunicator::AllReduce(const void* s, void* r, size_t c, DataType t, ReduceOp op) {
  InCommunication mark;
  ForwardingCommunicator::AllReduce(s, r, c, t, op);
}

std::unique_ptr<PendingOp> MarkingCommunicator::StartAllReduce(const void* s, void* r, size_t c, DataType t,
                                                               ReduceOp op, void* stream) {
  InCommunication mark;
  return std::make_unique<MarkedPendingOp>(ForwardingCommunicator::StartAllReduce(s, r, c, t, op, stream));
}

std::unique_ptr<PendingOp> MarkingCommunicator::StartReduceScatter(const void* s, void* r, size_t c, DataType t,
                                                                   ReduceOp op, void* stream) {
  InCommunication mark;
  return std::make_unique<MarkedPendingOp>(ForwardingCommunicator::StartReduceScatter(s, r, c, t, op, stream));
}

std::unique_ptr<PendingOp> MarkingCommunicator::StartAllGather(const void* s, void* r, size_t c, DataType t,
                                                               void* stream) {
  InCommunication mark;
  return std::make_unique<MarkedPendingOp>(ForwardingCommunicator::StartAllGather(s, r, c, t, stream));
}

void MarkingCommunicator::ReduceScatter(const void* s, void* r, size_t c, DataType t, ReduceOp op) {
  InCommunication mark;
  ForwardingCommunicator::ReduceScatter(s, r, c, t, op);
}

void MarkingCommunicator::AllGather(const void* s, void* r, size_t c, DataType t) {
  InCommunication mark;
  ForwardingCommunicator::AllGather(s, r, c, t);
}

void MarkingCommunicator::AllToAll(const void* s, void* r, size_t c, DataType t) {
  InCommunication mark;
  ForwardingCommunicator::AllToAll(s, r, c, t);
}

void MarkingCommunicator::AllToAllV(const void* s, std::span<const size_t> sc, std::span<const size_t> so, void* r,
                                    std::span<const size_t> rc, std::span<const size_t> ro, DataType t) {
  InCommunication mark;
  ForwardingCommunicator::AllToAllV(s, sc, so, r, rc, ro, t);
}

void MarkingCommunicator::Broadcast(const void* s, void* r, size_t c, DataType t, int root) {
  InCommunication mark;
  ForwardingCommunicator::Broadcast(s, r, c, t, root);
}

void MarkingCommunicator::Reduce(const void* s, void* r, size_t c, DataType t, ReduceOp op, int root) {
  InCommunication mark;
  ForwardingCommunicator::Reduce(s, r, c, t, op, root);
}

void MarkingCommunicator::SendRecv(const void* s, int d, void* r, int src, size_t c, DataType t) {
  InCommunication mark;
  ForwardingCommunicator::SendRecv(s, d, r, src, c, t);
}

void MarkingCommunicator::Synchronize() {
  InCommunication mark;
  ForwardingCommunicator::Synchronize();
}

void MarkingCommunicator::Barrier() {
  InCommunication mark;
  ForwardingCommunicator::Barrier();
}

std::unique_ptr<Communicator> MarkingCommunicator::Split(int color, int key) {
  std::unique_ptr<Communicator> sub = ForwardingCommunicator::Split(color, key);
  return sub ? std::make_unique<MarkingCommunicator>(std::move(sub)) : nullptr;
}

std::unique_ptr<Communicator> WithCommunicationMarks(std::unique_ptr<Communicator> comm) {
  return std::make_unique<MarkingCommunicator>(std::move(comm));
}

}  // namespace tb
