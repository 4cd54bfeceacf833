// The CPU reference transformer: fp32 throughout, every GEMM through cblas_sgemm, layers in cpu_kernels.
// It owns four flat buffers laid out by MakeLayout — parameters, gradients, AdamW m and v (of its shard under
// ZeRO-1) — and one activation buffer that grows to the largest batch·seq seen and is then reused without allocating.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cpu_flat_model.h"
#include "cpu_kernels.h"
#include "error.h"
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
  float* fch = nullptr;        // (N, 4C) MLP hidden, before GELU
  float* fch_gelu = nullptr;   // (N, 4C)
  float* residual3 = nullptr;  // (N, C) residual after the MLP: the block's output
};

// The buffers' lengths (parameters and gradients, m and v): fsdp's store, or ZeRO-1's capacity and shard (the whole
// model without either).
std::pair<size_t, size_t> BufferElements(const ModelConfig& config, const OptimizerShard& shard, const FsdpLayout& fsdp) {
  if (fsdp.enabled()) return {fsdp.store_elements, fsdp.store_elements};
  const std::vector<TensorSlot> layout = MakeLayout(config);
  const OptimizerShard resolved = ResolveShard(shard, layout.back().offset + layout.back().count);
  return {resolved.capacity, resolved.elements()};
}

class CpuTransformer : public CpuFlatModel {
 public:
  CpuTransformer(const ModelConfig& config, uint64_t seed, const OptimizerShard& shard, const FsdpLayout& fsdp)
      : CpuFlatModel(config, MakeLayout(config), BufferElements(config, shard, fsdp).first,
                     BufferElements(config, shard, fsdp).second),
        shard_(ResolveShard(shard, elements_)),
        fsdp_(fsdp),
        units_(ParameterUnits(layout_)),
        unit_offsets_(UnitOffsets(layout_, units_)),
        adamw_ranges_(fsdp.enabled() ? FsdpAdamWRanges(config, layout_, fsdp)
                                     : AdamWRanges(config, layout_, shard_.begin, shard_.end)),
        moment_offset_(fsdp.enabled() ? 0 : shard_.begin),
        flat_access_(MakeFlatUnitAccess(params_.data(), grads_.data(), units_)),
        access_(fsdp.enabled() ? nullptr : flat_access_.get()),
        attention_scratch_(2 * static_cast<size_t>(cpu::kAttentionBlockRows) * config.seq) {
    if (fsdp.enabled() && shard.sharded()) throw InputError("a model is sharded by zero1 or by fsdp, not both");
    if (fsdp.enabled()) {
      InitializeFsdpShards(config_, layout_, fsdp_, seed, params_.data());
    } else {
      InitializeParameters(config_, layout_, seed, params_.data());
    }
  }

  using Transformer::SetBatch;
  void SetBatch(const TokenBatch& batch) override;
  void Forward() override;
  float Loss() override { return loss_; }
  using Transformer::Backward;
  void Backward(const std::function<void(size_t slot)>& gradient_ready, GradientWrite write) override;
  void AdamWStep(const AdamWConfig& config, int64_t step) override;
  const OptimizerShard& optimizer_shard() const override { return shard_; }
  const FsdpLayout& fsdp_layout() const override { return fsdp_; }
  void SetUnitAccess(UnitAccess* access) override {
    if (!fsdp_.enabled()) throw std::logic_error("SetUnitAccess on a model without FSDP");
    access_ = access;
  }

 private:
  void ReserveActivations(size_t tokens);
  // Tensor `slot` inside its unit's buffer `unit_base` (UnitAccess's unit-local view).
  template <typename T>
  T* Tensor(T* unit_base, size_t slot) const {
    return unit_base + unit_offsets_[slot];
  }
  UnitAccess& Access() const {
    if (access_ == nullptr) throw std::logic_error("an FSDP model stepped before SetUnitAccess");
    return *access_;
  }
  void BlockForward(int layer, const float* residual, int batch, int seq);
  void BlockBackward(int layer, const std::function<void(size_t slot)>& ready);

  OptimizerShard shard_;
  FsdpLayout fsdp_;
  std::vector<ParameterUnit> units_;
  std::vector<size_t> unit_offsets_;  // per slot: its offset inside its unit
  std::vector<AdamWRange> adamw_ranges_;  // offsets into params_ and grads_
  size_t moment_offset_;                  // m_ and v_ element i is params_ element moment_offset_ + i
  std::unique_ptr<UnitAccess> flat_access_;  // views of params_ and grads_ (without FSDP)
  UnitAccess* access_;

  // Activations for up to capacity_tokens_ rows, all in activations_.
  size_t capacity_tokens_ = 0;
  std::vector<float> activations_;
  float* encoded_ = nullptr;  // (N, C) token + position embedding
  std::vector<BlockActivations> blocks_;
  float* lnf_ = nullptr;       // (N, C)
  float* lnf_mean_ = nullptr;  // (N)
  float* lnf_rstd_ = nullptr;  // (N)
  float* logits_ = nullptr;    // (N, V) logits, then probabilities, then their gradient
  // Gradient scratch for backward.
  float* residual_grad_ = nullptr;  // (N, C) gradient of the residual stream
  float* channel_grad_ = nullptr;   // (N, C) gradient of a LayerNorm output or of the attention output
  float* hidden_grad_ = nullptr;    // (N, 4C) gradient of the MLP hidden, and later of qkv (N, 3C)
  std::vector<float> attention_scratch_;  // (2, block rows, maxT)

  // The last Forward's batch, kept for Backward.
  std::vector<int32_t> inputs_;   // (N)
  std::vector<int32_t> targets_;  // (N)
  int batch_ = 0;
  int seq_ = 0;
  bool backward_pending_ = false;
  float loss_ = 0.0f;
};

void CpuTransformer::ReserveActivations(size_t tokens) {
  if (tokens <= capacity_tokens_) return;
  const size_t n = tokens;
  const size_t c = config_.d_model;
  const size_t hidden = static_cast<size_t>(config_.mlp_ratio) * c;
  // One pass to count, one to point: the layout of activations_ is written down once.
  size_t used = 0;
  float* base = nullptr;
  auto take = [&](size_t count) {
    float* p = base == nullptr ? nullptr : base + used;
    used += count;
    return p;
  };
  blocks_.resize(config_.layers);
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) {
      // The old buffer goes before the new one arrives, so that growing never holds both.
      activations_.clear();
      activations_.shrink_to_fit();
      try {
        activations_.resize(used);
      } catch (const std::bad_alloc&) {
        capacity_tokens_ = 0;
        throw RuntimeError("the CPU transformer could not allocate " + FormatBytes(used * sizeof(float)) +
                           " of activations for " + std::to_string(n) +
                           " tokens per step HINT: a smaller --micro-batch or --seq needs less");
      }
      base = activations_.data();
      used = 0;
    }
    encoded_ = take(n * c);
    for (BlockActivations& a : blocks_) {
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
      a.fch = take(n * hidden);
      a.fch_gelu = take(n * hidden);
      a.residual3 = take(n * c);
    }
    lnf_ = take(n * c);
    lnf_mean_ = take(n);
    lnf_rstd_ = take(n);
    logits_ = take(n * config_.vocab);
    residual_grad_ = take(n * c);
    channel_grad_ = take(n * c);
    hidden_grad_ = take(n * std::max(hidden, 3 * c));
  }
  inputs_.resize(n);
  targets_.resize(n);
  capacity_tokens_ = n;
}

void CpuTransformer::SetBatch(const TokenBatch& batch) {
  CheckBatchShape(config_, batch.batch, batch.seq);
  backward_pending_ = false;  // the activations are about to change
  ReserveActivations(static_cast<size_t>(batch.batch) * batch.seq);
  UnpackTokens(batch, static_cast<uint64_t>(config_.vocab), inputs_.data(), targets_.data());
  batch_ = batch.batch;
  seq_ = batch.seq;
}

void CpuTransformer::Forward() {
  if (batch_ == 0) throw RuntimeError("Transformer::Forward called before SetBatch");
  backward_pending_ = false;
  const int batch = batch_;
  const int seq = seq_;
  const size_t n = static_cast<size_t>(batch) * seq;
  const int c = config_.d_model;

  UnitAccess& access = Access();
  const float* embeddings = access.Parameters(kEmbeddingUnit);  // held to the end of backward (the tied LM head)
  BeginOp(OpKind::kEmbedding, false);
  cpu::EncoderForward(encoded_, inputs_.data(), Tensor(embeddings, kWteSlot), Tensor(embeddings, kWpeSlot), batch,
                      seq, c);
  const float* residual = encoded_;  // (N, C)
  for (int l = 0; l < config_.layers; ++l) {
    BlockForward(l, residual, batch, seq);
    residual = blocks_[l].residual3;
  }
  const float* lnf = access.Parameters(FinalNormUnit(config_.layers));  // held likewise
  const size_t lnf_slot = LnfWeightSlot(config_.layers);
  BeginOp(OpKind::kLayerNorm, false);
  cpu::LayerNormForward(lnf_, lnf_mean_, lnf_rstd_, residual, Tensor(lnf, lnf_slot), Tensor(lnf, lnf_slot + 1), n, c);
  // The tied LM head reads only wte's first V rows, so the padding rows never reach the logits.
  BeginOp(OpKind::kLmHead, false);
  cpu::MatmulForward(logits_, lnf_, Tensor(embeddings, kWteSlot), nullptr, nullptr, n, c, config_.vocab);
  loss_ = cpu::CrossEntropyForward(logits_, targets_.data(), n, config_.vocab);
  EndOps();
  backward_pending_ = true;
}

void CpuTransformer::BlockForward(int l, const float* residual, int batch, int seq) {
  const size_t n = static_cast<size_t>(batch) * seq;
  const int c = config_.d_model;
  const int hidden = config_.mlp_ratio * c;
  const float* unit = Access().Parameters(BlockUnit(l));
  auto w = [&](BlockTensor t) { return Tensor(unit, BlockSlot(l, t)); };
  BlockActivations& a = blocks_[l];
  BeginOp(OpKind::kLayerNorm, false);
  cpu::LayerNormForward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, w(kLn1Weight), w(kLn1Bias), n, c);
  BeginOp(OpKind::kAttention, false);
  cpu::MatmulForward(a.qkv, a.ln1, w(kQkvWeight), w(kQkvBias), nullptr, n, c, 3 * c);
  cpu::AttentionForward(a.atty, a.att_lse, attention_scratch_.data(), a.qkv, batch, seq, c, config_.heads);
  cpu::MatmulForward(a.residual2, a.atty, w(kAttnProjWeight), w(kAttnProjBias), residual, n, c, c);
  BeginOp(OpKind::kLayerNorm, false);
  cpu::LayerNormForward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w(kLn2Weight), w(kLn2Bias), n, c);
  BeginOp(OpKind::kMlp, false);
  cpu::MatmulForward(a.fch, a.ln2, w(kFcWeight), w(kFcBias), nullptr, n, c, hidden);
  cpu::GeluForward(a.fch_gelu, a.fch, n * hidden);
  cpu::MatmulForward(a.residual3, a.fch_gelu, w(kMlpProjWeight), w(kMlpProjBias), a.residual2, n, hidden, c);
  Access().ParametersDone(BlockUnit(l));
}

void CpuTransformer::Backward(const std::function<void(size_t slot)>& gradient_ready, GradientWrite write) {
  // Backward turns the probabilities into their gradient in place, so it runs once per Forward.
  if (!backward_pending_) throw RuntimeError("Transformer::Backward called without a Forward before it");
  backward_pending_ = false;
  auto ready = [&](size_t slot) {
    if (gradient_ready) gradient_ready(slot);
  };
  const size_t n = static_cast<size_t>(batch_) * seq_;
  const int c = config_.d_model;
  UnitAccess& access = Access();
  BeginBackward(write, units_.size());
  // Slots are reported in descending order: lnf, the blocks from last to first, wpe, and wte last.
  const float* embeddings = access.Parameters(kEmbeddingUnit);
  float* embedding_grads = BackwardGradients(access, kEmbeddingUnit, units_[kEmbeddingUnit].elements());
  BeginOp(OpKind::kLmHead, true);
  cpu::CrossEntropyBackward(logits_, targets_.data(), n, config_.vocab);  // logits_ now holds d loss / d logits
  ScaleLossGradient(logits_, n * static_cast<size_t>(config_.vocab));
  cpu::MatmulBackward(channel_grad_, Tensor(embedding_grads, kWteSlot), nullptr, logits_, lnf_,
                      Tensor(embeddings, kWteSlot), n, c, config_.vocab);
  std::fill(residual_grad_, residual_grad_ + n * c, 0.0f);
  const size_t lnf_unit = FinalNormUnit(config_.layers), lnf_slot = LnfWeightSlot(config_.layers);
  const float* lnf = access.Parameters(lnf_unit);
  float* lnf_grads = BackwardGradients(access, lnf_unit, units_[lnf_unit].elements());
  BeginOp(OpKind::kLayerNorm, true);
  cpu::LayerNormBackward(residual_grad_, Tensor(lnf_grads, lnf_slot), Tensor(lnf_grads, lnf_slot + 1), channel_grad_,
                         blocks_.back().residual3, Tensor(lnf, lnf_slot), lnf_mean_, lnf_rstd_, n, c);
  ready(lnf_slot + 1);
  ready(lnf_slot);
  access.GradientsDone(lnf_unit);
  access.ParametersDone(lnf_unit);

  // residual_grad_ (N, C) carries the gradient of the residual stream down through the blocks; each
  // residual add passes it on unchanged and each LayerNorm adds its input gradient to it.
  for (int l = config_.layers - 1; l >= 0; --l) BlockBackward(l, ready);
  BeginOp(OpKind::kEmbedding, true);
  cpu::EncoderBackward(Tensor(embedding_grads, kWteSlot), Tensor(embedding_grads, kWpeSlot), residual_grad_,
                       inputs_.data(), batch_, seq_, c);
  ready(kWpeSlot);
  ready(kWteSlot);
  EndOps();
  access.GradientsDone(kEmbeddingUnit);
  access.ParametersDone(kEmbeddingUnit);
}

void CpuTransformer::BlockBackward(int l, const std::function<void(size_t slot)>& ready) {
  const size_t n = static_cast<size_t>(batch_) * seq_;
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
  const BlockActivations& a = blocks_[l];
  const float* residual = l > 0 ? blocks_[l - 1].residual3 : encoded_;
  BeginOp(OpKind::kMlp, true);
  cpu::MatmulBackward(hidden_grad_, g(kMlpProjWeight), g(kMlpProjBias), residual_grad_, a.fch_gelu,
                      w(kMlpProjWeight), n, hidden, c);
  ready_pair(kMlpProjWeight, kMlpProjBias);
  cpu::GeluBackward(hidden_grad_, a.fch, n * hidden);
  cpu::MatmulBackward(channel_grad_, g(kFcWeight), g(kFcBias), hidden_grad_, a.ln2, w(kFcWeight), n, c, hidden);
  ready_pair(kFcWeight, kFcBias);
  BeginOp(OpKind::kLayerNorm, true);
  cpu::LayerNormBackward(residual_grad_, g(kLn2Weight), g(kLn2Bias), channel_grad_, a.residual2, w(kLn2Weight),
                         a.ln2_mean, a.ln2_rstd, n, c);
  ready_pair(kLn2Weight, kLn2Bias);
  BeginOp(OpKind::kAttention, true);
  cpu::MatmulBackward(channel_grad_, g(kAttnProjWeight), g(kAttnProjBias), residual_grad_, a.atty,
                      w(kAttnProjWeight), n, c, c);
  ready_pair(kAttnProjWeight, kAttnProjBias);
  float* qkv_grad = hidden_grad_;  // (N, 3C): the MLP's hidden gradient is spent by now
  cpu::AttentionBackward(qkv_grad, attention_scratch_.data(), channel_grad_, a.qkv, a.att_lse, batch_, seq_, c,
                         config_.heads);
  cpu::MatmulBackward(channel_grad_, g(kQkvWeight), g(kQkvBias), qkv_grad, a.ln1, w(kQkvWeight), n, c, 3 * c);
  ready_pair(kQkvWeight, kQkvBias);
  BeginOp(OpKind::kLayerNorm, true);
  cpu::LayerNormBackward(residual_grad_, g(kLn1Weight), g(kLn1Bias), channel_grad_, residual, w(kLn1Weight),
                         a.ln1_mean, a.ln1_rstd, n, c);
  ready_pair(kLn1Weight, kLn1Bias);
  Access().GradientsDone(BlockUnit(l));
  Access().ParametersDone(BlockUnit(l));
}

void CpuTransformer::AdamWStep(const AdamWConfig& config, int64_t step) {
  if (step < 1) throw InputError("AdamW step counts from 1, got " + std::to_string(step));
  // The moments hold the shard's elements: parameter element i is moment i - moment_offset_.
  BeginOp(OpKind::kOptimizer, true);
  for (const AdamWRange& r : adamw_ranges_) {
    cpu::AdamWUpdate(params_.data() + r.offset, grads_.data() + r.offset, m_.data() + (r.offset - moment_offset_),
                     v_.data() + (r.offset - moment_offset_), r.count, config, r.decay ? config.weight_decay : 0.0f,
                     step);
  }
  EndOps();
}

}  // namespace

std::unique_ptr<Transformer> MakeCpuTransformer(const ModelConfig& config, uint64_t seed,
                                                const OptimizerShard& shard, const FsdpLayout& fsdp) {
  ValidateModel(config);
  try {
    return std::make_unique<CpuTransformer>(config, seed, shard, fsdp);
  } catch (const std::bad_alloc&) {
    const std::vector<TensorSlot> layout = MakeLayout(config);
    const uint64_t bytes = 4 * sizeof(float) * (layout.back().offset + layout.back().count);
    throw RuntimeError("the CPU transformer for model '" + config.name + "' could not allocate " +
                       FormatBytes(bytes) + " for fp32 parameters, gradients and AdamW moments HINT: run fewer " +
                       "layers of the same shape with --layers N");
  }
}

}  // namespace tb
