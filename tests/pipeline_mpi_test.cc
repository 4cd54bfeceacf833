// Pipeline parallel on the CPU backend, at every rank count it is registered with (2, 3, 4): P stages x D data
// parallel replicas (x T tensor parallel where the ranks allow) in Megatron's 1F1B schedule give the losses and
// parameters of data parallel over the D replicas with the same tokens per optimizer step (--grad-accum M).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "error.h"
#include "mpi_communicator.h"
#include "tensor_parallel.h"
#include "train_loop.h"
#include "train_plan.h"
#include "transformer.h"

namespace tb {
namespace {

// 12 layers: every P of 2, 3 and 4 divides them.
ModelConfig PipelineModel() { return CustomModel(12, 32, 4, 97, 16); }

TrainLoopOptions PipelineLoop(ParallelMode mode, int micro_batches) {
  TrainLoopOptions o;
  o.micro_batch = 2;
  o.grad_accum = micro_batches;
  o.seq = 16;
  o.steps = 3;
  o.warmup_steps = 1;
  o.bucket_mb = 0.01;  // several buckets
  o.parallel = mode;
  o.adamw.learning_rate = 1e-2f;
  return o;
}

struct Run {
  std::vector<double> losses;  // per step
  std::vector<float> parameters;  // rank's model's own (its stage's under pipeline parallel)
  std::vector<TensorSlot> layout;
};

// The reference: data parallel over the first `replicas` ranks (the others wait), the whole model, M micro-batches.
Run DataParallel(Communicator& world, ParallelMode mode, int replicas, int micro_batches) {
  Run run;
  std::unique_ptr<Communicator> dp = world.Split(world.rank() < replicas ? 0 : -1, world.rank());
  if (dp) {
    const ModelConfig config = PipelineModel();
    const size_t elements = MakeCpuTransformer(config, 7)->parameter_elements();
    auto model = MakeCpuTransformer(
        config, 7,
        {.shard = mode == ParallelMode::kZero1 ? ShardOf(elements, dp->size(), dp->rank()) : OptimizerShard{},
         .fsdp = {},
         .stage = {}});
    for (const StepRecord& r : RunTrainingSteps(*dp, *model, PipelineLoop(mode, micro_batches))) {
      run.losses.push_back(r.loss);
    }
    run.parameters.assign(model->parameters(), model->parameters() + model->parameter_elements());
    run.layout = model->layout();
  }
  return run;
}

// P stages x T tensor parallel x the rest data parallel, as train lays them out (TrainPlan).
Run Pipelined(Communicator& world, ParallelMode mode, int stages, int tensor_parallel, int micro_batches,
              std::vector<StepRecord>* records = nullptr) {
  const ModelConfig config = PipelineModel();
  const TrainPlan plan =
      PlanTrainPoint(config, world.size(), tensor_parallel, stages, 2, micro_batches, 16, /*bf16=*/false);
  const int rank = world.rank();
  std::unique_ptr<Communicator> dp = world.Split(plan.DataGroup(rank), rank);
  std::unique_ptr<Communicator> pipeline = world.Split(plan.PipelineGroup(rank), rank);
  std::unique_ptr<Communicator> tp =
      tensor_parallel > 1 ? world.Split(plan.TensorGroup(rank), rank) : nullptr;
  const PipelineStage stage = plan.stages.at(static_cast<size_t>(plan.Place(rank).stage)).stage;
  const std::vector<TensorSlot> layout =
      StageLayout(tp ? TensorParallelLayout(config, tensor_parallel) : MakeLayout(config), stage);
  const OptimizerShard shard = mode == ParallelMode::kZero1
                                   ? ShardOf(layout.back().offset + layout.back().count, dp->size(), dp->rank())
                                   : OptimizerShard{};
  auto model = tp ? MakeCpuTensorParallelTransformer(config, 7, *tp, {.shard = shard, .fsdp = {}, .stage = stage})
                  : MakeCpuTransformer(config, 7, {.shard = shard, .fsdp = {}, .stage = stage});
  TrainLoopOptions o = PipelineLoop(mode, micro_batches);
  o.pipeline = pipeline.get();
  Run run;
  const std::vector<StepRecord> mine = RunTrainingSteps(*dp, *model, o);
  for (const StepRecord& r : mine) run.losses.push_back(r.loss);
  if (records) *records = mine;
  run.parameters.assign(model->parameters(), model->parameters() + model->parameter_elements());
  run.layout = model->layout();
  return run;
}

// Rank `root`'s vector on every rank.
template <typename T>
std::vector<T> FromRank(const std::vector<T>& mine, int root, MPI_Datatype type) {
  int rank = 0, size = static_cast<int>(mine.size());
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Bcast(&size, 1, MPI_INT, root, MPI_COMM_WORLD);
  std::vector<T> all = rank == root ? mine : std::vector<T>(static_cast<size_t>(size));
  MPI_Bcast(all.data(), size, type, root, MPI_COMM_WORLD);
  return all;
}

// Pipeline parallel against data parallel over the same replicas and micro-batches: losses per step, and every
// tensor a stage holds against the reference's (the reference replica 0's whole model; tensor parallel compares the
// losses only, its slices are checked against the whole model by the tensor parallel tests).
void ExpectPipelineMatchesDataParallel(ParallelMode mode, int stages, int tensor_parallel, int micro_batches) {
  auto world = MakeMpiCommunicator(MPI_COMM_WORLD);
  if (world->size() % (stages * tensor_parallel) != 0) GTEST_SKIP() << world->size() << " ranks";
  const int replicas = world->size() / (stages * tensor_parallel);
  const TrainPlan plan = PlanTrainPoint(PipelineModel(), world->size(), tensor_parallel, stages, 2, micro_batches, 16,
                                        false);
  const Run reference = DataParallel(*world, mode, replicas, micro_batches);
  std::vector<StepRecord> records;
  const Run pipelined = Pipelined(*world, mode, stages, tensor_parallel, micro_batches, &records);
  // The reference replica this rank's pipeline shares its tokens with.
  const int replica = plan.Place(world->rank()).data;
  std::vector<double> want;
  for (int d = 0; d < replicas; ++d) {
    const std::vector<double> losses = FromRank(reference.losses, d, MPI_DOUBLE);
    if (d == replica) want = losses;
  }
  ASSERT_EQ(pipelined.losses.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(pipelined.losses[i], want[i], 1e-5 * std::fabs(want[i])) << "step " << i;
  }
  // Every rank's share of the tokens adds up to what the replicas trained.
  int64_t mine = records.empty() ? 0 : records.front().tokens, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(all, int64_t{2} * micro_batches * 16 * replicas);
  for (const StepRecord& r : records) {
    EXPECT_GE(r.comm_pipeline_s, 0);
    const bool first = plan.Place(world->rank()).stage == 0, last = plan.Place(world->rank()).stage == stages - 1;
    const uint64_t edge = 2ull * 16 * 32 * sizeof(float) * static_cast<uint64_t>(micro_batches);
    EXPECT_EQ(r.pipeline_send_bytes, edge * ((first ? 0 : 1) + (last ? 0 : 1)));
    EXPECT_EQ(r.embedding_allreduce_bytes > 0, first || last);
  }
  if (tensor_parallel > 1) return;
  const std::vector<float> whole = FromRank(reference.parameters, 0, MPI_FLOAT);
  const std::vector<TensorSlot> full = MakeLayout(PipelineModel());
  double worst = 0;
  for (size_t s = 0; s < full.size(); ++s) {
    const TensorSlot& held = pipelined.layout[s];
    for (size_t i = 0; i < held.count; ++i) {
      worst = std::max(worst, std::fabs(double{pipelined.parameters[held.offset + i]} - whole[full[s].offset + i]));
    }
  }
  // As gradient accumulation against one batch: AdamW turns summation-order differences of near-zero gradients into
  // a share of the learning rate.
  EXPECT_LT(worst, 1e-3 * 1e-2 * static_cast<double>(want.size())) << "largest parameter difference from dp";
}

TEST(Pipeline, TwoStagesGiveDataParallelsLosses) { ExpectPipelineMatchesDataParallel(ParallelMode::kDp, 2, 1, 4); }
TEST(Pipeline, ThreeStages) { ExpectPipelineMatchesDataParallel(ParallelMode::kDp, 3, 1, 3); }
TEST(Pipeline, FourStagesWithMoreMicroBatchesThanStages) {
  ExpectPipelineMatchesDataParallel(ParallelMode::kDp, 4, 1, 6);
}
TEST(Pipeline, ZeroOneAcrossPipelines) { ExpectPipelineMatchesDataParallel(ParallelMode::kZero1, 2, 1, 2); }
TEST(Pipeline, TensorParallelInsideStages) { ExpectPipelineMatchesDataParallel(ParallelMode::kDp, 2, 2, 4); }

TEST(TrainPlan, MegatronOrderTensorInnermostPipelineOutermost) {
  const TrainPlan plan = PlanTrainPoint(PipelineModel(), 8, 2, 2, 2, 4, 16, false);
  EXPECT_EQ(plan.data_parallel, 2);
  // rank = tensor + T (data + D stage)
  const RankPlace p = plan.Place(7);
  EXPECT_EQ(p.tensor, 1);
  EXPECT_EQ(p.data, 1);
  EXPECT_EQ(p.stage, 1);
  EXPECT_EQ(plan.Place(4).stage, 1);
  EXPECT_EQ(plan.Place(3).stage, 0);
  EXPECT_EQ(plan.TensorGroup(2), plan.TensorGroup(3));
  EXPECT_NE(plan.TensorGroup(1), plan.TensorGroup(2));
  EXPECT_EQ(plan.PipelineGroup(1), plan.PipelineGroup(5));  // stage 0 and 1 of one pipeline
  EXPECT_EQ(plan.DataGroup(0), plan.DataGroup(2));          // replicas of stage 0, tensor rank 0
  EXPECT_DOUBLE_EQ(plan.bubble_theory(), 1.0 / 5.0);
  EXPECT_EQ(plan.stages[0].stage.slots, 2);
  EXPECT_EQ(plan.stages[1].stage.slots, 1);
  EXPECT_EQ(plan.stages[0].pipeline_send_bytes, 4.0 * 2 * 16 * 32 * 4);
}

TEST(TrainPlan, RefusesLayoutsTheModelOrRanksCannotTake) {
  EXPECT_THROW(PlanTrainPoint(PipelineModel(), 4, 1, 5, 2, 8, 16, false), InputError);   // 5 does not divide 12 layers
  EXPECT_THROW(PlanTrainPoint(PipelineModel(), 6, 1, 4, 2, 8, 16, false), InputError);   // nor 6 ranks
  EXPECT_THROW(PlanTrainPoint(PipelineModel(), 4, 1, 4, 2, 3, 16, false), InputError);   // M < P
}

}  // namespace
}  // namespace tb
