// A training point's plan, computed once from the flags, the model and the point's ranks, and read by everything
// after it: the header and the memory check, the communicators and the model each rank makes, the loop, and the
// report's theory. Ranks are ordered as Megatron orders them: tensor parallel innermost (T consecutive ranks, inside
// a node), then data parallel, pipeline stages outermost (stage s on ranks [s·T·D, (s+1)·T·D)), so that a pipeline's
// stages sit on different nodes and only their boundary activations cross the network.
#pragma once

#include <cstdint>
#include <vector>

#include "model_config.h"
#include "transformer.h"

namespace tb {

// Where one rank of a point sits: its index in its tensor parallel group, its data parallel replica (the same for
// every stage of one pipeline) and its pipeline stage.
struct RankPlace {
  int tensor = 0;
  int data = 0;
  int stage = 0;
};

// What one pipeline stage holds and sends, per rank of it, per optimizer step.
struct StagePlan {
  PipelineStage stage;            // its layers and the micro-batches 1F1B keeps in flight there (slots)
  double parameters = 0;          // elements it allocates (the padded wte included; before tensor parallel divides)
  MemoryEstimate memory;          // EstimateMemory's parts for its parameters, and its slots' activations
  double pipeline_send_bytes = 0; // to its neighbours: each micro-batch's output (not the last stage) and its input
                                  // gradient (not the first): micro_batch·seq·d_model fp32 each
};

struct TrainPlan {
  int ranks = 1;
  int tensor_parallel = 1;    // T
  int pipeline_parallel = 1;  // P
  int data_parallel = 1;      // D = ranks / (T·P)
  int expert_parallel = 1;    // EP: consecutive replicas that share each MoE block's experts (E/EP each); divides D
  int micro_batch = 1;        // sequences per forward and backward
  int micro_batches = 1;      // per optimizer step (M: gradient accumulation, the pipeline's micro-batches)
  int seq = 0;
  std::vector<StagePlan> stages;  // P of them

  RankPlace Place(int rank) const;
  // Split colours of the communicators a rank needs (ranks with equal colour share one): its tensor parallel group,
  // the ranks that hold the same parameters (data parallel: same stage and tensor rank), and its pipeline.
  int TensorGroup(int rank) const;
  int DataGroup(int rank) const;
  int PipelineGroup(int rank) const;
  // Expert parallel: the EP replicas whose experts together make each MoE block's (consecutive data parallel ranks,
  // so inside a node where EP fits one), this rank's place among them, and the ranks holding the same experts.
  int ExpertGroup(int rank) const;
  int ExpertRank(int rank) const;
  int ExpertDataGroup(int rank) const;
  // A checkpoint's parts: one per distinct state a rank holds — (stage, tensor rank, expert rank) — each sliced over
  // the replicas holding it; with EP = 1 the data group.
  int CheckpointPart(int rank) const { return DataGroup(rank) * expert_parallel + ExpertRank(rank); }
  int checkpoint_parts() const { return tensor_parallel * pipeline_parallel * expert_parallel; }
  // 1F1B's bubble: the share of the pipelined part of a step a stage idles, (P-1)/(M+P-1) (Narayanan et al. 2021).
  double bubble_theory() const;
  // The stage whose ranks need the most memory (the first on ties).
  const StagePlan& largest_stage() const;
};

// Throws InputError (one line) unless T·P divides the ranks, P divides the layers and M >= P where P > 1 (1F1B keeps
// every stage busy only with at least as many micro-batches as stages), and unless EP (> 1) divides the data parallel
// replicas and the model's experts (an MoE model), with T = P = 1 (expert parallel beside them is not built).
TrainPlan PlanTrainPoint(const ModelConfig& model, int ranks, int tensor_parallel, int pipeline_parallel,
                         int micro_batch, int micro_batches, int seq, bool bf16, int expert_parallel = 1);

}  // namespace tb
