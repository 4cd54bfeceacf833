#include "mpi_communicator.h"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "clock.h"
#include "console.h"
#include "error.h"
#include "mpi_detail.h"
#include "mpi_hierarchical.h"

namespace tb {
namespace mpi_detail {

MPI_Datatype MpiType(DataType type) {
  switch (type) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kFloat16:
    case DataType::kBFloat16: break;
  }
  throw InputError("the MPI backend has no " + DataTypeName(type) + " reductions; use --backend cuda or --dtype float");
}

MPI_Op MpiOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return MPI_SUM;  // avg = sum, then divided by the rank count
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return MPI_SUM;
}

int MpiCount(size_t count) {
  if (count > static_cast<size_t>(INT_MAX)) {
    throw InputError("message of " + std::to_string(count) + " elements exceeds MPI's int count limit");
  }
  return static_cast<int>(count);
}

template <typename T>
void DivideAll(void* data, size_t count, int divisor) {
  T* values = static_cast<T*>(data);
  for (size_t i = 0; i < count; ++i) values[i] = static_cast<T>(values[i] / divisor);
}

// ncclAvg semantics on the host: divide the sum by the number of ranks (integer division for int32).
void DivideByRanks(void* data, size_t count, DataType type, int ranks) {
  switch (type) {
    case DataType::kFloat32: DivideAll<float>(data, count, ranks); break;
    case DataType::kFloat64: DivideAll<double>(data, count, ranks); break;
    case DataType::kInt32: DivideAll<int32_t>(data, count, ranks); break;
    default: MpiType(type);  // throws
  }
}

}  // namespace mpi_detail

namespace {

using mpi_detail::DivideByRanks;
using mpi_detail::MpiCount;
using mpi_detail::MpiOp;
using mpi_detail::MpiType;

// MPI_Alltoallv's counts and displacements are ints; Open MPI 4.1 has no large-count MPI_Alltoallv_c to fall back on.
std::vector<int> MpiAllToAllVInts(std::span<const size_t> values, const char* what) {
  std::vector<int> ints(values.size());
  for (size_t peer = 0; peer < values.size(); ++peer) {
    if (values[peer] > static_cast<size_t>(INT_MAX)) {
      throw InputError(Format("alltoallv: the %s of peer %zu, %zu elements, exceeds MPI_Alltoallv's int limit (%d): "
                              "Open MPI 4.1 has no large-count variant; move fewer elements per rank or use the NCCL "
                              "backend", what, peer, values[peer], INT_MAX));
    }
    ints[peer] = static_cast<int>(values[peer]);
  }
  return ints;
}

// The MPI type that moves `type`'s elements as they are: MPI has no fp16/bf16, but moving one is moving 16 bits.
MPI_Datatype MpiMoveType(DataType type) {
  if (type == DataType::kFloat16 || type == DataType::kBFloat16) return MPI_UINT16_T;
  return MpiType(type);
}

// Page-aligned host memory: what a real training buffer would be, and what nccl-tests' host path uses.
class HostBuffer : public CommBuffer {
 public:
  explicit HostBuffer(size_t bytes) : bytes_(bytes) {
    if (posix_memalign(&data_, 4096, bytes ? bytes : 1) != 0) {
      throw RuntimeError("cannot allocate " + std::to_string(bytes) + " bytes of host memory for a communication buffer");
    }
    std::memset(data_, 0, bytes ? bytes : 1);  // touch the pages now, not inside a timed loop
  }
  ~HostBuffer() override { std::free(data_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() override { return data_; }
  size_t bytes() const override { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

// A non-blocking MPI collective in flight (MPI_Iallreduce, MPI_Ireduce_scatter_block, MPI_Iallgather); `complete`
// runs once the data has arrived (an average divided by the rank count, an in-place block moved into place).
class MpiPendingOp : public PendingOp {
 public:
  explicit MpiPendingOp(std::function<void()> complete = {})
      : complete_(std::move(complete)), started_s_(NowSeconds()) {}
  ~MpiPendingOp() override {
    // Never leave a request behind: MPI would write into buffers the caller may already have freed.
    if (!done_ && request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  MpiPendingOp(const MpiPendingOp&) = delete;
  MpiPendingOp& operator=(const MpiPendingOp&) = delete;

  MPI_Request* request() { return &request_; }
  bool Test() override {
    if (done_) return true;
    int flag = 0;
    TB_CHECK_MPI(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    if (flag) Complete();
    return done_;
  }
  void Wait() override {
    if (done_) return;
    TB_CHECK_MPI(MPI_Wait(&request_, MPI_STATUS_IGNORE));
    Complete();
  }
  double Seconds() const override { return completed_s_ - started_s_; }

 private:
  void Complete() {
    done_ = true;
    completed_s_ = NowSeconds();
    if (complete_) complete_();
  }

  MPI_Request request_ = MPI_REQUEST_NULL;
  std::function<void()> complete_;
  bool done_ = false;
  double started_s_;
  double completed_s_ = 0;
};

// What finishes an average once the sum of `count` elements at `recv` has arrived (nothing for other ops).
std::function<void()> AverageAfter(void* recv, size_t count, DataType type, ReduceOp op, int ranks) {
  if (op != ReduceOp::kAvg) return {};
  return [=] { DivideByRanks(recv, count, type, ranks); };
}

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of `comm` (a private duplicate).
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    TB_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    TB_CHECK_MPI(MPI_Comm_size(comm_, &size_));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Comm* comm : {&nodes_.node, &nodes_.across}) {
      if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
    }
    MPI_Comm_free(&comm_);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  std::string backend() const override { return "mpi"; }
  MemoryKind memory() const override { return MemoryKind::kHost; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool Supports(DataType type) const override {
    return type == DataType::kFloat32 || type == DataType::kFloat64 || type == DataType::kInt32;
  }

  std::unique_ptr<CommBuffer> Allocate(size_t bytes) override { return std::make_unique<HostBuffer>(bytes); }
  void Upload(CommBuffer& buffer, const void* host, size_t bytes) override {
    CheckFits(buffer.bytes(), bytes);
    std::memcpy(buffer.data(), host, bytes);
  }
  void Download(const CommBuffer& buffer, void* host, size_t bytes) override {
    CheckFits(buffer.bytes(), bytes);
    std::memcpy(host, const_cast<CommBuffer&>(buffer).data(), bytes);
  }

  void AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) override {
    if (hierarchical_) return StartHierarchicalAllReduce(nodes_, sequence_++, send, recv, count, type, op)->Wait();
    TB_CHECK_MPI(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, MpiCount(count), MpiType(type), MpiOp(op), comm_));
    if (op == ReduceOp::kAvg) DivideByRanks(recv, count, type, size_);
  }

  std::unique_ptr<PendingOp> StartAllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                                            void*) override {
    if (hierarchical_) return StartHierarchicalAllReduce(nodes_, sequence_++, send, recv, count, type, op);
    auto pending = std::make_unique<MpiPendingOp>(AverageAfter(recv, count, type, op, size_));
    TB_CHECK_MPI(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, MpiCount(count), MpiType(type), MpiOp(op),
                                comm_, pending->request()));
    return pending;
  }

  std::unique_ptr<PendingOp> StartReduceScatter(const void* send, void* recv, size_t recv_count, DataType type,
                                                ReduceOp op, void*) override {
    const size_t block_bytes = recv_count * DataTypeSize(type);
    void* base = const_cast<void*>(send);
    const bool in_place = static_cast<const char*>(send) + rank_ * block_bytes == recv;
    std::function<void()> average = AverageAfter(recv, recv_count, type, op, size_);
    auto pending = std::make_unique<MpiPendingOp>([=, this] {
      if (in_place && rank_ != 0) std::memmove(recv, base, block_bytes);  // as ReduceScatter does
      if (average) average();
    });
    TB_CHECK_MPI(MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : send, in_place ? base : recv,
                                           MpiCount(recv_count), MpiType(type), MpiOp(op), comm_, pending->request()));
    return pending;
  }

  std::unique_ptr<PendingOp> StartAllGather(const void* send, void* recv, size_t send_count, DataType type,
                                            void*) override {
    const bool in_place = static_cast<const char*>(recv) + rank_ * send_count * DataTypeSize(type) == send;
    auto pending = std::make_unique<MpiPendingOp>();
    TB_CHECK_MPI(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, MpiCount(send_count), MpiType(type), recv,
                                MpiCount(send_count), MpiType(type), comm_, pending->request()));
    return pending;
  }

  void ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op) override {
    // NCCL's in-place layout puts this rank's block at send + rank*recv_count; MPI's in-place result lands
    // at the start of the buffer, so it is moved into place afterwards.
    const size_t block_bytes = recv_count * DataTypeSize(type);
    const bool in_place = static_cast<const char*>(send) + rank_ * block_bytes == recv;
    if (in_place) {
      void* base = const_cast<void*>(send);
      TB_CHECK_MPI(MPI_Reduce_scatter_block(MPI_IN_PLACE, base, MpiCount(recv_count), MpiType(type), MpiOp(op), comm_));
      if (rank_ != 0) std::memmove(recv, base, block_bytes);
    } else {
      TB_CHECK_MPI(MPI_Reduce_scatter_block(send, recv, MpiCount(recv_count), MpiType(type), MpiOp(op), comm_));
    }
    if (op == ReduceOp::kAvg) DivideByRanks(recv, recv_count, type, size_);
  }

  void AllGather(const void* send, void* recv, size_t send_count, DataType type) override {
    // In place (NCCL layout) when send already sits at recv + rank*send_count, which is MPI's layout too.
    const bool in_place = static_cast<const char*>(recv) + rank_ * send_count * DataTypeSize(type) == send;
    TB_CHECK_MPI(MPI_Allgather(in_place ? MPI_IN_PLACE : send, MpiCount(send_count), MpiType(type), recv,
                               MpiCount(send_count), MpiType(type), comm_));
  }

  void AllToAll(const void* send, void* recv, size_t count, DataType type) override {
    TB_CHECK_MPI(MPI_Alltoall(send == recv ? MPI_IN_PLACE : send, MpiCount(count), MpiType(type), recv,
                              MpiCount(count), MpiType(type), comm_));
  }

  void AllToAllV(const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_offsets,
                 void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_offsets,
                 DataType type) override {
    CheckAllToAllVLayout(size_, send, send_counts, send_offsets, recv, recv_counts, recv_offsets);
    const std::vector<int> sc = MpiAllToAllVInts(send_counts, "send count");
    const std::vector<int> sd = MpiAllToAllVInts(send_offsets, "send offset");
    const std::vector<int> rc = MpiAllToAllVInts(recv_counts, "receive count");
    const std::vector<int> rd = MpiAllToAllVInts(recv_offsets, "receive offset");
    TB_CHECK_MPI(MPI_Alltoallv(send, sc.data(), sd.data(), MpiMoveType(type), recv, rc.data(), rd.data(),
                               MpiMoveType(type), comm_));
  }

  void Broadcast(const void* send, void* recv, size_t count, DataType type, int root) override {
    // MPI broadcasts in place; NCCL's out-of-place form copies root's input into its output first.
    if (rank_ == root && send != recv) std::memcpy(recv, send, count * DataTypeSize(type));
    TB_CHECK_MPI(MPI_Bcast(recv, MpiCount(count), MpiType(type), root, comm_));
  }

  void Reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root) override {
    const void* source = (rank_ == root && send == recv) ? MPI_IN_PLACE : send;
    TB_CHECK_MPI(MPI_Reduce(source, recv, MpiCount(count), MpiType(type), MpiOp(op), root, comm_));
    if (op == ReduceOp::kAvg && rank_ == root) DivideByRanks(recv, count, type, size_);
  }

  void SendRecv(const void* send, int dst, void* recv, int src, size_t count, DataType type) override {
    constexpr int kTag = 7;
    if (send == recv && dst >= 0 && src >= 0) {
      TB_CHECK_MPI(MPI_Sendrecv_replace(recv, MpiCount(count), MpiType(type), dst, kTag, src, kTag, comm_,
                                        MPI_STATUS_IGNORE));
      return;
    }
    // A skipped side moves nothing (count 0), so its buffer may be null.
    TB_CHECK_MPI(MPI_Sendrecv(send, dst >= 0 ? MpiCount(count) : 0, MpiType(type), dst >= 0 ? dst : MPI_PROC_NULL, kTag,
                              recv, src >= 0 ? MpiCount(count) : 0, MpiType(type), src >= 0 ? src : MPI_PROC_NULL,
                              kTag, comm_, MPI_STATUS_IGNORE));
  }

  void Synchronize() override {}  // MPI calls here are blocking: complete on return
  void Barrier() override { TB_CHECK_MPI(MPI_Barrier(comm_)); }
  MPI_Comm host_comm() const override { return comm_; }

  bool UseHierarchicalAllReduce(int node, int local_rank) override {
    if (hierarchical_) return true;
    TB_CHECK_MPI(MPI_Comm_split(comm_, node, local_rank, &nodes_.node));
    TB_CHECK_MPI(MPI_Comm_split(comm_, local_rank, node, &nodes_.across));
    MPI_Comm_set_errhandler(nodes_.node, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(nodes_.across, MPI_ERRORS_RETURN);
    TB_CHECK_MPI(MPI_Comm_rank(nodes_.node, &nodes_.local_rank));
    TB_CHECK_MPI(MPI_Comm_size(nodes_.node, &nodes_.local_size));
    nodes_.ranks = size_;
    int sizes[2] = {nodes_.local_size, -nodes_.local_size};
    TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, comm_));
    if (sizes[0] != -sizes[1]) {
      throw InputError("a hierarchical all-reduce needs the same number of ranks on every node (" +
                       std::to_string(-sizes[1]) + " to " + std::to_string(sizes[0]) + ")");
    }
    hierarchical_ = true;
    return true;
  }

  std::unique_ptr<Communicator> Split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    TB_CHECK_MPI(MPI_Comm_split(comm_, color >= 0 ? color : MPI_UNDEFINED, key, &sub));
    if (sub == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(sub);
  }

  // Blocking MPI calls cannot be cancelled one communicator at a time; the watchdog's MPI_Abort ends the job.
  void Abort() override {}

 private:
  static void CheckFits(size_t capacity, size_t bytes) {
    if (bytes > capacity) {
      throw RuntimeError("copy of " + std::to_string(bytes) + " bytes into a buffer of " + std::to_string(capacity));
    }
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  bool hierarchical_ = false;
  NodeCommunicators nodes_;  // once hierarchical
  int sequence_ = 0;         // hierarchical all-reduces started
};

}  // namespace

std::unique_ptr<Communicator> MakeMpiCommunicator(MPI_Comm mpi_comm) {
  MPI_Comm dup = MPI_COMM_NULL;
  TB_CHECK_MPI(MPI_Comm_dup(mpi_comm, &dup));
  return std::make_unique<MpiCommunicator>(dup);
}

}  // namespace tb
