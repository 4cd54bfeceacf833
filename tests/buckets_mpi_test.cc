// Gradient buckets under mpiexec: the plan covers every tensor once, in backward order; bucketed averaging
// (with and without overlap) equals one unbucketed all-reduce; every element is reduced exactly once.
#include <gtest/gtest.h>

#include <numeric>

#include "error.h"
#include "forwarding_communicator.h"
#include "gradient_buckets.h"
#include "mpi_communicator.h"

namespace tb {
namespace {

std::vector<GradientTensor> Tensors(const std::vector<size_t>& counts) {
  std::vector<GradientTensor> tensors;
  size_t offset = 0;
  for (size_t count : counts) {
    tensors.push_back({offset, count});
    offset += count;
  }
  return tensors;
}

TEST(PlanBuckets, CoversEveryTensorOnceFromTheEnd) {
  const auto tensors = Tensors({100, 3, 50, 7, 400, 1, 20});
  const auto buckets = PlanBuckets(tensors, 60 * 4, 4);  // 60 floats per bucket
  std::vector<size_t> seen;
  size_t expected_end = 581;
  for (const GradientBucket& b : buckets) {
    EXPECT_EQ(b.end, expected_end);  // buckets tile the buffer from its end to its start
    expected_end = b.begin;
    for (size_t t : b.tensors) seen.push_back(t);
  }
  EXPECT_EQ(expected_end, 0u);
  EXPECT_EQ(seen, (std::vector<size_t>{6, 5, 4, 3, 2, 1, 0}));
  // 20+1+400 closes the first bucket; 7+50+3 = 60 the second; 100 alone.
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].tensors, (std::vector<size_t>{6, 5, 4}));
  EXPECT_EQ(buckets[1].tensors, (std::vector<size_t>{3, 2, 1}));
  EXPECT_EQ(buckets[2].tensors, (std::vector<size_t>{0}));
}

TEST(PlanBuckets, RejectsBadInput) {
  EXPECT_THROW(PlanBuckets(Tensors({4, 4}), 0, 4), InputError);
  EXPECT_THROW(PlanBuckets({{0, 4}, {5, 4}}, 16, 4), InputError);
  EXPECT_EQ(PlanBuckets(Tensors({4, 4}), 1 << 20, 4).size(), 1u);
}

// Records every range the buckets reduce, then reduces it for real.
class RecordingCommunicator : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  std::vector<std::pair<const void*, size_t>> started;

  std::unique_ptr<PendingOp> StartAllReduce(const void* s, void* r, size_t c, DataType t, ReduceOp op, void* st) override {
    started.emplace_back(s, c);
    return ForwardingCommunicator::StartAllReduce(s, r, c, t, op, st);
  }
};

// Small integers: every summation order gives the same float, so bucketed and unbucketed must agree exactly.
std::vector<float> RankGradients(int rank, size_t n) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = static_cast<float>((i * 31 + static_cast<size_t>(rank) * 17) % 64) - 32.0f;
  return g;
}

void CheckBucketedEqualsUnbucketed(bool overlap) {
  RecordingCommunicator comm(MakeMpiCommunicator(MPI_COMM_WORLD));
  const auto tensors = Tensors({1000, 16, 4096, 7, 250000, 3, 20000, 64});
  const size_t n = tensors.back().offset + tensors.back().count;
  std::vector<float> bucketed = RankGradients(comm.rank(), n);
  std::vector<float> reference = bucketed;
  comm.AllReduce(reference.data(), reference.data(), n, DataType::kFloat32, ReduceOp::kAvg);

  BucketedAllReduce reducer(comm, bucketed.data(), DataType::kFloat32, tensors, 64 * 1024, overlap);
  for (int step = 0; step < 2; ++step) {  // the reducer is reused step after step
    if (step == 1) {  // refill in place: the reducer holds the buffer's address
      const std::vector<float> fresh = RankGradients(comm.rank(), n);
      std::copy(fresh.begin(), fresh.end(), bucketed.begin());
      comm.started.clear();
    }
    reducer.Begin();
    for (size_t t = tensors.size(); t-- > 0;) {
      reducer.TensorReady(t);
      if (!overlap) {
        EXPECT_TRUE(comm.started.empty()) << "no-overlap started a bucket during backward";
      }
      reducer.Progress();
    }
    BucketTiming timing = reducer.Finish();
    EXPECT_EQ(timing.buckets, reducer.buckets().size());
    EXPECT_EQ(timing.bytes, n * sizeof(float));
    EXPECT_GE(timing.comm_total_s, 0.0);
    EXPECT_GE(timing.comm_exposed_s, 0.0);
    EXPECT_EQ(bucketed, reference);
    // Every element reduced exactly once.
    std::vector<int> times(n, 0);
    for (const auto& [start, count] : comm.started) {
      size_t first = static_cast<size_t>(static_cast<const float*>(start) - bucketed.data());
      for (size_t i = first; i < first + count; ++i) {
        ++times[i];
      }
    }
    EXPECT_TRUE(std::all_of(times.begin(), times.end(), [](int c) { return c == 1; }));
  }
  EXPECT_GT(reducer.buckets().size(), 2u);
}

TEST(BucketedAllReduce, OverlappedEqualsOneAllReduce) { CheckBucketedEqualsUnbucketed(true); }
TEST(BucketedAllReduce, DeferredEqualsOneAllReduce) { CheckBucketedEqualsUnbucketed(false); }

TEST(BucketedAllReduce, MisreportedTensorsAreErrors) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  std::vector<float> g(8, 1.0f);
  BucketedAllReduce reducer(*comm, g.data(), DataType::kFloat32, Tensors({4, 4}), 1 << 20, true);
  reducer.Begin();
  reducer.TensorReady(1);
  EXPECT_THROW(reducer.TensorReady(1), RuntimeError);
  EXPECT_THROW(reducer.Finish(), RuntimeError);  // tensor 0 never reported
  reducer.TensorReady(0);                        // completes the bucket, as on every rank
  reducer.Finish();
}

}  // namespace
}  // namespace tb
