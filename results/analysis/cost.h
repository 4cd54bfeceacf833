// Total task cost (results/README.md, "Cost and projection"): what a training job costs on one offering, from a measured (or projected)
// throughput — GPU time, storage, transfer and the expected cost of failures — and the Young/Daly checkpoint
// interval. Pure functions of their inputs; `trainbench cost` reads the inputs from reports and a price file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "prices.h"

namespace tb {

// Hours per month for storage billing: 8760 / 12, as the cloud price pages count a month.
inline constexpr double kHoursPerMonth = 730.0;

// What one configuration delivers, measured or projected.
struct CostInputs {
  double target_tokens = 0;
  double tokens_per_s = 0;               // throughput without checkpoint stalls
  int gpus = 0;                          // ranks of the job
  // The layout it runs in (measured, or the projected one); 0 = unknown: the GPUs are packed into whole nodes.
  // A layout of N nodes needs N machines, however few GPUs each of them uses.
  int nodes = 0;
  int gpus_per_node = 0;
  double startup_s = 0;                  // process start to the first step (measured)
  std::optional<double> checkpoint_stall_s;  // mean time the loop is blocked per checkpoint; nullopt: not measured
  double checkpoint_gb = 0;              // size of one checkpoint on storage (GB = 1e9 B)
  // Mean power per GPU (per rank) while training, from the report's measured energy; nullopt: not measured.
  std::optional<double> power_per_gpu_W;
};

struct CostBreakdown {
  int nodes = 0;                         // max(layout nodes, ceil(gpus / offering's gpus_per_node)): whole nodes
  int billed_gpus = 0;                   // nodes x gpus_per_node
  double job_usd_per_hour = 0;           // nodes x node-hour price
  double work_hours = 0;                 // target_tokens / tokens_per_s
  double startup_hours = 0;
  double provisioning_hours = 0;         // the offering's, before the processes start (billed)
  double checkpoint_interval_hours = 0;  // the interval used for lost work and checkpoint overhead
  bool interval_is_young_daly = false;
  std::optional<double> young_daly_hours;  // sqrt(2 x stall x job MTBF); nullopt without a measured stall
  double checkpoint_overhead_hours = 0;  // work_hours / interval x stall (0 when the stall is not measured)
  double run_hours = 0;                  // provisioning + startup + work + checkpoint overhead: without failures
  double job_mtbf_hours = 0;             // node MTBF / nodes: the job stops when any node fails
  double expected_failures = 0;          // run_hours / job MTBF = run_hours x nodes / node MTBF
  double lost_hours_per_failure = 0;     // restart + start-up + half the checkpoint interval
  double retry_hours = 0;                // expected_failures x lost_hours_per_failure
  double time_to_train_hours = 0;        // run_hours + retry_hours
  double gpu_usd = 0;                    // job_usd_per_hour x (run_hours - provisioning_hours)
  double provisioning_usd = 0;           // job_usd_per_hour x provisioning_hours
  double storage_gb = 0;                 // dataset + kept checkpoints
  double storage_usd = 0;                // storage_gb x $/GB-month x time_to_train / 730 h
  double transfer_usd = 0;               // egress_gb x $/GB
  double retry_usd = 0;                  // job_usd_per_hour x retry_hours
  // Energy of the training work (nullopt without a measured power): power per GPU x GPUs x work_hours; per token;
  // and its price at the offering's usd_per_kwh (nullopt when it has none).
  std::optional<double> energy_kwh, energy_J_per_token, energy_usd;
  double total_usd = 0;                  // gpu + provisioning + storage + transfer + retry + energy (when priced)
  double usd_per_million_tokens = 0;     // total / (target_tokens / 1e6)
};

// Young/Daly optimal checkpoint interval sqrt(2 x C x M) for checkpoint cost C and mean time between failures M
// (both in the same unit).
double YoungDalyInterval(double checkpoint_cost, double mtbf);

// Whether `in`'s layout can run on `offering`: no more GPUs on one node than its nodes have (an unknown layout can).
bool LayoutFits(const CostInputs& in, const Offering& offering);

// The cost of `in` on `offering`. Throws InputError when the throughput or target is not positive, or the layout
// does not fit the offering's nodes (LayoutFits).
CostBreakdown ComputeCost(const CostInputs& in, const Offering& offering, const CostAssumptions& assumptions);

// Which rows win: the index of the cheapest and fastest rows, and of the cheapest whose time to train is within
// the deadline (nullopt when none is, or when no deadline was given). Ties go to the earlier row.
struct CostDecision {
  std::optional<size_t> cheapest;
  std::optional<size_t> fastest;
  std::optional<size_t> cheapest_within_deadline;
};
CostDecision Decide(const std::vector<CostBreakdown>& rows, std::optional<double> deadline_hours);

}  // namespace tb
