// The sweep harness under mpiexec: verified results, timing statistics across ranks, the report groups,
// early stop, and a corrupting communicator whose wrong values the verification must catch.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <thread>
#include <vector>

#include "error.h"
#include "forwarding_communicator.h"
#include "mpi_communicator.h"
#include "sweep.h"
#include "sweep_options.h"

namespace tb {
namespace {

SweepOptions SmallSweep(const std::string& ops) {
  CollectivesFlags f;
  f.sizes = "8,1K,64K";
  f.ops = ops;
  f.iters = 3;
  f.warmup = 1;
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return ValidateCollectivesFlags(f, n, nullptr);
}

TEST(Sweep, AllOperationsVerifyAndTimeConsistently) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  SweepOptions o = SmallSweep("all");
  int rows_seen = 0;
  SweepResult result = RunSweep(*comm, o, [&](const OpResult&, const SizeResult&) { ++rows_seen; });
  EXPECT_TRUE(result.complete);
  EXPECT_EQ(result.wrong_total, 0);
  ASSERT_EQ(result.ops.size(), 7u);
  int rows = 0;
  for (const OpResult& op : result.ops) {
    EXPECT_DOUBLE_EQ(op.bus_factor, op.def->bus_factor(comm->size()));
    for (const SizeResult& row : op.rows) {
      ++rows;
      for (const ModeResult* m : {&row.out_of_place, &row.in_place}) {
        EXPECT_TRUE(m->measured);
        EXPECT_EQ(m->wrong, 0) << op.def->name << " " << row.size_bytes;
        EXPECT_GT(m->time_us, 0);
        EXPECT_LE(m->time_rank_min_us, m->time_rank_avg_us * (1 + 1e-12));
        EXPECT_LE(m->time_rank_avg_us, m->time_us * (1 + 1e-12));
        EXPECT_NEAR(m->algbw_GBps, row.size_bytes / (m->time_us * 1e-6) / 1e9, 1e-9 * m->algbw_GBps);
        EXPECT_NEAR(m->busbw_GBps, m->algbw_GBps * op.bus_factor, 1e-12 + 1e-9 * m->busbw_GBps);
      }
    }
  }
  EXPECT_EQ(rows, rows_seen);
}

// One rank: an in-place operation moves nothing, so its rates are N/A (NaN), not S over a no-op's time; the
// out-of-place copy keeps its rate, and the footer's average skips the N/A rows.
TEST(Sweep, InPlaceOnOneRankHasNoRate) {
  auto self = MakeMpiCommunicator(MPI_COMM_SELF);
  CollectivesFlags f;
  f.sizes = "1K,64K";
  f.ops = "all_reduce,broadcast";
  f.iters = 3;
  f.warmup = 1;
  const SweepOptions o = ValidateCollectivesFlags(f, 1, nullptr);
  const SweepResult result = RunSweep(*self, o, nullptr);
  EXPECT_EQ(result.wrong_total, 0);
  for (const OpResult& op : result.ops) {
    for (const SizeResult& row : op.rows) {
      EXPECT_TRUE(std::isnan(row.in_place.algbw_GBps)) << op.def->name << " " << row.size_bytes;
      EXPECT_TRUE(std::isnan(row.in_place.busbw_GBps)) << op.def->name << " " << row.size_bytes;
      EXPECT_GT(row.in_place.time_us, 0);
      EXPECT_TRUE(std::isfinite(row.out_of_place.algbw_GBps) && row.out_of_place.algbw_GBps > 0);
      EXPECT_NE(SweepRowLine(row, op, o).find("N/A"), std::string::npos);
    }
  }
  for (const std::string& line : SweepFooterLines(result)) {
    EXPECT_EQ(line.find("nan"), std::string::npos) << line;
  }
}

TEST(Sweep, ReportHoldsTheDocumentedTable) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  SweepOptions o = SmallSweep("all_reduce,broadcast");
  SweepResult result = RunSweep(*comm, o, nullptr);
  Report report;
  AddSweepToReport(report, result, o);
  const Group* group = report.root.FindChild("collectives")->FindChild("all_reduce");
  ASSERT_NE(group, nullptr);
  const Table& table = group->tables.at("results");
  EXPECT_EQ(table.rows(), 3u);
  for (const char* column : {"size_bytes", "count", "out_of_place_time_us", "out_of_place_time_rank_min_us",
                             "out_of_place_time_rank_avg_us", "out_of_place_algbw_GBps", "out_of_place_busbw_GBps",
                             "out_of_place_wrong", "in_place_time_us", "in_place_busbw_GBps", "in_place_wrong"}) {
    EXPECT_NE(table.Find(column), nullptr) << column;
  }
  EXPECT_EQ(table.Find("in_place_busbw_GBps")->unit, "GB/s");
  EXPECT_EQ(std::get<std::string>(group->attributes.at("bus_factor_formula")), "2(n-1)/n");
  const Group* summary = report.root.FindChild("summary");
  ASSERT_NE(summary, nullptr);
  EXPECT_EQ(std::get<int64_t>(summary->attributes.at("wrong_elements_total")), 0);
  EXPECT_GT(std::get<double>(summary->attributes.at("all_reduce_peak_busbw_GBps")), comm->size() > 1 ? 0.0 : -1.0);
}

TEST(Sweep, StopRequestEndsEarlyOnEveryRank) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  SweepOptions o = SmallSweep("all_reduce,all_gather");
  int asked = 0;
  o.stop_requested = [&] { return ++asked > 1; };  // the same on every rank: stop before the second size
  SweepResult result = RunSweep(*comm, o, nullptr);
  EXPECT_FALSE(result.complete);
  ASSERT_EQ(result.ops.size(), 1u);
  EXPECT_EQ(result.ops[0].rows.size(), 1u);
}

// Corrupts one element of every all_reduce result on rank 0.
class CorruptingCommunicator : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  void AllReduce(const void* s, void* r, size_t c, DataType t, ReduceOp op) override {
    ForwardingCommunicator::AllReduce(s, r, c, t, op);
    if (rank() == 0 && c > 0) static_cast<float*>(r)[c / 2] += 1.0f;
  }
};

TEST(Sweep, VerificationCatchesAWrongElement) {
  CorruptingCommunicator comm(MakeMpiCommunicator(MPI_COMM_WORLD));
  SweepOptions o = SmallSweep("all_reduce");
  o.check_iters = 2;
  SweepResult result = RunSweep(comm, o, nullptr);
  // 3 sizes x 2 modes x 2 check iterations, one wrong element each, seen on every rank after the sum.
  EXPECT_EQ(result.wrong_total, 3 * 2 * 2);
  for (const SizeResult& row : result.ops[0].rows) {
    EXPECT_EQ(row.out_of_place.wrong, 2);
    EXPECT_EQ(row.in_place.wrong, 2);
  }
}

TEST(Sweep, CheckItersZeroMeansNotChecked) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  SweepOptions o = SmallSweep("all_reduce");
  o.check_iters = 0;
  SweepResult result = RunSweep(*comm, o, nullptr);
  EXPECT_EQ(result.ops[0].rows[0].out_of_place.wrong, -1);
  EXPECT_EQ(result.wrong_total, 0);
}

// A split as `collectives --split` makes it, with pretend nodes of two ranks (ranks 2i and 2i+1): every pair
// measures at once, the rows combine every rank of every pair, and a wrong element is named by its launch rank.
TEST(Sweep, SplitCommunicatorsMeasureAtOnceAndCombineOverTheLaunch) {
  auto world = MakeMpiCommunicator(MPI_COMM_WORLD);
  if (world->size() % 2 != 0 || world->size() < 4) GTEST_SKIP() << "needs an even number of ranks, at least 4";
  const int rank = world->rank(), n = world->size();
  for (const bool inter : {false, true}) {
    SCOPED_TRACE(inter ? "inter" : "intra");
    // intra: the pairs {2i, 2i+1}; inter: local rank 0 of every pretend node, and local rank 1 of every one.
    std::unique_ptr<Communicator> part = inter ? world->Split(rank % 2, rank / 2) : world->Split(rank / 2, rank % 2);
    SweepOptions o = SmallSweep("all_reduce,all_gather");
    o.split = inter ? SplitPlan{"inter", 2, n / 2, n / 2} : SplitPlan{"intra", n / 2, 2, 1};
    o.across = world->host_comm();
    const int corrupt = n - 1;  // its all_gather input is off by one at element 0
    o.before_check = [&](void* input, size_t) {
      if (rank == corrupt) static_cast<float*>(input)[0] += 1.0f;
    };
    SweepResult result = RunSweep(*part, o, nullptr);
    ASSERT_EQ(result.ops.size(), 2u);
    const OpResult& all_reduce = result.ops[0];
    const OpResult& all_gather = result.ops[1];
    EXPECT_EQ(all_reduce.n_ranks, o.split.ranks);
    EXPECT_DOUBLE_EQ(all_reduce.bus_factor, 2.0 * (o.split.ranks - 1) / o.split.ranks);
    for (const SizeResult& row : all_gather.rows) {
      // Every rank of the corrupt rank's communicator (itself too) received its wrong element: named by launch rank.
      EXPECT_EQ(row.out_of_place.wrong, o.split.ranks);
      EXPECT_EQ(row.out_of_place.wrong_sources, std::to_string(corrupt));
    }
    // The times are over every rank of the launch: the same on every rank.
    const double mine = all_reduce.rows.back().out_of_place.time_us;
    double highest = 0;
    MPI_Allreduce(&mine, &highest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_DOUBLE_EQ(mine, highest);
    for (const SizeResult& row : all_reduce.rows) {
      const double nic = row.out_of_place.nic_busbw_GBps;
      if (inter) {
        EXPECT_NEAR(nic, row.out_of_place.busbw_GBps * (o.split.nodes - 1) / (o.split.ranks - 1), 1e-12);
      } else {
        EXPECT_TRUE(std::isnan(nic)) << "one node: no per-NIC rate";
      }
    }
    Report report;
    AddSweepToReport(report, result, o);
    const Group* group = report.root.FindChild("collectives")->FindChild("all_reduce");
    EXPECT_EQ(std::get<std::string>(group->attributes.at("split")), inter ? "inter" : "intra");
    EXPECT_EQ(std::get<int64_t>(group->attributes.at("communicators")), o.split.communicators);
    EXPECT_NE(group->tables.at("results").Find("out_of_place_nic_busbw_GBps"), nullptr);
  }
}

// Records where every all_reduce's operands start, and how often operations were issued together.
class AddressRecordingCommunicator : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  void AllReduce(const void* s, void* r, size_t c, DataType t, ReduceOp op) override {
    calls.push_back({s, r, c});
    if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ForwardingCommunicator::AllReduce(s, r, c, t, op);
  }
  void IssueTogether(const std::function<void()>& issue) override {
    ++groups;
    ForwardingCommunicator::IssueTogether(issue);
  }
  struct Call {
    const void* send;
    void* recv;
    size_t count;
  };
  std::vector<Call> calls;
  int groups = 0;
  int delay_ms = 0;
};

// nccl-tests' shift: a size smaller than the largest uses a new 256 B-aligned slot of the buffers each iteration; the
// largest has one slot. Every slot's result verified.
TEST(Sweep, BufferOffsetsRotateBetweenIterations) {
  AddressRecordingCommunicator comm(MakeMpiCommunicator(MPI_COMM_WORLD));
  CollectivesFlags f;
  f.sizes = "1000,64K";  // 250 floats: slots of 1024 B (rounded up to 256 B), 64 of them in the 64 KiB buffers
  f.ops = "all_reduce";
  f.iters = 8;
  f.warmup = 2;
  f.check_iters = 3;
  f.modes = "out-of-place";
  SweepOptions o = ValidateCollectivesFlags(f, comm.size(), nullptr);
  const SweepResult result = RunSweep(comm, o, nullptr);
  EXPECT_EQ(result.wrong_total, 0);
  ASSERT_EQ(comm.calls.size(), 2u * (2 + 8 + 3));
  const auto* base = static_cast<const char*>(comm.calls.back().send);  // the largest size: always slot 0
  for (size_t k = 13; k < 26; ++k) EXPECT_EQ(comm.calls[k].send, base) << k;
  // The small size: warm-up slots 0, 1; timed 0..7; checks 0..2; send and receive each at slot x 1024 B.
  const std::vector<size_t> slots = {0, 1, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2};
  const auto* recv_base = static_cast<const char*>(comm.calls[0].recv);
  for (size_t k = 0; k < slots.size(); ++k) {
    EXPECT_EQ(static_cast<const char*>(comm.calls[k].send) - base, static_cast<std::ptrdiff_t>(slots[k] * 1024)) << k;
    EXPECT_EQ(static_cast<const char*>(comm.calls[k].recv) - recv_base, static_cast<std::ptrdiff_t>(slots[k] * 1024)) << k;
  }
}

// --aggregate N: N operations issued together per timed iteration (each at its own slot), and the time is per
// operation: a 5 ms operation stays about 5 ms, not N x 5 = 40 ms (the bound, 20 ms, leaves a loaded machine's
// scheduling room: 4 ranks on 2 busy cores measured 12 ms against an earlier bound of 10).
TEST(Sweep, AggregateIssuesTogetherAndDividesTheTime) {
  AddressRecordingCommunicator comm(MakeMpiCommunicator(MPI_COMM_WORLD));
  CollectivesFlags f;
  f.sizes = "8";
  f.ops = "all_reduce";
  f.iters = 2;
  f.warmup = 1;
  f.aggregate = 8;
  f.modes = "in-place";
  SweepOptions o = ValidateCollectivesFlags(f, comm.size(), nullptr);
  comm.delay_ms = 5;
  const SweepResult result = RunSweep(comm, o, nullptr);
  EXPECT_EQ(result.wrong_total, 0);
  EXPECT_EQ(comm.groups, 2);                     // one group per timed iteration
  EXPECT_EQ(comm.calls.size(), 1u + 2 * 8 + 1);  // warm-up, 2 x 8 timed, 1 check
  const double time_us = result.ops[0].rows[0].in_place.time_us;
  EXPECT_GE(time_us, 5000 * 0.95);
  EXPECT_LT(time_us, 5000 * 4.0) << "the time of 8 operations, not of one";
  EXPECT_NE(SweepHeaderLines(result.ops[0], o)[1].find("8 ops per iteration issued together"), std::string::npos)
      << SweepHeaderLines(result.ops[0], o)[1];
}

TEST(Sweep, CudaGraphNeedsACommunicatorThatCaptures) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  SweepOptions o = SmallSweep("all_reduce");
  o.cuda_graph = 2;
  EXPECT_THROW(RunSweep(*comm, o, nullptr), InputError);
}

}  // namespace
}  // namespace tb
