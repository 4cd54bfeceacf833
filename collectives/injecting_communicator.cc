#include "injecting_communicator.h"

#include <algorithm>

#include "error.h"

namespace tb {

namespace {

std::vector<int> Identity(int n) {
  std::vector<int> ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<size_t>(r)] = r;
  return ranks;
}

}  // namespace

InjectingCommunicator::InjectingCommunicator(std::unique_ptr<Communicator> inner, InjectionPlan plan)
    : InjectingCommunicator(std::move(inner), std::move(plan), {}) {}

InjectingCommunicator::InjectingCommunicator(std::unique_ptr<Communicator> inner, InjectionPlan plan,
                                             std::vector<int> launch_ranks)
    : ForwardingCommunicator(std::move(inner)), plan_(std::move(plan)), launch_ranks_(std::move(launch_ranks)) {
  if (launch_ranks_.empty()) launch_ranks_ = Identity(size());
  for (int peer = 0; peer < size(); ++peer) {
    collective_delay_us_ = std::max(collective_delay_us_, plan_.LinkDelayUs(Me(), Launch(peer)));
  }
}

void InjectingCommunicator::BeforeCollective() {
  if (plan_.Hangs(Me())) BlockForever();
  SleepMilliseconds(collective_delay_us_ / 1000);
}

void InjectingCommunicator::BeforeMessage(int dst, int src) {
  if (plan_.Hangs(Me())) BlockForever();
  const double to = dst >= 0 ? plan_.LinkDelayUs(Me(), Launch(dst)) : 0;
  const double from = src >= 0 ? plan_.LinkDelayUs(Me(), Launch(src)) : 0;
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

std::unique_ptr<PendingOp> InjectingCommunicator::StartReduceScatter(const void* s, void* r, size_t c, DataType t,
                                                                     ReduceOp op, void* stream) {
  BeforeCollective();
  return ForwardingCommunicator::StartReduceScatter(s, r, c, t, op, stream);
}

std::unique_ptr<PendingOp> InjectingCommunicator::StartAllGather(const void* s, void* r, size_t c, DataType t,
                                                                 void* stream) {
  BeforeCollective();
  return ForwardingCommunicator::StartAllGather(s, r, c, t, stream);
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

void InjectingCommunicator::AllToAllV(const void* s, std::span<const size_t> sc, std::span<const size_t> so, void* r,
                                      std::span<const size_t> rc, std::span<const size_t> ro, DataType t) {
  BeforeCollective();
  ForwardingCommunicator::AllToAllV(s, sc, so, r, rc, ro, t);
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

std::unique_ptr<Communicator> InjectingCommunicator::Split(int color, int key) {
  std::unique_ptr<Communicator> sub = ForwardingCommunicator::Split(color, key);
  if (!sub) return nullptr;
  std::vector<int> launch_ranks(static_cast<size_t>(sub->size()));
  const int me = Me();
  TB_CHECK_MPI(MPI_Allgather(&me, 1, MPI_INT, launch_ranks.data(), 1, MPI_INT, sub->host_comm()));
  return std::make_unique<InjectingCommunicator>(std::move(sub), plan_, std::move(launch_ranks));
}

std::unique_ptr<Communicator> WithInjectedFaults(std::unique_ptr<Communicator> comm, const InjectionPlan& plan) {
  if (!plan.Find(FaultKind::kSlowLink) && !plan.Find(FaultKind::kHang)) return comm;
  return std::make_unique<InjectingCommunicator>(std::move(comm), plan);
}

}  // namespace tb
