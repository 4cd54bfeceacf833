// The CPU reference of Megatron-LM tensor parallelism (tensor_parallel.h): the model of cpu_transformer.cc split
// over the T ranks of a communicator, fp32 throughout, every layer through cpu_kernels with local shapes, each
// activation all-reduce blocking (host memory, the MPI backend). Shapes: N = B·S tokens, C = d_model, Cl = C/T (the
// local heads' channels), Fl = 4C/T (the local MLP hidden), Vl = Vp/T (the local vocabulary rows, of which the first
// `vocab_used` are real tokens: the padding rows never reach the logits, as in the full model).
//
// Replicated parameters (LayerNorms, the row-parallel biases, wpe, lnf) get bit-identical gradients on every rank of
// the group without any all-reduce of their own: every input of their gradients is either replicated by
// construction (the residual stream, its gradient, the LayerNorm inputs) or the result of an all-reduce, which every
// rank receives with the same bits; so AdamW keeps them identical too (tests/tensor_parallel_mpi_test.cc checks it).
//
// Tensor parallel inside pipeline stages (Megatron's TP x PP): a model may hold one PipelineStage, the local slices of
// the stage's tensors only, and the activations of its blocks for each of its micro-batch slots; the residual stream
// at the stage's edges is whole and replicated on the group, as it is between the blocks.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "clock.h"
#include "cpu_flat_model.h"
#include "cpu_kernels.h"
#include "error.h"
#include "tensor_parallel.h"
#include "units.h"
#include "vocab_parallel_math.h"

namespace tb {
namespace {

using LocalDims = TensorParallelDims;

// What one block keeps from forward for backward, at local widths where the tensor is split.
struct LocalBlockActivations {
  std::vector<float> ln1, ln1_mean, ln1_rstd;  // (N, C), (N), (N)
  std::vector<float> qkv;                      // (N, 3Cl): [q | k | v] of the local heads
  std::vector<float> atty;                     // (N, Cl) attention output, before the projection
  std::vector<float> att_lse;                  // (B, H/T, S)
  std::vector<float> residual2;                // (N, C)
  std::vector<float> ln2, ln2_mean, ln2_rstd;  // (N, C), (N), (N)
  std::vector<float> fch, fch_gelu;            // (N, Fl)
  std::vector<float> residual3;                // (N, C) the block's output
};

void ReserveBlock(LocalBlockActivations& a, size_t n, const LocalDims& d) {
  const size_t c = d.c, lc = d.channels, lf = d.hidden;
  for (std::vector<float>* v : {&a.ln1, &a.residual2, &a.ln2, &a.residual3}) v->resize(n * c);
  for (std::vector<float>* v : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd}) v->resize(n);
  a.qkv.resize(n * 3 * lc);
  a.atty.resize(n * lc);
  a.att_lse.resize(n * d.heads);
  a.fch.resize(n * lf);
  a.fch_gelu.resize(n * lf);
}

// What one micro-batch slot keeps from its Forward to its Backward: its batch, and the activations of the stage's
// blocks and of its edges.
struct SlotActivations {
  std::vector<int32_t> inputs, targets;  // (N)
  int batch = 0;
  int seq = 0;
  size_t capacity_tokens = 0;
  std::vector<float> encoded;                  // (N, C) the first block's input: the embedding, or stage_edges().input
  std::vector<LocalBlockActivations> blocks;   // the stage's, from its first layer
  std::vector<float> lnf, lnf_mean, lnf_rstd;  // (N, C), (N), (N): the last stage's
  std::vector<float> logits;       // (N, vocab_used) the last stage's: logits, then probabilities, then their gradient
  std::vector<float> output_grad;  // (N, C) stage_edges().output_grad: a stage before the last's
  bool backward_pending = false;
  float loss = 0.0f;
  size_t tokens() const { return static_cast<size_t>(batch) * seq; }
};

float RowMax(const float* row, int count) {
  return count > 0 ? *std::max_element(row, row + count) : -std::numeric_limits<float>::infinity();
}

// The stage's local elements (`stage_layout`) with the bits the unsplit tensor-parallel model (`unsplit`) has in them:
// each stretch of the full model's initialisation that lands in a held slot, moved to that slot's place in the stage.
void InitializeLocalStage(const ModelConfig& config, const LocalDims& dims, const std::vector<TensorSlot>& unsplit,
                          const std::vector<TensorSlot>& stage_layout, uint64_t seed, float* local) {
  const std::vector<TensorSlot> full = MakeLayout(config);
  size_t slot = 0;
  for (const TensorParallelStretch& s : TensorParallelStretches(config, dims.tp, dims.rank)) {
    while (s.local >= unsplit[slot].offset + unsplit[slot].count) ++slot;  // stretches come in local order
    if (stage_layout[slot].count == 0) continue;
    float* dest = local + stage_layout[slot].offset + (s.local - unsplit[slot].offset);
    InitializeParameterRange(config, full, seed, s.full, s.full + s.count, dest);
  }
}

class CpuTensorParallelTransformer : public CpuFlatModel, public TensorParallelStats {
 public:
  // `placement`: resolved over TensorParallelLayout(config, tp.size()).
  CpuTensorParallelTransformer(const ModelConfig& config, uint64_t seed, Communicator& tp,
                               const ModelPlacement& placement)
      : CpuFlatModel(config, TensorParallelLayout(config, tp.size()), placement),
        tp_(tp),
        dims_(MakeTensorParallelDims(config, tp.size(), tp.rank())),
        unsplit_layout_(TensorParallelLayout(config, tp.size())),
        units_(ParameterUnits(layout_)),
        // A stage holds each unit whole or not at all, but for the last stage's embeddings (wte, the unit's first
        // tensor, without wpe): a held tensor sits where it sits in the unsplit layout's unit. (The stage layout's
        // own empty units at its end would defeat SlotUnits' and UnitOffsets' walk.)
        unit_offsets_(UnitOffsets(unsplit_layout_)),
        slot_units_(SlotUnits(unsplit_layout_)),
        adamw_ranges_(LocalAdamWRanges()),
        held_params_(units_.size(), nullptr),
        held_grads_(units_.size(), nullptr),
        attention_scratch_(2 * static_cast<size_t>(cpu::kAttentionBlockRows) * config.seq),
        slots_(stage().slots) {
    const FsdpLayout& fsdp = placement_.fsdp;
    std::vector<float> whole;
    if (fsdp.enabled()) whole.resize(elements_);
    float* local = fsdp.enabled() ? whole.data() : params_.data();
    InitializeLocalStage(config_, dims_, unsplit_layout_, layout_, seed, local);
    if (fsdp.enabled()) {  // the shards of `whole` (the local elements) that fsdp gives this rank
      FillFsdpShards(fsdp, params_.data(), [&](size_t begin, size_t end, float* dest) {
        std::copy(whole.data() + begin, whole.data() + end, dest);
      });
    }
  }

  using Transformer::SetBatch;
  void SetBatch(const TokenBatch& batch) override;
  void Forward() override;
  float Loss() override { return Current().loss; }
  using Transformer::Backward;
  void Backward(const std::function<void(size_t slot)>& gradient_ready, GradientWrite write) override;
  void AdamWStep(const AdamWConfig& config, int64_t step) override;
  void SelectMicroBatch(int slot) override { slot_ = CheckedSlot(stage(), slot); }
  StageEdges stage_edges() override;

  // TensorParallelStats.
  int tensor_parallel() const override { return dims_.tp; }
  int tensor_parallel_rank() const override { return dims_.rank; }
  TensorParallelComm last_step_comm() const override { return step_comm_; }
  TensorParallelComm TakeComm() override { return std::exchange(take_comm_, TensorParallelComm{}); }

 private:
  std::vector<AdamWRange> LocalAdamWRanges() const {
    // AdamWRanges leaves out wte's rows from config.vocab on: locally, those past the real tokens of the slice.
    ModelConfig local = config_;
    local.vocab = dims_.vocab_used;
    return PlacementAdamWRanges(local, layout_, placement_);
  }
  // A tensor of a unit held now (its parameters or its gradients), through the UnitAccess: the model's own buffers,
  // or under fsdp the gatherer's whole units.
  const float* P(size_t slot) const { return Held(held_params_, slot); }
  float* G(size_t slot) { return Held(held_grads_, slot); }
  template <typename T>
  T* Held(const std::vector<T*>& held, size_t slot) const {
    T* unit = held[slot_units_[slot]];
    if (unit == nullptr) throw std::logic_error("a tensor-parallel slot read outside its unit's hold");
    return unit + unit_offsets_[slot];
  }
  void Hold(size_t unit, bool gradients) {
    held_params_[unit] = Access().Parameters(unit);
    if (gradients) held_grads_[unit] = BackwardGradients(Access(), unit, units_[unit].elements());
  }
  void Release(size_t unit, bool gradients) {
    if (gradients) {
      Access().GradientsDone(unit);
      held_grads_[unit] = nullptr;
    }
    Access().ParametersDone(unit);
    held_params_[unit] = nullptr;
  }
  SlotActivations& Current() { return slots_[slot_]; }
  LocalBlockActivations& Block(SlotActivations& a, int layer) const { return a.blocks[layer - stage().first_layer]; }
  void ReserveActivations(SlotActivations& a, size_t tokens);
  void AllReduce(float* data, size_t count, ReduceOp op);
  void EmbeddingForward(SlotActivations& a);
  void BlockForward(SlotActivations& a, int layer, const float* residual);
  void RowParallelForward(float* out, const float* in, const float* weight, const float* bias, const float* residual,
                          size_t tokens, int in_channels);
  float HeadForward(SlotActivations& a, const float* residual);
  float VocabParallelCrossEntropy(SlotActivations& a);
  void HeadBackward(SlotActivations& a, const std::function<void(size_t slot)>& ready);
  void BlockBackward(SlotActivations& a, int layer, const std::function<void(size_t slot)>& ready);
  void EmbeddingBackward(const SlotActivations& a);

  Communicator& tp_;
  LocalDims dims_;
  std::vector<TensorSlot> unsplit_layout_;  // TensorParallelLayout: every slot held
  std::vector<ParameterUnit> units_;
  std::vector<size_t> unit_offsets_;  // per slot: its offset inside its unit
  std::vector<size_t> slot_units_;    // per slot: its unit
  std::vector<AdamWRange> adamw_ranges_;
  std::vector<const float*> held_params_;  // per unit: its parameters while held, else nullptr
  std::vector<float*> held_grads_;         // per unit: its gradients while held
  std::vector<float> attention_scratch_;  // (2, block rows, maxS)

  std::vector<SlotActivations> slots_;  // stage().slots of them
  int slot_ = 0;                        // SelectMicroBatch's
  // Scratch the slots share, for the most tokens any of them holds.
  size_t scratch_tokens_ = 0;
  std::vector<float> row_max_;   // (N) the global row maxima of the logits
  std::vector<float> row_sums_;  // (2N): the sums of exp over the whole vocabulary | the target logits
  // (N, C): the residual stream's gradient, carried in place from the stage's output to its input (so, after a
  // Backward, stage_edges().input_grad), and the gradient of a LayerNorm's output.
  std::vector<float> residual_grad_, channel_grad_;
  std::vector<float> hidden_grad_;  // (N, Fl), later the qkv gradient (N, 3Cl)

  TensorParallelComm step_comm_;  // since the last Forward began
  TensorParallelComm take_comm_;  // since the last TakeComm
};

void CpuTensorParallelTransformer::AllReduce(float* data, size_t count, ReduceOp op) {
  if (dims_.tp == 1) return;  // a group of one has nothing to combine
  double seconds = 0;
  MarkWait(op_times(), [&] {  // --op-times' comm_model
    const double start = NowSeconds();
    tp_.AllReduce(data, data, count, DataType::kFloat32, op);
    seconds = NowSeconds() - start;
  });
  for (TensorParallelComm* c : {&step_comm_, &take_comm_}) {
    c->allreduces += 1;
    c->elements += count;
    c->bytes += count * sizeof(float);
    c->seconds += seconds;
  }
}

void CpuTensorParallelTransformer::ReserveActivations(SlotActivations& a, size_t n) {
  const size_t c = dims_.c;
  if (n > a.capacity_tokens) {
    a.blocks.resize(stage().end_layer - stage().first_layer);
    for (LocalBlockActivations& b : a.blocks) ReserveBlock(b, n, dims_);
    a.encoded.resize(n * c);
    if (stage().last()) {
      a.lnf.resize(n * c);
      for (std::vector<float>* v : {&a.lnf_mean, &a.lnf_rstd}) v->resize(n);
      a.logits.resize(n * dims_.vocab_used);
    } else {
      a.output_grad.resize(n * c);
    }
    a.inputs.resize(n);
    a.targets.resize(n);
    a.capacity_tokens = n;
  }
  if (n > scratch_tokens_) {
    for (std::vector<float>* v : {&residual_grad_, &channel_grad_}) v->resize(n * c);
    row_max_.resize(n);
    row_sums_.resize(2 * n);
    hidden_grad_.resize(n * std::max(dims_.hidden, 3 * dims_.channels));
    scratch_tokens_ = n;
  }
}

void CpuTensorParallelTransformer::SetBatch(const TokenBatch& batch) {
  CheckBatchShape(config_, batch.batch, batch.seq);
  SlotActivations& a = Current();
  a.backward_pending = false;
  try {
    ReserveActivations(a, static_cast<size_t>(batch.batch) * batch.seq);
  } catch (const std::bad_alloc&) {
    a.capacity_tokens = 0;
    scratch_tokens_ = 0;
    throw RuntimeError("the tensor-parallel CPU transformer could not allocate activations for " +
                       std::to_string(static_cast<size_t>(batch.batch) * batch.seq) +
                       " tokens per step HINT: a smaller --micro-batch or --seq needs less");
  }
  UnpackTokens(batch, static_cast<uint64_t>(config_.vocab), a.inputs.data(), a.targets.data());
  a.batch = batch.batch;
  a.seq = batch.seq;
}

Transformer::StageEdges CpuTensorParallelTransformer::stage_edges() {
  SlotActivations& a = Current();
  if (a.capacity_tokens == 0) return {};  // nothing to point at before the slot's first SetBatch
  StageEdges edges;
  edges.count = a.tokens() * dims_.c;
  if (!stage().first()) {
    edges.input = a.encoded.data();
    edges.input_grad = residual_grad_.data();  // shared by the slots: the last Backward's, until the next
  }
  if (!stage().last()) {
    edges.output = a.blocks.back().residual3.data();
    edges.output_grad = a.output_grad.data();
  }
  return edges;
}

void CpuTensorParallelTransformer::Forward() {
  SlotActivations& a = Current();
  if (a.batch == 0) throw RuntimeError("Transformer::Forward called before SetBatch");
  a.backward_pending = false;
  step_comm_ = {};
  if (stage().first()) {
    Hold(kEmbeddingUnit, false);  // held to the end of backward (the tied LM head), as the full model does
    BeginOp(OpKind::kEmbedding, false);
    EmbeddingForward(a);
  }  // a later stage's a.encoded is stage_edges().input, which the caller wrote
  const float* residual = a.encoded.data();
  for (int l = stage().first_layer; l < stage().end_layer; ++l) {
    Hold(BlockUnit(l), false);
    BlockForward(a, l, residual);
    Release(BlockUnit(l), false);
    residual = Block(a, l).residual3.data();
  }
  a.loss = stage().last() ? HeadForward(a, residual) : std::numeric_limits<float>::quiet_NaN();
  EndOps();
  a.backward_pending = true;
}

// Each rank writes the rows of the tokens it holds and zeros elsewhere; the sum over the group is the lookup (adding
// zeros is exact, so the result has the full model's bits), and wpe is added after, once.
void CpuTensorParallelTransformer::EmbeddingForward(SlotActivations& a) {
  const size_t c = dims_.c, n = a.tokens();
  const float* wte = P(kWteSlot);
  const float* wpe = P(kWpeSlot);
  for (size_t row = 0; row < n; ++row) {
    float* out = a.encoded.data() + row * c;
    const int local = a.inputs[row] - dims_.vocab_begin;
    if (local >= 0 && local < dims_.vocab_rows) {
      std::copy_n(wte + static_cast<size_t>(local) * c, c, out);
    } else {
      std::fill_n(out, c, 0.0f);
    }
  }
  AllReduce(a.encoded.data(), n * c, ReduceOp::kSum);
  for (size_t row = 0; row < n; ++row) {
    const float* position = wpe + (row % a.seq) * c;
    float* out = a.encoded.data() + row * c;
    for (size_t k = 0; k < c; ++k) out[k] += position[k];
  }
}

void CpuTensorParallelTransformer::BlockForward(SlotActivations& act, int l, const float* residual) {
  const size_t n = act.tokens();
  const int c = dims_.c, lc = dims_.channels, lf = dims_.hidden;
  auto w = [&](BlockTensor t) { return P(BlockSlot(l, t)); };
  LocalBlockActivations& a = Block(act, l);
  BeginOp(OpKind::kLayerNorm, false);
  cpu::LayerNormForward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), residual, w(kLn1Weight), w(kLn1Bias), n, c);
  BeginOp(OpKind::kAttention, false);
  // Column-parallel: the local weight's rows are [q | k | v] of the local heads, so the output is the layout the
  // attention kernel takes at width Cl with H/T heads; no repacking.
  cpu::MatmulForward(a.qkv.data(), a.ln1.data(), w(kQkvWeight), w(kQkvBias), nullptr, n, c, 3 * lc);
  cpu::AttentionForward(a.atty.data(), a.att_lse.data(), attention_scratch_.data(), a.qkv.data(), act.batch, act.seq,
                        lc, dims_.heads);
  RowParallelForward(a.residual2.data(), a.atty.data(), w(kAttnProjWeight), w(kAttnProjBias), residual, n, lc);
  BeginOp(OpKind::kLayerNorm, false);
  cpu::LayerNormForward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual2.data(), w(kLn2Weight),
                        w(kLn2Bias), n, c);
  BeginOp(OpKind::kMlp, false);
  cpu::MatmulForward(a.fch.data(), a.ln2.data(), w(kFcWeight), w(kFcBias), nullptr, n, c, lf);
  cpu::GeluForward(a.fch_gelu.data(), a.fch.data(), n * lf);
  RowParallelForward(a.residual3.data(), a.fch_gelu.data(), w(kMlpProjWeight), w(kMlpProjBias), a.residual2.data(), n,
                     lf);
}

// out (N, C) = residual + bias + all-reduce(in (N, in_channels) · weightᵀ): the partial products summed over the
// group, the replicated bias and residual added once, after.
void CpuTensorParallelTransformer::RowParallelForward(float* out, const float* in, const float* weight,
                                                      const float* bias, const float* residual, size_t n,
                                                      int in_channels) {
  const size_t c = dims_.c;
  cpu::MatmulForward(out, in, weight, nullptr, nullptr, n, in_channels, dims_.c);
  AllReduce(out, n * c, ReduceOp::kSum);
  for (size_t r = 0; r < n; ++r) {
    float* o = out + r * c;
    const float* res = residual + r * c;
    for (size_t k = 0; k < c; ++k) o[k] = (res[k] + bias[k]) + o[k];  // the full model's order: residual + bias first
  }
}

// The last stage's: the final LayerNorm, the tied LM head over the local slice's real rows only (padding rows never
// reach the logits) and the cross-entropy. Returns the mean loss.
float CpuTensorParallelTransformer::HeadForward(SlotActivations& a, const float* residual) {
  if (!stage().first()) Hold(kEmbeddingUnit, false);  // the head's copy of wte, held to the end of backward
  Hold(FinalNormUnit(config_.layers), false);        // held likewise
  const size_t lnf = LnfWeightSlot(config_.layers);
  BeginOp(OpKind::kLayerNorm, false);
  cpu::LayerNormForward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), residual, P(lnf), P(lnf + 1), a.tokens(),
                        dims_.c);
  BeginOp(OpKind::kLmHead, false);
  if (dims_.vocab_used > 0) {
    cpu::MatmulForward(a.logits.data(), a.lnf.data(), P(kWteSlot), nullptr, nullptr, a.tokens(), dims_.c,
                       dims_.vocab_used);
  }
  return VocabParallelCrossEntropy(a);
}

// Megatron's vocab-parallel cross-entropy: the global row maxima (all-reduce max), then the sums of exp over the whole
// vocabulary and the target logits, which only the rank holding the target contributes (one all-reduce of 2N).
// a.logits ends as the probabilities of the local slice, for backward. Returns the mean loss (the same on every rank).
float CpuTensorParallelTransformer::VocabParallelCrossEntropy(SlotActivations& a) {
  const size_t n = a.tokens();
  const int used = dims_.vocab_used;
  for (size_t r = 0; r < n; ++r) row_max_[r] = RowMax(a.logits.data() + r * used, used);
  AllReduce(row_max_.data(), n, ReduceOp::kMax);
  float* sums = row_sums_.data();
  float* target_logits = row_sums_.data() + n;
  for (size_t r = 0; r < n; ++r) {
    float* row = a.logits.data() + r * used;
    const int target = a.targets[r] - dims_.vocab_begin;
    target_logits[r] = target >= 0 && target < used ? row[target] : 0.0f;
    float sum = 0.0f;
    for (int j = 0; j < used; ++j) sum += (row[j] = cpu::Exp(row[j] - row_max_[r]));
    sums[r] = sum;
  }
  AllReduce(row_sums_.data(), 2 * n, ReduceOp::kSum);
  double loss_sum = 0.0;
  for (size_t r = 0; r < n; ++r) {
    float* row = a.logits.data() + r * used;
    const float inverse = 1.0f / sums[r];
    for (int j = 0; j < used; ++j) row[j] *= inverse;
    loss_sum += std::log(sums[r]) + row_max_[r] - target_logits[r];
  }
  return static_cast<float>(loss_sum / n);
}

void CpuTensorParallelTransformer::Backward(const std::function<void(size_t slot)>& gradient_ready,
                                           GradientWrite write) {
  SlotActivations& a = Current();
  if (!a.backward_pending) throw RuntimeError("Transformer::Backward called without a Forward before it");
  a.backward_pending = false;
  BeginBackward(write, units_.size());
  auto ready = [&](size_t slot) {
    if (gradient_ready) gradient_ready(slot);
  };
  // The units in the full model's order: the embeddings and the final LayerNorm (held since forward, asked for
  // again with their gradients), then the blocks from the last; every held slot reported in descending order.
  const bool embeddings = stage().first() || stage().last();
  if (embeddings) Hold(kEmbeddingUnit, true);
  if (stage().last()) {
    HeadBackward(a, ready);  // residual_grad_: the gradient of the last block's output
  } else {
    std::copy_n(a.output_grad.data(), a.tokens() * dims_.c, residual_grad_.data());
  }
  for (int l = stage().end_layer - 1; l >= stage().first_layer; --l) {
    Hold(BlockUnit(l), true);
    BlockBackward(a, l, ready);
    Release(BlockUnit(l), true);
  }
  if (stage().first()) {
    BeginOp(OpKind::kEmbedding, true);
    EmbeddingBackward(a);
    ready(kWpeSlot);
  }
  if (embeddings) ready(kWteSlot);
  EndOps();
  if (embeddings) Release(kEmbeddingUnit, true);
}

// The cross-entropy's gradient over the local slice, (p - onehot(target)) / N, then the tied head's: wte's local rows
// accumulate theirs, and the input gradient, a partial sum over the slice, is all-reduced; then the final
// LayerNorm's backward into residual_grad_.
void CpuTensorParallelTransformer::HeadBackward(SlotActivations& a, const std::function<void(size_t slot)>& ready) {
  const size_t n = a.tokens();
  const int used = dims_.vocab_used;
  const float inverse_rows = 1.0f / n;
  BeginOp(OpKind::kLmHead, true);
  for (size_t r = 0; r < n; ++r) {
    float* row = a.logits.data() + r * used;
    const int target = a.targets[r] - dims_.vocab_begin;
    if (target >= 0 && target < used) row[target] -= 1.0f;
    for (int j = 0; j < used; ++j) row[j] *= inverse_rows;
  }
  ScaleLossGradient(a.logits.data(), n * static_cast<size_t>(used));
  if (used > 0) {
    cpu::MatmulBackward(channel_grad_.data(), G(kWteSlot), nullptr, a.logits.data(), a.lnf.data(), P(kWteSlot), n,
                        dims_.c, used);
  } else {
    std::fill(channel_grad_.begin(), channel_grad_.end(), 0.0f);  // a slice of padding only adds nothing
  }
  AllReduce(channel_grad_.data(), n * dims_.c, ReduceOp::kSum);
  std::fill(residual_grad_.begin(), residual_grad_.end(), 0.0f);
  const size_t lnf_unit = FinalNormUnit(config_.layers), lnf = LnfWeightSlot(config_.layers);
  Hold(lnf_unit, true);
  BeginOp(OpKind::kLayerNorm, true);
  cpu::LayerNormBackward(residual_grad_.data(), G(lnf), G(lnf + 1), channel_grad_.data(),
                         a.blocks.back().residual3.data(), P(lnf), a.lnf_mean.data(), a.lnf_rstd.data(), n, dims_.c);
  ready(lnf + 1);
  ready(lnf);
  Release(lnf_unit, true);
}

// The row-parallel layers' input (the residual stream's gradient) is replicated, so their local weight gradients and
// the replicated bias gradients need no communication; the column-parallel layers' input gradients are partial sums
// over the local heads or hidden units and are all-reduced before their LayerNorm's backward.
void CpuTensorParallelTransformer::BlockBackward(SlotActivations& act, int l,
                                                 const std::function<void(size_t slot)>& ready) {
  const size_t n = act.tokens();
  const int c = dims_.c, lc = dims_.channels, lf = dims_.hidden;
  auto w = [&](BlockTensor t) { return P(BlockSlot(l, t)); };
  auto g = [&](BlockTensor t) { return G(BlockSlot(l, t)); };
  auto ready_pair = [&](BlockTensor weight, BlockTensor bias) {
    ready(BlockSlot(l, bias));
    ready(BlockSlot(l, weight));
  };
  const LocalBlockActivations& a = Block(act, l);
  const float* residual = l > stage().first_layer ? Block(act, l - 1).residual3.data() : act.encoded.data();
  float* rg = residual_grad_.data();
  float* cg = channel_grad_.data();
  float* hg = hidden_grad_.data();
  BeginOp(OpKind::kMlp, true);
  cpu::MatmulBackward(hg, g(kMlpProjWeight), g(kMlpProjBias), rg, a.fch_gelu.data(), w(kMlpProjWeight), n, lf, c);
  ready_pair(kMlpProjWeight, kMlpProjBias);
  cpu::GeluBackward(hg, a.fch.data(), n * lf);
  cpu::MatmulBackward(cg, g(kFcWeight), g(kFcBias), hg, a.ln2.data(), w(kFcWeight), n, c, lf);
  AllReduce(cg, n * c, ReduceOp::kSum);
  ready_pair(kFcWeight, kFcBias);
  BeginOp(OpKind::kLayerNorm, true);
  cpu::LayerNormBackward(rg, g(kLn2Weight), g(kLn2Bias), cg, a.residual2.data(), w(kLn2Weight), a.ln2_mean.data(),
                         a.ln2_rstd.data(), n, c);
  ready_pair(kLn2Weight, kLn2Bias);
  // channel_grad_ holds the attention output's gradient (N, Cl) here, then the qkv input gradient (N, C).
  BeginOp(OpKind::kAttention, true);
  cpu::MatmulBackward(cg, g(kAttnProjWeight), g(kAttnProjBias), rg, a.atty.data(), w(kAttnProjWeight), n, lc, c);
  ready_pair(kAttnProjWeight, kAttnProjBias);
  cpu::AttentionBackward(hg, attention_scratch_.data(), cg, a.qkv.data(), a.att_lse.data(), act.batch, act.seq, lc,
                         dims_.heads);
  cpu::MatmulBackward(cg, g(kQkvWeight), g(kQkvBias), hg, a.ln1.data(), w(kQkvWeight), n, c, 3 * lc);
  AllReduce(cg, n * c, ReduceOp::kSum);
  ready_pair(kQkvWeight, kQkvBias);
  BeginOp(OpKind::kLayerNorm, true);
  cpu::LayerNormBackward(rg, g(kLn1Weight), g(kLn1Bias), cg, residual, w(kLn1Weight), a.ln1_mean.data(),
                         a.ln1_rstd.data(), n, c);
  ready_pair(kLn1Weight, kLn1Bias);
}

// The embedding's gradient: wte's local rows for the tokens this rank holds, wpe (replicated) on every rank. Nothing
// is all-reduced: the embedding's input gradient goes nowhere.
void CpuTensorParallelTransformer::EmbeddingBackward(const SlotActivations& a) {
  const size_t c = dims_.c;
  float* wte_grad = G(kWteSlot);
  float* wpe_grad = G(kWpeSlot);
  for (size_t row = 0; row < a.tokens(); ++row) {
    const float* g = residual_grad_.data() + row * c;
    float* position = wpe_grad + (row % a.seq) * c;
    const int local = a.inputs[row] - dims_.vocab_begin;
    float* token = local >= 0 && local < dims_.vocab_rows ? wte_grad + static_cast<size_t>(local) * c : nullptr;
    for (size_t k = 0; k < c; ++k) {
      if (token != nullptr) token[k] += g[k];
      position[k] += g[k];
    }
  }
}

void CpuTensorParallelTransformer::AdamWStep(const AdamWConfig& config, int64_t step) {
  if (step < 1) throw InputError("AdamW step counts from 1, got " + std::to_string(step));
  BeginOp(OpKind::kOptimizer, true);
  for (const AdamWRange& r : adamw_ranges_) {
    // The moments hold the shard's elements (ZeRO-1's, fsdp's store): local element i at moment i - moment_offset().
    const size_t moment = r.offset - placement_.moment_offset();
    cpu::AdamWUpdate(params_.data() + r.offset, grads_.data() + r.offset, m_.data() + moment, v_.data() + moment,
                     r.count, config, r.decay ? config.weight_decay : 0.0f, step);
  }
  EndOps();
}

// The input width of a row-parallel weight: attn.proj's C, mlp.proj's mlp_ratio·C.
size_t InColumns(const ModelConfig& config, size_t slot) {
  const size_t tensor = (slot - kFirstBlockSlot) % kBlockTensors;
  return tensor == kAttnProjWeight ? static_cast<size_t>(config.d_model)
                                   : static_cast<size_t>(config.mlp_ratio) * config.d_model;
}

// The stretches of one slot; `full` and `local` are the slot in the full and the local layout.
void AddSlotStretches(const ModelConfig& config, size_t slot, const TensorSlot& full, const TensorSlot& local, int rank,
                      std::vector<TensorParallelStretch>& out) {
  switch (TensorParallelSplit(config, slot)) {
    case TensorSplit::kReplicated:
      out.push_back({local.offset, full.offset, local.count});
      break;
    case TensorSplit::kVocabRows:
    case TensorSplit::kOutRows:
      out.push_back({local.offset, full.offset + rank * local.count, local.count});
      break;
    case TensorSplit::kQkvHeads: {
      const size_t piece = local.count / 3, whole = full.count / 3;  // per q, k, v
      for (size_t j = 0; j < 3; ++j)
        out.push_back({local.offset + j * piece, full.offset + j * whole + rank * piece, piece});
      break;
    }
    case TensorSplit::kInColumns: {
      const size_t in = InColumns(config, slot), rows = full.count / in, local_in = local.count / rows;
      for (size_t o = 0; o < rows; ++o) {
        out.push_back({local.offset + o * local_in, full.offset + o * in + rank * local_in, local_in});
      }
      break;
    }
  }
}

}  // namespace

void CheckTensorParallel(const ModelConfig& config, int tensor_parallel) {
  const std::string t = std::to_string(tensor_parallel);
  if (tensor_parallel < 1) throw InputError("--tensor-parallel " + t + " must be at least 1");
  if (config.heads % tensor_parallel != 0) {
    throw InputError("--tensor-parallel " + t + " does not divide --heads " + std::to_string(config.heads) +
                     " of model '" + config.name + "' (each rank holds whole heads)");
  }
  if (config.vocab_padded % tensor_parallel != 0) {
    throw InputError("--tensor-parallel " + t + " does not divide the padded vocabulary " +
                     std::to_string(config.vocab_padded) + " of model '" + config.name +
                     "' (each rank holds an equal block of wte's rows)");
  }
}

TensorParallelDims MakeTensorParallelDims(const ModelConfig& config, int tensor_parallel, int rank) {
  TensorParallelDims d;
  d.tp = tensor_parallel;
  d.rank = rank;
  d.c = config.d_model;
  d.heads = config.heads / tensor_parallel;
  d.channels = config.d_model / tensor_parallel;
  d.hidden = config.mlp_ratio * config.d_model / tensor_parallel;
  d.vocab_rows = config.vocab_padded / tensor_parallel;
  d.vocab_begin = rank * d.vocab_rows;
  d.vocab_used = vocab_parallel::UsedRows(config.vocab, d.vocab_begin, d.vocab_rows);
  return d;
}

void CheckCudaTensorParallelWidths(const ModelConfig& config, int tensor_parallel) {
  const int t = tensor_parallel;
  if (config.d_model % 8 != 0 || (config.d_model / t) % 8 != 0 || (config.vocab_padded / t) % 8 != 0) {
    throw InputError("--tensor-parallel " + std::to_string(t) + " leaves model '" + config.name + "' local widths (" +
                     std::to_string(config.d_model / t) + " of d_model " + std::to_string(config.d_model) + ", " +
                     std::to_string(config.vocab_padded / t) + " vocabulary rows) that are not multiples of 8, " +
                     "which the CUDA transformer needs (16-byte aligned bf16 rows for cuBLASLt) HINT: a smaller " +
                     "--tensor-parallel, or --backend cpu");
  }
}

void CheckTensorParallelStep(const ModelConfig& config, int tensor_parallel, int micro_batch, int seq, bool cuda) {
  CheckTensorParallel(config, tensor_parallel);
  if (cuda) CheckCudaTensorParallelWidths(config, tensor_parallel);
  if ((static_cast<int64_t>(micro_batch) * seq) % tensor_parallel != 0) {
    throw InputError("--tensor-parallel " + std::to_string(tensor_parallel) + " does not divide the " +
                     std::to_string(static_cast<int64_t>(micro_batch) * seq) + " tokens of a step (" +
                     "--micro-batch x --seq) into equal shares");
  }
}

std::string TensorParallelModeGap(const std::string& parallel, int tensor_parallel, bool cuda) {
  if (tensor_parallel == 1 || !cuda || parallel != "fsdp") return "";
  return "with --parallel fsdp is not built on the GPUs yet: dp or zero1 across the groups, or --backend cpu (the "
         "CPU reference shards the groups by fsdp)";
}

TensorSplit TensorParallelSplit(const ModelConfig& config, size_t slot) {
  if (slot == kWteSlot) return TensorSplit::kVocabRows;
  if (slot < kFirstBlockSlot || slot >= LnfWeightSlot(config.layers)) return TensorSplit::kReplicated;
  switch ((slot - kFirstBlockSlot) % kBlockTensors) {
    case kQkvWeight:
    case kQkvBias:
      return TensorSplit::kQkvHeads;
    case kFcWeight:
    case kFcBias:
      return TensorSplit::kOutRows;
    case kAttnProjWeight:
    case kMlpProjWeight:
      return TensorSplit::kInColumns;
    default:
      return TensorSplit::kReplicated;
  }
}

std::vector<TensorSlot> TensorParallelLayout(const ModelConfig& config, int tensor_parallel) {
  CheckTensorParallel(config, tensor_parallel);
  std::vector<TensorSlot> layout = MakeLayout(config);
  size_t offset = 0;
  for (size_t s = 0; s < layout.size(); ++s) {
    // Every split tensor divides into T equal slices (T divides H, hence C and the MLP's width, and Vp).
    if (TensorParallelSplit(config, s) != TensorSplit::kReplicated) layout[s].count /= tensor_parallel;
    layout[s].offset = offset;
    offset += layout[s].count;
  }
  return layout;
}

std::vector<TensorParallelStretch> TensorParallelStretches(const ModelConfig& config, int tensor_parallel, int rank) {
  if (rank < 0 || rank >= tensor_parallel) {
    throw InputError("rank " + std::to_string(rank) + " is outside the " + std::to_string(tensor_parallel) +
                     " tensor-parallel ranks");
  }
  const std::vector<TensorSlot> full = MakeLayout(config);
  const std::vector<TensorSlot> local = TensorParallelLayout(config, tensor_parallel);
  std::vector<TensorParallelStretch> stretches;
  for (size_t s = 0; s < full.size(); ++s) AddSlotStretches(config, s, full[s], local[s], rank, stretches);
  return stretches;
}

uint64_t MegatronActivationElements(const ModelConfig& config, int batch, int seq) {
  return 4ull * config.layers * static_cast<uint64_t>(batch) * seq * config.d_model;
}

uint64_t TensorParallelAllReduceElements(const ModelConfig& config, int tensor_parallel, int batch, int seq) {
  if (tensor_parallel == 1) return 0;
  const uint64_t n = static_cast<uint64_t>(batch) * seq;
  return MegatronActivationElements(config, batch, seq) + 2 * n * config.d_model + 3 * n;
}

TensorParallelStats* TensorParallelStatsOf(Transformer& model) { return dynamic_cast<TensorParallelStats*>(&model); }

std::unique_ptr<Transformer> MakeCpuTensorParallelTransformer(const ModelConfig& config, uint64_t seed,
                                                              Communicator& tp, const ModelPlacement& placement) {
  ValidateModel(config);
  CheckTensorParallel(config, tp.size());
  if (tp.memory() != MemoryKind::kHost) {
    throw InputError("the tensor-parallel CPU transformer needs a host-memory communicator (mpi), got " + tp.backend());
  }
  const std::vector<TensorSlot> layout = TensorParallelLayout(config, tp.size());
  const ModelPlacement resolved = ResolvePlacement(config, layout, placement);
  try {
    return std::make_unique<CpuTensorParallelTransformer>(config, seed, tp, resolved);
  } catch (const std::bad_alloc&) {
    const std::vector<TensorSlot> held = StageLayout(layout, resolved.stage);
    const uint64_t bytes = 4 * sizeof(float) * (held.back().offset + held.back().count);
    throw RuntimeError("the tensor-parallel CPU transformer for model '" + config.name + "' could not allocate " +
                       FormatBytes(bytes) + " per rank for fp32 parameters, gradients and AdamW moments HINT: run " +
                       "fewer layers of the same shape with --layers N");
  }
}

}  // namespace tb
