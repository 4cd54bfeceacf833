#include "cost_reasons.h"

#include <algorithm>
#include <functional>

#include "console.h"

namespace tb {
namespace {

constexpr double kMinGap = 0.01;   // a part of the training time must differ by 1 point to be the reason
constexpr double kNearTie = 0.01;  // a runner-up within 1% of the winner is a near tie, and said to be

double Percent(double fraction) { return 100 * fraction; }

// The row after `winner` in the order `before`, preferring another configuration; nullopt when it is alone.
std::optional<size_t> RunnerUp(const std::vector<PricedConfig>& rows, size_t winner,
                               const std::function<bool(size_t)>& eligible,
                               const std::function<bool(size_t, size_t)>& before) {
  std::optional<size_t> other_layout, same_layout;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i == winner || !eligible(i)) continue;
    std::optional<size_t>& best = rows[i].config == rows[winner].config ? same_layout : other_layout;
    if (!best || before(i, *best)) best = i;
  }
  return other_layout ? other_layout : same_layout;
}

// What a decision compares: the total cost or the time to train, and how to write it.
struct Criterion {
  std::function<double(const PricedConfig&)> value;
  std::function<std::string(double)> text;  // "$139.30", "1.45 h"
};

std::string Reason(const std::vector<PricedConfig>& rows, size_t winner, const std::function<bool(size_t)>& eligible,
                   const Criterion& criterion, const std::string& alone) {
  const auto before = [&](size_t a, size_t b) { return criterion.value(rows[a]) < criterion.value(rows[b]); };
  const std::optional<size_t> other = RunnerUp(rows, winner, eligible, before);
  if (!other) return alone;
  const double mine = criterion.value(rows[winner]), theirs = criterion.value(rows[*other]);
  std::string reason = WhyBeats(rows[winner], rows[*other]);
  if (theirs - mine <= kNearTie * mine) {
    reason = "a near tie, within 1% (" + criterion.text(mine) + " vs " + criterion.text(theirs) + "): " + reason;
  }
  return reason;
}

}  // namespace

std::vector<Share> TimeShares(const PricedConfig& config) {
  const double work = config.cost.work_hours, overhead = config.cost.checkpoint_overhead_hours;
  const double training = work + overhead > 0 ? work / (work + overhead) : 1.0;
  const double exposed = std::clamp(config.exposed_share, 0.0, 1.0);
  const double data = std::clamp(config.data_wait_share, 0.0, 1.0 - exposed);
  const std::string link = config.nodes > 1 ? "inter-node" : "intra-node";
  return {{"compute", (1 - exposed - data) * training},
          {"exposed " + link + " communication", exposed * training},
          {"data wait", data * training},
          {"checkpoint stall", 1 - training}};
}

std::vector<Share> CostShares(const CostBreakdown& c) {
  const double total = c.total_usd > 0 ? c.total_usd : 1.0;
  return {{"GPU hours", c.gpu_usd / total},       {"retries", c.retry_usd / total},
          {"storage", c.storage_usd / total},     {"transfer", c.transfer_usd / total},
          {"provisioning", c.provisioning_usd / total}, {"energy", c.energy_usd.value_or(0) / total}};
}

Share Dominant(const std::vector<Share>& shares) {
  return *std::max_element(shares.begin(), shares.end(),
                           [](const Share& a, const Share& b) { return a.fraction < b.fraction; });
}

RowShares SharesOf(const PricedConfig& config) {
  RowShares shares{TimeShares(config), CostShares(config.cost), {}, {}};
  shares.dominant_time = Dominant(shares.time);
  shares.dominant_cost = Dominant(shares.cost);
  return shares;
}

std::string DominantText(const RowShares& shares) {
  const Share &time = shares.dominant_time, &cost = shares.dominant_cost;
  return Format("%s %.0f%% of the training time, %s %.0f%% of the cost", time.part.c_str(), Percent(time.fraction),
                cost.part.c_str(), Percent(cost.fraction));
}

std::string DominantText(const PricedConfig& config) { return DominantText(SharesOf(config)); }

std::string WhyBeats(const PricedConfig& winner, const PricedConfig& other) {
  if (winner.config == other.config) {
    return Format("%s loses on price: $%.2f vs $%.2f per job-hour for the same measurement", other.name.c_str(),
                  other.cost.job_usd_per_hour, winner.cost.job_usd_per_hour);
  }
  const std::vector<Share> mine = TimeShares(winner), theirs = TimeShares(other);
  size_t worst = 0;
  double gap = kMinGap;
  for (size_t i = 1; i < theirs.size(); ++i) {  // the parts other than compute
    if (theirs[i].fraction - mine[i].fraction >= gap) {
      gap = theirs[i].fraction - mine[i].fraction;
      worst = i;
    }
  }
  if (worst > 0) {
    return Format("%s loses on %s: %.0f%% of the training time vs %.0f%%", other.name.c_str(),
                  theirs[worst].part.c_str(), Percent(theirs[worst].fraction), Percent(mine[worst].fraction));
  }
  return Format("%s loses on the work itself: %.3g h of it at $%.2f per hour vs %.3g h at $%.2f", other.name.c_str(),
                other.cost.work_hours, other.cost.job_usd_per_hour, winner.cost.work_hours,
                winner.cost.job_usd_per_hour);
}

DecisionReasons ExplainDecision(const std::vector<PricedConfig>& rows, const CostDecision& d,
                                std::optional<double> deadline_hours) {
  DecisionReasons reasons;
  const auto any = [](size_t) { return true; };
  const Criterion cheaper{[](const PricedConfig& p) { return p.cost.total_usd; },
                          [](double usd) { return Format("$%.2f", usd); }};
  const Criterion faster{[](const PricedConfig& p) { return p.cost.time_to_train_hours; },
                         [](double hours) { return Format("%.3g h", hours); }};
  if (d.cheapest) reasons.cheapest = Reason(rows, *d.cheapest, any, cheaper, "the only configuration priced");
  if (d.fastest) reasons.fastest = Reason(rows, *d.fastest, any, faster, "the only configuration priced");
  if (d.cheapest_within_deadline && deadline_hours) {
    const auto within = [&](size_t i) { return rows[i].cost.time_to_train_hours <= *deadline_hours; };
    reasons.deadline = Reason(rows, *d.cheapest_within_deadline, within, cheaper,
                              "the only configuration within the deadline");
  }
  return reasons;
}

}  // namespace tb
