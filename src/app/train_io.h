// The storage side of `trainbench train`: each step's batch from the data loader (instead of synthetic tokens),
// checkpoints after the optimizer, resume from a checkpoint, a sweep over emulated storage rates, and the
// report's `io` group. Part of the trainbench executable (it joins src/ with models/).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint.h"
#include "cli.h"
#include "communicator.h"
#include "data_loader.h"
#include "model_config.h"
#include "report.h"
#include "token_dataset.h"
#include "train_loop.h"
#include "train_plan.h"
#include "transformer.h"

namespace tb {

struct TrainIoFlags {
  std::string data_dir;           // --data: token shards (trainbench data generate), or any files with --data-raw
  bool data_raw = false;
  bool skip_data_verify = false;  // --skip-data-verify: headers only, no payload checksum pass
  int loader_workers = 2;
  int prefetch = 4;
  bool direct_io = false;
  std::string read = "auto";      // --read auto|pread|mmap (ReadMethod)
  std::string record_bytes;       // --record-bytes SIZE
  std::string io_throttle;        // --io-throttle MB/s, or a list of them: a storage sweep
  double io_latency_ms = 0;
  double data_wait_share = 0.05;  // --data-wait-share: the sweep reports the rate where data_wait passes this
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  int checkpoint_keep = 0;
  std::string checkpoint_mode = "sync";
  bool checkpoint_verify = false;
  std::string on_checkpoint_error = "fail";
  std::string resume;
};

void AddTrainIoOptions(po::options_description& options, TrainIoFlags& flags);
// The rules between those flags: loader flags need --data, checkpoint flags need --checkpoint-dir.
std::vector<FlagRule> TrainIoFlagRules();

// An option that determines the trajectory (the numbers every step computes): recorded in each checkpoint's
// manifest and compared on --resume, so that a continuation that cannot be bit-identical is refused by name.
struct TrajectoryOption {
  TrajectoryOption(std::string key, std::string flag, std::string value, std::string older = "")
      : key(std::move(key)), flag(std::move(flag)), value(std::move(value)), older(std::move(older)) {}

  std::string key;    // manifest key (a "meta KEY VALUE" line)
  std::string flag;   // how the user sets it: "--micro-batch"; a noun ("ranks") reads "2 ranks"
  std::string value;  // this run's, as text; "" = not given ("no --data"), "on" = a switch given
  std::string older;  // what a checkpoint that does not record it was written with, where that is known (older
                      // trainbench checkpointed only with it); "" = unknown: assumed equal, and said so
};
using Trajectory = std::vector<TrajectoryOption>;
// The run's trajectory options at a scaling point of `ranks` ranks taking `micro_batch` sequences each.
using TrajectoryOf = std::function<Trajectory(int ranks, int micro_batch)>;

// What PlanTrainIo checks the I/O flags against.
struct TrainIoRun {
  int seq = 0;
  uint64_t seed = 0;
  int last_step = 0;                         // --warmup-steps + --steps: a resume must start before it
  std::vector<std::pair<int, int>> points;   // (ranks, micro-batch) of every scaling point
  TrajectoryOf trajectory;                   // the training options; PlanTrainIo adds the data options
  int ranks_per_replica = 1;  // tensor parallel x pipeline stages: the ranks of one replica share its batches, so the
                              // loader shards the samples over ranks / ranks_per_replica replicas
};

// The flags checked, with what the checks found. Built at option time on every rank (agreed), so that a missing
// data or checkpoint directory is reported before any rank starts work.
struct TrainIoPlan {
  bool loader = false;
  uint64_t record_bytes = 0;
  std::vector<double> throttles_MBps = {0};  // one run per value; 0 = no throttle
  double io_stall_ms = 0;  // --inject io-stall: added to every read's --io-latency-ms (a test fault)
  bool checkpoints = false;
  CheckpointMode checkpoint_mode = CheckpointMode::kSync;
  CheckpointErrorPolicy on_error = CheckpointErrorPolicy::kFail;
  std::string resume_dir;  // the checkpoint --resume resolved to; empty: none
  std::string resume_unchecked;  // trajectory options an older checkpoint does not record ("--seq, --lr")
  TrajectoryOf trajectory;       // what each checkpoint records: the run's options and the data options
  // Dataset, for the report.
  uint64_t dataset_files = 0;
  uint64_t dataset_samples = 0;
  uint64_t dataset_tokens = 0;
  PayloadCheck data_check;  // this rank's share of the payload checksum pass (VerifyTrainData)
};

// What a run reads (the data directory, the checkpoint it resumes from): no output may be one of them.
std::vector<std::string> TrainInputs(const TrainIoFlags& flags, const TrainIoPlan& plan);

// Validates the I/O flags against the model and the scaling points, and
// returns the plan. With --resume, reads the checkpoint's manifest and refuses one that this run cannot continue
// bit-identically: another model or trajectory option (naming the option and both values), or a step at or past
// run.last_step. InputError naming the flag for anything wrong.
TrainIoPlan PlanTrainIo(const TrainIoFlags& flags, const ModelConfig& model, const TrainIoRun& run);

// The payload checksums of --data's shards, before any rank starts work: this rank's share (shard i on rank
// i mod ranks) on --loader-workers threads. InputError naming the first corrupt shard; run it under AgreeOnSetup.
// Nothing to do for --data-raw (no checksums), --skip-data-verify or without --data.
void VerifyTrainData(const TrainIoFlags& flags, TrainIoPlan& plan, int rank, int ranks);
// What the checksum pass read and how long it took (the slowest rank), in `io` on rank 0 (nullptr elsewhere), and
// printed. Collective over MPI_COMM_WORLD.
void AddDataVerifyToReport(Group* io, const TrainIoFlags& flags, const TrainIoPlan& plan);

// A checkpoint's model identity: a resume with another model is refused.
std::string ModelFingerprint(const ModelConfig& model);

// The loader and checkpointer of one run of the training loop (one scaling point at one storage rate), on the
// ranks of `comm`, laid out as `point` (the point's TrainPlan: micro-batch, sequence, and where each rank sits in its
// tensor parallel group, data parallel replicas and pipeline). Everything collective is over comm's ranks.
class PointIo {
 public:
  PointIo(const TrainIoFlags& flags, const TrainIoPlan& plan, Communicator& comm, Transformer& model,
          const TrainPlan& point, uint64_t seed, double throttle_MBps, const std::string& checkpoint_subdir);
  ~PointIo();

  // Restores the model (and the loader's place) from --resume, when given; sets loop.first_step. Then opens the
  // loader (--data; not on a pipeline's middle stage) and the checkpointer (--checkpoint-every).
  void Prepare(TrainLoopOptions& loop);
  // The loop host's data and checkpoint parts (TrainLoopHost): the loader's next batch (nullopt without a loader:
  // synthetic tokens), the asynchronous writer's fence before each update, a checkpoint after step `step`'s update
  // when one is due, and whether a writer is busy.
  std::optional<StepBatch> NextBatch();
  void BeforeUpdate();
  void AfterUpdate(int step);
  bool CheckpointWriting() const;
  // After the loop: completes an asynchronous checkpoint still in flight.
  void Finish();
  // Gathers loader statistics and checkpoint events to comm's rank 0 and adds them under io/<name>, with the
  // stall shares of `records` (this rank's). Collective over comm.
  void AddToReport(Group& io, const std::string& name, const std::vector<StepRecord>& records);

 private:
  void Resume(TrainLoopOptions& loop);
  // Whether this rank's pipeline stage uses tokens (and opens a loader): the first and the last.
  bool ReadsTokens() const;
  void OpenLoader();
  void OpenCheckpointer();
  void Save(int step);
  // This rank's part of a checkpoint: the ranks holding its stage and tensor rank (its data parallel replicas).
  CheckpointPart Part() const;
  // The parts of AddToReport, each collective; `group` is null on ranks other than the point's first.
  void AddSharesToReport(Group* group, const std::vector<StepRecord>& records);
  void AddLoaderToReport(Group* group);
  void AddCheckpointsToReport(Group* group);
  // Runs a collective checkpointer call; its agreed failure (thrown on every rank) becomes a SharedError.
  void Shared(const std::function<void()>& collective);

  const TrainIoFlags& flags_;
  const TrainIoPlan& plan_;
  Communicator& comm_;
  Transformer& model_;
  const TrainPlan& point_;
  int micro_batch_;
  int seq_;
  uint64_t seed_;
  double throttle_MBps_;
  std::string checkpoint_dir_;
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::optional<LoaderPosition> resume_position_;
  LoadedCheckpoint resumed_;
};

// Storage sweep: for runs at decreasing throttle rates, the rate at which the data_wait share of step time first
// reaches `share` (linear between the two sweep points around it); NaN when it never does or already does at the
// fastest rate. `rates_MBps` and `data_wait_shares` are parallel.
double ThrottleAtDataWaitShare(const std::vector<double>& rates_MBps, const std::vector<double>& data_wait_shares,
                               double share);

}  // namespace tb
