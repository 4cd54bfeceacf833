// Megatron tensor parallelism's CPU reference (models/tensor_parallel.h) under mpiexec: every rank of the world is
// one tensor-parallel group (T = 2 or 4), checked against the full CPU model from the same seed on the same batch —
// initial bits, loss, gradients slice by slice, three AdamW steps —, the replicated tensors bit-identical across the
// group, the all-reduces of one step against the formula, and the bad inputs; and pipeline stages inside the group
// (Megatron's TP x PP) against the unsplit tensor-parallel model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "error.h"
#include "model_config.h"
#include "mpi_communicator.h"
#include "tensor_parallel.h"
#include "train_loop.h"
#include "transformer.h"

namespace tb {
namespace {

// 4 heads (T = 2 and 4 divide them); vocabulary 97 padded to 128, so that at T = 4 the last rank holds one real token
// and 31 padding rows, at T = 2 33 and 31.
ModelConfig SmallModel() { return CustomModel(2, 32, 4, 97, 16); }
// The preset 'tiny' (d_model 128, 4 heads, vocabulary 4096, no padding) with 2 layers.
ModelConfig TinyModel() { return WithLayers(FindPreset("tiny"), 2); }

constexpr int kBatch = 2;
constexpr int kSeq = 16;

struct Batch {
  std::vector<int32_t> inputs, targets;
};

// Deterministic ids, the same on every rank; the last real token appears as an input and as a target, so the last
// rank's slice takes part in the lookup and the loss.
Batch MakeBatch(const ModelConfig& config, int step) {
  Batch b;
  for (int i = 0; i < kBatch * kSeq; ++i) {
    b.inputs.push_back(static_cast<int32_t>((i * 37 + step * 11 + 5) % config.vocab));
    b.targets.push_back(static_cast<int32_t>((i * 53 + step * 17 + 3) % config.vocab));
  }
  b.inputs[0] = config.vocab - 1;
  b.targets[1] = config.vocab - 1;
  return b;
}

float Loss(Transformer& model, const Batch& b) {
  return model.ForwardBatch(b.inputs.data(), b.targets.data(), kBatch, kSeq);
}

// True on every rank when every rank's buffer has rank 0's bits.
bool SameOnEveryRank(Communicator& comm, const float* data, size_t count) {
  std::vector<float> root(data, data + count);
  MPI_Bcast(root.data(), static_cast<int>(count), MPI_FLOAT, 0, comm.host_comm());
  int same = std::memcmp(root.data(), data, count * sizeof(float)) == 0 ? 1 : 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, comm.host_comm());
  return all == 1;
}

// The slot of `layout` holding flat element `offset`.
size_t SlotOf(const std::vector<TensorSlot>& layout, size_t offset) {
  size_t s = 0;
  while (s + 1 < layout.size() && layout[s + 1].offset <= offset) ++s;
  return s;
}

// Parametrised by the model's name here ("small", "tiny"), so that failures print it.
ModelConfig ModelNamed(const std::string& name) { return name == "tiny" ? TinyModel() : SmallModel(); }
class TensorParallel : public ::testing::TestWithParam<std::string> {
 protected:
  ModelConfig Model() const { return ModelNamed(GetParam()); }
};

TEST_P(TensorParallel, SlicesStartWithTheFullModelsBits) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  auto full = MakeCpuTransformer(Model(), 7);
  auto tp = MakeCpuTensorParallelTransformer(Model(), 7, *comm);
  for (const TensorParallelStretch& s : TensorParallelStretches(Model(), comm->size(), comm->rank())) {
    ASSERT_EQ(std::memcmp(tp->parameters() + s.local, full->parameters() + s.full, s.count * sizeof(float)), 0)
        << "local elements at " << s.local;
  }
}

// (1) The loss over the group against the full model's: the logits and the cross-entropy's sums are added in another
// order (partial products all-reduced, the sum of exp split over the vocabulary slices), each a few fp32 ulps, so
// 1e-5 relative bounds it with room (observed: the same float at T = 2 and 4; the mean is taken in double). Every rank
// computes the same loss from the same all-reduced sums.
TEST_P(TensorParallel, ForwardLossMatchesTheFullModel) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  auto full = MakeCpuTransformer(Model(), 7);
  auto tp = MakeCpuTensorParallelTransformer(Model(), 7, *comm);
  const Batch b = MakeBatch(Model(), 0);
  const float expected = Loss(*full, b), loss = Loss(*tp, b);
  EXPECT_NEAR(loss, expected, 1e-5 * std::fabs(expected));
  EXPECT_TRUE(SameOnEveryRank(*comm, &loss, 1));
  if (comm->rank() == 0) {
    std::printf("[ info ] T=%d loss %.7f, full model %.7f: %.2e relative\n", comm->size(), loss, expected,
                std::fabs(double{loss} - expected) / expected);
  }
}

// (2) Each local gradient slice against the matching slice of the full model's gradients. The tolerance is 1e-4 of
// the largest |gradient| of the tensor: the differences are fp32 summation order only (partial sums all-reduced, the
// softmax's sum split), which grow through the layers' backward but stay near 1e-6 of the tensor's scale (observed
// up to 7.8e-7 at T = 2 and 4; printed); elementwise relative bounds would fail on gradients that are near zero through
// cancellation. (4) The replicated tensors' gradients are bit-identical on every rank of the group.
TEST_P(TensorParallel, GradientsMatchTheFullModelsSlices) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  const ModelConfig config = Model();
  auto full = MakeCpuTransformer(config, 7);
  auto tp = MakeCpuTensorParallelTransformer(config, 7, *comm);
  const Batch b = MakeBatch(config, 0);
  Loss(*full, b);
  Loss(*tp, b);
  full->Backward(nullptr);
  std::vector<size_t> reported;
  tp->Backward([&](size_t slot) { reported.push_back(slot); });
  // Every slot that holds elements once (not the empty router slot of a dense block), in descending order (what a
  // bucketed data-parallel all-reduce across groups relies on).
  std::vector<size_t> held;
  for (size_t slot = tp->layout().size(); slot-- > 0;) {
    if (tp->layout()[slot].count > 0) held.push_back(slot);
  }
  EXPECT_EQ(reported, held);

  const std::vector<TensorSlot> layout = MakeLayout(config);
  std::vector<double> max_abs(layout.size(), 0.0);
  for (size_t s = 0; s < layout.size(); ++s) {
    for (size_t i = 0; i < layout[s].count; ++i) {
      max_abs[s] = std::max(max_abs[s], double{std::fabs(full->gradients()[layout[s].offset + i])});
    }
  }
  double worst = 0;  // the largest |difference| / max |gradient| of its tensor
  for (const TensorParallelStretch& s : TensorParallelStretches(config, comm->size(), comm->rank())) {
    const size_t slot = SlotOf(layout, s.full);
    for (size_t i = 0; i < s.count; ++i) {
      const double diff = std::fabs(double{tp->gradients()[s.local + i]} - full->gradients()[s.full + i]);
      ASSERT_LE(diff, 1e-4 * max_abs[slot] + 1e-12)
          << layout[slot].name << " element " << (s.full + i - layout[slot].offset);
      worst = std::max(worst, max_abs[slot] > 0 ? diff / max_abs[slot] : 0.0);
    }
  }
  double all_worst = 0;
  MPI_Allreduce(&worst, &all_worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (comm->rank() == 0)
    std::printf("[ info ] T=%d worst gradient difference %.2e of its tensor's max\n", comm->size(), all_worst);

  for (size_t s = 0; s < tp->layout().size(); ++s) {
    if (TensorParallelSplit(config, s) != TensorSplit::kReplicated) continue;
    EXPECT_TRUE(SameOnEveryRank(*comm, tp->gradients() + tp->layout()[s].offset, tp->layout()[s].count))
        << tp->layout()[s].name << "'s gradient differs across the tensor-parallel ranks";
  }
}

// (3) Three AdamW steps from the same seed on the same batches: the losses track the full model's within 1e-4
// relative (AdamW divides each gradient by its RMS, so an element whose gradient is near zero turns a summation-order
// difference into a share of the learning rate: the parameters drift apart (bounded below), the losses far less;
// observed: the same float at every step). The replicated parameters stay bit-identical across the group, and wte's
// padding rows exactly zero.
TEST_P(TensorParallel, AdamWStepsTrackTheFullModel) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  const ModelConfig config = Model();
  auto full = MakeCpuTransformer(config, 7);
  auto tp = MakeCpuTensorParallelTransformer(config, 7, *comm);
  AdamWConfig adamw;
  adamw.learning_rate = 1e-2f;
  double worst = 0;
  std::vector<float> losses;
  for (int step = 1; step <= 3; ++step) {
    const Batch b = MakeBatch(config, step);
    const float expected = Loss(*full, b), loss = Loss(*tp, b);
    EXPECT_NEAR(loss, expected, 1e-4 * std::fabs(expected)) << "step " << step;
    worst = std::max(worst, std::fabs(double{loss} - expected) / std::fabs(expected));
    losses.push_back(loss);
    for (Transformer* m : {full.get(), tp.get()}) {
      m->Backward(nullptr);
      m->AdamWStep(adamw, step);
    }
  }
  // Training happened: the loss moved.
  EXPECT_NE(losses.front(), losses.back());
  // The parameters drift apart by AdamW's amplification of summation-order differences where a gradient is small:
  // observed up to 7.2e-5 (0.24% of lr·steps) at T = 2 and 4, against 1e-2·lr·steps. The key biases get their own
  // bound: their gradient is zero in exact arithmetic (b_k shifts each score row by q·b_k, which softmax ignores), so
  // both models step them on fp32 noise of ~1e-12, which AdamW scales by lr/epsilon: observed up to 2.2e-4, against
  // 5e-2·lr·steps.
  const std::vector<TensorSlot>& full_layout = full->layout();
  double drift = 0, key_bias_drift = 0;
  for (const TensorParallelStretch& s : TensorParallelStretches(config, comm->size(), comm->rank())) {
    const size_t slot = SlotOf(full_layout, s.full);
    const bool qkv_bias = TensorParallelSplit(config, slot) == TensorSplit::kQkvHeads && full_layout[slot].layer >= 0 &&
                          slot == BlockSlot(full_layout[slot].layer, kQkvBias);
    for (size_t i = 0; i < s.count; ++i) {
      const size_t index = s.full + i - full_layout[slot].offset;
      const bool key_bias =
          qkv_bias && index >= static_cast<size_t>(config.d_model) && index < 2 * static_cast<size_t>(config.d_model);
      const double d = std::fabs(double{tp->parameters()[s.local + i]} - full->parameters()[s.full + i]);
      double& worst_drift = key_bias ? key_bias_drift : drift;
      worst_drift = std::max(worst_drift, d);
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &drift, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &key_bias_drift, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_LT(drift, 1e-2 * adamw.learning_rate * 3) << "largest parameter difference from the full model";
  EXPECT_LT(key_bias_drift, 5e-2 * adamw.learning_rate * 3) << "largest key bias difference from the full model";
  if (comm->rank() == 0) {
    std::printf(
        "[ info ] T=%d losses %.7f -> %.7f; worst loss difference %.2e relative, parameter drift %.2e (key "
        "biases %.2e)\n",
        comm->size(), losses.front(), losses.back(), worst, drift, key_bias_drift);
  }
  const std::vector<TensorSlot>& local = tp->layout();
  for (size_t s = 0; s < local.size(); ++s) {
    if (TensorParallelSplit(config, s) != TensorSplit::kReplicated) continue;
    EXPECT_TRUE(SameOnEveryRank(*comm, tp->parameters() + local[s].offset, local[s].count)) << local[s].name;
  }
  // wte's local rows at token ids >= vocab (padding) stay exactly zero.
  const int rows = config.vocab_padded / comm->size(), first = comm->rank() * rows;
  for (int row = std::max(0, config.vocab - first); row < rows; ++row) {
    for (int c = 0; c < config.d_model; ++c) {
      ASSERT_EQ(tp->parameters()[static_cast<size_t>(row) * config.d_model + c], 0.0f) << "padding row " << first + row;
    }
  }
}

// (6) The all-reduces of one step against TensorParallelAllReduceElements: forward 1 (embedding, N·C) + 2 per block
// (attn.proj's and mlp.proj's outputs, N·C each) + 2 for the cross-entropy (the row maxima, N; the sums of exp with
// the target logits, 2N); backward 1 (the LM head's input gradient, N·C) + 2 per block (qkv's and fc's input
// gradients). Megatron's 4·L·B·S·d counts the blocks only: the vocab-parallel embedding's forward all-reduce and the
// LM head's backward one add 2·N·d on top, the cross-entropy 3·N.
TEST_P(TensorParallel, OneStepAllReducesWhatTheFormulaSays) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  const ModelConfig config = Model();
  auto tp = MakeCpuTensorParallelTransformer(config, 7, *comm);
  TensorParallelStats* stats = TensorParallelStatsOf(*tp);
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->tensor_parallel(), comm->size());
  EXPECT_EQ(stats->tensor_parallel_rank(), comm->rank());
  const uint64_t n = kBatch * kSeq, c = config.d_model, layers = config.layers;
  Loss(*tp, MakeBatch(config, 0));
  const TensorParallelComm forward = stats->TakeComm();
  tp->Backward(nullptr);
  const TensorParallelComm backward = stats->TakeComm();
  EXPECT_EQ(forward.allreduces, static_cast<int64_t>(1 + 2 * layers + 2));
  EXPECT_EQ(forward.elements, (1 + 2 * layers) * n * c + 3 * n);
  EXPECT_EQ(backward.allreduces, static_cast<int64_t>(1 + 2 * layers));
  EXPECT_EQ(backward.elements, (1 + 2 * layers) * n * c);
  const TensorParallelComm step = stats->last_step_comm();
  EXPECT_EQ(step.elements, TensorParallelAllReduceElements(config, comm->size(), kBatch, kSeq));
  EXPECT_EQ(step.elements, MegatronActivationElements(config, kBatch, kSeq) + 2 * n * c + 3 * n);
  EXPECT_EQ(MegatronActivationElements(config, kBatch, kSeq), 4 * layers * n * c);
  EXPECT_EQ(step.bytes, 4 * step.elements);
  EXPECT_EQ(step.allreduces, forward.allreduces + backward.allreduces);
  EXPECT_GT(step.seconds, 0);
  // The next Forward starts the step's count afresh.
  Loss(*tp, MakeBatch(config, 1));
  EXPECT_EQ(stats->last_step_comm().elements, forward.elements);
  auto full = MakeCpuTransformer(config, 7);
  EXPECT_EQ(TensorParallelStatsOf(*full), nullptr);
}

// The train loop over a tensor-parallel model: each rank its own data-parallel group of one (so every rank of the
// tensor-parallel group draws the same synthetic batch), against the full model in the same loop. The losses track
// within 1e-4 as in AdamWStepsTrackTheFullModel; each step's activation all-reduces are taken through
// TensorParallelStats::TakeComm: the formula's elements in fp32 bytes, their time counted as exposed communication.

// The loop both training tests run: kBatch x kSeq, small buckets, a learning rate that moves the weights.
TrainLoopOptions SmallLoop(int steps, int warmup_steps) {
  TrainLoopOptions o;
  o.micro_batch = kBatch;
  o.seq = kSeq;
  o.steps = steps;
  o.warmup_steps = warmup_steps;
  o.bucket_mb = 0.01;
  o.adamw.learning_rate = 1e-2f;
  return o;
}

TEST_P(TensorParallel, TrainLoopTakesTheActivationAllReduces) {
  auto world = MakeMpiCommunicator(MPI_COMM_WORLD);
  std::unique_ptr<Communicator> alone = world->Split(world->rank(), 0);
  const ModelConfig config = Model();
  auto full = MakeCpuTransformer(config, 7);
  auto tp = MakeCpuTensorParallelTransformer(config, 7, *world);
  EXPECT_EQ(TensorParallelStatsOf(*tp)->tensor_parallel(), world->size());
  const TrainLoopOptions o = SmallLoop(2, 1);
  const std::vector<StepRecord> expected = RunTrainingSteps(*alone, *full, o);
  const std::vector<StepRecord> steps = RunTrainingSteps(*alone, *tp, o);
  ASSERT_EQ(steps.size(), expected.size());
  const uint64_t bytes = 4 * TensorParallelAllReduceElements(config, world->size(), kBatch, kSeq);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_NEAR(steps[i].loss, expected[i].loss, 1e-4 * std::fabs(expected[i].loss)) << "step " << i;
    EXPECT_EQ(steps[i].activation_allreduce_bytes, bytes) << "step " << i;
    EXPECT_GT(steps[i].comm_activation_s, 0) << "step " << i;
    EXPECT_GE(steps[i].comm_exposed_s + 1e-12, steps[i].comm_activation_s) << "step " << i;
    EXPECT_EQ(steps[i].tokens, kBatch * kSeq / world->size()) << "step " << i;
  }
  EXPECT_EQ(TensorParallelStatsOf(*full), nullptr);  // no activation all-reduces to take
}

// The local buffers: the layout's sizes, ZeRO's unsharded shard of them, the fp32 state.
TEST_P(TensorParallel, LocalBuffersAreTheSlices) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  const ModelConfig config = Model();
  auto tp = MakeCpuTensorParallelTransformer(config, 7, *comm);
  const std::vector<TensorSlot> local = TensorParallelLayout(config, comm->size());
  const size_t elements = local.back().offset + local.back().count;
  EXPECT_EQ(tp->parameter_elements(), elements);
  EXPECT_EQ(tp->layout().size(), MakeLayout(config).size());
  EXPECT_EQ(tp->placement().shard.begin, 0u);
  EXPECT_EQ(tp->placement().shard.end, elements);
  EXPECT_FALSE(tp->placement().fsdp.enabled());
  EXPECT_EQ(tp->state_bytes().weights, 4.0 * elements);
  EXPECT_EQ(tp->state_bytes().optimizer, 8.0 * elements);
}

// FSDP across tensor-parallel groups: groups of T = ranks / 2 (1 at 2 ranks, 2 at 4), the two ranks holding the same
// slices sharding every local unit between them. Over the train loop the losses are those of the same groups under
// dp (the gathers and reduce-scatters move the same fp32 values the all-reduce averages: within fp32 summation
// order), with and without overlap, and each rank holds its shards only.
TEST_P(TensorParallel, FsdpAcrossGroupsGivesDpsLosses) {
  auto world = MakeMpiCommunicator(MPI_COMM_WORLD);
  if (world->size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  const int t = world->size() / 2;
  std::unique_ptr<Communicator> tp = world->Split(world->rank() / t, world->rank());
  std::unique_ptr<Communicator> dp = world->Split(world->rank() % t, world->rank());
  const ModelConfig config = Model();
  const std::vector<TensorSlot> local = TensorParallelLayout(config, t);
  TrainLoopOptions o = SmallLoop(3, 0);
  auto dense = MakeCpuTensorParallelTransformer(config, 7, *tp);
  const std::vector<StepRecord> expected = RunTrainingSteps(*dp, *dense, o);
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlap" : "blocking");
    const FsdpLayout fsdp = MakeFsdpLayout(local, dp->size(), dp->rank());
    auto sharded = MakeCpuTensorParallelTransformer(config, 7, *tp, {.shard = {}, .fsdp = fsdp, .stage = {}});
    ASSERT_TRUE(sharded->placement().fsdp.enabled());
    EXPECT_EQ(sharded->state_bytes().weights, 4.0 * fsdp.store_elements);
    EXPECT_LT(fsdp.store_elements, local.back().offset + local.back().count);
    o.parallel = ParallelMode::kFsdp;
    o.overlap = overlap;
    const std::vector<StepRecord> steps = RunTrainingSteps(*dp, *sharded, o);
    o.parallel = ParallelMode::kDp;
    ASSERT_EQ(steps.size(), expected.size());
    for (size_t i = 0; i < steps.size(); ++i) {
      EXPECT_NEAR(steps[i].loss, expected[i].loss, 1e-5 * std::fabs(expected[i].loss)) << "step " << i;
      EXPECT_GT(steps[i].all_gather_bytes, 0u) << "step " << i;
      EXPECT_GT(steps[i].reduce_scatter_bytes, 0u) << "step " << i;
    }
  }
  // zero1 and fsdp do not combine.
  EXPECT_THROW(MakeCpuTensorParallelTransformer(config, 7, *tp,
                                                {.shard = ShardOf(local.back().offset + local.back().count, 2, 0),
                                                 .fsdp = MakeFsdpLayout(local, dp->size(), dp->rank()),
                                                 .stage = {}}),
               InputError);
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallel, ::testing::Values("small", "tiny"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// A group of one (each rank alone) is the full model: no all-reduce, the same loss and gradients within fp32
// summation order (the row-parallel layers add their bias after the product instead of inside the GEMM).
TEST(TensorParallelGroupOfOne, IsTheFullModel) {
  auto world = MakeMpiCommunicator(MPI_COMM_WORLD);
  std::unique_ptr<Communicator> alone = world->Split(world->rank(), 0);
  const ModelConfig config = SmallModel();
  auto full = MakeCpuTransformer(config, 7);
  auto tp = MakeCpuTensorParallelTransformer(config, 7, *alone);
  ASSERT_EQ(tp->parameter_elements(), full->parameter_elements());
  const Batch b = MakeBatch(config, 0);
  const float expected = Loss(*full, b);
  EXPECT_NEAR(Loss(*tp, b), expected, 1e-6 * std::fabs(expected));
  full->Backward(nullptr);
  tp->Backward(nullptr);
  double max_abs = 0, diff = 0;
  for (size_t i = 0; i < full->parameter_elements(); ++i) {
    max_abs = std::max(max_abs, double{std::fabs(full->gradients()[i])});
    diff = std::max(diff, std::fabs(double{tp->gradients()[i]} - full->gradients()[i]));
  }
  EXPECT_LE(diff, 1e-5 * max_abs);
  EXPECT_EQ(TensorParallelStatsOf(*tp)->last_step_comm().allreduces, 0);
  EXPECT_EQ(TensorParallelAllReduceElements(config, 1, kBatch, kSeq), 0u);
}

// Every rank's stretches together cover each element of a split tensor exactly once and each replicated tensor
// whole on every rank; the local layout holds 1/T of every split tensor.
TEST(TensorParallelLayout, StretchesCoverTheFullLayout) {
  const ModelConfig config = SmallModel();
  const std::vector<TensorSlot> full = MakeLayout(config);
  const size_t elements = full.back().offset + full.back().count;
  for (int t : {1, 2, 4}) {
    std::vector<int> covered(elements, 0);
    for (int r = 0; r < t; ++r) {
      size_t local_elements = 0;
      for (const TensorParallelStretch& s : TensorParallelStretches(config, t, r)) {
        EXPECT_EQ(s.local, local_elements) << "stretches in local order, T=" << t;
        local_elements += s.count;
        for (size_t i = 0; i < s.count; ++i) ++covered[s.full + i];
      }
      const std::vector<TensorSlot> local = TensorParallelLayout(config, t);
      EXPECT_EQ(local_elements, local.back().offset + local.back().count);
    }
    for (size_t s = 0; s < full.size(); ++s) {
      const int expected = TensorParallelSplit(config, s) == TensorSplit::kReplicated ? t : 1;
      for (size_t i = 0; i < full[s].count; ++i) {
        ASSERT_EQ(covered[full[s].offset + i], expected) << full[s].name << " element " << i << ", T=" << t;
      }
    }
  }
  EXPECT_EQ(TensorParallelSplit(config, BlockSlot(0, kAttnProjBias)), TensorSplit::kReplicated);
  EXPECT_EQ(TensorParallelSplit(config, BlockSlot(1, kQkvBias)), TensorSplit::kQkvHeads);
  EXPECT_EQ(TensorParallelSplit(config, BlockSlot(1, kMlpProjWeight)), TensorSplit::kInColumns);
  EXPECT_EQ(TensorParallelSplit(config, kWteSlot), TensorSplit::kVocabRows);
}

// (5) Bad inputs: T < 1, T not dividing the heads, T not dividing the padded vocabulary; one line each.
TEST(TensorParallelInputs, BadSplitsThrowInputError) {
  auto expect_input_error = [](const ModelConfig& config, int t, const std::string& part) {
    try {
      CheckTensorParallel(config, t);
      ADD_FAILURE() << "T=" << t << " accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(part), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  expect_input_error(SmallModel(), 0, "must be at least 1");
  expect_input_error(SmallModel(), 3, "does not divide --heads 4");
  expect_input_error(SmallModel(), 8, "does not divide --heads 4");
  // 6 heads and T = 3 divide, the padded vocabulary 128 does not.
  expect_input_error(CustomModel(1, 48, 6, 97, 16), 3, "does not divide the padded vocabulary 128");
  EXPECT_NO_THROW(CheckTensorParallel(SmallModel(), 4));
  EXPECT_THROW(TensorParallelLayout(SmallModel(), 3), InputError);
  EXPECT_THROW(TensorParallelStretches(SmallModel(), 2, 2), InputError);
  // The model itself refuses a group that does not divide its heads: 3 heads over 2 or 4 ranks.
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  EXPECT_THROW(MakeCpuTensorParallelTransformer(CustomModel(1, 48, 3, 97, 16), 7, *comm), InputError);
}

// Pipeline stages inside the tensor-parallel group (Megatron's TP x PP), at T = the world's ranks: a 4-layer model as
// P = 2 stages of 2 micro-batch slots, both stages held by every rank of the group (two model objects on one
// communicator: every rank steps them in the same order, as the group's all-reduces block).
ModelConfig FourLayerModel() { return CustomModel(4, 32, 4, 97, 16); }
constexpr int kStages = 2;
constexpr int kSlots = 2;

std::vector<std::unique_ptr<Transformer>> MakeStages(const ModelConfig& config, Communicator& tp) {
  std::vector<std::unique_ptr<Transformer>> stages;
  for (int s = 0; s < kStages; ++s) {
    const PipelineStage stage = MakePipelineStage(config, kStages, s, kSlots);
    stages.push_back(MakeCpuTensorParallelTransformer(config, 7, tp, {.shard = {}, .fsdp = {}, .stage = stage}));
  }
  return stages;
}

// Each stage holds the local slices of its tensors, packed in StageLayout order, with the unsplit model's bits; the
// slots it does not hold are empty. A slot outside the stage's two and fsdp within a split stage are refused.
TEST(TensorParallelPipelineStages, StagesHoldTheirSlicesWithTheUnsplitBits) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  const ModelConfig config = FourLayerModel();
  auto unsplit = MakeCpuTensorParallelTransformer(config, 7, *comm);
  const std::vector<TensorSlot>& local = unsplit->layout();
  const std::vector<std::unique_ptr<Transformer>> stages = MakeStages(config, *comm);
  size_t held_elements = 0;
  for (int s = 0; s < kStages; ++s) {
    const Transformer& m = *stages[s];
    const PipelineStage& stage = m.placement().stage;
    EXPECT_EQ(stage.first_layer, 2 * s);
    EXPECT_EQ(stage.end_layer, 2 * s + 2);
    EXPECT_EQ(stage.slots, kSlots);
    const std::vector<TensorSlot> expected = StageLayout(local, stage);
    ASSERT_EQ(m.layout().size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(m.layout()[i].offset, expected[i].offset) << expected[i].name;
      ASSERT_EQ(m.layout()[i].count, StageHoldsSlot(stage, local, i) ? local[i].count : 0) << expected[i].name;
      if (m.layout()[i].count == 0) continue;
      EXPECT_EQ(std::memcmp(stages[s]->parameters() + m.layout()[i].offset, unsplit->parameters() + local[i].offset,
                            local[i].count * sizeof(float)),
                0)
          << "stage " << s << " " << local[i].name;
    }
    EXPECT_EQ(m.parameter_elements(), expected.back().offset + expected.back().count);
    EXPECT_EQ(m.state_bytes().weights, 4.0 * m.parameter_elements());
    held_elements += m.parameter_elements();
  }
  // Together the stages hold every local element once, and wte's slice twice (the tied LM head's copy).
  EXPECT_EQ(held_elements, unsplit->parameter_elements() + local[kWteSlot].count);

  Transformer& first = *stages[0];
  EXPECT_THROW(first.SelectMicroBatch(kSlots), std::logic_error);
  EXPECT_THROW(first.SelectMicroBatch(-1), std::logic_error);
  EXPECT_EQ(first.stage_edges().count, 0u) << "edges before the slot's first SetBatch";
  try {
    MakeCpuTensorParallelTransformer(
        config, 7, *comm,
        {.shard = {}, .fsdp = MakeFsdpLayout(local, 2, 0), .stage = MakePipelineStage(config, kStages, 0, kSlots)});
    ADD_FAILURE() << "fsdp within a split stage accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("not built"), std::string::npos) << e.what();
  }
}

// Writes the gradients of `model` to NaN, so that a kOverwrite that leaves any element alone shows.
void PoisonGradients(Transformer& model) {
  std::fill_n(model.gradients(), model.parameter_elements(), std::numeric_limits<float>::quiet_NaN());
}

// The slots a Backward reported: each held one once, in descending order, none the stage does not hold.
void ExpectHeldSlotsReported(const Transformer& model, const std::vector<size_t>& reported) {
  std::vector<size_t> held;
  for (size_t s = model.layout().size(); s-- > 0;) {
    if (model.layout()[s].count > 0) held.push_back(s);
  }
  EXPECT_EQ(reported, held) << "stage " << model.placement().stage.stage;
}

GradientWrite WriteOf(int micro_batch) {
  return micro_batch == 0 ? GradientWrite::kOverwrite : GradientWrite::kAccumulate;
}

// The two stages stepped as a pipeline steps them, fill then drain (both slots of each stage in flight at once), the
// edges copied between them, micro-batch mb in slot mb; `losses` gets the last stage's.
void StepPipeline(Transformer& first, Transformer& last, const std::vector<Batch>& batches,
                  std::vector<float>& losses) {
  const size_t count = static_cast<size_t>(kBatch) * kSeq * first.config().d_model;
  for (size_t mb = 0; mb < batches.size(); ++mb) {
    for (Transformer* m : {&first, &last}) {
      m->SelectMicroBatch(static_cast<int>(mb));
      m->SetBatch(batches[mb].inputs.data(), batches[mb].targets.data(), kBatch, kSeq);
    }
    first.Forward();
    EXPECT_TRUE(std::isnan(first.Loss()));
    const Transformer::StageEdges out = first.stage_edges(), in = last.stage_edges();
    ASSERT_EQ(out.count, count);
    ASSERT_EQ(in.count, count);
    EXPECT_EQ(out.input, nullptr);
    EXPECT_EQ(out.input_grad, nullptr);
    EXPECT_EQ(in.output, nullptr);
    EXPECT_EQ(in.output_grad, nullptr);
    std::copy_n(out.output, count, in.input);
    last.Forward();
  }
  for (size_t mb = 0; mb < batches.size(); ++mb) {
    std::vector<size_t> reported_last, reported_first;
    last.SelectMicroBatch(static_cast<int>(mb));
    losses.push_back(last.Loss());
    last.Backward([&](size_t slot) { reported_last.push_back(slot); }, WriteOf(static_cast<int>(mb)));
    first.SelectMicroBatch(static_cast<int>(mb));
    std::copy_n(last.stage_edges().input_grad, count, first.stage_edges().output_grad);
    first.Backward([&](size_t slot) { reported_first.push_back(slot); }, WriteOf(static_cast<int>(mb)));
    ExpectHeldSlotsReported(last, reported_last);
    ExpectHeldSlotsReported(first, reported_first);
  }
}

// Every held gradient but wte's has the unsplit model's bits; returns the largest |first + last - unsplit| of wte's,
// and the largest |unsplit| of it in `max_abs`.
double CompareStageGradients(const std::vector<std::unique_ptr<Transformer>>& stages, Transformer& unsplit,
                             double& max_abs) {
  const std::vector<TensorSlot>& local = unsplit.layout();
  for (size_t slot = kWpeSlot; slot < local.size(); ++slot) {
    for (const std::unique_ptr<Transformer>& m : stages) {
      const TensorSlot& held = m->layout()[slot];
      if (held.count == 0) continue;
      EXPECT_EQ(std::memcmp(m->gradients() + held.offset, unsplit.gradients() + local[slot].offset,
                            held.count * sizeof(float)),
                0)
          << "stage " << m->placement().stage.stage << " " << local[slot].name;
    }
  }
  Transformer& first = *stages.front();
  Transformer& last = *stages.back();
  const float* wte = unsplit.gradients() + local[kWteSlot].offset;
  double worst = 0;
  max_abs = 0;
  for (size_t i = 0; i < local[kWteSlot].count; ++i) {
    const double sum = double{first.gradients()[first.layout()[kWteSlot].offset + i]} +
                       last.gradients()[last.layout()[kWteSlot].offset + i];
    worst = std::max(worst, std::fabs(sum - wte[i]));
    max_abs = std::max(max_abs, double{std::fabs(wte[i])});
  }
  return worst;
}

// (7) The chained stages, two micro-batches accumulating (kOverwrite, then kAccumulate, at gradient scale 1/2), do the
// unsplit model's computation: each micro-batch's loss has its bits (and is the whole CPU model's within 1e-5, as in
// ForwardLossMatchesTheFullModel), every held gradient its bits but wte's: the first stage's copy has the embedding's
// part, the last's the LM head's, and their sum is the unsplit gradient in another summation order (bounded at 1e-5
// of its largest element; printed). The all-reduces of both stages together are the unsplit model's.
TEST(TensorParallelPipelineStages, ChainedStagesAreTheUnsplitModel) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  const ModelConfig config = FourLayerModel();
  auto full = MakeCpuTransformer(config, 7);
  auto unsplit = MakeCpuTensorParallelTransformer(config, 7, *comm);
  const std::vector<std::unique_ptr<Transformer>> stages = MakeStages(config, *comm);
  Transformer& first = *stages[0];
  Transformer& last = *stages[1];
  const std::vector<Batch> batches = {MakeBatch(config, 0), MakeBatch(config, 1)};
  for (Transformer* m : {unsplit.get(), &first, &last}) {
    m->SetGradientScale(0.5f);
    PoisonGradients(*m);
  }
  std::vector<float> expected;
  for (int mb = 0; mb < kSlots; ++mb) {
    expected.push_back(Loss(*unsplit, batches[mb]));
    unsplit->Backward(nullptr, WriteOf(mb));
  }
  const uint64_t step_elements = TensorParallelStatsOf(*unsplit)->last_step_comm().elements;
  for (Transformer* m : {&first, &last}) TensorParallelStatsOf(*m)->TakeComm();

  std::vector<float> losses;
  StepPipeline(first, last, batches, losses);
  ASSERT_EQ(losses.size(), expected.size());
  for (int mb = 0; mb < kSlots; ++mb) {
    EXPECT_EQ(losses[mb], expected[mb]) << "micro-batch " << mb;
    const float whole = Loss(*full, batches[mb]);
    EXPECT_NEAR(losses[mb], whole, 1e-5 * std::fabs(whole)) << "micro-batch " << mb;
  }
  uint64_t stage_elements = 0;
  for (Transformer* m : {&first, &last}) stage_elements += TensorParallelStatsOf(*m)->TakeComm().elements;
  EXPECT_EQ(stage_elements, kSlots * step_elements);

  double max_abs = 0;
  double worst = CompareStageGradients(stages, *unsplit, max_abs);
  EXPECT_GT(max_abs, 0);
  EXPECT_LE(worst, 1e-5 * max_abs) << "wte: first + last stage against the unsplit gradient";
  worst /= max_abs;
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (comm->rank() == 0) {
    std::printf("[ info ] T=%d P=%d: wte's stage gradients sum to the unsplit one within %.2e of its max\n",
                comm->size(), kStages, worst);
  }
}

// One stage stepped alone, its edges written by the caller: `step`'s values in place of another stage's.
void StepStageAlone(Transformer& stage, const Batch& b, int step) {
  stage.SetBatch(b.inputs.data(), b.targets.data(), kBatch, kSeq);
  const Transformer::StageEdges edges = stage.stage_edges();
  if (edges.input != nullptr) {
    for (size_t i = 0; i < edges.count; ++i) edges.input[i] = 0.1f * std::sin(0.37f * i + step);
  }
  stage.Forward();
  if (edges.output_grad != nullptr) {
    for (size_t i = 0; i < edges.count; ++i) edges.output_grad[i] = 1e-3f * std::cos(0.53f * i + step);
  }
  stage.Backward(nullptr);
}

// ZeRO-1 over a stage's local elements: each half of them, stepped by AdamW, has the bits the unsharded stage's AdamW
// gives it, the other half untouched; the moments hold the half only.
TEST(TensorParallelPipelineStages, Zero1ShardsTheStagesLocalElements) {
  auto comm = MakeMpiCommunicator(MPI_COMM_WORLD);
  const ModelConfig config = FourLayerModel();
  AdamWConfig adamw;
  adamw.learning_rate = 1e-2f;
  const Batch b = MakeBatch(config, 0);
  for (int s = 0; s < kStages; ++s) {
    const PipelineStage stage = MakePipelineStage(config, kStages, s, 1);
    auto dense = MakeCpuTensorParallelTransformer(config, 7, *comm, {.shard = {}, .fsdp = {}, .stage = stage});
    const size_t elements = dense->parameter_elements();
    const std::vector<float> initial(dense->parameters(), dense->parameters() + elements);
    StepStageAlone(*dense, b, s);
    dense->AdamWStep(adamw, 1);
    for (int half = 0; half < 2; ++half) {
      SCOPED_TRACE("stage " + std::to_string(s) + ", half " + std::to_string(half));
      const OptimizerShard shard = ShardOf(elements, 2, half);
      auto sharded = MakeCpuTensorParallelTransformer(config, 7, *comm, {.shard = shard, .fsdp = {}, .stage = stage});
      EXPECT_EQ(sharded->placement().shard.begin, shard.begin);
      EXPECT_EQ(sharded->placement().shard.end, shard.end);
      EXPECT_EQ(sharded->state_bytes().optimizer, 8.0 * shard.elements());
      StepStageAlone(*sharded, b, s);
      sharded->AdamWStep(adamw, 1);
      for (size_t i = 0; i < elements; ++i) {
        const float want = i >= shard.begin && i < shard.end ? dense->parameters()[i] : initial[i];
        ASSERT_EQ(sharded->parameters()[i], want) << "element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace tb
