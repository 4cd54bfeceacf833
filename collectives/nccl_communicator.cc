// NCCL backend of the Communicator: device memory, one NCCL communicator and its own stream per object.
// The NCCL communicator is non-blocking (config.blocking = 0): no NCCL call waits for other ranks inside NCCL,
// so that Abort() from the watchdog thread can always get in and release a rank stuck in a collective.
#include "nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <source_location>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/cuda_raii.h"
#include "error.h"
#include "log.h"

namespace tb {
namespace {

ncclDataType_t ToNccl(DataType type) {
  switch (type) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt32: return ncclInt32;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
  }
  throw RuntimeError("NCCL communicator: unknown data type " + std::to_string(static_cast<int>(type)));
}

ncclRedOp_t ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  throw RuntimeError("NCCL communicator: unknown reduce operation " + std::to_string(static_cast<int>(op)));
}

ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// The state of a non-blocking communicator: ncclInProgress while an operation is still being set up, then how
// it ended (or why the query itself failed).
ncclResult_t AsyncState(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
  return query != ncclSuccess ? query : state;
}

// NCCL's rule for non-blocking communicators: a call that returned ncclInProgress is finished once the
// communicator's state is no longer ncclInProgress. `poll` reads that state.
template <typename Poll>
ncclResult_t WaitWhileInProgress(ncclResult_t result, Poll poll) {
  while (result == ncclInProgress) {
    std::this_thread::yield();
    result = poll();
  }
  return result;
}

// Completes the creation of `comm` (ncclCommInitRankConfig or ncclCommSplit); a failed one is aborted, which is
// how NCCL releases a communicator that never became usable.
void FinishCreation(ncclComm_t comm, ncclResult_t result, const char* what, const std::source_location& where) {
  result = WaitWhileInProgress(result, [comm] { return AsyncState(comm); });
  if (result == ncclSuccess) return;
  const std::string failure =
      cuda_detail::NcclFailure(result, comm, what, where.file_name(), static_cast<int>(where.line()));
  if (comm != nullptr) (void)ncclCommAbort(comm);
  throw RuntimeError(failure);
}

// ncclGroupStart calls this thread has open through IssueTogether: inside one, NCCL only records each call, and its
// state stays in progress until the group ends, so a call that answers ncclInProgress must not be waited for there.
thread_local int open_groups = 0;

// An MPI communicator of ours (a dup or a split), freed on destruction while MPI is still up.
class MpiComm {
 public:
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {}
  ~MpiComm() {
    int finalized = 0;
    if (comm_ != MPI_COMM_NULL && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) (void)MPI_Comm_free(&comm_);
  }
  MpiComm(MpiComm&& other) noexcept : comm_(std::exchange(other.comm_, MPI_COMM_NULL)) {}
  MpiComm& operator=(MpiComm&&) = delete;

  MPI_Comm get() const { return comm_; }

 private:
  MPI_Comm comm_;
};

class NcclBuffer final : public CommBuffer {
 public:
  explicit NcclBuffer(size_t bytes) : memory_(bytes) {}
  void* data() override { return memory_.data(); }
  size_t bytes() const override { return memory_.bytes(); }

 private:
  DeviceBuffer memory_;
};

// The events of one started all_reduce: the producer's work done (our stream waits for it), the all_reduce's start
// and its end. Kept by the communicator and reused bucket after bucket, step after step, rather than three created
// and destroyed per bucket.
struct AllReduceEvents {
  Event produced;
  Event start;
  Event done;
};

class NcclCommunicator final : public Communicator {
 public:
  // Owns `comm` (created and ready), `mpi_comm` (the same ranks in the same order) and `stream`.
  NcclCommunicator(ncclComm_t comm, MpiComm mpi_comm, Stream stream, int rank, int size)
      : comm_(comm), mpi_comm_(std::move(mpi_comm)), stream_(std::move(stream)), rank_(rank), size_(size) {}
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  std::string backend() const override { return "nccl"; }
  MemoryKind memory() const override { return MemoryKind::kDevice; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool Supports(DataType) const override { return true; }

  std::unique_ptr<CommBuffer> Allocate(size_t bytes) override { return std::make_unique<NcclBuffer>(bytes); }
  void Upload(CommBuffer& buffer, const void* host, size_t bytes) override;
  void Download(const CommBuffer& buffer, void* host, size_t bytes) override;

  void AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) override;
  std::unique_ptr<PendingOp> StartAllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                                            void* after_stream) override;
  std::unique_ptr<PendingOp> StartReduceScatter(const void* send, void* recv, size_t recv_count, DataType type,
                                                ReduceOp op, void* after_stream) override;
  std::unique_ptr<PendingOp> StartAllGather(const void* send, void* recv, size_t send_count, DataType type,
                                            void* after_stream) override;
  // Throws when NCCL reports an asynchronous error or the communicator was aborted.
  void CheckHealth();
  // A set of events for an all_reduce, made only when none is spare; given back when its PendingOp goes.
  std::unique_ptr<AllReduceEvents> TakeEvents();
  void ReturnEvents(std::unique_ptr<AllReduceEvents> events);
  void ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op) override;
  void AllGather(const void* send, void* recv, size_t send_count, DataType type) override;
  void AllToAll(const void* send, void* recv, size_t count, DataType type) override;
  void AllToAllV(const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_offsets,
                 void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_offsets,
                 DataType type) override;
  void Broadcast(const void* send, void* recv, size_t count, DataType type, int root) override;
  void Reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root) override;
  void SendRecv(const void* send, int dst, void* recv, int src, size_t count, DataType type) override;

  void IssueTogether(const std::function<void()>& issue) override;
  bool CanCapture() const override { return true; }
  std::unique_ptr<CapturedOps> Capture(const std::function<void()>& issue) override;
  // Queues one launch of a captured graph on our stream.
  void LaunchGraph(const CapturedGraph& graph);

  void Synchronize() override;
  void Barrier() override { TB_CHECK_MPI(MPI_Barrier(mpi_comm_.get())); }
  MPI_Comm host_comm() const override { return mpi_comm_.get(); }
  std::unique_ptr<Communicator> Split(int color, int key) override;
  void Abort() override;

 private:
  // Records the producer's, the start and the done events around `issue()` (an operation queued on our stream).
  template <typename Issue>
  std::unique_ptr<PendingOp> StartOnStream(void* after_stream, Issue issue);
  void ThrowIfAborted() const;
  // The communicator's state, read under the lock; throws once it has been aborted.
  ncclResult_t PollState();
  // NCCL's operation for `op`. Over one rank an average is the value itself: a sum, which NCCL copies, rather
  // than its one-rank kernel for ncclAvg, which in 2.28 drops the tail of some sizes (tests/gpu_test.cc,
  // AverageKeepsEveryElement).
  ncclRedOp_t OpFor(ReduceOp op) const { return size_ == 1 && op == ReduceOp::kAvg ? ncclSum : ToNccl(op); }
  // The child communicator a split stores into `slot` from NCCL's own thread, once it is there.
  ncclComm_t AwaitChild(ncclComm_t& slot);
  [[noreturn]] void ThrowFailure(ncclResult_t result, const char* what, const std::source_location& where) const;
  // Waits for an operation whose call returned `result`; throws if it failed.
  void Settle(ncclResult_t result, const char* what, const std::source_location& where);
  // Issues one NCCL operation: `call(comm, stream)`.
  template <typename Call>
  void Enqueue(const char* what, Call call, std::source_location where = std::source_location::current());
  // Issues `calls(comm, stream, record)` (ncclSend/ncclRecv, each result passed to `record`) as one NCCL group.
  template <typename Calls>
  void Grouped(const char* what, Calls calls, std::source_location where = std::source_location::current());
  void CheckFits(const CommBuffer& buffer, size_t bytes, const char* what) const;

  ncclComm_t comm_;
  MpiComm mpi_comm_;  // for Barrier, Prefix and host_comm()
  Stream stream_;
  const int rank_;
  const int size_;
  // Guards every NCCL call on comm_ against Abort(), which frees comm_ (it may run on the watchdog thread while
  // this one polls in Synchronize). Held only for single, non-blocking NCCL calls, so Abort() never waits long.
  std::mutex mutex_;
  bool aborted_ = false;  // under mutex_
  // Events of finished all_reduces, for the next ones. Its own lock: a PendingOp may go on another thread.
  std::mutex events_mutex_;
  std::vector<std::unique_ptr<AllReduceEvents>> spare_events_;  // under events_mutex_
};

NcclCommunicator::~NcclCommunicator() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return;  // Abort() has released comm_ already
  // While an exception unwinds, or after an asynchronous error, peers may never finish their part of the work
  // still queued, and ncclCommFinalize would wait for them forever: abort instead.
  if (std::uncaught_exceptions() == 0 && AsyncState(comm_) == ncclSuccess) {
    const ncclResult_t finalized = WaitWhileInProgress(ncclCommFinalize(comm_), [this] { return AsyncState(comm_); });
    if (finalized == ncclSuccess) {
      const ncclResult_t destroyed = ncclCommDestroy(comm_);
      if (destroyed != ncclSuccess) {
        Warn(cuda_detail::NcclFailure(destroyed, comm_, "ncclCommDestroy", __FILE__, __LINE__));
      }
      return;
    }
    Warn(cuda_detail::NcclFailure(finalized, comm_, "ncclCommFinalize", __FILE__, __LINE__) + "; aborting instead");
  }
  const ncclResult_t result = ncclCommAbort(comm_);
  if (result != ncclSuccess) Warn(cuda_detail::NcclFailure(result, comm_, "ncclCommAbort", __FILE__, __LINE__));
}

void NcclCommunicator::ThrowIfAborted() const {
  if (aborted_) {
    throw RuntimeError("NCCL communicator aborted (by the watchdog or after a failure); its operations were abandoned");
  }
}

// A non-blocking parent creates the child on a thread of NCCL's own, which stores the handle into `slot` when it
// is done; the parent's own state may read ncclSuccess before that (seen with NCCL 2.28 on an H200: a one-rank
// split returned with `child` still null). Waits for the store, watching the parent for an error or an Abort().
ncclComm_t NcclCommunicator::AwaitChild(ncclComm_t& slot) {
  const std::atomic_ref<ncclComm_t> stored(slot);
  ncclComm_t child = stored.load(std::memory_order_acquire);
  while (child == nullptr) {
    const ncclResult_t state = PollState();
    if (state != ncclSuccess && state != ncclInProgress) {
      ThrowFailure(state, "ncclCommSplit (waiting for the new communicator)", std::source_location::current());
    }
    std::this_thread::yield();
    child = stored.load(std::memory_order_acquire);
  }
  return child;
}

ncclResult_t NcclCommunicator::PollState() {
  std::lock_guard<std::mutex> lock(mutex_);
  ThrowIfAborted();
  return AsyncState(comm_);
}

void NcclCommunicator::ThrowFailure(ncclResult_t result, const char* what, const std::source_location& where) const {
  cuda_detail::ThrowNcclError(result, comm_, what, where.file_name(), static_cast<int>(where.line()));
}

void NcclCommunicator::Settle(ncclResult_t result, const char* what, const std::source_location& where) {
  result = WaitWhileInProgress(result, [this] { return PollState(); });
  if (result != ncclSuccess) ThrowFailure(result, what, where);
}

template <typename Call>
void NcclCommunicator::Enqueue(const char* what, Call call, std::source_location where) {
  ncclResult_t result = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ThrowIfAborted();
    result = call(comm_, stream_.get());
  }
  if (result == ncclInProgress && open_groups > 0) return;  // recorded; IssueTogether's ncclGroupEnd settles it
  Settle(result, what, where);
}

template <typename Calls>
void NcclCommunicator::Grouped(const char* what, Calls calls, std::source_location where) {
  ncclResult_t first_failure = ncclSuccess;
  ncclResult_t group_result = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ThrowIfAborted();
    TB_CHECK_NCCL(ncclGroupStart());
    // Calls inside a group only record their work; the group is closed whatever they return, since a group
    // left open would capture every later NCCL call of this thread.
    calls(comm_, stream_.get(), [&first_failure](ncclResult_t result) {
      if (first_failure == ncclSuccess && result != ncclSuccess && result != ncclInProgress) first_failure = result;
    });
    group_result = ncclGroupEnd();
  }
  if (group_result == ncclInProgress && open_groups > 0) group_result = ncclSuccess;  // nested: the outer group settles
  group_result = WaitWhileInProgress(group_result, [this] { return PollState(); });
  if (first_failure != ncclSuccess) ThrowFailure(first_failure, what, where);  // the more specific of the two
  if (group_result != ncclSuccess) ThrowFailure(group_result, "ncclGroupEnd", where);
}

void NcclCommunicator::CheckFits(const CommBuffer& buffer, size_t bytes, const char* what) const {
  if (bytes > buffer.bytes()) {
    throw RuntimeError(std::string("NCCL communicator: ") + what + " of " + std::to_string(bytes) + " bytes into a " +
                       std::to_string(buffer.bytes()) + "-byte buffer");
  }
}

// Copies go on our stream, so that they are ordered after the collectives already issued on the buffer, and
// Synchronize() waits for them without losing the ability to be aborted.
void NcclCommunicator::Upload(CommBuffer& buffer, const void* host, size_t bytes) {
  CheckFits(buffer, bytes, "upload");
  TB_CHECK_CUDA(cudaMemcpyAsync(buffer.data(), host, bytes, cudaMemcpyHostToDevice, stream_.get()));
  Synchronize();
}

void NcclCommunicator::Download(const CommBuffer& buffer, void* host, size_t bytes) {
  CheckFits(buffer, bytes, "download");
  // CommBuffer::data() is not const, but reading from it is.
  const void* device = const_cast<CommBuffer&>(buffer).data();
  TB_CHECK_CUDA(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_.get()));
  Synchronize();
}

void NcclCommunicator::AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) {
  Enqueue("ncclAllReduce", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllReduce(send, recv, count, ToNccl(type), OpFor(op), comm, stream);
  });
}

void NcclCommunicator::ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op) {
  Enqueue("ncclReduceScatter", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclReduceScatter(send, recv, recv_count, ToNccl(type), OpFor(op), comm, stream);
  });
}

void NcclCommunicator::AllGather(const void* send, void* recv, size_t send_count, DataType type) {
  Enqueue("ncclAllGather", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclAllGather(send, recv, send_count, ToNccl(type), comm, stream);
  });
}

void NcclCommunicator::Broadcast(const void* send, void* recv, size_t count, DataType type, int root) {
  Enqueue("ncclBroadcast", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclBroadcast(send, recv, count, ToNccl(type), root, comm, stream);
  });
}

void NcclCommunicator::Reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root) {
  Enqueue("ncclReduce", [&](ncclComm_t comm, cudaStream_t stream) {
    return ncclReduce(send, recv, count, ToNccl(type), OpFor(op), root, comm, stream);
  });
}

void NcclCommunicator::AllToAll(const void* send, void* recv, size_t count, DataType type) {
  const ncclDataType_t nccl_type = ToNccl(type);
  const size_t block_bytes = count * DataTypeSize(type);
  Grouped("ncclSend/ncclRecv (alltoall)", [&](ncclComm_t comm, cudaStream_t stream, auto record) {
    for (int peer = 0; peer < size_; ++peer) {
      const size_t offset = static_cast<size_t>(peer) * block_bytes;
      record(ncclSend(static_cast<const char*>(send) + offset, count, nccl_type, peer, comm, stream));
      record(ncclRecv(static_cast<char*>(recv) + offset, count, nccl_type, peer, comm, stream));
    }
  });
}

// Peers with nothing to exchange get no call: NCCL would set up a connection for an empty message. The block to this
// rank goes through NCCL as well (a send to itself in the group), which copies it on the device.
void NcclCommunicator::AllToAllV(const void* send, std::span<const size_t> send_counts,
                                 std::span<const size_t> send_offsets, void* recv, std::span<const size_t> recv_counts,
                                 std::span<const size_t> recv_offsets, DataType type) {
  CheckAllToAllVLayout(size_, send, send_counts, send_offsets, recv, recv_counts, recv_offsets);
  const ncclDataType_t nccl_type = ToNccl(type);
  const size_t type_size = DataTypeSize(type);
  Grouped("ncclSend/ncclRecv (alltoallv)", [&](ncclComm_t comm, cudaStream_t stream, auto record) {
    for (int peer = 0; peer < size_; ++peer) {
      const size_t p = static_cast<size_t>(peer);
      if (send_counts[p] > 0) {
        const char* block = static_cast<const char*>(send) + send_offsets[p] * type_size;
        record(ncclSend(block, send_counts[p], nccl_type, peer, comm, stream));
      }
      if (recv_counts[p] > 0) {
        char* block = static_cast<char*>(recv) + recv_offsets[p] * type_size;
        record(ncclRecv(block, recv_counts[p], nccl_type, peer, comm, stream));
      }
    }
  });
}

void NcclCommunicator::SendRecv(const void* send, int dst, void* recv, int src, size_t count, DataType type) {
  const ncclDataType_t nccl_type = ToNccl(type);
  Grouped("ncclSend/ncclRecv", [&](ncclComm_t comm, cudaStream_t stream, auto record) {
    if (dst >= 0) record(ncclSend(send, count, nccl_type, dst, comm, stream));
    if (src >= 0) record(ncclRecv(recv, count, nccl_type, src, comm, stream));
  });
}

void NcclCommunicator::CheckHealth() {
  const ncclResult_t state = PollState();
  if (state != ncclSuccess && state != ncclInProgress) {
    ThrowFailure(state, "NCCL operation (reported by ncclCommGetAsyncError)", std::source_location::current());
  }
}

namespace {

// An all_reduce queued on the communicator's stream; complete when the event recorded after it has passed.
// Polled like Synchronize(), so that an asynchronous error or an abort ends a wait.
class NcclPendingAllReduce : public PendingOp {
 public:
  NcclPendingAllReduce(NcclCommunicator& owner, std::unique_ptr<AllReduceEvents> events)
      : owner_(owner), events_(std::move(events)) {}
  // Recording the events again for a later all_reduce is safe even before this one finished (a record replaces
  // the event's state; waits already queued keep the state they saw).
  ~NcclPendingAllReduce() override { owner_.ReturnEvents(std::move(events_)); }
  NcclPendingAllReduce(const NcclPendingAllReduce&) = delete;
  NcclPendingAllReduce& operator=(const NcclPendingAllReduce&) = delete;

  bool Test() override {
    if (done_) return true;
    const cudaError_t status = cudaEventQuery(events_->done.get());
    owner_.CheckHealth();  // after the query: an abort also ends the stuck kernels
    if (status == cudaSuccess) {
      done_ = true;
    } else if (status != cudaErrorNotReady) {
      cuda_detail::ThrowCudaError(status, "cudaEventQuery(all_reduce done)", __FILE__, __LINE__);
    }
    return done_;
  }
  void Wait() override {
    while (!Test()) std::this_thread::yield();
  }
  double Seconds() const override { return Event::ElapsedSeconds(events_->start, events_->done); }
  AllReduceEvents& events() { return *events_; }

 private:
  NcclCommunicator& owner_;
  std::unique_ptr<AllReduceEvents> events_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<AllReduceEvents> NcclCommunicator::TakeEvents() {
  {
    std::lock_guard<std::mutex> lock(events_mutex_);
    if (!spare_events_.empty()) {
      std::unique_ptr<AllReduceEvents> events = std::move(spare_events_.back());
      spare_events_.pop_back();
      return events;
    }
  }
  return std::make_unique<AllReduceEvents>();
}

void NcclCommunicator::ReturnEvents(std::unique_ptr<AllReduceEvents> events) {
  std::lock_guard<std::mutex> lock(events_mutex_);
  spare_events_.push_back(std::move(events));
}

template <typename Issue>
std::unique_ptr<PendingOp> NcclCommunicator::StartOnStream(void* after_stream, Issue issue) {
  // Owned by the pending op from here on, so that a failing call below still gives the events back.
  auto pending = std::make_unique<NcclPendingAllReduce>(*this, TakeEvents());
  AllReduceEvents& events = pending->events();
  if (after_stream != nullptr) {
    // Our stream waits for the producer's queued work (the backward kernels that wrote this bucket).
    events.produced.Record(static_cast<cudaStream_t>(after_stream));
    TB_CHECK_CUDA(cudaStreamWaitEvent(stream_.get(), events.produced.get(), 0));
  }
  events.start.Record(stream_.get());
  issue();
  events.done.Record(stream_.get());
  return pending;
}

std::unique_ptr<PendingOp> NcclCommunicator::StartAllReduce(const void* send, void* recv, size_t count, DataType type,
                                                           ReduceOp op, void* after_stream) {
  return StartOnStream(after_stream, [&] { AllReduce(send, recv, count, type, op); });
}

std::unique_ptr<PendingOp> NcclCommunicator::StartReduceScatter(const void* send, void* recv, size_t recv_count,
                                                               DataType type, ReduceOp op, void* after_stream) {
  return StartOnStream(after_stream, [&] { ReduceScatter(send, recv, recv_count, type, op); });
}

std::unique_ptr<PendingOp> NcclCommunicator::StartAllGather(const void* send, void* recv, size_t send_count,
                                                           DataType type, void* after_stream) {
  return StartOnStream(after_stream, [&] { AllGather(send, recv, send_count, type); });
}

void NcclCommunicator::IssueTogether(const std::function<void()>& issue) {
  TB_CHECK_NCCL(ncclGroupStart());
  ++open_groups;
  try {
    issue();
  } catch (...) {
    --open_groups;
    (void)ncclGroupEnd();  // a group left open would capture every later NCCL call of this thread
    throw;
  }
  --open_groups;
  ncclResult_t result = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ThrowIfAborted();
    result = ncclGroupEnd();
  }
  Settle(result, "ncclGroupEnd (operations issued together)", std::source_location::current());
}

namespace {

// A graph of operations captured from the communicator's stream, instantiated and ready to launch there.
class NcclCapturedOps final : public CapturedOps {
 public:
  NcclCapturedOps(NcclCommunicator& owner, CapturedGraph graph) : owner_(owner), graph_(std::move(graph)) {}
  void Launch() override { owner_.LaunchGraph(graph_); }

 private:
  NcclCommunicator& owner_;
  CapturedGraph graph_;
};

}  // namespace

// As nccl-tests' -G: the stream captured in thread-local mode (NCCL may allocate while it sets up a connection), the
// graph instantiated and uploaded, so that the first launch pays no setup.
std::unique_ptr<CapturedOps> NcclCommunicator::Capture(const std::function<void()>& issue) {
  return std::make_unique<NcclCapturedOps>(*this, CapturedGraph::Capture(stream_.get(), issue));
}

void NcclCommunicator::LaunchGraph(const CapturedGraph& graph) {
  std::lock_guard<std::mutex> lock(mutex_);
  ThrowIfAborted();
  graph.Launch(stream_.get());
}

// As nccl-tests does: poll the stream rather than block in cudaStreamSynchronize, so that an asynchronous NCCL
// error or an Abort() from the watchdog ends the wait.
void NcclCommunicator::Synchronize() {
  while (true) {
    const cudaError_t status = cudaStreamQuery(stream_.get());
    CheckHealth();  // after the query: an abort also ends the stuck kernels, which must not pass for completion
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) cuda_detail::ThrowCudaError(status, "cudaStreamQuery(stream)", __FILE__, __LINE__);
    std::this_thread::yield();
  }
}

std::unique_ptr<Communicator> NcclCommunicator::Split(int color, int key) {
  const bool member = color >= 0;
  MPI_Comm sub_mpi_comm = MPI_COMM_NULL;
  TB_CHECK_MPI(MPI_Comm_split(mpi_comm_.get(), member ? color : MPI_UNDEFINED, key, &sub_mpi_comm));
  MpiComm owned_mpi_comm(sub_mpi_comm);
  Stream stream;  // made before the split, so that nothing can fail between creating the child and owning it

  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t child = nullptr;
  const auto where = std::source_location::current();
  ncclResult_t result = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ThrowIfAborted();
    result = ncclCommSplit(comm_, member ? color : NCCL_SPLIT_NOCOLOR, key, &child, &config);
  }
  Settle(result, "ncclCommSplit", where);
  if (!member) return nullptr;
  child = AwaitChild(child);
  FinishCreation(child, AsyncState(child), "ncclCommSplit (new communicator)", where);
  int sub_rank = 0, sub_size = 0;
  TB_CHECK_MPI(MPI_Comm_rank(owned_mpi_comm.get(), &sub_rank));
  TB_CHECK_MPI(MPI_Comm_size(owned_mpi_comm.get(), &sub_size));
  return std::make_unique<NcclCommunicator>(child, std::move(owned_mpi_comm), std::move(stream), sub_rank, sub_size);
}

void NcclCommunicator::Abort() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return;
  aborted_ = true;
  const ncclResult_t result = ncclCommAbort(comm_);
  // Abort() runs on the watchdog's path to exit: report, do not throw.
  if (result != ncclSuccess) Warn(cuda_detail::NcclFailure(result, comm_, "ncclCommAbort", __FILE__, __LINE__));
}

}  // namespace

std::unique_ptr<Communicator> MakeNcclCommunicator(MPI_Comm mpi_comm) {
  MPI_Comm dup = MPI_COMM_NULL;
  TB_CHECK_MPI(MPI_Comm_dup(mpi_comm, &dup));
  MpiComm owned_mpi_comm(dup);
  int rank = 0;
  int size = 0;
  TB_CHECK_MPI(MPI_Comm_rank(dup, &rank));
  TB_CHECK_MPI(MPI_Comm_size(dup, &size));

  ncclUniqueId id = {};
  if (rank == 0) TB_CHECK_NCCL(ncclGetUniqueId(&id));
  TB_CHECK_MPI(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, dup));

  Stream stream;  // made first, so that nothing can fail between creating the communicator and owning it
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t comm = nullptr;
  const auto where = std::source_location::current();
  const ncclResult_t result = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  FinishCreation(comm, result, "ncclCommInitRankConfig", where);
  return std::make_unique<NcclCommunicator>(comm, std::move(owned_mpi_comm), std::move(stream), rank, size);
}

}  // namespace tb
