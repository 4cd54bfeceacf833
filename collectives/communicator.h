// The Communicator interface: one set of collective and point-to-point operations over either host memory
// (MpiCommunicator) or device memory (NcclCommunicator). Benchmarks and training code talk only to this.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "data_types.h"

namespace tb {

enum class MemoryKind { kHost, kDevice };

size_t DataTypeSize(DataType type);
std::string DataTypeName(DataType type);  // "float", "double", "int32", "half", "bfloat16" (nccl-tests' names)
DataType ParseDataType(const std::string& text, const std::string& flag);  // throws InputError listing the names
std::vector<std::string> DataTypeAliases();  // every name ParseDataType accepts (--dtype's choices)
std::string ReduceOpName(ReduceOp op);

// Memory the communicator operates on (host memory for MPI, device memory for NCCL). Move-only, owned.
class CommBuffer {
 public:
  virtual ~CommBuffer() = default;
  virtual void* data() = 0;
  virtual size_t bytes() const = 0;
};

// An all-reduce's time inside nodes and across them.
struct LinkSeconds {
  double intra_s = 0;
  double inter_s = 0;
};

// An operation started with Communicator::StartAllReduce (StartReduceScatter, StartAllGather), running while the
// caller goes on.
class PendingOp {
 public:
  virtual ~PendingOp() = default;
  // Progresses the operation without blocking; true once it has completed (and stays true).
  virtual bool Test() = 0;
  // Blocks until the operation has completed.
  virtual void Wait() = 0;
  // Seconds from the operation's start to its completion, once Test() has returned true or Wait() has
  // returned: timed with CUDA events on the communicator's stream for NCCL (the start is when the stream reached
  // it, after the producer's work), with the host clock from the call to the completion seen by Test()/Wait()
  // for MPI.
  virtual double Seconds() const = 0;
  // Seconds() split into the steps inside nodes and the step across them, where the algorithm has such steps (the
  // MPI backend's hierarchical all-reduce); nullopt otherwise (a flat algorithm's traffic cannot be told apart).
  virtual std::optional<LinkSeconds> LinkSplit() const { return std::nullopt; }
};

// Throws RuntimeError unless an AllToAllV's layout keeps its contract on a communicator of `ranks`: one count and one
// offset per rank on each side, and not in place. Both backends check with it before they move anything.
void CheckAllToAllVLayout(int ranks, const void* send, std::span<const size_t> send_counts,
                          std::span<const size_t> send_offsets, const void* recv, std::span<const size_t> recv_counts,
                          std::span<const size_t> recv_offsets);

// Operations recorded once and launched again and again (a CUDA graph of the communicator's stream): what
// `collectives --cuda-graph` times, without the host's cost of issuing each operation.
class CapturedOps {
 public:
  virtual ~CapturedOps() = default;
  // Queues one replay of everything captured, on the communicator's stream; Synchronize() waits for it.
  virtual void Launch() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual std::string backend() const = 0;  // "mpi" or "nccl"
  virtual MemoryKind memory() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether this communicator can reduce/move values of `type` (MPI has no fp16/bf16).
  virtual bool Supports(DataType type) const = 0;

  virtual std::unique_ptr<CommBuffer> Allocate(size_t bytes) = 0;
  virtual void Upload(CommBuffer& buffer, const void* host, size_t bytes) = 0;    // host -> buffer
  virtual void Download(const CommBuffer& buffer, void* host, size_t bytes) = 0;  // buffer -> host

  // Collectives, with NCCL's argument conventions (counts in elements; in place when send == recv):
  //   all_reduce:     count elements in send and recv
  //   reduce_scatter: recv_count per rank; send holds size()*recv_count
  //   all_gather:     send_count per rank; recv holds size()*send_count
  //   alltoall:       count elements to each peer; send and recv hold size()*count
  //   broadcast:      count elements from root's send into every rank's recv
  //   reduce:         count elements, result in root's recv
  virtual void AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) = 0;
  virtual void ReduceScatter(const void* send, void* recv, size_t recv_count, DataType type, ReduceOp op) = 0;
  virtual void AllGather(const void* send, void* recv, size_t send_count, DataType type) = 0;
  virtual void AllToAll(const void* send, void* recv, size_t count, DataType type) = 0;
  virtual void Broadcast(const void* send, void* recv, size_t count, DataType type, int root) = 0;
  virtual void Reduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op, int root) = 0;
  // alltoallv: variable blocks per peer (a mixture-of-experts layer's dispatch and combine). Counts and offsets are in
  // elements, one of each per rank of this communicator: block p of `send` (send_counts[p] elements at
  // send_offsets[p]) goes to rank p, and rank p's block for this rank lands at recv_offsets[p] (recv_counts[p]
  // elements, which must equal rank p's send_counts[this rank]). Counts may be zero; blocks may sit anywhere and in
  // any order. Not in place: send and recv must not overlap (throws RuntimeError when send == recv). Moves elements
  // without arithmetic, so every type runs on every backend (MPI moves fp16/bf16 as 16-bit words). MPI backend:
  // MPI_Alltoallv, whose counts and offsets are ints: throws InputError beyond INT_MAX elements (Open MPI 4.1 has no
  // large-count MPI_Alltoallv_c). NCCL: one group of ncclSend/ncclRecv, one of each per peer with a non-zero count,
  // the block to itself included.
  virtual void AllToAllV(const void* send, std::span<const size_t> send_counts, std::span<const size_t> send_offsets,
                         void* recv, std::span<const size_t> recv_counts, std::span<const size_t> recv_offsets,
                         DataType type) = 0;

  // Starts an all_reduce and returns at once (MPI_Iallreduce, progressed by Test/Wait; NCCL: queued on the
  // communicator's stream). `after_stream`, when not null, is a device stream (cudaStream_t) whose queued work
  // must finish first — the compute stream that produced the data; the MPI backend ignores it. The buffers must
  // stay untouched until the operation has completed.
  virtual std::unique_ptr<PendingOp> StartAllReduce(const void* send, void* recv, size_t count, DataType type,
                                                    ReduceOp op, void* after_stream = nullptr) = 0;
  // The same for a reduce_scatter and an all_gather (MPI_Ireduce_scatter_block, MPI_Iallgather; NCCL: queued on the
  // communicator's stream), with the blocking calls' arguments: what FSDP overlaps with compute.
  virtual std::unique_ptr<PendingOp> StartReduceScatter(const void* send, void* recv, size_t recv_count, DataType type,
                                                        ReduceOp op, void* after_stream = nullptr) = 0;
  virtual std::unique_ptr<PendingOp> StartAllGather(const void* send, void* recv, size_t send_count, DataType type,
                                                    void* after_stream = nullptr) = 0;

  // Point-to-point. SendRecv sends to `dst` and receives from `src` concurrently (one may be -1 to skip it).
  virtual void SendRecv(const void* send, int dst, void* recv, int src, size_t count, DataType type) = 0;

  // Issues the operations that `issue` makes on this communicator as one group, launched together (NCCL: between
  // ncclGroupStart and ncclGroupEnd, as nccl-tests' --agg_iters); MPI's blocking calls simply run one after another.
  virtual void IssueTogether(const std::function<void()>& issue) { issue(); }
  // Whether Capture can record this communicator's operations (NCCL, whose operations are device work; not MPI,
  // whose calls run on the host).
  virtual bool CanCapture() const { return false; }
  // Records the operations that `issue` makes on this communicator without running them. `issue` must not wait for
  // them (no Synchronize). Throws RuntimeError where CanCapture() is false.
  virtual std::unique_ptr<CapturedOps> Capture(const std::function<void()>& issue);

  // Blocks the host until every operation issued so far has completed (a stream sync for NCCL).
  virtual void Synchronize() = 0;
  // Host-side barrier over the ranks of this communicator.
  virtual void Barrier() = 0;
  // An MPI communicator over the same ranks in the same order, for host-side agreement and gathering of
  // small values (timings, counts, stop requests). Owned by this communicator.
  virtual MPI_Comm host_comm() const = 0;

  // From now on, all-reduces (blocking and started) run hierarchically: reduce-scatter among the ranks of this rank's
  // node, all-reduce of each shard across the nodes, all-gather in the node, with the time of each step
  // (PendingOp::LinkSplit). `node` and `local_rank` are this rank's; every node must hold the same number of ranks
  // of this communicator. Collective. Returns false, changing nothing, where the backend has no such algorithm of
  // its own (NCCL chooses its topology-aware algorithms itself).
  virtual bool UseHierarchicalAllReduce(int node, int local_rank) {
    (void)node;
    (void)local_rank;
    return false;
  }

  // Communicator of the ranks that pass the same `color` (>= 0), numbered by `key` (ties by rank), as
  // MPI_Comm_split and ncclCommSplit do: every rank must call it; a rank passing a negative color gets nullptr.
  virtual std::unique_ptr<Communicator> Split(int color, int key) = 0;
  // Communicator of ranks [0, k) of this one (Split by rank < k): every rank must call it; ranks >= k get
  // nullptr. Throws InputError unless 1 <= k <= size().
  std::unique_ptr<Communicator> Prefix(int k);

  // Abandons outstanding operations so that a stuck rank can exit (ncclCommAbort). Safe to call from the
  // watchdog thread; the communicator is unusable afterwards.
  virtual void Abort() = 0;
};

}  // namespace tb
