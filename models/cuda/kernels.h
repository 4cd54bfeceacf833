// The CUDA implementation's non-GEMM layers (fp32 math; bf16 variants where a GEMM reads or writes the tensor),
// one launcher per kernel, mirroring cpu_kernels.h function by function (same shapes, same accumulate-or-overwrite
// rules), plus the few device-memory helpers that tests and host code need. No CUDA type appears here: pointers
// are device pointers, `stream` is a cudaStream_t passed as void* (null: the legacy default stream). Launchers
// only enqueue work; each checks its launch and throws RuntimeError on failure. Implemented by
// models/cuda/kernels.cu, or by models/nocuda/kernels_stub.cc in a build without CUDA, where every function
// throws "built without CUDA".
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "device.h"
#include "verify_math.h"
#include "transformer.h"

namespace tb::gpu {

// A bf16 value as stored in device memory: the bits of a __nv_bfloat16 (same size and layout), so that host code
// and CUDA-free headers can hold bf16 pointers; .cu files reinterpret_cast them to __nv_bfloat16.
struct Bf16 {
  uint16_t bits;
};
static_assert(sizeof(Bf16) == 2);

// float -> bf16 on the host, rounding to nearest even as the device's __float2bfloat16_rn does (NaN stays a
// quiet NaN, overflow rounds to infinity); for tests and host code that prepare or read bf16 tensors. The
// collectives' element conversions (collectives/verify_math.h) are the one implementation.
inline Bf16 ToBf16(float value) { return Bf16{FloatToBFloat16(value)}; }
// bf16 -> float, exact.
inline float ToFloat(Bf16 value) { return BFloat16ToFloat(value.bits); }

// --- layers ---------------------------------------------------------------------------------------------

// out (B, T, C) = wte[tokens] + wpe[t].
void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int batch, int seq,
                    int channels, void* stream);
// The embeddings' gradient from out_grad (B, T, C): wpe_grad (positions, C) = (kOverwrite) or += (kAccumulate) its
// sum over the batch, one thread per (t, c) adding the B rows in order (the same bits every run; rows from T on get 0
// or keep theirs); wte_grad (Vp, C) += out_grad
// at each token's row, always added (the tied LM head's GEMM writes wte's gradient first), with atomics, so the
// order of the adds into a repeated token's row varies from run to run.
void EncoderBackward(float* wte_grad, float* wpe_grad, const float* out_grad, const int32_t* tokens, int batch,
                     int seq, int channels, int positions, GradientWrite wpe_write, void* stream);
// EncoderBackward's position half, for the tensor-parallel model (whose token half is vocab-parallel): wpe_grad
// (positions, C) = or += the sum over the batch of out_grad (B, T, C), in batch order; rows from T on 0 or kept.
void PositionEmbeddingBackward(float* wpe_grad, const float* out_grad, int batch, int seq, int channels,
                               int positions, GradientWrite write, void* stream);

// out (N, C) = LayerNorm(in (N, C)); mean, rstd (N) kept for backward. One warp per row.
void LayerNormForward(float* out, float* mean, float* rstd, const float* in, const float* weight,
                      const float* bias, size_t rows, int channels, void* stream);
// The same with a bf16 output, as the GEMM that reads it takes it (statistics and math stay fp32; the fp32
// result is rounded once, to nearest even).
void LayerNormForward(Bf16* out, float* mean, float* rstd, const float* in, const float* weight, const float* bias,
                      size_t rows, int channels, void* stream);
// in_grad (N, C) += d loss / d in, and with in_grad_bf16 non-null the updated in_grad rounded to bf16 there (what
// the next backward GEMM reads) in the same pass; weight_grad, bias_grad (C) written or added to, as `write` says.
// One warp per row, the rows spread over a grid that fills the GPU (a few blocks per SM, the SM count queried once
// per device); each warp sums its rows' weight and bias gradients in its own stretch of shared memory, each block
// adds its warps' sums in warp order into one partial row of `scratch` (LayerNormBackwardScratchFloats(rows,
// channels) floats), and a second pass sums the partial rows in block order into weight_grad and bias_grad: no
// atomics, the same bits every run. 16-byte loads when channels is a multiple of 8 and every pointer 16-byte
// aligned (the model's case), scalar loads otherwise.
void LayerNormBackward(float* in_grad, Bf16* in_grad_bf16, float* weight_grad, float* bias_grad,
                       const float* out_grad, const float* in, const float* weight, const float* mean,
                       const float* rstd, size_t rows, int channels, GradientWrite write, float* scratch,
                       void* stream);
// The same with a bf16 out_grad (what a backward GEMM writes); in, in_grad and the weight gradients stay fp32.
void LayerNormBackward(float* in_grad, Bf16* in_grad_bf16, float* weight_grad, float* bias_grad,
                       const Bf16* out_grad, const float* in, const float* weight, const float* mean,
                       const float* rstd, size_t rows, int channels, GradientWrite write, float* scratch,
                       void* stream);
size_t LayerNormBackwardScratchFloats(size_t rows, int channels);

// out (cols) = (kOverwrite) or += (kAccumulate) the column sums of in (rows, cols) (a bias gradient), in two
// passes spread over many blocks: the column sums of chunks of rows into `scratch` (ColumnSumScratchFloats(rows,
// cols) floats), then their sums in chunk order. No atomics: the same result on every run.
void ColumnSum(float* out, const Bf16* in, size_t rows, int cols, GradientWrite write, float* scratch, void* stream);
size_t ColumnSumScratchFloats(size_t rows, int cols);

// The strided-batched GEMMs' layers (Gemm::Batched*: `batch` blocks of `rows` rows, block b using the b-th of the
// per-block vectors), for where cuBLASLt has no batched algorithm with the epilogue (and GeluBackward's bf16 overload
// below, for DGELU's):
// pre_gelu null: out (batch·rows, cols) += bias_b. Otherwise pre_gelu += bias_b (bias null: nothing added) and out =
// Gelu(pre_gelu), computed from the rounded pre-activation. Elementwise, bf16 in and out, fp32 math.
void BatchedBiasGelu(Bf16* out, Bf16* pre_gelu, const Bf16* bias, size_t rows, int cols, int batch, void* stream);
// out (batch, cols) = (kOverwrite) or += (kAccumulate) the column sums of each block of `rows` rows of in
// (batch·rows, cols): one thread per column and block, adding its rows in order (the same bits every run).
void BatchedColumnSum(float* out, const Bf16* in, size_t rows, int cols, int batch, GradientWrite write,
                      void* stream);

// out = Gelu(in), elementwise over count values.
void GeluForward(float* out, const float* in, size_t count, void* stream);
// grad *= GeluGrad(in), in place; the bf16 overload computes in fp32 and rounds the product once.
void GeluBackward(float* grad, const float* in, size_t count, void* stream);
void GeluBackward(Bf16* grad, const Bf16* in, size_t count, void* stream);

// out = a + b, elementwise over count values; out may alias a or b.
void ResidualAdd(float* out, const float* a, const float* b, size_t count, void* stream);

// data *= scale, elementwise over count values.
void ScaleFloats(float* data, size_t count, float scale, void* stream);

// out = in rounded to bf16 (nearest even, as ToBf16), elementwise over count values.
void CastToBf16(Bf16* out, const float* in, size_t count, void* stream);

// Softmax cross-entropy, forward and backward, over logits (N, Vp) of which only the first V columns are real
// vocabulary: row_losses (N) = -log softmax(target); loss (1) = their mean; logits_grad (N, Vp) = gradient_scale ·
// d loss / d logits = gradient_scale · (softmax - onehot(target)) / N in columns [0, V) and 0 in the padding columns
// [V, Vp). The same values as cpu::CrossEntropyForward followed by cpu::CrossEntropyBackward (times the scale). One
// block per row. Where a row of Vp floats fits the device's shared memory (CrossEntropyReadsLogitsOnce), the row is
// read from memory once: kept in shared memory while the max and the normaliser are taken (online softmax), the
// gradient then computed from there. Otherwise twice: the first pass walks the row backwards, so that the second,
// walking forwards, finds its start still in L2. The gradient in bf16 for the GEMMs that read it; the fp32 overload
// may write over the logits themselves (logits_grad == logits).
void CrossEntropyForwardBackward(Bf16* logits_grad, float* row_losses, float* loss, const float* logits,
                                 const int32_t* targets, size_t rows, int vocab, int vocab_padded,
                                 float gradient_scale, void* stream);
void CrossEntropyForwardBackward(float* logits_grad, float* row_losses, float* loss, const float* logits,
                                 const int32_t* targets, size_t rows, int vocab, int vocab_padded,
                                 float gradient_scale, void* stream);
// Whether CrossEntropyForwardBackward reads each row of vocab_padded logits once on the current device.
bool CrossEntropyReadsLogitsOnce(int vocab_padded);

// --- device memory --------------------------------------------------------------------------------------

// Device memory on the current device (cudaMalloc); move-only; empty when moved from.
class DeviceMemory {
 public:
  explicit DeviceMemory(size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// --- AdamW ---------------------------------------------------------------------------------------------

// AdamW's ranges (AdamWRanges, FsdpAdamWRanges) on the device, uploaded once: each range's offset into the
// parameter and gradient buffers, its offset into the moment buffers (offset - moment_offset: ZeRO-1's moments hold
// the shard only), its length and decay rule, and the first block of the one launch that covers them all.
class AdamWPlan {
 public:
  AdamWPlan(const std::vector<AdamWRange>& ranges, size_t moment_offset);
  size_t ranges() const { return ranges_; }
  size_t blocks() const { return blocks_; }
  const void* table() const { return table_.data(); }

 private:
  size_t ranges_;
  size_t blocks_;
  DeviceMemory table_;
};

// One AdamW step over every range of `plan`, one launch; step counts from 1. Elements outside the ranges (wte's
// padding rows, ZeRO-1's padding) are not touched. With params_bf16 non-null (indexed as params), the updated
// parameters are also written there rounded to bf16 (the compute copy the GEMMs read), in the same pass. 16-byte
// loads where a range's parameter and moment offsets are both multiples of 4 (every range but, at most, the ones a
// ZeRO-1 shard boundary cuts), scalar ones elsewhere. The per-element math is element::AdamWElement.
void AdamWUpdate(float* params, const float* grads, float* m, float* v, const AdamWPlan& plan,
                 const AdamWConfig& config, int64_t step, void* stream, Bf16* params_bf16 = nullptr);

// Waits for all work on the current device, and throws if any of it faulted.
void SynchronizeDevice();

// A device copy of `host`.
template <typename T>
DeviceMemory Upload(const std::vector<T>& host) {
  DeviceMemory device(host.size() * sizeof(T));
  CopyHostToDevice(device.data(), host.data(), device.bytes());  // device.h: blocking, complete on return
  return device;
}

// The first `count` values of `device`, on the host.
template <typename T>
std::vector<T> Download(const DeviceMemory& device, size_t count) {
  std::vector<T> host(count);
  CopyDeviceToHost(host.data(), device.data(), count * sizeof(T));
  return host;
}

}  // namespace tb::gpu
