// Pipeline stages of the CPU transformer: what MakePipelineStage accepts, what each stage holds (StageLayout, the
// whole model's initial bits), and a chain of stages run in one process — each stage's output copied into the next's
// input, each input gradient into the previous's output gradient — against the whole model: the same loss and the
// same gradients (wte's split between the first stage's embedding and the last's LM head), with micro-batches in
// flight in several slots, and AdamW on a stage's elements.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "error.h"
#include "input_error_of.h"
#include "model_config.h"
#include "token_windows.h"
#include "transformer.h"

namespace tb {
namespace {

// 4 layers, so that 2 and 4 stages divide them and 3 does not; vocab 300 padded to a multiple of 128.
ModelConfig StageConfig() { return CustomModel(4, 64, 4, 300, 16); }
constexpr uint64_t kSeed = 31;

// The placement of a model that holds `stage`, and nothing else split.
ModelPlacement Holding(const PipelineStage& stage) { return {.shard = {}, .fsdp = {}, .stage = stage}; }

using Chain = std::vector<std::unique_ptr<Transformer>>;

Chain MakeChain(const ModelConfig& config, int stages, int slots) {
  Chain chain;
  for (int s = 0; s < stages; ++s) {
    chain.push_back(MakeCpuTransformer(config, kSeed, Holding(MakePipelineStage(config, stages, s, slots))));
  }
  return chain;
}

// Micro-batch slot `slot`'s forward through the chain, stage by stage; returns the last stage's loss.
float ChainForward(Chain& chain, int slot, const test::WindowBatch& batch) {
  for (size_t s = 0; s < chain.size(); ++s) {
    Transformer& stage = *chain[s];
    stage.SelectMicroBatch(slot);
    stage.SetBatch(batch.windows);
    if (s > 0) {
      chain[s - 1]->SelectMicroBatch(slot);
      const Transformer::StageEdges previous = chain[s - 1]->stage_edges();
      const Transformer::StageEdges edges = stage.stage_edges();
      EXPECT_EQ(previous.count, edges.count);
      std::memcpy(edges.input, previous.output, edges.count * sizeof(float));
    }
    stage.Forward();
    if (!stage.placement().stage.last()) {
      EXPECT_TRUE(std::isnan(stage.Loss())) << "stage " << s << " has no loss";
    }
  }
  return chain.back()->Loss();
}

// Micro-batch slot `slot`'s backward through the chain, from the last stage to the first; returns each stage's
// gradient_ready calls in order.
std::vector<std::vector<size_t>> ChainBackward(Chain& chain, int slot, GradientWrite write) {
  std::vector<std::vector<size_t>> ready(chain.size());
  for (size_t s = chain.size(); s-- > 0;) {
    Transformer& stage = *chain[s];
    stage.SelectMicroBatch(slot);
    if (s + 1 < chain.size()) {
      chain[s + 1]->SelectMicroBatch(slot);
      const Transformer::StageEdges next = chain[s + 1]->stage_edges();
      const Transformer::StageEdges edges = stage.stage_edges();
      EXPECT_EQ(next.count, edges.count);
      std::memcpy(edges.output_grad, next.input_grad, edges.count * sizeof(float));
    }
    stage.Backward([&](size_t tensor) { ready[s].push_back(tensor); }, write);
  }
  return ready;
}

// `count` floats at `actual` and `expected` have the same bits.
void ExpectSameBits(const float* actual, const float* expected, size_t count, const std::string& what) {
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << "[" << i << "]: " << actual[i] << ", expected " << expected[i];
      return;
    }
  }
}

// Every gradient a stage of `chain` holds equals the whole model's for the same tensor, bit for bit; wte's, which the
// first stage (the embedding) and the last (the LM head) of a split model each hold a part of, add up to it within
// the rounding of the additions that the whole model makes in another order.
void ExpectChainGradientsEqualWhole(Chain& chain, Transformer& whole) {
  const std::vector<TensorSlot>& whole_layout = whole.layout();
  const bool split = chain.size() > 1;
  for (size_t s = 0; s < chain.size(); ++s) {
    const std::vector<TensorSlot>& layout = chain[s]->layout();
    for (size_t t = 0; t < layout.size(); ++t) {
      if ((split && t == kWteSlot) || layout[t].count == 0) continue;
      ExpectSameBits(chain[s]->gradients() + layout[t].offset, whole.gradients() + whole_layout[t].offset,
                     layout[t].count, "stage " + std::to_string(s) + " " + layout[t].name);
    }
  }
  if (!split) return;
  const float* embedding = chain.front()->gradients() + chain.front()->layout()[kWteSlot].offset;
  const float* lm_head = chain.back()->gradients() + chain.back()->layout()[kWteSlot].offset;
  const float* expected = whole.gradients() + whole_layout[kWteSlot].offset;
  for (size_t i = 0; i < whole_layout[kWteSlot].count; ++i) {
    const float tolerance = 4 * FLT_EPSILON * (std::abs(embedding[i]) + std::abs(lm_head[i]) + std::abs(expected[i]));
    ASSERT_NEAR(embedding[i] + lm_head[i], expected[i], tolerance) << "wte element " << i;
  }
}

TEST(PipelineStage, MakePipelineStageSplitsTheLayersEvenly) {
  const ModelConfig config = StageConfig();
  const PipelineStage second = MakePipelineStage(config, 2, 1, 3);
  EXPECT_EQ(second.first_layer, 2);
  EXPECT_EQ(second.end_layer, 4);
  EXPECT_EQ(second.slots, 3);
  EXPECT_TRUE(second.last() && !second.first() && second.split());
  const PipelineStage whole = ResolvePlacement(config, MakeLayout(config), {}).stage;
  EXPECT_EQ(whole.first_layer, 0);
  EXPECT_EQ(whole.end_layer, 4);
  EXPECT_TRUE(whole.first() && whole.last() && !whole.split());

  EXPECT_NE(InputErrorOf([&] { MakePipelineStage(config, 3, 0, 1); }).find("does not divide"), std::string::npos);
  EXPECT_NE(InputErrorOf([&] { MakePipelineStage(config, 0, 0, 1); }), "");
  EXPECT_NE(InputErrorOf([&] { MakePipelineStage(config, 2, 2, 1); }).find("outside 0..1"), std::string::npos);
  EXPECT_NE(InputErrorOf([&] { MakePipelineStage(config, 2, -1, 1); }), "");
  EXPECT_NE(InputErrorOf([&] { MakePipelineStage(config, 2, 0, 0); }), "");
  EXPECT_NE(InputErrorOf([&] { ResolvePlacement(config, MakeLayout(config), Holding({2, 1, 1, 4, 1})); }), "");
  EXPECT_NE(InputErrorOf([&] { MakeCpuTransformer(config, kSeed, Holding(PipelineStage{3, 0})); }), "");
  EXPECT_NE(InputErrorOf([&] { MakeCpuTransformer(config, kSeed, Holding(PipelineStage{2, 2})); }), "");
}

// Every maker resolves its ModelPlacement in ResolvePlacement: the default is the whole model with every element this
// rank's; a zero1 shard is of the stage's elements; the buffers' lengths follow the mode; the rules between the modes
// are refused there.
TEST(ModelPlacement, ResolvePlacementResolvesAndRefusesInOnePlace) {
  const ModelConfig config = StageConfig();
  const std::vector<TensorSlot> layout = MakeLayout(config);
  const size_t elements = layout.back().offset + layout.back().count;
  const ModelPlacement whole = ResolvePlacement(config, layout, {});
  EXPECT_EQ(whole.shard.capacity, elements);
  EXPECT_EQ(whole.shard.begin, 0u);
  EXPECT_EQ(whole.shard.end, elements);
  EXPECT_FALSE(whole.fsdp.enabled());
  EXPECT_EQ(whole.stage.end_layer, config.layers);
  EXPECT_EQ(whole.buffer_elements(), elements);
  EXPECT_EQ(whole.moment_elements(), elements);
  EXPECT_EQ(whole.moment_offset(), 0u);

  const PipelineStage second = MakePipelineStage(config, 2, 1, 2);
  const std::vector<TensorSlot> held = StageLayout(layout, second);
  const OptimizerShard shard = ShardOf(held.back().offset + held.back().count, 2, 1);
  const ModelPlacement zero1 = ResolvePlacement(config, layout, {.shard = shard, .fsdp = {}, .stage = second});
  EXPECT_EQ(zero1.shard.begin, shard.begin);
  EXPECT_EQ(zero1.buffer_elements(), shard.capacity);
  EXPECT_EQ(zero1.moment_elements(), shard.elements());
  EXPECT_EQ(zero1.moment_offset(), shard.begin);

  const ModelPlacement fsdp =
      ResolvePlacement(config, layout, {.shard = {}, .fsdp = MakeFsdpLayout(layout, 2, 1), .stage = {}});
  EXPECT_EQ(fsdp.buffer_elements(), fsdp.fsdp.store_elements);
  EXPECT_EQ(fsdp.moment_elements(), fsdp.fsdp.store_elements);
  EXPECT_EQ(fsdp.moment_offset(), 0u);

  EXPECT_EQ(InputErrorOf([&] {
              ResolvePlacement(config, layout,
                               {.shard = ShardOf(elements, 2, 0), .fsdp = MakeFsdpLayout(layout, 2, 0), .stage = {}});
            }),
            "a model is sharded by zero1 or by fsdp, not both");
  const std::string split = InputErrorOf(
      [&] { ResolvePlacement(config, layout, {.shard = {}, .fsdp = MakeFsdpLayout(layout, 2, 0), .stage = second}); });
  EXPECT_NE(split.find("fsdp with pipeline parallel is not built"), std::string::npos) << split;
  // The whole model's shard does not fit a stage's elements.
  const std::string wide = InputErrorOf(
      [&] { ResolvePlacement(config, layout, {.shard = ShardOf(elements, 2, 1), .fsdp = {}, .stage = second}); });
  EXPECT_NE(wide.find("does not fit"), std::string::npos) << wide;
  const std::vector<TensorSlot> other = MakeLayout(WithLayers(config, 2));
  EXPECT_THROW(ResolvePlacement(config, layout, {.shard = {}, .fsdp = MakeFsdpLayout(other, 2, 0), .stage = {}}),
               std::logic_error);
}

// Each stage holds its slots with the whole model's counts and bits, packed; over all stages the whole model once,
// and wte twice (the last stage's copy for the tied LM head).
TEST(PipelineStage, StagesHoldTheWholeModelAndOneMoreWte) {
  const ModelConfig config = StageConfig();
  auto whole = MakeCpuTransformer(config, kSeed);
  const std::vector<TensorSlot>& whole_layout = whole->layout();
  for (int stages : {1, 2, 4}) {
    size_t held = 0;
    for (const auto& stage : MakeChain(config, stages, 1)) {
      const PipelineStage& p = stage->placement().stage;
      SCOPED_TRACE("stage " + std::to_string(p.stage) + " of " + std::to_string(stages));
      const std::vector<TensorSlot>& layout = stage->layout();
      ASSERT_EQ(layout.size(), whole_layout.size());
      size_t offset = 0;
      for (size_t t = 0; t < layout.size(); ++t) {
        EXPECT_EQ(layout[t].name, whole_layout[t].name);
        EXPECT_EQ(layout[t].offset, offset);
        EXPECT_EQ(layout[t].count, StageHoldsSlot(p, whole_layout, t) ? whole_layout[t].count : 0) << layout[t].name;
        ExpectSameBits(stage->parameters() + layout[t].offset, whole->parameters() + whole_layout[t].offset,
                       layout[t].count, layout[t].name);
        offset += layout[t].count;
      }
      EXPECT_EQ(stage->parameter_elements(), offset);
      held += offset;
    }
    const size_t extra_wte = stages > 1 ? whole_layout[kWteSlot].count : 0;
    EXPECT_EQ(held, whole->parameter_elements() + extra_wte);
  }
}

TEST(PipelineStage, EdgesSlotsAndRefusals) {
  const ModelConfig config = StageConfig();
  Chain chain = MakeChain(config, 4, 2);
  test::WindowBatch batch(config.vocab, 2, 16, 41);
  const size_t count = 2 * 16 * static_cast<size_t>(config.d_model);
  for (const auto& stage : chain) {
    const PipelineStage& p = stage->placement().stage;
    stage->SelectMicroBatch(1);
    stage->SetBatch(batch.windows);
    const Transformer::StageEdges edges = stage->stage_edges();
    EXPECT_EQ(edges.count, count);
    EXPECT_EQ(edges.input == nullptr, p.first()) << "stage " << p.stage;
    EXPECT_EQ(edges.input_grad == nullptr, p.first()) << "stage " << p.stage;
    EXPECT_EQ(edges.output == nullptr, p.last()) << "stage " << p.stage;
    EXPECT_EQ(edges.output_grad == nullptr, p.last()) << "stage " << p.stage;
    EXPECT_THROW(stage->SelectMicroBatch(2), std::logic_error);
    EXPECT_THROW(stage->SelectMicroBatch(-1), std::logic_error);
  }
  EXPECT_THROW(MakeCpuTransformer(config, kSeed)->SelectMicroBatch(1), std::logic_error);
  // FSDP of a stage is not built; zero1's shard of the stage's elements is (AdamWOnAStage below).
  const std::vector<TensorSlot> first = StageLayout(MakeLayout(config), MakePipelineStage(config, 2, 0, 1));
  const std::string fsdp = InputErrorOf([&] {
    MakeCpuTransformer(config, kSeed,
                       {.shard = {}, .fsdp = MakeFsdpLayout(first, 2, 0), .stage = MakePipelineStage(config, 2, 0, 1)});
  });
  EXPECT_NE(fsdp.find("not built"), std::string::npos) << fsdp;
}

// Stage by stage, P = 2 and P = 4 give the whole model's loss and gradients; each stage reports exactly the tensors
// it holds, once each, in descending slot order.
TEST(PipelineStage, ChainGivesTheWholeModelsLossAndGradients) {
  const ModelConfig config = StageConfig();
  test::WindowBatch batch(config.vocab, 4, 16, 42);
  auto whole = MakeCpuTransformer(config, kSeed);
  whole->SetBatch(batch.windows);
  whole->Forward();
  const float loss = whole->Loss();
  whole->Backward({});
  for (int stages : {2, 4}) {
    SCOPED_TRACE(std::to_string(stages) + " stages");
    Chain chain = MakeChain(config, stages, 1);
    EXPECT_EQ(ChainForward(chain, 0, batch), loss);  // the same operations on the same numbers
    const std::vector<std::vector<size_t>> ready = ChainBackward(chain, 0, GradientWrite::kOverwrite);
    ExpectChainGradientsEqualWhole(chain, *whole);
    for (size_t s = 0; s < chain.size(); ++s) {
      std::vector<size_t> held;
      for (size_t t = chain[s]->layout().size(); t-- > 0;) {
        if (chain[s]->layout()[t].count > 0) held.push_back(t);
      }
      EXPECT_EQ(ready[s], held) << "stage " << s;
    }
  }
}

// Two micro-batches in flight (forward 0, forward 1, backward 0, backward 1), the second larger so that its slot
// grows while the first's activations wait, accumulate as the whole model does with one after the other.
void ExpectSlotsAccumulateAsOneAfterTheOther(int stages) {
  const ModelConfig config = StageConfig();
  test::WindowBatch first(config.vocab, 2, 16, 43);
  test::WindowBatch second(config.vocab, 4, 12, 44);
  auto whole = MakeCpuTransformer(config, kSeed);
  whole->SetGradientScale(0.5f);
  whole->SetBatch(first.windows);
  whole->Forward();
  const float first_loss = whole->Loss();
  whole->Backward({}, GradientWrite::kOverwrite);
  whole->SetBatch(second.windows);
  whole->Forward();
  const float second_loss = whole->Loss();
  whole->Backward({}, GradientWrite::kAccumulate);

  Chain chain = MakeChain(config, stages, 2);
  for (const auto& stage : chain) stage->SetGradientScale(0.5f);
  EXPECT_EQ(ChainForward(chain, 0, first), first_loss);
  EXPECT_EQ(ChainForward(chain, 1, second), second_loss);
  ChainBackward(chain, 0, GradientWrite::kOverwrite);
  ChainBackward(chain, 1, GradientWrite::kAccumulate);
  ExpectChainGradientsEqualWhole(chain, *whole);
}

TEST(PipelineStage, SlotsInFlightAccumulateAsOneAfterTheOther) {
  for (int stages : {1, 2}) {
    SCOPED_TRACE(std::to_string(stages) + " stages");
    ExpectSlotsAccumulateAsOneAfterTheOther(stages);
  }
}

// Given the whole model's gradients for its tensors, AdamW on a stage — whole, or zero1's shard of its elements —
// moves its elements as AdamW on the whole model moves the same tensors, and a shard leaves the rest alone.
TEST(PipelineStage, AdamWOnAStage) {
  const ModelConfig config = StageConfig();
  test::WindowBatch batch(config.vocab, 2, 16, 45);
  auto whole = MakeCpuTransformer(config, kSeed);
  const std::vector<TensorSlot> whole_layout = whole->layout();
  whole->SetBatch(batch.windows);
  whole->Forward();
  whole->Backward({});
  const AdamWConfig adamw{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  whole->AdamWStep(adamw, 1);
  for (int s = 0; s < 2; ++s) {
    const PipelineStage p = MakePipelineStage(config, 2, s, 1);
    const std::vector<TensorSlot> layout = StageLayout(whole_layout, p);
    const size_t elements = layout.back().offset + layout.back().count;
    for (int shard_rank = -1; shard_rank < 2; ++shard_rank) {  // -1: not sharded
      SCOPED_TRACE("stage " + std::to_string(s) + ", zero1 rank " + std::to_string(shard_rank));
      const OptimizerShard shard = shard_rank < 0 ? OptimizerShard{} : ShardOf(elements, 2, shard_rank);
      auto stage = MakeCpuTransformer(config, kSeed, {.shard = shard, .fsdp = {}, .stage = p});
      ASSERT_EQ(stage->parameter_elements(), elements);
      const std::vector<float> before(stage->parameters(), stage->parameters() + elements);
      for (size_t t = 0; t < layout.size(); ++t) {
        std::memcpy(stage->gradients() + layout[t].offset, whole->gradients() + whole_layout[t].offset,
                    layout[t].count * sizeof(float));
      }
      stage->AdamWStep(adamw, 1);
      const OptimizerShard& updated = stage->placement().shard;
      for (size_t t = 0; t < layout.size(); ++t) {
        for (size_t i = 0; i < layout[t].count; ++i) {
          const size_t e = layout[t].offset + i;
          const float expected =
              e >= updated.begin && e < updated.end ? whole->parameters()[whole_layout[t].offset + i] : before[e];
          ASSERT_EQ(stage->parameters()[e], expected) << layout[t].name << "[" << i << "]";
        }
      }
    }
  }
}

}  // namespace
}  // namespace tb
