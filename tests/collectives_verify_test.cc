// The per-element formulas that the host's and the device's checks share (collectives/verify_math.h) and the host's
// fill and count (collectives/verify.h), on the CPU; --cuda-graph and --aggregate as the flags' validation takes
// them. The device's kernels against these are in gpu_collectives_verify_test.cc.
#include <gtest/gtest.h>

#include <vector>

#include "collective.h"
#include "device.h"
#include "error.h"
#include "input_error_of.h"
#include "mpi_communicator.h"
#include "sweep_options.h"
#include "verify.h"

namespace tb {
namespace {

// Rank `rank`'s receive buffer as the operation should leave it, element by element from its layout.
std::vector<char> ExpectedImage(DataType type, const ExpectedLayout& layout, uint64_t count) {
  std::vector<char> image(count * DataTypeSize(type));
  FillSentinelOnHost(type, image.data(), count);
  for (uint64_t i = 0; i < count; ++i) {
    double value = 0;
    if (ExpectedValue(layout, i, &value)) StoreElement(type, image.data(), i, value);
  }
  return image;
}

TEST(VerifyMath, CopiesNameTheirSourceRankAndReductionsNone) {
  const int n = 3, rank = 1, root = 2;
  const CollectiveCounts c = kAllGather.counts(12 * 4 * n, 4, n, rank);  // 12 elements per rank
  const ExpectedLayout gather = kAllGather.expected(c, rank, n, ReduceOp::kSum, root);
  for (uint64_t i = 0; i < c.recv_elements; ++i) EXPECT_EQ(SourceRank(gather, i), static_cast<int>(i / 12)) << i;
  const CollectiveCounts single = kBroadcast.counts(48, 4, n, rank);
  EXPECT_EQ(SourceRank(kBroadcast.expected(single, rank, n, ReduceOp::kSum, root), 5), root);
  EXPECT_EQ(SourceRank(kSendRecv.expected(single, rank, n, ReduceOp::kSum, root), 5), 0);  // from rank - 1
  EXPECT_EQ(SourceRank(kAllReduce.expected(single, rank, n, ReduceOp::kSum, root), 5), -1);
  // reduce leaves the non-roots' receive buffers undefined: nothing to check there.
  double value = 0;
  EXPECT_FALSE(ExpectedValue(kReduce.expected(single, rank, n, ReduceOp::kSum, root), 0, &value));
  EXPECT_TRUE(ExpectedValue(kReduce.expected(single, root, n, ReduceOp::kSum, root), 0, &value));
  EXPECT_EQ(value, ReduceInputs(0, n, ReduceOp::kSum));
}

TEST(VerifyMath, AlltoallReadsItsOwnBlockOfEachPeer) {
  const int n = 4, rank = 2;
  const CollectiveCounts c = kAllToAll.counts(8 * 4 * n, 4, n, rank);  // 8 elements to each peer
  const ExpectedLayout layout = kAllToAll.expected(c, rank, n, ReduceOp::kSum, 0);
  double value = 0;
  ASSERT_TRUE(ExpectedValue(layout, 3 * 8 + 5, &value));  // block 3 = peer 3's elements [16, 24)
  EXPECT_EQ(value, InputValue(3, 2 * 8 + 5));
  EXPECT_EQ(SourceRank(layout, 3 * 8 + 5), 3);
}

TEST(VerifyHost, FillsInputsAndSentinels) {
  for (DataType type : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<char> buffer(100 * DataTypeSize(type));
    FillInputOnHost(type, buffer.data(), 100, 3);
    for (uint64_t i = 0; i < 100; ++i) EXPECT_EQ(LoadElement(type, buffer.data(), i), InputValue(3, i)) << i;
    FillSentinelOnHost(type, buffer.data(), 100);
    for (uint64_t i = 0; i < 100; ++i) EXPECT_EQ(LoadElement(type, buffer.data(), i), kSentinel) << i;
  }
}

TEST(VerifyHost, CountsWrongElementsTheFirstAndTheirSources) {
  const int n = 3, rank = 0;
  const CollectiveCounts c = kAllGather.counts(10 * 2 * n, 2, n, rank);  // 10 bf16 elements per rank
  const ExpectedLayout layout = kAllGather.expected(c, rank, n, ReduceOp::kSum, 0);
  std::vector<char> image = ExpectedImage(DataType::kBFloat16, layout, c.recv_elements);
  EXPECT_EQ(CountWrongOnHost(DataType::kBFloat16, image.data(), c.recv_elements, layout).count, 0);
  StoreElement(DataType::kBFloat16, image.data(), 23, 100.0);  // rank 2's block
  StoreElement(DataType::kBFloat16, image.data(), 27, 100.0);
  StoreElement(DataType::kBFloat16, image.data(), 12, 99.0);   // rank 1's
  const WrongElements wrong = CountWrongOnHost(DataType::kBFloat16, image.data(), c.recv_elements, layout);
  EXPECT_EQ(wrong.count, 3);
  EXPECT_EQ(wrong.first_index, 12);
  EXPECT_EQ(wrong.first_value, 99.0);
  EXPECT_EQ(wrong.first_expected, InputValue(1, 2));
  EXPECT_EQ(wrong.by_source, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(DescribeFirstWrong(wrong), "element 12 = 99, expected " + std::to_string(static_cast<int>(InputValue(1, 2))));
}

TEST(VerifyHost, AnUnwrittenBufferFailsEveryDefinedElement) {
  const CollectiveCounts c = kAllReduce.counts(1000 * 4, 4, 2, 0);
  std::vector<char> image(c.recv_elements * 4);
  FillSentinelOnHost(DataType::kFloat32, image.data(), c.recv_elements);
  const WrongElements wrong =
      CountWrongOnHost(DataType::kFloat32, image.data(), c.recv_elements, ReductionLayout(2, ReduceOp::kSum));
  EXPECT_EQ(wrong.count, 1000);
  EXPECT_EQ(wrong.first_index, 0);
  EXPECT_EQ(wrong.first_value, kSentinel);
  EXPECT_EQ(wrong.by_source, (std::vector<int64_t>{0, 0}));  // a reduction names no source
}

TEST(VerifyHost, MemoryKindChoosesWhereTheCheckRuns) {
  EXPECT_STREQ(ChecksFor(MemoryKind::kHost).where, "host");
  EXPECT_STREQ(ChecksFor(MemoryKind::kDevice).where, "device");
  if (BuiltWithCuda()) GTEST_SKIP() << "built with CUDA: the device functions are real (gpu_collectives_verify_test)";
  std::vector<float> buffer(4);
  try {
    FillInputOnDevice(DataType::kFloat32, buffer.data(), 4, 0);
    FAIL() << "the stub ran";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos) << e.what();
  }
}

CollectivesFlags SmallFlags() {
  CollectivesFlags f;
  f.sizes = "1K";
  return f;
}

TEST(CollectivesFlags, AggregateAndCudaGraphReachTheSweep) {
  CollectivesFlags f = SmallFlags();
  f.aggregate = 4;
  f.cuda_graph = 10;
  const SweepOptions o = ValidateCollectivesFlags(f, 2, nullptr);  // no communicator asked: the cuda backend's case
  EXPECT_EQ(o.aggregate, 4);
  EXPECT_EQ(o.cuda_graph, 10);
  const SweepOptions defaults = ValidateCollectivesFlags(SmallFlags(), 2, nullptr);
  EXPECT_EQ(defaults.aggregate, 1);
  EXPECT_EQ(defaults.cuda_graph, 0);
}

TEST(CollectivesFlags, CudaGraphIsRefusedOnTheMpiBackend) {
  auto mpi = MakeMpiCommunicator(MPI_COMM_SELF);
  EXPECT_FALSE(mpi->CanCapture());
  CollectivesFlags f = SmallFlags();
  f.cuda_graph = 1;
  EXPECT_EQ(InputErrorOf([&] { ValidateCollectivesFlags(f, 1, mpi.get()); }),
            "--cuda-graph needs the NCCL backend: the mpi backend's operations run on the host and cannot be "
            "captured into a CUDA graph");
  f.cuda_graph = 0;
  f.aggregate = 8;  // aggregation is every backend's
  EXPECT_EQ(ValidateCollectivesFlags(f, 1, mpi.get()).aggregate, 8);
  EXPECT_THROW(mpi->Capture([] {}), RuntimeError);
}

}  // namespace
}  // namespace tb
