#include "op_times.h"

#include "phase_clock.h"

namespace tb {

const char* OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kEmbedding: return "embedding";
    case OpKind::kLayerNorm: return "layernorm";
    case OpKind::kAttention: return "attention";
    case OpKind::kMlp: return "mlp";
    case OpKind::kLmHead: return "lm_head";
    case OpKind::kOptimizer: return "optimizer";
    case OpKind::kCommModel: return "comm_model";
  }
  return "?";
}

const char* OpKindScope(OpKind kind) {
  switch (kind) {
    case OpKind::kEmbedding: return "token and position embeddings (gather, scatter-add of their gradients)";
    case OpKind::kLayerNorm: return "every LayerNorm (2 per block and the final one)";
    case OpKind::kAttention: return "qkv and output projections with their biases, and causal attention itself";
    case OpKind::kMlp: return "the MLP's two linear layers, GELU, biases";
    case OpKind::kLmHead: return "the tied LM head and the cross-entropy";
    case OpKind::kOptimizer: return "AdamW over the flat buffers (and the bf16 copy of the weights on a GPU)";
    case OpKind::kCommModel:
      return "communication inside forward and backward: tensor parallel's activation all-reduces, fsdp's gathers and "
             "reduce-scatters, expert parallel's all-to-alls, dp's bucket all-reduces started (and progressed by MPI) "
             "as gradients become ready";
  }
  return "?";
}

namespace {

// A forward's MLP FLOPs per token over the layers: a dense block's two matmuls; an MoE block's router and K experts'
// two (the active convention of ModelFlopsPerToken: every token counts as routed to K experts).
double MlpFlopsPerToken(const ModelConfig& config) {
  const double c = config.d_model;
  double flops = 0;
  for (int l = 0; l < config.layers; ++l) {
    if (!IsMoeBlock(config, l)) {
      flops += 2.0 * (2.0 * c * config.mlp_ratio * c);
      continue;
    }
    const MoeConfig& moe = *config.moe;
    flops += 2.0 * c * moe.experts + moe.top_k * 2.0 * (2.0 * c * moe.expert_ffn);
  }
  return flops;
}

}  // namespace

OpWork WorkOf(const ModelConfig& config, OpKind kind, bool backward, double tokens, int seq, bool bf16,
              double parameter_elements, int tensor_parallel) {
  const double c = config.d_model;
  const double layers = config.layers;
  const double pass = backward ? 2.0 : 1.0;  // backward: input and weight gradients
  const double activation = bf16 ? 2.0 : 4.0;  // a GEMM's input or output element
  OpWork w;
  switch (kind) {
    case OpKind::kEmbedding:
      // Forward: a wte row and a wpe row read, the residual row written (fp32). Backward: the gradient row read, a
      // wte row and a wpe row read and written.
      w.bytes = tokens * c * (backward ? 4.0 + 8.0 + 8.0 : 12.0);
      break;
    case OpKind::kLayerNorm: {
      const double norms = 2.0 * layers + 1.0;
      // Forward: the fp32 input read, the output written, mean and rstd written. Backward: the output gradient and
      // the input read, the residual gradient read and written (fp32), and its bf16 copy written on a GPU.
      const double per_token = backward ? c * (activation + 4.0 + 8.0 + (bf16 ? 2.0 : 0.0)) : c * (4.0 + activation) + 8.0;
      w.bytes = tokens * norms * per_token;
      break;
    }
    case OpKind::kAttention:
      w.flops = pass * tokens * layers * (2.0 * (3.0 * c * c + c * c) + 2.0 * seq * c);
      break;
    case OpKind::kMlp:
      w.flops = pass * tokens * MlpFlopsPerToken(config);
      break;
    case OpKind::kLmHead:
      w.flops = pass * tokens * 2.0 * static_cast<double>(CountParameters(config).token_embedding);
      break;
    case OpKind::kOptimizer:
      // Parameter, gradient, m and v read; parameter, m and v written (and the bf16 copy on a GPU).
      w.bytes = backward ? parameter_elements * (bf16 ? 30.0 : 28.0) : 0.0;
      break;
    case OpKind::kCommModel:
      break;  // its rates are the collectives' (the report's activation and gather figures)
  }
  w.flops /= tensor_parallel;  // a rank's share of each matmul (the kinds without matmuls have none)
  return w;
}

OpTimes::OpTimes(std::unique_ptr<PhaseClock> clock) : clock_(std::move(clock)) {}

OpTimes::~OpTimes() = default;

void OpTimes::Begin(OpKind kind, bool backward) {
  clock_->Range(OpKindName(kind));
  clock_->Mark();
  slots_.push_back(OpSlot(kind, backward));
}

void OpTimes::End() {
  clock_->Range(nullptr);
  clock_->Mark();
  slots_.push_back(-1);
}

void OpTimes::BeginWait() {
  clock_->Range(OpKindName(OpKind::kCommModel));
  clock_->Mark();
  slots_.push_back(OpSlot(OpKind::kCommModel, true));
}

void OpTimes::EndWait() {
  // The slot before BeginWait's: the kind that waited (-1: none).
  const int interrupted = slots_.size() >= 2 ? slots_[slots_.size() - 2] : -1;
  clock_->Range(interrupted >= 0 ? OpKindName(static_cast<OpKind>(interrupted / 2)) : nullptr);
  clock_->Mark();
  slots_.push_back(interrupted);
}

void OpTimes::TakeInto(OpSeconds& seconds) {
  const std::vector<double> intervals = clock_->Intervals();
  for (size_t i = 0; i < intervals.size(); ++i) {
    if (slots_.at(i) >= 0) seconds[static_cast<size_t>(slots_[i])] += intervals[i];
  }
  slots_.clear();
}

}  // namespace tb
