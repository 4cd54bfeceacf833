// What `trainbench cost` needs from a report, read once and checked: the training points (throughput, step time
// without checkpoint stalls, communication, layout), start-up, checkpoint stalls and size, the all-reduce sweep,
// the device and the model's memory. Every missing piece is an InputError naming the file.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "memory_fit.h"
#include "projection.h"
#include "report.h"

namespace tb {

struct MeasuredPoint {
  TrainPointInput train;               // k, layout, step_s (without checkpoint stalls), communication
  double step_s_reported = 0;          // the report's step_s (checkpoint stalls included)
  double tokens_per_s_reported = 0;    // the report's tokens_per_s
  int micro_batch = 0;
  double data_wait_share = 0;          // (data_wait + h2d) / step time without checkpoint stalls, measured steps
  double optimizer_s = 0;              // AdamW per step: mean over every rank's measured steps (0 before it was recorded)
  double gather_exposed_s = 0;         // the part of comm_exposed waiting for parameter all-gathers (0 before it)
  // Pipeline parallel (train.pipeline_parallel > 1): the share of the pipelined part its stages waited, and 1F1B's.
  double bubble_measured = NAN, bubble_theory = NAN;
  std::optional<double> checkpoint_stall_s;  // mean over io/k<N>/checkpoints rows (every rank and event)
  int checkpoint_events = 0;           // rows averaged
  double checkpoint_state_bytes = 0;   // the whole checkpoint (io checkpoint_state_bytes); 0 when none was written
  double joules_per_token = NAN;       // the GPUs' energy per token over the measured steps; NaN when not measured
  // --repeats: the point's figures are its median repeat's; tokens/s over the repeats (train/<point>/spread).
  int repeats = 1;                     // 1 for one repeat and for reports before --repeats
  double tokens_per_s_median = NAN, tokens_per_s_min = NAN, tokens_per_s_max = NAN, tokens_per_s_cv = NAN;
};

// The step time of `p` at throughput `tokens_per_s` of the repeats (the median, min or max): step_s scaled by the
// median repeat's tokens/s over it (the repeats' relative spread; 1 for the median repeat itself).
double StepAtRepeatRate(const MeasuredPoint& p, double step_s, double tokens_per_s);

struct RunMeasurement {
  std::string path;
  std::string device;                  // rank 0's GPU name as CUDA reports it, or "cpu"
  int ranks = 0;
  int nodes = 0;
  bool weak_scaling = true;
  double startup_s = 0;                // train startup_s
  std::vector<MeasuredPoint> points;   // ascending k (k<N> groups; storage-sweep groups are skipped)
  std::vector<AllReduceSample> all_reduce;  // this report's collectives/all_reduce sweep, if any
  // The model as it ran.
  std::string model_name;
  std::string model_scaled;            // what --layers changed ("" when nothing)
  double parameters = 0;
  int seq = 0;
  int layers = 0, d_model = 0, heads = 0, vocab = 0, max_seq = 0;  // its shape (model attributes; 0: not recorded)
  // Its mixture-of-experts blocks (experts 0: a dense model, or a report before them).
  int experts = 0, top_k = 0, expert_ffn = 0, moe_every = 1;
  double capacity_factor = 0, aux_loss_coef = 0;
  std::string parallel = "dp";         // the mode of the largest point (dp, zero1, fsdp)
  double bucket_bytes = 0;             // dp's gradient buckets close at this size (config bucket_mb)
  MemoryBreakdown memory_estimate;     // the report's per-rank estimate of dp (model memory_* attributes)
  std::string memory_precision;
  double peak_device_memory_bytes = 0; // max over ranks (0 on the CPU backend)
};

// Reads the training measurement. Throws InputError "'<path>': no training measurement (...)" when the report has no
// train section or no measured point.
RunMeasurement ReadRunMeasurement(const Report& report, const std::string& path);

// The all_reduce sweep of a collectives report (out-of-place time per size, verified sizes only). Throws
// InputError when the report has none.
std::vector<AllReduceSample> ReadAllReduceSamples(const Report& report, const std::string& path);

}  // namespace tb
