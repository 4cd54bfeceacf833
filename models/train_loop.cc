#include "train_loop.h"

#include "clock.h"
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

std::vector<StepRecord> RunTrainingSteps(Communicator& comm, Transformer& model, const TrainLoopOptions& o) {
  const ModelConfig& config = model.config();
  BucketedAllReduce reducer(comm, model.gradients(), DataType::kFloat32, GradientTensors(model.layout()),
                            static_cast<size_t>(o.bucket_mb * 1024 * 1024), o.overlap);
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
    model.Forward();
    clock->Mark();  // forward
    reducer.Begin();
    model.Backward([&](size_t slot) { reducer.TensorReady(slot, model.stream()); });
    clock->Mark();  // backward
    // Waits on the host for every bucket, so the optimizer issued next reads reduced gradients; on a device the
    // mark after it lands when the last bucket is done, and the interval is what backward did not hide.
    const BucketTiming comm_timing = reducer.Finish(model.stream());
    clock->Mark();  // comm_exposed
    model.AdamWStep(o.adamw, step + 1);
    clock->Mark();  // optimizer

    const std::vector<double> phases = clock->Intervals();  // waits for the device
    r.h2d_s = phases[0];
    r.forward_s = phases[1];
    r.backward_s = phases[2];
    r.comm_exposed_s = phases[3];
    r.optimizer_s = phases[4];
    r.comm_total_s = comm_timing.comm_total_s;
    r.comm_intra_s = comm_timing.comm_intra_s;
    r.comm_inter_s = comm_timing.comm_inter_s;
    r.loss = model.Loss();
    if (o.in_each_step) o.in_each_step();
    if (o.checkpoint) {
      const double checkpoint_start = NowSeconds();
      o.checkpoint(step);
      r.checkpoint_stall_s = NowSeconds() - checkpoint_start;
    }
    r.step_s = NowSeconds() - step_start;
    r.tokens = static_cast<int64_t>(o.micro_batch) * o.seq;
    records.push_back(r);
    if (o.on_step) o.on_step(r);
  }
  return records;
}

}  // namespace tb
