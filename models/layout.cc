// The flat parameter layout both transformer implementations share. Weights are stored as PyTorch's
// nn.Linear stores them, (out_features, in_features) row-major, so y = x · Wᵀ + b and a checkpoint maps onto
// GPT-2's tensors one to one.
#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "communicator.h"
#include "cpu_parallel.h"
#include "error.h"
#include "peaks.h"
#include "random.h"
#include "transformer.h"

namespace tb {
namespace {

// GPT-2's initial weights are one stream of normals over the seed: Box–Muller over splitmix64, a few lines of our
// own (std::normal_distribution's output is left to each standard library, and every rank must draw the same model
// from the same seed). Normals 2p and 2p+1 are radius·cos and radius·sin of the pair made from uniforms 2p and
// 2p+1, and splitmix64 jumps straight to any uniform, so any stretch of the stream can be drawn on its own, on any
// thread, with the bits one thread drawing the whole stream in order would get.
double UniformAt(uint64_t seed, uint64_t index) {  // [0, 1)
  return static_cast<double>(SplitMix64(seed + index * kSplitMix64Increment) >> 11) * 0x1.0p-53;
}

// The two normals of pair `pair`, before scaling.
void NormalPairAt(uint64_t seed, uint64_t pair, double normals[2]) {
  const double u1 = 1.0 - UniformAt(seed, 2 * pair);  // (0, 1]: log stays finite
  const double u2 = UniformAt(seed, 2 * pair + 1);
  const double radius = std::sqrt(-2.0 * std::log(u1));
  constexpr double kTwoPi = 6.283185307179586;
  normals[0] = radius * std::cos(kTwoPi * u2);
  normals[1] = radius * std::sin(kTwoPi * u2);
}

// out[i] = normal first + i of the stream, times stddev, for i in [0, count).
void DrawNormals(uint64_t seed, uint64_t first, size_t count, float stddev, float* out) {
  const uint64_t end = first + count;
  for (uint64_t pair = first / 2; 2 * pair < end; ++pair) {
    double normals[2];
    NormalPairAt(seed, pair, normals);
    for (uint64_t index = 2 * pair; index < 2 * pair + 2; ++index) {
      if (index >= first && index < end) out[index - first] = static_cast<float>(normals[index - 2 * pair] * stddev);
    }
  }
}

// How GPT-2's initialisation fills one slot of the layout.
struct SlotFill {
  enum Kind { kZero, kOne, kNormal } kind = kZero;
  size_t drawn = 0;           // kNormal: the slot's first `drawn` elements are normals, the rest zero (wte's padding)
  float stddev = 0.0f;        // kNormal
  uint64_t first_normal = 0;  // kNormal: the stream index of the slot's first element
};

std::vector<SlotFill> SlotFills(const ModelConfig& config, const std::vector<TensorSlot>& layout) {
  constexpr float kStddev = 0.02f;
  // GPT-2 scales the projections that write into the residual stream so that its variance does not grow
  // with depth: each block adds two of them.
  const float residual_stddev = kStddev / std::sqrt(2.0f * config.layers);
  std::vector<SlotFill> fills;
  uint64_t normals = 0;  // drawn by the slots before
  for (const TensorSlot& slot : layout) {
    SlotFill fill;
    if (!slot.decay && slot.name.ends_with(".weight")) {  // a LayerNorm gain
      fill.kind = SlotFill::kOne;
    } else if (slot.decay) {
      fill.kind = SlotFill::kNormal;
      fill.drawn = slot.name == "wte" ? static_cast<size_t>(config.vocab) * config.d_model : slot.count;
      fill.stddev = slot.name.ends_with(".proj.weight") ? residual_stddev : kStddev;  // attn.proj and mlp.proj
      fill.first_normal = normals;
      normals += fill.drawn;
    }
    fills.push_back(fill);
  }
  return fills;
}

// Elements [begin, end) of one slot into out.
void FillSlotPart(const SlotFill& fill, uint64_t seed, size_t begin, size_t end, float* out) {
  const size_t drawn_end = fill.kind == SlotFill::kNormal ? std::clamp(fill.drawn, begin, end) : begin;
  if (drawn_end > begin) DrawNormals(seed, fill.first_normal + begin, drawn_end - begin, fill.stddev, out);
  std::fill(out + (drawn_end - begin), out + (end - begin), fill.kind == SlotFill::kOne ? 1.0f : 0.0f);
}

}  // namespace

void Transformer::ClearFloats(float* data, size_t count) { std::fill(data, data + count, 0.0f); }

OptimizerShard ShardOf(size_t elements, int ranks, int rank) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    throw InputError("cannot shard over " + std::to_string(ranks) + " ranks (rank " + std::to_string(rank) + ")");
  }
  const size_t shard = (elements + static_cast<size_t>(ranks) - 1) / static_cast<size_t>(ranks);
  OptimizerShard s;
  s.capacity = shard * static_cast<size_t>(ranks);
  s.begin = std::min(elements, shard * static_cast<size_t>(rank));
  s.end = std::min(elements, s.begin + shard);
  return s;
}

ModelStateBytes TheoryStateBytes(ParallelMode mode, bool bf16, double elements, int ranks) {
  const double compute = bf16 ? 2.0 : 4.0, optimizer = bf16 ? 12.0 : 8.0;
  const double sharded = mode == ParallelMode::kFsdp ? ranks : 1;
  return {compute * elements / sharded, compute * elements / sharded,
          optimizer * elements / (mode == ParallelMode::kDp ? 1 : ranks)};
}

namespace {

// Per slot of `layout`, the index of its unit: the embeddings, each block, the final LayerNorm, in layout order (by
// the slots' layers, so that a pipeline stage's empty units keep their places).
std::vector<size_t> UnitIndices(const std::vector<TensorSlot>& layout) {
  std::vector<size_t> indices;
  int unit_layer = -2;  // the layer of the unit being grown (-1: embeddings, -3: the final LayerNorm)
  bool after_blocks = false;
  size_t unit = 0;
  for (const TensorSlot& slot : layout) {
    after_blocks = after_blocks || (slot.layer < 0 && unit_layer >= 0);
    const int layer = slot.layer >= 0 ? slot.layer : (after_blocks ? -3 : -1);
    if (!indices.empty() && layer != unit_layer) ++unit;
    unit_layer = layer;
    indices.push_back(unit);
  }
  return indices;
}

}  // namespace

std::vector<ParameterUnit> ParameterUnits(const std::vector<TensorSlot>& layout) {
  std::vector<ParameterUnit> units;
  const std::vector<size_t> indices = UnitIndices(layout);
  for (size_t s = 0; s < layout.size(); ++s) {
    if (units.size() <= indices[s]) units.push_back(ParameterUnit{layout[s].offset, layout[s].offset});
    units.back().end = layout[s].offset + layout[s].count;
  }
  return units;
}

std::vector<size_t> SlotUnits(const std::vector<TensorSlot>& layout) { return UnitIndices(layout); }

PipelineStage MakePipelineStage(const ModelConfig& config, int stages, int stage, int slots) {
  if (stages < 1 || config.layers % stages != 0) {
    throw InputError("--pipeline-parallel " + std::to_string(stages) + " does not divide the model's " +
                     std::to_string(config.layers) + " layers into stages of equal depth");
  }
  if (stage < 0 || stage >= stages) {
    throw InputError("pipeline stage " + std::to_string(stage) + " outside 0.." + std::to_string(stages - 1));
  }
  if (slots < 1) throw InputError("a pipeline stage holds at least one micro-batch, not " + std::to_string(slots));
  const int depth = config.layers / stages;
  return PipelineStage{stages, stage, stage * depth, (stage + 1) * depth, slots};
}

int CheckedSlot(const PipelineStage& stage, int slot) {
  if (slot < 0 || slot >= stage.slots) {
    throw std::logic_error("micro-batch slot " + std::to_string(slot) + " of a model holding " +
                           std::to_string(stage.slots));
  }
  return slot;
}

int OneFOneBSlots(int stages, int stage, int micro_batches) { return std::min(stages - stage, micro_batches); }

bool StageHoldsSlot(const PipelineStage& stage, const std::vector<TensorSlot>& layout, size_t slot) {
  const TensorSlot& s = layout.at(slot);
  if (s.layer >= 0) return stage.holds_layer(s.layer);
  if (slot == kWteSlot) return stage.first() || stage.last();  // the last stage's copy is the tied LM head
  if (slot == kWpeSlot) return stage.first();
  return stage.last();  // the final LayerNorm
}

std::vector<TensorSlot> StageLayout(const std::vector<TensorSlot>& layout, const PipelineStage& stage) {
  std::vector<TensorSlot> staged = layout;
  size_t offset = 0;
  for (size_t i = 0; i < staged.size(); ++i) {
    staged[i].offset = offset;
    if (!StageHoldsSlot(stage, layout, i)) staged[i].count = 0;
    offset += staged[i].count;
  }
  return staged;
}

bool IsExpertSlot(const std::vector<TensorSlot>& layout, size_t slot) {
  if (slot < kFirstBlockSlot || layout.size() < kFirstBlockSlot + 2) return false;
  const size_t layers = (layout.size() - kFirstBlockSlot - 2) / kBlockTensors;
  if (slot >= LnfWeightSlot(static_cast<int>(layers))) return false;
  const size_t tensor = (slot - kFirstBlockSlot) % kBlockTensors;
  const size_t router = slot - tensor + kRouterWeight;
  return tensor >= kFcWeight && tensor <= kMlpProjBias && layout.at(router).count > 0;
}

std::vector<TensorSlot> ExpertLayout(const std::vector<TensorSlot>& layout, const ExpertPlacement& experts) {
  if (experts.parallel < 1 || experts.rank < 0 || experts.rank >= experts.parallel) {
    throw std::logic_error("expert parallel: rank " + std::to_string(experts.rank) + " of " +
                           std::to_string(experts.parallel));
  }
  std::vector<TensorSlot> held = layout;
  size_t offset = 0;
  for (size_t i = 0; i < held.size(); ++i) {
    held[i].offset = offset;
    if (IsExpertSlot(layout, i)) {
      if (layout[i].count % experts.parallel != 0) {
        throw std::logic_error("expert parallel: " + layout[i].name + " does not divide over the ranks");
      }
      held[i].count = layout[i].count / experts.parallel;
      held[i].first = layout[i].first + held[i].count * experts.rank;
    }
    offset += held[i].count;
  }
  return held;
}

std::vector<TensorSlot> HeldLayout(const std::vector<TensorSlot>& layout, const ModelPlacement& placement) {
  return ExpertLayout(StageLayout(layout, placement.stage), placement.experts);
}

void InitializeStageParameters(const ModelConfig& config, const std::vector<TensorSlot>& layout,
                               const std::vector<TensorSlot>& stage_layout, uint64_t seed, float* params) {
  for (size_t s = 0; s < layout.size(); ++s) {
    const TensorSlot& held = stage_layout.at(s);
    if (held.count == 0) continue;
    const size_t begin = layout[s].offset + held.first;
    InitializeParameterRange(config, layout, seed, begin, begin + held.count, params + held.offset);
  }
}

double FsdpGatheredParameters(const ModelConfig& config) {
  const std::vector<ParameterUnit> units = ParameterUnits(MakeLayout(config));
  double gathered = static_cast<double>(units.front().elements() + units.back().elements());
  for (int l = 0; l < std::min(config.layers, 2); ++l) gathered += static_cast<double>(units[BlockUnit(l)].elements());
  return gathered;
}

FsdpLayout MakeFsdpLayout(const std::vector<TensorSlot>& layout, int ranks, int rank) {
  FsdpLayout f;
  f.ranks = ranks;
  f.rank = rank;
  f.units = ParameterUnits(layout);
  for (const ParameterUnit& unit : f.units) {
    UnitShard u;
    u.shard = ShardOf(unit.elements(), ranks, rank);
    u.count = u.shard.capacity / static_cast<size_t>(ranks);
    u.store = f.store_elements;
    f.store_elements += u.count;
    f.shards.push_back(u);
  }
  return f;
}

namespace {

// Expert parallel's placement against the model's experts, its group, and the modes it is not built with.
void CheckExpertPlacement(const ModelConfig& config, const ModelPlacement& placement) {
  const ExpertPlacement& experts = placement.experts;
  if (!experts.split()) return;
  const int total = config.moe ? config.moe->experts : 0;
  if (total == 0 || total % experts.parallel != 0) {
    throw InputError("expert parallel " + std::to_string(experts.parallel) + " does not divide the " +
                     std::to_string(total) + " experts of model '" + config.name + "'");
  }
  if (experts.group == nullptr || experts.group->size() != experts.parallel || experts.group->rank() != experts.rank) {
    throw std::logic_error("expert parallel: the group is not this rank's place among the experts");
  }
  if (placement.fsdp.enabled() || placement.shard.sharded() || placement.stage.split()) {
    throw InputError("expert parallel with zero1, fsdp or pipeline stages is not built (--parallel dp)");
  }
}

// `stage` with end_layer filled in (the default stage: the whole model); throws InputError where MakePipelineStage
// would, and for a stage given whole with other layers than MakePipelineStage's.
PipelineStage ResolveStage(const PipelineStage& stage, const ModelConfig& config) {
  const PipelineStage made = MakePipelineStage(config, stage.stages, stage.stage, stage.slots);
  // A stage given whole (end_layer filled in) must be the one MakePipelineStage makes.
  if (stage.end_layer >= 0 && (made.first_layer != stage.first_layer || made.end_layer != stage.end_layer)) {
    throw InputError("pipeline stage " + std::to_string(stage.stage) + " of " + std::to_string(stage.stages) +
                     " holds layers [" + std::to_string(made.first_layer) + ", " + std::to_string(made.end_layer) +
                     "), not [" + std::to_string(stage.first_layer) + ", " + std::to_string(stage.end_layer) + ")");
  }
  return made;
}

// What a model takes `shard` as: without one, every element ([0, elements) at capacity elements). Throws InputError
// when the shard does not fit `elements`.
OptimizerShard ResolveShard(const OptimizerShard& shard, size_t elements) {
  if (!shard.sharded()) return OptimizerShard{elements, 0, elements};
  if (shard.capacity < elements || shard.begin > shard.end || shard.end > elements) {
    throw InputError("optimizer shard [" + std::to_string(shard.begin) + ", " + std::to_string(shard.end) +
                     ") of capacity " + std::to_string(shard.capacity) + " does not fit " + std::to_string(elements) +
                     " elements");
  }
  return shard;
}

}  // namespace

ModelPlacement ResolvePlacement(const ModelConfig& config, const std::vector<TensorSlot>& layout,
                                const ModelPlacement& placement) {
  ModelPlacement resolved = placement;
  resolved.stage = ResolveStage(placement.stage, config);
  if (placement.fsdp.enabled()) {
    if (placement.shard.sharded()) throw InputError("a model is sharded by zero1 or by fsdp, not both");
    if (resolved.stage.split()) {
      throw InputError("fsdp with pipeline parallel is not built HINT: a pipeline stage shards its optimizer state "
                       "with zero1");
    }
    const std::vector<ParameterUnit> units = ParameterUnits(layout);
    const bool same = units.size() == placement.fsdp.units.size() &&
                      std::equal(units.begin(), units.end(), placement.fsdp.units.begin(),
                                 [](const ParameterUnit& a, const ParameterUnit& b) {
                                   return a.begin == b.begin && a.end == b.end;
                                 });
    if (!same) throw std::logic_error("fsdp: the layout's units are not the model's");
  }
  CheckExpertPlacement(config, resolved);
  const std::vector<TensorSlot> held = HeldLayout(layout, resolved);
  resolved.shard = ResolveShard(placement.shard, held.back().offset + held.back().count);
  return resolved;
}

std::vector<AdamWRange> AdamWRanges(const ModelConfig& config, const std::vector<TensorSlot>& layout, size_t begin,
                                    size_t end) {
  std::vector<AdamWRange> ranges;
  for (size_t s = 0; s < layout.size(); ++s) {
    const TensorSlot& slot = layout[s];
    // A stage without wte holds none of it (count 0).
    const size_t used = s == kWteSlot ? std::min(slot.count, static_cast<size_t>(config.vocab) * config.d_model) : slot.count;
    const size_t lo = std::max(begin, slot.offset), hi = std::min(end, slot.offset + used);
    if (lo >= hi) continue;
    if (!ranges.empty() && ranges.back().decay == slot.decay && ranges.back().offset + ranges.back().count == lo) {
      ranges.back().count += hi - lo;
    } else {
      ranges.push_back(AdamWRange{lo, hi - lo, slot.decay});
    }
  }
  return ranges;
}

std::vector<AdamWRange> FsdpAdamWRanges(const ModelConfig& config, const std::vector<TensorSlot>& layout,
                                        const FsdpLayout& fsdp) {
  std::vector<AdamWRange> ranges;
  for (size_t u = 0; u < fsdp.units.size(); ++u) {
    const size_t begin = fsdp.units[u].begin + fsdp.shards[u].shard.begin;
    // Flat element begin + i sits at store + i.
    for (AdamWRange r : AdamWRanges(config, layout, begin, fsdp.units[u].begin + fsdp.shards[u].shard.end)) {
      r.offset = fsdp.shards[u].store + (r.offset - begin);
      ranges.push_back(r);
    }
  }
  return ranges;
}

std::vector<AdamWRange> PlacementAdamWRanges(const ModelConfig& config, const std::vector<TensorSlot>& layout,
                                             const ModelPlacement& placement) {
  if (placement.fsdp.enabled()) return FsdpAdamWRanges(config, layout, placement.fsdp);
  return AdamWRanges(config, layout, placement.shard.begin, placement.shard.end);
}

std::vector<size_t> UnitOffsets(const std::vector<TensorSlot>& layout) {
  const std::vector<ParameterUnit> units = ParameterUnits(layout);
  std::vector<size_t> offsets;
  const std::vector<size_t> indices = SlotUnits(layout);
  for (size_t s = 0; s < layout.size(); ++s) offsets.push_back(layout[s].offset - units[indices[s]].begin);
  return offsets;
}

namespace {

class FlatUnitAccess : public UnitAccess {
 public:
  FlatUnitAccess(float* params, float* grads, std::vector<ParameterUnit> units)
      : params_(params), grads_(grads), units_(std::move(units)) {}
  const float* Parameters(size_t unit) override { return params_ + units_.at(unit).begin; }
  void ParametersDone(size_t) override {}
  float* Gradients(size_t unit) override { return grads_ + units_.at(unit).begin; }
  void GradientsDone(size_t) override {}

 private:
  float* params_;
  float* grads_;
  std::vector<ParameterUnit> units_;
};

}  // namespace

std::unique_ptr<UnitAccess> MakeFlatUnitAccess(float* params, float* grads, std::vector<ParameterUnit> units) {
  return std::make_unique<FlatUnitAccess>(params, grads, std::move(units));
}

std::vector<TensorSlot> MakeLayout(const ModelConfig& config) {
  const size_t channels = config.d_model;
  const size_t hidden = static_cast<size_t>(config.mlp_ratio) * channels;
  std::vector<TensorSlot> layout;
  size_t offset = 0;
  auto add = [&](std::string name, size_t count, int layer, bool decay) {
    layout.push_back(TensorSlot{std::move(name), offset, count, layer, decay});
    offset += count;
  };
  add("wte", static_cast<size_t>(config.vocab_padded) * channels, -1, true);  // (Vp, C)
  add("wpe", static_cast<size_t>(config.seq) * channels, -1, true);           // (T, C)
  for (int l = 0; l < config.layers; ++l) {
    // Appended piece by piece: "h" + std::to_string(l) trips GCC 12's false -Wrestrict positive.
    std::string prefix = "h";
    prefix += std::to_string(l);
    prefix += '.';
    add(prefix + "ln1.weight", channels, l, false);                    // (C)
    add(prefix + "ln1.bias", channels, l, false);                      // (C)
    add(prefix + "attn.qkv.weight", 3 * channels * channels, l, true);  // (3C, C)
    add(prefix + "attn.qkv.bias", 3 * channels, l, false);             // (3C)
    add(prefix + "attn.proj.weight", channels * channels, l, true);    // (C, C)
    add(prefix + "attn.proj.bias", channels, l, false);                // (C)
    add(prefix + "ln2.weight", channels, l, false);                    // (C)
    add(prefix + "ln2.bias", channels, l, false);                      // (C)
    if (IsMoeBlock(config, l)) {
      const size_t experts = config.moe->experts, ffn = config.moe->expert_ffn;
      add(prefix + "moe.fc.weight", experts * ffn * channels, l, true);    // (E, F, C)
      add(prefix + "moe.fc.bias", experts * ffn, l, false);                // (E, F)
      add(prefix + "moe.proj.weight", experts * channels * ffn, l, true);  // (E, C, F)
      add(prefix + "moe.proj.bias", experts * channels, l, false);         // (E, C)
      add(prefix + "moe.router.weight", experts * channels, l, true);      // (E, C)
    } else {
      add(prefix + "mlp.fc.weight", hidden * channels, l, true);    // (4C, C)
      add(prefix + "mlp.fc.bias", hidden, l, false);                // (4C)
      add(prefix + "mlp.proj.weight", channels * hidden, l, true);  // (C, 4C)
      add(prefix + "mlp.proj.bias", channels, l, false);            // (C)
      add(prefix + "moe.router.weight", 0, l, true);                // none: a dense block
    }
  }
  add("lnf.weight", channels, -1, false);  // (C)
  add("lnf.bias", channels, -1, false);    // (C)
  return layout;
}

void InitializeParameterRange(const ModelConfig& config, const std::vector<TensorSlot>& layout, uint64_t seed,
                              size_t begin, size_t end, float* out) {
  // Work in pieces of at most 1 Mi elements (a few ms each), so that every thread gets some of a large slot.
  constexpr size_t kPieceElements = size_t{1} << 20;
  struct Piece {
    size_t slot, begin, end;  // within the slot
  };
  const std::vector<SlotFill> fills = SlotFills(config, layout);
  std::vector<Piece> pieces;
  for (size_t s = 0; s < layout.size(); ++s) {
    const size_t offset = layout[s].offset;
    const size_t low = std::max(begin, offset), high = std::min(end, offset + layout[s].count);
    for (size_t b = low; b < high; b += kPieceElements) {
      pieces.push_back({s, b - offset, std::min(b + kPieceElements, high) - offset});
    }
  }
  ParallelFor(pieces.size(), CpuThreads(), [&](size_t i, int) {
    const Piece& piece = pieces[i];
    FillSlotPart(fills[piece.slot], seed, piece.begin, piece.end, out + layout[piece.slot].offset + piece.begin - begin);
  });
}

void InitializeParameters(const ModelConfig& config, const std::vector<TensorSlot>& layout, uint64_t seed,
                          float* params) {
  InitializeParameterRange(config, layout, seed, 0, layout.back().offset + layout.back().count, params);
}


void FillFsdpShards(const FsdpLayout& fsdp, float* store, const std::function<void(size_t, size_t, float*)>& fill) {
  std::fill(store, store + fsdp.store_elements, 0.0f);
  for (size_t u = 0; u < fsdp.units.size(); ++u) {
    const OptimizerShard& shard = fsdp.shards[u].shard;
    if (shard.end > shard.begin) {
      fill(fsdp.units[u].begin + shard.begin, fsdp.units[u].begin + shard.end, store + fsdp.shards[u].store);
    }
  }
}

void InitializeFsdpShards(const ModelConfig& config, const std::vector<TensorSlot>& layout, const FsdpLayout& fsdp,
                          uint64_t seed, float* store) {
  FillFsdpShards(fsdp, store, [&](size_t begin, size_t end, float* dest) {
    InitializeParameterRange(config, layout, seed, begin, end, dest);
  });
}

void CheckBatchShape(const ModelConfig& config, int batch, int seq) {
  if (batch < 1) throw InputError("batch size must be at least 1, got " + std::to_string(batch));
  if (seq < 1 || seq > config.seq) {
    throw InputError("sequence length " + std::to_string(seq) + " is outside 1.." + std::to_string(config.seq) +
                     ", the positions of model '" + config.name + "'");
  }
}

std::string CudaGraphGap(const ModelConfig& config, bool fsdp, bool pipeline_stages) {
  if (fsdp) return "fsdp (--parallel fsdp)";
  if (pipeline_stages) return "pipeline stages (--pipeline-parallel)";
  if (config.moe) return "mixture-of-experts blocks";
  return "";
}

}  // namespace tb
