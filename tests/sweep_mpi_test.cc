// The sweep harness under mpiexec: verified results, timing statistics across ranks, the report groups,
// early stop, and a corrupting communicator whose wrong values the verification must catch.
#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace tb
