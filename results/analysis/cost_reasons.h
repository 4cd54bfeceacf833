// Why `cost`'s decision came out as it did: each priced configuration's dominant share of its training time
// (compute, exposed communication by link class, data wait, checkpoint stall) and of its total cost (GPU hours,
// retries, storage, transfer, provisioning, energy), and for the cheapest, the fastest and the cheapest within the
// deadline the reason it beats the runner-up, in words ("2x8 (projected) on X loses on exposed inter-node
// communication: 31% of the training time vs 4%"). Pure functions, tested on worked examples.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cost.h"

namespace tb {

// What a reason needs of one priced configuration.
struct PricedConfig {
  std::string name;         // as the decision lines name it: "run.h5 k2 1x2 (measured) on lambda"
  std::string config;       // the run and configuration ("run.h5 k2 1x2"): one per layout, on any offering
  double exposed_share = 0; // exposed communication / step time (without checkpoint stalls)
  double data_wait_share = 0;  // (data_wait + h2d) / step time, as measured
  int nodes = 1;            // the layout's: exposed communication is inter-node when it spans nodes
  CostBreakdown cost;
};

struct Share {
  std::string part;
  double fraction = 0;
};

// Shares of the training time (work + checkpoint overhead) that add up to 1: compute (and the rest of the step),
// exposed intra-node or inter-node communication, data wait, checkpoint stall.
std::vector<Share> TimeShares(const PricedConfig& config);
// Shares of the total cost that add up to 1: GPU hours, retries, storage, transfer, provisioning, energy.
std::vector<Share> CostShares(const CostBreakdown& cost);
// The largest share (the first of equals).
Share Dominant(const std::vector<Share>& shares);

// Where one configuration's training time and cost go: every share, and the largest of each.
struct RowShares {
  std::vector<Share> time, cost;
  Share dominant_time, dominant_cost;
};
RowShares SharesOf(const PricedConfig& config);

// "compute 81% of the training time, GPU hours 97% of the cost".
std::string DominantText(const RowShares& shares);
std::string DominantText(const PricedConfig& config);

// Why `winner` beats `other`: the same configuration on another offering loses on its price per job-hour;
// otherwise on the non-compute part of the training time where it spends the most more (at least 1 point of the
// training time), else on the work itself (its hours at its price per hour).
std::string WhyBeats(const PricedConfig& winner, const PricedConfig& other);

struct DecisionReasons {
  std::string cheapest, fastest, deadline;  // "" where the decision has none
};
// The runner-up of each decision: the next configuration by the decision's order (total cost; time to train; total
// among those within the deadline), another layout when there is one, else the same one on another offering. A
// runner-up within 1% of the winner is called a near tie before the reason.
DecisionReasons ExplainDecision(const std::vector<PricedConfig>& rows, const CostDecision& decision,
                                std::optional<double> deadline_hours);

}  // namespace tb
