#include "cost.h"

#include <algorithm>
#include <cmath>

#include "error.h"

namespace tb {

double YoungDalyInterval(double checkpoint_cost, double mtbf) { return std::sqrt(2.0 * checkpoint_cost * mtbf); }

bool LayoutFits(const CostInputs& in, const Offering& offering) { return in.gpus_per_node <= offering.gpus_per_node; }

namespace {

void CheckCostInputs(const CostInputs& in, const Offering& offering) {
  if (!(in.tokens_per_s > 0)) throw InputError("cannot price a run without a positive throughput");
  if (!(in.target_tokens > 0)) throw InputError("the training target must be positive");
  if (in.gpus <= 0) throw InputError("cannot price a job of 0 GPUs");
  if (!LayoutFits(in, offering)) {
    throw InputError("offering " + offering.name + " has " + std::to_string(offering.gpus_per_node) +
                     (offering.gpus_per_node == 1 ? " GPU" : " GPUs") + " per node; the layout needs " +
                     std::to_string(in.gpus_per_node) + " on one node");
  }
}

}  // namespace

CostBreakdown ComputeCost(const CostInputs& in, const Offering& offering, const CostAssumptions& assumptions) {
  CheckCostInputs(in, offering);
  CostBreakdown c;
  // Each node of the layout is a machine rented whole (its idle GPUs are paid, and it can fail); without a layout
  // the GPUs are packed into as few whole nodes as hold them.
  c.nodes = std::max(in.nodes, (in.gpus + offering.gpus_per_node - 1) / offering.gpus_per_node);
  c.billed_gpus = c.nodes * offering.gpus_per_node;
  c.job_usd_per_hour = c.nodes * offering.NodeHourUsd();
  c.work_hours = in.target_tokens / in.tokens_per_s / 3600.0;
  c.startup_hours = in.startup_s / 3600.0;
  c.provisioning_hours = offering.provisioning_hours;
  c.job_mtbf_hours = offering.mtbf_node_hours / c.nodes;

  if (in.checkpoint_stall_s) c.young_daly_hours = YoungDalyInterval(*in.checkpoint_stall_s / 3600.0, c.job_mtbf_hours);
  c.interval_is_young_daly = assumptions.young_daly_interval && c.young_daly_hours.has_value();
  c.checkpoint_interval_hours = c.interval_is_young_daly ? *c.young_daly_hours : assumptions.checkpoint_interval_hours;
  c.checkpoint_overhead_hours =
      in.checkpoint_stall_s ? c.work_hours / c.checkpoint_interval_hours * (*in.checkpoint_stall_s / 3600.0) : 0.0;
  c.run_hours = c.provisioning_hours + c.startup_hours + c.work_hours + c.checkpoint_overhead_hours;

  // First order: failures arrive at the job's rate over the failure-free run; each costs the restart, a new
  // start-up and, on average, half a checkpoint interval of work done since the last checkpoint.
  c.expected_failures = c.run_hours / c.job_mtbf_hours;
  c.lost_hours_per_failure = offering.restart_hours + c.startup_hours + c.checkpoint_interval_hours / 2.0;
  c.retry_hours = c.expected_failures * c.lost_hours_per_failure;
  c.time_to_train_hours = c.run_hours + c.retry_hours;

  c.gpu_usd = c.job_usd_per_hour * (c.run_hours - c.provisioning_hours);
  c.provisioning_usd = c.job_usd_per_hour * c.provisioning_hours;
  c.storage_gb = assumptions.dataset_gb + assumptions.checkpoints_kept * in.checkpoint_gb;
  c.storage_usd = c.storage_gb * offering.storage_usd_per_gb_month * c.time_to_train_hours / kHoursPerMonth;
  c.transfer_usd = assumptions.egress_gb * offering.egress_usd_per_gb;
  c.retry_usd = c.job_usd_per_hour * c.retry_hours;
  if (in.power_per_gpu_W) {
    c.energy_kwh = *in.power_per_gpu_W * in.gpus * c.work_hours / 1000.0;
    c.energy_J_per_token = *c.energy_kwh * 3.6e6 / in.target_tokens;
    if (offering.usd_per_kwh) c.energy_usd = *c.energy_kwh * *offering.usd_per_kwh;
  }
  c.total_usd = c.gpu_usd + c.provisioning_usd + c.storage_usd + c.transfer_usd + c.retry_usd + c.energy_usd.value_or(0);
  c.usd_per_million_tokens = c.total_usd / (in.target_tokens / 1e6);
  return c;
}

CostDecision Decide(const std::vector<CostBreakdown>& rows, std::optional<double> deadline_hours) {
  CostDecision d;
  for (size_t i = 0; i < rows.size(); ++i) {
    const CostBreakdown& r = rows[i];
    if (!d.cheapest || r.total_usd < rows[*d.cheapest].total_usd) d.cheapest = i;
    if (!d.fastest || r.time_to_train_hours < rows[*d.fastest].time_to_train_hours) d.fastest = i;
    if (deadline_hours && r.time_to_train_hours <= *deadline_hours &&
        (!d.cheapest_within_deadline || r.total_usd < rows[*d.cheapest_within_deadline].total_usd)) {
      d.cheapest_within_deadline = i;
    }
  }
  return d;
}

}  // namespace tb
