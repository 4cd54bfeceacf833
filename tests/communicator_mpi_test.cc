// MpiCommunicator under mpiexec -n 2 and 4: every operation, in and out of place, every supported type and
// reduction, checked against the collective definitions' expected values; alltoallv's uneven blocks; sub-communicators.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <vector>

#include "alltoallv_layout.h"
#include "collective.h"
#include "error.h"
#include "marking_communicator.h"
#include "mpi_communicator.h"
#include "mpi_util.h"
#include "verify.h"

namespace tb {
namespace {

// Runs `def` once and returns the number of wrong elements on this rank.
int64_t RunAndCount(Communicator& comm, const CollectiveDef& def, uint64_t bytes, DataType type, ReduceOp op,
                    bool in_place, int root) {
  const int n = comm.size(), rank = comm.rank();
  const size_t ts = DataTypeSize(type);
  CollectiveCounts c = def.counts(bytes, ts, n, rank);
  std::vector<char> send(c.send_elements * ts + ts), recv(std::max(c.send_elements, c.recv_elements) * ts + ts);
  FillSentinelOnHost(type, recv.data(), recv.size() / ts);
  const void* send_ptr = send.data();
  void* recv_ptr = recv.data();
  if (in_place) {
    send_ptr = recv.data() + c.in_place_send_offset * ts;
    recv_ptr = recv.data() + c.in_place_recv_offset * ts;
  }
  FillInputOnHost(type, const_cast<void*>(send_ptr), c.send_elements, rank);
  def.run(comm, send_ptr, recv_ptr, c, type, op, root);
  comm.Synchronize();
  return CountWrongOnHost(type, recv_ptr, c.recv_elements, def.expected(c, rank, n, op, root)).count;
}

TEST(MpiCommunicator, EveryOperationTypeAndReductionIsCorrect) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  EXPECT_EQ(comm->backend(), "mpi");
  EXPECT_EQ(comm->memory(), MemoryKind::kHost);
  for (const CollectiveDef* def : AllCollectives()) {
    for (DataType type : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        if (!def->uses_reduce_op && op != ReduceOp::kSum) continue;
        for (uint64_t bytes : {uint64_t{64}, uint64_t{4096 + 24}, uint64_t{1} << 20}) {
          for (bool in_place : {false, true}) {
            const int root = comm->size() - 1;
            EXPECT_EQ(RunAndCount(*comm, *def, bytes, type, op, in_place, root), 0)
                << def->name << " " << DataTypeName(type) << " " << ReduceOpName(op) << " " << bytes << " B "
                << (in_place ? "in-place" : "out-of-place") << " rank " << comm->rank();
          }
        }
      }
    }
  }
}

TEST(MpiCommunicator, RejectsHalfPrecision) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  EXPECT_FALSE(comm->Supports(DataType::kFloat16));
  EXPECT_FALSE(comm->Supports(DataType::kBFloat16));
  std::vector<uint16_t> data(4);
  EXPECT_THROW(comm->AllReduce(data.data(), data.data(), 4, DataType::kBFloat16, ReduceOp::kSum), InputError);
}

TEST(MpiCommunicator, PrefixHoldsTheFirstKRanks) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  for (int k = 1; k <= comm->size(); ++k) {
    std::unique_ptr<Communicator> sub = comm->Prefix(k);
    if (comm->rank() >= k) {
      EXPECT_EQ(sub, nullptr);
      continue;
    }
    ASSERT_NE(sub, nullptr);
    EXPECT_EQ(sub->size(), k);
    EXPECT_EQ(sub->rank(), comm->rank());
    EXPECT_EQ(RunAndCount(*sub, kAllReduce, 1024, DataType::kFloat32, ReduceOp::kSum, false, 0), 0);
    int sum = 0, one = 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, sub->host_comm());
    EXPECT_EQ(sum, k);
  }
}

// Pretend nodes of two ranks (2i, 2i+1): the hierarchical all-reduce gives the flat one's results for every type and
// reduction, in place and not, at counts that do not divide by the ranks per node (and below them), and its time
// splits into the steps inside and across nodes.
TEST(MpiCommunicator, HierarchicalAllReduceMatchesTheFlatOne) {
  auto flat = MakeMpiCommunicator(MPI_COMM_WORLD);
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  const int rank = comm->rank(), n = comm->size();
  if (n % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  ASSERT_TRUE(comm->UseHierarchicalAllReduce(rank / 2, rank % 2));
  for (const DataType type : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32}) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
      for (const size_t count : {size_t{1}, size_t{7}, size_t{1000}}) {
        for (const bool in_place : {false, true}) {
          SCOPED_TRACE(DataTypeName(type) + " " + ReduceOpName(op) + " " + std::to_string(count) +
                       (in_place ? " in place" : ""));
          const size_t bytes = count * DataTypeSize(type);
          std::vector<char> input(bytes), want(bytes), got(bytes);
          for (size_t i = 0; i < count; ++i) StoreElement(type, input.data(), i, InputValue(rank, i));
          flat->AllReduce(input.data(), want.data(), count, type, op);
          got = input;
          comm->AllReduce(in_place ? got.data() : input.data(), got.data(), count, type, op);
          EXPECT_EQ(got, want);
        }
      }
    }
  }
  std::vector<float> data(4096, 1.0f);
  std::unique_ptr<PendingOp> pending = comm->StartAllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                                            ReduceOp::kSum);
  pending->Wait();
  EXPECT_EQ(data[4095], static_cast<float>(n));
  const std::optional<LinkSeconds> split = pending->LinkSplit();
  ASSERT_TRUE(split.has_value());
  EXPECT_GE(split->intra_s, 0);
  EXPECT_GE(split->inter_s, 0);
  EXPECT_NEAR(split->intra_s + split->inter_s, pending->Seconds(), 1e-12);
  // The flat all-reduce cannot tell its links apart.
  std::unique_ptr<PendingOp> unsplit = flat->StartAllReduce(data.data(), data.data(), data.size(), DataType::kFloat32,
                                                            ReduceOp::kSum);
  unsplit->Wait();
  EXPECT_FALSE(unsplit->LinkSplit().has_value());
}

TEST(MpiCommunicator, HierarchicalAllReduceNeedsEvenNodes) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  if (comm->size() < 3) GTEST_SKIP() << "needs 3 ranks or more";
  // Nodes of n-1 ranks and 1 rank: every rank refuses alike.
  EXPECT_THROW(comm->UseHierarchicalAllReduce(comm->rank() == comm->size() - 1 ? 1 : 0, comm->rank()), InputError);
}

// The started reduce-scatter and all-gather give what the blocking calls give, in place (NCCL's layout) and out of
// place, averaged or summed.
TEST(MpiCommunicator, StartedReduceScatterAndAllGatherMatchTheBlockingCalls) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  const int n = comm->size(), me = comm->rank();
  const size_t count = 5;
  std::vector<float> whole(count * n);
  for (size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<float>(i + 100 * me);
  for (bool in_place : {false, true}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      std::vector<float> blocking(count), started_buffer = whole, out(count);
      comm->ReduceScatter(whole.data(), blocking.data(), count, DataType::kFloat32, op);
      float* recv = in_place ? started_buffer.data() + count * me : out.data();
      std::unique_ptr<PendingOp> pending =
          comm->StartReduceScatter(started_buffer.data(), recv, count, DataType::kFloat32, op);
      pending->Wait();
      EXPECT_TRUE(pending->Test());
      EXPECT_GE(pending->Seconds(), 0);
      for (size_t i = 0; i < count; ++i) EXPECT_EQ(recv[i], blocking[i]) << "in place " << in_place << ", i " << i;
    }
    std::vector<float> mine(count, static_cast<float>(me + 1)), gathered(count * n, -1.0f);
    std::copy(mine.begin(), mine.end(), gathered.begin() + static_cast<long>(count * me));
    const float* send = in_place ? gathered.data() + count * me : mine.data();
    comm->StartAllGather(send, gathered.data(), count, DataType::kFloat32)->Wait();
    for (int r = 0; r < n; ++r) EXPECT_EQ(gathered[count * r + count - 1], static_cast<float>(r + 1));
  }
}

// Runs the uneven layout's alltoallv in element type T (moved as `type`) and returns this rank's receive buffer, which
// starts as kUntouched everywhere.
template <typename T>
std::vector<T> UnevenAllToAllV(Communicator& comm, DataType type) {
  const test::VLayout send_layout = test::SendLayout(comm.rank(), comm.size());
  const test::VLayout recv_layout = test::RecvLayout(comm.rank(), comm.size());
  const std::vector<T> send = test::SendBuffer<T>(send_layout, comm.rank());
  // One element at least, so that a rank receiving nothing still has a buffer distinct from its send buffer.
  std::vector<T> recv(std::max<size_t>(recv_layout.elements, 1), static_cast<T>(test::kUntouched));
  comm.AllToAllV(send.data(), send_layout.counts, send_layout.offsets, recv.data(), recv_layout.counts,
                 recv_layout.offsets, type);
  comm.Synchronize();
  recv.resize(recv_layout.elements);
  return recv;
}

// Uneven counts, zeros among them, the last rank receiving nothing, blocks out of rank order with gaps: every element
// arrives at its place and nothing else is written, for every type (fp16/bf16 moved as 16-bit words), directly and
// through the marking wrapper that every command adds.
TEST(MpiCommunicator, AllToAllVMovesUnevenBlocks) {
  auto plain = MakeMpiCommunicator(MPI_COMM_WORLD);
  auto marked = WithCommunicationMarks(MakeMpiCommunicator(MPI_COMM_WORLD));
  const int me = plain->rank(), n = plain->size();
  const test::VLayout recv_layout = test::RecvLayout(me, n);
  if (n > 1 && me == n - 1) {
    EXPECT_EQ(recv_layout.elements, static_cast<size_t>(n));  // gaps only: it receives nothing
  }
  for (Communicator* comm : {plain.get(), marked.get()}) {
    EXPECT_EQ(UnevenAllToAllV<float>(*comm, DataType::kFloat32), test::ExpectedRecvBuffer<float>(recv_layout, me));
    EXPECT_EQ(UnevenAllToAllV<double>(*comm, DataType::kFloat64), test::ExpectedRecvBuffer<double>(recv_layout, me));
    EXPECT_EQ(UnevenAllToAllV<int32_t>(*comm, DataType::kInt32), test::ExpectedRecvBuffer<int32_t>(recv_layout, me));
    for (const DataType half : {DataType::kFloat16, DataType::kBFloat16}) {
      EXPECT_EQ(UnevenAllToAllV<uint16_t>(*comm, half), test::ExpectedRecvBuffer<uint16_t>(recv_layout, me))
          << DataTypeName(half);
    }
  }
}

// Not in place, one count and offset per rank, and MPI_Alltoallv's int counts: each refused alike on every rank
// before anything moves.
TEST(MpiCommunicator, AllToAllVRefusesWhatItCannotRun) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  const size_t n = static_cast<size_t>(comm->size());
  std::vector<float> buffer(8 * n), other(8 * n);
  std::vector<size_t> ones(n, 1), offsets(n, 0);
  EXPECT_THROW(comm->AllToAllV(buffer.data(), ones, offsets, buffer.data(), ones, offsets, DataType::kFloat32),
               RuntimeError);
  const std::vector<size_t> short_counts(n + 1, 1);
  EXPECT_THROW(comm->AllToAllV(buffer.data(), short_counts, offsets, other.data(), ones, offsets, DataType::kFloat32),
               RuntimeError);
  std::vector<size_t> huge = ones;
  huge[0] = static_cast<size_t>(INT_MAX) + 1;
  EXPECT_THROW(comm->AllToAllV(buffer.data(), huge, offsets, other.data(), ones, offsets, DataType::kFloat32),
               InputError);
  EXPECT_THROW(comm->AllToAllV(buffer.data(), ones, offsets, other.data(), ones, huge, DataType::kFloat32), InputError);
}

TEST(MpiCommunicator, BuffersRoundTrip) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  auto buffer = comm->Allocate(64);
  EXPECT_EQ(buffer->bytes(), 64u);
  std::vector<char> in(64, 'x'), out(64);
  comm->Upload(*buffer, in.data(), in.size());
  comm->Download(*buffer, out.data(), out.size());
  EXPECT_EQ(in, out);
  EXPECT_THROW(comm->Upload(*buffer, in.data(), 65), RuntimeError);
}

// Rank r sends r strings, the last of them empty: rank 0's empty list and every empty string arrive as sent.
TEST(MpiUtil, GatherStringListsKeepsEmptyListsAndStrings) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto label = [](int r, int i) {  // "r<r>.<i>", appended (GCC 12 warns falsely about "r" + std::string)
    std::string text = "r";
    text += std::to_string(r) + "." + std::to_string(i);
    return text;
  };
  std::vector<std::string> mine;
  for (int i = 0; i < rank; ++i) mine.push_back(i + 1 == rank ? "" : label(rank, i));
  const std::vector<std::vector<std::string>> all = GatherStringLists(MPI_COMM_WORLD, mine);
  if (rank != 0) {
    EXPECT_TRUE(all.empty());
    return;
  }
  ASSERT_EQ(all.size(), static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    ASSERT_EQ(all[r].size(), static_cast<size_t>(r)) << "rank " << r;
    if (r > 0) {
      EXPECT_EQ(all[r].back(), "");
    }
    if (r > 1) {
      EXPECT_EQ(all[r].front(), label(r, 0));
    }
  }
}

}  // namespace
}  // namespace tb
