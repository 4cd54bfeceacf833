#include "model_config.h"

#include <array>
#include <climits>
#include <cmath>
#include <cstdio>

#include "error.h"

namespace tb {
namespace {

// A preset's MoE blocks; experts 0: a dense model.
struct MoePreset {
  int experts = 0;
  int top_k = 0;
  int expert_ffn = 0;
  int every = 0;
};

struct Preset {
  const char* name;
  int layers;
  int d_model;
  int heads;
  int vocab;
  int seq;
  MoePreset moe;
};

constexpr int kGptVocab = 50257;
constexpr int kGptSeq = 1024;

// Real GPT layer shapes: the GPT-2 paper's four models; the GPT-3 paper's 2.7B and 6.7B; 13B at the 5120 width
// OPT-13B and Megatron use (the GPT-3 paper's 5140 is not 40 heads of 128); and the 70B class's 80 layers of
// 8192 with 64 heads. Every GPT preset uses the same GPT-2 block, vocabulary and context length. "tiny" is not a
// real model: a shape small enough for a quick CPU run (demos, tests, the scaling sweep on a laptop).
// The MoE presets put the same GPT-2 block around MoE layers (models/README.md, "Mixture of experts"): moe-tiny is
// tiny with 4 experts, top-2; moe-mixtral-8x7b has Mixtral-8x7B's widths (32 layers of 4096, 32 heads, 8 experts of
// 14336, top-2) and moe-deepseek-v3 DeepSeek-V3's (61 layers of 7168, 128 heads, 256 routed experts of 2048, top-8),
// each expert a 2-matrix GELU MLP (theirs are 3-matrix SwiGLU), with full multi-head attention (no grouped-query
// attention, no MLA) and in every block (DeepSeek-V3's 3 dense first blocks and its shared expert are left out).
constexpr std::array<Preset, 12> kPresets = {{
    {"tiny", 2, 128, 4, 4096, 256, {}},
    {"gpt2-124m", 12, 768, 12, kGptVocab, kGptSeq, {}},
    {"gpt2-350m", 24, 1024, 16, kGptVocab, kGptSeq, {}},
    {"gpt2-774m", 36, 1280, 20, kGptVocab, kGptSeq, {}},
    {"gpt2-1.5b", 48, 1600, 25, kGptVocab, kGptSeq, {}},
    {"gpt-2.7b", 32, 2560, 32, kGptVocab, kGptSeq, {}},
    {"gpt-6.7b", 32, 4096, 32, kGptVocab, kGptSeq, {}},
    {"gpt-13b", 40, 5120, 40, kGptVocab, kGptSeq, {}},
    {"gpt-70b", 80, 8192, 64, kGptVocab, kGptSeq, {}},
    {"moe-tiny", 2, 128, 4, 4096, 256, {4, 2, 512, 1}},
    {"moe-mixtral-8x7b", 32, 4096, 32, kGptVocab, kGptSeq, {8, 2, 14336, 1}},
    {"moe-deepseek-v3", 61, 7168, 128, kGptVocab, kGptSeq, {256, 8, 2048, 1}},
}};
constexpr int kPresetMlpRatio = 4;

// Embedding rows are allocated in multiples of 128 so the LM-head GEMM gets aligned, tensor-core-friendly
// shapes; the padding rows take no part in the loss or the parameter count, only in the memory estimate.
constexpr int64_t kVocabAlignment = 128;

// Far beyond anything a rank can hold, and low enough that every int64 term of the accounting stays exact.
constexpr long double kMaxParameters = 1e15L;

int PaddedVocab(int vocab) {
  int64_t padded = (static_cast<int64_t>(vocab) + kVocabAlignment - 1) / kVocabAlignment * kVocabAlignment;
  if (padded > INT_MAX) {
    throw InputError("--vocab " + std::to_string(vocab) + " is too large (at most " +
                     std::to_string(INT_MAX / kVocabAlignment * kVocabAlignment) + ")");
  }
  return static_cast<int>(padded);
}

void RequirePositive(int value, const char* flag) {
  if (value < 1) throw InputError(std::string(flag) + " " + std::to_string(value) + " must be at least 1");
}

// A flag's number as a user would type it ("1.25", "0", "nan").
std::string NumberText(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

void ValidateMoe(const MoeConfig& moe) {
  RequirePositive(moe.experts, "--experts");
  RequirePositive(moe.expert_ffn, "--expert-ffn");
  RequirePositive(moe.every, "--moe-every");
  if (moe.top_k < 1 || moe.top_k > moe.experts) {
    throw InputError("--top-k " + std::to_string(moe.top_k) + " must lie in 1.." + std::to_string(moe.experts) +
                     " (1 to --experts)");
  }
  // !(x > 0) also refuses NaN.
  if (!(moe.capacity_factor > 0) || !std::isfinite(moe.capacity_factor)) {
    throw InputError("--capacity-factor " + NumberText(moe.capacity_factor) +
                     " must be a finite number above 0 (at least --experts / --top-k never drops a token)");
  }
  if (!(moe.aux_loss_coef >= 0) || !std::isfinite(moe.aux_loss_coef)) {
    throw InputError("--aux-loss-coef " + NumberText(moe.aux_loss_coef) + " must be a finite number, at least 0");
  }
}

// Every parameter the flat buffers would hold (the padded vocabulary included), in long double: checked against
// kMaxParameters before any int64 count is formed.
long double AllocatedParameters(const ModelConfig& config) {
  const long double c = config.d_model;
  const long double attention = 4 * c * c + 8 * c;  // qkv and attention projection with biases, two LayerNorms
  const auto mlp = [c](long double hidden) { return 2 * c * hidden + hidden + c; };
  const long double moe_blocks = MoeBlockCount(config);
  long double blocks = (config.layers - moe_blocks) * (attention + mlp(config.mlp_ratio * c));
  if (config.moe) {
    const long double experts = config.moe->experts;
    blocks += moe_blocks * (attention + experts * c + experts * mlp(config.moe->expert_ffn));
  }
  return blocks + (static_cast<long double>(config.vocab_padded) + config.seq + 2) * c;
}

// Every sequence length a run uses must fit the learned positional embedding.
void ValidateRunShape(const ModelConfig& config, int micro_batch, int seq) {
  if (micro_batch < 1) throw InputError("micro-batch " + std::to_string(micro_batch) + " must be at least 1");
  if (seq < 1 || seq > config.seq) {
    throw InputError("sequence length " + std::to_string(seq) + " is outside 1.." + std::to_string(config.seq) +
                     ", the positions of model '" + config.name + "'");
  }
}

}  // namespace

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const Preset& preset : kPresets) names.emplace_back(preset.name);
  return names;
}

ModelConfig FindPreset(const std::string& name) {
  for (const Preset& preset : kPresets) {
    if (name != preset.name) continue;
    ModelConfig config;
    config.name = preset.name;
    config.layers = preset.layers;
    config.d_model = preset.d_model;
    config.heads = preset.heads;
    config.vocab = preset.vocab;
    config.vocab_padded = PaddedVocab(preset.vocab);
    config.seq = preset.seq;
    config.mlp_ratio = kPresetMlpRatio;
    config.preset_layers = preset.layers;
    if (preset.moe.experts > 0) {
      MoeConfig moe;
      moe.experts = preset.moe.experts;
      moe.top_k = preset.moe.top_k;
      moe.expert_ffn = preset.moe.expert_ffn;
      moe.every = preset.moe.every;
      config.moe = moe;
    }
    return config;
  }
  std::string accepted;
  for (const Preset& preset : kPresets) accepted += (accepted.empty() ? "" : ", ") + std::string(preset.name);
  throw InputError("unknown model '" + name + "' for --model (accepted: " + accepted + ")");
}

ModelConfig WithLayers(ModelConfig config, int layers) {
  RequirePositive(layers, "--layers");
  config.layers = layers;
  config.scaled = layers == config.preset_layers ? ""
                                                 : std::to_string(layers) + " of " + config.name + "'s " +
                                                       std::to_string(config.preset_layers) + " layers";
  ValidateModel(config);
  return config;
}

ModelConfig CustomModel(int layers, int d_model, int heads, int vocab, int seq) {
  ModelConfig config;
  config.name = "custom";
  config.layers = layers;
  config.d_model = d_model;
  config.heads = heads;
  config.vocab = vocab;
  config.vocab_padded = PaddedVocab(vocab);
  config.seq = seq;
  config.mlp_ratio = kPresetMlpRatio;
  config.preset_layers = layers;
  ValidateModel(config);
  return config;
}

ModelConfig WithMoe(ModelConfig config, const MoeConfig& moe) {
  config.moe = moe;
  if (moe.expert_ffn == 0) config.moe->expert_ffn = config.mlp_ratio * config.d_model;
  ValidateModel(config);
  return config;
}

bool IsMoeBlock(const ModelConfig& config, int layer) {
  return config.moe.has_value() && layer % config.moe->every == 0;
}

int MoeBlockCount(const ModelConfig& config) {
  if (!config.moe) return 0;
  return 1 + (config.layers - 1) / config.moe->every;  // blocks 0, every, 2 * every, ... below layers
}

void ValidateModel(const ModelConfig& config) {
  RequirePositive(config.layers, "--layers");
  RequirePositive(config.d_model, "--d-model");
  RequirePositive(config.heads, "--heads");
  RequirePositive(config.seq, "--seq");
  RequirePositive(config.mlp_ratio, "mlp_ratio");
  if (config.vocab < 2) {
    throw InputError("--vocab " + std::to_string(config.vocab) + " must be at least 2 (a loss needs two tokens)");
  }
  if (config.vocab_padded < config.vocab || config.vocab_padded % kVocabAlignment != 0) {
    throw InputError("vocab_padded " + std::to_string(config.vocab_padded) + " must be a multiple of " +
                     std::to_string(kVocabAlignment) + " no smaller than --vocab " + std::to_string(config.vocab));
  }
  if (config.d_model % config.heads != 0) {
    throw InputError("--d-model " + std::to_string(config.d_model) + " is not divisible by --heads " +
                     std::to_string(config.heads));
  }
  // Even head vectors keep bf16 heads 4-byte aligned for the CUDA attention kernels.
  if (config.head_dim() % 2 != 0) {
    throw InputError("head dimension " + std::to_string(config.head_dim()) + " (--d-model " +
                     std::to_string(config.d_model) + " / --heads " + std::to_string(config.heads) +
                     ") must be even");
  }
  if (config.moe) ValidateMoe(*config.moe);
  if (AllocatedParameters(config) > kMaxParameters) {
    throw InputError("--layers " + std::to_string(config.layers) + ", --d-model " + std::to_string(config.d_model) +
                     ", --vocab " + std::to_string(config.vocab) + " and --seq " + std::to_string(config.seq) +
                     (config.moe ? " with their experts" : "") + " give more than 1e15 parameters");
  }
}

namespace {

// One block's parameters: all it holds, what one token uses, and the matmul weights of each.
struct BlockCount {
  int64_t total = 0;
  int64_t active = 0;
  int64_t matmul = 0;
  int64_t active_matmul = 0;
};

// A GELU MLP of `hidden` units on C channels: fc (hidden, C) + bias, then proj (C, hidden) + bias.
BlockCount MlpCount(int64_t c, int64_t hidden) {
  const int64_t weights = c * hidden + hidden * c;
  return {weights + hidden + c, weights + hidden + c, weights, weights};
}

// ln1, qkv (3C, C) + bias, attention projection (C, C) + bias, ln2, then `mlp`.
BlockCount BlockWith(int64_t c, const BlockCount& mlp) {
  const int64_t attention_weights = c * 3 * c + c * c;
  const int64_t attention = 2 * c + attention_weights + 3 * c + c + 2 * c;
  return {attention + mlp.total, attention + mlp.active, attention_weights + mlp.matmul,
          attention_weights + mlp.active_matmul};
}

// The router (E, C), no bias, used by every token, and E experts of which a token uses K.
BlockCount MoeLayerCount(int64_t c, const MoeConfig& moe) {
  const BlockCount expert = MlpCount(c, moe.expert_ffn);
  const int64_t router = moe.experts * c;
  return {router + moe.experts * expert.total, router + moe.top_k * expert.total, router + moe.experts * expert.matmul,
          router + moe.top_k * expert.matmul};
}

}  // namespace

ParameterCount CountParameters(const ModelConfig& config) {
  ValidateModel(config);
  const int64_t c = config.d_model;
  const BlockCount dense = BlockWith(c, MlpCount(c, static_cast<int64_t>(config.mlp_ratio) * c));
  const BlockCount moe = config.moe ? BlockWith(c, MoeLayerCount(c, *config.moe)) : BlockCount{};
  const int64_t moe_layers = MoeBlockCount(config);
  const int64_t dense_layers = config.layers - moe_layers;

  ParameterCount count;
  count.token_embedding = static_cast<int64_t>(config.vocab) * c;
  count.position_embedding = static_cast<int64_t>(config.seq) * c;
  count.per_layer = dense.total;
  count.per_moe_layer = moe.total;
  count.moe_layers = moe_layers;
  count.final_norm = 2 * c;
  const int64_t outside_blocks = count.token_embedding + count.position_embedding + count.final_norm;
  count.total = outside_blocks + dense_layers * dense.total + moe_layers * moe.total;
  count.active = outside_blocks + dense_layers * dense.active + moe_layers * moe.active;
  // Embedding lookups are gathers, not matmuls; the tied LM head reuses wte as a (V, C) matmul.
  count.matmul = count.token_embedding + dense_layers * dense.matmul + moe_layers * moe.matmul;
  count.active_matmul = count.token_embedding + dense_layers * dense.active_matmul + moe_layers * moe.active_matmul;
  return count;
}

double ModelFlopsPerToken(const ModelConfig& config, int seq) {
  ValidateRunShape(config, 1, seq);
  // 2 FLOPs per multiply-add forward and 4 backward (input and weight gradients) for every matmul weight a token
  // uses. Per layer and token, the scores Q.K and the weighted sum of V take 4*T*C forward and 8*T*C backward over
  // the full T x T; causal masking halves that to 6*T*C.
  const double matmul = static_cast<double>(CountParameters(config).active_matmul);
  return 6.0 * matmul + 6.0 * config.layers * static_cast<double>(seq) * config.d_model;
}

double ExpertParameters(const ModelConfig& config) {
  if (!config.moe) return 0.0;
  const double c = config.d_model, f = config.moe->expert_ffn;
  return static_cast<double>(MoeBlockCount(config)) * config.moe->experts * (2.0 * c * f + f + c);
}

std::string MoeLayoutGap(const ModelConfig& config, const std::string& parallel, int tensor_parallel,
                         int pipeline_parallel, int expert_parallel) {
  if (!config.moe) return "";
  if (tensor_parallel > 1 || pipeline_parallel > 1) {
    return "model '" + config.name + "' has mixture-of-experts blocks: with --tensor-parallel or --pipeline-parallel "
           "they are not built yet";
  }
  if (expert_parallel > 1 && parallel != "dp") {
    return "--expert-parallel " + std::to_string(expert_parallel) + " with --parallel " + parallel +
           " is not built yet (--parallel dp)";
  }
  return "";
}

double ExpertShare(const ModelConfig& config) {
  const double allocated = static_cast<double>(CountParameters(config).total) +
                           static_cast<double>(config.vocab_padded - config.vocab) * config.d_model;
  return ExpertParameters(config) / allocated;
}

double AllToAllBytesPerToken(const ModelConfig& config, double element_bytes) {
  if (!config.moe) return 0.0;
  return 4.0 * MoeBlockCount(config) * config.moe->top_k * config.d_model * element_bytes;
}

MemoryEstimate EstimateMemory(const ModelConfig& config, int micro_batch, int seq, bool bf16, int tensor_parallel,
                              int expert_parallel) {
  ValidateRunShape(config, micro_batch, seq);
  if (tensor_parallel < 1) {
    throw InputError("tensor parallel size must be at least 1, got " + std::to_string(tensor_parallel));
  }
  if (expert_parallel < 1 || (expert_parallel > 1 && (!config.moe || config.moe->experts % expert_parallel != 0))) {
    throw InputError("expert parallel " + std::to_string(expert_parallel) + " does not divide the " +
                     std::to_string(config.moe ? config.moe->experts : 0) + " experts of model '" + config.name + "'");
  }
  const ParameterCount count = CountParameters(config);
  // The flat buffers hold the padded embedding table: its zero rows cost memory like any other parameter.
  const double allocated =
      static_cast<double>(count.total) + static_cast<double>(config.vocab_padded - config.vocab) * config.d_model;

  // bf16: bf16 weights and gradients (2 + 2) and fp32 master weights, AdamW m and v (4 + 4 + 4) — ZeRO's
  // 16 bytes per parameter for mixed-precision Adam. fp32: weights and gradients (4 + 4) are the master copy,
  // plus m and v (4 + 4).
  const double weight_bytes = bf16 ? 2.0 : 4.0;
  MemoryEstimate estimate;
  estimate.weights_bytes = weight_bytes * allocated;
  estimate.gradients_bytes = weight_bytes * allocated;
  estimate.optimizer_bytes = (bf16 ? 12.0 : 8.0) * allocated;

  // Activations a straightforward implementation keeps for backward: those of llm.c's that backward reads
  // (without dropout, Korthikanti et al.'s 32*s*b*h + 2*heads*s^2*b bytes per layer in 16 bits). Per layer and
  // token, in elements of the activation type: the residual stream entering each LayerNorm (2C), ln1 output
  // (C), q, k, v (3C), attention output before its projection (C), ln2 output (C), fc output before GELU and
  // after (2 * 4C), and the softmax probabilities (H rows of T: a plain implementation allocates the full
  // T x T); plus four fp32 LayerNorm statistics (mean and rstd of ln1 and ln2). After the last layer: its
  // output and the final LayerNorm output (2C), two fp32 statistics, the fp32 logits over the padded
  // vocabulary (Vp, turned into probabilities and then into their gradient in place) and one fp32 loss per
  // position. Activation gradients and GEMM workspaces are transient and not counted, and fused attention
  // (cuDNN SDPA) keeps softmax statistics instead of probabilities, so this is an estimate that errs high for
  // the CUDA path. Under tensor parallel T (Korthikanti et al.'s 10·s·b·h + 24·s·b·h/t + 5·n·s²·b/t without sequence
  // parallelism) q, k, v, the attention output, both fc tensors, the probabilities (heads / T) and the logits
  // (vocabulary / T) are split; the residual stream, the LayerNorm outputs and statistics and the losses are not.
  // An MoE block keeps, in place of the MLP's, its routing and its experts' rows (ActivationBytesPerToken).
  const ActivationBytes per_token = ActivationBytesPerToken(config, seq, bf16, tensor_parallel, expert_parallel);
  const double tokens = static_cast<double>(micro_batch) * seq;
  const int moe_layers = MoeBlockCount(config);
  estimate.activations_bytes =
      tokens * ((config.layers - moe_layers) * per_token.layer + moe_layers * per_token.moe_layer + per_token.head);
  if (expert_parallel > 1) {
    // Each rank holds E/EP of every MoE block's experts: their weights, gradients and optimizer state divide.
    const double held = 1.0 - ExpertShare(config) * (1.0 - 1.0 / expert_parallel);
    estimate.weights_bytes *= held;
    estimate.gradients_bytes *= held;
    estimate.optimizer_bytes *= held;
  }
  return estimate;
}

ActivationBytes ActivationBytesPerToken(const ModelConfig& config, int seq, bool bf16, int tensor_parallel,
                                        int expert_parallel) {
  const double act = bf16 ? 2.0 : 4.0;
  const double fp32 = 4.0;
  const double c = config.d_model;
  const double hidden = static_cast<double>(config.mlp_ratio) * c;
  const double t = tensor_parallel;
  ActivationBytes bytes;
  bytes.layer = (2 * c + c + c) * act + (3 * c + c + 2 * hidden) * act / t +
                static_cast<double>(config.heads) * seq * act / t + 4 * fp32;
  bytes.head = 2 * c * act + 2 * fp32 + static_cast<double>(config.vocab_padded) * fp32 / t + fp32;
  if (config.moe) {
    // An MoE block: the dense block's without its MLP (2 x hidden), plus the router's probabilities (E, fp32), each
    // of the K choices' expert, gate weight and row (3 x 4 bytes) and its expert's rows: input, fc output before and
    // after GELU and output (2C + 2F) — K rows per token when the experts are balanced and nothing is dropped; under
    // expert parallel the input rows sent and the outputs received back are kept too (2C more per choice).
    const double k = config.moe->top_k, f = config.moe->expert_ffn;
    const double rows = (2 * c + 2 * f + (expert_parallel > 1 ? 2 * c : 0.0)) * act;
    bytes.moe_layer = bytes.layer - 2 * hidden * act / t + config.moe->experts * fp32 + k * (3 * 4.0 + rows);
  }
  return bytes;
}

}  // namespace tb
