#include "train_loop.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include "clock.h"
#include "fsdp.h"
#include "error.h"
#include "gradient_buckets.h"
#include "moe_stats.h"
#include "random.h"
#include "tensor_parallel.h"

namespace tb {

std::vector<GradientTensor> GradientTensors(const std::vector<TensorSlot>& layout) {
  std::vector<GradientTensor> tensors;
  for (const TensorSlot& slot : layout) tensors.push_back({slot.offset, slot.count});
  return tensors;
}

std::vector<GradientTensor> DataParallelGradientTensors(const std::vector<TensorSlot>& layout, bool expert_parallel) {
  std::vector<GradientTensor> tensors = GradientTensors(layout);
  if (expert_parallel) {
    for (size_t s = 0; s < layout.size(); ++s) tensors[s].reduced = !IsExpertSlot(layout, s);
  }
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

// What each mark of the step's PhaseClock ends: the interval since the mark before it is that phase's.
enum class Phase { kStart, kH2d, kForward, kBackward, kExposed, kOptimizer, kGather, kPipeline };

// The step's clock with each mark's phase, so that micro-batches and modes add up their intervals by phase.
class PhaseMarks {
 public:
  explicit PhaseMarks(PhaseClock& clock) : clock_(clock) {}
  void Mark(Phase phase) {
    clock_.Mark();
    phases_.push_back(phase);
  }
  // Waits for the last mark; the seconds per phase since the last call (kStart's: the gaps before each micro-batch,
  // where the host fetched its batch, timed as data_wait instead).
  std::vector<double> Take() {
    const std::vector<double> intervals = clock_.Intervals();
    std::vector<double> seconds(static_cast<size_t>(Phase::kPipeline) + 1, 0.0);
    for (size_t i = 0; i < intervals.size(); ++i) seconds[static_cast<size_t>(phases_.at(i + 1))] += intervals[i];
    phases_.clear();
    return seconds;
  }

 private:
  PhaseClock& clock_;
  std::vector<Phase> phases_;
};

double Of(const std::vector<double>& seconds, Phase phase) { return seconds[static_cast<size_t>(phase)]; }

// The loop's host, or one with the defaults: synthetic tokens, no checkpoints, nothing injected, never stopped.
TrainLoopHost& HostOf(const TrainLoopOptions& o) {
  static TrainLoopHost defaults;
  return o.host != nullptr ? *o.host : defaults;
}

// The optimizer step, after the host's BeforeUpdate; its seconds go to r.checkpoint_stall_s (TakePhases takes them out
// of the optimizer's interval, which holds them).
void OptimizerStep(Transformer& model, const TrainLoopOptions& o, int step, StepRecord& r) {
  const double start = NowSeconds();
  HostOf(o).BeforeUpdate();
  r.checkpoint_stall_s += NowSeconds() - start;
  model.AdamWStep(o.adamw, step + 1);
}

// ZeRO-1 after the last backward: the gradients reduce-scattered (averaged) in place, so that this rank holds its
// shard's (NCCL's in-place layout: rank r's block at r x shard), AdamW on the shard, and the updated shard all-gathered
// in place into every rank's parameters. Marks the reduce-scatter (exposed), the optimizer, and the all-gather
// (gather); returns the two collectives' seconds.
double ZeroOneStep(Communicator& comm, Transformer& model, const TrainLoopOptions& o, int step, PhaseMarks& marks,
                   StepRecord& r) {
  const OptimizerShard& shard = model.placement().shard;
  const size_t count = shard.capacity / static_cast<size_t>(comm.size());
  const size_t own = count * static_cast<size_t>(comm.rank());
  float* grads = model.gradients();
  float* params = model.parameters();
  double seconds = TimeCollective(comm, model, [&] {
    comm.ReduceScatter(grads, grads + own, count, DataType::kFloat32, ReduceOp::kAvg);
  });
  marks.Mark(Phase::kExposed);
  OptimizerStep(model, o, step, r);
  marks.Mark(Phase::kOptimizer);
  seconds += TimeCollective(comm, model, [&] { comm.AllGather(params + own, params, count, DataType::kFloat32); });
  model.ParametersChanged();
  marks.Mark(Phase::kGather);
  r.reduce_scatter_bytes = r.all_gather_bytes = shard.capacity * sizeof(float);
  return seconds;
}

// Throws unless the model holds this rank's ZeRO-1 shard of its elements.
void CheckZeroOneShard(const Communicator& comm, const Transformer& model) {
  const OptimizerShard want = ShardOf(model.parameter_elements(), comm.size(), comm.rank());
  const OptimizerShard& have = model.placement().shard;
  if (have.capacity != want.capacity || have.begin != want.begin || have.end != want.end) {
    throw std::logic_error("zero1: the model's optimizer shard is not this rank's ShardOf");
  }
}

// The host seconds forward and backward waited inside the model for communication (fsdp's gatherer, tensor
// parallel's activation all-reduces): exposed communication, not compute.
struct ModeWaits {
  double forward_s = 0;
  double backward_s = 0;
};

// One rank's training steps, each read top to bottom in Run: grad_accum micro-batches of forward and backward (the
// gradients written by the first, added by the others), the mode's gradient sync, AdamW.
class TrainingSteps {
 public:
  TrainingSteps(Communicator& comm, Transformer& model, const TrainLoopOptions& o)
      : comm_(comm), model_(model), o_(o), clock_(model.MakePhaseClock()), marks_(*clock_),
        tensor_parallel_(TensorParallelStatsOf(model)), moe_(MoeStatsOf(model)), stage_(model.placement().stage) {
    moe_step_.Reset(MoeBlockCount(model.config()), model.config().moe ? model.config().moe->experts : 0);
    if (o.grad_accum < 1) throw std::logic_error("grad_accum must be at least 1");
    if (o.parallel == ParallelMode::kZero1) CheckZeroOneShard(comm, model);
    // One data-parallel rank has nothing to synchronise: no buckets (NCCL would still copy every gradient).
    if (o.parallel == ParallelMode::kDp && comm.size() > 1) {
      reducer_ = std::make_unique<BucketedAllReduce>(comm, model.gradients(), DataType::kFloat32,
                                                     DataParallelGradientTensors(model.layout(), expert_parallel()),
                                                     static_cast<size_t>(o.bucket_mb * 1024 * 1024), o.overlap);
    } else if (o.parallel == ParallelMode::kFsdp) {
      gatherer_ = std::make_unique<FsdpGatherer>(comm, model, o.overlap);
    }
    if (o.pipeline != nullptr) StartPipeline();
    if (expert_parallel()) CheckExpertParallel();
    if (o.working_bytes) *o.working_bytes = gatherer_ ? gatherer_->working_bytes() : 0;
    // The step's gradient is that of the mean loss over its micro-batches.
    model.SetGradientScale(1.0f / static_cast<float>(o.grad_accum));
    if (o.op_times) {
      op_times_ = std::make_unique<OpTimes>(model.MakePhaseClock());
      model.SetOpTimes(op_times_.get());
    }
  }
  ~TrainingSteps() { model_.SetOpTimes(nullptr); }
  TrainingSteps(const TrainingSteps&) = delete;
  TrainingSteps& operator=(const TrainingSteps&) = delete;

  StepRecord Run(int step) { return o_.pipeline != nullptr ? RunOneFOneB(step) : RunMicroBatches(step); }

 private:
  bool last(int micro) const { return micro + 1 == o_.grad_accum; }

  // Data parallel, zero1, fsdp and tensor parallel: the step's micro-batches one after another, each forward then
  // backward (the gradients written by the first, added by the others), then the mode's gradient sync and AdamW.
  StepRecord RunMicroBatches(int step) {
    StepRecord r = BeginRecord(step);
    ModeWaits waits;
    double loss_sum = 0;
    for (int micro = 0; micro < o_.grad_accum; ++micro) {
      NextMicroBatch(step, micro, r);
      if (micro > 0) loss_sum += model_.Loss();  // the last micro-batch's, done by now: Forward overwrites it
      ForwardMicroBatch(micro, waits, r);
      BackwardMicroBatch(micro, waits, r);
    }
    loss_sum += model_.Loss();
    SyncAndUpdate(step, r);
    return FinishRecord(step, loss_sum / o_.grad_accum, waits, r);
  }

  // Pipeline parallel: Megatron's 1F1B schedule (non-interleaved, PipeDream-Flush). Stage s of P runs min(P - s - 1,
  // M) forwards ahead (warm-up), then alternates one forward and one backward, then drains the backwards left
  // (cool-down): at most min(P - s, M) micro-batches' activations at once. Each exchange with a neighbour is one
  // SendRecv, paired where Megatron pairs them (a forward's output sent while the gradient for the oldest
  // micro-batch in flight comes back), so that no two stages wait on each other. The last stage has the loss.
  StepRecord RunOneFOneB(int step) {
    StepRecord r = BeginRecord(step);
    const int m = o_.grad_accum;
    const int warmup = std::min(stage_.stages - stage_.stage - 1, m), steady = m - warmup;
    ModeWaits waits;
    double loss_sum = 0;
    const int next = stage_.last() ? -1 : stage_.stage + 1, previous = stage_.stage - 1;
    for (int i = 0; i < warmup; ++i) {
      NextMicroBatch(step, i, r);
      Exchange(nullptr, -1, Edges(i).input, previous, r);  // receive forward
      ForwardMicroBatch(i, waits, r);
      Exchange(Edges(i).output, next, nullptr, -1, r);  // send forward
    }
    if (steady > 0) {
      NextMicroBatch(step, warmup, r);
      Exchange(nullptr, -1, Edges(warmup).input, previous, r);
    }
    for (int i = 0; i < steady; ++i) {
      const int forward = warmup + i, backward = i;
      ForwardMicroBatch(forward, waits, r);
      const float* output = Edges(forward).output;
      Exchange(output, next, Edges(backward).output_grad, next, r);  // send forward, receive backward
      BackwardMicroBatch(backward, waits, r);
      if (stage_.last()) loss_sum += model_.Loss();
      const float* input_grad = Edges(backward).input_grad;
      if (i + 1 == steady) {
        Exchange(input_grad, previous, nullptr, -1, r);  // send backward
      } else {
        NextMicroBatch(step, forward + 1, r);
        Exchange(input_grad, previous, Edges(forward + 1).input, previous, r);  // send backward, receive forward
      }
    }
    for (int i = steady; i < m; ++i) {
      Exchange(nullptr, -1, Edges(i).output_grad, next, r);  // receive backward
      BackwardMicroBatch(i, waits, r);
      Exchange(Edges(i).input_grad, previous, nullptr, -1, r);  // send backward
    }
    SyncAndUpdate(step, r);
    return FinishRecord(step, PipelineLoss(loss_sum / m), waits, r);
  }

  StepRecord BeginRecord(int step) {
    if (moe_) moe_step_.Reset(moe_step_.blocks, moe_step_.experts);
    StepRecord r;
    r.step = step;
    r.warmup = step < o_.warmup_steps;
    r.checkpoint_writing = HostOf(o_).CheckpointWriting();
    step_start_ = NowSeconds();
    return r;
  }

  // After the update: the phases, the loss, the hooks, the step's time and tokens.
  StepRecord FinishRecord(int step, double loss, const ModeWaits& waits, StepRecord& r) {
    TakePhases(waits, r);
    if (moe_) {
      r.moe_choices = moe_step_.choices;
      r.moe_dropped = moe_step_.dropped;
      r.moe_aux_loss = moe_step_.aux_loss();
    }
    if (op_times_) op_times_->TakeInto(r.op_s);
    r.loss = loss;
    HostOf(o_).InEachStep();
    const double checkpoint_start = NowSeconds();
    HostOf(o_).AfterUpdate(step);
    r.checkpoint_stall_s += NowSeconds() - checkpoint_start;  // beside the fence before the optimizer
    r.step_s = NowSeconds() - step_start_;
    if (moe_) r.moe_max_over_mean = StepLoadBalance();
    // This rank's share of its tensor parallel group's tokens, split over the pipeline's stages (the first ones take
    // one more where they do not divide), so that the shares add up to the tokens trained.
    const int64_t group_tokens =
        static_cast<int64_t>(o_.micro_batch) * o_.grad_accum * o_.seq / tensor_parallel();
    r.tokens = group_tokens / stage_.stages + (stage_.stage < group_tokens % stage_.stages ? 1 : 0);
    return r;
  }

  // The micro-batch's batch into the model (in its slot under pipeline parallel), marked as h2d after the gap where
  // the host fetched it.
  void NextMicroBatch(int step, int micro, StepRecord& r) {
    const TokenBatch& batch = FetchBatch(step, micro, r);
    marks_.Mark(Phase::kStart);
    if (stage_.split()) model_.SelectMicroBatch(micro % stage_.slots);
    model_.SetBatch(batch);
    marks_.Mark(Phase::kH2d);
  }

  // The micro-batch's batch, from the loader or made on demand (its making is the wait). Synthetic tokens: the step's
  // micro-batches are consecutive slices of one batch of grad_accum x micro_batch sequences, so that a step sees the
  // same tokens whatever the split. A pipeline's middle stage gets them under --data too (its host reads no files
  // for it): it uses no ids, but its SetBatch sizes the slot's activations and stage edges from the batch's shape.
  const TokenBatch& FetchBatch(int step, int micro, StepRecord& r) {
    const double start = NowSeconds();
    StepBatch batch;
    if (std::optional<StepBatch> loaded = HostOf(o_).NextBatch(step)) {
      batch = *loaded;
    } else {
      if (micro == 0) {
        SyntheticBatch(o_.data_seed, comm_.rank(), step, o_.micro_batch * o_.grad_accum, o_.seq,
                       model_.config().vocab, inputs_, targets_);
      }
      const size_t offset = static_cast<size_t>(micro) * o_.micro_batch * o_.seq;
      synthetic_ = TokenArrays(inputs_.data() + offset, targets_.data() + offset, o_.micro_batch, o_.seq);
      batch.tokens = &synthetic_;
    }
    // The step's read rate over its micro-batches: their bytes over the sum of their read times.
    if (micro == 0) read_seconds_ = 0;
    if (batch.read_MBps > 0) read_seconds_ += batch.bytes_read / (batch.read_MBps * 1e6);
    r.data_bytes += batch.bytes_read;
    r.data_read_MBps = read_seconds_ > 0 ? r.data_bytes / read_seconds_ / 1e6 : batch.read_MBps;
    if (micro == 0) r.loader_queue_depth = batch.queue_depth;
    if (!batch.tokens || batch.tokens->batch != o_.micro_batch || batch.tokens->seq != o_.seq) {
      throw RuntimeError("the batch source gave a batch of another shape than micro_batch x seq");
    }
    r.data_wait_s += NowSeconds() - start;
    return *batch.tokens;
  }

  // Forward of one micro-batch: fsdp gathers each unit's parameters as it goes (a step's first micro-batch starts its
  // timing afresh); tensor parallel all-reduces activations inside.
  void ForwardMicroBatch(int micro, ModeWaits& waits, StepRecord& r) {
    if (gatherer_) gatherer_->BeginStep(micro > 0);
    const double gather_waits = gatherer_ ? gatherer_->waited_s() : 0.0;
    model_.Forward();
    marks_.Mark(Phase::kForward);
    const TensorParallelComm activations = TakeActivationComm();
    waits.forward_s += activations.seconds + (gatherer_ ? gatherer_->waited_s() - gather_waits : 0.0);
    AddActivations(activations, r);
    waits.forward_s += TakeMoe(r);
  }

  // Backward of one micro-batch: the first of a step writes the gradients, the others add to them. dp starts its
  // bucket all-reduces during the last backward only (the earlier ones only accumulate, as DDP's no_sync); fsdp
  // reduce-scatters every micro-batch's unit gradients, the shards accumulating, and waits for them at its end.
  void BackwardMicroBatch(int micro, ModeWaits& waits, StepRecord& r) {
    const GradientWrite write = micro == 0 ? GradientWrite::kOverwrite : GradientWrite::kAccumulate;
    if (stage_.split()) model_.SelectMicroBatch(micro % stage_.slots);
    const double backward_start_waits = gatherer_ ? gatherer_->waited_s() : 0.0;
    if (gatherer_) {
      model_.Backward({}, GradientWrite::kOverwrite);  // the gatherer's working buffers, fresh for this backward
    } else if (reducer_ && last(micro)) {
      reducer_->Begin();
      // A bucket's all-reduce starts from inside backward (and MPI progresses them there, on the CPU backend):
      // --op-times' comm_model, not the kind that finished the gradient.
      const auto ready = [&](size_t slot) {
        MarkWait(op_times_.get(), [&] { reducer_->TensorReady(slot, model_.stream()); });
      };
      model_.Backward(ready, write);
    } else {
      model_.Backward({}, write);
    }
    marks_.Mark(Phase::kBackward);
    const TensorParallelComm activations = TakeActivationComm();
    waits.backward_s += activations.seconds;
    AddActivations(activations, r);
    waits.backward_s += TakeMoe(r);
    if (gatherer_) {
      waits.backward_s += gatherer_->waited_s() - backward_start_waits;
      const FsdpTiming timing = gatherer_->Finish();  // the last reduce-scatters (cumulative over the micro-batches)
      marks_.Mark(Phase::kExposed);
      r.comm_total_s = timing.comm_total_s;
      r.comm_gather_exposed_s = timing.gather_wait_s;
      r.reduce_scatter_bytes = timing.scattered_bytes;
      r.all_gather_bytes = timing.gathered_bytes;
    }
  }

  // Pipeline parallel: the checks, and the group of the pipeline's first and last stage that shares the tied
  // embedding's gradient (Megatron's embedding group).
  void StartPipeline() {
    Communicator& pipeline = *o_.pipeline;
    if (stage_.stages != pipeline.size() || stage_.stage != pipeline.rank()) {
      throw std::logic_error("pipeline: the model's stage is not this rank's place in its pipeline");
    }
    if (stage_.slots < OneFOneBSlots(stage_.stages, stage_.stage, o_.grad_accum)) {
      throw std::logic_error("pipeline: the model holds fewer micro-batches than 1F1B keeps in flight");
    }
    if (gatherer_) throw std::logic_error("pipeline: fsdp across pipelines is not built");
    std::unique_ptr<Communicator> embedding = pipeline.Split(stage_.first() || stage_.last() ? 0 : -1, stage_.stage);
    if (stage_.split()) embedding_ = std::move(embedding);
  }

  // The stage's edges for micro-batch `micro` (its slot's).
  Transformer::StageEdges Edges(int micro) {
    model_.SelectMicroBatch(micro % stage_.slots);
    return model_.stage_edges();
  }

  // One exchange with the neighbouring stages, after the model's work that wrote `send`: `send` to stage `to` while
  // `recv` comes from stage `from`. A side whose edge the stage lacks (null: the first stage's input, the last
  // stage's output and their gradients) or whose peer is past either end (-1) moves nothing.
  void Exchange(const float* send, int to, float* recv, int from, StepRecord& r) {
    const int dst = send == nullptr ? -1 : to, src = recv == nullptr ? -1 : from;
    if (dst < 0 && src < 0) return;
    const size_t count = model_.stage_edges().count;
    TimeCollective(*o_.pipeline, model_, [&] { o_.pipeline->SendRecv(send, dst, recv, src, count, DataType::kFloat32); });
    marks_.Mark(Phase::kPipeline);
    if (dst >= 0) r.pipeline_send_bytes += count * sizeof(float);
  }

  // The step's loss on every stage of the pipeline: the last stage's (the others have none).
  double PipelineLoss(double last_stage_loss) const {
    double loss = stage_.last() ? last_stage_loss : 0.0;
    TB_CHECK_MPI(MPI_Bcast(&loss, 1, MPI_DOUBLE, stage_.stages - 1, o_.pipeline->host_comm()));
    return loss;
  }

  // The tied embedding: wte's gradient summed over the pipeline's first and last stage, so that both copies take
  // the same update (Megatron's embedding all-reduce).
  void SyncTiedEmbedding(StepRecord& r) {
    if (!embedding_) return;
    const TensorSlot& wte = model_.layout()[kWteSlot];
    float* grads = model_.gradients() + wte.offset;
    r.comm_embedding_s = TimeCollective(*embedding_, model_, [&] {
      embedding_->AllReduce(grads, grads, wte.count, DataType::kFloat32, ReduceOp::kSum);
    });
    marks_.Mark(Phase::kExposed);
    r.comm_total_s += r.comm_embedding_s;
    r.embedding_allreduce_bytes = wte.count * sizeof(float);
  }

  // After the last micro-batch: the mode's gradient sync (what backward did not hide) and AdamW, marked.
  void SyncAndUpdate(int step, StepRecord& r) {
    if (o_.parallel == ParallelMode::kZero1) {
      SyncTiedEmbedding(r);  // before the reduce-scatter leaves each rank a shard
      r.comm_total_s += ZeroOneStep(comm_, model_, o_, step, marks_, r);
      r.comm_intra_s = r.comm_inter_s = std::nan("");
      return;
    }
    if (reducer_) {
      // Finish waits on the host for every bucket, so the optimizer issued next reads reduced gradients; on a device
      // the mark after it lands when the last bucket is done, and the interval is what backward did not hide.
      const BucketTiming timing = reducer_->Finish(model_.stream());
      marks_.Mark(Phase::kExposed);
      r.comm_total_s += timing.comm_total_s;
      r.comm_intra_s = timing.comm_intra_s;
      r.comm_inter_s = timing.comm_inter_s;
      r.allreduce_bytes = timing.bytes;
    } else if (gatherer_) {
      r.comm_intra_s = r.comm_inter_s = std::nan("");
      r.comm_total_s += r.comm_activation_s;  // beside the gatherer's, set by the last micro-batch
    }
    SyncTiedEmbedding(r);
    SyncExperts(r);
    OptimizerStep(model_, o_, step, r);
    marks_.Mark(Phase::kOptimizer);
  }

  // Tensor parallel: the ranks the model is split over (1: not split), and its activation all-reduces since the last
  // call (none without tensor parallel).
  int tensor_parallel() const { return tensor_parallel_ ? tensor_parallel_->tensor_parallel() : 1; }
  TensorParallelComm TakeActivationComm() {
    return tensor_parallel_ ? tensor_parallel_->TakeComm() : TensorParallelComm{};
  }

  static void AddActivations(const TensorParallelComm& a, StepRecord& r) {
    r.comm_activation_s += a.seconds;
    r.comm_total_s += a.seconds;
    r.activation_allreduce_bytes += a.bytes;
  }

  // The phases from the clock: the waits inside forward and backward are exposed communication, not compute.
  void TakePhases(const ModeWaits& waits, StepRecord& r) {
    const std::vector<double> seconds = marks_.Take();  // waits for the device
    r.h2d_s = Of(seconds, Phase::kH2d);
    r.forward_s = Of(seconds, Phase::kForward) - waits.forward_s;
    r.backward_s = Of(seconds, Phase::kBackward) - waits.backward_s;
    r.comm_model_waits_s = waits.forward_s + waits.backward_s;
    r.comm_pipeline_s = Of(seconds, Phase::kPipeline);
    r.comm_total_s += r.comm_pipeline_s;
    r.comm_exposed_s = Of(seconds, Phase::kExposed) + Of(seconds, Phase::kGather) + r.comm_pipeline_s +
                       r.comm_model_waits_s;
    if (o_.parallel == ParallelMode::kZero1) r.comm_gather_exposed_s = Of(seconds, Phase::kGather);
    // The fence before the optimizer (the only checkpoint stall so far in the step) ran inside its interval.
    r.optimizer_s = std::max(0.0, Of(seconds, Phase::kOptimizer) - r.checkpoint_stall_s);
  }

  // Expert parallel: the checks, and that the experts' gradients have a group to be summed over.
  bool expert_parallel() const { return model_.placement().experts.split(); }
  void CheckExpertParallel() const {
    if (o_.parallel != ParallelMode::kDp) throw std::logic_error("expert parallel: dp across the ranks only");
    if (o_.expert_data == nullptr) throw std::logic_error("expert parallel: no group for the experts' gradients");
    if (o_.expert_data->size() * model_.placement().experts.parallel != comm_.size()) {
      throw std::logic_error("expert parallel: the expert groups and their replicas do not cover the ranks");
    }
  }

  // What the MoE blocks did since the last call: routing figures into the step's, the all-to-alls into the record.
  // Returns the all-to-alls' seconds (waits inside forward or backward).
  double TakeMoe(StepRecord& r) {
    if (!moe_) return 0.0;
    const MoeStepStats taken = moe_->TakeMoeStats();
    moe_step_.Add(taken);
    const AllToAllFigures& a = taken.alltoall;
    const double seconds = a.dispatch_s + a.combine_s;
    r.comm_alltoall_s += seconds;
    r.alltoall_dispatch_s += a.dispatch_s;
    r.alltoall_combine_s += a.combine_s;
    r.comm_total_s += seconds;
    r.alltoall_dispatch_bytes += a.dispatch_bytes;
    r.alltoall_combine_bytes += a.combine_bytes;
    r.alltoall_inter_node_bytes += a.inter_node_bytes;
    return seconds;
  }

  // The step's load balance over every data parallel rank's tokens (what each expert's work was, wherever it ran):
  // the choices per block and expert summed over the ranks (outside the step's time), then the worst block's busiest
  // expert over its mean. Collective over comm_'s ranks.
  double StepLoadBalance() {
    if (comm_.size() > 1) {
      std::vector<double> counts(moe_step_.assigned.begin(), moe_step_.assigned.end());
      TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, counts.data(), static_cast<int>(counts.size()), MPI_DOUBLE, MPI_SUM,
                                 comm_.host_comm()));
      for (size_t i = 0; i < counts.size(); ++i) moe_step_.assigned[i] = static_cast<int64_t>(counts[i]);
    }
    return moe_step_.max_over_mean();
  }

  // Expert parallel: each expert slot's gradient summed over the ranks that hold the same experts and divided by all
  // the data parallel ranks: the mean over every rank's tokens, as the buckets give the other tensors.
  void SyncExperts(StepRecord& r) {
    if (!expert_parallel()) return;
    const double start = NowSeconds();
    const float scale = 1.0f / static_cast<float>(comm_.size());
    const std::vector<TensorSlot>& layout = model_.layout();
    for (size_t s = 0; s < layout.size(); ++s) {
      if (!IsExpertSlot(layout, s) || layout[s].count == 0) continue;
      float* grads = model_.gradients() + layout[s].offset;
      if (o_.expert_data->size() > 1) {
        TimeCollective(*o_.expert_data, model_, [&] {
          o_.expert_data->AllReduce(grads, grads, layout[s].count, DataType::kFloat32, ReduceOp::kSum);
        });
        r.experts_allreduce_bytes += layout[s].count * sizeof(float);
      }
      model_.ScaleFloats(grads, layout[s].count, scale);
    }
    r.comm_experts_s = NowSeconds() - start;
    r.comm_total_s += r.comm_experts_s;
    marks_.Mark(Phase::kExposed);
  }

  Communicator& comm_;
  Transformer& model_;
  const TrainLoopOptions& o_;
  // Device phases are timed where they run (CUDA events on the model's stream); the host clock on the CPU.
  std::unique_ptr<PhaseClock> clock_;
  PhaseMarks marks_;
  std::unique_ptr<BucketedAllReduce> reducer_;  // dp
  std::unique_ptr<FsdpGatherer> gatherer_;      // fsdp
  std::unique_ptr<OpTimes> op_times_;           // --op-times
  TensorParallelStats* tensor_parallel_;         // the model's, under tensor parallel; null otherwise
  MoeStatsSource* moe_;                          // the model's, with MoE blocks; null otherwise
  MoeStepStats moe_step_;                        // the step's so far
  PipelineStage stage_;                          // the model's (one stage without pipeline parallel)
  std::unique_ptr<Communicator> embedding_;      // pipeline parallel: the first and last stage (tied embedding)
  double step_start_ = 0;
  std::vector<int32_t> inputs_, targets_;
  TokenBatch synthetic_;
  double read_seconds_ = 0;  // the step's micro-batches' read times so far
};

}  // namespace

std::vector<StepRecord> RunTrainingSteps(Communicator& comm, Transformer& model, const TrainLoopOptions& o) {
  TrainingSteps steps(comm, model, o);
  std::vector<StepRecord> records;
  for (int step = o.first_step; step < o.warmup_steps + o.steps; ++step) {
    TrainLoopHost& host = HostOf(o);
    if (host.StopRequested()) break;
    Watchdog::Scope guard(host.watchdog(), [&] { return "training step " + std::to_string(step) + " on " +
                                                   std::to_string(comm.size()) + " ranks"; });
    if (step == o.first_step) host.AtFirstStep();
    records.push_back(steps.Run(step));
    host.OnStep(records.back());
  }
  return records;
}

}  // namespace tb
