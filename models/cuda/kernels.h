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
#include "transformer.h"

namespace tb::gpu {

// A bf16 value as stored in device memory: the bits of a __nv_bfloat16 (same size and layout), so that host code
// and CUDA-free headers can hold bf16 pointers; .cu files reinterpret_cast them to __nv_bfloat16.
struct Bf16 {
  uint16_t bits;
};
static_assert(sizeof(Bf16) == 2);

// float -> bf16 on the host, rounding to nearest even as the device's __float2bfloat16_rn does (NaN stays a
// quiet NaN, overflow rounds to infinity); for tests and host code that prepare or read bf16 tensors.
inline Bf16 ToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<uint16_t>((bits >> 16) | 0x0040u)};
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return Bf16{static_cast<uint16_t>((bits + rounding) >> 16)};
}
// bf16 -> float, exact.
inline float ToFloat(Bf16 value) { return std::bit_cast<float>(static_cast<uint32_t>(value.bits) << 16); }

// --- layers ---------------------------------------------------------------------------------------------

// out (B, T, C) = wte[tokens] + wpe[t].
void EncoderForward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int batch, int seq,
                    int channels, void* stream);
// wte_grad (Vp, C) and wpe_grad (T, C) accumulate out_grad (B, T, C); atomics, so the order of the adds into a
// repeated token's row varies from run to run.
void EncoderBackward(float* wte_grad, float* wpe_grad, const float* out_grad, const int32_t* tokens, int batch,
                     int seq, int channels, void* stream);

// out (N, C) = LayerNorm(in (N, C)); mean, rstd (N) kept for backward. One warp per row.
void LayerNormForward(float* out, float* mean, float* rstd, const float* in, const float* weight,
                      const float* bias, size_t rows, int channels, void* stream);
// The same with a bf16 output, as the GEMM that reads it takes it (statistics and math stay fp32; the fp32
// result is rounded once, to nearest even).
void LayerNormForward(Bf16* out, float* mean, float* rstd, const float* in, const float* weight, const float* bias,
                      size_t rows, int channels, void* stream);
// in_grad (N, C) += d loss / d in; weight_grad, bias_grad (C) accumulate. One warp per row; each block of rows
// sums its weight and bias gradients in shared memory and writes them to `scratch`
// (LayerNormBackwardScratchFloats(rows, channels) floats), and a second pass adds those partial sums, in block
// order, into weight_grad and bias_grad: no global atomics. (The shared-memory adds of a block's warps come in
// varying order, so the last bits can vary from run to run.)
void LayerNormBackward(float* in_grad, float* weight_grad, float* bias_grad, const float* out_grad,
                       const float* in, const float* weight, const float* mean, const float* rstd, size_t rows,
                       int channels, float* scratch, void* stream);
// The same with a bf16 out_grad (what a backward GEMM writes); in, in_grad and the weight gradients stay fp32.
void LayerNormBackward(float* in_grad, float* weight_grad, float* bias_grad, const Bf16* out_grad, const float* in,
                       const float* weight, const float* mean, const float* rstd, size_t rows, int channels,
                       float* scratch, void* stream);
size_t LayerNormBackwardScratchFloats(size_t rows, int channels);

// out (cols) += column sums of in (rows, cols) (a bias gradient), in two passes spread over many blocks: the
// column sums of chunks of rows into `scratch` (ColumnSumScratchFloats(rows, cols) floats), then their sums in
// chunk order. No atomics: the same result on every run.
void ColumnSum(float* out, const Bf16* in, size_t rows, int cols, float* scratch, void* stream);
size_t ColumnSumScratchFloats(size_t rows, int cols);

// out = Gelu(in), elementwise over count values.
void GeluForward(float* out, const float* in, size_t count, void* stream);
// grad *= GeluGrad(in), in place.
void GeluBackward(float* grad, const float* in, size_t count, void* stream);

// out = a + b, elementwise over count values; out may alias a or b.
void ResidualAdd(float* out, const float* a, const float* b, size_t count, void* stream);

// out = in rounded to bf16 (nearest even, as ToBf16), elementwise over count values.
void CastToBf16(Bf16* out, const float* in, size_t count, void* stream);

// Softmax cross-entropy, forward and backward, over logits (N, Vp) of which only the first V columns are real
// vocabulary: row_losses (N) = -log softmax(target); loss (1) = their mean; logits_grad (N, Vp) = d loss / d logits
// = (softmax - onehot(target)) / N in columns [0, V) and 0 in the padding columns [V, Vp). The same values as
// cpu::CrossEntropyForward followed by cpu::CrossEntropyBackward. One block per row, reading it twice: once for
// the max and the normaliser together (online softmax), once to write the gradient, in bf16 for the GEMMs that
// read it. The fp32 overload may write over the logits themselves (logits_grad == logits).
void CrossEntropyForwardBackward(Bf16* logits_grad, float* row_losses, float* loss, const float* logits,
                                 const int32_t* targets, size_t rows, int vocab, int vocab_padded, void* stream);
void CrossEntropyForwardBackward(float* logits_grad, float* row_losses, float* loss, const float* logits,
                                 const int32_t* targets, size_t rows, int vocab, int vocab_padded, void* stream);

// AdamW over count elements of the flat buffers; step counts from 1. With params_bf16 non-null, the updated
// parameters are also written there rounded to bf16 (the compute copy the GEMMs read), in the same pass.
void AdamWUpdate(float* params, const float* grads, float* m, float* v, size_t count, const AdamWConfig& config,
                 float weight_decay, int64_t step, void* stream, Bf16* params_bf16 = nullptr);

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
