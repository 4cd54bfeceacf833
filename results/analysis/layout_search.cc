#include "layout_search.h"

#include <algorithm>
#include <cmath>

#include "console.h"
#include "error.h"
#include "flags.h"
#include "units.h"

namespace tb {
namespace {

const char* const kModes[] = {"dp", "zero1", "fsdp"};

// The share of the whole model's AdamW state one rank holds: `share` of the parameters (a stage's; 1 without stages)
// over its tensor-parallel group, and in zero1 and fsdp over its stage's replicas too.
double OptimizerHeld(const std::string& mode, int tp, int ranks, int pp, double share) {
  return share / tp / (mode == "dp" ? 1 : ranks / (tp * pp));
}
double OptimizerHeldByRun(const ProjectionBasis& b) {
  return OptimizerHeld(b.mode, b.tp, b.k, b.pp, b.optimizer_share * b.HeldShare(b.ep));
}

// The mode's gradient collectives of `gradient` bytes per rank over the replicas that hold them (`group`: their nodes
// and ranks per node).
double CollectiveSeconds(const ProjectionBasis& b, const LinkModel& links, const std::string& mode, const Layout& group,
                         double gradient) {
  if (!(gradient > 0) || group.gpus() < 2) return 0.0;
  const double buckets = mode == "fsdp" ? std::max(1, b.fsdp_units) : std::max(1.0, std::ceil(gradient / b.bucket_bytes));
  const ModeCollectives mc = CollectivesOf(mode, gradient, buckets);
  return PredictAllReduceSeconds(links, group.nodes, group.gpus_per_node, mc.bytes, mc.ops);
}

// The ranks that hold the same experts under expert parallel EP over `replicas` (groups of EP consecutive ranks laid
// over whole nodes of g ranks): every EP-th rank, g/EP per node while a group fits a node, else one on every EP/g-th
// node.
Layout ExpertReplicas(const Layout& replicas, int ep) {
  if (ep <= replicas.gpus_per_node) return {replicas.nodes, replicas.gpus_per_node / ep};
  return {std::max(1, replicas.nodes * replicas.gpus_per_node / ep), 1};
}

// The mode's gradient collectives of `gradient` bytes per rank over the replicas (`group`), and under expert parallel
// the experts' share over the ranks that hold the same experts; then what backward hides of them: at most the share
// it hid in the run, at most the seconds it hid there scaled with the compute that does the hiding, and at most the
// compute itself; zero1's collectives run after backward and hide nothing.
void GradientSync(const ProjectionBasis& b, const LinkModel& links, const Layout& group, double gradient,
                  LayoutCandidate& c) {
  if (c.ep > 1) {
    const double experts = gradient * b.moe.expert_share / b.HeldShare(c.ep) / c.ep;
    c.comm_s = CollectiveSeconds(b, links, c.mode, group, gradient - experts) +
               CollectiveSeconds(b, links, c.mode, ExpertReplicas(group, c.ep), experts);
  } else {
    c.comm_s = CollectiveSeconds(b, links, c.mode, group, gradient);
  }
  const double hiding = b.ComputeS() > 0 ? c.compute_s / b.ComputeS() : 0.0;
  const double capacity = c.mode == "zero1" ? 0.0 : std::min({b.overlap * c.comm_s, b.hidden_s * hiding, c.compute_s});
  c.exposed_s = c.comm_s - std::min(c.comm_s, capacity);
  if (c.mode != b.mode && c.mode != "zero1" && b.overlap_measured) {
    c.assumptions.push_back(Format("backward hides up to %.3g s per step as it did in %s, taken for %s", b.hidden_s,
                                   b.mode.c_str(), c.mode.c_str()));
  }
}

// Expert parallel's dispatch and combine for `tokens` per replica and step: every MoE block's four all-to-alls per
// micro-batch of the run's size, each token's K rows to their experts' ranks ((EP-1)/EP of them leave the rank when the
// routing is balanced), at the fabric's links (AllToAllSeconds), blocking as train's are.
void ModelAllToAll(const ProjectionBasis& b, const LinkModel& links, double tokens, LayoutCandidate& c) {
  if (c.ep < 2) return;
  c.alltoall_bytes = tokens * b.moe.alltoall_bytes_per_token * (c.ep - 1.0) / c.ep;
  const double micro_batches = b.micro_batch_tokens > 0 ? std::max(1.0, std::round(tokens / b.micro_batch_tokens)) : 1.0;
  const AllToAllTime t = AllToAllSeconds(links, {c.layout.nodes, c.layout.gpus_per_node / c.tp}, c.ep,
                                         c.alltoall_bytes, b.moe.alltoall_ops_per_micro_batch * micro_batches);
  c.alltoall_s = t.seconds;
  c.alltoall_inter_bytes = t.inter_node_bytes;
  c.assumptions.push_back(Format(
      "all-to-all of ep%d: %.4g MB per GPU per step (every MoE block's dispatch and combine, forward and backward; "
      "top-k rows per token in bf16, routing balanced, nothing dropped), %s; blocking, as train's", c.ep,
      c.alltoall_bytes / 1e6,
      t.inter_node_bytes > 0 ? Format("%.0f%% of it to other nodes at the GPU's share of its node's NICs, the rest "
                                      "inside the node at the same time", 100 * t.inter_node_bytes / c.alltoall_bytes).c_str()
                             : "inside one node"));
}

// The step of `c` from the run's figures at the fabric's links (its memory aside).
void ModelStep(const ProjectionBasis& b, const TensorParallelShape& shape, const LinkModel& links, LayoutCandidate& c) {
  const int k = c.layout.gpus(), t = c.tp, replicas = c.replicas();
  const double ref_tokens = b.TokensPerReplica();
  const double tokens = b.weak ? ref_tokens : b.tokens_per_step / replicas;
  const double scale = tokens / ref_tokens;
  c.compute_s = b.ComputeS() * scale * b.tp / t;
  if (t != b.tp) {
    c.assumptions.push_back(Format("compute at T=%d from the run's T=%d divided evenly over the group (Megatron splits "
                                   "every GEMM; its unsplit LayerNorms and element-wise work are divided too: not "
                                   "measured at T=%d)", t, b.tp, t));
  }
  c.optimizer_s = b.optimizer_s * OptimizerHeld(c.mode, t, k, 1, b.HeldShare(c.ep)) / OptimizerHeldByRun(b);
  if (t > 1) {
    c.activation_s = PredictAllReduceSeconds(links, 1, t, shape.activation_bytes * scale, shape.activation_ops);
  }
  if (replicas > 1) {
    // The run's per-rank gradient is its held share of the model's: the candidate holds its own.
    const double gradient = b.gradient_bytes * b.tp / t / b.HeldShare(b.ep) * b.HeldShare(c.ep);
    GradientSync(b, links, {c.layout.nodes, c.layout.gpus_per_node / t}, gradient, c);
  }
  ModelAllToAll(b, links, tokens, c);
  c.step_s = c.compute_s + c.optimizer_s + c.activation_s + c.exposed_s + c.alltoall_s;
  c.tokens_per_step = tokens * replicas;
  c.tokens_per_s = c.tokens_per_step / c.step_s;
}

void FitCandidate(const ProjectionBasis& b, const TensorParallelShape& shape, double gpu_memory_bytes,
                  LayoutCandidate& c) {
  MemoryBreakdown dp = shape.dp_memory;
  for (const ExpertShape& experts : shape.experts) {
    if (experts.ep == c.ep) dp = experts.dp_memory;
  }
  if (!b.weak) dp.activations_bytes *= (b.tokens_per_step / c.replicas()) / b.TokensPerReplica();
  const MemoryBreakdown mode = ModeMemory(dp, c.mode, c.layout.gpus(), b.gathered_parameters, b.parameters, c.tp);
  c.memory = FitMemory(mode, gpu_memory_bytes, b.calibration);
  if (!c.memory.fits) {
    c.why_not = Format("does not fit: needs %.4g GiB of %.4g GiB", c.memory.required_bytes / kGiB,
                       gpu_memory_bytes / kGiB);
  }
}

// The micro-batches per pipeline and step of pipeline candidate `c`, M: the tokens per step of the candidates without
// stages at its T (weak scaling: the run's tokens per replica on each of gpus / T; strong: the run's) over its
// pipelines, in micro-batches of the run's size, so that a larger global batch does not pass for a faster layout;
// "" or why M cannot be.
std::string ChooseMicroBatches(const ProjectionBasis& b, LayoutCandidate& c) {
  if (!(b.micro_batch_tokens > 0)) return "the run's micro-batch in tokens is not known (its report has no seq)";
  const double tokens = b.weak ? b.TokensPerReplica() * c.layout.gpus() / c.tp : b.tokens_per_step;
  const double exact = tokens / (c.replicas() * b.micro_batch_tokens);
  c.micro_batches = std::max(1, static_cast<int>(std::lround(exact)));
  if (c.micro_batches < c.pp) {
    return Format("the global batch of %.6g tokens over %d pipeline%s leaves %d micro-batch%s of the run's %.6g tokens "
                  "each, fewer than the %d stages (1F1B needs M >= P)", tokens, c.replicas(),
                  c.replicas() == 1 ? "" : "s", c.micro_batches, c.micro_batches == 1 ? "" : "es",
                  b.micro_batch_tokens, c.pp);
  }
  c.assumptions.push_back(Format(
      "M = %d micro-batches of the run's %.6g tokens per pipeline and step%s: the tokens per step of the layouts "
      "without stages at T=%d, so that a larger batch does not pass for a faster layout; 1F1B's bubble (P-1)/(M+P-1) "
      "= %.1f%% of the pipelined part (more micro-batches per replica in the run, train --grad-accum, shrink it)",
      c.micro_batches, b.micro_batch_tokens, std::fabs(exact - c.micro_batches) > 1e-9 ? " (rounded)" : "", c.tp,
      100.0 * (c.pp - 1) / (c.micro_batches + c.pp - 1)));
  return "";
}

// The step of pipeline candidate `c` (micro_batches chosen): the heaviest stage's compute and tensor parallel
// all-reduces, its boundary exchanges and 1F1B's bubble on them, the optimizer and gradient collectives of the
// largest stage over its replicas, and the tied embedding's all-reduce.
void ModelPipelineStep(const ProjectionBasis& b, const TensorParallelShape& shape, const PipelineShape& pipe,
                       const LinkModel& links, LayoutCandidate& c) {
  const int t = c.tp, pp = c.pp;
  const double tokens = c.micro_batches * b.micro_batch_tokens;  // per pipeline and step
  const double scale = tokens / b.TokensPerReplica() * pipe.compute_share;
  const double largest = *std::max_element(pipe.parameter_share.begin(), pipe.parameter_share.end());
  c.compute_s = b.ComputeS() * scale * b.tp / t;
  c.assumptions.push_back(Format("compute of the heaviest of %d stages (the last: its blocks and the LM head, %.1f%% "
                                 "of the model's FLOPs per token) from the run's compute per token",
                                 pp, 100 * pipe.compute_share));
  c.optimizer_s = b.optimizer_s * OptimizerHeld(c.mode, t, c.layout.gpus(), pp, largest) / OptimizerHeldByRun(b);
  if (t > 1) {
    c.activation_s = PredictAllReduceSeconds(links, 1, t, shape.activation_bytes * scale,
                                             shape.activation_ops * pipe.compute_share);
  }
  if (c.replicas() > 1) {
    const Layout stage = PipelineStageSpan(c.layout, pp);
    GradientSync(b, links, {stage.nodes, stage.gpus_per_node / t}, b.gradient_bytes * b.tp / t * largest, c);
  }
  c.boundaries_inter = StageBoundariesCrossNodes(c.layout, pp);
  const double exchange = BoundaryExchangeSeconds(links, links.intra, c.layout, pp, pipe.edge_bytes);
  const OneFOneBTime slots = PipelineTime(c.compute_s + c.activation_s, exchange, pp, c.micro_batches);
  c.pipeline_s = slots.transfers_s;
  c.bubble_s = slots.bubble_s;
  c.embedding_s = EmbeddingAllReduceSeconds(links, c.layout, pipe.embedding_bytes);
  c.step_s = c.compute_s + c.optimizer_s + c.activation_s + c.exposed_s + c.pipeline_s + c.bubble_s + c.embedding_s;
  c.tokens_per_step = tokens * c.replicas();
  c.tokens_per_s = c.tokens_per_step / c.step_s;
}

// Memory per rank of pipeline candidate `c`: its largest stage under the mode (over the stage's replicas), calibrated
// as the run's.
void FitPipelineCandidate(const ProjectionBasis& b, const PipelineShape& pipe, double gpu_memory_bytes,
                          LayoutCandidate& c) {
  MemoryBreakdown largest;
  for (const MemoryBreakdown& stage : pipe.stage_memory) {
    const MemoryBreakdown m = ModeMemory(stage, c.mode, c.layout.gpus() / c.pp, 0.0, b.parameters, c.tp);
    if (m.total_bytes() > largest.total_bytes()) largest = m;
  }
  c.memory = FitMemory(largest, gpu_memory_bytes, b.calibration);
  if (!c.memory.fits) {
    c.why_not = Format("does not fit: its largest stage needs %.4g GiB of %.4g GiB", c.memory.required_bytes / kGiB,
                       gpu_memory_bytes / kGiB);
  }
}

// Why pipeline candidate `c` cannot be modelled ("" when it can): the model in its P stages, a mode the GPUs do not
// train across pipelines, or its micro-batches.
std::string PipelineGap(const ProjectionBasis& b, const PipelineShape& pipe, LayoutCandidate& c) {
  if (!pipe.invalid.empty()) return pipe.invalid;
  if (const auto gap = pipe.modes_not_built.find(c.mode); gap != pipe.modes_not_built.end()) return gap->second;
  return ChooseMicroBatches(b, c);
}

// Pipeline candidates for `layout`: each P of the shapes that divides its nodes, dp and zero1 across the pipelines.
void AddPipelineCandidates(const ProjectionBasis& basis, const LinkModel& links, const Layout& layout,
                           double gpu_memory_bytes, std::vector<LayoutCandidate>& candidates) {
  for (const TensorParallelShape& shape : basis.shapes) {
    // Groups stay inside a node; a T the model cannot take is listed without stages.
    if (layout.gpus_per_node % shape.tp != 0 || !shape.invalid.empty()) continue;
    for (const PipelineShape& pipe : shape.pipelines) {
      if (pipe.pp < 2 || layout.nodes % pipe.pp != 0) continue;  // stages of whole nodes
      for (const char* mode : {"dp", "zero1"}) {
        LayoutCandidate c;
        c.layout = layout;
        c.mode = mode;
        c.tp = shape.tp;
        c.pp = pipe.pp;
        if (c.replicas() == 1 && c.mode != "dp") continue;
        c.why_not = PipelineGap(basis, pipe, c);
        if (c.why_not.empty()) {
          c.considered = true;
          ModelPipelineStep(basis, shape, pipe, links, c);
          FitPipelineCandidate(basis, pipe, gpu_memory_bytes, c);
        } else {
          c.assumptions.clear();
        }
        candidates.push_back(std::move(c));
      }
    }
  }
}

// Expert parallel candidates for `layout` at `shape`'s T (an MoE model): each EP > 1 of the shape that divides the
// replicas, dp across them (train builds expert parallel with dp only); groups of EP consecutive ranks, inside a node
// while EP fits one.
void AddExpertCandidates(const ProjectionBasis& basis, const TensorParallelShape& shape, const LinkModel& links,
                         const Layout& layout, double gpu_memory_bytes, std::vector<LayoutCandidate>& candidates) {
  for (const ExpertShape& experts : shape.experts) {
    if (experts.ep < 2 || (layout.gpus() / shape.tp) % experts.ep != 0) continue;
    LayoutCandidate c;
    c.layout = layout;
    c.tp = shape.tp;
    c.ep = experts.ep;
    c.why_not = !shape.invalid.empty() ? shape.invalid : experts.invalid;
    if (c.why_not.empty()) {
      c.considered = true;
      ModelStep(basis, shape, links, c);
      FitCandidate(basis, shape, gpu_memory_bytes, c);
    }
    candidates.push_back(std::move(c));
  }
}

// "; 2 layouts do not fit the GPU's memory; 1 not possible for this model" (empty when every one was viable).
std::string Excluded(const std::vector<LayoutCandidate>& all) {
  const long invalid = std::count_if(all.begin(), all.end(), [](const LayoutCandidate& c) { return !c.considered; });
  const long unfit = std::count_if(all.begin(), all.end(),
                                   [](const LayoutCandidate& c) { return c.considered && !c.memory.fits; });
  std::string text;
  if (unfit) text += Format("; %ld layout%s do%s not fit the GPU's memory", unfit, unfit == 1 ? "" : "s",
                            unfit == 1 ? "es" : "");
  if (invalid) text += Format("; %ld not possible for this model", invalid);
  return text;
}

// Why none could be chosen: the smallest layout's shortfall, or that the model allows none.
std::string NoneChosen(const std::vector<LayoutCandidate>& all) {
  const LayoutCandidate* smallest = nullptr;
  for (const LayoutCandidate& c : all) {
    if (c.considered && (!smallest || c.memory.required_bytes < smallest->memory.required_bytes)) smallest = &c;
  }
  if (!smallest) return "no layout is possible for this model" + Excluded(all);
  return "no layout fits the GPU's memory (the smallest, " + smallest->Name() + ", " + smallest->why_not + ")";
}

// What a pipeline candidate's stages do: "; pp4 across 4 nodes: only stage boundaries cross the network (each
// stage's gradients inside its node), bubble 16% of the step at M = 16, stage transfers 2%" ("" without stages).
std::string PipelineWords(const LayoutCandidate& c) {
  if (c.pp < 2) return "";
  const Layout stage = PipelineStageSpan(c.layout, c.pp);
  const std::string gradients =
      c.replicas() == 1 ? "one replica: no gradient collectives"
      : stage.nodes == 1 ? "each stage's gradients inside its node"
                         : Format("each stage's gradients across its %d nodes", stage.nodes);
  return Format("; pp%d across %d nodes: only stage boundaries cross the network (%s), bubble %.0f%% of the step at "
                "M = %d, stage transfers %.0f%%, tied-embedding all-reduce %.0f%%",
                c.pp, c.layout.nodes, gradients.c_str(), 100 * c.bubble_s / c.step_s, c.micro_batches,
                100 * c.pipeline_s / c.step_s, 100 * c.embedding_s / c.step_s);
}

// What a candidate's experts do: "; ep8 inside a node: all-to-all 12% of the step" ("" without expert parallel).
std::string ExpertWords(const LayoutCandidate& c) {
  if (c.ep < 2) return "";
  if (c.alltoall_inter_bytes > 0) {
    return Format("; ep%d across nodes: all-to-all %.0f%% of the step, %.0f%% of its bytes over the network", c.ep,
                  100 * c.alltoall_s / c.step_s, 100 * c.alltoall_inter_bytes / c.alltoall_bytes);
  }
  return Format("; ep%d inside a node: all-to-all %.0f%% of the step", c.ep, 100 * c.alltoall_s / c.step_s);
}

// For a model with experts whose winner keeps them whole: the fastest expert parallel candidate and its all-to-all
// ("; fastest with expert parallel: ep8+dp at 12.0% fewer tokens/s, all-to-all 30% of its step inside a node"); and
// where an all-to-all across nodes takes more of a candidate's step than its compute: "; all-to-all across nodes
// dominates ep16+dp (61% of its step)" for the first such viable candidate.
std::string AllToAllWords(const std::vector<LayoutCandidate>& all, const LayoutCandidate& won) {
  std::string words;
  const LayoutCandidate* fastest = nullptr;
  for (const LayoutCandidate& c : all) {
    if (c.Viable() && c.ep > 1 && (!fastest || c.tokens_per_s > fastest->tokens_per_s)) fastest = &c;
  }
  if (won.ep < 2 && fastest) {
    words += Format("; fastest with expert parallel: %s at %.1f%% fewer tokens/s, all-to-all %.0f%% of its step %s",
                    fastest->Name().c_str(), 100 * (1 - fastest->tokens_per_s / won.tokens_per_s),
                    100 * fastest->alltoall_s / fastest->step_s,
                    fastest->alltoall_inter_bytes > 0 ? "across nodes" : "inside a node");
  }
  for (const LayoutCandidate& c : all) {
    if (c.Viable() && c.alltoall_inter_bytes > 0 && c.alltoall_s > c.compute_s) {
      return words + Format("; all-to-all across nodes dominates %s (%.0f%% of its step)", c.Name().c_str(),
                            100 * c.alltoall_s / c.step_s);
    }
  }
  return words;
}

// Why the chosen candidate won: against the runner-up, and what did not fit.
std::string Reason(const LayoutChoice& choice) {
  const std::vector<LayoutCandidate>& all = choice.candidates;
  if (!choice.chosen) return NoneChosen(all);
  const LayoutCandidate& won = all[*choice.chosen];
  const LayoutCandidate* second = nullptr;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i != *choice.chosen && all[i].Viable() && (!second || all[i].tokens_per_s > second->tokens_per_s)) {
      second = &all[i];
    }
  }
  std::string reason = won.Name() + Format(" is the fastest that fits (compute %.0f%%, exposed communication %.0f%%, "
                                           "activation all-reduces %.0f%% of the step)",
                                           100 * (won.compute_s + won.optimizer_s) / won.step_s,
                                           100 * won.exposed_s / won.step_s, 100 * won.activation_s / won.step_s);
  reason += PipelineWords(won);
  reason += ExpertWords(won);
  if (second) {
    reason += Format("; next %s at %.1f%% fewer tokens/s (exposed communication %.0f%%, activation all-reduces "
                     "%.0f%% of its step%s%s)", second->Name().c_str(), 100 * (1 - second->tokens_per_s / won.tokens_per_s),
                     100 * second->exposed_s / second->step_s, 100 * second->activation_s / second->step_s,
                     second->pp > 1 ? Format(", bubble %.0f%%", 100 * second->bubble_s / second->step_s).c_str() : "",
                     second->ep > 1 ? Format(", all-to-all %.0f%%%s", 100 * second->alltoall_s / second->step_s,
                                             second->alltoall_inter_bytes > 0 ? " across nodes" : " inside a node").c_str()
                                    : "");
  }
  reason += AllToAllWords(all, won);
  return reason + Excluded(all);
}

// Every mode x T for `layout` that the fabric's links can model, in order: dp, zero1, fsdp at T = 1, 2, ...; then
// the pipeline candidates
std::vector<LayoutCandidate> Candidates(const ProjectionBasis& basis, const LinkModel& links, const Layout& layout,
                                        double gpu_memory_bytes) {
  std::vector<LayoutCandidate> candidates;
  for (const TensorParallelShape& shape : basis.shapes) {
    if (layout.gpus_per_node % shape.tp != 0) continue;  // groups stay inside a node
    for (const char* mode : kModes) {
      LayoutCandidate c;
      c.layout = layout;
      c.mode = mode;
      c.tp = shape.tp;
      if (c.replicas() == 1 && c.mode != "dp") continue;  // one replica: nothing to shard across
      const auto not_built = shape.modes_not_built.find(c.mode);
      if (!shape.invalid.empty() || not_built != shape.modes_not_built.end()) {
        c.why_not = !shape.invalid.empty() ? shape.invalid : not_built->second;
      } else {
        c.considered = true;
        ModelStep(basis, shape, links, c);
        FitCandidate(basis, shape, gpu_memory_bytes, c);
      }
      candidates.push_back(std::move(c));
    }
    AddExpertCandidates(basis, shape, links, layout, gpu_memory_bytes, candidates);
  }
  AddPipelineCandidates(basis, links, layout, gpu_memory_bytes, candidates);
  return candidates;
}

}  // namespace

std::string LayoutCandidate::Name() const {
  std::string name = pp > 1 ? Format("pp%d+", pp) : "";
  if (ep > 1) name += Format("ep%d+", ep);
  if (tp > 1) name += Format("tp%d+", tp);
  if (name.empty() || replicas() > 1) return name + mode;
  name.pop_back();
  return name;
}

LayoutChoice ChooseLayout(const ProjectionBasis& basis, const Fabric& fabric, const Layout& layout,
                          double gpu_memory_bytes) {
  LayoutChoice choice;
  choice.layout = layout;
  const FabricLinks links = LinksOnFabric(fabric, layout.nodes, layout.gpus_per_node);
  if (!links.missing.empty()) {
    choice.reason = links.missing;
    return choice;
  }
  choice.links = (layout.gpus_per_node > 1 ? "intra-node " + links.links.intra.origin : std::string()) +
                 (layout.gpus_per_node > 1 && layout.nodes > 1 ? "; " : "") +
                 (layout.nodes > 1 ? "inter-node " + links.links.inter.origin : std::string());
  choice.candidates = Candidates(basis, links.links, layout, gpu_memory_bytes);
  for (size_t i = 0; i < choice.candidates.size(); ++i) {
    const LayoutCandidate& c = choice.candidates[i];
    if (c.Viable() && (!choice.chosen || c.tokens_per_s > choice.candidates[*choice.chosen].tokens_per_s)) {
      choice.chosen = i;
    }
  }
  choice.reason = Reason(choice);
  return choice;
}

std::vector<ProjectTarget> ParseProjectTargets(const std::string& text, const std::string& flag) {
  std::vector<ProjectTarget> targets;
  for (const std::string& item : SplitFlagList(text, flag)) {
    ProjectTarget target;
    target.text = item;
    if (item.find_first_of("xX") != std::string::npos) {
      target.layout = ParseLayouts(item, 1, flag).front();
      target.gpus = target.layout->gpus();
    } else {
      target.gpus = ParseLayouts(item, 1 << 20, flag).front().gpus();
    }
    targets.push_back(target);
  }
  if (targets.empty()) throw InputError(flag + ": expected a list such as 8,32 or 1x8,4x8");
  return targets;
}

std::vector<Layout> FittedLayouts(const std::vector<ProjectTarget>& targets, int gpus_per_node,
                                  std::vector<std::string>& unplaced) {
  std::vector<Layout> layouts;
  for (const ProjectTarget& target : targets) {
    std::string why;
    if (const std::optional<Layout> layout = target.layout ? target.layout : LayoutOnNodes(target, gpus_per_node, why)) {
      layouts.push_back(*layout);
    } else {
      unplaced.push_back("--project " + target.text + " on the offerings without a fabric (--gpus-per-node " +
                         std::to_string(gpus_per_node) + "): not projected: " + why);
    }
  }
  return layouts;
}

std::optional<Layout> LayoutOnNodes(const ProjectTarget& target, int gpus_per_node, std::string& why) {
  if (target.layout) {
    if (target.layout->gpus_per_node <= gpus_per_node) return target.layout;
    why = Format("layout %s needs %d GPUs on one node; the offering's nodes have %d", target.layout->Name().c_str(),
                 target.layout->gpus_per_node, gpus_per_node);
    return std::nullopt;
  }
  if (target.gpus <= gpus_per_node) return Layout{1, target.gpus};
  if (target.gpus % gpus_per_node == 0) return Layout{target.gpus / gpus_per_node, gpus_per_node};
  why = Format("%d GPUs are not a whole number of %d-GPU nodes (give NxG)", target.gpus, gpus_per_node);
  return std::nullopt;
}

}  // namespace tb
