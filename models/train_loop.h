// The training loop of `trainbench train`: one data-parallel replica per rank, each step read top to bottom
// as README.md ("One training step") lays it out, every phase timed on this rank.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "communicator.h"
#include "definitions.h"
#include "gradient_buckets.h"
#include "transformer.h"
#include "watchdog.h"

namespace tb {

// One step on one rank. Times in seconds.
struct StepRecord {
  int step = 0;                 // 0-based, warm-up steps included
  bool warmup = false;          // run, but kept out of the statistics
  double data_wait_s = 0;       // waiting for the next batch
  double h2d_s = 0;             // unpacking it into int32 ids in the model's memory (the device; host on the CPU)
  double forward_s = 0;
  double backward_s = 0;        // includes starting bucket all-reduces as gradients become final
  double comm_total_s = 0;      // sum of the bucket all-reduce durations (start to completion)
  double comm_exposed_s = 0;    // waiting for the buckets after backward: what backward did not hide
  double comm_intra_s = 0;      // comm_total_s inside nodes and across them (a hierarchical all-reduce's steps);
  double comm_inter_s = 0;      // NaN where the all-reduce cannot tell (flat algorithms, NCCL)
  double comm_gather_exposed_s = 0;  // the part of comm_exposed_s spent waiting for parameter all-gathers (zero1's,
                                     // fsdp's)
  double comm_activation_s = 0;      // the part of comm_exposed_s (and comm_total_s) in tensor parallel's blocking
                                     // activation all-reduces inside forward and backward; the rest is gradient sync
  double comm_pipeline_s = 0;        // the part of comm_exposed_s (and comm_total_s) in pipeline parallel's exchanges
                                     // with the neighbouring stages: waiting for them (the bubble) and the transfers
  double comm_embedding_s = 0;       // the part of comm_exposed_s (and comm_total_s) in the tied embedding's gradient
                                     // all-reduce between a pipeline's first and last stage
  double comm_alltoall_s = 0;        // the part of comm_exposed_s (and comm_total_s) in expert parallel's dispatch and
                                     // combine all-to-alls inside forward and backward (blocking)
  double alltoall_dispatch_s = 0;    // comm_alltoall_s's dispatches (tokens, and output gradients, to the experts)
  double alltoall_combine_s = 0;     // and combines (expert outputs, and input gradients, back)
  double comm_experts_s = 0;         // the part of comm_exposed_s (and comm_total_s) in the experts' gradient
                                     // all-reduce over the ranks holding the same experts (after backward)
  double optimizer_s = 0;
  double checkpoint_stall_s = 0;  // the loop blocked on checkpoints (snapshot, or the whole write when sync)
  double step_s = 0;            // wall time of the whole step
  // Bytes of the whole buffers this rank's collectives covered in the step (NCCL's "size"): all-reduced (dp's
  // gradients), reduce-scattered (zero1's and fsdp's gradients) and all-gathered (their parameters).
  uint64_t allreduce_bytes = 0;
  uint64_t reduce_scatter_bytes = 0;
  uint64_t all_gather_bytes = 0;
  uint64_t activation_allreduce_bytes = 0;  // tensor parallel's activation all-reduces, inside its group
  uint64_t pipeline_send_bytes = 0;  // sent to the neighbouring stages: activations forward, their gradients backward
  uint64_t embedding_allreduce_bytes = 0;   // the tied embedding's gradient (wte), all-reduced by first and last stage
  uint64_t alltoall_dispatch_bytes = 0;  // expert parallel: token rows (and their output gradients) sent to other
  uint64_t alltoall_combine_bytes = 0;   // ranks' experts, and expert outputs (and input gradients) sent back
  uint64_t alltoall_inter_node_bytes = 0;  // of both, sent to ranks on other nodes
  uint64_t experts_allreduce_bytes = 0;  // the experts' gradients all-reduced over the ranks holding the same experts
  // Mixture of experts (0 / NaN for a dense model), over the step's micro-batches and MoE blocks:
  int64_t moe_choices = 0;        // tokens x top-k routed
  int64_t moe_dropped = 0;        // of them past their expert's capacity
  double moe_max_over_mean = std::nan("");  // the worst block's busiest expert over its mean (1: balanced), over the
                                            // step's tokens of every rank of the loop's communicator
  double moe_aux_loss = std::nan("");       // the load-balancing loss (mean over micro-batches, summed over blocks)
  int64_t tokens = 0;           // tokens this rank processed: its share of its tensor parallel group's and of its
                                // pipeline's (all of them without either)
  double loss = 0;              // this rank's mean cross-entropy
  // From the data loader (zero / -1 with synthetic tokens):
  uint64_t data_bytes = 0;      // bytes read for this step's batch (all its micro-batches)
  double data_read_MBps = 0;    // their read throughput: bytes / (first read's start to last read's end), 1e6 B/s
  int loader_queue_depth = -1;  // batches ready when the step asked for its batch
  bool checkpoint_writing = false;  // an asynchronous checkpoint writer was busy when the step began
  OpSeconds op_s{};             // --op-times: seconds per kind in forward and backward (OpSlot), all micro-batches
  double comm_model_waits_s = 0;  // the part of comm_exposed_s waited inside forward and backward (fsdp's gathers,
                                  // tensor parallel's all-reduces): inside the op_s intervals too
};

// One step's tokens, in host memory: micro_batch sequences of seq positions (valid until the next call).
struct StepBatch {
  const TokenBatch* tokens = nullptr;
  uint64_t bytes_read = 0;
  double read_MBps = 0;
  int queue_depth = -1;
};

// What the loop needs from outside it, in one interface, each with a default that does nothing: its batches (a
// loader; without one, synthetic tokens), checkpoints, and the run's control (a watchdog, a stop asked for, test
// faults, progress).
class TrainLoopHost {
 public:
  virtual ~TrainLoopHost() = default;
  // The next micro-batch of global step `step` (asked grad_accum times per step), or nullopt: synthetic tokens. The
  // loop times the call as data_wait.
  virtual std::optional<StepBatch> NextBatch(int step) {
    (void)step;
    return std::nullopt;
  }
  // Right before each optimizer step changes the weights and AdamW's state (an asynchronous checkpoint's writer may
  // read them until then): timed as checkpoint_stall and taken out of the optimizer phase.
  virtual void BeforeUpdate() {}
  // After step `step`'s optimizer: a checkpoint, if one is due (timed as checkpoint_stall).
  virtual void AfterUpdate(int step) { (void)step; }
  // Whether a background checkpoint writer is busy (as a step begins).
  virtual bool CheckpointWriting() { return false; }
  // Guards each step (null: none).
  virtual Watchdog* watchdog() { return nullptr; }
  // Asked between steps on every rank; must agree.
  virtual bool StopRequested() { return false; }
  // At the start of the first step, under its watchdog guard (where the CLI injects test faults).
  virtual void AtFirstStep() {}
  // In each step after the optimizer: its time counts in the step only ("other": where the CLI injects a slow rank).
  virtual void InEachStep() {}
  // After each step, on every rank.
  virtual void OnStep(const StepRecord& record) { (void)record; }
};

struct TrainLoopOptions {
  int micro_batch = 4;          // sequences per rank per forward and backward
  int grad_accum = 1;           // micro-batches per optimizer step (gradient accumulation): a step takes
                                // grad_accum x micro_batch sequences per rank
  int seq = 1024;               // tokens per sequence
  int steps = 20;               // measured steps
  int warmup_steps = 2;         // run first, excluded from the statistics
  double bucket_mb = kDefaultBucketMiB;  // gradient bucket size in MiB
  bool overlap = true;          // all-reduce buckets during backward; false: after backward
  // kZero1 (the model made with ShardOf(its elements, comm.size(), comm.rank())): after backward the gradients are
  // reduce-scattered, AdamW updates this rank's shard and the shard is all-gathered into the parameters, all
  // blocking (nothing overlaps compute; `overlap` does not apply). kFsdp (the model made with
  // MakeFsdpLayout(its layout, comm.size(), comm.rank())): FsdpGatherer's gathers and reduce-scatters during forward
  // and backward, overlapped with compute unless `overlap` is false, AdamW on the shards.
  ParallelMode parallel = ParallelMode::kDp;
  // Pipeline parallel (the model holds one PipelineStage of stages > 1): the ranks of this rank's pipeline, stage s at
  // rank s; each optimizer step runs grad_accum micro-batches in Megatron's 1F1B schedule, activations and their
  // gradients exchanged with the neighbouring stages. Null: no pipeline.
  Communicator* pipeline = nullptr;
  // Expert parallel (the model placed with ExpertPlacement of parallel > 1, over ranks of `comm`): the ranks of `comm`
  // that hold the same experts as this one. The experts' gradients stay out of the buckets: after backward they are
  // summed over these ranks and divided by comm's size (each rank's experts already summed the tokens its expert
  // group sent them), which is the data parallel mean. Null: no expert parallel.
  Communicator* expert_data = nullptr;
  bool op_times = false;        // time the model's work by kind (OpTimes; models without tensor parallel)
  uint64_t* working_bytes = nullptr;  // if set, receives the bytes of fsdp's working buffers (0 otherwise)
  AdamWConfig adamw;
  uint64_t data_seed = 1;       // synthetic tokens: a function of (data_seed, rank, step)
  int first_step = 0;           // global index of the first step (a resume continues at its checkpoint's step);
                                // steps run while first_step + run < warmup_steps + steps
  TrainLoopHost* host = nullptr;  // the outside: data, checkpoints, control (null: TrainLoopHost's defaults)
};

// The gradient tensors of a layout, as the bucketed all-reduce takes them.
std::vector<GradientTensor> GradientTensors(const std::vector<TensorSlot>& layout);
// The tensors data parallel's buckets all-reduce: all of them, or under expert parallel all but the experts' (marked
// not reduced: SyncExperts sums them over their own group).
std::vector<GradientTensor> DataParallelGradientTensors(const std::vector<TensorSlot>& layout, bool expert_parallel);

// Synthetic tokens for one rank and step: batch sequences of seq+1 uniform ids in [0, vocab), deterministic.
// inputs = tokens [0, seq), targets = tokens [1, seq+1) of each sequence.
void SyntheticBatch(uint64_t seed, int rank, int step, int batch, int seq, int vocab, std::vector<int32_t>& inputs,
                    std::vector<int32_t>& targets);

// Runs global steps first_step .. warmup_steps + steps - 1 of `model` on `comm` (data parallel: gradients averaged
// over the ranks of comm; a tensor parallel model's group is its own, inside it: comm is then the ranks holding the
// same slice, one per group, and the batch is the group's). Returns this rank's records; stops early (fewer records) when stop_requested says so.
std::vector<StepRecord> RunTrainingSteps(Communicator& comm, Transformer& model, const TrainLoopOptions& options);

}  // namespace tb
