// GPU tests: device queries, library versions and the NCCL communicator, one GPU per rank (rank r uses GPU
// r % GpuCount(); run at most one rank per GPU). Every test that needs a GPU skips, saying why, when none is
// usable; in a build without CUDA the stubs are checked instead.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "alltoallv_layout.h"
#include "communicator.h"
#include "device.h"
#include "error.h"
#include "gpu_test_util.h"
#include "nccl_communicator.h"

namespace {

using tb::DataType;
using tb::ReduceOp;

constexpr DataType kAllTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kFloat16,
                                  DataType::kBFloat16};

std::string NoGpuMessage() { return "no usable GPU: " + tb::GpuUnavailableReason(); }

// --- host-side fp16/bf16 conversion, rounding to nearest even as the GPU does ----------------------------------

uint32_t ShiftRightRoundingToEven(uint32_t value, int shift) {
  const uint32_t kept = value >> shift;
  const uint32_t rest = value & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  return kept + ((rest > halfway || (rest == halfway && (kept & 1u))) ? 1u : 0u);
}

uint16_t FloatToHalf(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (bits >= 0x47800000u) return sign | 0x7c00u;  // >= 2^16: infinity
  if (bits < 0x33000000u) return sign;             // below half the smallest subnormal: zero
  const int exponent = static_cast<int>(bits >> 23) - 127;
  const uint32_t mantissa = (bits & 0x7fffffu) | 0x800000u;  // 24 bits with the implicit one
  // A normal half is (exponent + 14) << 10 plus the top 11 mantissa bits, whose implicit one completes the
  // exponent field; a subnormal counts units of 2^-24. A rounding carry moves into the exponent, as it should.
  if (exponent < -14) return sign | static_cast<uint16_t>(ShiftRightRoundingToEven(mantissa, -exponent - 1));
  return sign | static_cast<uint16_t>((static_cast<uint32_t>(exponent + 14) << 10) +
                                      ShiftRightRoundingToEven(mantissa, 13));
}

float HalfToFloat(uint16_t half) {
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(((half & 0x8000u) << 16) | 0x7f800000u | (mantissa << 13));
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -24)
                              : std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  return (half & 0x8000u) != 0 ? -magnitude : magnitude;
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN stays NaN
  return static_cast<uint16_t>(ShiftRightRoundingToEven(bits, 16));
}

float BFloat16ToFloat(uint16_t value) { return std::bit_cast<float>(static_cast<uint32_t>(value) << 16); }

// --- values <-> bytes of a DataType ----------------------------------------------------------------------------

template <typename T>
void Store(std::byte* out, T value) {
  std::memcpy(out, &value, sizeof(value));
}

template <typename T>
T Load(const std::byte* in) {
  T value;
  std::memcpy(&value, in, sizeof(value));
  return value;
}

std::vector<std::byte> Encode(const std::vector<double>& values, DataType type) {
  const size_t size = tb::DataTypeSize(type);
  std::vector<std::byte> bytes(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    std::byte* out = bytes.data() + i * size;
    const auto as_float = static_cast<float>(values[i]);
    switch (type) {
      case DataType::kFloat32: Store(out, as_float); break;
      case DataType::kFloat64: Store(out, values[i]); break;
      case DataType::kInt32: Store(out, static_cast<int32_t>(values[i])); break;
      case DataType::kFloat16: Store(out, FloatToHalf(as_float)); break;
      case DataType::kBFloat16: Store(out, FloatToBFloat16(as_float)); break;
    }
  }
  return bytes;
}

std::vector<double> Decode(const std::vector<std::byte>& bytes, DataType type) {
  const size_t size = tb::DataTypeSize(type);
  std::vector<double> values(bytes.size() / size);
  for (size_t i = 0; i < values.size(); ++i) {
    const std::byte* in = bytes.data() + i * size;
    switch (type) {
      case DataType::kFloat32: values[i] = Load<float>(in); break;
      case DataType::kFloat64: values[i] = Load<double>(in); break;
      case DataType::kInt32: values[i] = Load<int32_t>(in); break;
      case DataType::kFloat16: values[i] = HalfToFloat(Load<uint16_t>(in)); break;
      case DataType::kBFloat16: values[i] = BFloat16ToFloat(Load<uint16_t>(in)); break;
    }
  }
  return values;
}

TEST(HalfPrecisionHelpers, RoundTripAndRoundToNearestEven) {
  const float smallest_normal = std::ldexp(1.0f, -14);
  const float smallest_subnormal = std::ldexp(1.0f, -24);
  for (float value : {0.0f, 1.0f, -2.5f, 0.333251953125f, 2048.0f, 65504.0f, smallest_normal, smallest_subnormal}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(value)), value) << value;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00u);
  EXPECT_EQ(FloatToHalf(2049.0f), FloatToHalf(2048.0f));  // halfway: to even
  EXPECT_EQ(FloatToHalf(2051.0f), FloatToHalf(2052.0f));  // halfway: to even
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00u);              // rounds up to infinity
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80u);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(257.0f)), 256.0f);  // halfway: to even
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(259.0f)), 260.0f);  // halfway: to even
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(-3.0f)), -3.0f);
}

// --- build, devices and versions -------------------------------------------------------------------------------

template <typename Call>
void ExpectBuiltWithoutCuda(const char* what, Call call) {
  try {
    call();
    ADD_FAILURE() << what << " did not throw in a build without CUDA";
  } catch (const tb::RuntimeError& error) {
    EXPECT_NE(std::string(error.what()).find("built without CUDA"), std::string::npos) << what << ": " << error.what();
  }
}

TEST(GpuBackend, BuildWithoutCudaSaysSo) {
  if (tb::BuiltWithCuda()) GTEST_SKIP() << "this trainbench was built with CUDA: there are no stubs to check";
  EXPECT_EQ(tb::GpuCount(), 0);
  EXPECT_NE(tb::GpuUnavailableReason().find("built without CUDA"), std::string::npos);
  ExpectBuiltWithoutCuda("MakeNcclCommunicator", [] { tb::MakeNcclCommunicator(MPI_COMM_WORLD); });
  ExpectBuiltWithoutCuda("QueryGpu", [] { tb::QueryGpu(0); });
  ExpectBuiltWithoutCuda("GpuPeerAccess", [] { tb::GpuPeerAccess(0, 0); });
  ExpectBuiltWithoutCuda("GpuLinkType", [] { tb::GpuLinkType(0, 0); });
  ExpectBuiltWithoutCuda("BindGpu", [] { tb::BindGpu(0); });
}

TEST(GpuBackend, LibraryVersions) {
  const std::string runtime = tb::CudaRuntimeVersion();
  const std::string driver = tb::CudaDriverVersion();
  const std::string nccl = tb::NcclVersion();
  const std::string cudnn = tb::CudnnVersion();
  if (!tb::BuiltWithCuda()) {
    for (const std::string& version : {runtime, driver, nccl, cudnn}) EXPECT_EQ(version, "not built");
    return;
  }
  const std::regex version_pattern(R"(\d+\.\d+(\.\d+)?)");
  for (const std::string& version : {runtime, nccl, cudnn}) {
    EXPECT_TRUE(std::regex_match(version, version_pattern)) << "'" << version << "'";
  }
  // No driver is a state, not a failure: then the driver version is "none".
  EXPECT_TRUE(driver == "none" || std::regex_match(driver, version_pattern)) << "'" << driver << "'";
  if (tb::GpuCount() > 0) {
    EXPECT_NE(driver, "none");
  }
}

TEST(GpuBackend, CountAndReasonAgree) {
  const int count = tb::GpuCount();
  const std::string reason = tb::GpuUnavailableReason();
  EXPECT_GE(count, 0);
  EXPECT_EQ(count == 0, !reason.empty()) << "count " << count << ", reason '" << reason << "'";
}

TEST(Gpu, QueryFirstGpu) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  const tb::GpuInfo info = tb::QueryGpu(0);
  EXPECT_EQ(info.index, 0);
  EXPECT_FALSE(info.name.empty());
  const std::regex uuid_pattern("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  EXPECT_TRUE(std::regex_match(info.uuid, uuid_pattern)) << info.uuid;
  EXPECT_TRUE(std::regex_match(info.pci_bus_id, std::regex(R"([0-9a-f]+:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])")))
      << info.pci_bus_id;
  EXPECT_GT(info.memory_bytes, 0u);
  EXPECT_GT(info.compute_major, 0);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_THROW(tb::QueryGpu(tb::GpuCount()), tb::RuntimeError);  // one past the last GPU
}

TEST(Gpu, PeerAccessAndLinkType) {
  if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  EXPECT_TRUE(tb::GpuPeerAccess(0, 0));
  EXPECT_EQ(tb::GpuLinkType(0, 0), "same GPU");
  if (tb::GpuCount() > 1) {
    EXPECT_NO_THROW(tb::GpuPeerAccess(0, 1));
    const std::string link = tb::GpuLinkType(0, 1);
    EXPECT_TRUE(link.starts_with("NVLink x") || link.starts_with("PCIe ") || link.starts_with("unknown (")) << link;
  }
}

// --- NCCL communicator -----------------------------------------------------------------------------------------

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (tb::GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
    int world_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    tb::BindGpu(world_rank % tb::GpuCount());
    comm_ = tb::MakeNcclCommunicator(MPI_COMM_WORLD);
    rank_ = comm_->rank();
    size_ = comm_->size();
  }

  // A device buffer holding `values` as `type`.
  std::unique_ptr<tb::CommBuffer> Put(const std::vector<double>& values, DataType type) {
    std::unique_ptr<tb::CommBuffer> buffer = comm_->Allocate(values.size() * tb::DataTypeSize(type));
    const std::vector<std::byte> bytes = Encode(values, type);
    comm_->Upload(*buffer, bytes.data(), bytes.size());
    return buffer;
  }

  // The first `count` values of `buffer`, once the operations issued so far are done.
  std::vector<double> Get(const tb::CommBuffer& buffer, size_t count, DataType type) {
    comm_->Synchronize();
    std::vector<std::byte> bytes(count * tb::DataTypeSize(type));
    comm_->Download(buffer, bytes.data(), bytes.size());
    return Decode(bytes, type);
  }

  std::unique_ptr<tb::Communicator> comm_;
  int rank_ = 0;
  int size_ = 1;
};

TEST_F(NcclTest, DescribesItself) {
  int world_rank = 0;
  int world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  EXPECT_EQ(comm_->backend(), "nccl");
  EXPECT_EQ(comm_->memory(), tb::MemoryKind::kDevice);
  EXPECT_EQ(rank_, world_rank);
  EXPECT_EQ(size_, world_size);
  for (DataType type : kAllTypes) EXPECT_TRUE(comm_->Supports(type)) << tb::DataTypeName(type);
  comm_->Barrier();
}

TEST_F(NcclTest, AllReduceSumOfSmallIntegersIsExactForEveryTypeAndInPlace) {
  constexpr size_t kCount = 1000;
  for (DataType type : kAllTypes) {
    SCOPED_TRACE(tb::DataTypeName(type));
    std::vector<double> mine(kCount);
    std::vector<double> expected(kCount);
    for (size_t i = 0; i < kCount; ++i) {
      const double base = static_cast<double>(i % 7 + 1);
      mine[i] = base + rank_;
      expected[i] = base * size_ + size_ * (size_ - 1) / 2.0;  // at most 84 with 8 ranks: exact even in bf16
    }
    std::unique_ptr<tb::CommBuffer> send = Put(mine, type);
    std::unique_ptr<tb::CommBuffer> recv = comm_->Allocate(send->bytes());
    comm_->AllReduce(send->data(), recv->data(), kCount, type, ReduceOp::kSum);
    EXPECT_EQ(Get(*recv, kCount, type), expected);
    comm_->AllReduce(send->data(), send->data(), kCount, type, ReduceOp::kSum);
    EXPECT_EQ(Get(*send, kCount, type), expected) << "in place";
  }
}

TEST_F(NcclTest, AllReduceAverage) {
  constexpr size_t kCount = 64;
  const std::vector<double> mine(kCount, 2.0 * (rank_ + 1));
  std::unique_ptr<tb::CommBuffer> buffer = Put(mine, DataType::kFloat32);
  comm_->AllReduce(buffer->data(), buffer->data(), kCount, DataType::kFloat32, ReduceOp::kAvg);
  // NCCL may scale each input by 1/n before summing, so allow float rounding.
  for (double value : Get(*buffer, kCount, DataType::kFloat32)) EXPECT_NEAR(value, size_ + 1.0, 1e-5 * (size_ + 1));
}

TEST_F(NcclTest, AllGather) {
  constexpr size_t kCount = 5;
  std::vector<double> mine(kCount);
  std::vector<double> expected(kCount * size_);
  for (size_t i = 0; i < kCount; ++i) mine[i] = 100.0 * rank_ + i;
  for (int peer = 0; peer < size_; ++peer) {
    for (size_t i = 0; i < kCount; ++i) expected[peer * kCount + i] = 100.0 * peer + i;
  }
  std::unique_ptr<tb::CommBuffer> send = Put(mine, DataType::kInt32);
  std::unique_ptr<tb::CommBuffer> recv = comm_->Allocate(expected.size() * sizeof(int32_t));
  comm_->AllGather(send->data(), recv->data(), kCount, DataType::kInt32);
  EXPECT_EQ(Get(*recv, expected.size(), DataType::kInt32), expected);
}

TEST_F(NcclTest, ReduceScatter) {
  constexpr size_t kCount = 4;
  std::vector<double> mine(kCount * size_);
  std::vector<double> expected(kCount);
  for (size_t j = 0; j < mine.size(); ++j) mine[j] = static_cast<double>(j) + rank_;
  for (size_t i = 0; i < kCount; ++i) {
    expected[i] = static_cast<double>(rank_ * kCount + i) * size_ + size_ * (size_ - 1) / 2.0;
  }
  std::unique_ptr<tb::CommBuffer> send = Put(mine, DataType::kFloat32);
  std::unique_ptr<tb::CommBuffer> recv = comm_->Allocate(kCount * sizeof(float));
  comm_->ReduceScatter(send->data(), recv->data(), kCount, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(Get(*recv, kCount, DataType::kFloat32), expected);
}

// The values as floats, for ExpectAllNear (the collectives' values are floats; Get widens them).
std::vector<float> AsFloats(const std::vector<double>& values) { return {values.begin(), values.end()}; }

// Averages of sizes that a block split leaves a remainder of, every element checked. NCCL 2.28's one-rank path
// (oneRankReduce, for ncclAvg) hands each of its blocks floor(n / blocks) elements rounded up to 16 bytes, and so
// drops the last n mod blocks when that floor is already a multiple of four: seen on an H200 at 49984 floats,
// whose last 12 never arrived (an FSDP block's reduce-scatter). The communicator sums over one rank instead.
TEST_F(NcclTest, AverageKeepsEveryElement) {
  for (const size_t count : {size_t{49984}, size_t{1000003}, size_t{4096 * 31 + 12}}) {
    SCOPED_TRACE("count " + std::to_string(count));
    std::vector<double> mine(count * size_), gathered_average(count * size_), my_average(count);
    for (size_t j = 0; j < mine.size(); ++j) {
      mine[j] = static_cast<double>(j % 4096) + rank_;
      gathered_average[j] = static_cast<double>(j % 4096) + (size_ - 1) / 2.0;
    }
    std::copy_n(gathered_average.begin() + static_cast<std::ptrdiff_t>(rank_ * count), count, my_average.begin());
    std::unique_ptr<tb::CommBuffer> send = Put(mine, DataType::kFloat32);
    std::unique_ptr<tb::CommBuffer> recv = comm_->Allocate(count * sizeof(float));
    comm_->ReduceScatter(send->data(), recv->data(), count, DataType::kFloat32, ReduceOp::kAvg);
    // Within float rounding: an average may scale each input by 1/n before summing.
    tb::test::ExpectAllNear(AsFloats(Get(*recv, count, DataType::kFloat32)), AsFloats(my_average), 1e-5f, 1e-5f,
                            "reduce-scatter");
    std::unique_ptr<tb::CommBuffer> all = comm_->Allocate(mine.size() * sizeof(float));
    comm_->AllReduce(send->data(), all->data(), mine.size(), DataType::kFloat32, ReduceOp::kAvg);
    tb::test::ExpectAllNear(AsFloats(Get(*all, mine.size(), DataType::kFloat32)), AsFloats(gathered_average), 1e-5f,
                            1e-5f, "all-reduce");
  }
}

TEST_F(NcclTest, BroadcastFromLastRank) {
  constexpr size_t kCount = 16;
  const int root = size_ - 1;
  std::vector<double> from_root(kCount);
  for (size_t i = 0; i < kCount; ++i) from_root[i] = 3.0 * i + 1;
  std::unique_ptr<tb::CommBuffer> send = Put(rank_ == root ? from_root : std::vector<double>(kCount, -1.0),
                                             DataType::kFloat64);
  std::unique_ptr<tb::CommBuffer> recv = Put(std::vector<double>(kCount, 0.0), DataType::kFloat64);
  comm_->Broadcast(send->data(), recv->data(), kCount, DataType::kFloat64, root);
  EXPECT_EQ(Get(*recv, kCount, DataType::kFloat64), from_root);
}

TEST_F(NcclTest, ReduceToRankZero) {
  constexpr size_t kCount = 16;
  std::vector<double> mine(kCount);
  std::vector<double> expected(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    mine[i] = static_cast<double>(i) + rank_;
    expected[i] = static_cast<double>(i) * size_ + size_ * (size_ - 1) / 2.0;
  }
  std::unique_ptr<tb::CommBuffer> send = Put(mine, DataType::kFloat32);
  std::unique_ptr<tb::CommBuffer> recv = comm_->Allocate(kCount * sizeof(float));
  comm_->Reduce(send->data(), recv->data(), kCount, DataType::kFloat32, ReduceOp::kSum, 0);
  std::vector<double> result = Get(*recv, kCount, DataType::kFloat32);
  if (rank_ == 0) {
    EXPECT_EQ(result, expected);
  }
}

TEST_F(NcclTest, AllToAllIncludingSelf) {
  constexpr size_t kCount = 3;
  std::vector<double> mine(kCount * size_);
  std::vector<double> expected(kCount * size_);
  for (int peer = 0; peer < size_; ++peer) {
    for (size_t i = 0; i < kCount; ++i) {
      mine[peer * kCount + i] = 100.0 * rank_ + 10.0 * peer + i;      // what this rank sends to `peer`
      expected[peer * kCount + i] = 100.0 * peer + 10.0 * rank_ + i;  // what `peer` sent to this rank
    }
  }
  std::unique_ptr<tb::CommBuffer> send = Put(mine, DataType::kFloat32);
  std::unique_ptr<tb::CommBuffer> recv = comm_->Allocate(send->bytes());
  comm_->AllToAll(send->data(), recv->data(), kCount, DataType::kFloat32);
  EXPECT_EQ(Get(*recv, expected.size(), DataType::kFloat32), expected);
}

// The uneven layout of tests/alltoallv_layout.h (zeros, a rank receiving nothing when there are two or more, blocks out
// of rank order with gaps), moved as bf16 and as float: every element at its place, the gaps untouched, the block to
// itself included (on one rank it is the only one).
TEST_F(NcclTest, AllToAllVMovesUnevenBlocks) {
  const tb::test::VLayout send_layout = tb::test::SendLayout(rank_, size_);
  const tb::test::VLayout recv_layout = tb::test::RecvLayout(rank_, size_);
  const auto run = [&]<typename T>(DataType type, T) {
    const std::vector<T> send_host = tb::test::SendBuffer<T>(send_layout, rank_);
    const std::vector<T> untouched(recv_layout.elements, static_cast<T>(tb::test::kUntouched));
    std::unique_ptr<tb::CommBuffer> send = comm_->Allocate(send_host.size() * sizeof(T));
    std::unique_ptr<tb::CommBuffer> recv = comm_->Allocate(std::max<size_t>(untouched.size(), 1) * sizeof(T));
    comm_->Upload(*send, send_host.data(), send_host.size() * sizeof(T));
    comm_->Upload(*recv, untouched.data(), untouched.size() * sizeof(T));
    comm_->AllToAllV(send->data(), send_layout.counts, send_layout.offsets, recv->data(), recv_layout.counts,
                     recv_layout.offsets, type);
    comm_->Synchronize();
    std::vector<T> got(recv_layout.elements);
    comm_->Download(*recv, got.data(), got.size() * sizeof(T));
    EXPECT_EQ(got, tb::test::ExpectedRecvBuffer<T>(recv_layout, rank_)) << tb::DataTypeName(type);
  };
  run(DataType::kBFloat16, uint16_t{});
  run(DataType::kFloat32, float{});
  std::unique_ptr<tb::CommBuffer> buffer = comm_->Allocate(64);
  const std::vector<size_t> ones(static_cast<size_t>(size_), 1), offsets(static_cast<size_t>(size_), 0);
  EXPECT_THROW(comm_->AllToAllV(buffer->data(), ones, offsets, buffer->data(), ones, offsets, DataType::kFloat32),
               tb::RuntimeError);
}

TEST_F(NcclTest, SendRecvAroundTheRing) {
  // With one rank the ring is a send to self.
  constexpr size_t kCount = 8;
  const int dst = (rank_ + 1) % size_;
  const int src = (rank_ + size_ - 1) % size_;
  std::vector<double> mine(kCount);
  std::vector<double> expected(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    mine[i] = 10.0 * rank_ + i;
    expected[i] = 10.0 * src + i;
  }
  std::unique_ptr<tb::CommBuffer> send = Put(mine, DataType::kFloat32);
  std::unique_ptr<tb::CommBuffer> recv = comm_->Allocate(send->bytes());
  comm_->SendRecv(send->data(), dst, recv->data(), src, kCount, DataType::kFloat32);
  EXPECT_EQ(Get(*recv, kCount, DataType::kFloat32), expected);
}

TEST_F(NcclTest, PrefixOfOneRank) {
  EXPECT_THROW(comm_->Prefix(0), tb::InputError);
  EXPECT_THROW(comm_->Prefix(size_ + 1), tb::InputError);
  std::unique_ptr<tb::Communicator> first = comm_->Prefix(1);
  if (rank_ != 0) {
    EXPECT_EQ(first, nullptr);
  } else {
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->rank(), 0);
    EXPECT_EQ(first->size(), 1);
    const std::vector<double> values = {1.0, 2.0, 3.0};
    std::unique_ptr<tb::CommBuffer> buffer = first->Allocate(values.size() * sizeof(float));
    const std::vector<std::byte> bytes = Encode(values, DataType::kFloat32);
    first->Upload(*buffer, bytes.data(), bytes.size());
    first->AllReduce(buffer->data(), buffer->data(), values.size(), DataType::kFloat32, ReduceOp::kSum);
    first->Synchronize();
    std::vector<std::byte> result(bytes.size());
    first->Download(*buffer, result.data(), result.size());
    EXPECT_EQ(Decode(result, DataType::kFloat32), values);  // a sum over one rank
    first->Barrier();
  }
  // The parent still works after the split.
  std::unique_ptr<tb::CommBuffer> ones = Put(std::vector<double>(4, 1.0), DataType::kFloat32);
  comm_->AllReduce(ones->data(), ones->data(), 4, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(Get(*ones, 4, DataType::kFloat32), std::vector<double>(4, size_));
}

TEST_F(NcclTest, AbortThenSynchronizeThrows) {
  std::unique_ptr<tb::CommBuffer> buffer = Put(std::vector<double>(4, 1.0), DataType::kFloat32);
  comm_->Abort();
  comm_->Abort();  // a second abort (the watchdog racing an error path) is harmless
  try {
    comm_->Synchronize();
    ADD_FAILURE() << "Synchronize() returned after Abort()";
  } catch (const tb::RuntimeError& error) {
    EXPECT_NE(std::string(error.what()).find("NCCL communicator aborted"), std::string::npos) << error.what();
  }
  EXPECT_THROW(comm_->AllReduce(buffer->data(), buffer->data(), 4, DataType::kFloat32, ReduceOp::kSum),
               tb::RuntimeError);
}

TEST_F(NcclTest, AbortFromAnotherThreadReleasesAStuckRank) {
  if (size_ < 2) GTEST_SKIP() << "needs 2 ranks with a GPU each (mpiexec -n 2): a receive that no rank answers";
  std::unique_ptr<tb::CommBuffer> buffer = comm_->Allocate(64 * sizeof(float));
  std::thread watchdog([this] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    comm_->Abort();
  });
  if (rank_ == 0) {
    // Rank 1 never sends: rank 0 waits as it would behind a dead peer, until the abort releases it (in SendRecv
    // while NCCL still connects, or in Synchronize).
    EXPECT_THROW(
        {
          comm_->SendRecv(nullptr, -1, buffer->data(), 1, 64, DataType::kFloat32);
          comm_->Synchronize();
        },
        tb::RuntimeError);
  }
  watchdog.join();
  EXPECT_THROW(comm_->Synchronize(), tb::RuntimeError);
}

}  // namespace
