#include "train_loop.h"

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

// Seconds of one blocking collective issued by `issue`, once the model's work before it is done and until the
// communicator's is (a stream sync for NCCL; MPI's calls return when done).
template <typename Issue>
double TimeCollective(Communicator& comm, Transformer& model, const Issue& issue) {
  model.Synchronize();
  const double start = NowSeconds();
  issue();
  comm.Synchronize();
  return NowSeconds() - start;
}

// Backward (calling `ready` as each tensor's gradient is final), `finish()` (the wait for what backward left in flight:
// comm_exposed) and AdamW, the clock marked after each; returns what finish returned.
template <typename Finish>
auto BackwardThenOptimizer(Transformer& model, const TrainLoopOptions& o, int step, PhaseClock& clock,
                           const std::function<void(size_t)>& ready, const Finish& finish) {
  model.Backward(ready);
  clock.Mark();  // backward
  auto result = finish();
  clock.Mark();  // comm_exposed
  model.AdamWStep(o.adamw, step + 1);
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
  model.AdamWStep(o.adamw, step + 1);
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
  const FsdpTiming timing = BackwardThenOptimizer(model, o, step, clock, [](size_t) {}, [&] {
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
      model, o, step, clock, [&](size_t slot) { reducer.TensorReady(slot, model.stream()); },
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

}  // namespace

// The step's communication from the end of forward to the optimizer, in the loop's mode; the seconds forward and
// backward waited inside the model for fsdp's gatherer (0 in the other modes).
struct ModeStep {
  double forward_waits_s = 0;
  double backward_waits_s = 0;
};

std::vector<StepRecord> RunTrainingSteps(Communicator& comm, Transformer& model, const TrainLoopOptions& o) {
  const ModelConfig& config = model.config();
  const ParallelMode mode = o.parallel;
  if (mode == ParallelMode::kZero1) CheckZeroOneShard(comm, model);
  std::unique_ptr<BucketedAllReduce> reducer;
  std::unique_ptr<FsdpGatherer> gatherer;
  if (mode == ParallelMode::kDp) {
    reducer = std::make_unique<BucketedAllReduce>(comm, model.gradients(), DataType::kFloat32,
                                                  GradientTensors(model.layout()),
                                                  static_cast<size_t>(o.bucket_mb * 1024 * 1024), o.overlap);
  } else if (mode == ParallelMode::kFsdp) {
    gatherer = std::make_unique<FsdpGatherer>(comm, model, o.overlap);
  }
  if (o.working_bytes) *o.working_bytes = gatherer ? gatherer->working_bytes() : 0;
  // Device phases are timed where they run (CUDA events on the model's stream); the host clock on the CPU.
  std::unique_ptr<PhaseClock> clock = model.MakePhaseClock();
  std::vector<int32_t> inputs, targets;
  TokenBatch synthetic;
  std::vector<StepRecord> records;
  for (int step = o.first_step; step < o.warmup_steps + o.steps; ++step) {
    if (o.stop_requested && o.stop_requested()) break;
    Watchdog::Scope guard(o.watchdog, [&] { return "training step " + std::to_string(step) + " on " +
                                                   std::to_string(comm.size()) + " ranks"; });
    if (step == o.first_step && o.at_first_step) o.at_first_step();
    StepRecord r;
    r.step = step;
    r.warmup = step < o.warmup_steps;
    r.checkpoint_writing = o.checkpoint_writing && o.checkpoint_writing();
    const double step_start = NowSeconds();

    StepBatch batch;
    if (o.next_batch) {
      batch = o.next_batch(step);
    } else {  // made on demand: its making is the wait
      SyntheticBatch(o.data_seed, comm.rank(), step, o.micro_batch, o.seq, config.vocab, inputs, targets);
      synthetic = TokenArrays(inputs.data(), targets.data(), o.micro_batch, o.seq);
      batch.tokens = &synthetic;
    }
    r.data_wait_s = NowSeconds() - step_start;
    r.data_bytes = batch.bytes_read;
    r.data_read_MBps = batch.read_MBps;
    r.loader_queue_depth = batch.queue_depth;

    clock->Mark();
    if (!batch.tokens || batch.tokens->batch != o.micro_batch || batch.tokens->seq != o.seq) {
      throw RuntimeError("the batch source gave a batch of another shape than micro_batch x seq");
    }
    model.SetBatch(*batch.tokens);
    clock->Mark();  // h2d
    model.ZeroGradients();
    if (gatherer) gatherer->BeginStep();
    model.Forward();
    clock->Mark();  // forward
    const ActivationComm forward_activations = model.TakeActivationComm();
    ModeStep waits;
    if (mode == ParallelMode::kZero1) {
      model.Backward([](size_t) {});
      clock->Mark();  // backward
      r.comm_total_s = ZeroOneStep(comm, model, o, step, *clock, r);
      r.comm_intra_s = r.comm_inter_s = std::nan("");
    } else if (mode == ParallelMode::kFsdp) {
      waits.forward_waits_s = gatherer->waited_s();
      waits.backward_waits_s = FsdpStep(*gatherer, model, o, step, *clock, r);
      r.comm_intra_s = r.comm_inter_s = std::nan("");
    } else {
      DataParallelStep(*reducer, model, o, step, *clock, r);
    }

    // Taken after the backward phase (everything since forward's end is backward's: the collectives after it are the
    // loop's own).
    const ActivationComm backward_activations = model.TakeActivationComm();
    waits.forward_waits_s += forward_activations.seconds;
    waits.backward_waits_s += backward_activations.seconds;
    r.comm_activation_s = forward_activations.seconds + backward_activations.seconds;
    r.comm_total_s += r.comm_activation_s;
    r.activation_allreduce_bytes = forward_activations.bytes + backward_activations.bytes;

    const std::vector<double> phases = clock->Intervals();  // waits for the device
    r.h2d_s = phases[0];
    // fsdp's waits for the gatherer and tensor parallel's activation all-reduces are exposed communication, not
    // forward and backward.
    r.forward_s = phases[1] - waits.forward_waits_s;
    r.backward_s = phases[2] - waits.backward_waits_s;
    const bool zero1 = mode == ParallelMode::kZero1;
    r.comm_exposed_s = phases[3] + waits.forward_waits_s + waits.backward_waits_s + (zero1 ? phases[5] : 0.0);
    if (zero1) r.comm_gather_exposed_s = phases[5];  // the reduce-scatter and the all-gather
    r.optimizer_s = phases[4];
    r.loss = model.Loss();
    if (o.in_each_step) o.in_each_step();
    if (o.checkpoint) {
      const double checkpoint_start = NowSeconds();
      o.checkpoint(step);
      r.checkpoint_stall_s = NowSeconds() - checkpoint_start;
    }
    r.step_s = NowSeconds() - step_start;
    r.tokens = static_cast<int64_t>(o.micro_batch) * o.seq / model.tensor_parallel();
    records.push_back(r);
    if (o.on_step) o.on_step(r);
  }
  return records;
}

}  // namespace tb
