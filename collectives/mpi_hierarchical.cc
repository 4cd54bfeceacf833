#include "mpi_hierarchical.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "clock.h"
#include "error.h"
#include "mpi_detail.h"

namespace tb {
namespace {

using mpi_detail::DivideByRanks;
using mpi_detail::MpiCount;
using mpi_detail::MpiType;

template <typename T>
void Combine(T* into, const T* from, size_t count, ReduceOp op) {
  for (size_t i = 0; i < count; ++i) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: into[i] = static_cast<T>(into[i] + from[i]); break;
      case ReduceOp::kMax: into[i] = std::max(into[i], from[i]); break;
      case ReduceOp::kMin: into[i] = std::min(into[i], from[i]); break;
    }
  }
}

// into[i] = into[i] (op) from[i]; an average sums (divided once at the end).
void CombineInto(void* into, const void* from, size_t count, DataType type, ReduceOp op) {
  switch (type) {
    case DataType::kFloat32: Combine(static_cast<float*>(into), static_cast<const float*>(from), count, op); break;
    case DataType::kFloat64: Combine(static_cast<double*>(into), static_cast<const double*>(from), count, op); break;
    case DataType::kInt32: Combine(static_cast<int32_t*>(into), static_cast<const int32_t*>(from), count, op); break;
    default: MpiType(type);  // throws
  }
}

// Element ranges of a buffer cut into `parts` pieces, the first count%parts one longer.
struct Chunks {
  std::vector<size_t> begin, count;
  Chunks(size_t first, size_t total, int parts) {
    const size_t p = static_cast<size_t>(parts);
    for (size_t i = 0, at = first; i < p; ++i) {
      begin.push_back(at);
      count.push_back(total / p + (i < total % p ? 1 : 0));
      at += count.back();
    }
  }
};

// One ring pass over `comm` (rank r of p), non-blocking, a step at a time: p-1 steps, each sending one chunk to
// rank r+1 and receiving one from r-1 at once. Reduce-scatter: the received chunk is combined into ours, and rank r
// ends owning chunk (r+1) mod p reduced over the ring; all-gather: starting from that chunk, the received chunk is
// stored, and every rank ends with every chunk. Each rank sends (p-1)/p of the bytes: the ring the projection
// models.
class RingPass {
 public:
  RingPass(MPI_Comm comm, int tag, char* data, Chunks chunks, DataType type, ReduceOp op, bool reduce)
      : comm_(comm), tag_(tag), data_(data), chunks_(std::move(chunks)), type_(type), op_(op), reduce_(reduce),
        type_size_(DataTypeSize(type)) {
    TB_CHECK_MPI(MPI_Comm_rank(comm, &rank_));
    TB_CHECK_MPI(MPI_Comm_size(comm, &size_));
    if (reduce_) incoming_.resize(*std::max_element(chunks_.count.begin(), chunks_.count.end()) * type_size_);
  }
  RingPass(const RingPass&) = delete;
  RingPass& operator=(const RingPass&) = delete;
  ~RingPass() {
    if (step_ < size_ - 1 && posted_) MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE);
  }

  // Posts the next step when the last one is done; true once the pass has finished. `block` waits.
  bool Progress(bool block) {
    while (step_ < size_ - 1) {
      if (!posted_) Post();
      int done = 1;
      if (block) {
        TB_CHECK_MPI(MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE));
      } else {
        TB_CHECK_MPI(MPI_Testall(2, requests_, &done, MPI_STATUSES_IGNORE));
      }
      if (!done) return false;
      Finish();
    }
    return true;
  }

 private:
  size_t Index(int offset) const { return static_cast<size_t>(((rank_ + offset) % size_ + size_) % size_); }
  // The chunk sent at this step and the one received: reduce-scatter sends r-s and receives r-s-1; all-gather
  // sends r+1-s and receives r-s.
  size_t Sent() const { return Index(reduce_ ? -step_ : 1 - step_); }
  size_t Received() const { return Index(reduce_ ? -step_ - 1 : -step_); }

  void Post() {
    const MPI_Datatype type = MpiType(type_);
    const int right = (rank_ + 1) % size_, left = (rank_ + size_ - 1) % size_;
    const size_t out = Sent(), in = Received();
    void* into = reduce_ ? incoming_.data() : data_ + chunks_.begin[in] * type_size_;
    TB_CHECK_MPI(MPI_Irecv(into, MpiCount(chunks_.count[in]), type, left, tag_, comm_, &requests_[0]));
    TB_CHECK_MPI(MPI_Isend(data_ + chunks_.begin[out] * type_size_, MpiCount(chunks_.count[out]), type, right, tag_,
                           comm_, &requests_[1]));
    posted_ = true;
  }

  void Finish() {
    if (reduce_) {
      const size_t in = Received();
      CombineInto(data_ + chunks_.begin[in] * type_size_, incoming_.data(), chunks_.count[in], type_, op_);
    }
    posted_ = false;
    ++step_;
  }

  MPI_Comm comm_;
  int tag_;
  char* data_;
  Chunks chunks_;
  DataType type_;
  ReduceOp op_;
  bool reduce_;
  size_t type_size_;
  int rank_ = 0;
  int size_ = 1;
  int step_ = 0;
  bool posted_ = false;
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::vector<char> incoming_;
};

// Four ring passes: reduce-scatter in the node, then on the chunk this rank owns a reduce-scatter and an
// all-gather across nodes (an all-reduce), then the all-gather in the node.
class HierarchicalAllReduce : public PendingOp {
 public:
  HierarchicalAllReduce(const NodeCommunicators& comms, int sequence, const void* send, void* recv, size_t count,
                        DataType type, ReduceOp op)
      : comms_(comms), data_(static_cast<char*>(recv)), type_(type), op_(op), node_chunks_(0, count, comms.local_size),
        tag_base_(16 + 4 * (sequence % 8000)) {
    if (send != recv) std::memcpy(recv, send, count * DataTypeSize(type));
    pass_started_s_ = NowSeconds();
    pass_ = std::make_unique<RingPass>(comms_.node, tag_base_, data_, node_chunks_, type_, op_, true);
  }

  bool Test() override { return Progress(false); }
  void Wait() override { Progress(true); }
  double Seconds() const override { return intra_s_ + inter_s_; }
  std::optional<LinkSeconds> LinkSplit() const override { return LinkSeconds{intra_s_, inter_s_}; }

 private:
  bool Progress(bool block) {
    while (pass_) {
      if (!pass_->Progress(block)) return false;
      NextPass();
    }
    return true;
  }

  // The chunk of the node's buffer this rank owns after the node's reduce-scatter, cut across the nodes.
  Chunks OwnedAcross() const {
    const size_t owned = static_cast<size_t>((comms_.local_rank + 1) % comms_.local_size);
    int nodes = 1;
    TB_CHECK_MPI(MPI_Comm_size(comms_.across, &nodes));
    return Chunks(node_chunks_.begin[owned], node_chunks_.count[owned], nodes);
  }

  void NextPass() {
    const double now = NowSeconds();
    (passes_done_ == 1 || passes_done_ == 2 ? inter_s_ : intra_s_) += now - pass_started_s_;
    pass_started_s_ = now;
    ++passes_done_;
    pass_.reset();
    if (passes_done_ == 1 || passes_done_ == 2) {
      pass_ = std::make_unique<RingPass>(comms_.across, tag_base_ + passes_done_, data_, OwnedAcross(), type_, op_,
                                         passes_done_ == 1);
    } else if (passes_done_ == 3) {
      if (op_ == ReduceOp::kAvg) {
        const size_t owned = static_cast<size_t>((comms_.local_rank + 1) % comms_.local_size);
        DivideByRanks(data_ + node_chunks_.begin[owned] * DataTypeSize(type_), node_chunks_.count[owned], type_,
                      comms_.ranks);
      }
      pass_ = std::make_unique<RingPass>(comms_.node, tag_base_ + 3, data_, node_chunks_, type_, op_, false);
    }
  }

  NodeCommunicators comms_;
  char* data_;
  DataType type_;
  ReduceOp op_;
  Chunks node_chunks_;
  int tag_base_;  // of this operation's passes: operations in flight at once never match each other's messages
  std::unique_ptr<RingPass> pass_;
  int passes_done_ = 0;
  double pass_started_s_ = 0;
  double intra_s_ = 0;
  double inter_s_ = 0;
};

}  // namespace

std::unique_ptr<PendingOp> StartHierarchicalAllReduce(const NodeCommunicators& comms, int sequence, const void* send,
                                                      void* recv, size_t count, DataType type, ReduceOp op) {
  return std::make_unique<HierarchicalAllReduce>(comms, sequence, send, recv, count, type, op);
}

}  // namespace tb
