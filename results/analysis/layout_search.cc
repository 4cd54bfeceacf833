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

// The optimizer's share of the model per rank: dp holds the whole (tensor-parallel slice of the) model, zero1 and
// fsdp shard AdamW's state over every rank.
double OptimizerShards(const std::string& mode, int tp, int ranks) { return mode == "dp" ? tp : ranks; }

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
  c.optimizer_s = b.optimizer_s * OptimizerShards(b.mode, b.tp, b.k) / OptimizerShards(c.mode, t, k);
  if (t > 1) {
    c.activation_s = PredictAllReduceSeconds(links, 1, t, shape.activation_bytes * scale, shape.activation_ops);
  }
  if (replicas > 1) {
    const double gradient = b.gradient_bytes * b.tp / t;
    const double buckets = c.mode == "fsdp" ? std::max(1, b.fsdp_units)
                                            : std::max(1.0, std::ceil(gradient / b.bucket_bytes));
    const ModeCollectives mc = CollectivesOf(c.mode, gradient, buckets);
    c.comm_s = PredictAllReduceSeconds(links, c.layout.nodes, c.layout.gpus_per_node / t, mc.bytes, mc.ops);
    // Backward hides at most the share of the collectives it hid in the run, at most the seconds it hid there
    // (scaled with the compute that does the hiding) and at most the compute itself; zero1's collectives run after
    // backward and hide nothing.
    const double capacity =
        c.mode == "zero1" ? 0.0 : std::min({b.overlap * c.comm_s, b.hidden_s * scale * b.tp / t, c.compute_s});
    c.exposed_s = c.comm_s - std::min(c.comm_s, capacity);
    if (c.mode != b.mode && c.mode != "zero1" && b.overlap_measured) {
      c.assumptions.push_back(Format("backward hides up to %.3g s per step as it did in %s, taken for %s", b.hidden_s,
                                     b.mode.c_str(), c.mode.c_str()));
    }
  }
  c.step_s = c.compute_s + c.optimizer_s + c.activation_s + c.exposed_s;
  c.tokens_per_step = tokens * replicas;
  c.tokens_per_s = c.tokens_per_step / c.step_s;
}

void FitCandidate(const ProjectionBasis& b, const TensorParallelShape& shape, double gpu_memory_bytes,
                  LayoutCandidate& c) {
  MemoryBreakdown dp = shape.dp_memory;
  if (!b.weak) dp.activations_bytes *= (b.tokens_per_step / c.replicas()) / b.TokensPerReplica();
  const MemoryBreakdown mode = ModeMemory(dp, c.mode, c.layout.gpus(), b.gathered_parameters, b.parameters, c.tp);
  c.memory = FitMemory(mode, gpu_memory_bytes, b.calibration);
  if (!c.memory.fits) {
    c.why_not = Format("does not fit: needs %.4g GiB of %.4g GiB", c.memory.required_bytes / kGiB,
                       gpu_memory_bytes / kGiB);
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
  if (second) {
    reason += Format("; next %s at %.1f%% fewer tokens/s (exposed communication %.0f%%, activation all-reduces "
                     "%.0f%% of its step)", second->Name().c_str(), 100 * (1 - second->tokens_per_s / won.tokens_per_s),
                     100 * second->exposed_s / second->step_s, 100 * second->activation_s / second->step_s);
  }
  return reason + Excluded(all);
}

// Every mode x T for `layout` that the fabric's links can model, in order: dp, zero1, fsdp at T = 1, 2, ...
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
  }
  return candidates;
}

}  // namespace

std::string LayoutCandidate::Name() const {
  if (tp == 1) return mode;
  return replicas() == 1 ? Format("tp%d", tp) : Format("tp%d+%s", tp, mode.c_str());
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
