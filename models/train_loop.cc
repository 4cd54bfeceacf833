#include "train_loop.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include "clock.h"
#include "fsdp.h"
#include "error.h"
#include "gradient_buckets.h"
#include "random.h"

namespace tb {

std::vector<GradientTensor> GradientTensors(const std::vector<TensorSlot>& layout) {
  std::vector<GradientTensor> tensors;
  for (const TensorSlot& slot : layout) tensors.push_back({slot.offset, slot.count});
  return tensors;
}

void SyntheticBatch(uint64_t seed, int rank, int step, int batch, int seq, int vocab, std::vector<int32_t>& inputs,
                    std::vector<int32_t>& targets) {
  uint64_t state = seed ^ (static_cast<uint64_t>(rank) << 40) ^ (static_cast<uint64_t>(step) << 8);
  inputs.resize(static_cast<size_t>(batch) * seq);
  targets.resize(inputs.size());
  for (int b = 0; b < batch; ++b) {
    int32_t previous = static_cast<int32_t>(NextSplitMix64(state) % static_cast<uint64_t>(vocab));
    for (int t = 0; t < seq; ++t) {
      const int32_t next = static_cast<int32_t>(NextSplitMix64(state) % static_cast<uint64_t>(vocab));
      inputs[static_cast<size_t>(b) * seq + t] = previous;
      targets[static_cast<size_t>(b) * seq + t] = next;
      previous = next;
    }
  }
}

namespace {

// The optimizer step, after the before_optimizer hook; the hook's seconds go to r.checkpoint_stall_s (TakePhases
// takes them out of the optimizer's interval, which holds them).
void OptimizerStep(Transformer& model, const TrainLoopOptions& o, int step, StepRecord& r) {
  if (o.before_optimizer) {
    const double start = NowSeconds();
    o.before_optimizer();
    r.checkpoint_stall_s += NowSeconds() - start;
  }
  model.AdamWStep(o.adamw, step + 1);
}

// Backward (calling `ready` as each tensor's gradient is final), `finish()` (the wait for what backward left in flight:
// comm_exposed) and AdamW, the clock marked after each; returns what finish returned.
template <typename Finish>
auto BackwardThenOptimizer(Transformer& model, const TrainLoopOptions& o, int step, PhaseClock& clock, StepRecord& r,
                           const std::function<void(size_t)>& ready, const Finish& finish) {
  model.Backward(ready);
  clock.Mark();  // backward
  auto result = finish();
  clock.Mark();  // comm_exposed
  OptimizerStep(model, o, step, r);
  clock.Mark();  // optimizer
  return result;
}

// ZeRO-1 after backward: the gradients reduce-scattered (averaged) in place, so that this rank holds its shard's
// (NCCL's in-place layout: rank r's block at r x shard), AdamW on the shard, and the updated shard all-gathered in
// place into every rank's parameters. Marks the clock after the reduce-scatter (comm_exposed), the optimizer, and
// the all-gather; returns the two collectives' seconds.
double ZeroOneStep(Communicator& comm, Transformer& model, const TrainLoopOptions& o, int step, PhaseClock& clock,
                   StepRecord& r) {
  const OptimizerShard& shard = model.optimizer_shard();
  const size_t count = shard.capacity / static_cast<size_t>(comm.size());
  const size_t own = count * static_cast<size_t>(comm.rank());
  float* grads = model.gradients();
  float* params = model.parameters();
  double seconds = TimeCollective(comm, model, [&] {
    comm.ReduceScatter(grads, grads + own, count, DataType::kFloat32, ReduceOp::kAvg);
  });
  clock.Mark();  // comm_exposed: the reduce-scatter
  OptimizerStep(model, o, step, r);
  clock.Mark();  // optimizer
  seconds += TimeCollective(comm, model, [&] { comm.AllGather(params + own, params, count, DataType::kFloat32); });
  model.ParametersChanged();
  clock.Mark();  // comm_exposed: the all-gather
  r.reduce_scatter_bytes = r.all_gather_bytes = shard.capacity * sizeof(float);
  return seconds;
}

// FSDP from forward's end on: backward with the gatherer's re-gathers and reduce-scatters, the wait for the last
// reduce-scatters, AdamW on the shards; marks the clock after backward, the wait (comm_exposed) and the optimizer.
// Returns the host seconds backward waited for the gatherer.
double FsdpStep(FsdpGatherer& gatherer, Transformer& model, const TrainLoopOptions& o, int step, PhaseClock& clock,
                StepRecord& r) {
  const double forward_waits = gatherer.waited_s();
  double backward_waits = 0;
  const FsdpTiming timing = BackwardThenOptimizer(model, o, step, clock, r, [](size_t) {}, [&] {
    backward_waits = gatherer.waited_s() - forward_waits;
    return gatherer.Finish();  // the last reduce-scatters
  });
  r.comm_total_s = timing.comm_total_s;
  r.comm_gather_exposed_s = timing.gather_wait_s;
  r.reduce_scatter_bytes = timing.scattered_bytes;
  r.all_gather_bytes = timing.gathered_bytes;
  return backward_waits;
}

// Data parallel from backward on: the buckets all-reduced as their gradients become final, the wait for the rest,
// AdamW; marks the clock after backward, the wait (comm_exposed) and the optimizer, and sets r's comm times.
void DataParallelStep(BucketedAllReduce& reducer, Transformer& model, const TrainLoopOptions& o, int step,
                      PhaseClock& clock, StepRecord& r) {
  reducer.Begin();
  // Finish waits on the host for every bucket, so the optimizer issued next reads reduced gradients; on a device the
  // mark after it lands when the last bucket is done, and the interval is what backward did not hide.
  const BucketTiming comm_timing = BackwardThenOptimizer(
      model, o, step, clock, r, [&](size_t slot) { reducer.TensorReady(slot, model.stream()); },
      [&] { return reducer.Finish(model.stream()); });
  r.comm_total_s = comm_timing.comm_total_s;
  r.comm_intra_s = comm_timing.comm_intra_s;
  r.comm_inter_s = comm_timing.comm_inter_s;
  r.allreduce_bytes = comm_timing.bytes;
}

// Throws unless the model holds this rank's ZeRO-1 shard of its elements.
void CheckZeroOneShard(const Communicator& comm, const Transformer& model) {
  const OptimizerShard want = ShardOf(model.parameter_elements(), comm.size(), comm.rank());
  const OptimizerShard& have = model.optimizer_shard();
  if (have.capacity != want.capacity || have.begin != want.begin || have.end != want.end) {
    throw std::logic_error("zero1: the model's optimizer shard is not this rank's ShardOf");
  }
}

// The step's communication from the end of forward to the optimizer, in the loop's mode: the host seconds forward and
// backward waited inside the model for communication (fsdp's gatherer, tensor parallel's activation all-reduces).
struct ModeStep {
  double forward_waits_s = 0;
  double backward_waits_s = 0;
};

// One rank's training steps, each read top to bottom in Run.
class TrainingSteps {
 public:
  TrainingSteps(Communicator& comm, Transformer& model, const TrainLoopOptions& o)
      : comm_(comm), model_(model), o_(o), clock_(model.MakePhaseClock()) {
    if (o.parallel == ParallelMode::kZero1) CheckZeroOneShard(comm, model);
    if (o.parallel == ParallelMode::kDp) {
      reducer_ = std::make_unique<BucketedAllReduce>(comm, model.gradients(), DataType::kFloat32,
                                                     GradientTensors(model.layout()),
                                                     static_cast<size_t>(o.bucket_mb * 1024 * 1024), o.overlap);
    } else if (o.parallel == ParallelMode::kFsdp) {
      gatherer_ = std::make_unique<FsdpGatherer>(comm, model, o.overlap);
    }
    if (o.working_bytes) *o.working_bytes = gatherer_ ? gatherer_->working_bytes() : 0;
  }

  StepRecord Run(int step) {
    StepRecord r;
    r.step = step;
    r.warmup = step < o_.warmup_steps;
    r.checkpoint_writing = o_.checkpoint_writing && o_.checkpoint_writing();
    const double step_start = NowSeconds();
    const TokenBatch& batch = FetchBatch(step, r);
    r.data_wait_s = NowSeconds() - step_start;
    clock_->Mark();
    model_.SetBatch(batch);
    clock_->Mark();  // h2d
    model_.ZeroGradients();
    if (gatherer_) gatherer_->BeginStep();
    model_.Forward();
    clock_->Mark();  // forward
    const ActivationComm forward_activations = model_.TakeActivationComm();
    ModeStep waits = BackwardToOptimizer(step, r);
    waits.forward_waits_s += forward_activations.seconds;
    AddActivations(forward_activations, r);
    TakePhases(waits, r);
    r.loss = model_.Loss();
    if (o_.in_each_step) o_.in_each_step();
    if (o_.checkpoint) {
      const double checkpoint_start = NowSeconds();
      o_.checkpoint(step);
      r.checkpoint_stall_s += NowSeconds() - checkpoint_start;  // beside the fence before the optimizer
    }
    r.step_s = NowSeconds() - step_start;
    r.tokens = static_cast<int64_t>(o_.micro_batch) * o_.seq / model_.tensor_parallel();
    return r;
  }

 private:
  // The step's batch, from the loader or made on demand (its making is the wait).
  const TokenBatch& FetchBatch(int step, StepRecord& r) {
    StepBatch batch;
    if (o_.next_batch) {
      batch = o_.next_batch(step);
    } else {
      SyntheticBatch(o_.data_seed, comm_.rank(), step, o_.micro_batch, o_.seq, model_.config().vocab, inputs_,
                     targets_);
      synthetic_ = TokenArrays(inputs_.data(), targets_.data(), o_.micro_batch, o_.seq);
      batch.tokens = &synthetic_;
    }
    r.data_bytes = batch.bytes_read;
    r.data_read_MBps = batch.read_MBps;
    r.loader_queue_depth = batch.queue_depth;
    if (!batch.tokens || batch.tokens->batch != o_.micro_batch || batch.tokens->seq != o_.seq) {
      throw RuntimeError("the batch source gave a batch of another shape than micro_batch x seq");
    }
    return *batch.tokens;
  }

  // Backward, the mode's communication and AdamW, the clock marked after backward, comm_exposed and the optimizer
  // (and zero1's all-gather).
  ModeStep BackwardToOptimizer(int step, StepRecord& r) {
    ModeStep waits;
    if (o_.parallel == ParallelMode::kZero1) {
      model_.Backward([](size_t) {});
      clock_->Mark();  // backward
      r.comm_total_s = ZeroOneStep(comm_, model_, o_, step, *clock_, r);
      r.comm_intra_s = r.comm_inter_s = std::nan("");
    } else if (o_.parallel == ParallelMode::kFsdp) {
      waits.forward_waits_s = gatherer_->waited_s();
      waits.backward_waits_s = FsdpStep(*gatherer_, model_, o_, step, *clock_, r);
      r.comm_intra_s = r.comm_inter_s = std::nan("");
    } else {
      DataParallelStep(*reducer_, model_, o_, step, *clock_, r);
    }
    // Taken after the optimizer: the collectives after backward are the loop's own, so they are backward's.
    const ActivationComm backward_activations = model_.TakeActivationComm();
    waits.backward_waits_s += backward_activations.seconds;
    AddActivations(backward_activations, r);
    return waits;
  }

  static void AddActivations(const ActivationComm& a, StepRecord& r) {
    r.comm_activation_s += a.seconds;
    r.comm_total_s += a.seconds;
    r.activation_allreduce_bytes += a.bytes;
  }

  // The phases from the clock: the waits inside forward and backward are exposed communication, not compute.
  void TakePhases(const ModeStep& waits, StepRecord& r) {
    const std::vector<double> phases = clock_->Intervals();  // waits for the device
    r.h2d_s = phases[0];
    r.forward_s = phases[1] - waits.forward_waits_s;
    r.backward_s = phases[2] - waits.backward_waits_s;
    const bool zero1 = o_.parallel == ParallelMode::kZero1;
    r.comm_exposed_s = phases[3] + waits.forward_waits_s + waits.backward_waits_s + (zero1 ? phases[5] : 0.0);
    if (zero1) r.comm_gather_exposed_s = phases[5];  // the reduce-scatter and the all-gather
    // The fence before the optimizer (the only checkpoint stall so far in the step) ran inside its interval.
    r.optimizer_s = std::max(0.0, phases[4] - r.checkpoint_stall_s);
  }

  Communicator& comm_;
  Transformer& model_;
  const TrainLoopOptions& o_;
  // Device phases are timed where they run (CUDA events on the model's stream); the host clock on the CPU.
  std::unique_ptr<PhaseClock> clock_;
  std::unique_ptr<BucketedAllReduce> reducer_;  // dp
  std::unique_ptr<FsdpGatherer> gatherer_;      // fsdp
  std::vector<int32_t> inputs_, targets_;
  TokenBatch synthetic_;
};

}  // namespace

std::vector<StepRecord> RunTrainingSteps(Communicator& comm, Transformer& model, const TrainLoopOptions& o) {
  TrainingSteps steps(comm, model, o);
  std::vector<StepRecord> records;
  for (int step = o.first_step; step < o.warmup_steps + o.steps; ++step) {
    if (o.stop_requested && o.stop_requested()) break;
    Watchdog::Scope guard(o.watchdog, [&] { return "training step " + std::to_string(step) + " on " +
                                                   std::to_string(comm.size()) + " ranks"; });
    if (step == o.first_step && o.at_first_step) o.at_first_step();
    records.push_back(steps.Run(step));
    if (o.on_step) o.on_step(records.back());
  }
  return records;
}

}  // namespace tb
