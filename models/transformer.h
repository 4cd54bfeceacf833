// The synthetic transformer behind `trainbench train`: a GPT-2-style pre-LayerNorm decoder (learned
// positional embedding, causal multi-head attention, GELU MLP, tied LM head, cross-entropy), with forward,
// backward and AdamW. One interface, two implementations: the CPU reference (fp32, real BLAS) and the CUDA
// implementation (bf16 compute, fp32 master weights).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model_config.h"

namespace tb {

// One parameter tensor inside the flat parameter (and gradient) buffer. Tensors are laid out in forward
// order and grouped by layer — wte, wpe, then layer 0's tensors, layer 1's, ..., then the final LayerNorm —
// so that the gradients backward finishes together sit together, and a gradient bucket is a contiguous range.
struct TensorSlot {
  std::string name;   // "h3.attn.qkv.weight"
  size_t offset = 0;  // in elements, into the flat buffers
  size_t count = 0;   // elements
  int layer = -1;     // block index, or -1 for the embeddings and the final LayerNorm
  bool decay = false; // AdamW weight decay applies (matrices and embeddings, not biases or LayerNorm)
};

struct AdamWConfig {
  float learning_rate = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weight_decay = 0.1f;
};

class Transformer {
 public:
  virtual ~Transformer() = default;

  virtual const ModelConfig& config() const = 0;
  virtual std::string backend() const = 0;  // "cpu" or "cuda"
  virtual const std::vector<TensorSlot>& layout() const = 0;
  // Elements in the flat buffers (the embedding table has vocab_padded rows; padding rows stay zero).
  virtual size_t parameter_elements() const = 0;

  // Forward over `batch` sequences of `seq` tokens (inputs and targets hold batch*seq token ids < vocab);
  // keeps the activations for Backward; returns the mean cross-entropy over all batch*seq positions.
  virtual float Forward(const int32_t* inputs, const int32_t* targets, int batch, int seq) = 0;
  // Gradients of the last Forward's mean loss, accumulated into the gradient buffer. Calls
  // gradient_ready(slot) once per tensor, as soon as its gradient is final, so that buckets can be reduced
  // while backward goes on.
  virtual void Backward(const std::function<void(size_t slot)>& gradient_ready) = 0;
  virtual void ZeroGradients() = 0;
  // One AdamW update with bias correction; step counts from 1.
  virtual void AdamWStep(const AdamWConfig& config, int64_t step) = 0;

  // The flat buffers (host memory for the CPU reference, device memory for CUDA). Parameters are the fp32
  // master weights.
  virtual float* parameters() = 0;
  virtual float* gradients() = 0;
};

// The CPU reference, initialised as GPT-2 is (normal(0, 0.02) weights, residual projections scaled by
// 1/sqrt(2*layers), zero biases, unit LayerNorm gains) from `seed`: every rank with the same seed holds the
// same model.
std::unique_ptr<Transformer> MakeCpuTransformer(const ModelConfig& config, uint64_t seed);

// The layout both implementations share.
std::vector<TensorSlot> MakeLayout(const ModelConfig& config);

}  // namespace tb
