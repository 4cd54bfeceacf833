#include "gradient_buckets.h"

#include <algorithm>
#include <cmath>

#include "clock.h"
#include "error.h"

namespace tb {

std::vector<GradientBucket> PlanBuckets(const std::vector<GradientTensor>& tensors, size_t bucket_bytes,
                                        size_t element_bytes) {
  if (bucket_bytes == 0) throw InputError("--bucket-mb must be greater than 0");
  for (size_t i = 1; i < tensors.size(); ++i) {
    if (tensors[i].offset != tensors[i - 1].offset + tensors[i - 1].count) {
      throw InputError("gradient tensors are not contiguous at tensor " + std::to_string(i));
    }
  }
  std::vector<GradientBucket> buckets;
  GradientBucket current;
  size_t current_bytes = 0;
  for (size_t i = tensors.size(); i-- > 0;) {
    if (tensors[i].count == 0) continue;  // nothing to reduce (a slot a pipeline stage does not hold)
    if (!tensors[i].reduced) {             // reduced elsewhere: the bucket before it ends here
      if (!current.tensors.empty()) buckets.push_back(std::move(current));
      current = GradientBucket{};
      current_bytes = 0;
      continue;
    }
    if (current.tensors.empty()) current.end = tensors[i].offset + tensors[i].count;
    current.tensors.push_back(i);
    current.begin = tensors[i].offset;
    current_bytes += tensors[i].count * element_bytes;
    if (current_bytes >= bucket_bytes) {
      buckets.push_back(std::move(current));
      current = GradientBucket{};
      current_bytes = 0;
    }
  }
  if (!current.tensors.empty()) buckets.push_back(std::move(current));
  return buckets;
}

BucketedAllReduce::BucketedAllReduce(Communicator& comm, void* gradients, DataType type,
                                     std::vector<GradientTensor> tensors, size_t bucket_bytes, bool overlap)
    : comm_(comm),
      gradients_(static_cast<char*>(gradients)),
      type_(type),
      tensors_(std::move(tensors)),
      buckets_(PlanBuckets(tensors_, bucket_bytes, DataTypeSize(type))),
      bucket_of_tensor_(tensors_.size(), kNoBucket),
      overlap_(overlap) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t t : buckets_[b].tensors) bucket_of_tensor_[t] = b;
  }
}

void BucketedAllReduce::Begin() {
  tensor_ready_.assign(tensors_.size(), false);
  pending_tensors_.assign(buckets_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) pending_tensors_[b] = buckets_[b].tensors.size();
  in_flight_.clear();
  in_flight_.resize(buckets_.size());
  completed_.assign(buckets_.size(), false);
}

void BucketedAllReduce::Start(size_t b, void* producer_stream) {
  const GradientBucket& bucket = buckets_[b];
  void* data = gradients_ + bucket.begin * DataTypeSize(type_);
  in_flight_[b] = comm_.StartAllReduce(data, data, bucket.end - bucket.begin, type_, ReduceOp::kAvg, producer_stream);
}

void BucketedAllReduce::TensorReady(size_t index, void* producer_stream) {
  if (index >= tensors_.size()) throw RuntimeError("gradient tensor " + std::to_string(index) + " does not exist");
  if (tensor_ready_[index]) {
    throw RuntimeError("gradient tensor " + std::to_string(index) + " reported ready twice in one step");
  }
  tensor_ready_[index] = true;
  const size_t b = bucket_of_tensor_[index];
  if (b == kNoBucket) return;  // an empty tensor
  if (--pending_tensors_[b] == 0 && overlap_) Start(b, producer_stream);
  Progress();
}

void BucketedAllReduce::Progress() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (in_flight_[b] && !completed_[b] && in_flight_[b]->Test()) completed_[b] = true;
  }
}

BucketTiming BucketedAllReduce::Finish(void* producer_stream) {
  BucketTiming timing;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (pending_tensors_[b] != 0) {
      throw RuntimeError("gradient bucket " + std::to_string(b) + " still misses " +
                         std::to_string(pending_tensors_[b]) + " tensors at the end of backward");
    }
    if (!in_flight_[b]) Start(b, producer_stream);
  }
  const double wait_start = NowSeconds();
  bool split = true;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (!completed_[b]) {
      in_flight_[b]->Wait();
      completed_[b] = true;
    }
    timing.comm_total_s += in_flight_[b]->Seconds();
    const std::optional<LinkSeconds> link = in_flight_[b]->LinkSplit();
    split = split && link.has_value();
    if (link) {
      timing.comm_intra_s += link->intra_s;
      timing.comm_inter_s += link->inter_s;
    }
    timing.bytes += (buckets_[b].end - buckets_[b].begin) * DataTypeSize(type_);
  }
  timing.comm_exposed_s = NowSeconds() - wait_start;
  if (!split || buckets_.empty()) timing.comm_intra_s = timing.comm_inter_s = std::nan("");
  timing.buckets = buckets_.size();
  return timing;
}

}  // namespace tb
