#include "train_plan.h"

#include <string>
#include <vector>

#include "error.h"

namespace tb {
namespace {

// The whole model's figures every stage's plan is a part of.
struct WholeModel {
  std::vector<TensorSlot> layout;  // MakeLayout's
  double allocated = 0;            // its elements (the padded wte included)
  MemoryEstimate memory;           // EstimateMemory's at the point's micro-batch
  ActivationBytes per_token;       // and its activations per token
};

// One stage's parameters and memory: the tensors StageLayout leaves it (its experts' share of the expert tensors), at
// EstimateMemory's bytes per parameter, and its in-flight micro-batches' activations (its blocks', and the head's on
// the last stage).
StagePlan PlanStage(const ModelConfig& model, const WholeModel& whole, const PipelineStage& stage, int expert_parallel,
                    double tokens) {
  StagePlan plan;
  plan.stage = stage;
  ModelPlacement placement;
  placement.stage = stage;
  placement.experts.parallel = expert_parallel;
  for (const TensorSlot& slot : HeldLayout(whole.layout, placement)) plan.parameters += static_cast<double>(slot.count);
  const double share = plan.parameters / whole.allocated;
  plan.memory.weights_bytes = whole.memory.weights_bytes * share;
  plan.memory.gradients_bytes = whole.memory.gradients_bytes * share;
  plan.memory.optimizer_bytes = whole.memory.optimizer_bytes * share;
  int moe_layers = 0;
  for (int l = stage.first_layer; l < stage.end_layer; ++l) moe_layers += IsMoeBlock(model, l) ? 1 : 0;
  const double dense_layers = stage.end_layer - stage.first_layer - moe_layers;
  plan.memory.activations_bytes =
      stage.slots * tokens *
      (dense_layers * whole.per_token.layer + moe_layers * whole.per_token.moe_layer +
       (stage.last() ? whole.per_token.head : 0.0));
  return plan;
}

}  // namespace

RankPlace TrainPlan::Place(int rank) const {
  return {rank % tensor_parallel, (rank / tensor_parallel) % data_parallel,
          rank / (tensor_parallel * data_parallel)};
}

int TrainPlan::TensorGroup(int rank) const { return rank / tensor_parallel; }

int TrainPlan::DataGroup(int rank) const {
  const RankPlace p = Place(rank);
  return p.stage * tensor_parallel + p.tensor;
}

int TrainPlan::ExpertGroup(int rank) const {
  const RankPlace p = Place(rank);
  return (p.stage * tensor_parallel + p.tensor) * (data_parallel / expert_parallel) + p.data / expert_parallel;
}

int TrainPlan::ExpertRank(int rank) const { return Place(rank).data % expert_parallel; }

int TrainPlan::ExpertDataGroup(int rank) const {
  const RankPlace p = Place(rank);
  return (p.stage * tensor_parallel + p.tensor) * expert_parallel + p.data % expert_parallel;
}

int TrainPlan::PipelineGroup(int rank) const {
  const RankPlace p = Place(rank);
  return p.data * tensor_parallel + p.tensor;
}

double TrainPlan::bubble_theory() const {
  return (pipeline_parallel - 1.0) / (micro_batches + pipeline_parallel - 1.0);
}

const StagePlan& TrainPlan::largest_stage() const {
  const StagePlan* largest = &stages.front();
  for (const StagePlan& s : stages) {
    if (s.memory.total_bytes() > largest->memory.total_bytes()) largest = &s;
  }
  return *largest;
}

TrainPlan PlanTrainPoint(const ModelConfig& model, int ranks, int tensor_parallel, int pipeline_parallel,
                         int micro_batch, int micro_batches, int seq, bool bf16, int expert_parallel) {
  const std::string p = "--pipeline-parallel " + std::to_string(pipeline_parallel);
  if (ranks % (tensor_parallel * pipeline_parallel) != 0) {
    throw InputError(p + (tensor_parallel > 1 ? " x --tensor-parallel " + std::to_string(tensor_parallel) : "") +
                     " does not divide the " + std::to_string(ranks) + " ranks of a point");
  }
  if (pipeline_parallel > 1 && micro_batches < pipeline_parallel) {
    throw InputError(p + " needs --micro-batches of at least " + std::to_string(pipeline_parallel) + " (1F1B keeps " +
                     "every stage busy only with as many micro-batches as stages), not " + std::to_string(micro_batches));
  }
  const int replicas = ranks / (tensor_parallel * pipeline_parallel);
  if (expert_parallel > 1) {
    const std::string ep = "--expert-parallel " + std::to_string(expert_parallel);
    if (!model.moe) throw InputError(ep + " needs a model with experts (an moe-* preset or --experts E)");
    if (model.moe->experts % expert_parallel != 0) {
      throw InputError(ep + " does not divide the " + std::to_string(model.moe->experts) + " experts (--experts)");
    }
    if (tensor_parallel > 1 || pipeline_parallel > 1) {
      throw InputError(ep + " with --tensor-parallel or --pipeline-parallel is not built (expert parallel runs "
                       "across data parallel ranks)");
    }
    if (replicas % expert_parallel != 0) {
      throw InputError(ep + " does not divide the " + std::to_string(ranks) + " ranks of a point");
    }
  }
  TrainPlan plan;
  plan.expert_parallel = expert_parallel;
  plan.ranks = ranks;
  plan.tensor_parallel = tensor_parallel;
  plan.pipeline_parallel = pipeline_parallel;
  plan.data_parallel = ranks / (tensor_parallel * pipeline_parallel);
  plan.micro_batch = micro_batch;
  plan.micro_batches = micro_batches;
  plan.seq = seq;
  WholeModel whole;
  whole.layout = MakeLayout(model);
  whole.allocated = static_cast<double>(whole.layout.back().offset + whole.layout.back().count);
  whole.memory = EstimateMemory(model, micro_batch, seq, bf16, tensor_parallel);
  whole.per_token = ActivationBytesPerToken(model, seq, bf16, tensor_parallel, expert_parallel);
  const double tokens = static_cast<double>(micro_batch) * seq;
  const double edge_bytes = tokens * model.d_model * sizeof(float);
  for (int s = 0; s < pipeline_parallel; ++s) {
    const int slots = pipeline_parallel > 1 ? OneFOneBSlots(pipeline_parallel, s, micro_batches) : 1;
    StagePlan stage =
        PlanStage(model, whole, MakePipelineStage(model, pipeline_parallel, s, slots), expert_parallel, tokens);
    stage.pipeline_send_bytes = micro_batches * edge_bytes * ((stage.stage.last() ? 0 : 1) + (stage.stage.first() ? 0 : 1));
    plan.stages.push_back(stage);
  }
  return plan;
}

}  // namespace tb
