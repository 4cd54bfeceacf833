// A Communicator that forwards every call to another one: wrappers derive from it and override only the calls
// they observe or disturb (InjectingCommunicator; the tests' corrupting and counting communicators).
#pragma once

#include <memory>
#include <string>

#include "communicator.h"

namespace tb {

class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  std::string backend() const override { return inner_->backend(); }
  MemoryKind memory() const override { return inner_->memory(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  bool Supports(DataType t) const override { return inner_->Supports(t); }
  std::unique_ptr<CommBuffer> Allocate(size_t b) override { return inner_->Allocate(b); }
  void Upload(CommBuffer& b, const void* h, size_t n) override { inner_->Upload(b, h, n); }
  void Download(const CommBuffer& b, void* h, size_t n) override { inner_->Download(b, h, n); }
  void AllReduce(const void* s, void* r, size_t c, DataType t, ReduceOp op) override { inner_->AllReduce(s, r, c, t, op); }
  std::unique_ptr<PendingOp> StartAllReduce(const void* s, void* r, size_t c, DataType t, ReduceOp op,
                                            void* stream) override {
    return inner_->StartAllReduce(s, r, c, t, op, stream);
  }
  std::unique_ptr<PendingOp> StartReduceScatter(const void* s, void* r, size_t c, DataType t, ReduceOp op,
                                                void* stream) override {
    return inner_->StartReduceScatter(s, r, c, t, op, stream);
  }
  std::unique_ptr<PendingOp> StartAllGather(const void* s, void* r, size_t c, DataType t, void* stream) override {
    return inner_->StartAllGather(s, r, c, t, stream);
  }
  void ReduceScatter(const void* s, void* r, size_t c, DataType t, ReduceOp op) override {
    inner_->ReduceScatter(s, r, c, t, op);
  }
  void AllGather(const void* s, void* r, size_t c, DataType t) override { inner_->AllGather(s, r, c, t); }
  void AllToAll(const void* s, void* r, size_t c, DataType t) override { inner_->AllToAll(s, r, c, t); }
  void AllToAllV(const void* s, std::span<const size_t> sc, std::span<const size_t> so, void* r,
                 std::span<const size_t> rc, std::span<const size_t> ro, DataType t) override {
    inner_->AllToAllV(s, sc, so, r, rc, ro, t);
  }
  void Broadcast(const void* s, void* r, size_t c, DataType t, int root) override { inner_->Broadcast(s, r, c, t, root); }
  void Reduce(const void* s, void* r, size_t c, DataType t, ReduceOp op, int root) override {
    inner_->Reduce(s, r, c, t, op, root);
  }
  void SendRecv(const void* s, int d, void* r, int src, size_t c, DataType t) override {
    inner_->SendRecv(s, d, r, src, c, t);
  }
  void IssueTogether(const std::function<void()>& issue) override { inner_->IssueTogether(issue); }
  bool CanCapture() const override { return inner_->CanCapture(); }
  std::unique_ptr<CapturedOps> Capture(const std::function<void()>& issue) override { return inner_->Capture(issue); }
  void Synchronize() override { inner_->Synchronize(); }
  void Barrier() override { inner_->Barrier(); }
  MPI_Comm host_comm() const override { return inner_->host_comm(); }
  std::unique_ptr<Communicator> Split(int color, int key) override { return inner_->Split(color, key); }
  bool UseHierarchicalAllReduce(int node, int local_rank) override {
    return inner_->UseHierarchicalAllReduce(node, local_rank);
  }
  void Abort() override { inner_->Abort(); }

 private:
  std::unique_ptr<Communicator> inner_;
};

}  // namespace tb
