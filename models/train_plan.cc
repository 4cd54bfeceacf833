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

// One stage's parameters and memory: the tensors StageLayout leaves it, at EstimateMemory's bytes per parameter, and
// its in-flight micro-batches' activations (its blocks', and the head's on the last stage).
StagePlan PlanStage(const WholeModel& whole, const PipelineStage& stage, double tokens) {
  StagePlan plan;
  plan.stage = stage;
  for (const TensorSlot& slot : StageLayout(whole.layout, stage)) plan.parameters += static_cast<double>(slot.count);
  const double share = plan.parameters / whole.allocated;
  plan.memory.weights_bytes = whole.memory.weights_bytes * share;
  plan.memory.gradients_bytes = whole.memory.gradients_bytes * share;
  plan.memory.optimizer_bytes = whole.memory.optimizer_bytes * share;
  const double layers = stage.end_layer - stage.first_layer;
  plan.memory.activations_bytes =
      stage.slots * tokens * (layers * whole.per_token.layer + (stage.last() ? whole.per_token.head : 0.0));
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
                         int micro_batch, int micro_batches, int seq, bool bf16) {
  const std::string p = "--pipeline-parallel " + std::to_string(pipeline_parallel);
  if (ranks % (tensor_parallel * pipeline_parallel) != 0) {
    throw InputError(p + (tensor_parallel > 1 ? " x --tensor-parallel " + std::to_string(tensor_parallel) : "") +
                     " does not divide the " + std::to_string(ranks) + " ranks of a point");
  }
  if (pipeline_parallel > 1 && micro_batches < pipeline_parallel) {
    throw InputError(p + " needs --micro-batches of at least " + std::to_string(pipeline_parallel) + " (1F1B keeps " +
                     "every stage busy only with as many micro-batches as stages), not " + std::to_string(micro_batches));
  }
  TrainPlan plan;
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
  whole.per_token = ActivationBytesPerToken(model, seq, bf16, tensor_parallel);
  const double tokens = static_cast<double>(micro_batch) * seq;
  const double edge_bytes = tokens * model.d_model * sizeof(float);
  for (int s = 0; s < pipeline_parallel; ++s) {
    const int slots = pipeline_parallel > 1 ? OneFOneBSlots(pipeline_parallel, s, micro_batches) : 1;
    StagePlan stage = PlanStage(whole, MakePipelineStage(model, pipeline_parallel, s, slots), tokens);
    stage.pipeline_send_bytes = micro_batches * edge_bytes * ((stage.stage.last() ? 0 : 1) + (stage.stage.first() ? 0 : 1));
    plan.stages.push_back(stage);
  }
  return plan;
}

}  // namespace tb
