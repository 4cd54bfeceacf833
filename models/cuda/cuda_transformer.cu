// The CUDA transformer: the CPU reference's model (cpu_transformer.cc) in mixed precision on one device, on one
// non-blocking stream. fp32 master weights, gradients and AdamW moments in four flat buffers laid out by MakeLayout
// (the train loop all-reduces the gradient buffer in buckets); a bf16 copy of the weights for the GEMMs, rewritten
// by AdamW in the same pass; bf16 activations except the residual stream, the LayerNorm statistics, the attention
// log-sum-exp and the logits, which stay fp32. GEMMs through cuBLASLt (gemm.h), attention through cuDNN's fused SDPA
// or cuBLAS (attention.h), every other layer a small kernel (kernels.h). Forward and backward follow the CPU
// reference step by step, so each tensor can be compared with its reference. A pipeline stage holds only its part
// (StageLayout) and the activations of its micro-batch slots for its blocks; its edges are the fp32 residual stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cuda/attention.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_raii.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "cuda/model_parts.h"
#include "cuda/moe_kernels.h"
#include "cuda/moe_layer.h"
#include "error.h"
#include "moe_stats.h"
#include "transformer.h"
#include "units.h"

namespace tb {
namespace {

using gpu::Bf16;

using cuda_model::BlockActivations;
using cuda_model::Carver;
using cuda_model::CarveBlockActivations;
using cuda_model::CudaPhaseClock;
using cuda_model::kLibraryReserveBytes;

// An MoE layer's tensors out of `carve`: `point(at)` points them into the stretch at `at` (null: counts) and returns
// its bytes.
template <typename Point>
void CarveMoe(Carver& carve, Point point) {
  char* at = carve.Take<char>(point(nullptr));
  point(at);
}


// What one micro-batch slot keeps from its Forward to its Backward, for the stage's blocks only. N = B·T tokens of
// the slot's batch.
struct MicroBatch {
  int32_t* tokens = nullptr;  // (2, N) its inputs, then its targets (the first stage's Backward reads the inputs)
  // (N, C) the residual stream entering the stage's first block: the embeddings on the first stage, the previous
  // stage's output (stage_edges().input) on a later one.
  float* input = nullptr;
  std::vector<BlockActivations> blocks;  // blocks [first_layer, end_layer)
  // The last stage's:
  Bf16* lnf = nullptr;          // (N, C)
  float* lnf_mean = nullptr;    // (N)
  float* lnf_rstd = nullptr;    // (N)
  float* loss = nullptr;        // (1) the mean loss
  Bf16* logits_grad = nullptr;  // (N, Vp) d loss / d logits, written by the cross-entropy in Forward
  // (N, C) the residual gradient that Backward carries down the blocks, fp32 as the stream itself: on the first stage
  // the backward scratch shared by the slots (its embeddings' backward spends it), on a later stage the slot's own,
  // left there as stage_edges().input_grad.
  float* residual_grad = nullptr;
  float* output_grad = nullptr;  // (N, C) a stage before the last's: stage_edges().output_grad, written by the caller
  int batch = 0;  // SetBatch's shape
  int seq = 0;
  bool backward_pending = false;
};

class CudaTransformer final : public Transformer, public MoeStatsSource {
 public:
  // `options.placement`: resolved over MakeLayout(config).
  CudaTransformer(const ModelConfig& config, uint64_t seed, const CudaTransformerOptions& options);
  ~CudaTransformer() override;
  CudaTransformer(const CudaTransformer&) = delete;
  CudaTransformer& operator=(const CudaTransformer&) = delete;

  const ModelConfig& config() const override { return config_; }
  std::string backend() const override { return "cuda"; }
  const std::vector<TensorSlot>& layout() const override { return layout_; }
  size_t parameter_elements() const override { return elements_; }
  std::string attention() const override { return attention_->name(); }
  float* parameters() override { return params_; }
  float* gradients() override { return grads_; }
  float* adam_m() override { return m_; }
  float* adam_v() override { return v_; }
  void* stream() const override { return stream_.get(); }
  std::unique_ptr<PhaseClock> MakePhaseClock() const override {
    return std::make_unique<CudaPhaseClock>(stream_.get());
  }
  uint64_t peak_device_memory_bytes() const override { return peak_device_memory_; }
  uint64_t graph_replays() const override { return graph_replays_; }
  std::vector<KernelChoice> kernel_choices() const override {
    std::vector<KernelChoice> choices = gemm_->kernel_choices();
    for (KernelChoice& choice : attention_->kernel_choices()) choices.push_back(std::move(choice));
    return choices;
  }

  using Transformer::SetBatch;
  void SetBatch(const TokenBatch& tokens) override;
  void Forward() override;
  float Loss() override;
  using Transformer::Backward;
  void Backward(const std::function<void(size_t slot)>& gradient_ready, GradientWrite write) override;
  void SetGradientScale(float scale) override {
    if (scale != gradient_scale_) DropGraphs();  // the cross-entropy's graphed launch has the old scale
    gradient_scale_ = scale;
  }
  void SelectMicroBatch(int slot) override { slot_ = CheckedSlot(stage(), slot); }
  StageEdges stage_edges() override;
  void AdamWStep(const AdamWConfig& config, int64_t step) override;
  const ModelPlacement& placement() const override { return options_.placement; }
  // The fp32 master weights are not sharded under zero1 (AdamW's moments are): it keeps 4 bytes per element more
  // than ZeRO's 12/N. Under fsdp every buffer is the shard store, and there is no bf16 copy to keep between uses (a
  // unit's is made where it is gathered): 4 + 4 + 8 bytes per element over N, ZeRO's 16Ψ/N in all.
  ModelStateBytes state_bytes() const override {
    const ModelPlacement& p = placement();
    ModelStateBytes bytes =
        fsdp().enabled()
            ? ModelStateBytes{4.0 * p.buffer_elements(), 4.0 * p.buffer_elements(), 8.0 * p.moment_elements()}
            : ModelStateBytes{2.0 * elements_, 4.0 * p.shard.capacity,
                              4.0 * (p.shard.capacity + 2.0 * p.shard.elements())};
    bytes.activations = static_cast<double>(activation_buffer_.bytes());
    return bytes;
  }
  void Synchronize() override { stream_.Synchronize(); }
  void ScaleFloats(float* data, size_t count, float scale) override {
    gpu::ScaleFloats(data, count, scale, stream());
  }
  void ClearFloats(float* data, size_t count) override {
    TB_CHECK_CUDA(cudaMemsetAsync(data, 0, count * sizeof(float), stream_.get()));
  }
  void AddFloats(float* dst, const float* src, size_t count) override {
    gpu::ResidualAdd(dst, dst, src, count, stream());
  }
  // The bf16 weights again from the master weights written from outside (under fsdp they are cast where gathered).
  void ParametersChanged() override {
    if (!fsdp().enabled()) gpu::CastToBf16(params_bf16_, params_, elements_, stream());
  }

  // The MoE blocks' routing since the last call, from the device's running totals (waits for the stream).
  MoeStepStats TakeMoeStats() override;

  // Why auto attention did not get cuDNN ("" when it did, or when attention was chosen explicitly).
  const std::string& fallback_reason() const { return fallback_reason_; }

 private:
  // Where each unit's tensors are now: in the flat buffers without FSDP; under FSDP where the UnitAccess put them
  // (null while not held).
  struct UnitView {
    const float* params = nullptr;
    float* grads = nullptr;
    const Bf16* bf16 = nullptr;
  };
  const PipelineStage& stage() const { return options_.placement.stage; }
  const FsdpLayout& fsdp() const { return options_.placement.fsdp; }
  // Points every activation tensor into `base` (null: only counts); returns the bytes they take.
  size_t PointActivations(char* base);
  void CarveBlocks(Carver& carve, MicroBatch& mb);
  void CarveMoeShared(Carver& carve);
  // The MoE layers' shape at the most tokens a micro-batch has.
  gpu::MoeShape MoeShape() const { return gpu::MoeShapeOf(*config_.moe, max_tokens_, config_.d_model, &moe_experts_); }
  void CheckDeviceMemory(uint64_t needed_bytes, uint64_t activation_bytes) const;
  // The flat buffers' bytes: fp32 weights and gradients, m and v, and the bf16 weights (under fsdp the working
  // copies of the embeddings and of two blocks).
  uint64_t FlatBytes() const {
    return (2 * placement().buffer_elements() + 2 * placement().moment_elements()) * sizeof(float) +
           Bf16Elements() * sizeof(Bf16);
  }
  size_t Bf16Elements() const {
    return fsdp().enabled() ? units_[kEmbeddingUnit].elements() + 2 * BlockUnitElements() : elements_;
  }
  size_t BlockUnitElements() const { return config_.layers > 0 ? units_[BlockUnit(0)].elements() : 0; }
  void CarveFlatBuffers(Carver& flat);
  void MakeAttention();
  void UploadInitialParameters(uint64_t seed);
  // Records the device memory in use now if it is the most so far.
  void NoteDeviceMemory();
  // A tensor where its unit is now (UnitView).
  const float* Param(size_t slot) const { return View(slot).params + unit_offsets_[slot]; }
  float* Grad(size_t slot) const { return View(slot).grads + unit_offsets_[slot]; }
  const Bf16* Bf16Param(size_t slot) const { return View(slot).bf16 + unit_offsets_[slot]; }
  const UnitView& View(size_t slot) const { return views_[slot_units_[slot]]; }
  // FSDP: unit u's whole parameters from the UnitAccess (and their bf16 working copy, but for the final LayerNorm,
  // which no GEMM reads) until ReleaseParameters; its gradients likewise until ReleaseGradients, then final. Without
  // FSDP every unit is at hand in the flat buffers and these do nothing.
  void HoldParameters(size_t u);
  void ReleaseParameters(size_t u);
  void HoldGradients(size_t u);
  void ReleaseGradients(size_t u);
  UnitAccess& Access() const;
  // options_.cuda_graphs: one pass's graph, captured at the pass's second call at a shape (`ran`: its first is done).
  struct PassGraph {
    bool ran = false;
    CapturedGraph graph;
  };
  struct SlotGraphs {
    PassGraph forward;
    PassGraph backward[2];  // by GradientWrite: overwriting, accumulating
  };
  // Runs `work`, one pass's launches: eagerly, or under cuda_graphs from its graph (captured at its second call).
  template <class Work>
  void RunPass(PassGraph& pass, Work&& work);
  void DropGraphs();
  void ForwardWork(MicroBatch& mb);
  void BackwardWork(MicroBatch& mb, const std::function<void(size_t slot)>& ready, GradientWrite write);
  void HeadForward(MicroBatch& mb, const float* residual, const int32_t* targets);
  void HeadBackward(MicroBatch& mb, const std::function<void(size_t slot)>& ready, GradientWrite write);
  void BlockBackward(const MicroBatch& mb, int layer, const std::function<void(size_t slot)>& ready,
                     GradientWrite write);
  // Block `layer`'s MLP forward (dense, or its MoE layer) from ln2 onto residual2, into residual3; and its backward
  // from the residual gradient to channel_grad_ (dense, bf16) or moe_in_grad_ (MoE, fp32), its gradients reported.
  void MlpForward(BlockActivations& a, int layer, size_t n);
  void MlpBackward(const MicroBatch& mb, const BlockActivations& a, int layer,
                   const std::function<void(size_t slot)>& ready, GradientWrite write);
  // Block l's MoE weights and gradients where its unit is now.
  gpu::MoeLayerWeights MoeWeightsOf(int layer) const;
  gpu::MoeLayerGradients MoeGradientsOf(int layer) const;
  // The routing totals zeroed, on the stream.
  void ClearMoeTotals();
  // Block `layer` (one the stage holds) of a slot's activations.
  const BlockActivations& Block(const MicroBatch& mb, int layer) const {
    return mb.blocks[static_cast<size_t>(layer - stage().first_layer)];
  }

  ModelConfig config_;
  // options_.placement is resolved: the shard without ZeRO-1 is [0, elements_) at capacity elements_; the parameters
  // and gradients hold its buffer_elements() (the shard's capacity, or fsdp's store), m and v its moment_elements(),
  // and flat element i (or store element i under fsdp) has its moments at i - moment_offset().
  CudaTransformerOptions options_;
  std::vector<TensorSlot> whole_layout_;  // MakeLayout's, where the stage's tensors and their initial weights come from
  std::vector<TensorSlot> layout_;        // the stage's and its experts' (HeldLayout): what the flat buffers hold
  size_t elements_;
  std::vector<AdamWRange> adamw_ranges_;
  std::optional<gpu::AdamWPlan> adamw_plan_;  // adamw_ranges_ on the device, for AdamW's one launch
  std::vector<ParameterUnit> units_;
  std::vector<size_t> slot_units_;    // per slot: its unit
  std::vector<size_t> unit_offsets_;  // per slot: its offset inside its unit (a held one's)
  std::vector<UnitView> views_;  // per unit
  size_t max_tokens_;  // options.max_batch · config.seq: each micro-batch's activations' capacity

  // Declared first, destroyed last: everything below enqueues work on it.
  Stream stream_;
  std::unique_ptr<gpu::Gemm> gemm_;
  std::unique_ptr<gpu::Attention> attention_;
  std::string fallback_reason_;

  // Flat buffers, the stage's layout (P = elements_; under ZeRO-1 the weights and gradients hold the shard's
  // capacity, m and v its elements): fp32 master weights, gradients, AdamW m and v, and the bf16
  // copy of the weights that the GEMMs read (biases included: bf16-output GEMMs take a bf16 bias).
  DeviceBuffer flat_buffers_;
  float* params_ = nullptr;      // (P)
  float* grads_ = nullptr;       // (P)
  float* m_ = nullptr;           // (P)
  float* v_ = nullptr;           // (P)
  Bf16* params_bf16_ = nullptr;  // (P); under FSDP none, and instead:
  Bf16* embedding_bf16_ = nullptr;     // the embeddings unit's bf16 working copy
  Bf16* block_bf16_[2] = {nullptr, nullptr};  // the blocks', by parity of the layer

  // Activations of stage().slots micro-batches and the scratch they share, each for up to max_tokens_ tokens, all in
  // one allocation.
  DeviceBuffer activation_buffer_;
  std::vector<MicroBatch> micro_batches_;  // per slot
  int slot_ = 0;                           // SelectMicroBatch's
  // The last stage's, read only within a Forward: shared by the slots.
  float* logits_ = nullptr;       // (N, Vp)
  float* row_losses_ = nullptr;   // (N)
  Bf16* residual_grad_bf16_ = nullptr; // (N, C) the residual gradient's bf16 copy, the out_grad of the projections'
                                       // backward GEMMs
  Bf16* channel_grad_ = nullptr;       // (N, C) gradient of a LayerNorm output or of the attention output
  float* layernorm_scratch_ = nullptr; // LayerNorm backward's per-block partial sums of its weight gradients
  // (N, max(4C, 3C), or max(Vp, 4C, 3C) on a last stage of one slot): that slot's d loss / d logits (its
  // logits_grad, written by the cross-entropy in Forward), then each block's MLP hidden gradient (N, 4C), then its
  // qkv gradient (N, 3C): each is spent before the next is written (the CPU reference's hidden_grad_ likewise).
  Bf16* grad_scratch_ = nullptr;
  // MoE blocks (none without): the backward's scratch and fp32 input gradient (N, C), shared by the blocks; per MoE
  // block the running totals of its routing since TakeMoeStats: (blocks, E) choices per expert, (blocks) dropped
  // choices and aux losses.
  gpu::MoeLayerScratch moe_scratch_;
  float* moe_in_grad_ = nullptr;
  MoeExperts moe_experts_;  // where the experts are (placement's expert group), and its all-to-alls' figures
  long long* moe_assigned_sum_ = nullptr;
  long long* moe_dropped_sum_ = nullptr;
  double* moe_aux_sum_ = nullptr;
  int moe_forwards_ = 0;  // forwards since TakeMoeStats

  // Pinned staging for the batch's tokens (2, max_tokens_), and the event after their copy to the device: the next
  // SetBatch waits for it before overwriting the staging buffer.
  PinnedBuffer token_staging_;
  Event tokens_copied_;
  PinnedBuffer loss_host_;  // (1)

  float gradient_scale_ = 1.0f;  // SetGradientScale's: d loss / d logits is scaled by it from the next Forward
  std::vector<SlotGraphs> graphs_;  // per slot, at the slots' current shape (options_.cuda_graphs)
  uint64_t graph_replays_ = 0;
  // Device memory is measured after construction and after the first forward and backward of each batch shape
  // (libraries build plans and graphs per shape).
  bool forward_measured_ = false;
  bool backward_measured_ = false;
  uint64_t peak_device_memory_ = 0;
};

CudaTransformer::CudaTransformer(const ModelConfig& config, uint64_t seed, const CudaTransformerOptions& options)
    : config_(config),
      options_(options),
      whole_layout_(MakeLayout(config)),
      layout_(HeldLayout(whole_layout_, options.placement)),
      elements_(layout_.back().offset + layout_.back().count),
      // wte's padding rows are skipped (they stay exactly zero, as in the CPU reference), and consecutive slots
      // with the same decay rule share a range.
      adamw_ranges_(PlacementAdamWRanges(config, layout_, options.placement)),
      units_(ParameterUnits(layout_)),
      // By the whole model's layout (its experts under expert parallel): a stage holds the same units, and a held
      // slot keeps its place in its unit (the last stage's embedding unit, wte without wpe, has wte at its start).
      // Over the stage's own layout SlotUnits could not place the empty slots after its last held one.
      slot_units_(SlotUnits(ExpertLayout(whole_layout_, options.placement.experts))),
      unit_offsets_(UnitOffsets(ExpertLayout(whole_layout_, options.placement.experts))),
      views_(units_.size()),
      max_tokens_(static_cast<size_t>(options.max_batch) * config.seq) {
  moe_experts_.group = placement().experts.group;
  moe_experts_.remote_node = placement().experts.remote_node;
  // The libraries first: their handles and workspaces are then part of what cudaMemGetInfo reports as used.
  gemm_ = std::make_unique<gpu::Gemm>(stream());
  MakeAttention();

  const uint64_t flat_bytes = FlatBytes();
  const uint64_t activation_bytes = PointActivations(nullptr);
  CheckDeviceMemory(flat_bytes + activation_bytes + kLibraryReserveBytes, activation_bytes);

  // Flat buffers: five tensors of P elements (or their shards), each aligned.
  Carver flat(nullptr);
  CarveFlatBuffers(flat);
  flat_buffers_ = DeviceBuffer(flat.used());
  flat = Carver(static_cast<char*>(flat_buffers_.data()));
  CarveFlatBuffers(flat);
  activation_buffer_ = DeviceBuffer(activation_bytes);
  PointActivations(static_cast<char*>(activation_buffer_.data()));
  DropGraphs();  // none yet: one empty set per slot
  token_staging_ = PinnedBuffer(2 * max_tokens_ * sizeof(int32_t));
  loss_host_ = PinnedBuffer(sizeof(float));

  // The padding past the layout (zero1's, fsdp's past each unit) zero, and all-gathered as zeros; Backward writes
  // every gradient but never the padding's, which stays zero for the reduce-scatter.
  ClearFloats(params_, placement().buffer_elements());
  UploadInitialParameters(seed);
  if (!fsdp().enabled()) gpu::CastToBf16(params_bf16_, params_, elements_, stream());
  ClearFloats(grads_, placement().buffer_elements());
  adamw_plan_.emplace(adamw_ranges_, placement().moment_offset());
  ClearFloats(m_, placement().moment_elements());
  ClearFloats(v_, placement().moment_elements());
  for (size_t i = 0; stage().last() && i < micro_batches_.size(); ++i) {  // Loss() before any Forward: 0
    TB_CHECK_CUDA(cudaMemsetAsync(micro_batches_[i].loss, 0, sizeof(float), stream_.get()));
  }
  ClearMoeTotals();
  stream_.Synchronize();
  NoteDeviceMemory();
}

// cuDNN's fused attention unless cuBLAS was asked for; auto falls back to cuBLAS (saying why), cudnn throws.
void CudaTransformer::MakeAttention() {
  const int c = config_.d_model;
  if (options_.attention == AttentionChoice::kCublas) {
    attention_ = gpu::MakeCublasAttention(c, config_.heads, options_.max_batch, config_.seq, stream());
    return;
  }
  try {
    attention_ = gpu::MakeCudnnAttention(c, config_.heads, options_.max_batch, config_.seq, stream(), options_.seq);
  } catch (const RuntimeError& error) {
    if (options_.attention == AttentionChoice::kCudnn) {
      throw RuntimeError(std::string("attention 'cudnn' was asked for, but cuDNN's fused attention cannot run "
                                     "this model here: ") +
                         error.what() + " HINT: choose cublas (or auto, which falls back to it)");
    }
    fallback_reason_ = error.what();
    attention_ = gpu::MakeCublasAttention(c, config_.heads, options_.max_batch, config_.seq, stream());
  }
}

void CudaTransformer::CarveFlatBuffers(Carver& flat) {
  params_ = flat.Take<float>(placement().buffer_elements());
  grads_ = flat.Take<float>(placement().buffer_elements());
  m_ = flat.Take<float>(placement().moment_elements());
  v_ = flat.Take<float>(placement().moment_elements());
  if (!fsdp().enabled()) {
    params_bf16_ = flat.Take<Bf16>(elements_);
    for (size_t u = 0; u < units_.size(); ++u) {
      views_[u] = {params_ + units_[u].begin, grads_ + units_[u].begin, params_bf16_ + units_[u].begin};
    }
    return;
  }
  embedding_bf16_ = flat.Take<Bf16>(units_[kEmbeddingUnit].elements());
  for (Bf16*& block : block_bf16_) block = flat.Take<Bf16>(BlockUnitElements());
}

// The same initial weights as the CPU reference, drawn on the host from the same seed (InitializeParameterRange, on
// every core this rank may use) chunk by chunk into two pinned staging buffers, each chunk's copy running while the
// next is drawn: no pageable vector of all P parameters to fault in (6 GB for gpt2-1.5b), and copies at the pinned
// rate. The pieces are stretches of the whole model's flat buffer: the stage's held slots, consecutive ones joined
// (the whole model is one piece, a stage one or two, as InitializeStageParameters draws them on the host); under
// FSDP this rank's shards of the units, into the shard store.
void CudaTransformer::UploadInitialParameters(uint64_t seed) {
  struct Piece {
    size_t begin, end;  // the whole model's flat elements
    float* device;
  };
  std::vector<Piece> pieces;
  for (size_t s = 0; !fsdp().enabled() && s < layout_.size(); ++s) {
    const size_t count = layout_[s].count;
    if (count == 0) continue;
    const size_t begin = whole_layout_[s].offset + layout_[s].first;  // an expert slot: this rank's experts
    float* device = params_ + layout_[s].offset;
    if (!pieces.empty() && pieces.back().end == begin &&
        pieces.back().device + (pieces.back().end - pieces.back().begin) == device) {
      pieces.back().end += count;
    } else {
      pieces.push_back({begin, begin + count, device});
    }
  }
  for (size_t u = 0; fsdp().enabled() && u < units_.size(); ++u) {
    const OptimizerShard& shard = fsdp().shards[u].shard;
    pieces.push_back({units_[u].begin + shard.begin, units_[u].begin + shard.end, params_ + fsdp().shards[u].store});
  }
  constexpr size_t kChunkElements = size_t{16} << 20;  // 64 MiB of fp32
  const size_t chunk = std::min(kChunkElements, elements_);
  PinnedBuffer staging[2] = {PinnedBuffer(chunk * sizeof(float)), PinnedBuffer(chunk * sizeof(float))};
  Event copied[2];
  size_t i = 0;
  for (const Piece& piece : pieces) {
    for (size_t begin = piece.begin; begin < piece.end; begin += chunk, ++i) {
      const size_t count = std::min(chunk, piece.end - begin);
      PinnedBuffer& buffer = staging[i % 2];
      if (i >= 2) copied[i % 2].Synchronize();  // the copy from this buffer two chunks ago
      float* host = static_cast<float*>(buffer.data());
      InitializeParameterRange(config_, whole_layout_, seed, begin, begin + count, host);
      TB_CHECK_CUDA(cudaMemcpyAsync(piece.device + (begin - piece.begin), host, count * sizeof(float),
                                    cudaMemcpyHostToDevice, stream_.get()));
      copied[i % 2].Record(stream_.get());
    }
  }
  stream_.Synchronize();  // before the staging buffers go
}

UnitAccess& CudaTransformer::Access() const {
  if (unit_access() == nullptr) throw std::logic_error("an FSDP model stepped before SetUnitAccess");
  return *unit_access();
}

void CudaTransformer::HoldParameters(size_t u) {
  if (!fsdp().enabled() || views_[u].params != nullptr) return;  // the embeddings and lnf: held from forward on
  const float* whole = Access().Parameters(u);
  Bf16* bf16 = u == kEmbeddingUnit                    ? embedding_bf16_
               : u == FinalNormUnit(config_.layers) ? nullptr
                                                      : block_bf16_[(u - BlockUnit(0)) % 2];
  // On the stream after the gather's wait: a block's copy overwrites the one two layers back, whose GEMMs were
  // issued before.
  if (bf16 != nullptr) gpu::CastToBf16(bf16, whole, units_[u].elements(), stream());
  views_[u].params = whole;
  views_[u].bf16 = bf16;
}

void CudaTransformer::ReleaseParameters(size_t u) {
  if (!fsdp().enabled()) return;
  Access().ParametersDone(u);
  views_[u].params = nullptr;
  views_[u].bf16 = nullptr;
}

void CudaTransformer::HoldGradients(size_t u) {
  if (fsdp().enabled() && views_[u].grads == nullptr) views_[u].grads = Access().Gradients(u);
}

void CudaTransformer::ReleaseGradients(size_t u) {
  if (!fsdp().enabled()) return;
  Access().GradientsDone(u);
  views_[u].grads = nullptr;
}

// Buffers are freed after the work that uses them has finished. Nothing to report from a destructor: a failed
// synchronisation means the context is already broken, and the call that broke it has reported.
CudaTransformer::~CudaTransformer() { (void)cudaStreamSynchronize(stream_.get()); }

size_t CudaTransformer::PointActivations(char* base) {
  const size_t n = max_tokens_;
  const size_t c = config_.d_model;
  const size_t hidden = static_cast<size_t>(config_.mlp_ratio) * c;
  const size_t vp = config_.vocab_padded;
  Carver carve(base);
  float* shared_residual_grad = stage().first() ? carve.Take<float>(n * c) : nullptr;
  micro_batches_.resize(stage().slots);
  for (MicroBatch& mb : micro_batches_) {
    mb.tokens = carve.Take<int32_t>(2 * n);
    mb.input = carve.Take<float>(n * c);
    CarveBlocks(carve, mb);
    if (stage().last()) {
      mb.lnf = carve.Take<Bf16>(n * c);
      mb.lnf_mean = carve.Take<float>(n);
      mb.lnf_rstd = carve.Take<float>(n);
      mb.loss = carve.Take<float>(1);
      // Slots keep their logits' gradients until their Backwards, in any order; a lone slot's is grad_scratch_.
      if (stage().slots > 1) mb.logits_grad = carve.Take<Bf16>(n * vp);
    }
    mb.residual_grad = stage().first() ? shared_residual_grad : carve.Take<float>(n * c);
    mb.output_grad = stage().last() ? nullptr : carve.Take<float>(n * c);
  }
  if (stage().last()) {
    logits_ = carve.Take<float>(n * vp);
    row_losses_ = carve.Take<float>(n);
  }
  residual_grad_bf16_ = carve.Take<Bf16>(n * c);
  channel_grad_ = carve.Take<Bf16>(n * c);
  layernorm_scratch_ = carve.Take<float>(gpu::LayerNormBackwardScratchFloats(n, config_.d_model));
  const bool logits_grad_in_scratch = stage().last() && stage().slots == 1;
  grad_scratch_ = carve.Take<Bf16>(n * std::max({logits_grad_in_scratch ? vp : size_t{0}, hidden, 3 * c}));
  if (logits_grad_in_scratch) micro_batches_[0].logits_grad = grad_scratch_;
  CarveMoeShared(carve);
  return carve.used();
}

// A slot's blocks: an MoE block's layer in place of the dense MLP's hidden activations.
void CudaTransformer::CarveBlocks(Carver& carve, MicroBatch& mb) {
  const size_t n = max_tokens_;
  const size_t c = config_.d_model;
  const size_t hidden = static_cast<size_t>(config_.mlp_ratio) * c;
  mb.blocks.resize(static_cast<size_t>(stage().end_layer - stage().first_layer));
  for (int l = stage().first_layer; l < stage().end_layer; ++l) {
    BlockActivations& a = mb.blocks[static_cast<size_t>(l - stage().first_layer)];
    const bool moe = IsMoeBlock(config_, l);
    CarveBlockActivations(carve, a, n, c, c, config_.heads, moe ? 0 : hidden);
    if (moe) CarveMoe(carve, [&](char* at) { return gpu::PointMoeActivations(a.moe, at, MoeShape()); });
  }
}

// What the MoE blocks share (nothing without them): the backward's scratch and input gradient, the routing totals.
void CudaTransformer::CarveMoeShared(Carver& carve) {
  if (MoeBlockCount(config_) == 0) return;
  CarveMoe(carve, [&](char* at) { return gpu::PointMoeScratch(moe_scratch_, at, MoeShape()); });
  moe_in_grad_ = carve.Take<float>(max_tokens_ * config_.d_model);
  const size_t blocks = static_cast<size_t>(MoeBlockCount(config_));
  moe_assigned_sum_ = carve.Take<long long>(blocks * config_.moe->experts);
  moe_dropped_sum_ = carve.Take<long long>(blocks);
  moe_aux_sum_ = carve.Take<double>(blocks);
}

void CudaTransformer::CheckDeviceMemory(uint64_t needed_bytes, uint64_t activation_bytes) const {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  TB_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (needed_bytes <= free_bytes) return;
  std::string activations = std::to_string(options_.max_batch) + " x " + std::to_string(config_.seq) + " tokens";
  if (stage().slots > 1) activations = std::to_string(stage().slots) + " micro-batches of " + activations;
  if (stage().split()) {
    activations += " in layers [" + std::to_string(stage().first_layer) + ", " + std::to_string(stage().end_layer) +
                   ") (pipeline stage " + std::to_string(stage().stage) + " of " + std::to_string(stage().stages) + ")";
  }
  throw RuntimeError("the CUDA transformer for model '" + config_.name + "' needs " + FormatBytes(needed_bytes) +
                     " of device memory (" + FormatBytes(static_cast<double>(FlatBytes())) +
                     " for fp32 weights, gradients and AdamW moments and the bf16 weights, " +
                     FormatBytes(activation_bytes) + " for the activations of " + activations + ", " +
                     FormatBytes(kLibraryReserveBytes) + " kept for cuBLASLt and cuDNN), but only " +
                     FormatBytes(free_bytes) + " of the device's " + FormatBytes(total_bytes) +
                     " are free HINT: run fewer layers of the same shape with --layers N, " +
                     "or a smaller --micro-batch");
}

void CudaTransformer::NoteDeviceMemory() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  TB_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  peak_device_memory_ = std::max<uint64_t>(peak_device_memory_, total_bytes - free_bytes);
}

void CudaTransformer::SetBatch(const TokenBatch& tokens) {
  const int batch = tokens.batch, seq = tokens.seq;
  CheckBatchShape(config_, batch, seq);
  if (batch > options_.max_batch) {
    throw InputError(std::string("batch size ") + std::to_string(batch) + " is larger than the " +
                     std::to_string(options_.max_batch) +
                     " sequences the CUDA transformer allocated activations for (its max_batch)");
  }
  MicroBatch& mb = micro_batches_[slot_];
  mb.backward_pending = false;  // the activations are about to change
  if (batch != mb.batch || seq != mb.seq) {
    forward_measured_ = backward_measured_ = false;
    DropGraphs();  // a new shape may grow the libraries' workspaces, which the graphs of the old one point into
  }
  const size_t n = static_cast<size_t>(batch) * seq;
  // The previous batch's copy may still be reading the staging buffer.
  tokens_copied_.Synchronize();
  int32_t* staging = static_cast<int32_t*>(token_staging_.data());
  UnpackTokens(tokens, static_cast<uint64_t>(config_.vocab), staging, staging + n);
  TB_CHECK_CUDA(cudaMemcpyAsync(mb.tokens, staging, 2 * n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_.get()));
  tokens_copied_.Record(stream_.get());
  mb.batch = batch;
  mb.seq = seq;
}

Transformer::StageEdges CudaTransformer::stage_edges() {
  const MicroBatch& mb = micro_batches_[slot_];
  StageEdges edges;
  edges.count = static_cast<size_t>(mb.batch) * mb.seq * config_.d_model;
  if (!stage().first()) {
    edges.input = mb.input;
    edges.input_grad = mb.residual_grad;
  }
  if (!stage().last()) {
    edges.output = mb.blocks.back().residual3;
    edges.output_grad = mb.output_grad;
  }
  return edges;
}

void CudaTransformer::Forward() {
  MicroBatch& mb = micro_batches_[slot_];
  if (mb.batch == 0) throw RuntimeError("Transformer::Forward called before SetBatch");
  mb.backward_pending = false;
  moe_experts_.op_times = op_times();  // expert parallel's exchanges are comm_model's waits
  RunPass(graphs_[static_cast<size_t>(slot_)].forward, [&] { ForwardWork(mb); });
  if (MoeBlockCount(config_) > 0) ++moe_forwards_;
  mb.backward_pending = true;
  if (!forward_measured_) {
    NoteDeviceMemory();
    forward_measured_ = true;
  }
}

template <class Work>
void CudaTransformer::RunPass(PassGraph& pass, Work&& work) {
  if (!options_.cuda_graphs || op_times() != nullptr) return work();  // --op-times' marks are host work
  if (pass.graph.empty()) {
    if (!pass.ran) {  // the first call at this shape: the libraries prepare it
      work();
      pass.ran = true;
      return;
    }
    pass.graph = CapturedGraph::Capture(stream_.get(), work);
  }
  pass.graph.Launch(stream_.get());
  ++graph_replays_;
}

void CudaTransformer::DropGraphs() {
  graphs_.clear();
  graphs_.resize(micro_batches_.size());
}

// Forward's launches, all on the stream (RunPass may capture them).
void CudaTransformer::ForwardWork(MicroBatch& mb) {
  const size_t n = static_cast<size_t>(mb.batch) * mb.seq;
  const int c = config_.d_model;
  const int32_t* inputs = mb.tokens;
  const int32_t* targets = mb.tokens + n;

  // The embeddings are gathered from the fp32 master weights: no GEMM reads them here. Under FSDP they and the final
  // LayerNorm stay held to the end of backward (the tied LM head reads wte last in forward and first in backward).
  // FSDP holds the whole model (a split stage is refused), so the unit calls keep the whole model's order.
  if (stage().first()) {
    HoldParameters(kEmbeddingUnit);
    BeginOp(OpKind::kEmbedding, false);
    gpu::EncoderForward(mb.input, inputs, Param(kWteSlot), Param(kWpeSlot), mb.batch, mb.seq, c, stream());
  }
  const float* residual = mb.input;  // (N, C)
  for (int l = stage().first_layer; l < stage().end_layer; ++l) {
    BlockActivations& a = mb.blocks[static_cast<size_t>(l - stage().first_layer)];
    HoldParameters(BlockUnit(l));
    auto param = [&](BlockTensor t) { return Param(BlockSlot(l, t)); };
    auto bf16_param = [&](BlockTensor t) { return Bf16Param(BlockSlot(l, t)); };
    BeginOp(OpKind::kLayerNorm, false);
    gpu::LayerNormForward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, param(kLn1Weight), param(kLn1Bias), n, c, stream());
    BeginOp(OpKind::kAttention, false);
    gemm_->LinearForward(a.qkv, nullptr, a.ln1, bf16_param(kQkvWeight), bf16_param(kQkvBias), n, c, 3 * c);
    attention_->Forward(a.atty, a.att_lse, a.qkv, mb.batch, mb.seq);
    // The projections add into the fp32 residual stream, with their fp32 master biases.
    gemm_->LinearForwardFloat(a.residual2, residual, a.atty, bf16_param(kAttnProjWeight), param(kAttnProjBias), n,
                              c, c);
    BeginOp(OpKind::kLayerNorm, false);
    gpu::LayerNormForward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, param(kLn2Weight), param(kLn2Bias), n, c,
                          stream());
    BeginOp(OpKind::kMlp, false);
    MlpForward(a, l, n);
    ReleaseParameters(BlockUnit(l));
    residual = a.residual3;
  }
  // A stage before the last stops here: its last block's output is its output edge.
  if (stage().last()) HeadForward(mb, residual, targets);
  EndOps();
}

// The last stage's head: the final LayerNorm over the last block's output `residual`, the tied LM head, and the
// cross-entropy with its gradient.
void CudaTransformer::HeadForward(MicroBatch& mb, const float* residual, const int32_t* targets) {
  const size_t n = static_cast<size_t>(mb.batch) * mb.seq;
  const int c = config_.d_model;
  HoldParameters(FinalNormUnit(config_.layers));
  BeginOp(OpKind::kLayerNorm, false);
  gpu::LayerNormForward(mb.lnf, mb.lnf_mean, mb.lnf_rstd, residual, Param(LnfWeightSlot(config_.layers)),
                        Param(LnfWeightSlot(config_.layers) + 1), n, c, stream());
  // The tied LM head over all Vp rows of wte, so that the GEMM keeps its aligned shape: the padding rows are zero,
  // their logits are 0, and the cross-entropy ignores those columns (and gives them zero gradient).
  BeginOp(OpKind::kLmHead, false);
  gemm_->LinearForwardFloat(logits_, nullptr, mb.lnf, Bf16Param(kWteSlot), nullptr, n, c, config_.vocab_padded);
  // Loss and d loss / d logits together, as llm.c does, the gradient in bf16 for the LM head's backward GEMMs:
  // Backward starts from it.
  gpu::CrossEntropyForwardBackward(mb.logits_grad, row_losses_, mb.loss, logits_, targets, n, config_.vocab,
                                   config_.vocab_padded, gradient_scale_, stream());
}

float CudaTransformer::Loss() {
  if (!stage().last()) return std::numeric_limits<float>::quiet_NaN();  // the loss is the last stage's
  TB_CHECK_CUDA(cudaMemcpyAsync(loss_host_.data(), micro_batches_[slot_].loss, sizeof(float), cudaMemcpyDeviceToHost,
                                stream_.get()));
  stream_.Synchronize();
  return *static_cast<const float*>(loss_host_.data());
}

void CudaTransformer::Backward(const std::function<void(size_t slot)>& gradient_ready, GradientWrite write) {
  MicroBatch& mb = micro_batches_[slot_];
  // Backward spends the logits' gradient that Forward left (in grad_scratch_, with one slot), so it runs once per
  // Forward.
  if (!mb.backward_pending) throw RuntimeError("Transformer::Backward called without a Forward before it");
  mb.backward_pending = false;
  const std::function<void(size_t slot)> ready = [&](size_t slot) {
    if (gradient_ready) gradient_ready(slot);
  };
  if (gradient_ready) {
    BackwardWork(mb, ready, write);  // the callbacks are host work: never in a graph
  } else {
    RunPass(graphs_[static_cast<size_t>(slot_)].backward[write == GradientWrite::kOverwrite ? 0 : 1],
            [&] { BackwardWork(mb, ready, write); });
  }
  if (stage().first()) {
    ReleaseGradients(kEmbeddingUnit);
    ReleaseParameters(kEmbeddingUnit);
  }
  if (!backward_measured_) {
    NoteDeviceMemory();
    backward_measured_ = true;
  }
}

// Backward's launches, all on the stream, with `ready` called as each gradient's are issued (RunPass may capture
// them, without callbacks).
void CudaTransformer::BackwardWork(MicroBatch& mb, const std::function<void(size_t slot)>& ready,
                                   GradientWrite write) {
  // Slots are reported in descending order, as the CPU reference does: lnf, the blocks from last to first, wpe,
  // and wte last (those the stage holds). A slot is reported once the work that finishes its gradient is enqueued on
  // stream(): the loop's all-reduce of its bucket waits for an event recorded there after it.
  const size_t n = static_cast<size_t>(mb.batch) * mb.seq;
  const int c = config_.d_model;
  const int32_t* inputs = mb.tokens;

  if (stage().last()) {
    HeadBackward(mb, ready, write);
  } else {
    // The next stage's input gradient, written by the caller, and its bf16 copy for the last block's projection
    // GEMMs (timed with its MLP, whose backward reads it first). Carried in the slot's residual_grad, so that
    // output_grad is only ever written by the caller.
    BeginOp(OpKind::kMlp, true);
    TB_CHECK_CUDA(cudaMemcpyAsync(mb.residual_grad, mb.output_grad, n * c * sizeof(float), cudaMemcpyDeviceToDevice,
                                  stream_.get()));
    gpu::CastToBf16(residual_grad_bf16_, mb.output_grad, n * c, stream());
  }

  // residual_grad (N, C) carries the gradient of the residual stream down through the blocks in fp32; each
  // residual add passes it on unchanged and each LayerNorm adds its input gradient to it. The projections'
  // backward GEMMs read its bf16 copy, which each LayerNorm backward writes in the same pass.
  for (int l = stage().end_layer - 1; l >= stage().first_layer; --l) BlockBackward(mb, l, ready, write);
  if (stage().first()) {
    BeginOp(OpKind::kEmbedding, true);
    // Before the last stage no LM head has written wte's gradient in this backward: overwriting, the scatter (which
    // adds) starts from zero.
    if (!stage().last() && write == GradientWrite::kOverwrite) ClearFloats(Grad(kWteSlot), layout_[kWteSlot].count);
    gpu::EncoderBackward(Grad(kWteSlot), Grad(kWpeSlot), mb.residual_grad, inputs, mb.batch, mb.seq, c, config_.seq,
                         write, stream());
    ready(kWpeSlot);
  }
  if (stage().first() || stage().last()) ready(kWteSlot);  // either copy of the tied wte
  EndOps();
}

// The last stage's head backward: the LM head from d loss / d logits (N, Vp) in bf16, from Forward (its padding
// columns are zero, so wte's padding rows get a zero gradient; its GEMM writes or adds to wte's gradient, the
// embedding's scatter adds to it at the end), then the final LayerNorm's, which starts the residual gradient.
void CudaTransformer::HeadBackward(MicroBatch& mb, const std::function<void(size_t slot)>& ready,
                                   GradientWrite write) {
  const size_t n = static_cast<size_t>(mb.batch) * mb.seq;
  const int c = config_.d_model;
  const int vp = config_.vocab_padded;
  const size_t lnf_unit = FinalNormUnit(config_.layers);
  HoldGradients(kEmbeddingUnit);
  HoldGradients(lnf_unit);
  BeginOp(OpKind::kLmHead, true);
  gemm_->LinearBackwardInput(channel_grad_, mb.logits_grad, Bf16Param(kWteSlot), nullptr, n, c, vp);
  gemm_->LinearBackwardWeights(Grad(kWteSlot), nullptr, mb.logits_grad, mb.lnf, n, c, vp, write);
  BeginOp(OpKind::kLayerNorm, true);
  TB_CHECK_CUDA(cudaMemsetAsync(mb.residual_grad, 0, n * c * sizeof(float), stream_.get()));
  const size_t lnf_slot = LnfWeightSlot(config_.layers);
  // Each LayerNorm backward also leaves the residual gradient's bf16 copy for the projection GEMMs after it.
  gpu::LayerNormBackward(mb.residual_grad, residual_grad_bf16_, Grad(lnf_slot), Grad(lnf_slot + 1), channel_grad_,
                         mb.blocks.back().residual3, Param(lnf_slot), mb.lnf_mean, mb.lnf_rstd, n, c, write,
                         layernorm_scratch_, stream());
  ready(lnf_slot + 1);
  ready(lnf_slot);
  ReleaseGradients(lnf_unit);
  ReleaseParameters(lnf_unit);
}

// One block's backward, the residual gradient (the slot's residual_grad and its bf16 copy) coming in from above and
// going on below; gradients reported as the CPU reference reports them.
void CudaTransformer::BlockBackward(const MicroBatch& mb, int l, const std::function<void(size_t slot)>& ready,
                                    GradientWrite write) {
  const size_t n = static_cast<size_t>(mb.batch) * mb.seq;
  const int c = config_.d_model;
  auto ready_pair = [&](BlockTensor weight, BlockTensor bias) {
    ready(BlockSlot(l, bias));
    ready(BlockSlot(l, weight));
  };
  const BlockActivations& a = Block(mb, l);
  HoldParameters(BlockUnit(l));
  HoldGradients(BlockUnit(l));
  auto param = [&](BlockTensor t) { return Param(BlockSlot(l, t)); };
  auto bf16_param = [&](BlockTensor t) { return Bf16Param(BlockSlot(l, t)); };
  auto grad = [&](BlockTensor t) { return Grad(BlockSlot(l, t)); };
  const float* residual = l > stage().first_layer ? Block(mb, l - 1).residual3 : mb.input;

  BeginOp(OpKind::kMlp, true);
  MlpBackward(mb, a, l, ready, write);
  BeginOp(OpKind::kLayerNorm, true);
  // From the MLP's input gradient: the dense one's in bf16 (a GEMM's output), an MoE layer's in fp32.
  const auto ln2_backward = [&](const auto* mlp_in_grad) {
    gpu::LayerNormBackward(mb.residual_grad, residual_grad_bf16_, grad(kLn2Weight), grad(kLn2Bias), mlp_in_grad,
                           a.residual2, param(kLn2Weight), a.ln2_mean, a.ln2_rstd, n, c, write, layernorm_scratch_,
                           stream());
  };
  if (IsMoeBlock(config_, l)) {
    ln2_backward(moe_in_grad_);
  } else {
    ln2_backward(channel_grad_);
  }
  ready_pair(kLn2Weight, kLn2Bias);

  // Attention projection, attention, qkv.
  BeginOp(OpKind::kAttention, true);
  gemm_->LinearBackwardInput(channel_grad_, residual_grad_bf16_, bf16_param(kAttnProjWeight), nullptr, n, c, c);
  gemm_->LinearBackwardWeights(grad(kAttnProjWeight), grad(kAttnProjBias), residual_grad_bf16_, a.atty, n, c, c,
                               write);
  ready_pair(kAttnProjWeight, kAttnProjBias);
  Bf16* qkv_grad = grad_scratch_;  // (N, 3C): the MLP's hidden gradient is spent by now
  attention_->Backward(qkv_grad, channel_grad_, a.qkv, a.atty, a.att_lse, mb.batch, mb.seq);
  gemm_->LinearBackwardInput(channel_grad_, qkv_grad, bf16_param(kQkvWeight), nullptr, n, c, 3 * c);
  gemm_->LinearBackwardWeights(grad(kQkvWeight), grad(kQkvBias), qkv_grad, a.ln1, n, c, 3 * c, write);
  ready_pair(kQkvWeight, kQkvBias);
  // The bf16 copy is for the next block down; below the stage's first block only the fp32 gradient is read (by the
  // embeddings' backward, or as the input gradient by the previous stage, which makes its own copy).
  BeginOp(OpKind::kLayerNorm, true);
  gpu::LayerNormBackward(mb.residual_grad, l > stage().first_layer ? residual_grad_bf16_ : nullptr, grad(kLn1Weight),
                         grad(kLn1Bias), channel_grad_, residual, param(kLn1Weight), a.ln1_mean, a.ln1_rstd, n, c,
                         write, layernorm_scratch_, stream());
  ready_pair(kLn1Weight, kLn1Bias);
  ReleaseGradients(BlockUnit(l));
  ReleaseParameters(BlockUnit(l));
}

// The dense MLP (fc with its GELU epilogue, proj adding into the fp32 residual stream), or an MoE block's layer with
// its routing added to the step's totals.
void CudaTransformer::MlpForward(BlockActivations& a, int l, size_t n) {
  const int c = config_.d_model;
  if (IsMoeBlock(config_, l)) {
    const MoeConfig& moe = *config_.moe;
    gpu::MoeLayerForward(*gemm_, a.moe, moe_scratch_, a.residual3, a.residual2, a.ln2, MoeWeightsOf(l), moe, n, c,
                         stream(), &moe_experts_);
    const size_t block = static_cast<size_t>(l / moe.every);
    gpu::MoeAccumulateStats(moe_assigned_sum_ + block * moe.experts, moe_dropped_sum_ + block, moe_aux_sum_ + block,
                            a.moe.assigned, a.moe.dropped, a.moe.aux_loss, moe.experts, stream());
    return;
  }
  const int hidden = config_.mlp_ratio * c;
  const Bf16* fc_weight = Bf16Param(BlockSlot(l, kFcWeight));
  gemm_->LinearForward(a.fch_gelu, a.fch, a.ln2, fc_weight, Bf16Param(BlockSlot(l, kFcBias)), n, c, hidden);
  gemm_->LinearForwardFloat(a.residual3, a.residual2, a.fch_gelu, Bf16Param(BlockSlot(l, kMlpProjWeight)),
                            Param(BlockSlot(l, kMlpProjBias)), n, hidden, c);
}

// The dense MLP's backward into channel_grad_: the GELU gradient fused into proj's input gradient (the DGELU epilogue
// over fch), and so, when overwriting, fc's bias gradient where cuBLASLt offers DGELU_BGRAD. An MoE layer's into
// moe_in_grad_, its aux loss weighted as the loss is (the aux loss is added to the loss as it is).
void CudaTransformer::MlpBackward(const MicroBatch& mb, const BlockActivations& a, int l,
                                  const std::function<void(size_t slot)>& ready, GradientWrite write) {
  const size_t n = static_cast<size_t>(mb.batch) * mb.seq;
  const int c = config_.d_model;
  auto grad = [&](BlockTensor t) { return Grad(BlockSlot(l, t)); };
  auto ready_pair = [&](BlockTensor weight, BlockTensor bias) {
    ready(BlockSlot(l, bias));
    ready(BlockSlot(l, weight));
  };
  if (IsMoeBlock(config_, l)) {
    gpu::MoeLayerBackward(*gemm_, moe_scratch_, moe_in_grad_, MoeGradientsOf(l), mb.residual_grad, gradient_scale_,
                          a.ln2, MoeWeightsOf(l), a.moe, *config_.moe, n, c, write, stream(), &moe_experts_);
    ready(BlockSlot(l, kRouterWeight));
    ready_pair(kMlpProjWeight, kMlpProjBias);
    ready_pair(kFcWeight, kFcBias);
    return;
  }
  const int hidden = config_.mlp_ratio * c;
  Bf16* hidden_grad = grad_scratch_;  // (N, 4C): the logits' gradient is spent by now
  const bool fc_bias_written = gemm_->LinearBackwardInput(
      hidden_grad, residual_grad_bf16_, Bf16Param(BlockSlot(l, kMlpProjWeight)), a.fch, n, hidden, c,
      write == GradientWrite::kOverwrite ? grad(kFcBias) : nullptr);
  gemm_->LinearBackwardWeights(grad(kMlpProjWeight), grad(kMlpProjBias), residual_grad_bf16_, a.fch_gelu, n,
                               hidden, c, write);
  ready_pair(kMlpProjWeight, kMlpProjBias);
  gemm_->LinearBackwardInput(channel_grad_, hidden_grad, Bf16Param(BlockSlot(l, kFcWeight)), nullptr, n, c, hidden);
  gemm_->LinearBackwardWeights(grad(kFcWeight), fc_bias_written ? nullptr : grad(kFcBias), hidden_grad, a.ln2, n,
                               c, hidden, write);
  ready_pair(kFcWeight, kFcBias);
}

gpu::MoeLayerWeights CudaTransformer::MoeWeightsOf(int l) const {
  return {Bf16Param(BlockSlot(l, kRouterWeight)), Bf16Param(BlockSlot(l, kFcWeight)), Bf16Param(BlockSlot(l, kFcBias)),
          Bf16Param(BlockSlot(l, kMlpProjWeight)), Bf16Param(BlockSlot(l, kMlpProjBias))};
}

gpu::MoeLayerGradients CudaTransformer::MoeGradientsOf(int l) const {
  return {Grad(BlockSlot(l, kRouterWeight)), Grad(BlockSlot(l, kFcWeight)), Grad(BlockSlot(l, kFcBias)),
          Grad(BlockSlot(l, kMlpProjWeight)), Grad(BlockSlot(l, kMlpProjBias))};
}

MoeStepStats CudaTransformer::TakeMoeStats() {
  MoeStepStats stats;
  const int blocks = MoeBlockCount(config_);
  const int experts = config_.moe ? config_.moe->experts : 0;
  stats.Reset(blocks, experts);
  if (blocks == 0) return stats;
  const size_t count = static_cast<size_t>(blocks) * experts;
  std::vector<long long> assigned(count), dropped(blocks);
  std::vector<double> aux(blocks);
  stream_.Synchronize();
  CopyDeviceToHost(assigned.data(), moe_assigned_sum_, count * sizeof(long long));
  CopyDeviceToHost(dropped.data(), moe_dropped_sum_, dropped.size() * sizeof(long long));
  CopyDeviceToHost(aux.data(), moe_aux_sum_, aux.size() * sizeof(double));
  for (int b = 0; b < blocks; ++b) {
    const auto first = assigned.begin() + static_cast<std::ptrdiff_t>(b) * experts;
    stats.AddBlock(b, std::vector<int64_t>(first, first + experts), dropped[b], aux[b]);
  }
  stats.forwards = moe_forwards_;
  stats.alltoall = moe_experts_.figures;
  moe_experts_.figures = {};
  ClearMoeTotals();
  return stats;
}

void CudaTransformer::ClearMoeTotals() {
  moe_forwards_ = 0;
  if (MoeBlockCount(config_) == 0) return;
  const size_t blocks = static_cast<size_t>(MoeBlockCount(config_));
  TB_CHECK_CUDA(cudaMemsetAsync(moe_assigned_sum_, 0, blocks * config_.moe->experts * sizeof(long long),
                                stream_.get()));
  TB_CHECK_CUDA(cudaMemsetAsync(moe_dropped_sum_, 0, blocks * sizeof(long long), stream_.get()));
  TB_CHECK_CUDA(cudaMemsetAsync(moe_aux_sum_, 0, blocks * sizeof(double), stream_.get()));
}

void CudaTransformer::AdamWStep(const AdamWConfig& config, int64_t step) {
  if (step < 1) throw InputError(std::string("AdamW step counts from 1, got ") + std::to_string(step));
  // One launch over every range (the moments hold the shard's elements: flat element i is moment i -
  // placement().moment_offset()); the bf16 weights are rewritten from the updated master weights in the same pass,
  // and wte's padding rows, skipped, stay zero in both. Under FSDP the ranges are in the shard store, and there is no
  // bf16 copy to rewrite (a unit's is cast where it is gathered).
  BeginOp(OpKind::kOptimizer, true);
  gpu::AdamWUpdate(params_, grads_, m_, v_, *adamw_plan_, config, step, stream(),
                   fsdp().enabled() ? nullptr : params_bf16_);
  EndOps();
}

// CUDA graphs replay passes without the host work inside them that fsdp's gathers, pipeline stages' edges and MoE
// routing's host plans need (expert parallel over a model without MoE blocks is ResolvePlacement's to refuse).
void CheckCudaGraphs(const ModelConfig& config, const ModelPlacement& placement) {
  const std::string gap = CudaGraphGap(config, placement.fsdp.enabled(), placement.stage.split());
  if (!gap.empty()) {
    throw InputError("CUDA graphs of the step are not built with " + gap +
                     " (their passes do host work between launches) HINT: drop --cuda-graph");
  }
}

}  // namespace

std::unique_ptr<Transformer> MakeCudaTransformer(const ModelConfig& config, uint64_t seed,
                                                 const CudaTransformerOptions& options,
                                                 std::string* fallback_reason) {
  ValidateModel(config);
  // Every slot offset of the flat buffers and every activation row is then a multiple of 8 elements: bf16 weights,
  // biases and rows stay 16-byte aligned, which cuBLASLt's bias and GELU epilogues require (gemm.h refuses less).
  if (config.d_model % 8 != 0) {
    throw InputError(std::string("--d-model ") + std::to_string(config.d_model) +
                     " is not a multiple of 8, which the CUDA transformer needs (16-byte aligned bf16 rows and biases "
                     "for cuBLASLt) HINT: a d_model of 8·k, or --backend cpu");
  }
  if (config.moe && config.moe->expert_ffn % 8 != 0) {
    throw InputError(std::string("--expert-ffn ") + std::to_string(config.moe->expert_ffn) +
                     " is not a multiple of 8, which the CUDA MoE layer needs (its experts' GELU epilogue) HINT: an "
                     "expert width of 8·k, or --backend cpu");
  }
  if (options.max_batch < 1) {
    throw InputError(std::string("the CUDA transformer's max_batch must be at least 1, got ") +
                     std::to_string(options.max_batch));
  }
  if (options.cuda_graphs) CheckCudaGraphs(config, options.placement);
  if (options.seq < 0 || options.seq > config.seq) {
    throw InputError("the CUDA transformer's run sequence length " + std::to_string(options.seq) + " is outside 0.." +
                     std::to_string(config.seq) + ", the positions of model '" + config.name + "'");
  }
  CudaTransformerOptions resolved = options;  // before any device memory is taken
  resolved.placement = ResolvePlacement(config, MakeLayout(config), options.placement);
  auto model = std::make_unique<CudaTransformer>(config, seed, resolved);
  if (fallback_reason != nullptr) *fallback_reason = model->fallback_reason();
  return model;
}

}  // namespace tb
