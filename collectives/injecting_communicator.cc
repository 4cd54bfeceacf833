#include "injecting_communicator.h"

#include <algorithm>

namespace tb {

InjectingCommunicator::InjectingCommunicator(std::unique_ptr<Communicator> inner, InjectionPlan plan)
    : ForwardingCommunicator(std::move(inner)), plan_(std::move(plan)) {
  for (int peer = 0; peer < size(); ++peer) {
    collective_delay_us_ = std::max(collective_delay_us_, plan_.LinkDelayUs(rank(), peer));
  }
}

void InjectingCommunicator::BeforeCollective() {
  if (plan_.Hangs(rank())) BlockForever();
  SleepMilliseconds(collective_delay_us_ / 1000);
}

void InjectingCommunicator::BeforeMessage(int dst, int src) {
  if (plan_.Hangs(rank())) BlockForever();
  const double to = dst >= 0 ? plan_.LinkDelayUs(rank(), dst) : 0;
  const double from = src >= 0 ? plan_.LinkDelayUs(rank(), src) : 0;
  SleepMilliseconds(std::max(to, from) / 1000);  // a send and a receive at once wait together
}

void InjectingCommunicator::AllReduce(const void* s, void* r, size_t c, DataType t, ReduceOp op) {
  BeforeCollective();
  ForwardingCommunicator::AllReduce(s, r, c, t, op);
}

std::unique_ptr<PendingOp> InjectingCommunicator::StartAllReduce(const void* s, void* r, size_t c, DataType t,
                                                                 ReduceOp op, void* stream) {
  BeforeCollective();
  return ForwardingCommunicator::StartAllReduce(s, r, c, t, op, stream);
}

void InjectingCommunicator::ReduceScatter(const void* s, void* r, size_t c, DataType t, ReduceOp op) {
  BeforeCollective();
  ForwardingCommunicator::ReduceScatter(s, r, c, t, op);
}

void InjectingCommunicator::AllGather(const void* s, void* r, size_t c, DataType t) {
  BeforeCollective();
  ForwardingCommunicator::AllGather(s, r, c, t);
}

void InjectingCommunicator::AllToAll(const void* s, void* r, size_t c, DataType t) {
  BeforeCollective();
  ForwardingCommunicator::AllToAll(s, r, c, t);
}

void InjectingCommunicator::Broadcast(const void* s, void* r, size_t c, DataType t, int root) {
  BeforeCollective();
  ForwardingCommunicator::Broadcast(s, r, c, t, root);
}

void InjectingCommunicator::Reduce(const void* s, void* r, size_t c, DataType t, ReduceOp op, int root) {
  BeforeCollective();
  ForwardingCommunicator::Reduce(s, r, c, t, op, root);
}

void InjectingCommunicator::SendRecv(const void* s, int dst, void* r, int src, size_t c, DataType t) {
  BeforeMessage(dst, src);
  ForwardingCommunicator::SendRecv(s, dst, r, src, c, t);
}

std::unique_ptr<Communicator> InjectingCommunicator::Prefix(int k) {
  std::unique_ptr<Communicator> sub = ForwardingCommunicator::Prefix(k);
  if (!sub) return nullptr;
  return std::make_unique<InjectingCommunicator>(std::move(sub), plan_);
}

std::unique_ptr<Communicator> WithInjectedFaults(std::unique_ptr<Communicator> comm, const InjectionPlan& plan) {
  if (!plan.Find(FaultKind::kSlowLink) && !plan.Find(FaultKind::kHang)) return comm;
  return std::make_unique<InjectingCommunicator>(std::move(comm), plan);
}

}  // namespace tb
