// Model shapes: presets with real GPT layer shapes, custom shapes, `--layers N` scaling, and the accounting
// every report states before a run — exact parameter count, model FLOPs per token and a memory estimate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tb {

// Mixture-of-experts blocks (models/README.md, "Mixture of experts"): the MLP of a block replaced by a router
// (E, C) without bias and E experts, each a GELU MLP of the dense MLP's form at width F, of which every token uses K.
// Part of the model's shape because every count (parameters, FLOPs, memory) and the layout follow from it.
struct MoeConfig {
  int experts = 8;                // E routed experts per MoE block
  int top_k = 2;                  // K experts per token; K = 1 weighs its expert by p (Switch), K > 1 renormalizes
  int expert_ffn = 0;             // F: each expert's hidden width; 0 asks WithMoe for the dense MLP's mlp_ratio * C
  int every = 1;                  // block l (from 0) is an MoE block when l % every == 0 (Megatron's moe_layer_freq)
  double capacity_factor = 1.25;  // capacity per expert ceil(factor * N * K / E); >= E / K never drops (Switch: 1.25)
  double aux_loss_coef = 0.01;    // weight of the load-balancing loss (Switch Transformer's alpha)
};

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
  std::optional<MoeConfig> moe;  // mixture-of-experts blocks; none: every block has the dense MLP

  int head_dim() const { return d_model / heads; }
};

// Names of the presets: tiny, the dense GPT shapes in size order (gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b,
// gpt-2.7b, gpt-6.7b, gpt-13b, gpt-70b), then the mixture-of-experts shapes in size order (moe-tiny,
// moe-mixtral-8x7b, moe-deepseek-v3).
std::vector<std::string> PresetNames();
// Looks up a preset; throws InputError listing the names.
ModelConfig FindPreset(const std::string& name);
// Replaces the layer count (`--layers N`), keeping every other shape; records what was scaled.
ModelConfig WithLayers(ModelConfig config, int layers);
// A custom shape; throws InputError naming the bad field (non-positive values, d_model % heads != 0, ...).
ModelConfig CustomModel(int layers, int d_model, int heads, int vocab, int seq);
// Checks a config's invariants; throws InputError naming the field.
void ValidateModel(const ModelConfig& config);
// Replaces the blocks' MLPs by `moe` (expert_ffn 0: the dense MLP's width), validated.
ModelConfig WithMoe(ModelConfig config, const MoeConfig& moe);
// Whether block `layer` (from 0) has an MoE layer in place of its dense MLP.
bool IsMoeBlock(const ModelConfig& config, int layer);
// How many of the blocks are MoE blocks (0 for a dense model).
int MoeBlockCount(const ModelConfig& config);

// Total parameters are those the model holds (every expert); active parameters are those one token's forward uses
// (the router and K experts of each MoE block; equal to the total for a dense model).
struct ParameterCount {
  int64_t token_embedding = 0;  // V*C (real vocabulary; tied with the LM head, so counted once)
  int64_t position_embedding = 0;  // T*C
  int64_t per_layer = 0;        // a dense block: ln1, qkv, attn proj, ln2, fc, fc proj: weights and biases
  int64_t per_moe_layer = 0;    // an MoE block: ln1, qkv, attn proj, ln2, router (E, C), E experts' fc and proj
  int64_t moe_layers = 0;       // how many blocks are MoE blocks (per_moe_layer is 0 when none)
  int64_t final_norm = 0;       // 2*C
  int64_t total = 0;            // embeddings + dense blocks + MoE blocks + final_norm
  int64_t matmul = 0;           // N_matmul: weights used in matrix multiplies, incl. the tied LM head (V*C)
  int64_t active = 0;           // total with K of the E experts per MoE block
  int64_t active_matmul = 0;    // matmul with K of the E experts per MoE block (and the router: every token uses it)
};

// Exact counts for the real vocabulary V (gpt2-124m: 124,439,808 in total).
ParameterCount CountParameters(const ModelConfig& config);

// Model FLOPs per token for forward+backward (README.md, "Definitions"): 6*N_active_matmul + 6*L*T*C (causal
// attention). For MoE models the active convention: a token's router and its K experts count, the other E - K experts
// do not, and every token counts as routed to K experts (dropped assignments are not subtracted); so MFU of an MoE
// model is active-parameter MFU, as Megatron-LM's FLOP count for MoE models (top-k experts' MLP per token) has it.
// For a dense model active == total.
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
// Expert parallel EP > 1: each rank holds E/EP of every MoE block's experts (their states divide by EP; the rest
// stays whole). Throws InputError for T < 1 and for an EP that does not divide the model's experts.
MemoryEstimate EstimateMemory(const ModelConfig& config, int micro_batch, int seq, bool bf16, int tensor_parallel = 1,
                              int expert_parallel = 1);
// The experts' parameters of all MoE blocks (0 for a dense model): E x (fc, proj and their biases) per block.
double ExpertParameters(const ModelConfig& config);
// What is not built yet for a model with MoE blocks in a layout of `parallel` (dp, zero1, fsdp) with T, P and EP: ""
// when it is, else the reason in train's words ("model 'moe-tiny' has mixture-of-experts blocks: with
// --tensor-parallel or --pipeline-parallel they are not built yet"; "--expert-parallel 2 with --parallel zero1 is not
// built yet (--parallel dp)"). train refuses such a layout and cost lists it as not possible.
std::string MoeLayoutGap(const ModelConfig& config, const std::string& parallel, int tensor_parallel,
                         int pipeline_parallel, int expert_parallel);
// Their share of the parameters the flat buffers hold (the padded vocabulary included): what expert parallel divides.
double ExpertShare(const ModelConfig& config);
// The bytes one token's rows make in every MoE block's four all-to-alls (dispatch and combine, forward and backward),
// each of its K rows of d_model `element_bytes` wide once, before the share that stays on the rank (0 for a dense
// model).
double AllToAllBytesPerToken(const ModelConfig& config, double element_bytes);

// EstimateMemory's activations per token: those of one block, and those after the last block (the final LayerNorm,
// the logits, the losses), for sequences of `seq` under tensor parallel T.
struct ActivationBytes {
  double layer = 0;
  double head = 0;
  double moe_layer = 0;  // an MoE block's (0 for a dense model); expert parallel EP keeps its all-to-alls' rows too
};
ActivationBytes ActivationBytesPerToken(const ModelConfig& config, int seq, bool bf16, int tensor_parallel = 1,
                                        int expert_parallel = 1);

}  // namespace tb
