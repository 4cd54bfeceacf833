// train --op-times, per point: each kind's mean seconds per measured step over the point's ranks (means, so that the
// rows add up to the step), its work per step and the rates that gives, against the GEMM rate and the device's copy
// rate measured in the same run. Built once; the console table and the report's op_times table render it.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "model_config.h"
#include "op_times.h"
#include "train_summary.h"

namespace tb {

struct OpRow {
  // OpKindName (comm_model: the communication inside forward and backward; only where the mode has some),
  // "comm_exposed" (what the loop waited for communication outside forward and backward), "comm_pipeline" (pipeline
  // parallel's exchanges between stages and the waits for them, the bubble: only with stages) or "other" (the rest).
  std::string kind;
  std::string phase;  // "forward", "backward", "step"
  double seconds = 0;  // mean per measured step
  double share = 0;    // of the mean step time
  double flops = 0;    // per step (0: no matmuls)
  double bytes = 0;    // per step, at least (0: a matmul kind, or not counted)
  double tflops = std::numeric_limits<double>::quiet_NaN();         // flops / seconds / 1e12
  double gemm_fraction = std::numeric_limits<double>::quiet_NaN();  // flops / seconds / the GEMM rate
  double GBps = std::numeric_limits<double>::quiet_NaN();           // bytes / seconds / 1e9
  double copy_fraction = std::numeric_limits<double>::quiet_NaN();  // bytes / seconds / the copy rate
};

// What the run's rows are measured against.
struct OpRates {
  double gemm_flops = 0;        // the measured GEMM rate (FLOP/s)
  double copy_bytes_per_s = 0;  // a device-to-device copy's bytes read + written per second
};

// What one step of the point did: micro-batches of micro_batch x seq tokens, grad_accum of them, on each of
// `stages` pipeline stages of equal layers.
struct OpShape {
  ModelConfig config;
  int seq = 0;
  int micro_batch = 0;
  int grad_accum = 1;
  bool bf16 = false;
  double parameter_elements = 0;  // AdamW's elements on a rank (with stages: the mean over the point's ranks)
  // Pipeline stages: a rank does its stage's share of the model's work (the embeddings on the first, the head on the
  // last), so the mean over the point's ranks, which the rows' seconds are, is the whole model's work over `stages`.
  int stages = 1;
  // Tensor parallel: each rank does 1/T of the matmuls (WorkOf).
  int tensor_parallel = 1;
  // The mode communicates inside forward and backward (tensor parallel, fsdp, expert parallel, dp's buckets over
  // several ranks): the table has a comm_model row.
  bool comm_model = false;
};

std::vector<OpRow> SummarizeOpTimes(const std::vector<RankSteps>& ranks, const OpShape& shape, const OpRates& rates);

// The console table (metadata, header and rows, each line within the console width).
std::vector<std::string> OpTimesLines(const std::vector<OpRow>& rows, const OpRates& rates);

// The report's op_times table in `point` (a train point's group).
void AddOpTimesTable(Group& point, const std::vector<OpRow>& rows);

}  // namespace tb
