// FSDP (ZeRO-3) on the train loop's side: the UnitAccess that a model sharded by MakeFsdpLayout reads its whole
// units through. A unit's parameters are all-gathered from every rank's shard into a working buffer when the model
// asks for them (and, with overlap, the next unit's ahead, while the model computes); a unit's gradients are
// accumulated into a working buffer and reduce-scattered (averaged) into this rank's shard as soon as they are
// final. Working buffers: the embeddings' and the final LayerNorm's (held from forward to the end of backward: the
// tied LM head reads wte last in forward and first in backward) and two per block role (the block in use and the
// next one), for the parameters and for the gradients alike.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "clock.h"
#include "communicator.h"
#include "transformer.h"

namespace tb {

// Seconds of one blocking collective issued by `issue`, once the model's work before it is done and until the
// communicator's is (a stream sync for NCCL; MPI's calls return when done): zero1's and blocking fsdp's.
template <typename Issue>
double TimeCollective(Communicator& comm, Transformer& model, const Issue& issue) {
  model.Synchronize();
  const double start = NowSeconds();
  issue();
  comm.Synchronize();
  return NowSeconds() - start;
}

// One step's FSDP communication on this rank.
struct FsdpTiming {
  double gather_wait_s = 0;    // host time the model waited for parameter all-gathers (exposed parameter gather)
  double gradient_wait_s = 0;  // host time waiting for reduce-scatters: for a gradient buffer to come free, and in
                               // Finish for the last ones (exposed gradient sync)
  double comm_total_s = 0;     // every collective's start to completion, summed
  uint64_t gathered_bytes = 0;   // whole units all-gathered (ranks x count x 4 bytes each)
  uint64_t scattered_bytes = 0;  // whole units reduce-scattered
};

class FsdpGatherer final : public UnitAccess {
 public:
  // `model` was made with MakeFsdpLayout(layout, comm.size(), comm.rank()); its sharded buffers are in the memory
  // `comm` moves. overlap = false: every collective blocking, when the model reaches it (nothing prefetched).
  FsdpGatherer(Communicator& comm, Transformer& model, bool overlap);
  ~FsdpGatherer() override;

  // Starts a step, or one of its micro-batches under gradient accumulation (after the last one's Finish): the
  // first writes this rank's gradient shards, later ones (accumulate) add to them (reduce-scattering into a
  // scratch shard, added once it has arrived).
  void BeginStep(bool accumulate = false);
  // Waits for the reduce-scatters still in flight; returns the step's timing.
  FsdpTiming Finish();
  // The host time waited so far in this step (gathers and gradient buffers): what a phase timed around the model's
  // calls must give back to comm_exposed.
  double waited_s() const { return timing_.gather_wait_s + timing_.gradient_wait_s; }
  // Bytes of the working buffers (not part of ZeRO's 16Ψ/N).
  uint64_t working_bytes() const;

  const float* Parameters(size_t unit) override;
  void ParametersDone(size_t unit) override;
  float* Gradients(size_t unit) override;
  void GradientsDone(size_t unit) override;

 private:
  struct Slot {
    std::unique_ptr<CommBuffer> buffer;
    long unit = -1;                  // the unit it holds (or is receiving); -1: free
    std::unique_ptr<PendingOp> op;   // its all-gather, or its reduce-scatter, in flight
    bool in_use = false;             // parameters handed out and not yet done
    // Accumulating gradients: the reduce-scatter lands in `scratch` and is added to `add_to` (count floats) when
    // settled.
    std::unique_ptr<CommBuffer> scratch;
    float* add_to = nullptr;
    size_t add_count = 0;
  };
  // Where unit `unit`'s reduce-scatter of `slot` lands: this rank's gradient shard, or the slot's scratch when
  // accumulating.
  float* ScatterTarget(Slot& slot, size_t unit);
  // Adds a settled slot's scratch into its shard (accumulating).
  void AddScattered(Slot& slot);
  size_t SlotOf(size_t unit) const;
  void StartGather(size_t unit);
  // Waits for `slot`'s operation, adding the wait to `wait_s`.
  void Settle(Slot& slot, double& wait_s);
  void Poll();  // lets the operations in flight progress (MPI progresses them inside its calls)

  Communicator& comm_;
  Transformer& model_;
  const FsdpLayout& fsdp_;
  bool overlap_;
  std::vector<size_t> order_;  // the units in the order a step asks for them
  size_t cursor_ = 0;          // order_'s next unit
  std::vector<Slot> params_;   // embeddings, final LayerNorm, block roles 0 and 1
  std::vector<Slot> grads_;
  bool accumulate_ = false;
  FsdpTiming timing_;
};

}  // namespace tb
