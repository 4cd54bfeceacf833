#include "train_io.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "io_tables.h"
#include "console.h"
#include "device.h"
#include "error.h"
#include "log.h"
#include "mpi_util.h"
#include "schema.h"
#include "paths.h"
#include "token_dataset.h"
#include "train_summary.h"
#include "units.h"

namespace tb {
namespace {

constexpr const char* kLoaderEpoch = "loader_epoch";
constexpr const char* kLoaderBatch = "loader_batch";
constexpr const char* kLoaderSeed = "loader_seed";

constexpr double kMinThrottleMBps = 1e-3;

std::vector<double> ParseRates(const std::string& text) {
  if (text.empty()) return {0};
  // MB/s per rank; 0 = no limit (a single rate only). The ceiling is far past any storage.
  const std::vector<double> rates = ParseRealList(text, "--io-throttle", RealRange::Between(0, 1e9));
  for (double rate : rates) {
    if (rate > 0 && rate < kMinThrottleMBps) {
      throw InputError(Format("--io-throttle '%g': the lowest rate is %g MB/s (1 kB/s; 0 = no limit)", rate,
                              kMinThrottleMBps));
    }
  }
  if (rates.size() > 1) {
    for (size_t i = 0; i < rates.size(); ++i) {
      if (rates[i] <= 0 || (i > 0 && rates[i] >= rates[i - 1])) {
        throw InputError("--io-throttle " + text + ": a storage sweep lists decreasing rates > 0 (e.g. 800,400,200)");
      }
    }
  }
  return rates;
}

uint64_t ParseUnsigned(const std::string& text) { return std::stoull(text); }

DeviceCopier CopierFor(const Transformer& model) {
  DeviceCopier copier;
  if (model.backend() != "cuda") return copier;
  copier.to_host = [](void* host, const void* device, uint64_t bytes) { CopyDeviceToHost(host, device, bytes); };
  copier.to_device = [](void* device, const void* host, uint64_t bytes) { CopyHostToDevice(device, host, bytes); };
  copier.allocate_pinned = [](uint64_t bytes) { return AllocatePinnedHost(bytes); };
  copier.free_pinned = [](void* pointer) { FreePinnedHost(pointer); };
  return copier;
}

std::vector<StateBuffer> StateOf(Transformer& model) {
  const uint64_t bytes = model.parameter_elements() * sizeof(float);
  const bool device = model.backend() == "cuda";
  return {{"params", model.parameters(), bytes, device},
          {"adam_m", model.adam_m(), bytes, device},
          {"adam_v", model.adam_v(), bytes, device}};
}


}  // namespace

// Ceilings far past any real setting, low enough that the products taken from them cannot overflow.
constexpr int64_t kMaxLoaderWorkers = 1024;
constexpr int64_t kMaxPrefetch = 1 << 16;
constexpr double kMaxLatencyMs = 1e6;

void AddTrainIoOptions(po::options_description& options, TrainIoFlags& f) {
  options.add_options()
      ("data", po::value(&f.data_dir), "read each step's tokens from this directory of token shards "
                                       "(trainbench data generate) instead of generating them")
      ("data-raw", po::bool_switch(&f.data_raw), "--data is any directory of files: fixed-size records, tokens "
                                                 "taken from their bytes (measures an existing dataset's storage)")
      ("skip-data-verify", po::bool_switch(&f.skip_data_verify), "check only the shards' headers, not their payload "
                                                                 "checksums (for a dataset 'data verify' just passed)")
      ("loader-workers", Number(&f.loader_workers, IntRange::Between(1, kMaxLoaderWorkers))->default_value(f.loader_workers), "reader threads per rank")
      ("prefetch", Number(&f.prefetch, IntRange::Between(1, kMaxPrefetch))->default_value(f.prefetch), "batches read ahead per rank")
      ("direct-io", po::bool_switch(&f.direct_io), "read with O_DIRECT, bypassing the page cache")
      ("read", Choice(&f.read, {"auto", "pread", "mmap"})->default_value(f.read),
       "how records are read through the page cache: pread, or copied from memory maps of the files (no system call "
       "per record); auto: mmap for a dataset within a quarter of this host's memory, else pread")
      ("record-bytes", po::value(&f.record_bytes), "bytes read per sample (image-like records; default: seq+1 tokens)")
      ("io-throttle", po::value(&f.io_throttle), "emulated storage: read rate limit per rank in MB/s (1e6 B/s); a "
                                                 "decreasing list (800,400,200) runs a storage sweep")
      ("io-latency-ms", Number(&f.io_latency_ms, RealRange::Between(0, kMaxLatencyMs))->default_value(f.io_latency_ms), "emulated storage: latency "
                                                                                      "added to every read")
      ("data-wait-share", Number(&f.data_wait_share, RealRange::Inside(0, 1))->default_value(f.data_wait_share),
       "storage sweep: report the rate at which data_wait reaches this share of step time")
      ("checkpoint-dir", po::value(&f.checkpoint_dir), "write checkpoints here (step-NNNNNNNN/ per checkpoint)")
      ("checkpoint-every", Number(&f.checkpoint_every, IntRange::AtLeast(0))->default_value(f.checkpoint_every),
       "checkpoint after every N steps (0: never)")
      ("checkpoint-keep", Number(&f.checkpoint_keep, IntRange::AtLeast(0))->default_value(f.checkpoint_keep),
       "keep the newest N complete checkpoints (0: all)")
      ("checkpoint-mode", Choice(&f.checkpoint_mode, {"sync", "async"})->default_value(f.checkpoint_mode),
       "sync (the loop waits for write and fsync) or async (a background writer reads the state during the next "
       "step; what it has not read before that step's optimizer update is copied)")
      ("checkpoint-verify", po::bool_switch(&f.checkpoint_verify), "read each slice back after fsync and check it")
      ("on-checkpoint-error", Choice(&f.on_checkpoint_error, {"fail", "warn"})->default_value(f.on_checkpoint_error),
       "fail (stop the run) or warn (record it and train on) when a checkpoint cannot be written")
      ("resume", po::value(&f.resume), "continue from this checkpoint (or the newest complete one under this "
                                       "directory): weights, AdamW state, step and loader position");
}

std::vector<FlagRule> TrainIoFlagRules() {
  std::vector<FlagRule> rules;
  for (const char* flag : {"data-raw", "skip-data-verify", "loader-workers", "prefetch", "direct-io", "read",
                           "record-bytes", "io-throttle", "io-latency-ms"}) {
    rules.push_back(Needs(flag, "data"));
  }
  rules.push_back(Needs("data-wait-share", "io-throttle"));
  for (const char* flag : {"checkpoint-every", "checkpoint-keep", "checkpoint-mode", "checkpoint-verify",
                           "on-checkpoint-error"}) {
    rules.push_back(Needs(flag, "checkpoint-dir"));
  }
  return rules;
}

std::vector<std::string> TrainInputs(const TrainIoFlags& f, const TrainIoPlan& plan) {
  std::vector<std::string> inputs;
  if (plan.loader) inputs.push_back(f.data_dir);
  if (!plan.resume_dir.empty()) inputs.push_back(plan.resume_dir);
  return inputs;
}

std::string ModelFingerprint(const ModelConfig& m) {
  std::string fingerprint =
      Format("%s:layers=%d,d_model=%d,heads=%d,vocab=%d,vocab_padded=%d,seq=%d,mlp_ratio=%d", m.name.c_str(), m.layers,
             m.d_model, m.heads, m.vocab, m.vocab_padded, m.seq, m.mlp_ratio);
  // A dense model's is what it always was, so that its older checkpoints resume.
  if (m.moe) {
    fingerprint += Format(",experts=%d,top_k=%d,expert_ffn=%d,moe_every=%d,capacity_factor=%.9g,aux_loss_coef=%.9g",
                          m.moe->experts, m.moe->top_k, m.moe->expert_ffn, m.moe->every, m.moe->capacity_factor,
                          m.moe->aux_loss_coef);
  }
  return fingerprint;
}

namespace {

// How a trajectory option reads in a message: "--seq 32", "no --data", "--data-raw", "2 ranks".
std::string Describe(const std::string& flag, const std::string& value) {
  if (value.empty()) return "no " + flag;
  if (value == "on") return flag;
  return flag.rfind("--", 0) == 0 ? flag + " " + value : value + " " + flag;
}

// The model's part of the trajectory, one entry per field of its fingerprint ("tiny:layers=2,d_model=128,..."),
// keyed "model.<field>", so that a resume with another shape names the flag that differs. The checkpoint keeps
// these in its fingerprint, not as values.
Trajectory ModelTrajectory(const std::string& fingerprint) {
  static const std::map<std::string, std::string> kFlags = {
      {"layers", "--layers"},           {"d_model", "--d-model"},   {"heads", "--heads"},
      {"vocab", "--vocab"},             {"seq", "--seq"},           {"experts", "--experts"},
      {"top_k", "--top-k"},             {"expert_ffn", "--expert-ffn"}, {"moe_every", "--moe-every"},
      {"capacity_factor", "--capacity-factor"}, {"aux_loss_coef", "--aux-loss-coef"}};
  const size_t colon = fingerprint.find(':');
  Trajectory fields = {{"model.name", "--model", fingerprint.substr(0, colon)}};
  if (colon == std::string::npos) return fields;
  for (const std::string& item : SplitFlagList(fingerprint.substr(colon + 1), "the model fingerprint")) {
    const size_t equals = item.find('=');
    const std::string name = item.substr(0, equals);
    const auto flag = kFlags.find(name);
    fields.push_back({"model." + name, flag == kFlags.end() ? "model " + name : flag->second,
                      equals == std::string::npos ? "" : item.substr(equals + 1)});
  }
  // A dense model's fingerprint names no experts: 0 of them, so that a resume across dense and MoE names --experts.
  const bool moe = std::any_of(fields.begin(), fields.end(), [](const TrajectoryOption& o) { return o.key == "model.experts"; });
  if (!moe) fields.push_back({"model.experts", "--experts", "0"});
  return fields;
}

// Refuses (InputError naming the option and both values) the first of `ours` that the checkpoint recorded with
// another value, or, where it does not record it, was known to be written with another (TrajectoryOption::older).
// Returns the flags of those it does not record and nothing is known of (an older trainbench wrote it),
// comma-separated.
std::string CompareTrajectory(const std::string& dir, const std::map<std::string, std::string>& saved,
                              const Trajectory& ours) {
  std::string unchecked;
  for (const TrajectoryOption& option : ours) {
    const auto it = saved.find(option.key);
    if (it == saved.end() && option.older.empty()) {
      unchecked += (unchecked.empty() ? "" : ", ") + option.flag;
      continue;
    }
    const std::string& written = it == saved.end() ? option.older : it->second;
    if (written != option.value) {
      throw InputError("--resume: checkpoint '" + dir + "' was written with " + Describe(option.flag, written) +
                       ", this run has " + Describe(option.flag, option.value) + "; resume with the same value");
    }
  }
  return unchecked;
}

// --resume: the checkpoint this run can continue bit-identically, or InputError.
void PlanResume(const TrainIoFlags& f, const ModelConfig& model, const TrainIoRun& run, TrainIoPlan& plan) {
  if (run.points.size() > 1 || plan.throttles_MBps.size() > 1) {
    throw InputError("--resume continues one run: drop --scaling (or give it one rank count) and the sweep");
  }
  plan.resume_dir = ResolveCheckpoint(f.resume);
  const CheckpointMeta meta = ReadCheckpointMeta(plan.resume_dir);
  const std::string& dir = plan.resume_dir;
  if (meta.step >= run.last_step) {
    throw InputError("--resume: checkpoint '" + dir + "' is at step " + std::to_string(meta.step) +
                     ", at or past this run's last step (" + std::to_string(run.last_step) +
                     " = --warmup-steps + --steps)");
  }
  std::map<std::string, std::string> saved = meta.values;
  for (const TrajectoryOption& field : ModelTrajectory(meta.model_fingerprint)) saved[field.key] = field.value;
  Trajectory ours = ModelTrajectory(ModelFingerprint(model));
  for (TrajectoryOption& option : plan.trajectory(run.points[0].first, run.points[0].second)) {
    ours.push_back(std::move(option));
  }
  plan.resume_unchecked = CompareTrajectory(dir, saved, ours);
  // A checkpoint older than the "data" value says whether it was taken with the loader by its position.
  if (plan.loader != meta.values.contains(kLoaderEpoch)) {
    throw InputError("--resume: checkpoint '" + dir + "' was written " + (plan.loader ? "without --data" : "with --data") +
                     "; resume it the same way");
  }
}

// Every point's loader, opened as the run will open it (one worker): the same checks, now, on every rank, so that
// a dataset too small for a global batch or a ring too large for the host is reported before work starts.
void PlanLoader(const TrainIoFlags& f, const ModelConfig& model, const TrainIoRun& run, TrainIoPlan& plan) {
  if (!f.data_raw) {
    const TokenDataset dataset = OpenTokenDataset(f.data_dir);
    if (dataset.vocab > static_cast<uint64_t>(model.vocab)) {
      throw InputError("--data '" + f.data_dir + "' has token ids up to " + std::to_string(dataset.vocab - 1) +
                       ", beyond model '" + model.name + "' (vocab " + std::to_string(model.vocab) + ")");
    }
    plan.dataset_tokens = dataset.total_tokens;
  }
  for (const auto& [k, micro_batch] : run.points) {
    DataLoaderOptions o;
    o.dir = f.data_dir;
    o.raw = f.data_raw;
    o.raw_vocab = static_cast<uint64_t>(model.vocab);
    o.seq = run.seq;
    o.batch = micro_batch;
    o.world = k / run.ranks_per_replica;
    o.seed = run.seed;
    o.workers = 1;
    o.prefetch = f.prefetch;
    o.direct_io = f.direct_io;
    o.read = ParseReadMethod(f.read);
    o.record_bytes = plan.record_bytes;
    const LoaderStats stats = DataLoader(o).stats();
    plan.dataset_files = stats.files;
    plan.dataset_samples = stats.samples;
  }
}

void PlanCheckpoints(const TrainIoFlags& f, TrainIoPlan& plan) {
  plan.checkpoint_mode = ParseCheckpointMode(f.checkpoint_mode);
  plan.on_error = ParseCheckpointErrorPolicy(f.on_checkpoint_error);
  if (!f.checkpoint_dir.empty() && f.checkpoint_every == 0) {
    throw InputError("--checkpoint-dir needs --checkpoint-every N (steps between checkpoints)");
  }
  plan.checkpoints = f.checkpoint_every > 0;
  if (plan.checkpoints && plan.loader && DirectoriesOverlap(f.checkpoint_dir, f.data_dir)) {
    // A raw directory would read the checkpoints as data, and pruning must never reach a shard.
    throw InputError("--checkpoint-dir '" + f.checkpoint_dir + "' overlaps --data '" + f.data_dir +
                     "': keep checkpoints outside the dataset");
  }
  if (plan.checkpoints) PrepareCheckpointDir(f.checkpoint_dir);
}

void CheckLoaderFlags(const TrainIoRun& run, const TrainIoPlan& plan) {
  if (plan.throttles_MBps.size() > 1 && run.points.size() > 1) {
    throw InputError("--io-throttle with several rates (a storage sweep) takes one scaling point: drop --scaling "
                     "or give it one rank count");
  }
}

// The data options of the trajectory: which samples each step reads. The loader's workers, prefetch, direct I/O
// and throttle change only when the bytes arrive.
TrajectoryOf WithDataOptions(const TrainIoFlags& f, const TrainIoPlan& plan, TrajectoryOf training) {
  std::error_code ec;
  const std::string data = f.data_dir.empty() ? "" : std::filesystem::weakly_canonical(f.data_dir, ec).string();
  Trajectory options = {{"data", "--data", data},
                        {"data_raw", "--data-raw", f.data_raw ? "on" : ""},
                        {"record_bytes", "--record-bytes", plan.record_bytes ? std::to_string(plan.record_bytes) : ""}};
  return [training = std::move(training), options](int ranks, int micro_batch) {
    Trajectory all = training(ranks, micro_batch);
    all.insert(all.end(), options.begin(), options.end());
    return all;
  };
}


}  // namespace

TrainIoPlan PlanTrainIo(const TrainIoFlags& f, const ModelConfig& model, const TrainIoRun& run) {
  TrainIoPlan plan;
  plan.throttles_MBps = ParseRates(f.io_throttle);
  CheckLoaderFlags(run, plan);
  plan.loader = !f.data_dir.empty();
  if (!f.record_bytes.empty()) plan.record_bytes = ParseSize(f.record_bytes, "--record-bytes");
  if (plan.loader) PlanLoader(f, model, run, plan);
  PlanCheckpoints(f, plan);
  plan.trajectory = WithDataOptions(f, plan, run.trajectory);
  if (!f.resume.empty()) PlanResume(f, model, run, plan);
  return plan;
}

void VerifyTrainData(const TrainIoFlags& f, TrainIoPlan& plan, int rank, int ranks) {
  if (!plan.loader || f.data_raw || f.skip_data_verify) return;
  plan.data_check = VerifyPayloads(OpenTokenDataset(f.data_dir), rank, ranks, f.loader_workers);
  if (!plan.data_check.bad_shards.empty()) throw FirstProblem(plan.data_check.bad_shards, f.data_dir);
}

void AddDataVerifyToReport(Group* io, const TrainIoFlags& f, const TrainIoPlan& plan) {
  const std::vector<double> seconds = AllGatherDoubles(MPI_COMM_WORLD, plan.data_check.seconds);
  const std::vector<double> bytes = AllGatherDoubles(MPI_COMM_WORLD, static_cast<double>(plan.data_check.bytes));
  if (!io) return;
  const double slowest_s = *std::max_element(seconds.begin(), seconds.end());
  double total_bytes = 0;
  for (double b : bytes) total_bytes += b;
  const std::string how = f.data_raw           ? "not verified: --data-raw files carry no checksums"
                          : f.skip_data_verify ? "not verified: --skip-data-verify (shard headers only)"
                                               : "payload CRC-32C of every shard, before the first step";
  schema::Set(*io, schema::io::data_verify, how);
  schema::Set(*io, schema::io::data_verify_bytes, total_bytes);
  schema::Set(*io, schema::io::data_verify_s, slowest_s);
  if (total_bytes == 0) return Print("# data: " + how);
  Print(Format("# data: %s of shards verified in %.2f s before the first step (%.2f GB/s, %zu ranks x %d threads)",
               FormatBytes(static_cast<uint64_t>(total_bytes)).c_str(), slowest_s,
               total_bytes / std::max(slowest_s, 1e-9) / 1e9, seconds.size(), f.loader_workers));
}

PointIo::PointIo(const TrainIoFlags& flags, const TrainIoPlan& plan, Communicator& comm, Transformer& model,
                 const TrainPlan& point, uint64_t seed, double throttle_MBps, const std::string& checkpoint_subdir)
    : flags_(flags),
      plan_(plan),
      comm_(comm),
      model_(model),
      point_(point),
      micro_batch_(point.micro_batch),
      seq_(point.seq),
      seed_(seed),
      throttle_MBps_(throttle_MBps),
      checkpoint_dir_(checkpoint_subdir.empty() ? flags.checkpoint_dir
                                                : flags.checkpoint_dir + "/" + checkpoint_subdir) {}

PointIo::~PointIo() = default;

void PointIo::Prepare(TrainLoopOptions& loop) {
  if (!plan_.resume_dir.empty()) Resume(loop);
  if (plan_.loader && ReadsTokens()) OpenLoader();
  if (plan_.checkpoints) OpenCheckpointer();
}

// The first stage embeds the inputs and the last takes the targets of the same micro-batches (both, without stages);
// a middle stage starts from its neighbour's activations and has no use for tokens, so it reads no files.
bool PointIo::ReadsTokens() const {
  const int stage = point_.Place(comm_.rank()).stage;
  return stage == 0 || stage == point_.pipeline_parallel - 1;
}

std::optional<StepBatch> PointIo::NextBatch() {
  if (!loader_) return std::nullopt;
  const LoaderBatch& b = loader_->Next();
  return StepBatch{&b.tokens, b.stats.bytes_read, b.stats.ReadMBps(), b.stats.queue_depth};
}

void PointIo::BeforeUpdate() {
  // The async writer reads the host state itself until the next optimizer step is about to change it.
  if (checkpointer_ && plan_.checkpoint_mode == CheckpointMode::kAsync) checkpointer_->BeforeUpdate();
}

void PointIo::AfterUpdate(int step) {
  if (checkpointer_) Save(step);
}

bool PointIo::CheckpointWriting() const { return checkpointer_ && checkpointer_->WriterBusy(); }

void PointIo::Resume(TrainLoopOptions& loop) {
  try {
    resumed_ = LoadCheckpoint(comm_.host_comm(), plan_.resume_dir, StateOf(model_), ModelFingerprint(model_.config()),
                              CopierFor(model_), kCheckpointGatherChunkBytes, Part());
  } catch (const InputError& e) {
    throw SharedError(e, comm_.rank() == 0);  // every rank found the same problem: one line
  }
  model_.ParametersChanged();
  const CheckpointMeta& meta = resumed_.meta;  // its trajectory options were compared in PlanTrainIo
  if (plan_.loader) {
    resume_position_ = LoaderPosition{ParseUnsigned(meta.values.at(kLoaderEpoch)),
                                      ParseUnsigned(meta.values.at(kLoaderBatch)),
                                      ParseUnsigned(meta.values.at(kLoaderSeed))};
  }
  loop.first_step = static_cast<int>(meta.step);
  Print(Format("# resumed from %s: step %lld, %s read in %.2f s (written by %d ranks)", resumed_.dir.c_str(),
               static_cast<long long>(meta.step), FormatBytes(resumed_.read_bytes).c_str(), resumed_.seconds,
               resumed_.saved_world_size));
  if (!plan_.resume_unchecked.empty()) {
    Print("# resume: the checkpoint (an older trainbench's) does not record " + plan_.resume_unchecked +
          "; assumed equal to this run's");
  }
}

void PointIo::OpenLoader() {
  DataLoaderOptions o;
  o.dir = flags_.data_dir;
  o.raw = flags_.data_raw;
  o.raw_vocab = static_cast<uint64_t>(model_.config().vocab);
  o.seq = seq_;
  o.batch = micro_batch_;
  // The samples are sharded over the data parallel replicas, not the ranks: every rank of a replica that uses tokens
  // (its tensor parallel group's, its first and last stage's) reads the replica's share, as each rank of plain data
  // parallel reads its own, so that the run trains on the batches of data parallel over the same replicas.
  o.rank = point_.Place(comm_.rank()).data;
  o.world = point_.data_parallel;
  o.seed = seed_;
  o.workers = flags_.loader_workers;
  o.prefetch = flags_.prefetch;
  o.direct_io = flags_.direct_io;
  o.read = ParseReadMethod(flags_.read);
  o.record_bytes = plan_.record_bytes;
  o.io_throttle_MBps = throttle_MBps_;
  o.io_latency_ms = flags_.io_latency_ms + plan_.io_stall_ms;
  o.resume = resume_position_;
  loader_ = std::make_unique<DataLoader>(std::move(o));
}

void PointIo::OpenCheckpointer() {
  CheckpointOptions o;
  o.dir = checkpoint_dir_;
  o.mode = plan_.checkpoint_mode;
  o.keep = flags_.checkpoint_keep;
  o.on_error = plan_.on_error;
  o.verify = flags_.checkpoint_verify;
  o.deferred_snapshot = true;  // the loop calls BeforeUpdate before each optimizer step
  o.part = Part();
  checkpointer_ = std::make_unique<Checkpointer>(comm_.host_comm(), o, StateOf(model_), CopierFor(model_));
}

CheckpointPart PointIo::Part() const {
  return {point_.CheckpointPart(comm_.rank()), point_.checkpoint_parts()};
}

void PointIo::Save(int step) {
  Shared([&] { checkpointer_->Poll(); });
  const int done = step + 1;  // steps completed: where a resume continues
  if (done % flags_.checkpoint_every != 0) return;
  CheckpointMeta meta;
  meta.step = done;
  meta.model_fingerprint = ModelFingerprint(model_.config());
  for (const TrajectoryOption& option : plan_.trajectory(comm_.size(), micro_batch_)) {
    meta.values[option.key] = option.value;
  }
  if (loader_) {
    const LoaderPosition next = loader_->Position();  // the batch the next step would take
    meta.values[kLoaderEpoch] = std::to_string(next.epoch);
    meta.values[kLoaderBatch] = std::to_string(next.batch);
    meta.values[kLoaderSeed] = std::to_string(next.seed);
  }
  Shared([&] { checkpointer_->Save(meta); });
}

void PointIo::Finish() {
  if (checkpointer_) Shared([&] { checkpointer_->Drain(); });
}

void PointIo::Shared(const std::function<void()>& collective) {
  try {
    collective();
  } catch (const RuntimeError& e) {
    throw SharedError(e, comm_.rank() == 0);  // the checkpointer agreed on the failure: every rank throws it
  }
}

void PointIo::AddToReport(Group& io, const std::string& name, const std::vector<StepRecord>& records) {
  Group* group = comm_.rank() == 0 ? &io.Child(name) : nullptr;  // io/<point>: schema::kIoPoint
  AddSharesToReport(group, records);
  if (plan_.loader) AddLoaderToReport(group);  // collective: the ranks without a loader send no row
  if (checkpointer_) AddCheckpointsToReport(group);
}

// Stall shares over every rank's measured steps, how much slower steps ran while a checkpoint writer worked, and
// where the run resumed from (collective).
void PointIo::AddSharesToReport(Group* group, const std::vector<StepRecord>& records) {
  // Per rank: the measured steps' totals; steps (and their time) with the checkpoint writer busy / idle.
  StepTotals mine;
  enum { kStep, kData, kCheckpoint, kBusyTime, kBusySteps, kIdleTime, kIdleSteps, kSums };
  double sums[kSums] = {};
  for (const StepRecord& r : records) {
    mine.Add(r);
    if (r.warmup) continue;
    // A step that took a checkpoint is its own kind: its stall is counted there, not as writer slowdown.
    if (r.checkpoint_stall_s > 0 && plan_.checkpoints) continue;
    sums[r.checkpoint_writing ? kBusyTime : kIdleTime] += r.step_s;
    sums[r.checkpoint_writing ? kBusySteps : kIdleSteps] += 1;
  }
  sums[kStep] = mine.step_s;
  sums[kData] = mine.data_wait_s;
  sums[kCheckpoint] = mine.checkpoint_stall_s;
  double total[kSums] = {};
  TB_CHECK_MPI(MPI_Allreduce(sums, total, kSums, MPI_DOUBLE, MPI_SUM, comm_.host_comm()));
  if (!group) return;
  const double nan = std::nan("");
  const StepTotals all{total[kStep], total[kData], total[kCheckpoint]};
  namespace s = schema::io_point;
  schema::Set(*group, s::data_wait_share, all.data_wait_share());
  schema::Set(*group, s::checkpoint_stall_share, all.checkpoint_stall_share());
  schema::Set(*group, s::io_throttle_MBps, throttle_MBps_);
  const bool compared = total[kBusySteps] > 0 && total[kIdleSteps] > 0;
  schema::Set(*group, s::checkpoint_writer_slowdown, compared ? (total[kBusyTime] / total[kBusySteps]) /
                                                          (total[kIdleTime] / total[kIdleSteps])
                                                    : nan);
  schema::Set(*group, s::checkpoint_writer_slowdown_steps, static_cast<int64_t>(total[kBusySteps]));
  if (plan_.resume_dir.empty()) return;
  schema::Set(*group, s::resumed_from, resumed_.dir);
  schema::Set(*group, s::resumed_step, static_cast<int64_t>(resumed_.meta.step));
  schema::Set(*group, s::resume_load_s, resumed_.seconds);
  schema::Set(*group, s::resume_saved_ranks, static_cast<int64_t>(resumed_.saved_world_size));
  schema::Set(*group, s::resume_unchecked, plan_.resume_unchecked);
}

namespace {

// The dataset as the loader found it (the same on every rank that reads).
void AddDatasetToReport(Group& group, const LoaderStats& s) {
  namespace sp = schema::io_point;
  schema::Set(group, sp::dataset_files, static_cast<int64_t>(s.files));
  schema::Set(group, sp::dataset_files_kept_open, static_cast<int64_t>(s.open_files));
  schema::Set(group, sp::dataset_files_mapped, static_cast<int64_t>(s.mapped_files));
  schema::Set(group, sp::dataset_samples, static_cast<int64_t>(s.samples));
  schema::Set(group, sp::record_bytes, static_cast<int64_t>(s.record_bytes));
  schema::Set(group, sp::batches_per_epoch, static_cast<int64_t>(s.batches_per_epoch));
  schema::Set(group, sp::dropped_samples_per_epoch, static_cast<int64_t>(s.dropped_per_epoch));
}

}  // namespace

// The loader's figures, and a row per rank that read (collective; the point's rank 0, on the first stage, reads).
void PointIo::AddLoaderToReport(Group* group) {
  struct RankLoader {
    int rank, replica;
    double batches, bytes_read, reads, read_s, wait_s;
  };
  std::vector<RankLoader> mine;
  if (loader_) {
    const LoaderStats s = loader_->stats();
    mine.push_back({comm_.rank(), point_.Place(comm_.rank()).data, static_cast<double>(s.batches),
                    static_cast<double>(s.bytes_read), static_cast<double>(s.reads), s.read_s, s.wait_s});
  }
  const std::vector<std::vector<RankLoader>> all = GatherRecords(comm_.host_comm(), mine);
  if (!group) return;
  AddDatasetToReport(*group, loader_->stats());
  std::vector<RankLoader> rows;
  for (const std::vector<RankLoader>& rank : all) rows.insert(rows.end(), rank.begin(), rank.end());
  namespace sp = schema::io_point;
  namespace c = sp::loader;
  schema::RecordTable<RankLoader>(sp::kLoader)
      .Column(c::rank, [](const RankLoader& r) { return static_cast<int64_t>(r.rank); })
      .Column(c::replica, [](const RankLoader& r) { return static_cast<int64_t>(r.replica); })
      .Column(c::batches, [](const RankLoader& r) { return r.batches; })
      .Column(c::bytes_read, [](const RankLoader& r) { return r.bytes_read; })
      .Column(c::reads, [](const RankLoader& r) { return r.reads; })
      .Column(c::read_s, [](const RankLoader& r) { return r.read_s; })
      .Column(c::per_read_MBps, [](const RankLoader& r) { return r.read_s > 0 ? r.bytes_read / r.read_s / 1e6 : 0; })
      .Column(c::wait_s, [](const RankLoader& r) { return r.wait_s; })
      .Write(*group, rows);
  const LoaderTotals totals = LoaderTotalsOf(*schema::FindTable(group, sp::kLoader));
  // Each replica's batch is read by its tensor parallel ranks, on two stages with a pipeline: the sums count it that
  // many times, as the storage served it.
  schema::Set(*group, sp::loader_ranks, static_cast<int64_t>(rows.size()));
  schema::Set(*group, sp::loader_ranks_per_batch,
              static_cast<int64_t>(point_.tensor_parallel * (point_.pipeline_parallel > 1 ? 2 : 1)));
  schema::Set(*group, sp::loader_bytes, static_cast<int64_t>(totals.bytes));
  schema::Set(*group, sp::loader_per_read_MBps, totals.per_read_MBps);
}

// A row per checkpoint per rank (collective): the events' figures travel as records, their errors as text.
void PointIo::AddCheckpointsToReport(Group* group) {
  struct EventFigures {
    int64_t step;
    int rank;
    CheckpointMode mode;
    uint64_t bytes;
    double stall_s, write_s, write_gbps, copy_s, crc_s, write_calls_s, commit_s;
    uint32_t crc32c;
    bool verified, ok;
  };
  std::vector<EventFigures> mine;
  std::vector<std::string> errors;
  for (const CheckpointEvent& e : checkpointer_->events()) {
    mine.push_back({e.step, e.rank, e.mode, e.bytes, e.stall_s, e.write_s, e.write_gbps, e.stages.copy_s, e.stages.crc_s,
                    e.stages.write_calls_s, e.stages.commit_s, e.crc32c, e.verified, e.ok});
    errors.push_back(e.error);
  }
  const std::vector<std::vector<EventFigures>> figures = GatherRecords(comm_.host_comm(), mine);
  const std::vector<std::vector<std::string>> texts = GatherStringLists(comm_.host_comm(), errors);
  if (!group) return;
  struct Row {
    const EventFigures* e;
    const std::string* error;
  };
  std::vector<Row> rows;
  for (size_t r = 0; r < figures.size(); ++r) {
    for (size_t i = 0; i < figures[r].size(); ++i) rows.push_back({&figures[r][i], &texts[r][i]});
  }
  namespace s = schema::io_point;
  namespace c = s::checkpoints;
  schema::Set(*group, s::checkpoint_dir, checkpoint_dir_);
  schema::Set(*group, s::checkpoint_state_bytes, static_cast<int64_t>(checkpointer_->state_bytes()));
  schema::RecordTable<Row>(s::kCheckpoints)
      .Column(c::step, [](const Row& r) { return r.e->step; })
      .Column(c::rank, [](const Row& r) { return r.e->rank; })
      .Column(c::mode, [](const Row& r) { return CheckpointModeName(r.e->mode); })
      .Column(c::bytes, [](const Row& r) { return static_cast<int64_t>(r.e->bytes); })
      .Column(c::stall_s, [](const Row& r) { return r.e->stall_s; })
      .Column(c::write_s, [](const Row& r) { return r.e->write_s; })
      .Column(c::write_GBps, [](const Row& r) { return r.e->write_gbps; })
      .Column(c::copy_s, [](const Row& r) { return r.e->copy_s; })
      .Column(c::crc_s, [](const Row& r) { return r.e->crc_s; })
      .Column(c::write_calls_s, [](const Row& r) { return r.e->write_calls_s; })
      .Column(c::commit_s, [](const Row& r) { return r.e->commit_s; })
      .Column(c::crc32c, [](const Row& r) { return static_cast<int64_t>(r.e->crc32c); })
      .Column(c::verified, [](const Row& r) { return r.e->verified ? 1 : 0; })
      .Column(c::ok, [](const Row& r) { return r.e->ok ? 1 : 0; })
      .Column(c::error, [](const Row& r) { return *r.error; })
      .Write(*group, rows);
  const CheckpointTotals totals = CheckpointTotalsOf(*schema::FindTable(group, s::kCheckpoints));
  schema::Set(*group, s::checkpoint_bytes, totals.bytes);
  schema::Set(*group, s::checkpoint_write_GBps, totals.write_GBps);
}

double ThrottleAtDataWaitShare(const std::vector<double>& rates, const std::vector<double>& shares, double share) {
  for (size_t i = 0; i < rates.size() && i < shares.size(); ++i) {
    if (shares[i] < share) continue;
    if (i == 0) return std::nan("");  // already past it at the fastest rate: the crossing lies above the sweep
    // Linear between the last rate below the share and the first at or above it.
    const double t = (share - shares[i - 1]) / (shares[i] - shares[i - 1]);
    return rates[i - 1] + t * (rates[i] - rates[i - 1]);
  }
  return std::nan("");
}

}  // namespace tb
