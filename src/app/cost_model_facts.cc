#include "cost_model_facts.h"

#include "console.h"
#include "error.h"
#include "model_config.h"
#include "tensor_parallel.h"
#include "train_plan.h"
#include "transformer.h"

namespace tb {
namespace {

bool ShapeKnown(const RunMeasurement& m) {
  return m.layers > 0 && m.d_model > 0 && m.heads > 0 && m.vocab > 0 && m.max_seq > 0;
}

// The run's model: its shape, and its MoE blocks (under the run's model name, which their refusals name) where it
// has them.
ModelConfig ConfigOf(const RunMeasurement& m) {
  ModelConfig config = CustomModel(m.layers, m.d_model, m.heads, m.vocab, m.max_seq);
  if (m.experts == 0) return config;
  config.name = m.model_name;
  return WithMoe(config, {m.experts, m.top_k, m.expert_ffn, m.moe_every, m.capacity_factor, m.aux_loss_coef});
}

bool Bf16(const RunMeasurement& m) { return m.memory_precision.starts_with("bf16"); }

// Each stage's memory in `plan`, before the mode shards it.
std::vector<MemoryBreakdown> StageBreakdowns(const TrainPlan& plan) {
  std::vector<MemoryBreakdown> stages;
  for (const StagePlan& s : plan.stages) {
    stages.push_back({s.memory.weights_bytes, s.memory.gradients_bytes, s.memory.optimizer_bytes,
                      s.memory.activations_bytes, 0});
  }
  return stages;
}

// Each stage's memory of the plan train makes for `k` ranks at T and P (1F1B's micro-batches in flight at M, the run's
// micro-batch), before the mode shards it; throws InputError where train would refuse the plan.
std::vector<MemoryBreakdown> StageMemory(const ModelConfig& config, const RunMeasurement& m, int micro_batch, int k,
                                         int t, int pp, int micro_batches) {
  return StageBreakdowns(PlanTrainPoint(config, k, t, pp, micro_batch, micro_batches, m.seq, Bf16(m)));
}

// The run's own estimate, as its report states it; with stages, each stage's as train planned it.
MemoryCheck RunMemoryCheck(const RunMeasurement& m) {
  MemoryCheck check;
  check.estimate = m.memory_estimate;
  check.mode = m.parallel;
  check.tensor_parallel = m.points.back().train.tensor_parallel;
  check.parameters = m.parameters;
  if (ShapeKnown(m)) check.gathered_parameters = FsdpGatheredParameters(ConfigOf(m));
  check.what = Format("%s as run (%s%.3g parameters, micro-batch %d, seq %d; %s; %s)", m.model_name.c_str(),
                      m.model_scaled.empty() ? "" : (m.model_scaled + ", ").c_str(), m.parameters,
                      m.points.back().micro_batch, m.seq, m.memory_precision.c_str(), m.parallel.c_str());
  const TrainPointInput& last = m.points.back().train;
  if (last.pipeline_parallel > 1 && ShapeKnown(m) && m.seq > 0) {
    check.stages = StageMemory(ConfigOf(m), m, m.points.back().micro_batch, last.k, last.tensor_parallel,
                               last.pipeline_parallel, last.micro_batches);
    check.what += Format(", %d pipeline stages of %d micro-batches: the largest stage's", last.pipeline_parallel,
                         last.micro_batches);
  }
  return check;
}

// The model in `pp` stages at T (train's PlanTrainPoint with M = P: 1F1B keeps P - s micro-batches in flight on stage
// s whenever M >= P), or why it cannot be (train's own words). The heaviest stage is the last: its L/P blocks and the
// LM head's FLOPs (6 V C per token); each boundary sends a micro-batch's residual stream in fp32 (train's stage edges);
// the tied embedding's fp32 gradient (its vocabulary rows / T) is all-reduced between the first and last stage.
PipelineShape PipelineAt(const ModelConfig& config, const RunMeasurement& m, const MeasuredPoint& p, int t, int pp) {
  PipelineShape pipe;
  pipe.pp = pp;
  pipe.invalid = MoeLayoutGap(config, "dp", t, pp, 1);
  if (!pipe.invalid.empty()) return pipe;
  if (t > 1) {
    // cmd_train's CheckPipelineFlags says so for the cuda backend; models/ does not expose it (TensorParallelModeGap's
    // kind): the same words here.
    for (const char* mode : {"dp", "zero1"}) {
      pipe.modes_not_built[mode] = "--pipeline-parallel " + std::to_string(pp) + " with --tensor-parallel on the cuda " +
                                   "backend is not built yet (the CUDA tensor parallel model holds no stage)";
    }
  }
  try {
    const TrainPlan plan = PlanTrainPoint(config, t * pp, t, pp, p.micro_batch, pp, m.seq, Bf16(m));
    double allocated = 0;
    for (const StagePlan& s : plan.stages) allocated += s.parameters;
    allocated -= static_cast<double>(config.vocab_padded) * config.d_model;  // the last stage's copy of wte
    for (const StagePlan& s : plan.stages) pipe.parameter_share.push_back(s.parameters / allocated);
    pipe.stage_memory = StageMemory(config, m, p.micro_batch, t * pp, t, pp, pp);
    const double whole = ModelFlopsPerToken(config, m.seq);
    const double layer = ModelFlopsPerToken(WithLayers(config, 2), m.seq) - ModelFlopsPerToken(WithLayers(config, 1), m.seq);
    pipe.compute_share = (whole - layer * config.layers * (pp - 1) / pp) / whole;
    pipe.edge_bytes = 4.0 * p.micro_batch * m.seq * config.d_model;
    pipe.embedding_bytes = 4.0 * config.vocab_padded * config.d_model / t;
  } catch (const InputError& e) {
    pipe.invalid = e.what();
  }
  return pipe;
}

// An MoE model's experts over each EP that divides them (EP = 1 first), at the priced point's micro-batch: the memory
// per rank before the mode shards it (EstimateMemory with the experts' states over EP).
void AddExpertShapes(const ModelConfig& config, const RunMeasurement& m, const MeasuredPoint& p,
                     TensorParallelShape& shape) {
  for (int ep = 1; ep <= config.moe->experts; ++ep) {
    if (config.moe->experts % ep != 0) continue;
    ExpertShape experts;
    experts.ep = ep;
    const MemoryEstimate e = EstimateMemory(config, p.micro_batch, m.seq, Bf16(m), 1, ep);
    experts.dp_memory = {e.weights_bytes, e.gradients_bytes, e.optimizer_bytes, e.activations_bytes, 0};
    shape.experts.push_back(experts);
  }
}

// What a projection needs of the run's MoE blocks: the experts' share of the parameters, and the all-to-alls' bytes per
// token (each of a token's K rows of d_model in bf16, as the GPUs would send them, in every MoE block's four) and count
// per micro-batch.
MoeFacts MoeFactsOf(const ModelConfig& config) {
  MoeFacts moe;
  if (!config.moe) return moe;
  moe.expert_share = ExpertShare(config);
  moe.alltoall_bytes_per_token = AllToAllBytesPerToken(config, 2.0);  // bf16 rows
  moe.alltoall_ops_per_micro_batch = 4.0 * MoeBlockCount(config);
  return moe;
}

// The model split T ways at the priced point's micro-batch, or why it cannot be (train's own reasons). Offerings are
// GPUs: the CUDA transformer's rules apply, whatever the run's own backend (a CPU stand-in included).
TensorParallelShape ShapeAt(const ModelConfig& config, const RunMeasurement& m, const MeasuredPoint& p, int t) {
  TensorParallelShape shape;
  shape.tp = t;
  for (const char* mode : {"dp", "zero1", "fsdp"}) {
    const std::string gap = TensorParallelModeGap(mode, t, true);
    if (!gap.empty()) shape.modes_not_built[mode] = "--tensor-parallel " + std::to_string(t) + " " + gap;
  }
  shape.invalid = MoeLayoutGap(config, "dp", t, 1, 1);
  if (!shape.invalid.empty()) return shape;
  try {
    if (config.moe) AddExpertShapes(config, m, p, shape);
    CheckTensorParallelStep(config, t, p.micro_batch, m.seq, true);
    const MemoryEstimate e = EstimateMemory(config, p.micro_batch, m.seq, m.memory_precision.starts_with("bf16"), t);
    shape.dp_memory = {e.weights_bytes, e.gradients_bytes, e.optimizer_bytes, e.activations_bytes, 0};
    // The models all-reduce fp32 activations (models/tensor_parallel.h): 4 bytes per element.
    shape.activation_bytes = 4.0 * static_cast<double>(TensorParallelAllReduceElements(config, t, p.micro_batch, m.seq));
    shape.activation_ops = t > 1 ? 4.0 * m.layers + 4.0 : 0.0;
  } catch (const InputError& e) {
    shape.invalid = e.what();
  }
  return shape;
}

// --model in --pipeline-parallel stages: each stage's estimate as train plans it (its layers' states, the last one's
// copy of wte, the activations of 1F1B's micro-batches in flight); train's refusals in its words.
void AddModelStages(MemoryCheck& check, const ModelConfig& config, const ModelFlags& f, int micro_batch, int seq) {
  const int micro_batches = f.micro_batches > 0 ? f.micro_batches : f.pipeline_parallel;
  if (f.parallel == "fsdp") {
    throw InputError("--pipeline-parallel " + std::to_string(f.pipeline_parallel) +
                     " with --parallel fsdp is not built (train refuses it): dp or zero1 across the pipelines");
  }
  check.stages = StageBreakdowns(
      PlanTrainPoint(config, f.ranks, f.tensor_parallel, f.pipeline_parallel, micro_batch, micro_batches, seq, true));
  check.what += Format(", %d pipeline stages of %d micro-batches: the largest stage's", f.pipeline_parallel,
                       micro_batches);
}


// --model's experts against the other flags, as train checks them (one line, exit 2).
void CheckModelExperts(const ModelConfig& config, const ModelFlags& f) {
  const std::string ep = "--expert-parallel " + std::to_string(f.expert_parallel);
  if (!config.moe) {
    if (f.expert_parallel > 1) throw InputError(ep + " needs a model with experts (an moe-* preset)");
    return;
  }
  const std::string gap = MoeLayoutGap(config, f.parallel, f.tensor_parallel, f.pipeline_parallel, f.expert_parallel);
  if (!gap.empty()) throw InputError(gap);
  if (f.ranks % f.expert_parallel != 0) {
    throw InputError(ep + " does not divide the " + std::to_string(f.ranks) + " --ranks");
  }
}

}  // namespace

MemoryCheck ModelMemoryCheck(const ModelFlags& f) {
  MemoryCheck check;
  ModelConfig config = FindPreset(f.name);
  if (f.layers > 0) config = WithLayers(config, f.layers);
  CheckModelExperts(config, f);
  const int micro_batch = f.micro_batch > 0 ? f.micro_batch : 1;
  const int seq = f.seq > 0 ? f.seq : config.seq;
  const MemoryEstimate e = EstimateMemory(config, micro_batch, seq, true, f.tensor_parallel, f.expert_parallel);
  check.estimate = {e.weights_bytes, e.gradients_bytes, e.optimizer_bytes, e.activations_bytes};
  check.mode = f.parallel;
  check.ranks = f.ranks;
  check.tensor_parallel = f.tensor_parallel;
  check.parameters = static_cast<double>(CountParameters(config).total);
  check.gathered_parameters = FsdpGatheredParameters(config);
  check.what = Format("%s (%d layers, %.3g parameters), micro-batch %d, seq %d, bf16 mixed precision, %s over %d "
                      "rank%s", config.name.c_str(), config.layers, check.parameters, micro_batch, seq,
                      f.parallel.c_str(), f.ranks, f.ranks == 1 ? "" : "s");
  if (f.tensor_parallel > 1) {
    check.what += Format(", tensor parallel %d (states and split activations over %d)", f.tensor_parallel,
                         f.tensor_parallel);
  }
  if (config.moe) {
    check.what += Format(", %d experts per MoE block, top-%d, %s", config.moe->experts, config.moe->top_k,
                         f.expert_parallel > 1 ? Format("expert parallel %d (E/%d of each block's experts per GPU)",
                                                        f.expert_parallel, f.expert_parallel).c_str()
                                               : "every expert on every GPU");
  }
  if (f.pipeline_parallel > 1) AddModelStages(check, config, f, micro_batch, seq);
  check.For(f.ranks);  // a bad mode or rank count fails here
  return check;
}

RunModelFacts RunModelFactsOf(const RunMeasurement& m, const MeasuredPoint& priced, bool own_memory,
                              const std::vector<int>& tp_sizes, const std::vector<int>& pp_sizes) {
  RunModelFacts facts;
  if (own_memory) facts.memory = RunMemoryCheck(m);
  if (!ShapeKnown(m) || m.seq <= 0 || tp_sizes.empty()) return facts;  // data parallel modes only, at the report's estimate
  const ModelConfig config = ConfigOf(m);
  facts.moe = MoeFactsOf(config);
  for (int t : tp_sizes) {
    facts.shapes.push_back(ShapeAt(config, m, priced, t));
    for (int pp : pp_sizes) facts.shapes.back().pipelines.push_back(PipelineAt(config, m, priced, t, pp));
  }
  return facts;
}

}  // namespace tb
