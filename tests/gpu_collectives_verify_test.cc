// The collectives' check on the device (collectives/cuda/verify.cu) against the host's (the same formulas of
// collectives/verify_math.h): fills bit for bit, counts, first wrong element and sources alike, for every type and
// collective; and the NCCL sweep with --cuda-graph and --aggregate verified on the device. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "collective.h"
#include "device.h"
#include "gpu_test_util.h"
#include "nccl_communicator.h"
#include "sweep.h"
#include "sweep_options.h"
#include "verify.h"

namespace tb {
namespace {

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kFloat16,
                               DataType::kBFloat16};

class GpuVerify : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GpuCount() == 0) GTEST_SKIP() << test::NoGpuMessage();
    BindGpu(0);
    comm_ = MakeNcclCommunicator(MPI_COMM_SELF);  // device buffers, and their copies to and from the host
  }

  std::vector<char> Download(const CommBuffer& buffer) {
    std::vector<char> host(buffer.bytes());
    comm_->Download(buffer, host.data(), host.size());
    return host;
  }

  std::unique_ptr<Communicator> comm_;
};

TEST_F(GpuVerify, FillsMatchTheHostsBitForBit) {
  for (DataType type : kTypes) {
    SCOPED_TRACE(DataTypeName(type));
    const uint64_t count = 100003;  // not a multiple of a block
    auto buffer = comm_->Allocate(count * DataTypeSize(type));
    std::vector<char> host(buffer->bytes());
    FillInputOnDevice(type, buffer->data(), count, 5);
    FillInputOnHost(type, host.data(), count, 5);
    EXPECT_EQ(Download(*buffer), host);
    FillSentinelOnDevice(type, buffer->data(), count);
    FillSentinelOnHost(type, host.data(), count);
    EXPECT_EQ(Download(*buffer), host);
  }
}

// Every collective's layout on rank 1 of 3, a receive buffer with a few elements broken: the device finds what the
// host finds.
TEST_F(GpuVerify, CountsMatchTheHostsForEveryCollectiveAndType) {
  const int n = 3, rank = 1, root = 1;
  for (DataType type : kTypes) {
    for (const CollectiveDef* def : AllCollectives()) {
      SCOPED_TRACE(DataTypeName(type) + " " + def->name);
      const CollectiveCounts c = def->counts(3000 * DataTypeSize(type) * n, DataTypeSize(type), n, rank);
      const ExpectedLayout layout = def->expected(c, rank, n, ReduceOp::kSum, root);
      std::vector<char> image(c.recv_elements * DataTypeSize(type));
      FillSentinelOnHost(type, image.data(), c.recv_elements);
      for (uint64_t i = 0; i < c.recv_elements; ++i) {
        double value = 0;
        if (ExpectedValue(layout, i, &value)) StoreElement(type, image.data(), i, value);
      }
      for (uint64_t broken : {uint64_t{7}, c.recv_elements / 2, c.recv_elements - 1}) {
        StoreElement(type, image.data(), broken, 100.0);
      }
      auto buffer = comm_->Allocate(image.size());
      comm_->Upload(*buffer, image.data(), image.size());
      const WrongElements host = CountWrongOnHost(type, image.data(), c.recv_elements, layout);
      const WrongElements device = CountWrongOnDevice(type, buffer->data(), c.recv_elements, layout);
      EXPECT_EQ(device.count, host.count);
      EXPECT_EQ(device.first_index, host.first_index);
      EXPECT_EQ(device.first_value, host.first_value);
      EXPECT_EQ(device.first_expected, host.first_expected);
      EXPECT_EQ(device.by_source, host.by_source);
      EXPECT_EQ(host.count, layout.kind == ExpectedKind::kUndefined ? 0 : 3);
    }
  }
}

// A buffer larger than the grid (many elements per thread): one wrong element at the very end is found.
TEST_F(GpuVerify, FindsTheLastElementOfALargeBuffer) {
  const uint64_t count = (uint64_t{1} << 25) + 5;  // 128 MiB of float
  auto buffer = comm_->Allocate(count * 4);
  FillInputOnDevice(DataType::kFloat32, buffer->data(), count, 0);
  const ExpectedLayout one_rank = ReductionLayout(1, ReduceOp::kSum);  // over one rank: the input itself
  EXPECT_EQ(CountWrongOnDevice(DataType::kFloat32, buffer->data(), count, one_rank).count, 0);
  const float wrong = 42.0f;
  std::vector<char> tail(count * 4);
  comm_->Download(*buffer, tail.data(), tail.size());
  std::memcpy(tail.data() + (count - 1) * 4, &wrong, 4);
  comm_->Upload(*buffer, tail.data(), tail.size());
  const WrongElements found = CountWrongOnDevice(DataType::kFloat32, buffer->data(), count, one_rank);
  EXPECT_EQ(found.count, 1);
  EXPECT_EQ(found.first_index, static_cast<int64_t>(count - 1));
  EXPECT_EQ(found.first_value, 42.0);
}

// The NCCL sweep of every operation with --cuda-graph 2 and --aggregate 3, checked on the device; then a wrong input
// (the --inject wrong-value hook, through the host copy) caught there and traced to its rank.
TEST_F(GpuVerify, SweepWithCudaGraphAndAggregateVerifiesOnTheDevice) {
  CollectivesFlags f;
  f.sizes = "1K,1M";
  f.ops = "all";
  f.iters = 4;
  f.warmup = 1;
  f.check_iters = 2;
  f.aggregate = 3;
  f.cuda_graph = 2;
  f.dtype = "bf16";
  SweepOptions o = ValidateCollectivesFlags(f, 1, nullptr);
  const SweepResult result = RunSweep(*comm_, o, nullptr);
  EXPECT_EQ(result.wrong_total, 0);
  for (const OpResult& op : result.ops) {
    EXPECT_STREQ(op.verified_on, "device");
    for (const SizeResult& row : op.rows) {
      EXPECT_EQ(row.out_of_place.wrong, 0) << op.def->name << " " << row.size_bytes;
      EXPECT_GT(row.out_of_place.time_us, 0);
    }
  }
  o.ops = {&kAllGather};
  o.before_check = [](void* input, size_t elements) {
    if (elements > 0) StoreElement(DataType::kBFloat16, input, 0, 1000.0);
  };
  const SweepResult wrong = RunSweep(*comm_, o, nullptr);
  EXPECT_EQ(wrong.wrong_total, 2 * 2 * 2);  // 2 sizes x 2 modes x 2 checks, one element each
  EXPECT_EQ(wrong.ops[0].rows[0].in_place.wrong_sources, "0");
  EXPECT_EQ(wrong.ops[0].rows[0].in_place.first_wrong, "element 0 = 1000, expected 0");
}

}  // namespace
}  // namespace tb
