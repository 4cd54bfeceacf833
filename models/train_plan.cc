#include "train_plan.h"

#include <string>

#include "error.h"

namespace tb {
namespace {

// One stage's parameters and memory: the tensors StageLayout leaves it, at EstimateMemory's bytes per parameter, and
// its in-flight micro-batches' activations (its blocks', and the head's on the last stage).
StagePlan PlanStage(const ModelConfig& model, const PipelineStage& stage, int micro_batch, int seq, bool bf16,
                    int tensor_parallel) {
  StagePlan plan;
  plan.stage = stage;
  for (const TensorSlot& slot : StageLayout(MakeLayout(model), stage)) plan.parameters += static_cast<double>(slot.count);
  const MemoryEstimate whole = EstimateMemory(model, micro_batch, seq, bf16, tensor_parallel);
  const double allocated = static_cast<double>(MakeLayout(model).back().offset + MakeLayout(model).back().count);
  const double share = plan.parameters / allocated;
  plan.memory.weights_bytes = whole.weights_bytes * share;
  plan.memory.gradients_bytes = whole.gradients_bytes * share;
  plan.memory.optimizer_bytes = whole.optimizer_bytes * share;
  const ActivationBytes per_token = ActivationBytesPerToken(model, seq, bf16, tensor_parallel);
  const double layers = stage.end_layer - stage.first_layer;
  const double tokens = static_cast<double>(micro_batch) * seq;
  plan.memory.activations_bytes =
      stage.slots * tokens * (layers * per_token.layer + (stage.last() ? per_token.head : 0.0));
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
  const double edge_bytes = static_cast<double>(micro_batch) * seq * model.d_model * sizeof(float);
  for (int s = 0; s < pipeline_parallel; ++s) {
    const int slots = pipeline_parallel > 1 ? OneFOneBSlots(pipeline_parallel, s, micro_batches) : 1;
    StagePlan stage = PlanStage(model, MakePipelineStage(model, pipeline_parallel, s, slots), micro_batch, seq, bf16,
                                tensor_parallel);
    stage.pipeline_send_bytes = micro_batches * edge_bytes * ((stage.stage.last() ? 0 : 1) + (stage.stage.first() ? 0 : 1));
    plan.stages.push_back(stage);
  }
  return plan;
}

}  // namespace tb
