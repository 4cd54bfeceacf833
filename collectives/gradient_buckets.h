// Gradient buckets, as PyTorch DDP forms them: consecutive tensors, in the order backward finishes them,
// packed into buckets of about `bucket_bytes`; each bucket is all-reduced (average) as soon as its last
// tensor's gradient is final, while backward goes on — or, without overlap, all after backward.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "communicator.h"

namespace tb {

// A tensor of the flat gradient buffer: [offset, offset + count) elements.
struct GradientTensor {
  size_t offset = 0;
  size_t count = 0;
  bool reduced = true;  // false: left out (another group reduces it, as expert parallel's experts); no bucket spans it
};

struct GradientBucket {
  size_t begin = 0;             // element range [begin, end) of the flat gradient buffer
  size_t end = 0;
  std::vector<size_t> tensors;  // indices into the tensor list, in the order backward finishes them
};

// Buckets over `tensors` (listed in layout order, contiguous, none overlapping), formed from the last tensor
// to the first — the order in which backward finishes them. A bucket closes once it holds at least
// bucket_bytes; a tensor is never split, so one larger than bucket_bytes forms a bucket of its own.
// Empty tensors (count 0) and those not reduced belong to no bucket; a bucket closes at a tensor not reduced. Throws InputError when bucket_bytes is 0 or the tensors are not
// contiguous.
std::vector<GradientBucket> PlanBuckets(const std::vector<GradientTensor>& tensors, size_t bucket_bytes,
                                        size_t element_bytes);

struct BucketTiming {
  double comm_total_s = 0;    // sum over buckets of each all-reduce's start-to-completion (PendingOp::Seconds)
  double comm_exposed_s = 0;  // host time Finish() waited for outstanding reductions after backward
  // comm_total_s inside nodes and across them, where every bucket's all-reduce could tell (PendingOp::LinkSplit);
  // NaN otherwise.
  double comm_intra_s = 0;
  double comm_inter_s = 0;
  size_t buckets = 0;
  size_t bytes = 0;           // bytes all-reduced per rank
};

// Reduces the gradients of one step bucket by bucket. Collective: every rank must report the same tensors
// ready, in the same order (data parallel replicas run the same backward).
class BucketedAllReduce {
 public:
  // `gradients` is the flat buffer (host or device memory, as `comm` expects), `type` its element type.
  // overlap = false defers every bucket to Finish().
  BucketedAllReduce(Communicator& comm, void* gradients, DataType type, std::vector<GradientTensor> tensors,
                    size_t bucket_bytes, bool overlap);

  const std::vector<GradientBucket>& buckets() const { return buckets_; }

  // Starts a step: no tensor is ready, no bucket in flight.
  void Begin();
  // Tensor `index` is final. Starts its bucket's all-reduce once all of the bucket's tensors are (with
  // overlap), ordered after `producer_stream` (the device stream that computed it; null on the host).
  void TensorReady(size_t index, void* producer_stream = nullptr);
  // Lets outstanding reductions progress (MPI needs the calls); cheap; call between layers of backward.
  void Progress();
  // Starts whatever was not started, waits for every bucket, and returns the step's timing. Throws when a
  // tensor was never reported ready.
  BucketTiming Finish(void* producer_stream = nullptr);

 private:
  void Start(size_t bucket, void* producer_stream);
  static constexpr size_t kNoBucket = ~size_t{0};  // bucket_of_tensor_ of an empty tensor

  Communicator& comm_;
  char* gradients_;
  DataType type_;
  std::vector<GradientTensor> tensors_;
  std::vector<GradientBucket> buckets_;
  std::vector<size_t> bucket_of_tensor_;
  bool overlap_;
  // Per step
  std::vector<size_t> pending_tensors_;  // per bucket: tensors not yet ready
  std::vector<bool> tensor_ready_;
  std::vector<std::unique_ptr<PendingOp>> in_flight_;
  std::vector<bool> completed_;
};

}  // namespace tb
