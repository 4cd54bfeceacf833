// Causal multi-head attention of the CUDA transformer, two implementations behind one interface:
// - cuDNN's fused scaled-dot-product attention (flash attention, forward and backward) through the cuDNN C++
//   frontend, each graph built once per (batch, seq) and cached;
// - cuBLAS strided-batched GEMMs for Q·Kᵀ and P·V with a causal softmax kernel, for shapes or devices cuDNN
//   does not support, and as a reference.
// Tensors as cpu::AttentionForward/Backward has them: qkv (B, T, 3C) = [q | k | v] per token, heads of
// size C/NH, scale 1/sqrt(C/NH); out (B, T, C); lse (B, NH, T) fp32, the log-sum-exp of each query row's scaled
// scores, kept for backward. bf16 tensors, fp32 accumulation and softmax. CUDA-free header, pointers are device
// pointers; all work goes to the stream given at construction. Implemented by models/cuda/attention_*.cu, or by
// stubs that throw "built without CUDA".
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cuda/kernels.h"
#include "transformer.h"

namespace tb::gpu {

class Attention {
 public:
  virtual ~Attention() = default;
  // "cudnn-sdpa" or "cublas": recorded in the report as what ran.
  virtual std::string name() const = 0;
  // out (B, T, C) and lse (B, NH, T) from qkv (B, T, 3C); batch <= max_batch, seq <= max_seq.
  virtual void Forward(Bf16* out, float* lse, const Bf16* qkv, int batch, int seq) = 0;
  // qkv_grad (B, T, 3C), overwritten, from out_grad (B, T, C) and what Forward kept (qkv, out, lse).
  virtual void Backward(Bf16* qkv_grad, const Bf16* out_grad, const Bf16* qkv, const Bf16* out, const float* lse,
                        int batch, int seq) = 0;
  // Device memory the implementation holds besides its inputs and outputs.
  virtual size_t workspace_bytes() const = 0;
  // The kernels chosen by timing so far (cuDNN: one per graph, on its first run); empty where nothing is timed.
  virtual std::vector<KernelChoice> kernel_choices() const { return {}; }
};

// In MakeCudnnAttention's message when, and only when, this build has no cuDNN frontend (attention_cudnn_stub.cc):
// the one reason a cuDNN test may skip rather than fail.
inline constexpr char kBuiltWithoutCudnnFrontend[] = "built without the cuDNN frontend headers";

// cuDNN's fused SDPA for batches of up to max_batch x max_seq, its graphs built at once for (max_batch, seq), the
// shape the caller will run (0: max_seq). Throws RuntimeError, carrying cuDNN's own reason, when this cuDNN, device
// or shape cannot run it (for example a head size it does not support), so that the caller can fall back to cuBLAS
// before it runs anything. A sequence of 1 token is refused here, and by Forward and Backward: cuDNN's SDPA
// backward fails on it (PyTorch does not send it to cuDNN either). Each graph's execution plan is chosen on its first
// run by timing every plan cuDNN builds for it (attention_cudnn.cc), or is cuDNN's first with TRAINBENCH_AUTOTUNE=0.
std::unique_ptr<Attention> MakeCudnnAttention(int channels, int heads, int max_batch, int max_seq, void* stream,
                                              int seq = 0);
// cuBLAS batched GEMMs + causal softmax.
std::unique_ptr<Attention> MakeCublasAttention(int channels, int heads, int max_batch, int max_seq, void* stream);

}  // namespace tb::gpu
