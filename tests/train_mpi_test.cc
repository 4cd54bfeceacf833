// The training loop under mpiexec: replicas stay bit-identical (gradients averaged every step), overlap does
// not change the result, every rank count of the sweep runs on its prefix communicator; and the summary
// arithmetic (percentiles, throughput, efficiency, stall budget) on hand-made records.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "error.h"
#include "model_config.h"
#include "mpi_communicator.h"
#include "train_loop.h"
#include "train_summary.h"
#include "transformer.h"

namespace tb {
namespace {

ModelConfig SmallModel() { return CustomModel(2, 32, 4, 97, 16); }

TrainLoopOptions SmallLoop() {
  TrainLoopOptions o;
  o.micro_batch = 2;
  o.seq = 16;
  o.steps = 3;
  o.warmup_steps = 1;
  o.bucket_mb = 0.01;  // ~10 KiB: several buckets even for this small model
  o.adamw.learning_rate = 1e-2f;
  return o;
}

// Rank 0's parameters, broadcast, compared bit for bit on every rank.
bool SameAsRankZero(Communicator& comm, Transformer& model) {
  const size_t n = model.parameter_elements();
  std::vector<float> root(model.parameters(), model.parameters() + n);
  MPI_Bcast(root.data(), static_cast<int>(n), MPI_FLOAT, 0, comm.host_comm());
  int same = std::memcmp(root.data(), model.parameters(), n * sizeof(float)) == 0 ? 1 : 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, comm.host_comm());
  return all == 1;
}

TEST(TrainLoop, ReplicasStayBitIdentical) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  auto model = MakeCpuTransformer(SmallModel(), 7);
  std::vector<float> initial(model->parameters(), model->parameters() + model->parameter_elements());
  std::vector<StepRecord> records = RunTrainingSteps(*comm, *model, SmallLoop());
  ASSERT_EQ(records.size(), 4u);
  EXPECT_TRUE(records[0].warmup);
  EXPECT_FALSE(records[1].warmup);
  EXPECT_TRUE(SameAsRankZero(*comm, *model));
  // Training happened: parameters moved.
  EXPECT_NE(std::memcmp(initial.data(), model->parameters(), initial.size() * sizeof(float)), 0);
  for (const StepRecord& r : records) {
    EXPECT_EQ(r.tokens, 2 * 16);
    EXPECT_GT(r.step_s, 0);
    EXPECT_GE(r.step_s + 1e-9, r.forward_s + r.backward_s + r.comm_exposed_s + r.optimizer_s);
    EXPECT_GT(r.loss, 0);
  }
}

TEST(TrainLoop, OverlapDoesNotChangeTheResult) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  auto overlapped = MakeCpuTransformer(SmallModel(), 7);
  auto deferred = MakeCpuTransformer(SmallModel(), 7);
  TrainLoopOptions o = SmallLoop();
  RunTrainingSteps(*comm, *overlapped, o);
  o.overlap = false;
  RunTrainingSteps(*comm, *deferred, o);
  EXPECT_EQ(std::memcmp(overlapped->parameters(), deferred->parameters(),
                        overlapped->parameter_elements() * sizeof(float)),
            0);
}

// ZeRO-1 (optimizer state sharded, gradients reduce-scattered, parameters all-gathered) against data parallel from
// the same seed: the same losses step by step and the same parameters, within fp32 summation order (a reduce-scatter
// adds the ranks' gradients in another order than an all-reduce may); every rank's parameters bit-identical, since
// each rank's shard is all-gathered as computed.
TEST(TrainLoop, ZeroOneGivesDataParallelsLossesAndParameters) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  auto dp = MakeCpuTransformer(SmallModel(), 7);
  const size_t n = dp->parameter_elements();
  auto zero =
      MakeCpuTransformer(SmallModel(), 7, {.shard = ShardOf(n, comm->size(), comm->rank()), .fsdp = {}, .stage = {}});
  TrainLoopOptions o = SmallLoop();
  const std::vector<StepRecord> dp_steps = RunTrainingSteps(*comm, *dp, o);
  o.parallel = ParallelMode::kZero1;
  const std::vector<StepRecord> zero_steps = RunTrainingSteps(*comm, *zero, o);
  ASSERT_EQ(zero_steps.size(), dp_steps.size());
  for (size_t i = 0; i < dp_steps.size(); ++i) {
    EXPECT_NEAR(zero_steps[i].loss, dp_steps[i].loss, 1e-5 * std::fabs(dp_steps[i].loss)) << "step " << i;
    EXPECT_GT(zero_steps[i].comm_total_s, 0);
    EXPECT_TRUE(std::isnan(zero_steps[i].comm_inter_s));
  }
  EXPECT_TRUE(SameAsRankZero(*comm, *zero));
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double{zero->parameters()[i]} - dp->parameters()[i]));
  // AdamW divides each gradient by its own RMS, so an element whose gradient is near 0 turns a summation-order
  // difference into an update difference of a share of the learning rate: bound it by 1e-3 x lr per step (the runs
  // are deterministic: 4 ranks give 1.2e-5 here, against 4e-5).
  EXPECT_LT(worst, 1e-3 * o.adamw.learning_rate * static_cast<double>(dp_steps.size()))
      << "largest parameter difference from data parallel";
  // Each rank keeps AdamW's moments for its shard only; the shards cover every element once.
  const OptimizerShard& shard = zero->placement().shard;
  unsigned long long mine = shard.elements(), all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(all, n);
  EXPECT_EQ(shard.capacity % static_cast<size_t>(comm->size()), 0u);
}

// This rank's FSDP shards of the parameters, gathered from every rank into the flat layout (the padding dropped).
std::vector<float> GatherFsdpParameters(Communicator& comm, Transformer& model) {
  const FsdpLayout& f = model.placement().fsdp;
  std::vector<float> flat(model.layout().back().offset + model.layout().back().count);
  for (size_t u = 0; u < f.units.size(); ++u) {
    std::vector<float> whole(f.shards[u].shard.capacity);
    comm.AllGather(model.parameters() + f.shards[u].store, whole.data(), f.shards[u].count, DataType::kFloat32);
    std::copy_n(whole.begin(), f.units[u].elements(), flat.begin() + static_cast<long>(f.units[u].begin));
  }
  return flat;
}

// FSDP (parameters, gradients and AdamW's state sharded by unit; each unit all-gathered for forward and again for
// backward, its gradients reduce-scattered) against data parallel from the same seed, with the next unit's gather
// ahead (overlap) and all blocking: the same losses and parameters within fp32 summation order, as for ZeRO-1.
void ExpectFsdpMatchesDataParallel(bool overlap) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  auto dp = MakeCpuTransformer(SmallModel(), 7);
  const FsdpLayout layout = MakeFsdpLayout(dp->layout(), comm->size(), comm->rank());
  auto fsdp = MakeCpuTransformer(SmallModel(), 7, {.shard = {}, .fsdp = layout, .stage = {}});
  TrainLoopOptions o = SmallLoop();
  const std::vector<StepRecord> dp_steps = RunTrainingSteps(*comm, *dp, o);
  o.parallel = ParallelMode::kFsdp;
  o.overlap = overlap;
  uint64_t working = 0;
  o.working_bytes = &working;
  const std::vector<StepRecord> fsdp_steps = RunTrainingSteps(*comm, *fsdp, o);
  ASSERT_EQ(fsdp_steps.size(), dp_steps.size());
  const double psi = static_cast<double>(dp->parameter_elements());
  for (size_t i = 0; i < dp_steps.size(); ++i) {
    EXPECT_NEAR(fsdp_steps[i].loss, dp_steps[i].loss, 1e-5 * std::fabs(dp_steps[i].loss)) << "step " << i;
    const StepRecord& r = fsdp_steps[i];
    EXPECT_GT(r.comm_total_s, 0);
    EXPECT_GE(r.comm_exposed_s + 1e-12, r.comm_gather_exposed_s);
    // Every unit reduce-scattered once; the blocks gathered twice, the embeddings and the final LayerNorm once
    // (held from forward through backward), each padded to a multiple of the ranks.
    EXPECT_GE(r.reduce_scatter_bytes, 4 * psi);
    EXPECT_LT(r.reduce_scatter_bytes, 4 * (psi + static_cast<double>(layout.units.size() * comm->size())));
    EXPECT_GT(r.all_gather_bytes, r.reduce_scatter_bytes);
    EXPECT_LT(r.all_gather_bytes, 2 * r.reduce_scatter_bytes);
    EXPECT_EQ(r.allreduce_bytes, 0u);
  }
  const std::vector<float> params = GatherFsdpParameters(*comm, *fsdp);
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) worst = std::max(worst, std::fabs(double{params[i]} - dp->parameters()[i]));
  EXPECT_LT(worst, 1e-3 * o.adamw.learning_rate * static_cast<double>(dp_steps.size()))
      << "largest parameter difference from data parallel";
  // Parameters, gradients and both moments: this rank's shards only (16 Psi / N in fp32, to the padding).
  const ModelStateBytes state = fsdp->state_bytes();
  EXPECT_EQ(state.weights, 4.0 * static_cast<double>(layout.store_elements));
  EXPECT_LE(state.weights + state.gradients + state.optimizer,
            16.0 * (psi / comm->size() + static_cast<double>(layout.units.size())));
  EXPECT_GT(working, 0u);
}

// A CPU model for `mode` on this rank (zero1's shard, fsdp's layout), from seed 7.
std::unique_ptr<Transformer> ModelFor(ParallelMode mode, Communicator& comm) {
  const ModelConfig config = SmallModel();
  if (mode == ParallelMode::kZero1) {
    const size_t n = MakeCpuTransformer(config, 7)->parameter_elements();
    return MakeCpuTransformer(config, 7, {.shard = ShardOf(n, comm.size(), comm.rank()), .fsdp = {}, .stage = {}});
  }
  if (mode == ParallelMode::kFsdp) {
    return MakeCpuTransformer(
        config, 7, {.shard = {}, .fsdp = MakeFsdpLayout(MakeLayout(config), comm.size(), comm.rank()), .stage = {}});
  }
  return MakeCpuTransformer(config, 7);
}

// The whole flat parameters of a model of any mode.
std::vector<float> WholeParameters(Communicator& comm, Transformer& model) {
  if (model.placement().fsdp.enabled()) return GatherFsdpParameters(comm, model);
  return std::vector<float>(model.parameters(), model.parameters() + model.parameter_elements());
}

// Gradient accumulation over `accum` micro-batches of one sequence against one batch of `accum` sequences (the same
// tokens: synthetic micro-batches are slices of the step's batch): the same losses and parameters, within fp32
// summation order (the accumulated gradient adds the micro-batches' sums), in `mode`.
void ExpectAccumulationMatchesOneBatch(ParallelMode mode, int accum, bool overlap = true) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  auto one = ModelFor(mode, *comm);
  auto accumulated = ModelFor(mode, *comm);
  TrainLoopOptions o = SmallLoop();
  o.parallel = mode;
  o.overlap = overlap;
  o.micro_batch = accum;
  const std::vector<StepRecord> big = RunTrainingSteps(*comm, *one, o);
  o.micro_batch = 1;
  o.grad_accum = accum;
  const std::vector<StepRecord> micro = RunTrainingSteps(*comm, *accumulated, o);
  ASSERT_EQ(micro.size(), big.size());
  for (size_t i = 0; i < big.size(); ++i) {
    EXPECT_NEAR(micro[i].loss, big[i].loss, 1e-5 * std::fabs(big[i].loss)) << "step " << i;
    EXPECT_EQ(micro[i].tokens, big[i].tokens);
    EXPECT_EQ(micro[i].allreduce_bytes, big[i].allreduce_bytes);  // one gradient sync per step
    EXPECT_GT(micro[i].forward_s, 0);
    EXPECT_GE(micro[i].step_s + 1e-9, micro[i].forward_s + micro[i].backward_s + micro[i].optimizer_s);
  }
  if (mode == ParallelMode::kDp) {
    // The last step's averaged gradients themselves, whose scale AdamW would hide: the same within the drift of the
    // parameters (a missing 1/M would be off by a factor of M).
    double difference = 0, size = 0;
    for (size_t i = 0; i < one->parameter_elements(); ++i) {
      difference += std::fabs(double{accumulated->gradients()[i]} - one->gradients()[i]);
      size += std::fabs(one->gradients()[i]);
    }
    EXPECT_LT(difference, 1e-3 * size) << "gradients differ from one batch's";
  }
  const std::vector<float> want = WholeParameters(*comm, *one), have = WholeParameters(*comm, *accumulated);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double{have[i]} - want[i]));
  // As for ZeRO-1 against dp: AdamW turns summation-order differences of near-zero gradients into a share of lr.
  EXPECT_LT(worst, 1e-3 * o.adamw.learning_rate * static_cast<double>(big.size()))
      << "largest parameter difference from one batch";
}

TEST(TrainLoop, GradAccumGivesOneBatchsLossesDataParallel) {
  ExpectAccumulationMatchesOneBatch(ParallelMode::kDp, 2);
  ExpectAccumulationMatchesOneBatch(ParallelMode::kDp, 3, false);
}
TEST(TrainLoop, GradAccumGivesOneBatchsLossesZeroOne) { ExpectAccumulationMatchesOneBatch(ParallelMode::kZero1, 3); }
TEST(TrainLoop, GradAccumGivesOneBatchsLossesFsdp) {
  ExpectAccumulationMatchesOneBatch(ParallelMode::kFsdp, 2);
  ExpectAccumulationMatchesOneBatch(ParallelMode::kFsdp, 3, false);
}

TEST(TrainLoop, FsdpGivesDataParallelsLossesAndParameters) { ExpectFsdpMatchesDataParallel(true); }
TEST(TrainLoop, FsdpWithoutOverlapGivesTheSame) { ExpectFsdpMatchesDataParallel(false); }

TEST(TrainLoop, FsdpUnitsAreTheEmbeddingsEachBlockAndTheFinalNorm) {
  const ModelConfig config = SmallModel();
  const std::vector<TensorSlot> layout = MakeLayout(config);
  const std::vector<ParameterUnit> units = ParameterUnits(layout);
  ASSERT_EQ(units.size(), static_cast<size_t>(config.layers) + 2);
  EXPECT_EQ(units[kEmbeddingUnit].begin, 0u);
  EXPECT_EQ(units[kEmbeddingUnit].end, layout[BlockSlot(0, kLn1Weight)].offset);
  EXPECT_EQ(units[BlockUnit(1)].begin, layout[BlockSlot(1, kLn1Weight)].offset);
  EXPECT_EQ(units[FinalNormUnit(config.layers)].begin, layout[LnfWeightSlot(config.layers)].offset);
  EXPECT_EQ(units.back().end, layout.back().offset + layout.back().count);
  for (size_t u = 1; u < units.size(); ++u) EXPECT_EQ(units[u].begin, units[u - 1].end);
  const FsdpLayout f = MakeFsdpLayout(layout, 3, 2);
  size_t store = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    EXPECT_EQ(f.shards[u].store, store);
    EXPECT_EQ(f.shards[u].count * 3, f.shards[u].shard.capacity);
    store += f.shards[u].count;
  }
  EXPECT_EQ(f.store_elements, store);
  EXPECT_THROW(MakeFsdpLayout(layout, 0, 0), InputError);
}

TEST(TrainLoop, ShardsAreEqualAndCoverTheElementsOnce) {
  for (size_t elements : {size_t{1}, size_t{7}, size_t{100}, size_t{1001}}) {
    for (int ranks : {1, 2, 3, 4, 8}) {
      size_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const OptimizerShard s = ShardOf(elements, ranks, r);
        EXPECT_EQ(s.capacity % static_cast<size_t>(ranks), 0u);
        EXPECT_GE(s.capacity, elements);
        EXPECT_LT(s.capacity - elements, static_cast<size_t>(ranks));
        EXPECT_EQ(s.begin, next) << elements << " over " << ranks << ", rank " << r;
        next = s.end;
      }
      EXPECT_EQ(next, elements);
    }
  }
}

TEST(TrainLoop, EveryPrefixOfTheSweepTrains) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  for (int k = 1; k <= comm->size(); ++k) {
    std::unique_ptr<Communicator> sub = comm->Prefix(k);
    if (comm->rank() >= k) {
      EXPECT_EQ(sub, nullptr);
      continue;
    }
    auto model = MakeCpuTransformer(SmallModel(), 11);
    std::vector<StepRecord> records = RunTrainingSteps(*sub, *model, SmallLoop());
    EXPECT_EQ(records.size(), 4u);
    EXPECT_TRUE(SameAsRankZero(*sub, *model));
  }
}

TEST(TrainLoop, StopRequestEndsBetweenSteps) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  auto model = MakeCpuTransformer(SmallModel(), 7);
  TrainLoopOptions o = SmallLoop();
  // A host that asks for a stop before the third step (the same on every rank).
  struct StopAfterTwo : TrainLoopHost {
    int asked = 0;
    bool StopRequested() override { return ++asked > 2; }
  } host;
  o.host = &host;
  EXPECT_EQ(RunTrainingSteps(*comm, *model, o).size(), 2u);
}

TEST(SyntheticBatch, DeterministicPerRankAndStepWithShiftedTargets) {
  std::vector<int32_t> in_a, tg_a, in_b, tg_b, in_c, tg_c;
  SyntheticBatch(5, 1, 3, 2, 8, 50, in_a, tg_a);
  SyntheticBatch(5, 1, 3, 2, 8, 50, in_b, tg_b);
  SyntheticBatch(5, 2, 3, 2, 8, 50, in_c, tg_c);
  EXPECT_EQ(in_a, in_b);
  EXPECT_EQ(tg_a, tg_b);
  EXPECT_NE(in_a, in_c);
  for (int b = 0; b < 2; ++b) {
    for (int t = 0; t + 1 < 8; ++t) EXPECT_EQ(tg_a[b * 8 + t], in_a[b * 8 + t + 1]);
  }
  for (int32_t token : in_a) EXPECT_LT(token, 50);
}

TEST(TrainSummary, PercentilesAreNearestRank) {
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 95), 95);
  EXPECT_EQ(Percentile(v, 99), 99);
  EXPECT_EQ(Percentile({3, 1, 2}, 50), 2);
  EXPECT_TRUE(std::isnan(Percentile({}, 50)));
}

StepRecord Record(int step, bool warmup, double step_s, double forward, double backward, double optimizer,
                  double exposed, double total, double data) {
  StepRecord r;
  r.step = step;
  r.warmup = warmup;
  r.step_s = step_s;
  r.forward_s = forward;
  r.backward_s = backward;
  r.optimizer_s = optimizer;
  r.comm_exposed_s = exposed;
  r.comm_total_s = total;
  r.data_wait_s = data;
  r.tokens = 1000;
  r.loss = 2.0;
  r.allreduce_bytes = 8000000;  // dp's gradients, all-reduced
  return r;
}

TEST(TrainSummary, StepTimeP95IsTheNearestRankOfTheSlowestRanksSteps) {
  std::vector<RankSteps> ranks(2);
  for (int r = 0; r < 2; ++r) {
    ranks[r].rank = r;
    ranks[r].steps.push_back(Record(0, true, 50.0, 1, 1, 1, 1, 1, 1));
    for (int s = 1; s <= 3; ++s) ranks[r].steps.push_back(Record(s, false, r ? s * s : 0.5, 0, 0, 0, 0, 0, 0));
  }
  // The slowest rank's steps: 1, 4, 9 s. p95 by nearest rank is the third; the mean is 14/3.
  const ScalingPoint p = SummarizePoint(2, 4, ranks, 1e6, 0, 4e9, 8e6);
  EXPECT_DOUBLE_EQ(p.step_s_p95, 9.0);
  EXPECT_DOUBLE_EQ(p.step_s, 14.0 / 3);
}

TEST(TrainSummary, ThroughputMfuOverlapAndBudgetByHand) {
  // Two ranks, a warm-up step (ignored) and two measured steps; rank 1 takes 3 s where rank 0 takes 1 s.
  std::vector<RankSteps> ranks(2);
  for (int r = 0; r < 2; ++r) {
    ranks[r].rank = r;
    ranks[r].host = r ? "b" : "a";
    ranks[r].device = "cpu";
    ranks[r].steps.push_back(Record(0, true, 9.0, 1, 1, 1, 1, 1, 1));
    ranks[r].steps.push_back(Record(1, false, r ? 3.0 : 1.0, 0.3, 0.4, 0.1, 0.1, 0.4, 0.05));
    ranks[r].steps.push_back(Record(2, false, r ? 3.0 : 1.0, 0.3, 0.4, 0.1, 0.1, 0.4, 0.05));
  }
  ScalingPoint p = SummarizePoint(2, 4, ranks, 1e6, 1e12, 4e9, 8e6);
  EXPECT_EQ(p.measured_steps, 2);
  EXPECT_EQ(p.tokens_per_step, 2000);
  EXPECT_DOUBLE_EQ(p.step_s, 3.0);  // the slowest rank sets the pace
  EXPECT_DOUBLE_EQ(p.step_s_p95, 3.0);  // the warm-up's 9 s is not a measured step
  EXPECT_DOUBLE_EQ(p.tokens_per_s, 2000.0 / 3);
  EXPECT_DOUBLE_EQ(p.tokens_per_s_per_rank, 1000.0 / 3);
  EXPECT_DOUBLE_EQ(p.mfu_peak, 1000.0 / 3 * 1e6 / 1e12);
  EXPECT_DOUBLE_EQ(p.mfu_measured, 1000.0 / 3 * 1e6 / 4e9);
  EXPECT_DOUBLE_EQ(p.comm_total_s, 0.4);
  EXPECT_DOUBLE_EQ(p.overlap, 0.75);  // 1 - 0.1 / 0.4
  EXPECT_DOUBLE_EQ(p.effective_busbw_GBps, 8e6 / 0.4 * 2 * 1 / 2 / 1e9);
  EXPECT_DOUBLE_EQ(p.traffic.gradient_sync, 8e6);  // 2(k-1)/k of the buffer at k = 2
  EXPECT_DOUBLE_EQ(p.traffic.parameter_gather, 0);
  // The exposed communication by kind: all gradient sync here.
  EXPECT_NEAR(p.budgets[0].comm_gradient_sync.p50, 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(p.budgets[0].comm_param_gather.p50, 0);
  EXPECT_EQ(p.worst_rank, 1);
  // Rank 0: compute 0.8 of 1.0 s, exposed 0.1, data 0.05, other 0.05.
  EXPECT_NEAR(p.budgets[0].compute.p50, 0.8, 1e-12);
  EXPECT_NEAR(p.budgets[0].comm_exposed.p50, 0.1, 1e-12);
  EXPECT_NEAR(p.budgets[0].data_wait.p50, 0.05, 1e-12);
  EXPECT_NEAR(p.budgets[0].other.p50, 0.05, 1e-12);
  // Rank 1: the same work in 3 s leaves 2 s unaccounted ("other").
  EXPECT_NEAR(p.budgets[1].compute.p99, 0.8 / 3, 1e-12);
  EXPECT_NEAR(p.budgets[1].other.p50, 1 - 0.95 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(p.budgets[1].median_step_s, 3.0);

  // data_wait share: (data_wait + h2d) over step time of every rank's measured steps, warm-up left out.
  ranks[1].steps[1].h2d_s = 0.1;
  EXPECT_DOUBLE_EQ(DataWaitOf(ranks[1].steps[1]), 0.15);
  EXPECT_DOUBLE_EQ(TotalsOf(ranks).data_wait_share(), (4 * 0.05 + 0.1) / (2 * 1.0 + 2 * 3.0));
  EXPECT_TRUE(std::isnan(TotalsOf({}).data_wait_share()));
  ranks[1].steps[1].h2d_s = 0;

  ScalingPoint without_peak = SummarizePoint(1, 4, {ranks[0]}, 1e6, 0, 4e9, 8e6);
  EXPECT_TRUE(std::isnan(without_peak.mfu_peak));
  EXPECT_TRUE(std::isnan(without_peak.effective_busbw_GBps));  // k = 1 has no bus

  Report report;
  AddPointToReport(report.root.Child("train"), p, ranks);
  const Group* group = report.root.FindChild("train")->FindChild("k2");
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->tables.at("steps").rows(), 6u);
  for (const char* column : {"rank", "step", "warmup", "data_wait_s", "h2d_s", "forward_s", "backward_s",
                             "comm_total_s", "comm_exposed_s", "optimizer_s", "checkpoint_stall_s", "step_s",
                             "tokens", "loss"}) {
    EXPECT_NE(group->tables.at("steps").Find(column), nullptr) << column;
  }
  EXPECT_EQ(group->tables.at("stall_budget").rows(), 2u);
  EXPECT_NE(group->tables.at("stall_budget").Find("comm_exposed_p95"), nullptr);
  EXPECT_EQ(std::get<int64_t>(group->attributes.at("worst_rank")), 1);
}

TEST(TrainSummary, WeakAndStrongEfficiency) {
  std::vector<ScalingPoint> points(3);
  points[0].k = 1;
  points[0].tokens_per_s = 100;
  points[0].step_s = 1.0;
  points[1].k = 2;
  points[1].tokens_per_s = 180;
  points[1].step_s = 0.6;
  points[2].k = 4;
  points[2].tokens_per_s = 320;
  points[2].step_s = 0.4;
  ComputeEfficiency(points, true);
  EXPECT_DOUBLE_EQ(points[0].efficiency, 1.0);
  EXPECT_DOUBLE_EQ(points[1].efficiency, 0.9);  // 180 / (2 * 100)
  EXPECT_DOUBLE_EQ(points[2].efficiency, 0.8);  // 320 / (4 * 100)
  ComputeEfficiency(points, false);
  EXPECT_DOUBLE_EQ(points[1].efficiency, 1.0 / (2 * 0.6));
  EXPECT_DOUBLE_EQ(points[2].efficiency, 1.0 / (4 * 0.4));
  std::vector<ScalingPoint> alone(1);
  alone[0].k = 4;
  ComputeEfficiency(alone, true);
  EXPECT_TRUE(std::isnan(alone[0].efficiency));
}

}  // namespace
}  // namespace tb
