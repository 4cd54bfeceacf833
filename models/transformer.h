// The synthetic transformer behind `trainbench train`: a GPT-2-style pre-LayerNorm decoder (learned
// positional embedding, causal multi-head attention, GELU MLP, tied LM head, cross-entropy), with forward,
// backward and AdamW. One interface, two implementations: the CPU reference (fp32, real BLAS) and the CUDA
// implementation (bf16 compute, fp32 master weights).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model_config.h"
#include "op_times.h"
#include "phase_clock.h"
#include "token_batch.h"

namespace tb {

class Communicator;

// One parameter tensor inside the flat parameter (and gradient) buffer. Tensors are laid out in forward
// order and grouped by layer — wte, wpe, then layer 0's tensors, layer 1's, ..., then the final LayerNorm —
// so that the gradients backward finishes together sit together, and a gradient bucket is a contiguous range.
struct TensorSlot {
  std::string name;   // "h3.attn.qkv.weight"
  size_t offset = 0;  // in elements, into the flat buffers
  size_t count = 0;   // elements
  int layer = -1;     // block index, or -1 for the embeddings and the final LayerNorm
  bool decay = false; // AdamW weight decay applies (matrices and embeddings, not biases or LayerNorm)
  // The element of the whole model's tensor this slot starts at: 0, except under expert parallel, where a rank holds
  // a range of an MoE block's experts (ExpertLayout).
  size_t first = 0;
};

// How Backward treats the gradients already in its buffers.
enum class GradientWrite { kOverwrite, kAccumulate };

struct AdamWConfig {
  float learning_rate = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weight_decay = 0.1f;
};

// ZeRO-1's sharded optimizer state: the parameter and gradient buffers padded with zeros to `capacity` elements (N
// equal shards, so that a reduce-scatter and an all-gather cover them in place), AdamW's moments kept only for the
// flat elements [begin, end) that this rank updates. capacity 0: not sharded; every buffer holds
// parameter_elements() and AdamW updates all of them.
struct OptimizerShard {
  size_t capacity = 0;
  size_t begin = 0;
  size_t end = 0;
  bool sharded() const { return capacity > 0; }
  size_t elements() const { return end - begin; }
};

// Rank `rank`'s shard of `elements` among `ranks`: shards of ceil(elements / ranks), rank r's starting at r times
// that; the last ones reach into the padding (end is clipped to `elements`). Throws InputError for 0 ranks.
OptimizerShard ShardOf(size_t elements, int ranks, int rank);

// Pipeline parallel: the part of the model one stage holds. Stage s of P holds the L/P consecutive blocks
// [first_layer, end_layer); the first stage also the embeddings (wte, wpe), the last the final LayerNorm and the LM
// head with its own copy of wte (tied: both copies start equal and are updated with the same summed gradient, as
// Megatron's embedding group keeps them). `slots`: the micro-batches whose activations the stage holds at once (1F1B
// keeps min(P - s, M) of the M in flight). The default, one stage, is the whole model.
struct PipelineStage {
  int stages = 1;
  int stage = 0;
  int first_layer = 0;
  int end_layer = -1;  // -1: through the last layer (ResolvePlacement fills it in)
  int slots = 1;
  bool first() const { return stage == 0; }
  bool last() const { return stage == stages - 1; }
  bool split() const { return stages > 1; }
  bool holds_layer(int layer) const { return layer >= first_layer && layer < end_layer; }
};
// Stage `stage` of `stages` over config's layers, holding `slots` micro-batches. Throws InputError (one line) unless
// 1 <= stages, stages divides the layers, 0 <= stage < stages and slots >= 1.
PipelineStage MakePipelineStage(const ModelConfig& config, int stages, int stage, int slots);
// `slot` when `stage` (resolved) holds that many micro-batches; std::logic_error otherwise (SelectMicroBatch's check).
int CheckedSlot(const PipelineStage& stage, int slot);
// Micro-batches stage s of P holds at once under 1F1B with M micro-batches: min(P - s, M).
int OneFOneBSlots(int stages, int stage, int micro_batches);
// Whether `stage` (resolved) holds slot `slot` of a layout in MakeLayout's slot order (MakeLayout's own or
// TensorParallelLayout's).
bool StageHoldsSlot(const PipelineStage& stage, const std::vector<TensorSlot>& layout, size_t slot);
// `layout` (MakeLayout's or TensorParallelLayout's) as one stage holds it: the same slots in the same order (so
// BlockSlot, LnfWeightSlot and the slot indices of gradient_ready stay valid), a slot the stage does not hold with
// count 0 at the offset where the next held one starts, the held ones packed one after the other.
std::vector<TensorSlot> StageLayout(const std::vector<TensorSlot>& layout, const PipelineStage& stage);

// FSDP (ZeRO-3)'s units: stretches of the flat layout that are gathered before use and freed after, each as a whole —
// the embeddings (wte and wpe), each block, and the final LayerNorm, in layout order.
struct ParameterUnit {
  size_t begin = 0;  // flat elements [begin, end)
  size_t end = 0;
  size_t elements() const { return end - begin; }
};
constexpr size_t kEmbeddingUnit = 0;
inline size_t BlockUnit(int layer) { return 1 + static_cast<size_t>(layer); }
inline size_t FinalNormUnit(int layers) { return 1 + static_cast<size_t>(layers); }
std::vector<ParameterUnit> ParameterUnits(const std::vector<TensorSlot>& layout);
// Per slot of `layout`: the index of the unit (of ParameterUnits(layout)) that holds it.
std::vector<size_t> SlotUnits(const std::vector<TensorSlot>& layout);
// The parameters fsdp holds gathered at once on a rank: the embeddings, the final LayerNorm and two blocks (one with
// a single layer), as FsdpGatherer's working buffers (models/fsdp.h) hold them; of the whole model (tensor parallel
// divides them by T).
double FsdpGatheredParameters(const ModelConfig& config);

// FSDP over `ranks`: this rank holds ShardOf(unit elements, ranks, rank) of every unit, the units' shards one after
// the other in its sharded buffers (parameters, gradients, AdamW m and v), each `count` = capacity / ranks elements
// long (the last ranks' reach into zero padding).
struct UnitShard {
  size_t store = 0;      // where the shard starts in the sharded buffers
  size_t count = 0;      // its length there (the reduce-scatter's and all-gather's count)
  OptimizerShard shard;  // unit-local: the unit padded to capacity, this rank's [begin, end)
};
struct FsdpLayout {
  int ranks = 0;  // 0: no FSDP
  int rank = 0;
  std::vector<ParameterUnit> units;
  std::vector<UnitShard> shards;  // per unit
  size_t store_elements = 0;      // the sharded buffers' length
  bool enabled() const { return ranks > 0; }
};
// Throws InputError for 0 ranks or a rank outside them.
FsdpLayout MakeFsdpLayout(const std::vector<TensorSlot>& layout, int ranks, int rank);

// Where a model reads its parameters and writes its gradients, unit by unit, unit-local (element i is flat element
// unit.begin + i). Without FSDP, views of the model's own flat buffers; under FSDP the train loop's gatherer, which
// all-gathers a unit's parameters when asked (or ahead) and reduce-scatters its gradients when they are final.
class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // The unit's whole parameters, ready to read, until ParametersDone(unit).
  virtual const float* Parameters(size_t unit) = 0;
  virtual void ParametersDone(size_t unit) = 0;
  // The unit's whole gradients for this backward (Backward overwrites or adds to them, as it was told; under FSDP a
  // working buffer whose contents are undefined), until GradientsDone(unit): then they are final for the backward.
  virtual float* Gradients(size_t unit) = 0;
  virtual void GradientsDone(size_t unit) = 0;
};

// Per slot of `layout`: its offset inside its unit of ParameterUnits(layout) (where UnitAccess's unit-local views have
// it).
std::vector<size_t> UnitOffsets(const std::vector<TensorSlot>& layout);
// The UnitAccess of a model without FSDP: unit u's parameters at params + units[u].begin, its gradients likewise
// (not zeroed here: Backward overwrites or accumulates them); the Done calls do nothing.
std::unique_ptr<UnitAccess> MakeFlatUnitAccess(float* params, float* grads, std::vector<ParameterUnit> units);

// A stretch of the flat buffers AdamW updates at once: the used elements of consecutive slots with one decay rule
// (wte's padding rows left out, so that they stay exactly zero).
struct AdamWRange {
  size_t offset = 0;
  size_t count = 0;
  bool decay = false;
};
// The ranges within the flat elements [begin, end).
std::vector<AdamWRange> AdamWRanges(const ModelConfig& config, const std::vector<TensorSlot>& layout, size_t begin,
                                    size_t end);

// The same for this rank's FSDP shards, the offsets into the sharded buffers (the moments share them).
std::vector<AdamWRange> FsdpAdamWRanges(const ModelConfig& config, const std::vector<TensorSlot>& layout,
                                        const FsdpLayout& fsdp);

// Where this rank's model sits in every parallel mode: given once to each maker (MakeCpuTransformer,
// MakeCpuTensorParallelTransformer, CudaTransformerOptions::placement), resolved there by ResolvePlacement, and
// returned resolved by Transformer::placement(). The default is the whole model, every element updated by this rank.
// Tensor parallel needs nothing here: its group, and so T and this rank's index in it, is the communicator the
// tensor-parallel makers take (TensorParallelStatsOf reads them back).
// Expert parallel: the experts of each MoE block spread over `parallel` ranks, rank `rank` of them holding experts
// [rank·E/EP, (rank+1)·E/EP) (ExpertLayout); `group` (host memory on the CPU, EP ranks, this one at `rank`) dispatches
// the tokens to them and must outlive the model. The default: every expert here.
struct ExpertPlacement {
  int parallel = 1;
  int rank = 0;
  Communicator* group = nullptr;
  std::vector<bool> remote_node;  // per rank of the group: on another node (the report's inter-node bytes); may be empty
  bool split() const { return parallel > 1; }
};

struct ModelPlacement {
  // ZeRO-1 over the data-parallel ranks (ShardOf the stage's elements; capacity 0: none). Resolved: without ZeRO-1,
  // every element ([0, elements) at capacity elements).
  OptimizerShard shard;
  // FSDP over those ranks instead (MakeFsdpLayout of the model's layout: MakeLayout's, or TensorParallelLayout's; ranks
  // 0: none): the model holds its shards of every unit in its buffers (store_elements long) and reads and writes whole
  // units only through the UnitAccess given to Transformer::SetUnitAccess. Not with a zero1 shard nor a split stage.
  FsdpLayout fsdp;
  // Pipeline parallel: the stage held (MakePipelineStage; the default, the whole model with one micro-batch slot).
  // Resolved: end_layer filled in. ZeRO-1 shards the stage's elements.
  PipelineStage stage;
  // Expert parallel: the experts held (and the group that reaches the others). Not with fsdp, zero1 or a split stage.
  ExpertPlacement experts = {};

  // Of a resolved placement: the elements of the parameter and gradient buffers (fsdp's store, or zero1's capacity),
  // of AdamW's m and v (fsdp's store, or the shard's elements), and the parameter element m[0] and v[0] stand for.
  size_t buffer_elements() const { return fsdp.enabled() ? fsdp.store_elements : shard.capacity; }
  size_t moment_elements() const { return fsdp.enabled() ? fsdp.store_elements : shard.elements(); }
  size_t moment_offset() const { return fsdp.enabled() ? 0 : shard.begin; }
};

// `placement` as a model of `config` whose unsplit layout is `layout` (MakeLayout's; a tensor parallel rank's
// TensorParallelLayout) holds it: the stage with end_layer filled in, the shard over the stage's elements (every
// element without ZeRO-1). Throws InputError (one line) for a stage MakePipelineStage would refuse or one given whole
// with other layers, a shard that does not fit the stage's elements, fsdp with a zero1 shard, and fsdp with a split
// stage; std::logic_error for an fsdp layout of other units than `layout`'s.
ModelPlacement ResolvePlacement(const ModelConfig& config, const std::vector<TensorSlot>& layout,
                                const ModelPlacement& placement);
// Whether slot `slot` of `layout` (MakeLayout's order) holds an MoE block's experts (kFcWeight .. kMlpProjBias of a
// block whose router is not empty).
bool IsExpertSlot(const std::vector<TensorSlot>& layout, size_t slot);
// `layout` as expert parallel rank `experts.rank` of `experts.parallel` holds it: each expert slot's count divided by
// EP, `first` at the rank's experts; the other slots as they are; repacked, in the same order.
std::vector<TensorSlot> ExpertLayout(const std::vector<TensorSlot>& layout, const ExpertPlacement& experts);
// What a model placed by `placement` holds of `layout` (the unsplit one): its stage's slots, and of those its experts.
std::vector<TensorSlot> HeldLayout(const std::vector<TensorSlot>& layout, const ModelPlacement& placement);
// The stretches AdamW updates on a model placed by `placement` (resolved) whose layout() is `layout`: this rank's FSDP
// shards (FsdpAdamWRanges), or its zero1 shard of the flat elements (AdamWRanges).
std::vector<AdamWRange> PlacementAdamWRanges(const ModelConfig& config, const std::vector<TensorSlot>& layout,
                                             const ModelPlacement& placement);

struct ModelStateBytes {
  double weights = 0, gradients = 0, optimizer = 0;
  // What the model allocated for activations (every micro-batch slot's) and backward's scratch; NaN where a model does
  // not say (the tensor parallel ones, the theory).
  double activations = std::numeric_limits<double>::quiet_NaN();
};
// What ZeRO's paper gives per rank for `elements` (Ψ) over `ranks` (N): dp 2Ψ + 2Ψ + 12Ψ with bf16 compute (fp32
// master weights and moments), zero1 the optimizer's 12Ψ/N; fp32 throughout (the CPU reference): 4Ψ + 4Ψ + 8Ψ, and
// 8Ψ/N under zero1;
// fsdp: everything over N, 16Ψ/N either way.
enum class ParallelMode { kDp, kZero1, kFsdp };
ModelStateBytes TheoryStateBytes(ParallelMode mode, bool bf16, double elements, int ranks);

// A kernel chosen by timing candidates once per shape (cuBLASLt's algorithms for a GEMM, cuDNN's execution plans for
// attention; models/cuda/autotune.h): what, for which shape, how many were timed, which won and how fast.
struct KernelChoice {
  std::string what;     // "gemm LinearForward GELU_AUX_BIAS", "cudnn-sdpa forward"
  std::string shape;    // "m 3072 n 8192 k 768 op T,N D bf16", "B 8 T 1024 NH 12 hd 64"
  int candidates = 0;   // candidates tried, failed ones included (0: none timed, the heuristic's first kept)
  int chosen = 0;       // the winner's index in the heuristic's order (0: its first)
  double chosen_s = 0;  // the winner's median seconds per run (NaN when not timed)
  double first_s = 0;   // the heuristic's first's (NaN when not timed or it failed)
};


class Transformer {
 public:
  virtual ~Transformer() = default;

  virtual const ModelConfig& config() const = 0;
  virtual std::string backend() const = 0;  // "cpu" or "cuda"
  virtual const std::vector<TensorSlot>& layout() const = 0;
  // Elements in the flat buffers (the embedding table has vocab_padded rows; padding rows stay zero).
  virtual size_t parameter_elements() const = 0;

  virtual std::string attention() const = 0;  // which attention runs: "cpu", "cudnn-sdpa" or "cublas"

  // Copies one batch into the model's memory (the h2d phase on a device), unpacking it into int32 input and
  // target ids on the way (UnpackTokens): batch.batch sequences of batch.seq positions, in host memory. Throws
  // InputError for an id outside [0, vocab) or a shape the model cannot take.
  virtual void SetBatch(const TokenBatch& batch) = 0;
  // The same from int32 arrays: inputs and targets hold batch*seq ids each.
  void SetBatch(const int32_t* inputs, const int32_t* targets, int batch, int seq) {
    SetBatch(TokenArrays(inputs, targets, batch, seq));
  }
  // Forward over the batch last set; keeps the activations for Backward. On a device it only issues the work.
  virtual void Forward() = 0;
  // The mean cross-entropy over all batch*seq positions of the last Forward; waits for the device.
  virtual float Loss() = 0;
  // SetBatch, Forward, Loss: for tests and tools that want one call.
  float ForwardBatch(const int32_t* inputs, const int32_t* targets, int batch, int seq) {
    SetBatch(inputs, targets, batch, seq);
    Forward();
    return Loss();
  }
  // Gradients of the last Forward's mean loss (times the gradient scale), into the gradients the UnitAccess hands
  // out (the model's own gradient buffer without FSDP): written over what was there (kOverwrite: no buffer is zeroed
  // first), or added to it (kAccumulate: the later micro-batches of a step under gradient accumulation). Under FSDP
  // the gatherer hands out working buffers for this backward: the train loop overwrites them and accumulates the
  // shards. Calls gradient_ready(slot) once per tensor, as soon as its gradient is final, so that buckets can be
  // reduced while backward goes on.
  virtual void Backward(const std::function<void(size_t slot)>& gradient_ready, GradientWrite write) = 0;
  void Backward(const std::function<void(size_t slot)>& gradient_ready) {
    Backward(gradient_ready, GradientWrite::kOverwrite);
  }
  // Backward's gradients are those of `scale` x the mean loss (1 until set): 1/M when M micro-batches accumulate into
  // one optimizer step, so that the step's gradient is that of the mean loss over all of them. Takes effect from the
  // next Forward (the CUDA model computes the loss's gradient there); Loss() stays the unscaled mean.
  virtual void SetGradientScale(float scale) = 0;
  // One AdamW update with bias correction; step counts from 1. Of the elements placement() gives this rank: its
  // ZeRO-1 shard, its FSDP shards, or all of them.
  virtual void AdamWStep(const AdamWConfig& config, int64_t step) = 0;
  // Where the model sits in every parallel mode: the ModelPlacement it was made with, resolved (ResolvePlacement).
  virtual const ModelPlacement& placement() const = 0;
  // FSDP (placement().fsdp enabled): Forward and Backward read and write whole units only through the UnitAccess set
  // here (the train loop's FsdpGatherer), which must outlive the steps; null unsets it. A model without FSDP refuses
  // one (std::logic_error): it reads its own flat buffers.
  void SetUnitAccess(UnitAccess* access) {
    if (!placement().fsdp.enabled()) throw std::logic_error("SetUnitAccess on a model without FSDP");
    unit_access_ = access;
    marked_access_.inner = access;
  }
  // Bytes this model allocated for the compute copy of the weights, the gradients and the optimizer state (fp32
  // master weights where the compute copy is not fp32, AdamW m and v), as ZeRO's paper counts them.
  virtual ModelStateBytes state_bytes() const = 0;
  // Blocks the host until the work issued on the model's stream is done (nothing to wait for on the CPU): before a
  // blocking collective reads what the model wrote.
  virtual void Synchronize() {}
  // Zeroes `count` floats at `data`, memory of the kind the model computes in (host memory on the CPU, device memory
  // for CUDA), in order with the work issued so far: FSDP's gradient working buffers before a unit's backward.
  virtual void ClearFloats(float* data, size_t count);
  // dst[i] += src[i] for `count` floats of that memory, in the same order: FSDP's gradient shards accumulating over
  // the micro-batches of a step.
  virtual void AddFloats(float* dst, const float* src, size_t count) {
    for (size_t i = 0; i < count; ++i) dst[i] += src[i];
  }
  // data[i] *= scale for `count` floats of that memory, in the same order: expert parallel's gradients, summed over
  // the ranks holding the same experts, to their mean over every rank's tokens.
  virtual void ScaleFloats(float* data, size_t count, float scale) {
    for (size_t i = 0; i < count; ++i) data[i] *= scale;
  }
  // Pipeline parallel: micro-batch slot `slot` (< placement().stage.slots) is the one SetBatch, Forward, Loss,
  // Backward and stage_edges act on from now on (slot 0 until chosen): a stage keeps the activations of each slot's
  // last Forward until that slot's Backward. Throws std::logic_error for a slot outside them.
  virtual void SelectMicroBatch(int slot) = 0;
  // The residual stream at the stage's edges for the selected slot: batch*seq x d_model fp32 floats each (`count`),
  // in the model's memory. The caller writes `input` before Forward (a stage after the first starts from the previous
  // stage's output instead of the embeddings) and `output_grad` before Backward (a stage before the last starts from
  // the next stage's input gradient instead of the loss); Forward writes `output`, Backward `input_grad`. Null where
  // the stage has no such edge (the first stage has no input, the last no output). On a device they are ready once
  // Synchronize() has returned. A stage before the last has no loss: Loss() is NaN there.
  struct StageEdges {
    float* input = nullptr;
    const float* output = nullptr;
    float* output_grad = nullptr;
    const float* input_grad = nullptr;
    size_t count = 0;
  };
  virtual StageEdges stage_edges() = 0;

  // Call after writing parameters() from outside (a checkpoint restore): refreshes what is derived from the
  // master weights (the CUDA implementation's bf16 copy). Nothing to do on the CPU.
  virtual void ParametersChanged() {}

  // The flat fp32 buffers (host memory for the CPU reference, device memory for CUDA). Parameters are the
  // master weights; adam_m and adam_v AdamW's first and second moments; all four share layout(). They hold
  // placement()'s buffer_elements() and moment_elements(): with a ZeRO-1 shard, parameters and gradients its capacity
  // and adam_m/adam_v its elements() (element i standing for flat element begin + i); under FSDP all four the shards'
  // store.
  virtual float* parameters() = 0;
  virtual float* gradients() = 0;
  virtual float* adam_m() = 0;
  virtual float* adam_v() = 0;

  // The stream the model's work runs on (a cudaStream_t), or null on the CPU: gradient buckets are reduced after
  // the work queued on it.
  virtual void* stream() const { return nullptr; }
  // A PhaseClock that times this model's work.
  virtual std::unique_ptr<PhaseClock> MakePhaseClock() const = 0;
  // The most device memory this process has held (cudaMemGetInfo at the high points), 0 on the CPU.
  virtual uint64_t peak_device_memory_bytes() const { return 0; }
  // The kernels chosen by timing so far (cuBLASLt algorithms, cuDNN plans); empty on the CPU.
  virtual std::vector<KernelChoice> kernel_choices() const { return {}; }
  // Forward and backward passes replayed from CUDA graphs so far (CudaTransformerOptions::cuda_graphs); 0 elsewhere.
  virtual uint64_t graph_replays() const { return 0; }

  // train --op-times: where each kind of work begins in Forward, Backward and AdamWStep is marked on `op_times`
  // (made over this model's MakePhaseClock; null: nothing is marked), and the communication they wait for
  // (MarkWait(op_times(), ...), and every call of unit_access() that may wait for fsdp's collectives) as comm_model's.
  void SetOpTimes(OpTimes* op_times) {
    op_times_ = op_times;
    marked_access_.op_times = op_times;
  }

 protected:
  // The OpTimes SetOpTimes gave (null: none), for what marks its waits outside the model's own calls (MoeExperts).
  OpTimes* op_times() const { return op_times_; }
  // The UnitAccess SetUnitAccess gave (null until then, and always without FSDP); under --op-times, one that marks its
  // waits.
  UnitAccess* unit_access() const {
    if (unit_access_ == nullptr || op_times_ == nullptr) return unit_access_;
    return &marked_access_;
  }
  void BeginOp(OpKind kind, bool backward) {
    if (op_times_ != nullptr) op_times_->Begin(kind, backward);
  }
  void EndOps() {
    if (op_times_ != nullptr) op_times_->End();
  }

 private:
  // fsdp's gatherer as the model sees it under --op-times: the calls that may wait for a collective marked.
  struct MarkedUnitAccess final : UnitAccess {
    UnitAccess* inner = nullptr;
    OpTimes* op_times = nullptr;
    const float* Parameters(size_t unit) override {
      return MarkWait(op_times, [&] { return inner->Parameters(unit); });
    }
    void ParametersDone(size_t unit) override { inner->ParametersDone(unit); }
    float* Gradients(size_t unit) override { return MarkWait(op_times, [&] { return inner->Gradients(unit); }); }
    void GradientsDone(size_t unit) override { MarkWait(op_times, [&] { inner->GradientsDone(unit); }); }
  };

  OpTimes* op_times_ = nullptr;
  UnitAccess* unit_access_ = nullptr;
  mutable MarkedUnitAccess marked_access_;  // over unit_access_, marking on op_times_
};

// The CPU reference, initialised as GPT-2 is (normal(0, 0.02) weights, residual projections scaled by
// 1/sqrt(2*layers), zero biases, unit LayerNorm gains) from `seed`: every rank with the same seed holds the
// same model. `placement` (ResolvePlacement over MakeLayout; InputError where it throws): a pipeline stage holds the
// whole model's bits of its tensors (InitializeStageParameters) and activations for its `slots` micro-batches.
std::unique_ptr<Transformer> MakeCpuTransformer(const ModelConfig& config, uint64_t seed,
                                                const ModelPlacement& placement = {});

// Which attention the CUDA transformer runs: cuDNN's fused SDPA (flash attention) through the cuDNN C++
// frontend, or cuBLAS batched GEMMs with a softmax kernel; auto takes cuDNN when it supports the shape on this
// device and falls back to cuBLAS otherwise (the reason is kept: CudaTransformerInfo).
enum class AttentionChoice { kAuto, kCudnn, kCublas };

struct CudaTransformerOptions {
  int max_batch = 1;  // activations are allocated once for max_batch x config.seq tokens
  AttentionChoice attention = AttentionChoice::kAuto;
  // The sequence length the caller's batches will have (0: config.seq): attention is prepared for it, and chosen
  // by it (cuDNN's does not run 1 token: auto takes cuBLAS, cudnn is refused) before the first step.
  int seq = 0;
  // Where the model sits (ResolvePlacement over MakeLayout, or TensorParallelLayout for the tensor parallel model).
  // Under fsdp it casts each gathered unit to bf16 for the GEMMs (working copies for the embeddings and two block
  // roles); a stage has activations for stage.slots micro-batches of max_batch x config.seq tokens.
  ModelPlacement placement;
  // CUDA graphs (train --cuda-graph): Forward, and Backward without a gradient_ready callback, replayed from a graph
  // of their launches, captured at their second call of a batch shape (the first runs them, so that the libraries'
  // plans, autotuning and workspaces are in place) and dropped when the shape or the gradient scale changes; the
  // same kernels with the same arguments, so the same bits as without. Not with fsdp, a split stage or MoE blocks
  // (host work inside the passes): MakeCudaTransformer refuses them; under --op-times' marks the passes run eagerly.
  bool cuda_graphs = false;
};

// What CUDA graphs of the step cannot replay, for a model of `config` under fsdp or over pipeline stages, in words
// ("fsdp (--parallel fsdp)", "pipeline stages (--pipeline-parallel)", "mixture-of-experts blocks": their passes do
// host work between launches); "" when nothing is in the way. train's flag check and MakeCudaTransformer both ask it.
std::string CudaGraphGap(const ModelConfig& config, bool fsdp, bool pipeline_stages);

// The CUDA implementation on the current device: bf16 weights and activations for the GEMMs and attention, fp32
// master weights, gradients and AdamW moments; initialised exactly as the CPU reference (same seed, same
// weights). Throws RuntimeError in a build without CUDA, or when the device lacks memory (naming how much).
// `fallback_reason`, when given, receives why auto did not get cuDNN (empty when it did).
std::unique_ptr<Transformer> MakeCudaTransformer(const ModelConfig& config, uint64_t seed,
                                                 const CudaTransformerOptions& options,
                                                 std::string* fallback_reason = nullptr);

// Throws InputError unless batch >= 1 and 1 <= seq <= config.seq (the ids are checked by UnpackTokens).
void CheckBatchShape(const ModelConfig& config, int batch, int seq);

// One stage's parameters (`stage_layout`, StageLayout of `layout`) with the bits the whole model (`layout`) has in
// them: every rank of a pipeline draws its part of the same model.
void InitializeStageParameters(const ModelConfig& config, const std::vector<TensorSlot>& layout,
                               const std::vector<TensorSlot>& stage_layout, uint64_t seed, float* params);

// GPT-2's initialisation of the flat fp32 parameter buffer `params` (layout of MakeLayout(config)), drawn from
// `seed` with our own generator so that every rank and both implementations draw the same model: normal(0, 0.02)
// matrices and embeddings (residual projections scaled by 1/sqrt(2*layers)), zero biases, unit LayerNorm gains,
// zero padding rows in wte.
void InitializeParameters(const ModelConfig& config, const std::vector<TensorSlot>& layout, uint64_t seed,
                          float* params);
// Elements [begin, end) of that same buffer into out[0, end - begin): the same bits, for any range (a device upload
// draws the weights chunk by chunk into a pinned staging buffer). Every element of the range is written. Both
// functions draw on CpuThreads() threads.
void InitializeParameterRange(const ModelConfig& config, const std::vector<TensorSlot>& layout, uint64_t seed,
                              size_t begin, size_t end, float* out);

// Walks this rank's FSDP shard of every unit: `store` (fsdp.store_elements) is zeroed (the padding stays so), then
// fill(begin, end, dest) is called for each unit's non-empty shard, [begin, end) in whole-buffer elements, dest its
// place in `store`.
void FillFsdpShards(const FsdpLayout& fsdp, float* store, const std::function<void(size_t, size_t, float*)>& fill);

// This rank's FSDP shards of the same initial parameters into the sharded buffer `store` (fsdp.store_elements;
// the padding zero).
void InitializeFsdpShards(const ModelConfig& config, const std::vector<TensorSlot>& layout, const FsdpLayout& fsdp,
                          uint64_t seed, float* store);

// The layout both implementations share.
std::vector<TensorSlot> MakeLayout(const ModelConfig& config);

// Where MakeLayout puts each tensor: a block's tensors in their order, and the slots around the blocks.
enum BlockTensor : size_t {
  kLn1Weight,
  kLn1Bias,
  kQkvWeight,
  kQkvBias,
  kAttnProjWeight,
  kAttnProjBias,
  kLn2Weight,
  kLn2Bias,
  kFcWeight,
  kFcBias,
  kMlpProjWeight,
  kMlpProjBias,
  kRouterWeight,  // an MoE block's router (E, C); empty (count 0) in a dense block
  kBlockTensors
};
// In an MoE block kFcWeight, kFcBias, kMlpProjWeight and kMlpProjBias hold its E experts' tensors one expert after the
// other ("hL.moe.fc.weight" (E, F, C), "hL.moe.fc.bias" (E, F), "hL.moe.proj.weight" (E, C, F), "hL.moe.proj.bias"
// (E, C)), and kRouterWeight its router ("hL.moe.router.weight").
constexpr size_t kWteSlot = 0;
constexpr size_t kWpeSlot = 1;
constexpr size_t kFirstBlockSlot = 2;

inline size_t BlockSlot(int layer, BlockTensor tensor) { return kFirstBlockSlot + layer * kBlockTensors + tensor; }
// lnf.weight, followed by lnf.bias, comes right after the last block.
inline size_t LnfWeightSlot(int layers) { return kFirstBlockSlot + layers * kBlockTensors; }

}  // namespace tb
