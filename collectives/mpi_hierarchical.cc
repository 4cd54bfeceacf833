#include "mpi_hierarchical.h"

#include <cstring>
#include <vector>

#include "clock.h"
#include "error.h"
#include "mpi_detail.h"

namespace tb {
namespace {

using mpi_detail::DivideByRanks;
using mpi_detail::MpiCount;
using mpi_detail::MpiOp;
using mpi_detail::MpiType;

class HierarchicalAllReduce : public PendingOp {
 public:
  HierarchicalAllReduce(const NodeCommunicators& comms, const void* send, void* recv, size_t count, DataType type,
                        ReduceOp op)
      : comms_(comms), recv_(static_cast<char*>(recv)), type_(type), op_(op), type_size_(DataTypeSize(type)) {
    // Blocks of count/m elements, the first count%m one longer: block i is local rank i's shard.
    const size_t m = static_cast<size_t>(comms.local_size);
    counts_.resize(m);
    displacements_.resize(m);
    size_t offset = 0;
    for (size_t i = 0; i < m; ++i) {
      counts_[i] = MpiCount(count / m + (i < count % m ? 1 : 0));
      displacements_[i] = MpiCount(offset);
      offset += static_cast<size_t>(counts_[i]);
    }
    shard_.resize(static_cast<size_t>(Mine()) * type_size_);
    step_started_s_ = NowSeconds();
    TB_CHECK_MPI(MPI_Ireduce_scatter(send, shard_.data(), counts_.data(), MpiType(type_), MpiOp(op_), comms_.node,
                                     &request_));
  }
  ~HierarchicalAllReduce() override {
    // Never leave a request behind: MPI would write into buffers the caller may already have freed.
    if (step_ < kDone && request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  HierarchicalAllReduce(const HierarchicalAllReduce&) = delete;
  HierarchicalAllReduce& operator=(const HierarchicalAllReduce&) = delete;

  bool Test() override {
    while (step_ < kDone) {
      int flag = 0;
      TB_CHECK_MPI(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
      if (!flag) return false;
      Advance();
    }
    return true;
  }
  void Wait() override {
    while (step_ < kDone) {
      TB_CHECK_MPI(MPI_Wait(&request_, MPI_STATUS_IGNORE));
      Advance();
    }
  }
  double Seconds() const override { return step_seconds_[0] + step_seconds_[1] + step_seconds_[2]; }
  std::optional<LinkSeconds> LinkSplit() const override {
    return LinkSeconds{step_seconds_[0] + step_seconds_[2], step_seconds_[1]};
  }

 private:
  enum Step { kReduceScatter = 0, kAcross = 1, kAllGather = 2, kDone = 3 };

  int Mine() const { return counts_[static_cast<size_t>(comms_.local_rank)]; }

  // The running step has completed: time it and start the next.
  void Advance() {
    const double now = NowSeconds();
    step_seconds_[step_] = now - step_started_s_;
    step_started_s_ = now;
    step_ = static_cast<Step>(step_ + 1);
    const MPI_Datatype type = MpiType(type_);
    if (step_ == kAcross) {
      TB_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, shard_.data(), Mine(), type, MpiOp(op_), comms_.across, &request_));
    } else if (step_ == kAllGather) {
      if (op_ == ReduceOp::kAvg) DivideByRanks(shard_.data(), static_cast<size_t>(Mine()), type_, comms_.ranks);
      const size_t at = static_cast<size_t>(displacements_[static_cast<size_t>(comms_.local_rank)]) * type_size_;
      if (!shard_.empty()) std::memcpy(recv_ + at, shard_.data(), shard_.size());
      TB_CHECK_MPI(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv_, counts_.data(), displacements_.data(),
                                   type, comms_.node, &request_));
    }
  }

  NodeCommunicators comms_;
  char* recv_;
  DataType type_;
  ReduceOp op_;
  size_t type_size_;
  std::vector<int> counts_;
  std::vector<int> displacements_;
  std::vector<char> shard_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  Step step_ = kReduceScatter;
  double step_started_s_ = 0;
  double step_seconds_[3] = {0, 0, 0};
};

}  // namespace

std::unique_ptr<PendingOp> StartHierarchicalAllReduce(const NodeCommunicators& comms, const void* send, void* recv,
                                                      size_t count, DataType type, ReduceOp op) {
  return std::make_unique<HierarchicalAllReduce>(comms, send, recv, count, type, op);
}

}  // namespace tb
