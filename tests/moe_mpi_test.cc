// Expert parallel on the CPU backend, at every rank count it is registered with (2, 4): a mixture-of-experts model
// with its experts spread over EP ranks (the tokens dispatched to them and combined back with all-to-alls), data
// parallel over all the ranks, gives per step the mean loss and afterwards the parameters of one rank running every
// rank's batch as a micro-batch of one step (--grad-accum k): top-1 and top-2, with and without dropped tokens. And
// the dispatch plan both layers use (moe_dispatch.h), compact as the CPU layer's expert rows and padded as the CUDA
// layer's, against its layout worked out here from the counts each rank sends.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "moe_dispatch.h"
#include "moe_stats.h"
#include "mpi_communicator.h"
#include "token_batch.h"
#include "train_loop.h"
#include "transformer.h"

namespace tb {
namespace {

constexpr int kSeq = 16, kMicroBatch = 2, kSteps = 3;
constexpr float kLearningRate = 1e-2f;

ModelConfig MoeModel(int top_k, double capacity_factor) {
  MoeConfig moe;
  moe.experts = 4;
  moe.top_k = top_k;
  moe.expert_ffn = 48;
  moe.every = 1;
  moe.capacity_factor = capacity_factor;
  return WithMoe(CustomModel(2, 32, 4, 97, kSeq), moe);
}

TrainLoopOptions Loop(int grad_accum) {
  TrainLoopOptions o;
  o.micro_batch = kMicroBatch;
  o.grad_accum = grad_accum;
  o.seq = kSeq;
  o.steps = kSteps;
  o.warmup_steps = 0;
  o.bucket_mb = 0.01;  // several buckets, cut by the expert tensors
  o.adamw.learning_rate = kLearningRate;
  return o;
}

// Rank `source`'s batch of each step: what the expert parallel run's rank `source` trains on, and the reference's
// micro-batch `source`.
class RankBatches : public TrainLoopHost {
 public:
  RankBatches(int vocab, int first_source, int sources) : vocab_(vocab), first_(first_source), sources_(sources) {}
  std::optional<StepBatch> NextBatch(int step) override {
    const int source = first_ + calls_++ % sources_;
    SyntheticBatch(99, source, step, kMicroBatch, kSeq, vocab_, inputs_, targets_);
    batch_ = TokenArrays(inputs_.data(), targets_.data(), kMicroBatch, kSeq);
    StepBatch b;
    b.tokens = &batch_;
    return b;
  }

 private:
  int vocab_, first_, sources_, calls_ = 0;
  std::vector<int32_t> inputs_, targets_;
  TokenBatch batch_;
};

struct Run {
  std::vector<double> losses;  // per step: the reference's; the expert parallel run's mean over the ranks
  std::vector<float> parameters;
  std::vector<float> gradients;  // the last step's, as AdamW used them (the mean over every rank's tokens)
  std::vector<TensorSlot> layout;
  int64_t dropped = 0;  // over the steps (and the ranks)
  uint64_t alltoall_bytes = 0;
};

// One rank, every rank's batch as one micro-batch of each step.
Run Reference(const ModelConfig& config, int ranks) {
  auto self = MakeMpiCommunicator(MPI_COMM_SELF);
  auto model = MakeCpuTransformer(config, 7);
  RankBatches batches(config.vocab, 0, ranks);
  TrainLoopOptions o = Loop(ranks);
  o.host = &batches;
  Run run;
  for (const StepRecord& r : RunTrainingSteps(*self, *model, o)) {
    run.losses.push_back(r.loss);
    run.dropped += r.moe_dropped;
  }
  run.parameters.assign(model->parameters(), model->parameters() + model->parameter_elements());
  run.gradients.assign(model->gradients(), model->gradients() + model->parameter_elements());
  run.layout = model->layout();
  return run;
}

// EP consecutive ranks share the experts of each block; the ranks at the same place in every group hold the same
// experts (their gradients are summed over those).
Run ExpertParallel(Communicator& world, const ModelConfig& config, int expert_parallel) {
  const int rank = world.rank();
  std::unique_ptr<Communicator> group = world.Split(rank / expert_parallel, rank);
  std::unique_ptr<Communicator> same_experts = world.Split(rank % expert_parallel, rank);
  ModelPlacement placement;
  placement.experts = {expert_parallel, group->rank(), group.get(), {}};
  auto model = MakeCpuTransformer(config, 7, placement);
  RankBatches batches(config.vocab, rank, 1);
  TrainLoopOptions o = Loop(1);
  o.host = &batches;
  o.expert_data = same_experts.get();
  Run run;
  for (const StepRecord& r : RunTrainingSteps(world, *model, o)) {
    double sum = 0;
    MPI_Allreduce(&r.loss, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    run.losses.push_back(sum / world.size());
    int64_t dropped = 0;
    MPI_Allreduce(&r.moe_dropped, &dropped, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    run.dropped += dropped;
    run.alltoall_bytes += r.alltoall_dispatch_bytes + r.alltoall_combine_bytes;
  }
  run.parameters.assign(model->parameters(), model->parameters() + model->parameter_elements());
  run.gradients.assign(model->gradients(), model->gradients() + model->parameter_elements());
  run.layout = model->layout();
  return run;
}

void ExpectExpertParallelMatchesOneRank(int expert_parallel, int top_k, double capacity_factor, bool drops) {
  auto world = MakeMpiCommunicator(MPI_COMM_WORLD);
  if (world->size() % expert_parallel != 0) GTEST_SKIP() << world->size() << " ranks";
  const ModelConfig config = MoeModel(top_k, capacity_factor);
  const Run reference = Reference(config, world->size());
  const Run parallel = ExpertParallel(*world, config, expert_parallel);
  ASSERT_EQ(parallel.losses.size(), reference.losses.size());
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    EXPECT_NEAR(parallel.losses[i], reference.losses[i], 1e-5 * std::fabs(reference.losses[i])) << "step " << i;
  }
  // The case asked for: tokens dropped (the capacity binds) or none, on both sides alike.
  EXPECT_EQ(parallel.dropped, reference.dropped);
  EXPECT_EQ(drops, reference.dropped > 0) << reference.dropped << " choices dropped";
  EXPECT_GT(parallel.alltoall_bytes, 0u);
  // Every tensor this rank holds (its experts' share of the expert tensors) against the reference's: the last step's
  // gradient within 1e-3 of the tensor's largest (fp32 sums in another order, over steps whose weights already differ
  // by rounding; a wrong scale or a lost contribution is off by far more), and the parameters within 1e-2 of the
  // steps' largest update (AdamW's update of an element whose gradient is near 0 is about lr x its sign, so rounding
  // can tip it; AdamW is blind to a gradient's scale, which the gradient check covers).
  ASSERT_EQ(parallel.layout.size(), reference.layout.size());
  for (size_t s = 0; s < reference.layout.size(); ++s) {
    const TensorSlot& held = parallel.layout[s];
    const size_t at = reference.layout[s].offset + held.first;
    double largest = 0, worst_gradient = 0, worst_parameter = 0;
    for (size_t i = 0; i < held.count; ++i) {
      largest = std::max(largest, static_cast<double>(std::fabs(reference.gradients[at + i])));
      worst_gradient = std::max(worst_gradient, static_cast<double>(std::fabs(parallel.gradients[held.offset + i] -
                                                                              reference.gradients[at + i])));
      worst_parameter = std::max(worst_parameter, static_cast<double>(std::fabs(parallel.parameters[held.offset + i] -
                                                                                reference.parameters[at + i])));
    }
    EXPECT_LE(worst_gradient, 1e-3 * largest) << held.name << ": gradients";
    EXPECT_LE(worst_parameter, 1e-2 * kLearningRate * kSteps) << held.name << ": parameters";
  }
}

TEST(ExpertParallel, TopTwoWithoutDrops) { ExpectExpertParallelMatchesOneRank(2, 2, 2.0, false); }
TEST(ExpertParallel, TopTwoWithDrops) { ExpectExpertParallelMatchesOneRank(2, 2, 0.5, true); }
TEST(ExpertParallel, TopOneWithDrops) { ExpectExpertParallelMatchesOneRank(2, 1, 0.5, true); }
TEST(ExpertParallel, TopOneWithoutDrops) { ExpectExpertParallelMatchesOneRank(2, 1, 4.0, false); }
// At 4 ranks: all four ranks one expert group (one expert each), or two groups of 2 whose experts' gradients are
// summed across them.
TEST(ExpertParallel, FourWayTopTwoWithDrops) { ExpectExpertParallelMatchesOneRank(4, 2, 0.5, true); }
TEST(ExpertParallel, FourWayTopOneWithoutDrops) { ExpectExpertParallelMatchesOneRank(4, 1, 4.0, false); }

// Rank p sends expert x (of E = 2 per rank) p + 1 + x rows, except none to expert 1 from rank 0: uneven blocks and
// an empty one. Each rank's plan: what it sends where, what it receives from whom, and each received row's expert
// row, compact (local expert after local expert, each one's rows from rank 0 first) and padded (expert e's at e x
// the most any expert receives).
TEST(DispatchPlan, CompactAndPaddedExpertRows) {
  auto world = MakeMpiCommunicator(MPI_COMM_WORLD);
  const int ranks = world->size(), me = world->rank(), local = 2, experts = local * ranks, channels = 3;
  auto rows = [](int p, int x) { return p == 0 && x == 1 ? 0 : p + 1 + x; };
  std::vector<int> block_begin{0};
  for (int x = 0; x < experts; ++x) block_begin.push_back(block_begin.back() + rows(me, x));
  int most = 0;  // rows any expert receives at most
  for (int x = 0; x < experts; ++x) {
    int sum = 0;
    for (int p = 0; p < ranks; ++p) sum += rows(p, x);
    most = std::max(most, sum);
  }
  for (const int padded : {0, most}) {
    MoeExperts group;
    group.group = world.get();
    const MoeDispatchLayout d = PlanDispatch(block_begin, group, local, channels, padded);
    EXPECT_GT(group.figures.dispatch_s, 0.0);
    size_t sent = 0, received = 0;
    for (int q = 0; q < ranks; ++q) {
      const int to_q = rows(me, q * local) + rows(me, q * local + 1);
      const int from_q = rows(q, me * local) + rows(q, me * local + 1);
      EXPECT_EQ(d.send_counts[q], static_cast<size_t>(to_q * channels)) << "to rank " << q;
      EXPECT_EQ(d.send_offsets[q], sent) << "to rank " << q;
      EXPECT_EQ(d.recv_counts[q], static_cast<size_t>(from_q * channels)) << "from rank " << q;
      EXPECT_EQ(d.recv_offsets[q], received) << "from rank " << q;
      sent += d.send_counts[q];
      received += d.recv_counts[q];
    }
    // Received rows in order: rank q's for local expert 0, then for local expert 1, then rank q + 1's.
    std::vector<int> want;
    for (int q = 0; q < ranks; ++q) {
      for (int e = 0; e < local; ++e) {
        int first = padded > 0 ? e * padded : 0;
        for (int before = 0; padded == 0 && before < e; ++before) {
          for (int p = 0; p < ranks; ++p) first += rows(p, me * local + before);
        }
        for (int p = 0; p < q; ++p) first += rows(p, me * local + e);
        for (int i = 0; i < rows(q, me * local + e); ++i) want.push_back(first + i);
      }
    }
    EXPECT_EQ(d.expert_row, want) << (padded ? "padded" : "compact");
    EXPECT_EQ(d.expert_begin.back(), padded ? local * padded : static_cast<int>(want.size()));
  }
}

}  // namespace
}  // namespace tb
