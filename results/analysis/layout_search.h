// The best layout of a measured run on an offering's fabric (results/README.md, "Projection onto a fabric"): every
// parallel mode the project trains (dp, zero1, fsdp, each with tensor parallel groups inside a node, and pipeline
// stages of whole nodes with dp or zero1 across the pipelines) that fits the GPU's memory, its step time from the
// run's own compute, the mode's collectives (and 1F1B's stage exchanges and bubble) at the fabric's link rates and the
// communication the run's backward hid; the fastest wins (for one GPU count on one offering, fastest is cheapest: the same nodes at
// the same price). Pure functions of their inputs: `cost` reads the run and the price file, unit tests build them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fabric.h"
#include "memory_fit.h"
#include "projection.h"

namespace tb {

// The model split into P pipeline stages (train's PlanTrainPoint: L/P blocks each, the embeddings with the first, the
// final LayerNorm and the tied LM head with the last) at one tensor-parallel size T, from models/ as the caller
// computes it.
struct PipelineShape {
  int pp = 2;
  std::string invalid;  // why the model cannot be split P ways (train's own words), "" when it can
  std::map<std::string, std::string> modes_not_built;  // dp or zero1 across the pipelines the GPUs cannot train yet
  // Per stage and rank before the mode shards it (as TensorParallelShape::dp_memory): its parameters' states and the
  // activations of the micro-batches 1F1B keeps in flight there (P - s, with M >= P), at the run's micro-batch.
  std::vector<MemoryBreakdown> stage_memory;
  std::vector<double> parameter_share;  // each stage's parameters / the whole model's (the tied wte counted twice)
  double compute_share = 0;   // the heaviest stage's share of the model FLOPs per token (the last: the LM head's)
  double edge_bytes = 0;      // one boundary exchange per rank: a micro-batch's residual stream, fp32
  double embedding_bytes = 0; // the tied embedding's gradient, all-reduced between the first and last stage
};

// A mixture-of-experts model with its experts over EP ranks (train's --expert-parallel: E/EP of each MoE block's
// experts per rank, groups of EP consecutive ranks), from models/.
struct ExpertShape {
  int ep = 1;
  std::string invalid;        // why the model cannot take this EP (train's words), "" when it can
  MemoryBreakdown dp_memory;  // per rank before the mode shards it (the experts' states over EP), the run's micro-batch
};

// What a projection needs of a model's MoE blocks (all 0 for a dense model), from models/.
struct MoeFacts {
  double expert_share = 0;  // of the whole model's parameters (gradients, AdamW state), the experts'
  // The four all-to-alls of every MoE block (dispatch and combine, forward and backward): their bytes per token when
  // every one of a token's K rows leaves its rank, at the GPUs' element size (bf16), and how many per micro-batch.
  double alltoall_bytes_per_token = 0;
  double alltoall_ops_per_micro_batch = 0;
};

// The model's figures at one tensor-parallel size T, from models/ (the caller computes them: this layer does not
// link the models).
struct TensorParallelShape {
  int tp = 1;
  std::string invalid;          // why the model cannot be split T ways ("" when it can)
  MemoryBreakdown dp_memory;    // per rank before sharding, activations at the run's micro-batch, split T ways
  double activation_bytes = 0;  // all-reduced per step in one group at the run's micro-batch (0 for T = 1)
  double activation_ops = 0;    // all-reduces per step
  std::map<std::string, std::string> modes_not_built;  // a mode across the groups the GPUs cannot train yet: why
  std::vector<PipelineShape> pipelines;  // P > 1 stages at this T (none: no pipeline candidates)
  std::vector<ExpertShape> experts;      // an MoE model: each EP that divides its experts, EP = 1 first (dense: none)
};

// What the projection takes from a measured run: the reference point (the priced one) without its communication.
struct ProjectionBasis {
  std::string run;               // the report, for notes
  std::string mode = "dp";       // the mode it ran
  int k = 1, tp = 1;             // ranks and tensor-parallel size of the reference point
  bool weak = true;              // weak scaling: tokens per replica stay; strong: the global batch stays
  double step_s = 0;             // without checkpoint stalls (priced at the repeats' median)
  double tokens_per_step = 0;    // over all k ranks
  double exposed_s = 0;          // gradient communication backward did not hide
  double activation_s = 0;       // tensor parallel's blocking activation all-reduces per step (T > 1)
  int pp = 1;                    // pipeline stages of the reference point
  double pipeline_s = 0;         // its exchanges with the neighbouring stages per step (bubble and transfers)
  double embedding_s = 0;        // its tied embedding's all-reduce between first and last stage per step
  double micro_batch_tokens = 0; // sequences per micro-batch x seq (0: not known, no pipeline candidates)
  int ep = 1;                    // expert parallel of the reference point
  double alltoall_s = 0;         // its dispatch and combine all-to-alls per step
  MoeFacts moe;                  // the model's MoE blocks (a dense model: zeros)
  // The share of the whole model's AdamW state the reference's ranks hold on average: 1, or the mean over its stages
  // of a stage's parameters / the model's.
  double optimizer_share = 1;
  double optimizer_s = 0;        // AdamW per step, mean over the measured steps of every rank (0: not recorded)
  double gradient_bytes = 0;     // per rank per step at the reference (the whole model's / tp)
  double bucket_bytes = 25.0 * 1024 * 1024;  // dp's gradient buckets close at this size
  int fsdp_units = 0;            // fsdp's units (layers + 2)
  double overlap = 0;            // 1 - exposed / total of the reference's gradient communication (shown)
  // Seconds of gradient communication per step that backward hid (total - exposed) at that point: what a projection
  // hides, at most (the share hidden is no constant: on a slower link backward ends long before the collectives).
  double hidden_s = 0;
  bool overlap_measured = false;
  std::string overlap_source;    // "measured at k=4 (dp)"
  double parameters = 0;
  double gathered_parameters = 0;  // fsdp: held at once
  std::optional<MemoryCalibration> calibration;
  std::vector<TensorParallelShape> shapes;  // T = 1 first; the sizes the model allows are those listed

  // Per rank per step: what is neither gradient communication, activation all-reduce, the pipeline's exchanges nor
  // the optimizer (forward, backward, data wait, the rest), as measured; with stages, a stage's: the whole model's on
  // TokensPerReplica() tokens, as without.
  double ComputeS() const {
    return step_s - exposed_s - activation_s - optimizer_s - pipeline_s - embedding_s - alltoall_s;
  }
  // The share of the whole model's parameters a rank holds with the experts over `ep` ranks (1 for a dense model).
  double HeldShare(int ep) const { return 1.0 - moe.expert_share + moe.expert_share / ep; }
  double TokensPerReplica() const { return tokens_per_step / (k / tp); }
};

// One layout considered: nodes x GPUs per node of the offering, a mode across the replicas, T inside each node, and
// P pipeline stages over the nodes.
struct LayoutCandidate {
  Layout layout;
  std::string mode = "dp";
  int tp = 1;
  int pp = 1;
  int ep = 1;                // expert parallel: EP consecutive replicas share each MoE block's experts
  int replicas() const { return layout.gpus() / (tp * pp); }
  std::string Name() const;  // "dp", "tp2+zero1", "tp8" (one replica), "pp4+dp", "pp4+tp8+zero1", "pp4+tp8", "ep8+dp"

  bool considered = false;   // false: not modelled, `why_not` says why (the model cannot split T ways, ...)
  double compute_s = 0;      // per step: the run's compute at this shape
  double optimizer_s = 0;
  double activation_s = 0;   // tensor parallel's all-reduces at the fabric's intra-node rate (blocking)
  double comm_s = 0;         // the mode's gradient (and fsdp's gather) collectives, modelled
  double exposed_s = 0;      // comm_s less min(overlap x comm_s, the run's hidden seconds scaled, compute); zero1: all
  // Pipeline stages (pp > 1): 1F1B over micro_batches on the heaviest stage (compute_s is its compute).
  int micro_batches = 0;
  double pipeline_s = 0;     // its boundary exchanges (2 per micro-batch)
  double bubble_s = 0;       // (P-1)/(M+P-1) of the pipelined part (compute + exchanges + bubble)
  double embedding_s = 0;    // the tied embedding's all-reduce between first and last stage
  bool boundaries_inter = false;  // a stage boundary crosses nodes
  // Expert parallel (ep > 1): the all-to-alls per step at the fabric's links (blocking, as train's), and of the bytes a
  // rank sends in them, those to other nodes.
  double alltoall_s = 0;
  double alltoall_bytes = 0;
  double alltoall_inter_bytes = 0;
  double step_s = 0;
  double tokens_per_step = 0;
  double tokens_per_s = 0;
  MemoryFit memory;
  std::string why_not;       // "does not fit: needs 95.2 GiB of 80 GiB", or the missing fabric figure
  std::vector<std::string> assumptions;  // what was not measured and how it was taken
  bool Viable() const { return considered && memory.fits; }
};

// The layouts of one GPU count on one offering's fabric, and the one chosen.
struct LayoutChoice {
  Layout layout;
  std::vector<LayoutCandidate> candidates;  // in the order considered: dp, zero1, fsdp at T = 1, 2, 4, ...; then
                                            // pipeline stages: P = 2, ... at T = 1, 2, ..., dp and zero1
  std::optional<size_t> chosen;             // the fastest viable one
  std::string reason;                       // why it won, or why none could be chosen
  std::string links;                        // the fabric's links as used: intra and inter origin
};

// Every mode x T for `layout` on `fabric` (gpu_memory_bytes per GPU); T runs over the shapes whose T divides the
// layout's GPUs per node; zero1 and fsdp only with more than one replica (with one they are dp). Then, after them,
// pipeline stages: every P of the shapes' pipelines that divides the layout's nodes (stages of whole nodes), dp and
// zero1 across the pipelines (fsdp is not built with stages), each with M micro-batches of the run's size per
// pipeline and step: the tokens per step of the candidates without stages at the same T (P x the run's micro-batches
// per replica), rounded; M < P (strong scaling, too small a batch) is not possible.
LayoutChoice ChooseLayout(const ProjectionBasis& basis, const Fabric& fabric, const Layout& layout,
                          double gpu_memory_bytes);

// A GPU count, or an explicit layout "NxG", as --project gives them.
struct ProjectTarget {
  int gpus = 0;
  std::optional<Layout> layout;
  std::string text;
};
std::vector<ProjectTarget> ParseProjectTargets(const std::string& text, const std::string& flag);
// The targets as layouts on nodes of `gpus_per_node` GPUs (--gpus-per-node, for offerings without a fabric); a target
// that cannot be laid out so is left out, with why in `unplaced`.
std::vector<Layout> FittedLayouts(const std::vector<ProjectTarget>& targets, int gpus_per_node,
                                  std::vector<std::string>& unplaced);
// The layout of `target` on nodes of `gpus_per_node` GPUs: a count fills whole nodes (1 x k up to one node);
// nullopt with `why` when it cannot (a count that is not a whole number of nodes; a layout wider than the node).
std::optional<Layout> LayoutOnNodes(const ProjectTarget& target, int gpus_per_node, std::string& why);

}  // namespace tb
