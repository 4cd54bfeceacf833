// The CPU reference transformer: fp32 throughout, every GEMM through cblas_sgemm, layers in cpu_kernels.
// It holds the whole model or one pipeline stage of it (StageLayout), in four flat buffers — parameters, gradients,
// AdamW m and v (of its shard under ZeRO-1) — and per micro-batch slot one activation buffer that grows to the
// largest batch·seq seen there and is then reused without allocating.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cpu_flat_model.h"
#include "cpu_kernels.h"
#include "cpu_moe.h"
#include "error.h"
#include "moe_stats.h"
#include "transformer.h"
#include "units.h"

namespace tb {
namespace {

// What one block keeps from forward for backward.
struct BlockActivations {
  float* ln1 = nullptr;        // (N, C)
  float* ln1_mean = nullptr;   // (N)
  float* ln1_rstd = nullptr;   // (N)
  float* qkv = nullptr;        // (N, 3C)
  float* atty = nullptr;       // (N, C) attention output, before the projection
  float* att_lse = nullptr;    // (B, NH, T) log-sum-exp of each attention row
  float* residual2 = nullptr;  // (N, C) residual after attention
  float* ln2 = nullptr;        // (N, C)
  float* ln2_mean = nullptr;   // (N)
  float* ln2_rstd = nullptr;   // (N)
  float* fch = nullptr;        // (N, 4C) MLP hidden, before GELU (a dense block's)
  float* fch_gelu = nullptr;   // (N, 4C)
  float* residual3 = nullptr;  // (N, C) residual after the MLP or MoE layer: the block's output
  cpu::MoeActivations moe;     // an MoE block's routing and experts' activations (sized by MoeForward)
};

// One micro-batch slot: its batch, and what its Forward keeps for its Backward, all in `storage` (its own, so that a
// slot growing leaves the others' activations in place).
struct MicroBatchSlot {
  size_t capacity_tokens = 0;  // rows the activations have room for
  std::vector<float> storage;
  // (N, C) the residual stream entering the stage's first block: the embeddings on the first stage, stage_edges()'s
  // input (the previous stage's output, written by the caller) on a later one.
  float* stage_input = nullptr;
  std::vector<BlockActivations> blocks;  // per layer; only the stage's point into storage
  float* lnf = nullptr;                  // (N, C) on the last stage
  float* lnf_mean = nullptr;             // (N)
  float* lnf_rstd = nullptr;             // (N)
  float* logits = nullptr;               // (N, V) on the last stage: logits, then probabilities, then their gradient
  // (N, C) the gradient of the residual stream, carried down through the blocks in place: on a stage before the last
  // it starts as stage_edges()'s output_grad (the caller's), and on a stage after the first it ends as its input_grad.
  float* residual_grad = nullptr;
  std::vector<int32_t> inputs;   // (N)
  std::vector<int32_t> targets;  // (N)
  int batch = 0;                 // 0: no batch set
  int seq = 0;
  bool backward_pending = false;
  float loss = std::numeric_limits<float>::quiet_NaN();
  size_t tokens() const { return static_cast<size_t>(batch) * seq; }
};

// Lays `storage` out for `tokens` rows: point(take) takes every tensor's floats in turn (take(count) returns where
// they start), once to count and once to point, so that the layout is written down once.
template <typename Point>
void LayOutActivations(std::vector<float>& storage, size_t tokens, const Point& point) {
  size_t used = 0;
  float* base = nullptr;
  auto take = [&](size_t count) {
    float* p = base == nullptr ? nullptr : base + used;
    used += count;
    return p;
  };
  point(take);
  // The old buffer goes before the new one arrives, so that growing never holds both.
  storage.clear();
  storage.shrink_to_fit();
  try {
    storage.resize(used);
  } catch (const std::bad_alloc&) {
    throw RuntimeError("the CPU transformer could not allocate " + FormatBytes(used * sizeof(float)) +
                       " of activations for " + std::to_string(tokens) +
                       " tokens per step HINT: a smaller --micro-batch or --seq needs less");
  }
  base = storage.data();
  used = 0;
  point(take);
}

class CpuTransformer : public CpuFlatModel, public MoeStatsSource {
 public:
  // `placement`: resolved over MakeLayout(config).
  CpuTransformer(const ModelConfig& config, uint64_t seed, const ModelPlacement& placement)
      : CpuFlatModel(config, MakeLayout(config), placement),
        units_(ParameterUnits(layout_)),
        // The whole model's (its experts under expert parallel): a stage holds whole units, or wte alone at the head
        // of the embeddings' unit, so their unit-local offsets are the stage's too (UnitOffsets cannot walk past the
        // empty units a stage leaves).
        unit_offsets_(UnitOffsets(ExpertLayout(MakeLayout(config), placement.experts))),
        adamw_ranges_(PlacementAdamWRanges(config, layout_, placement_)),
        slots_(stage().slots),
        attention_scratch_(2 * static_cast<size_t>(cpu::kAttentionBlockRows) * config.seq) {
    moe_stats_.Reset(MoeBlockCount(config_), config_.moe ? config_.moe->experts : 0);
    moe_experts_.group = placement_.experts.group;
    moe_experts_.remote_node = placement_.experts.remote_node;
    if (placement_.fsdp.enabled()) {
      InitializeFsdpShards(config_, layout_, placement_.fsdp, seed, params_.data());
    } else {
      InitializeStageParameters(config_, MakeLayout(config_), layout_, seed, params_.data());
    }
  }

  using Transformer::SetBatch;
  void SetBatch(const TokenBatch& batch) override;
  void Forward() override;
  float Loss() override { return Selected().loss; }
  using Transformer::Backward;
  void Backward(const std::function<void(size_t slot)>& gradient_ready, GradientWrite write) override;
  void AdamWStep(const AdamWConfig& config, int64_t step) override;
  StageEdges stage_edges() override;
  MoeStepStats TakeMoeStats() override {
    MoeStepStats taken = moe_stats_;
    taken.alltoall = moe_experts_.figures;
    moe_stats_.Reset(taken.blocks, taken.experts);
    moe_experts_.figures = {};
    return taken;
  }
  ModelStateBytes state_bytes() const override {
    ModelStateBytes bytes = CpuFlatModel::state_bytes();
    double floats = static_cast<double>(backward_scratch_.size() + attention_scratch_.size());
    for (const MicroBatchSlot& slot : slots_) floats += static_cast<double>(slot.storage.size());
    bytes.activations = 4.0 * floats;
    return bytes;
  }

 private:
  MicroBatchSlot& Selected() { return slots_[micro_batch_slot_]; }
  // Room for `tokens` rows in the micro-batch's activations and in the backward scratch.
  void ReserveActivations(MicroBatchSlot& micro_batch, size_t tokens);
  void ReserveBackwardScratch(size_t tokens);
  // Tensor `slot` inside its unit's buffer `unit_base` (UnitAccess's unit-local view).
  template <typename T>
  T* Tensor(T* unit_base, size_t slot) const {
    return unit_base + unit_offsets_[slot];
  }
  // The first and the last stage hold wte (the last its LM head's copy).
  bool holds_wte() const { return layout_[kWteSlot].count > 0; }
  // (N, C) the residual stream entering block `layer` of the stage (at end_layer: the stage's output).
  const float* Residual(const MicroBatchSlot& micro_batch, int layer) const {
    return layer > stage().first_layer ? micro_batch.blocks[layer - 1].residual3 : micro_batch.stage_input;
  }
  void BlockForward(MicroBatchSlot& micro_batch, int layer);
  float HeadForward(MicroBatchSlot& micro_batch, const float* embeddings);
  void HeadBackward(MicroBatchSlot& micro_batch, const float* embeddings, float* embedding_grads,
                    const std::function<void(size_t slot)>& ready);
  void BlockBackward(MicroBatchSlot& micro_batch, int layer, const std::function<void(size_t slot)>& ready);

  std::vector<ParameterUnit> units_;
  std::vector<size_t> unit_offsets_;  // per slot: its offset inside its unit
  std::vector<AdamWRange> adamw_ranges_;  // offsets into params_ and grads_

  std::vector<MicroBatchSlot> slots_;  // stage().slots of them
  // Backward's scratch, shared by the slots, for up to scratch_tokens_ rows.
  size_t scratch_tokens_ = 0;
  std::vector<float> backward_scratch_;
  float* channel_grad_ = nullptr;  // (N, C) gradient of a LayerNorm output or of the attention output
  float* hidden_grad_ = nullptr;   // (N, 4C) gradient of the MLP hidden, and later of qkv (N, 3C)
  std::vector<float> attention_scratch_;  // (2, block rows, maxT)
  MoeStepStats moe_stats_;  // since the last TakeMoeStats
  MoeExperts moe_experts_;  // where the experts are (placement_.experts.group), and its all-to-alls' figures
};

void CpuTransformer::ReserveActivations(MicroBatchSlot& micro_batch, size_t tokens) {
  const size_t n = tokens;
  const size_t c = config_.d_model;
  const size_t hidden = static_cast<size_t>(config_.mlp_ratio) * c;
  if (n > micro_batch.capacity_tokens) {
    micro_batch.capacity_tokens = 0;  // until the new buffer is laid out
    micro_batch.blocks.assign(config_.layers, BlockActivations{});
    LayOutActivations(micro_batch.storage, n, [&](auto& take) {
      micro_batch.stage_input = take(n * c);
      for (int l = stage().first_layer; l < stage().end_layer; ++l) {
        BlockActivations& a = micro_batch.blocks[l];
        a.ln1 = take(n * c);
        a.ln1_mean = take(n);
        a.ln1_rstd = take(n);
        a.qkv = take(n * 3 * c);
        a.atty = take(n * c);
        a.att_lse = take(n * config_.heads);
        a.residual2 = take(n * c);
        a.ln2 = take(n * c);
        a.ln2_mean = take(n);
        a.ln2_rstd = take(n);
        const size_t mlp = IsMoeBlock(config_, l) ? 0 : hidden;  // an MoE block's are in a.moe
        a.fch = take(n * mlp);
        a.fch_gelu = take(n * mlp);
        a.residual3 = take(n * c);
      }
      if (stage().last()) {
        micro_batch.lnf = take(n * c);
        micro_batch.lnf_mean = take(n);
        micro_batch.lnf_rstd = take(n);
        micro_batch.logits = take(n * config_.vocab);
      }
      micro_batch.residual_grad = take(n * c);
    });
    micro_batch.inputs.resize(n);
    micro_batch.targets.resize(n);
    micro_batch.capacity_tokens = n;
  }
  if (n > scratch_tokens_) ReserveBackwardScratch(n);
}

void CpuTransformer::ReserveBackwardScratch(size_t tokens) {
  const size_t n = tokens;
  const size_t c = config_.d_model;
  const size_t hidden = static_cast<size_t>(config_.mlp_ratio) * c;
  scratch_tokens_ = 0;  // until the new buffer is laid out
  LayOutActivations(backward_scratch_, n, [&](auto& take) {
    channel_grad_ = take(n * c);
    hidden_grad_ = take(n * std::max(hidden, 3 * c));
  });
  scratch_tokens_ = n;
}

void CpuTransformer::SetBatch(const TokenBatch& batch) {
  CheckBatchShape(config_, batch.batch, batch.seq);
  MicroBatchSlot& micro_batch = Selected();
  micro_batch.backward_pending = false;  // the activations are about to change
  micro_batch.batch = 0;                 // until they have room
  ReserveActivations(micro_batch, static_cast<size_t>(batch.batch) * batch.seq);
  UnpackTokens(batch, static_cast<uint64_t>(config_.vocab), micro_batch.inputs.data(), micro_batch.targets.data());
  micro_batch.batch = batch.batch;
  micro_batch.seq = batch.seq;
}

Transformer::StageEdges CpuTransformer::stage_edges() {
  MicroBatchSlot& micro_batch = Selected();
  if (micro_batch.batch == 0) return {};
  // A middle stage's output_grad and input_grad are the same floats (residual_grad): Backward turns one into the
  // other. The edges stay where they are until the slot's next SetBatch, which may move them (to grow).
  StageEdges edges;
  edges.count = micro_batch.tokens() * config_.d_model;
  if (!stage().first()) {
    edges.input = micro_batch.stage_input;
    edges.input_grad = micro_batch.residual_grad;
  }
  if (!stage().last()) {
    edges.output = Residual(micro_batch, stage().end_layer);
    edges.output_grad = micro_batch.residual_grad;
  }
  return edges;
}

void CpuTransformer::Forward() {
  MicroBatchSlot& micro_batch = Selected();
  if (micro_batch.batch == 0) throw RuntimeError("Transformer::Forward called before SetBatch");
  micro_batch.backward_pending = false;
  moe_experts_.op_times = op_times();  // expert parallel's exchanges are comm_model's waits
  // Held to the end of backward (the tied LM head).
  const float* embeddings = holds_wte() ? Access().Parameters(kEmbeddingUnit) : nullptr;
  if (stage().first()) {
    BeginOp(OpKind::kEmbedding, false);
    cpu::EncoderForward(micro_batch.stage_input, micro_batch.inputs.data(), Tensor(embeddings, kWteSlot),
                        Tensor(embeddings, kWpeSlot), micro_batch.batch, micro_batch.seq, config_.d_model);
  }
  for (int l = stage().first_layer; l < stage().end_layer; ++l) BlockForward(micro_batch, l);
  ++moe_stats_.forwards;
  // A stage before the last has no loss.
  micro_batch.loss =
      stage().last() ? HeadForward(micro_batch, embeddings) : std::numeric_limits<float>::quiet_NaN();
  EndOps();
  micro_batch.backward_pending = true;
}

// The last stage's end: the final LayerNorm, the tied LM head and the mean cross-entropy.
float CpuTransformer::HeadForward(MicroBatchSlot& micro_batch, const float* embeddings) {
  const size_t n = micro_batch.tokens();
  const int c = config_.d_model;
  const float* lnf = Access().Parameters(FinalNormUnit(config_.layers));  // held to the end of backward
  const size_t lnf_slot = LnfWeightSlot(config_.layers);
  BeginOp(OpKind::kLayerNorm, false);
  cpu::LayerNormForward(micro_batch.lnf, micro_batch.lnf_mean, micro_batch.lnf_rstd,
                        Residual(micro_batch, stage().end_layer), Tensor(lnf, lnf_slot), Tensor(lnf, lnf_slot + 1), n,
                        c);
  // The tied LM head reads only wte's first V rows, so the padding rows never reach the logits.
  BeginOp(OpKind::kLmHead, false);
  cpu::MatmulForward(micro_batch.logits, micro_batch.lnf, Tensor(embeddings, kWteSlot), nullptr, nullptr, n, c,
                     config_.vocab);
  return cpu::CrossEntropyForward(micro_batch.logits, micro_batch.targets.data(), n, config_.vocab);
}

void CpuTransformer::BlockForward(MicroBatchSlot& micro_batch, int l) {
  const size_t n = micro_batch.tokens();
  const int c = config_.d_model;
  const int hidden = config_.mlp_ratio * c;
  const float* unit = Access().Parameters(BlockUnit(l));
  auto w = [&](BlockTensor t) { return Tensor(unit, BlockSlot(l, t)); };
  const float* residual = Residual(micro_batch, l);  // (N, C)
  BlockActivations& a = micro_batch.blocks[l];
  BeginOp(OpKind::kLayerNorm, false);
  cpu::LayerNormForward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, w(kLn1Weight), w(kLn1Bias), n, c);
  BeginOp(OpKind::kAttention, false);
  cpu::MatmulForward(a.qkv, a.ln1, w(kQkvWeight), w(kQkvBias), nullptr, n, c, 3 * c);
  cpu::AttentionForward(a.atty, a.att_lse, attention_scratch_.data(), a.qkv, micro_batch.batch, micro_batch.seq, c,
                        config_.heads);
  cpu::MatmulForward(a.residual2, a.atty, w(kAttnProjWeight), w(kAttnProjBias), residual, n, c, c);
  BeginOp(OpKind::kLayerNorm, false);
  cpu::LayerNormForward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w(kLn2Weight), w(kLn2Bias), n, c);
  BeginOp(OpKind::kMlp, false);
  if (IsMoeBlock(config_, l)) {
    const cpu::MoeWeights weights{w(kRouterWeight), w(kFcWeight), w(kFcBias), w(kMlpProjWeight), w(kMlpProjBias)};
    cpu::MoeForward(a.moe, a.residual3, a.ln2, a.residual2, weights, *config_.moe, n, c, &moe_experts_);
    moe_stats_.AddBlock(l / config_.moe->every, a.moe.routing.assigned, a.moe.routing.dropped, a.moe.aux_loss);
  } else {
    cpu::MatmulForward(a.fch, a.ln2, w(kFcWeight), w(kFcBias), nullptr, n, c, hidden);
    cpu::GeluForward(a.fch_gelu, a.fch, n * hidden);
    cpu::MatmulForward(a.residual3, a.fch_gelu, w(kMlpProjWeight), w(kMlpProjBias), a.residual2, n, hidden, c);
  }
  Access().ParametersDone(BlockUnit(l));
}

void CpuTransformer::Backward(const std::function<void(size_t slot)>& gradient_ready, GradientWrite write) {
  MicroBatchSlot& micro_batch = Selected();
  // Backward turns the probabilities into their gradient in place, so it runs once per Forward.
  if (!micro_batch.backward_pending) throw RuntimeError("Transformer::Backward called without a Forward before it");
  micro_batch.backward_pending = false;
  auto ready = [&](size_t tensor) {
    if (gradient_ready) gradient_ready(tensor);
  };
  UnitAccess& access = Access();
  BeginBackward(write, units_.size());
  // The slots the stage holds are reported in descending order: lnf, the blocks from last to first, wpe, and wte last.
  const float* embeddings = nullptr;
  float* embedding_grads = nullptr;
  if (holds_wte()) {
    embeddings = access.Parameters(kEmbeddingUnit);
    embedding_grads = BackwardGradients(access, kEmbeddingUnit, units_[kEmbeddingUnit].elements());
  }
  // A stage before the last starts from residual_grad as the caller wrote it (output_grad).
  if (stage().last()) HeadBackward(micro_batch, embeddings, embedding_grads, ready);
  // residual_grad (N, C) carries the gradient of the residual stream down through the blocks; each residual add passes
  // it on unchanged and each LayerNorm adds its input gradient to it. Past the stage's first block it is input_grad.
  for (int l = stage().end_layer - 1; l >= stage().first_layer; --l) BlockBackward(micro_batch, l, ready);
  if (stage().first()) {
    BeginOp(OpKind::kEmbedding, true);
    cpu::EncoderBackward(Tensor(embedding_grads, kWteSlot), Tensor(embedding_grads, kWpeSlot),
                         micro_batch.residual_grad, micro_batch.inputs.data(), micro_batch.batch, micro_batch.seq,
                         config_.d_model);
    ready(kWpeSlot);
  }
  if (holds_wte()) ready(kWteSlot);
  EndOps();
  if (holds_wte()) {
    access.GradientsDone(kEmbeddingUnit);
    access.ParametersDone(kEmbeddingUnit);
  }
}

// The last stage's start: from the loss through the LM head (into wte's gradient) and the final LayerNorm, leaving
// the gradient of the stage's output in residual_grad.
void CpuTransformer::HeadBackward(MicroBatchSlot& micro_batch, const float* embeddings, float* embedding_grads,
                                  const std::function<void(size_t slot)>& ready) {
  const size_t n = micro_batch.tokens();
  const int c = config_.d_model;
  UnitAccess& access = Access();
  BeginOp(OpKind::kLmHead, true);
  cpu::CrossEntropyBackward(micro_batch.logits, micro_batch.targets.data(), n, config_.vocab);  // now d loss / d logits
  ScaleLossGradient(micro_batch.logits, n * static_cast<size_t>(config_.vocab));
  cpu::MatmulBackward(channel_grad_, Tensor(embedding_grads, kWteSlot), nullptr, micro_batch.logits, micro_batch.lnf,
                      Tensor(embeddings, kWteSlot), n, c, config_.vocab);
  std::fill(micro_batch.residual_grad, micro_batch.residual_grad + n * c, 0.0f);
  const size_t lnf_unit = FinalNormUnit(config_.layers), lnf_slot = LnfWeightSlot(config_.layers);
  const float* lnf = access.Parameters(lnf_unit);
  float* lnf_grads = BackwardGradients(access, lnf_unit, units_[lnf_unit].elements());
  BeginOp(OpKind::kLayerNorm, true);
  cpu::LayerNormBackward(micro_batch.residual_grad, Tensor(lnf_grads, lnf_slot), Tensor(lnf_grads, lnf_slot + 1),
                         channel_grad_, Residual(micro_batch, stage().end_layer), Tensor(lnf, lnf_slot),
                         micro_batch.lnf_mean, micro_batch.lnf_rstd, n, c);
  ready(lnf_slot + 1);
  ready(lnf_slot);
  access.GradientsDone(lnf_unit);
  access.ParametersDone(lnf_unit);
}

void CpuTransformer::BlockBackward(MicroBatchSlot& micro_batch, int l, const std::function<void(size_t slot)>& ready) {
  const size_t n = micro_batch.tokens();
  const int c = config_.d_model;
  const int hidden = config_.mlp_ratio * c;
  const float* unit = Access().Parameters(BlockUnit(l));
  float* unit_grads = BackwardGradients(Access(), BlockUnit(l), units_[BlockUnit(l)].elements());
  auto w = [&](BlockTensor t) { return Tensor(unit, BlockSlot(l, t)); };
  auto g = [&](BlockTensor t) { return Tensor(unit_grads, BlockSlot(l, t)); };
  auto ready_pair = [&](BlockTensor weight, BlockTensor bias) {
    ready(BlockSlot(l, bias));
    ready(BlockSlot(l, weight));
  };
  const BlockActivations& a = micro_batch.blocks[l];
  const float* residual = Residual(micro_batch, l);
  float* residual_grad = micro_batch.residual_grad;
  BeginOp(OpKind::kMlp, true);
  if (IsMoeBlock(config_, l)) {
    const cpu::MoeWeights weights{w(kRouterWeight), w(kFcWeight), w(kFcBias), w(kMlpProjWeight), w(kMlpProjBias)};
    const cpu::MoeGradients grads{g(kRouterWeight), g(kFcWeight), g(kFcBias), g(kMlpProjWeight), g(kMlpProjBias)};
    // The aux loss is added to the loss as it is, so its gradient is the loss gradient's scale.
    cpu::MoeBackward(channel_grad_, grads, residual_grad, gradient_scale_, a.ln2, weights, a.moe, *config_.moe, n, c,
                     &moe_experts_);
    ready(BlockSlot(l, kRouterWeight));
  } else {
    cpu::MatmulBackward(hidden_grad_, g(kMlpProjWeight), g(kMlpProjBias), residual_grad, a.fch_gelu,
                        w(kMlpProjWeight), n, hidden, c);
    cpu::GeluBackward(hidden_grad_, a.fch, n * hidden);
  }
  ready_pair(kMlpProjWeight, kMlpProjBias);
  if (!IsMoeBlock(config_, l)) {
    cpu::MatmulBackward(channel_grad_, g(kFcWeight), g(kFcBias), hidden_grad_, a.ln2, w(kFcWeight), n, c, hidden);
  }
  ready_pair(kFcWeight, kFcBias);
  BeginOp(OpKind::kLayerNorm, true);
  cpu::LayerNormBackward(residual_grad, g(kLn2Weight), g(kLn2Bias), channel_grad_, a.residual2, w(kLn2Weight),
                         a.ln2_mean, a.ln2_rstd, n, c);
  ready_pair(kLn2Weight, kLn2Bias);
  BeginOp(OpKind::kAttention, true);
  cpu::MatmulBackward(channel_grad_, g(kAttnProjWeight), g(kAttnProjBias), residual_grad, a.atty,
                      w(kAttnProjWeight), n, c, c);
  ready_pair(kAttnProjWeight, kAttnProjBias);
  float* qkv_grad = hidden_grad_;  // (N, 3C): the MLP's hidden gradient is spent by now
  cpu::AttentionBackward(qkv_grad, attention_scratch_.data(), channel_grad_, a.qkv, a.att_lse, micro_batch.batch,
                         micro_batch.seq, c, config_.heads);
  cpu::MatmulBackward(channel_grad_, g(kQkvWeight), g(kQkvBias), qkv_grad, a.ln1, w(kQkvWeight), n, c, 3 * c);
  ready_pair(kQkvWeight, kQkvBias);
  BeginOp(OpKind::kLayerNorm, true);
  cpu::LayerNormBackward(residual_grad, g(kLn1Weight), g(kLn1Bias), channel_grad_, residual, w(kLn1Weight),
                         a.ln1_mean, a.ln1_rstd, n, c);
  ready_pair(kLn1Weight, kLn1Bias);
  Access().GradientsDone(BlockUnit(l));
  Access().ParametersDone(BlockUnit(l));
}

void CpuTransformer::AdamWStep(const AdamWConfig& config, int64_t step) {
  if (step < 1) throw InputError("AdamW step counts from 1, got " + std::to_string(step));
  // The moments hold the shard's elements: parameter element i is moment i - moment_offset.
  const size_t moment_offset = placement_.moment_offset();
  BeginOp(OpKind::kOptimizer, true);
  for (const AdamWRange& r : adamw_ranges_) {
    cpu::AdamWUpdate(params_.data() + r.offset, grads_.data() + r.offset, m_.data() + (r.offset - moment_offset),
                     v_.data() + (r.offset - moment_offset), r.count, config, r.decay ? config.weight_decay : 0.0f,
                     step);
  }
  EndOps();
}

}  // namespace

std::unique_ptr<Transformer> MakeCpuTransformer(const ModelConfig& config, uint64_t seed,
                                                const ModelPlacement& placement) {
  ValidateModel(config);
  const std::vector<TensorSlot> layout = MakeLayout(config);
  const ModelPlacement resolved = ResolvePlacement(config, layout, placement);
  try {
    return std::make_unique<CpuTransformer>(config, seed, resolved);
  } catch (const std::bad_alloc&) {
    const std::vector<TensorSlot> held = HeldLayout(layout, resolved);
    const uint64_t bytes = 4 * sizeof(float) * (held.back().offset + held.back().count);
    throw RuntimeError("the CPU transformer for model '" + config.name + "' could not allocate " +
                       FormatBytes(bytes) + " for fp32 parameters, gradients and AdamW moments HINT: run fewer " +
                       "layers of the same shape with --layers N");
  }
}

}  // namespace tb
