// Megatron-LM tensor parallelism on the GPU (tensor_parallel.h): the CPU reference's split (cpu_tp_transformer.cc)
// in the mixed precision of the single-GPU CUDA model (cuda_transformer.cu), one rank of the group per GPU. Each rank
// holds its slices of the weights in the local flat layout (TensorParallelLayout) as fp32 master weights, gradients
// and AdamW moments, with a bf16 copy for the GEMMs; activations are bf16 but for the residual stream, the LayerNorm
// statistics, the attention log-sum-exp and the logits, which stay fp32. Shapes: N = B·S tokens, C = d_model, Cl =
// C/T (the local heads' width), Fl = mlp_ratio·C/T (the local MLP hidden), Vl = Vp/T (the local vocabulary rows).
//
// Every activation all-reduce is fp32 and blocking, as in the CPU reference: the model's stream is synchronised, the
// communicator (NCCL, device memory) all-reduces the buffer in place and is synchronised in turn, and only then is the
// work after it issued. What is all-reduced: the vocab-parallel embedding's lookup (N, C), each row-parallel layer's
// partial product (N, C) (the GEMM writes it into an fp32 scratch without bias or residual; one kernel then adds the
// replicated bias and the residual), the cross-entropy's row maxima (N, max) and its sums of exp with the target
// logits (2N, sum); in backward the input gradients of qkv, fc and the LM head (N, C), each from a GEMM with an fp32
// output (cuBLAS's GemmEx: gemm.h's input-gradient GEMM writes bf16, and rounding each rank's partial sum to bf16
// before the group's sum would add T roundings where the full model has one). A group of one all-reduces nothing.
//
// Replicated parameters get the same gradient on every rank of the group only up to the order of atomic adds
// (LayerNorm backward's shared-memory sums of its weight gradients, the position embedding's atomics): the CPU
// reference's are bit-identical, these can differ in their last bits, and AdamW carries such differences on.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "clock.h"
#include "cuda/attention.h"
#include "cuda/cublas_check.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_raii.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "cuda/model_parts.h"
#include "cuda/tp_kernels.h"
#include "error.h"
#include "tensor_parallel.h"
#include "transformer.h"
#include "units.h"
#include "vocab_parallel_math.h"

namespace tb {
namespace {

using gpu::Bf16;

using cuda_model::BlockActivations;
using cuda_model::Carver;
using cuda_model::CarveBlockActivations;
using cuda_model::CudaPhaseClock;
using cuda_model::kLibraryReserveBytes;

// The initial weights are drawn on the host in chunks of up to this many elements (64 MiB of fp32).
constexpr size_t kUploadChunkElements = size_t{16} << 20;

// in_grad (N, IC) fp32 = out_grad (N, OC) · weight (OC, IC), bf16 operands and fp32 accumulation, overwritten: the
// partial input gradient of a column-parallel layer (or of the LM head), all-reduced in fp32 after. Row-major through
// cuBLAS's column-major convention as gemm.cu's LinearBackwardInput: in_gradᵀ (IC, N) = weight as column-major
// (IC, OC) · out_gradᵀ (OC, N).
class FloatInputGradient {
 public:
  explicit FloatInputGradient(cudaStream_t stream) {
    cublasHandle_t raw = nullptr;
    TB_CHECK_CUBLAS(cublasCreate(&raw));
    handle_.reset(raw);
    TB_CHECK_CUBLAS(cublasSetStream(raw, stream));
  }

  void Run(float* in_grad, const Bf16* out_grad, const Bf16* weight, size_t rows, int in_features, int out_features) {
    if (rows == 0) return;
    if (rows > static_cast<size_t>(INT_MAX)) {
      throw RuntimeError("the tensor-parallel input gradient over " + std::to_string(rows) +
                         " rows: more than cuBLAS's GemmEx takes in one call HINT: a smaller --micro-batch");
    }
    const float alpha = 1.0f;
    const float beta = 0.0f;
    TB_CHECK_CUBLAS(cublasGemmEx(handle_.get(), CUBLAS_OP_N, CUBLAS_OP_N, in_features, static_cast<int>(rows),
                                 out_features, &alpha, weight, CUDA_R_16BF, in_features, out_grad, CUDA_R_16BF,
                                 out_features, &beta, in_grad, CUDA_R_32F, in_features, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
  }

 private:
  // A failed destroy means the context is already broken, and whatever broke it has reported.
  struct Destroy {
    void operator()(cublasHandle_t handle) const noexcept { (void)cublasDestroy(handle); }
  };
  std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, Destroy> handle_;
};

using LocalDims = TensorParallelDims;


// A stretch of local elements drawn on the host and copied up at once: `rows` runs of `count` elements, contiguous
// locally from `local`, `stride` apart in the full layout from `full` (one run: a plain stretch; more: the rows of a
// row-parallel weight, or q, k and v of the local heads, which TensorParallelStretches gives one by one).
struct UploadRun {
  size_t local = 0, full = 0, count = 0, stride = 0, rows = 0;
  size_t span(size_t first, size_t last) const { return (last - first - 1) * stride + count; }  // full elements
};

// Whether stretch `s` continues `run` at the same stride, with at most T times the local elements in the full span
// (so that drawing the span costs at most T times what the slices need).
bool Continues(const UploadRun& run, const TensorParallelStretch& s, int tp) {
  if (s.count != run.count || s.local != run.local + run.rows * run.count || s.full <= run.full) return false;
  const size_t stride = run.rows == 1 ? s.full - run.full : run.stride;
  return s.full == run.full + run.rows * stride && stride >= run.count && stride <= static_cast<size_t>(tp) * run.count;
}

// Rank `rank`'s stretches as runs, none longer than `chunk` elements per row.
std::vector<UploadRun> UploadRuns(const ModelConfig& config, int tp, int rank, size_t chunk) {
  std::vector<UploadRun> runs;
  for (const TensorParallelStretch& stretch : TensorParallelStretches(config, tp, rank)) {
    for (size_t done = 0; done < stretch.count; done += chunk) {
      const TensorParallelStretch s{stretch.local + done, stretch.full + done, std::min(chunk, stretch.count - done)};
      if (!runs.empty() && Continues(runs.back(), s, tp)) {
        UploadRun& run = runs.back();
        if (run.rows == 1) run.stride = s.full - run.full;
        ++run.rows;
      } else {
        runs.push_back({s.local, s.full, s.count, s.count, 1});
      }
    }
  }
  return runs;
}

class CudaTensorParallelTransformer final : public Transformer, public TensorParallelStats {
 public:
  CudaTensorParallelTransformer(const ModelConfig& config, uint64_t seed, Communicator& tp,
                                const CudaTransformerOptions& options);
  ~CudaTensorParallelTransformer() override;
  CudaTensorParallelTransformer(const CudaTensorParallelTransformer&) = delete;
  CudaTensorParallelTransformer& operator=(const CudaTensorParallelTransformer&) = delete;

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

  using Transformer::SetBatch;
  void SetBatch(const TokenBatch& tokens) override;
  void Forward() override;
  float Loss() override;
  using Transformer::Backward;
  void Backward(const std::function<void(size_t slot)>& gradient_ready, GradientWrite write) override;
  void SetGradientScale(float scale) override { gradient_scale_ = scale; }
  void SelectMicroBatch(int slot) override { CheckedSlot(options_.placement.stage, slot); }
  StageEdges stage_edges() override { return {}; }
  void AdamWStep(const AdamWConfig& config, int64_t step) override;
  const ModelPlacement& placement() const override { return options_.placement; }
  // As the single-GPU model's without FSDP, over the local elements.
  ModelStateBytes state_bytes() const override {
    return {2.0 * elements_, 4.0 * shard().capacity, 4.0 * (shard().capacity + 2.0 * shard().elements())};
  }
  void Synchronize() override { stream_.Synchronize(); }
  void ClearFloats(float* data, size_t count) override {
    TB_CHECK_CUDA(cudaMemsetAsync(data, 0, count * sizeof(float), stream_.get()));
  }
  void ParametersChanged() override { gpu::CastToBf16(params_bf16_, params_, elements_, stream()); }

  // TensorParallelStats.
  int tensor_parallel() const override { return dims_.tp; }
  int tensor_parallel_rank() const override { return dims_.rank; }
  TensorParallelComm last_step_comm() const override { return step_comm_; }
  TensorParallelComm TakeComm() override { return std::exchange(take_comm_, TensorParallelComm{}); }

 private:
  // ZeRO-1's shard of the local elements (resolved: all of them without ZeRO-1).
  const OptimizerShard& shard() const { return options_.placement.shard; }
  void MakeAttention();
  size_t PointActivations(char* base);
  void CarveFlatBuffers(Carver& flat);
  uint64_t FlatBytes() const {
    return (2 * shard().capacity + 2 * shard().elements()) * sizeof(float) + elements_ * sizeof(Bf16);
  }
  void CheckDeviceMemory(uint64_t needed_bytes, uint64_t activation_bytes) const;
  void NoteDeviceMemory();
  void UploadInitialParameters(uint64_t seed);
  std::vector<AdamWRange> LocalAdamWRanges() const;

  const float* Param(size_t slot) const { return params_ + layout_[slot].offset; }
  const Bf16* Bf16Param(size_t slot) const { return params_bf16_ + layout_[slot].offset; }
  float* Grad(size_t slot) const { return grads_ + layout_[slot].offset; }
  size_t tokens() const { return static_cast<size_t>(batch_) * seq_; }

  void AllReduce(float* data, size_t count, ReduceOp op);
  void EmbeddingForward();
  void BlockForward(int layer, const float* residual);
  void RowParallelForward(float* out, const float* residual, const Bf16* in, const Bf16* weight, const float* bias,
                          int in_channels);
  void VocabParallelCrossEntropy();
  void HeadBackward(GradientWrite write);
  void BlockBackward(int layer, const std::function<void(size_t slot)>& ready, GradientWrite write);
  void ColumnParallelBackward(float* weight_grad, float* bias_grad, const Bf16* out_grad, const Bf16* in,
                              const Bf16* weight, int out_channels, GradientWrite write);

  ModelConfig config_;
  CudaTransformerOptions options_;  // its placement resolved over the local elements: the whole model, no fsdp
  Communicator& tp_;
  LocalDims dims_;
  std::vector<TensorSlot> layout_;  // TensorParallelLayout
  size_t elements_;
  std::vector<AdamWRange> adamw_ranges_;
  std::optional<gpu::AdamWPlan> adamw_plan_;  // adamw_ranges_ on the device, for AdamW's one launch
  size_t max_tokens_;  // options.max_batch · config.seq

  // Declared before everything that enqueues work on it, so destroyed after.
  Stream stream_;
  std::unique_ptr<gpu::Gemm> gemm_;
  std::unique_ptr<FloatInputGradient> input_gradient_;
  std::unique_ptr<gpu::Attention> attention_;  // over the local heads: H/T heads of C/H channels

  // Flat buffers in TensorParallelLayout's order (P = elements_; the weights and gradients hold the ZeRO-1 shard's
  // capacity, m and v its elements).
  DeviceBuffer flat_buffers_;
  float* params_ = nullptr;      // (P)
  float* grads_ = nullptr;       // (P)
  float* m_ = nullptr;           // (shard)
  float* v_ = nullptr;           // (shard)
  Bf16* params_bf16_ = nullptr;  // (P) the copy the GEMMs read

  // Activations and backward scratch for up to max_tokens_ tokens, in one allocation.
  DeviceBuffer activation_buffer_;
  int32_t* tokens_ = nullptr;  // (2, N) inputs, then targets
  float* encoded_ = nullptr;   // (N, C) token + position embedding
  std::vector<BlockActivations> blocks_;
  Bf16* lnf_ = nullptr;        // (N, C)
  float* lnf_mean_ = nullptr;  // (N)
  float* lnf_rstd_ = nullptr;  // (N)
  float* logits_ = nullptr;    // (N, Vl) over the local vocabulary rows
  float* row_max_ = nullptr;   // (N) the group's row maxima
  float* row_sums_ = nullptr;  // (2N) the group's sums of exp | target logits: one all-reduce
  float* row_losses_ = nullptr;  // (N)
  float* loss_ = nullptr;        // (1)
  // (N, C) fp32: the partial sums the group all-reduces, a row-parallel layer's product in forward, a
  // column-parallel layer's (or the LM head's) input gradient in backward; each spent before the next is written.
  float* reduce_ = nullptr;
  float* residual_grad_ = nullptr;      // (N, C)
  Bf16* residual_grad_bf16_ = nullptr;  // (N, C) its bf16 copy, for the row-parallel layers' backward GEMMs
  Bf16* attention_grad_ = nullptr;      // (N, Cl) the attention output's gradient
  float* layernorm_scratch_ = nullptr;
  // (N, max(Vl, Fl, 3Cl)) bf16: d loss / d logits from Forward, then each block's MLP hidden gradient, then its qkv
  // gradient, each spent before the next is written.
  Bf16* grad_scratch_ = nullptr;

  PinnedBuffer token_staging_;  // (2, max_tokens_)
  Event tokens_copied_;
  PinnedBuffer loss_host_;  // (1)

  int batch_ = 0;
  int seq_ = 0;
  float gradient_scale_ = 1.0f;  // SetGradientScale's: d loss / d logits is scaled by it from the next Forward
  bool backward_pending_ = false;
  bool forward_measured_ = false;
  bool backward_measured_ = false;
  uint64_t peak_device_memory_ = 0;
  TensorParallelComm step_comm_;  // since the last Forward began
  TensorParallelComm take_comm_;  // since the last TakeComm
};

CudaTensorParallelTransformer::CudaTensorParallelTransformer(const ModelConfig& config, uint64_t seed,
                                                             Communicator& tp, const CudaTransformerOptions& options)
    : config_(config),
      options_(options),
      tp_(tp),
      dims_(MakeTensorParallelDims(config, tp.size(), tp.rank())),
      layout_(TensorParallelLayout(config, tp.size())),
      elements_(layout_.back().offset + layout_.back().count),
      adamw_ranges_(LocalAdamWRanges()),
      max_tokens_(static_cast<size_t>(options.max_batch) * config.seq) {
  // The libraries first: their handles and workspaces are then part of what cudaMemGetInfo reports as used.
  gemm_ = std::make_unique<gpu::Gemm>(stream());
  input_gradient_ = std::make_unique<FloatInputGradient>(stream_.get());
  MakeAttention();

  const uint64_t activation_bytes = PointActivations(nullptr);
  CheckDeviceMemory(FlatBytes() + activation_bytes + kLibraryReserveBytes, activation_bytes);
  Carver flat(nullptr);
  CarveFlatBuffers(flat);
  flat_buffers_ = DeviceBuffer(flat.used());
  flat = Carver(static_cast<char*>(flat_buffers_.data()));
  CarveFlatBuffers(flat);
  activation_buffer_ = DeviceBuffer(activation_bytes);
  PointActivations(static_cast<char*>(activation_buffer_.data()));
  token_staging_ = PinnedBuffer(2 * max_tokens_ * sizeof(int32_t));
  loss_host_ = PinnedBuffer(sizeof(float));

  ClearFloats(params_, shard().capacity);  // ZeRO-1's padding past the layout stays zero
  UploadInitialParameters(seed);
  gpu::CastToBf16(params_bf16_, params_, elements_, stream());
  ClearFloats(grads_, shard().capacity);  // Backward never writes ZeRO-1's padding: it stays zero
  adamw_plan_.emplace(adamw_ranges_, shard().begin);
  ClearFloats(m_, shard().elements());
  ClearFloats(v_, shard().elements());
  TB_CHECK_CUDA(cudaMemsetAsync(loss_, 0, sizeof(float), stream_.get()));  // Loss() before any Forward: 0
  stream_.Synchronize();
  NoteDeviceMemory();
}

// Buffers are freed after the work that uses them has finished; a failed synchronisation means the context is
// already broken, and the call that broke it has reported.
CudaTensorParallelTransformer::~CudaTensorParallelTransformer() { (void)cudaStreamSynchronize(stream_.get()); }

// The attention over the local heads (C/T channels, H/T heads: the head size stays C/H), chosen as the single-GPU
// model chooses it (auto: cuDNN where it takes the shape, cuBLAS otherwise; attention() says which runs).
void CudaTensorParallelTransformer::MakeAttention() {
  const int channels = dims_.channels, heads = dims_.heads;
  if (options_.attention == AttentionChoice::kCublas) {
    attention_ = gpu::MakeCublasAttention(channels, heads, options_.max_batch, config_.seq, stream());
    return;
  }
  try {
    attention_ = gpu::MakeCudnnAttention(channels, heads, options_.max_batch, config_.seq, stream(), options_.seq);
  } catch (const RuntimeError& error) {
    if (options_.attention == AttentionChoice::kCudnn) {
      throw RuntimeError(std::string("attention 'cudnn' was asked for, but cuDNN's fused attention cannot run the "
                                     "local heads of this tensor-parallel model here: ") +
                         error.what() + " HINT: choose cublas (or auto, which falls back to it)");
    }
    attention_ = gpu::MakeCublasAttention(channels, heads, options_.max_batch, config_.seq, stream());
  }
}

// AdamWRanges leaves out wte's rows from config.vocab on; locally, those past the slice's real tokens.
std::vector<AdamWRange> CudaTensorParallelTransformer::LocalAdamWRanges() const {
  ModelConfig local = config_;
  local.vocab = dims_.vocab_used;
  return AdamWRanges(local, layout_, shard().begin, shard().end);
}

void CudaTensorParallelTransformer::CarveFlatBuffers(Carver& flat) {
  params_ = flat.Take<float>(shard().capacity);
  grads_ = flat.Take<float>(shard().capacity);
  m_ = flat.Take<float>(shard().elements());
  v_ = flat.Take<float>(shard().elements());
  params_bf16_ = flat.Take<Bf16>(elements_);
}

size_t CudaTensorParallelTransformer::PointActivations(char* base) {
  const size_t n = max_tokens_, c = dims_.c, lc = dims_.channels, lf = dims_.hidden, vl = dims_.vocab_rows;
  Carver carve(base);
  tokens_ = carve.Take<int32_t>(2 * n);
  encoded_ = carve.Take<float>(n * c);
  blocks_.resize(config_.layers);
  for (BlockActivations& a : blocks_) CarveBlockActivations(carve, a, n, c, lc, dims_.heads, lf);
  lnf_ = carve.Take<Bf16>(n * c);
  lnf_mean_ = carve.Take<float>(n);
  lnf_rstd_ = carve.Take<float>(n);
  logits_ = carve.Take<float>(n * vl);
  row_max_ = carve.Take<float>(n);
  row_sums_ = carve.Take<float>(2 * n);
  row_losses_ = carve.Take<float>(n);
  loss_ = carve.Take<float>(1);
  reduce_ = carve.Take<float>(n * c);
  residual_grad_ = carve.Take<float>(n * c);
  residual_grad_bf16_ = carve.Take<Bf16>(n * c);
  attention_grad_ = carve.Take<Bf16>(n * lc);
  layernorm_scratch_ = carve.Take<float>(gpu::LayerNormBackwardScratchFloats(n, dims_.c));
  grad_scratch_ = carve.Take<Bf16>(n * std::max({vl, lf, 3 * lc}));
  return carve.used();
}

void CudaTensorParallelTransformer::CheckDeviceMemory(uint64_t needed_bytes, uint64_t activation_bytes) const {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  TB_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (needed_bytes <= free_bytes) return;
  throw RuntimeError("rank " + std::to_string(dims_.rank) + " of the tensor-parallel CUDA transformer for model '" +
                     config_.name + "' over " + std::to_string(dims_.tp) + " ranks needs " +
                     FormatBytes(needed_bytes) + " of device memory (" + FormatBytes(static_cast<double>(FlatBytes())) +
                     " for its slices' fp32 weights, gradients and AdamW moments and their bf16 copy, " +
                     FormatBytes(activation_bytes) + " for the activations of " + std::to_string(options_.max_batch) +
                     " x " + std::to_string(config_.seq) + " tokens, " + FormatBytes(kLibraryReserveBytes) +
                     " kept for cuBLAS and cuDNN), but only " + FormatBytes(free_bytes) + " of the device's " +
                     FormatBytes(total_bytes) + " are free HINT: a larger --tensor-parallel, fewer layers of the " +
                     "same shape with --layers N, or a smaller --micro-batch");
}

void CudaTensorParallelTransformer::NoteDeviceMemory() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  TB_CHECK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  peak_device_memory_ = std::max<uint64_t>(peak_device_memory_, total_bytes - free_bytes);
}

// The full model's initial bits for this rank's slices, drawn on the host from the same seed (InitializeParameterRange
// over the full layout) into two pinned staging buffers, each chunk's copy running while the next is drawn, as the
// single-GPU model uploads its weights. The stretches come as runs (UploadRuns): a run's full span is drawn at once
// and its rows copied up by one strided cudaMemcpy2DAsync, rather than one draw and one copy per row of each
// row-parallel weight.
void CudaTensorParallelTransformer::UploadInitialParameters(uint64_t seed) {
  const std::vector<TensorSlot> full = MakeLayout(config_);
  const size_t chunk = std::min(kUploadChunkElements, elements_);
  PinnedBuffer staging[2] = {PinnedBuffer(chunk * sizeof(float)), PinnedBuffer(chunk * sizeof(float))};
  Event copied[2];
  size_t i = 0;
  for (const UploadRun& run : UploadRuns(config_, dims_.tp, dims_.rank, chunk)) {
    const size_t rows_per_chunk = 1 + (chunk - run.count) / run.stride;  // the last row's span is count
    for (size_t first = 0; first < run.rows; first += rows_per_chunk, ++i) {
      const size_t last = std::min(run.rows, first + rows_per_chunk);
      if (i >= 2) copied[i % 2].Synchronize();  // the copy from this buffer two chunks ago
      float* host = static_cast<float*>(staging[i % 2].data());
      const size_t begin = run.full + first * run.stride;
      InitializeParameterRange(config_, full, seed, begin, begin + run.span(first, last), host);
      TB_CHECK_CUDA(cudaMemcpy2DAsync(params_ + run.local + first * run.count, run.count * sizeof(float), host,
                                      run.stride * sizeof(float), run.count * sizeof(float), last - first,
                                      cudaMemcpyHostToDevice, stream_.get()));
      copied[i % 2].Record(stream_.get());
    }
  }
  stream_.Synchronize();  // before the staging buffers go
}

// One blocking all-reduce of fp32 device memory over the group, after the model's work that wrote it; timed from when
// that work is done to when the communicator's is, so that the seconds are the collective's own (and --op-times's
// comm_model, on the model's stream, from the end of that work to after the collective).
void CudaTensorParallelTransformer::AllReduce(float* data, size_t count, ReduceOp op) {
  if (dims_.tp == 1) return;  // a group of one has nothing to combine
  double seconds = 0;
  MarkWait(op_times(), [&] {
    stream_.Synchronize();
    const double start = NowSeconds();
    tp_.AllReduce(data, data, count, DataType::kFloat32, op);
    tp_.Synchronize();
    seconds = NowSeconds() - start;
  });
  for (TensorParallelComm* c : {&step_comm_, &take_comm_}) {
    c->allreduces += 1;
    c->elements += count;
    c->bytes += count * sizeof(float);
    c->seconds += seconds;
  }
}

void CudaTensorParallelTransformer::SetBatch(const TokenBatch& tokens) {
  const int batch = tokens.batch, seq = tokens.seq;
  CheckBatchShape(config_, batch, seq);
  if (batch > options_.max_batch) {
    throw InputError("batch size " + std::to_string(batch) + " is larger than the " +
                     std::to_string(options_.max_batch) +
                     " sequences the tensor-parallel CUDA transformer allocated activations for (its max_batch)");
  }
  backward_pending_ = false;  // the activations are about to change
  if (batch != batch_ || seq != seq_) forward_measured_ = backward_measured_ = false;
  const size_t n = static_cast<size_t>(batch) * seq;
  tokens_copied_.Synchronize();  // the previous batch's copy may still be reading the staging buffer
  int32_t* staging = static_cast<int32_t*>(token_staging_.data());
  UnpackTokens(tokens, static_cast<uint64_t>(config_.vocab), staging, staging + n);
  TB_CHECK_CUDA(cudaMemcpyAsync(tokens_, staging, 2 * n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_.get()));
  tokens_copied_.Record(stream_.get());
  batch_ = batch;
  seq_ = seq;
}

void CudaTensorParallelTransformer::Forward() {
  if (batch_ == 0) throw RuntimeError("Transformer::Forward called before SetBatch");
  backward_pending_ = false;
  step_comm_ = {};
  const size_t n = tokens();
  BeginOp(OpKind::kEmbedding, false);
  EmbeddingForward();
  const float* residual = encoded_;
  for (int l = 0; l < config_.layers; ++l) {
    BlockForward(l, residual);
    residual = blocks_[l].residual3;
  }
  const size_t lnf = LnfWeightSlot(config_.layers);
  BeginOp(OpKind::kLayerNorm, false);
  gpu::LayerNormForward(lnf_, lnf_mean_, lnf_rstd_, residual, Param(lnf), Param(lnf + 1), n, dims_.c, stream());
  BeginOp(OpKind::kLmHead, false);
  // The tied LM head over all Vl local rows of wte, so that the GEMM keeps its aligned shape: the padding rows are
  // zero, and the cross-entropy ignores their columns (and gives them zero gradient).
  gemm_->LinearForwardFloat(logits_, nullptr, lnf_, Bf16Param(kWteSlot), nullptr, n, dims_.c, dims_.vocab_rows);
  VocabParallelCrossEntropy();
  EndOps();
  backward_pending_ = true;
  if (!forward_measured_) {
    NoteDeviceMemory();
    forward_measured_ = true;
  }
}

// Each rank writes the rows of the tokens it holds and zeros elsewhere; the group's sum is the lookup, with the full
// model's bits (adding zeros is exact), and wpe is added after, once.
void CudaTensorParallelTransformer::EmbeddingForward() {
  const size_t n = tokens();
  gpu::VocabEmbeddingForward(encoded_, tokens_, Param(kWteSlot), n, dims_.c, dims_.vocab_begin, dims_.vocab_rows,
                             stream());
  AllReduce(encoded_, n * dims_.c, ReduceOp::kSum);
  gpu::AddPositionEmbedding(encoded_, Param(kWpeSlot), n, seq_, dims_.c, stream());
}

void CudaTensorParallelTransformer::BlockForward(int l, const float* residual) {
  const size_t n = tokens();
  const int c = dims_.c, lc = dims_.channels, lf = dims_.hidden;
  auto param = [&](BlockTensor t) { return Param(BlockSlot(l, t)); };
  auto bf16_param = [&](BlockTensor t) { return Bf16Param(BlockSlot(l, t)); };
  BlockActivations& a = blocks_[l];
  BeginOp(OpKind::kLayerNorm, false);
  gpu::LayerNormForward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, param(kLn1Weight), param(kLn1Bias), n, c, stream());
  BeginOp(OpKind::kAttention, false);
  // Column-parallel: the local weight's rows are [q | k | v] of the local heads, the layout the attention over H/T
  // heads of width Cl takes.
  gemm_->LinearForward(a.qkv, nullptr, a.ln1, bf16_param(kQkvWeight), bf16_param(kQkvBias), n, c, 3 * lc);
  attention_->Forward(a.atty, a.att_lse, a.qkv, batch_, seq_);
  RowParallelForward(a.residual2, residual, a.atty, bf16_param(kAttnProjWeight), param(kAttnProjBias), lc);
  BeginOp(OpKind::kLayerNorm, false);
  gpu::LayerNormForward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, param(kLn2Weight), param(kLn2Bias), n, c,
                        stream());
  BeginOp(OpKind::kMlp, false);
  gemm_->LinearForward(a.fch_gelu, a.fch, a.ln2, bf16_param(kFcWeight), bf16_param(kFcBias), n, c, lf);
  RowParallelForward(a.residual3, a.residual2, a.fch_gelu, bf16_param(kMlpProjWeight), param(kMlpProjBias), lf);
}

// out (N, C) = (residual + bias) + all-reduce(in (N, in_channels) · weightᵀ): the partial products in fp32, summed
// over the group, then the replicated fp32 bias and the residual added once.
void CudaTensorParallelTransformer::RowParallelForward(float* out, const float* residual, const Bf16* in,
                                                       const Bf16* weight, const float* bias, int in_channels) {
  const size_t n = tokens();
  gemm_->LinearForwardFloat(reduce_, nullptr, in, weight, nullptr, n, in_channels, dims_.c);
  AllReduce(reduce_, n * dims_.c, ReduceOp::kSum);
  gpu::BiasResidualAdd(out, residual, bias, reduce_, n, dims_.c, stream());
}

// Megatron's vocab-parallel cross-entropy (vocab_parallel_math.h): the group's row maxima, then its sums of exp and
// target logits in one all-reduce of 2N, then the loss and d loss / d logits over the local columns, in bf16 for the
// LM head's backward GEMMs (Backward starts from it).
void CudaTensorParallelTransformer::VocabParallelCrossEntropy() {
  const size_t n = tokens();
  const int32_t* targets = tokens_ + n;
  const int vl = dims_.vocab_rows, used = dims_.vocab_used, begin = dims_.vocab_begin;
  gpu::VocabParallelRowMax(row_max_, logits_, n, vl, used, stream());
  AllReduce(row_max_, n, ReduceOp::kMax);
  float* target_logits = row_sums_ + n;
  gpu::VocabParallelRowSums(row_sums_, target_logits, logits_, row_max_, targets, n, vl, used, begin, stream());
  AllReduce(row_sums_, 2 * n, ReduceOp::kSum);
  gpu::VocabParallelLossAndGradient(grad_scratch_, row_losses_, loss_, logits_, row_max_, row_sums_, target_logits,
                                    targets, n, vl, used, begin, gradient_scale_, stream());
}

float CudaTensorParallelTransformer::Loss() {
  TB_CHECK_CUDA(cudaMemcpyAsync(loss_host_.data(), loss_, sizeof(float), cudaMemcpyDeviceToHost, stream_.get()));
  stream_.Synchronize();
  return *static_cast<const float*>(loss_host_.data());
}

// Slots are reported in the CPU reference's order (lnf, the blocks from last to first, wpe, wte), each once the work
// that finishes its gradient is enqueued on stream() (and, for the column-parallel layers, after their all-reduce).
void CudaTensorParallelTransformer::Backward(const std::function<void(size_t slot)>& gradient_ready,
                                             GradientWrite write) {
  // Backward overwrites the logits' gradient that Forward left in grad_scratch_, so it runs once per Forward.
  if (!backward_pending_) throw RuntimeError("Transformer::Backward called without a Forward before it");
  backward_pending_ = false;
  auto ready = [&](size_t slot) {
    if (gradient_ready) gradient_ready(slot);
  };
  const size_t n = tokens();
  const int c = dims_.c;
  BeginOp(OpKind::kLmHead, true);
  HeadBackward(write);  // reduce_: the gradient of lnf's output, summed over the group
  BeginOp(OpKind::kLayerNorm, true);
  TB_CHECK_CUDA(cudaMemsetAsync(residual_grad_, 0, n * c * sizeof(float), stream_.get()));
  const size_t lnf = LnfWeightSlot(config_.layers);
  const float* last_residual = config_.layers > 0 ? blocks_.back().residual3 : encoded_;
  // Each LayerNorm backward also leaves the residual gradient's bf16 copy for the row-parallel GEMMs after it.
  gpu::LayerNormBackward(residual_grad_, residual_grad_bf16_, Grad(lnf), Grad(lnf + 1), reduce_, last_residual,
                         Param(lnf), lnf_mean_, lnf_rstd_, n, c, write, layernorm_scratch_, stream());
  ready(lnf + 1);
  ready(lnf);
  for (int l = config_.layers - 1; l >= 0; --l) BlockBackward(l, ready, write);
  // The embedding's gradient: wte's local rows for the tokens this rank holds (added to the LM head's), wpe
  // (replicated) on every rank, in a fixed order; its input gradient goes nowhere, so nothing is all-reduced.
  BeginOp(OpKind::kEmbedding, true);
  gpu::PositionEmbeddingBackward(Grad(kWpeSlot), residual_grad_, batch_, seq_, c, config_.seq, write, stream());
  gpu::VocabEmbeddingBackward(Grad(kWteSlot), residual_grad_, tokens_, n, c, dims_.vocab_begin, dims_.vocab_rows,
                              stream());
  ready(kWpeSlot);
  ready(kWteSlot);
  EndOps();
  if (!backward_measured_) {
    NoteDeviceMemory();
    backward_measured_ = true;
  }
}

// The tied head's backward from d loss / d logits (N, Vl): wte's local rows get their gradient written or added (the
// padding columns' gradient is zero, so the padding rows get zero), and the input gradient, a partial sum over the
// slice, is all-reduced into reduce_.
void CudaTensorParallelTransformer::HeadBackward(GradientWrite write) {
  const size_t n = tokens();
  const Bf16* logits_grad = grad_scratch_;
  input_gradient_->Run(reduce_, logits_grad, Bf16Param(kWteSlot), n, dims_.c, dims_.vocab_rows);
  gemm_->LinearBackwardWeights(Grad(kWteSlot), nullptr, logits_grad, lnf_, n, dims_.c, dims_.vocab_rows, write);
  AllReduce(reduce_, n * dims_.c, ReduceOp::kSum);
}

// A column-parallel layer (qkv, fc) from its output's gradient: the local weight and bias gradients, and its input
// gradient (N, C), a partial sum over the local heads or hidden units, into reduce_ in fp32 and all-reduced.
void CudaTensorParallelTransformer::ColumnParallelBackward(float* weight_grad, float* bias_grad, const Bf16* out_grad,
                                                           const Bf16* in, const Bf16* weight, int out_channels,
                                                           GradientWrite write) {
  const size_t n = tokens();
  input_gradient_->Run(reduce_, out_grad, weight, n, dims_.c, out_channels);
  gemm_->LinearBackwardWeights(weight_grad, bias_grad, out_grad, in, n, dims_.c, out_channels, write);
  AllReduce(reduce_, n * dims_.c, ReduceOp::kSum);
}

// residual_grad_ (N, C) carries the residual stream's gradient down in fp32, replicated on every rank: the
// row-parallel layers' weight and bias gradients need no communication; the column-parallel layers' input gradients
// are all-reduced before their LayerNorm's backward adds into it.
void CudaTensorParallelTransformer::BlockBackward(int l, const std::function<void(size_t slot)>& ready,
                                                  GradientWrite write) {
  const size_t n = tokens();
  const int c = dims_.c, lc = dims_.channels, lf = dims_.hidden;
  auto param = [&](BlockTensor t) { return Param(BlockSlot(l, t)); };
  auto bf16_param = [&](BlockTensor t) { return Bf16Param(BlockSlot(l, t)); };
  auto grad = [&](BlockTensor t) { return Grad(BlockSlot(l, t)); };
  auto ready_pair = [&](BlockTensor weight, BlockTensor bias) {
    ready(BlockSlot(l, bias));
    ready(BlockSlot(l, weight));
  };
  const BlockActivations& a = blocks_[l];
  const float* residual = l > 0 ? blocks_[l - 1].residual3 : encoded_;

  // MLP: the projection's input gradient with the GELU gradient fused (the DGELU epilogue over fch; fc's bias
  // gradient too, when overwriting, where cuBLASLt offers DGELU_BGRAD), then fc.
  Bf16* hidden_grad = grad_scratch_;  // (N, Fl): the logits' gradient is spent by now
  BeginOp(OpKind::kMlp, true);
  const bool fc_bias_written =
      gemm_->LinearBackwardInput(hidden_grad, residual_grad_bf16_, bf16_param(kMlpProjWeight), a.fch, n, lf, c,
                                 write == GradientWrite::kOverwrite ? grad(kFcBias) : nullptr);
  gemm_->LinearBackwardWeights(grad(kMlpProjWeight), grad(kMlpProjBias), residual_grad_bf16_, a.fch_gelu, n, lf, c,
                               write);
  ready_pair(kMlpProjWeight, kMlpProjBias);
  ColumnParallelBackward(grad(kFcWeight), fc_bias_written ? nullptr : grad(kFcBias), hidden_grad, a.ln2,
                         bf16_param(kFcWeight), lf, write);
  ready_pair(kFcWeight, kFcBias);
  BeginOp(OpKind::kLayerNorm, true);
  gpu::LayerNormBackward(residual_grad_, residual_grad_bf16_, grad(kLn2Weight), grad(kLn2Bias), reduce_, a.residual2,
                         param(kLn2Weight), a.ln2_mean, a.ln2_rstd, n, c, write, layernorm_scratch_, stream());
  ready_pair(kLn2Weight, kLn2Bias);

  // Attention: the projection, the local heads, qkv.
  BeginOp(OpKind::kAttention, true);
  gemm_->LinearBackwardInput(attention_grad_, residual_grad_bf16_, bf16_param(kAttnProjWeight), nullptr, n, lc, c);
  gemm_->LinearBackwardWeights(grad(kAttnProjWeight), grad(kAttnProjBias), residual_grad_bf16_, a.atty, n, lc, c,
                               write);
  ready_pair(kAttnProjWeight, kAttnProjBias);
  Bf16* qkv_grad = grad_scratch_;  // (N, 3Cl): the MLP's hidden gradient is spent by now
  attention_->Backward(qkv_grad, attention_grad_, a.qkv, a.atty, a.att_lse, batch_, seq_);
  ColumnParallelBackward(grad(kQkvWeight), grad(kQkvBias), qkv_grad, a.ln1, bf16_param(kQkvWeight), 3 * lc, write);
  ready_pair(kQkvWeight, kQkvBias);
  // The bf16 copy is for the next block down; below block 0 only the embeddings read the (fp32) gradient.
  BeginOp(OpKind::kLayerNorm, true);
  gpu::LayerNormBackward(residual_grad_, l > 0 ? residual_grad_bf16_ : nullptr, grad(kLn1Weight), grad(kLn1Bias),
                         reduce_, residual, param(kLn1Weight), a.ln1_mean, a.ln1_rstd, n, c, write,
                         layernorm_scratch_, stream());
  ready_pair(kLn1Weight, kLn1Bias);
}

void CudaTensorParallelTransformer::AdamWStep(const AdamWConfig& config, int64_t step) {
  if (step < 1) throw InputError("AdamW step counts from 1, got " + std::to_string(step));
  // One launch over every range (the moments hold the shard's elements: local element i is moment i - shard
  // begin); the bf16 copy is rewritten from the updated master weights in the same pass, and wte's padding rows,
  // skipped, stay zero in both.
  BeginOp(OpKind::kOptimizer, true);
  gpu::AdamWUpdate(params_, grads_, m_, v_, *adamw_plan_, config, step, stream(), params_bf16_);
  EndOps();
}

// Throws InputError for what the tensor-parallel CUDA transformer cannot take, before it touches the device.
void CheckCudaTensorParallel(const ModelConfig& config, const Communicator& tp, const CudaTransformerOptions& options) {
  if (tp.memory() != MemoryKind::kDevice) {
    throw InputError("the tensor-parallel CUDA transformer needs a device-memory communicator (nccl), got " +
                     tp.backend());
  }
  CheckCudaTensorParallelWidths(config, tp.size());
  if (options.max_batch < 1) {
    throw InputError("the CUDA transformer's max_batch must be at least 1, got " + std::to_string(options.max_batch));
  }
  if (options.seq < 0 || options.seq > config.seq) {
    throw InputError("the CUDA transformer's run sequence length " + std::to_string(options.seq) + " is outside 0.." +
                     std::to_string(config.seq) + ", the positions of model '" + config.name + "'");
  }
  if (options.placement.fsdp.enabled()) {
    throw InputError("the tensor-parallel CUDA transformer does not shard by fsdp yet (zero1 it does; fsdp across the "
                     "groups runs on the CPU reference)");
  }
}

}  // namespace

std::unique_ptr<Transformer> MakeCudaTensorParallelTransformer(const ModelConfig& config, uint64_t seed,
                                                               Communicator& tp,
                                                               const CudaTransformerOptions& options) {
  ValidateModel(config);
  CheckTensorParallel(config, tp.size());
  CheckCudaTensorParallel(config, tp, options);
  CudaTransformerOptions resolved = options;  // before the first device call
  resolved.placement = ResolvePlacement(config, TensorParallelLayout(config, tp.size()), options.placement);
  if (resolved.placement.stage.split()) {
    throw InputError("the CUDA tensor parallel model over pipeline stages is not built (the CPU one holds a stage)");
  }
  return std::make_unique<CudaTensorParallelTransformer>(config, seed, tp, resolved);
}

}  // namespace tb
