// Model shapes: presets with real GPT layer shapes, custom shapes, `--layers N` scaling, and the accounting
// every report states before a run — exact parameter count, model FLOPs per token and a memory estimate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tb {

struct ModelConfig {
  std::string name;          // "gpt2-124m", or "custom"
  int layers = 12;           // transformer blocks
  int d_model = 768;         // channels C
  int heads = 12;            // attention heads; d_model % heads == 0
  int vocab = 50257;         // real vocabulary V (loss and accounting use this)
  int vocab_padded = 50304;  // Vp: rows of the embedding table as allocated (multiple of 128 for the GPU)
  int seq = 1024;            // maximum sequence length T (learned positional embedding rows)
  int mlp_ratio = 4;         // hidden width of the MLP = mlp_ratio * d_model
  int preset_layers = 12;    // layers of the preset before --layers; == layers when not scaled
  std::string scaled;        // what --layers changed, e.g. "4 of gpt-13b's 40 layers"; "" when not scaled

  int head_dim() const { return d_model / heads; }
};

// Names of the presets, in size order: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, gpt-2.7b, gpt-6.7b,
// gpt-13b, gpt-70b.
std::vector<std::string> PresetNames();
// Looks up a preset; throws InputError listing the names.
ModelConfig FindPreset(const std::string& name);
// Replaces the layer count (`--layers N`), keeping every other shape; records what was scaled.
ModelConfig WithLayers(ModelConfig config, int layers);
// A custom shape; throws InputError naming the bad field (non-positive values, d_model % heads != 0, ...).
ModelConfig CustomModel(int layers, int d_model, int heads, int vocab, int seq);
// Checks a config's invariants; throws InputError naming the field.
void ValidateModel(const ModelConfig& config);

struct ParameterCount {
  int64_t token_embedding = 0;  // V*C (real vocabulary; tied with the LM head, so counted once)
  int64_t position_embedding = 0;  // T*C
  int64_t per_layer = 0;        // ln1, qkv, attn proj, ln2, fc, fc proj: weights and biases
  int64_t final_norm = 0;       // 2*C
  int64_t total = 0;            // embeddings + layers*per_layer + final_norm
  int64_t matmul = 0;           // N_matmul: weights used in matrix multiplies, incl. the tied LM head (V*C)
};

// Exact counts for the real vocabulary V (gpt2-124m: 124,439,808 in total).
ParameterCount CountParameters(const ModelConfig& config);

// Model FLOPs per token for forward+backward (README.md, "Definitions"): 6*N_matmul + 6*L*T*C (causal attention).
double ModelFlopsPerToken(const ModelConfig& config, int seq);

struct MemoryEstimate {
  double weights_bytes = 0;      // compute copy of the weights
  double gradients_bytes = 0;
  double optimizer_bytes = 0;    // fp32 master weights (when the compute copy is not fp32) + AdamW m and v
  double activations_bytes = 0;  // saved for backward, per micro-batch
  double total_bytes() const { return weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes; }
};

// Per-rank estimate for data parallel training. bf16 = true: bf16 weights, gradients and activations with
// fp32 master weights and moments (16 bytes per parameter before activations, as in the ZeRO paper);
// false: everything fp32 (the CPU reference). tensor_parallel T > 1: the activations one rank of a Megatron group of
// T holds (the tensors of the split layers and the vocab-parallel logits divided by T, the residual stream, the
// LayerNorm outputs and statistics and the losses whole); the model states stay whole (ModeMemory divides them).
// Throws InputError for T < 1.
MemoryEstimate EstimateMemory(const ModelConfig& config, int micro_batch, int seq, bool bf16, int tensor_parallel = 1);

// EstimateMemory's activations per token: those of one block, and those after the last block (the final LayerNorm,
// the logits, the losses), for sequences of `seq` under tensor parallel T.
struct ActivationBytes {
  double layer = 0;
  double head = 0;
};
ActivationBytes ActivationBytesPerToken(const ModelConfig& config, int seq, bool bf16, int tensor_parallel = 1);

}  // namespace tb
