#include "fsdp.h"

#include <stdexcept>
#include <string>

#include "clock.h"

namespace tb {
namespace {

constexpr size_t kSlots = 4;  // embeddings, final LayerNorm, two block roles

}  // namespace

FsdpGatherer::FsdpGatherer(Communicator& comm, Transformer& model, bool overlap)
    : comm_(comm), model_(model), fsdp_(model.placement().fsdp), overlap_(overlap), params_(kSlots), grads_(kSlots) {
  if (!fsdp_.enabled() || fsdp_.ranks != comm.size() || fsdp_.rank != comm.rank()) {
    throw std::logic_error("fsdp: the model's shards are not this communicator's");
  }
  const int layers = model.config().layers;
  order_.push_back(kEmbeddingUnit);
  for (int l = 0; l < layers; ++l) order_.push_back(BlockUnit(l));
  order_.push_back(FinalNormUnit(layers));
  for (int l = layers - 1; l >= 0; --l) order_.push_back(BlockUnit(l));
  for (size_t u = 0; u < fsdp_.units.size(); ++u) {
    const size_t bytes = fsdp_.shards[u].shard.capacity * sizeof(float);
    for (std::vector<Slot>* slots : {&params_, &grads_}) {
      Slot& slot = (*slots)[SlotOf(u)];
      if (!slot.buffer || slot.buffer->bytes() < bytes) slot.buffer = comm.Allocate(bytes);
    }
  }
  model.SetUnitAccess(this);
}

FsdpGatherer::~FsdpGatherer() { model_.SetUnitAccess(nullptr); }

size_t FsdpGatherer::SlotOf(size_t unit) const {
  if (unit == kEmbeddingUnit) return 0;
  if (unit + 1 == fsdp_.units.size()) return 1;
  return 2 + (unit - BlockUnit(0)) % 2;
}

uint64_t FsdpGatherer::working_bytes() const {
  uint64_t bytes = 0;
  for (const std::vector<Slot>* slots : {&params_, &grads_}) {
    for (const Slot& slot : *slots) bytes += slot.buffer ? slot.buffer->bytes() : 0;
  }
  return bytes;
}

void FsdpGatherer::BeginStep(bool accumulate) {
  for (Slot& slot : grads_) {
    if (slot.op) throw std::logic_error("fsdp: a step began before the last one's Finish");
    slot.unit = -1;
  }
  cursor_ = 0;
  if (!accumulate) timing_ = FsdpTiming{};  // a step's micro-batches add up to its timing
  accumulate_ = accumulate;
}

void FsdpGatherer::Poll() {
  for (std::vector<Slot>* slots : {&params_, &grads_}) {
    for (Slot& slot : *slots) {
      if (slot.op) slot.op->Test();
    }
  }
}

void FsdpGatherer::Settle(Slot& slot, double& wait_s) {
  if (!slot.op) return;
  const double start = NowSeconds();
  slot.op->Wait();
  wait_s += NowSeconds() - start;
  timing_.comm_total_s += slot.op->Seconds();
  slot.op.reset();
}

void FsdpGatherer::StartGather(size_t unit) {
  Slot& slot = params_[SlotOf(unit)];
  const UnitShard& shard = fsdp_.shards[unit];
  const float* mine = model_.parameters() + shard.store;
  float* whole = static_cast<float*>(slot.buffer->data());
  slot.unit = static_cast<long>(unit);
  timing_.gathered_bytes += shard.shard.capacity * sizeof(float);
  if (overlap_) {
    slot.op = comm_.StartAllGather(mine, whole, shard.count, DataType::kFloat32, model_.stream());
    return;
  }
  const double seconds =
      TimeCollective(comm_, model_, [&] { comm_.AllGather(mine, whole, shard.count, DataType::kFloat32); });
  timing_.gather_wait_s += seconds;
  timing_.comm_total_s += seconds;
}

const float* FsdpGatherer::Parameters(size_t unit) {
  Poll();
  Slot& slot = params_.at(SlotOf(unit));
  if (slot.unit != static_cast<long>(unit)) {
    if (slot.in_use || slot.op) throw std::logic_error("fsdp: unit " + std::to_string(unit) + "'s buffer is busy");
    StartGather(unit);
  }
  Settle(slot, timing_.gather_wait_s);
  slot.in_use = true;
  if (cursor_ < order_.size() && order_[cursor_] == unit) {
    ++cursor_;
    if (overlap_ && cursor_ < order_.size()) {  // the next unit's gather, while this one computes
      const size_t next = order_[cursor_];
      const Slot& target = params_[SlotOf(next)];
      if (target.unit < 0 && !target.in_use) StartGather(next);
    }
  }
  return static_cast<const float*>(slot.buffer->data());
}

void FsdpGatherer::ParametersDone(size_t unit) {
  Slot& slot = params_.at(SlotOf(unit));
  if (slot.unit != static_cast<long>(unit)) throw std::logic_error("fsdp: unit " + std::to_string(unit) + " not held");
  slot.in_use = false;
  slot.unit = -1;  // freed: asked for again, it is gathered again
}

float* FsdpGatherer::Gradients(size_t unit) {
  Poll();
  Slot& slot = grads_.at(SlotOf(unit));
  float* whole = static_cast<float*>(slot.buffer->data());
  if (slot.unit == static_cast<long>(unit)) return whole;  // asked again in the same step (the embeddings)
  Settle(slot, timing_.gradient_wait_s);  // the unit before it in this buffer still being reduce-scattered
  AddScattered(slot);
  // Backward writes the unit's elements; the padding up to its capacity, reduce-scattered with them, must be zero
  // (another unit's gradients may have been there). After that reduce-scatter, in the model's order.
  const size_t elements = fsdp_.units[unit].elements();
  model_.ClearFloats(whole + elements, fsdp_.shards[unit].shard.capacity - elements);
  slot.unit = static_cast<long>(unit);
  return whole;
}

float* FsdpGatherer::ScatterTarget(Slot& slot, size_t unit) {
  const UnitShard& shard = fsdp_.shards[unit];
  float* mine = model_.gradients() + shard.store;
  if (!accumulate_) return mine;
  const size_t bytes = shard.count * sizeof(float);
  if (!slot.scratch || slot.scratch->bytes() < bytes) slot.scratch = comm_.Allocate(bytes);
  slot.add_to = mine;
  slot.add_count = shard.count;
  return static_cast<float*>(slot.scratch->data());
}

void FsdpGatherer::AddScattered(Slot& slot) {
  if (slot.add_to == nullptr) return;
  model_.AddFloats(slot.add_to, static_cast<const float*>(slot.scratch->data()), slot.add_count);
  slot.add_to = nullptr;
}

void FsdpGatherer::GradientsDone(size_t unit) {
  Slot& slot = grads_.at(SlotOf(unit));
  if (slot.unit != static_cast<long>(unit)) throw std::logic_error("fsdp: unit " + std::to_string(unit) + " has no gradients");
  const UnitShard& shard = fsdp_.shards[unit];
  const float* whole = static_cast<const float*>(slot.buffer->data());
  float* target = ScatterTarget(slot, unit);
  timing_.scattered_bytes += shard.shard.capacity * sizeof(float);
  if (overlap_) {
    slot.op = comm_.StartReduceScatter(whole, target, shard.count, DataType::kFloat32, ReduceOp::kAvg, model_.stream());
    return;
  }
  const double seconds = TimeCollective(
      comm_, model_, [&] { comm_.ReduceScatter(whole, target, shard.count, DataType::kFloat32, ReduceOp::kAvg); });
  timing_.gradient_wait_s += seconds;
  timing_.comm_total_s += seconds;
  AddScattered(slot);
}

FsdpTiming FsdpGatherer::Finish() {
  for (Slot& slot : grads_) {
    Settle(slot, timing_.gradient_wait_s);
    AddScattered(slot);
  }
  for (Slot& slot : params_) {
    if (slot.op || slot.in_use) throw std::logic_error("fsdp: a parameter gather outlived its step");
  }
  return timing_;
}

}  // namespace tb
