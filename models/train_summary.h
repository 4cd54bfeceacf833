// From per-rank step records to the figures `trainbench train` reports: throughput, MFU, scaling efficiency,
// overlap, effective bus bandwidth of the gradient buckets, and the stall budget per rank with percentiles.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "report.h"
#include "train_loop.h"
#include "train_plan.h"

namespace tb {

// Every step of one rank of one scaling point.
struct RankSteps {
  int rank = 0;
  std::string host;
  std::string device;  // "cpu" or the GPU's name and index
  std::vector<StepRecord> steps;
  double activations_bytes = std::nan("");  // what its model allocated for activations (ModelStateBytes)
};

// A step's data_wait as every figure counts it: waiting for the batch plus copying it in (data_wait_s + h2d_s).
// The one definition behind the stall budget's data_wait, io/<point>/data_wait_share and the storage sweep.
double DataWaitOf(const StepRecord& r);

// Sums over measured steps (warm-up steps are skipped), and the shares of step time they give.
struct StepTotals {
  double step_s = 0;
  double data_wait_s = 0;         // DataWaitOf
  double checkpoint_stall_s = 0;

  void Add(const StepRecord& r);
  StepTotals& operator+=(const StepTotals& other);
  // data_wait share = sum of DataWaitOf / sum of step_s; NaN without step time.
  double data_wait_share() const;
  double checkpoint_stall_share() const;
};

// The totals of every rank's measured steps.
StepTotals TotalsOf(const std::vector<RankSteps>& ranks);

struct Percentiles {
  double p50 = 0, p95 = 0, p99 = 0;
};

// Shares of step_time over the measured steps of one rank (README.md, "One training step"): compute =
// forward+backward+optimizer, comm_exposed, data_wait (+h2d), checkpoint_stall, other = the rest.
struct StallBudget {
  int rank = 0;
  std::string host;
  std::string device;
  double median_step_s = 0;
  Percentiles compute, comm_exposed, data_wait, checkpoint_stall, other;
  // comm_exposed split by kind: waiting for gradients (all-reduce, reduce-scatter, the tied embedding's all-reduce),
  // for parameters (all-gather), for tensor parallel's activation all-reduces, for the neighbouring pipeline stages and
  // for expert parallel's all-to-alls.
  Percentiles comm_gradient_sync, comm_param_gather, comm_activation, comm_pipeline, comm_alltoall;
};

// Bytes one rank sends per step in ring algorithms, by kind of collective.
struct CollectiveTraffic {
  double gradient_sync = 0;     // the gradients' all-reduce (2(N-1)/N of the buffer) or reduce-scatter ((N-1)/N)
  double parameter_gather = 0;  // the parameters' all-gathers ((N-1)/N of each whole buffer)
  double activation = 0;        // tensor parallel's activation all-reduces in a group of T (2(T-1)/T)
};
// From the buffers a step's collectives covered (StepRecord's allreduce/reduce_scatter/all_gather bytes).
CollectiveTraffic RingTraffic(double allreduce_bytes, double reduce_scatter_bytes, double all_gather_bytes, int ranks);
// ZeRO's volumes for `gradient_bytes` of gradients (Ψ elements of as many bytes as the parameters gathered): dp 2Ψ
// of gradient sync, zero1 Ψ + Ψ gathered, fsdp Ψ + 2Ψ gathered (1.5 times dp's), each times (N-1)/N.
CollectiveTraffic TheoryTraffic(ParallelMode mode, double gradient_bytes, int ranks);
// Expert parallel's all-to-alls: bytes one rank sends to other ranks per step of `tokens` when routing is balanced
// and nothing is dropped: AllToAllBytesPerToken (dispatch and combine, forward and backward, x MoE blocks x top-k x
// d_model x element bytes) x tokens x (EP-1)/EP; 0 for EP = 1.
double TheoryAllToAllBytes(const ModelConfig& model, double tokens, double element_bytes, int expert_parallel);
// Megatron's activation all-reduces under tensor parallel T: one of B·S·d elements after each row-parallel layer in
// forward and one per column-parallel layer in backward, 4·L·B·S·d elements per step of `element_bytes`, each sending
// 2(T-1)/T of itself in a ring.
double TheoryActivationTraffic(int layers, int micro_batch, int seq, int d_model, double element_bytes,
                               int tensor_parallel);

// One pipeline stage of a point: its plan and its ranks' means per measured step.
struct StageSummary {
  StagePlan plan;
  double forward_s = 0, backward_s = 0, comm_pipeline_s = 0, pipeline_send_bytes = 0;
  double activations_bytes = 0;  // the most any of its ranks' models allocated (NaN where they do not say)
  std::string next_stage_link;  // "inter-node" when a rank's peer in the next stage is on another host, else
                                // "intra-node"; "" for the last stage
  double bubble_measured() const;  // comm_pipeline_s / (forward_s + backward_s + comm_pipeline_s)
};
// Per stage of `plan`: `ranks` are the point's, in its rank order (plan.Place of their index).
std::vector<StageSummary> SummarizeStages(const TrainPlan& plan, const std::vector<RankSteps>& ranks);

struct ScalingPoint {
  int k = 0;                        // ranks
  int nodes = 1;                    // nodes the k ranks are on, and ranks on each (the most on any)
  int ranks_per_node = 1;
  std::string allreduce = "flat";   // the gradient all-reduce: flat (the backend's own), hierarchical, or none (zero1)
  std::string parallel = "dp";      // dp, zero1 (gradients reduce-scattered, parameters all-gathered), or fsdp
  int micro_batch = 0;              // sequences per rank per step
  int64_t tokens_per_step = 0;      // over all k ranks
  int measured_steps = 0;
  double step_s = 0;                // mean over measured steps of the slowest rank's step time
  double step_s_p95 = 0;            // p95 of the same
  double tokens_per_s = 0;          // tokens_per_step / step_s
  double tokens_per_s_per_rank = 0;
  double model_flops_per_token = 0;
  double mfu_peak = 0;              // model FLOP/s per rank / peak dense FLOP/s; NaN without a known peak
  double mfu_measured = 0;          // model FLOP/s per rank / GEMM rate measured at start-up
  double efficiency = 0;            // weak or strong scaling efficiency against the smallest k; NaN when alone
  double comm_total_s = 0;          // mean per step over ranks and steps
  double comm_exposed_s = 0;
  double comm_intra_s = 0;          // comm_total_s inside nodes and across them (mean per step over ranks and
  double comm_inter_s = 0;          // steps); NaN where the all-reduce cannot tell (flat, NCCL)
  double comm_gather_exposed_s = 0; // the part of comm_exposed_s waiting for parameter all-gathers (mean)
  double comm_activation_s = 0;     // the part in tensor parallel's activation all-reduces (mean)
  int tensor_parallel = 1;          // ranks per tensor parallel group
  CollectiveTraffic traffic;        // per rank per step, from the collectives issued (mean over ranks and steps)
  CollectiveTraffic traffic_theory; // ZeRO's volumes for the mode (TheoryTraffic)
  double working_bytes = 0;         // fsdp's working buffers (gathered units, gradient buffers), rank 0's
  double overlap = 0;               // 1 - comm_exposed/comm_total; NaN when nothing was communicated
  double gradient_bytes = 0;        // all-reduced per rank per step
  ModelStateBytes state;            // allocated per rank (rank 0's) for weights, gradients, optimizer state
  ModelStateBytes state_theory;     // ZeRO's figures for the mode (TheoryStateBytes)
  int64_t gradient_buckets = 0;     // all-reduces per rank per step (PlanBuckets over the layout); 0 = not known
  double effective_busbw_GBps = 0;  // (traffic's two kinds) / comm_total, GB = 1e9 bytes (dp: gradient_bytes /
                                    // comm_total x 2(k-1)/k); NaN for k = 1
  double loss_first = 0;            // mean over ranks, first and last measured step
  double loss_last = 0;
  int pipeline_parallel = 1;        // pipeline stages P
  int micro_batches = 1;            // per optimizer step (M)
  double comm_pipeline_s = 0;       // the part of comm_exposed_s in the exchanges between stages (mean)
  double bubble_measured = 0;       // comm_pipeline_s / (forward + backward + comm_pipeline_s); NaN without stages
  double bubble_theory = 0;         // 1F1B's (P-1)/(M+P-1)
  double traffic_pipeline = 0;      // bytes a rank sends to its neighbouring stages per step (mean)
  double traffic_pipeline_theory = 0;
  std::vector<StageSummary> stages; // pipeline parallel: per stage (empty without)
  int expert_parallel = 1;          // EP
  double comm_alltoall_s = 0;       // the part of comm_exposed_s in the dispatch and combine all-to-alls (mean)
  double alltoall_bytes = 0;        // dispatch + combine bytes sent to other ranks per step (mean)
  double alltoall_inter_node_bytes = 0;  // of them, to ranks on other nodes (mean)
  double alltoall_bytes_theory = 0; // balanced routing, nothing dropped (TheoryAllToAllBytes)
  double alltoall_GBps = 0;         // alltoall_bytes / comm_alltoall_s, 1e9 B; NaN without all-to-alls
  double alltoall_dispatch_GBps = 0, alltoall_combine_GBps = 0;  // each kind's bytes over its time
  double moe_max_over_mean = 0;     // load balance, mean over ranks and steps; NaN for a dense model
  double moe_dropped_share = 0;     // dropped / routed choices; NaN for a dense model
  double moe_aux_loss = 0;          // mean over ranks and steps; NaN for a dense model
  std::vector<StallBudget> budgets;
  int worst_rank = 0;               // the rank with the largest median step time
};

// Nearest-rank percentile of `values` (copied and sorted), q in [0, 100].
double Percentile(std::vector<double> values, double q);

// Summarises one scaling point. peak_flops <= 0 means unknown. Under tensor parallel (groups of `tensor_parallel` ranks) the gradients are
// synchronised over the k / tensor_parallel ranks that hold the same slice, and the activations inside each group.
// Pipeline parallel: the gradients over k / (tensor_parallel x pipeline_parallel). Expert parallel: the experts'
// gradients over k / expert_parallel.
ScalingPoint SummarizePoint(int k, int micro_batch, const std::vector<RankSteps>& ranks, double model_flops_per_token,
                            double peak_flops, double measured_gemm_flops, double gradient_bytes,
                            int tensor_parallel = 1, int pipeline_parallel = 1, int expert_parallel = 1);

// Fills `efficiency` of every point against the one with the fewest ranks: weak (per-rank batch fixed)
// E(k) = throughput(k) / (k/k0 · throughput(k0)); strong (global batch fixed) E(k) = T(k0)·k0 / (k · T(k)).
void ComputeEfficiency(std::vector<ScalingPoint>& points, bool weak);

// Console lines.
std::string StepLine(const StepRecord& mean_record, double loss, int k, double tokens_per_s, double mfu);
std::vector<std::string> PointLines(const ScalingPoint& point, const std::string& scaling_mode);

// "k4": the report group of the point with 4 ranks.


// Writes train/k<N>: the `steps` table (a row per rank per step), the `stall_budget` table (a row per rank) and
// the point's summary attributes.
// `name` overrides the group's name (a storage sweep runs one k at several rates: k4_throttle200).
void AddPointToReport(Group& train, const ScalingPoint& point, const std::vector<RankSteps>& ranks,
                      const std::string& name = "");

// The energy attributes of a point's group (train/<point>): energy_J of its GPUs over its measured steps (NaN when
// NVML gave none), per measured step and per token (energy_J / (measured_steps x tokens_per_step)).
void AddPointEnergyToReport(Group& point_group, double energy_J, const ScalingPoint& point);

}  // namespace tb
