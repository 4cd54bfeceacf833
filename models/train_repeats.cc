#include "train_repeats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "io_tables.h"
#include "console.h"
#include "schema.h"

namespace tb {
namespace {

namespace sc = schema;

// Where RepeatFigures holds each figure of the spread table (schema::point::kSpreadFigures).
double RepeatFigures::*MemberOf(const sc::RealColumn& figure) {
  namespace r = sc::point::repeats;
  static const std::vector<std::pair<const sc::RealColumn*, double RepeatFigures::*>> members = {
      {&r::tokens_per_s, &RepeatFigures::tokens_per_s},
      {&r::step_s, &RepeatFigures::step_s},
      {&r::mfu_peak, &RepeatFigures::mfu_peak},
      {&r::mfu_measured_gemm, &RepeatFigures::mfu_measured_gemm},
      {&r::comm_exposed_s, &RepeatFigures::comm_exposed_s},
      {&r::data_wait_share, &RepeatFigures::data_wait_share},
      {&r::checkpoint_stall_share, &RepeatFigures::checkpoint_stall_share},
      {&r::checkpoint_write_GBps, &RepeatFigures::checkpoint_write_GBps},
  };
  for (const auto& [column, member] : members) {
    if (column == &figure) return member;
  }
  throw std::invalid_argument("no repeat figure " + figure.name);
}

std::vector<double> ValuesOf(const std::vector<RepeatFigures>& repeats, const sc::RealColumn& figure) {
  const auto member = MemberOf(figure);
  std::vector<double> values;
  for (const RepeatFigures& r : repeats) values.push_back(r.*member);
  return values;
}

}  // namespace

RepeatFigures FiguresOf(const ScalingPoint& point, const std::vector<RankSteps>& ranks, const Group* io_point) {
  const StepTotals totals = TotalsOf(ranks);
  RepeatFigures f;
  f.tokens_per_s = point.tokens_per_s;
  f.step_s = point.step_s;
  f.mfu_peak = point.mfu_peak;
  f.mfu_measured_gemm = point.mfu_measured;
  f.comm_exposed_s = point.comm_exposed_s;
  f.data_wait_share = totals.data_wait_share();
  f.checkpoint_stall_share = totals.checkpoint_stall_share();
  const Table* checkpoints = sc::FindTable(io_point, sc::io_point::kCheckpoints);
  f.checkpoint_write_GBps = checkpoints ? CheckpointWriteGBps(*checkpoints) : std::nan("");
  return f;
}

Spread SpreadOf(const std::vector<double>& values) {
  std::vector<double> v;
  for (double x : values) {
    if (!std::isnan(x)) v.push_back(x);
  }
  Spread s;
  s.count = v.size();
  if (v.empty()) {
    s.median = s.min = s.max = s.cv = std::nan("");
    return s;
  }
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  s.min = v.front();
  s.max = v.back();
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n);
  if (n < 2 || mean == 0) {
    s.cv = std::nan("");
    return s;
  }
  double squares = 0;
  for (double x : v) squares += (x - mean) * (x - mean);
  s.cv = std::sqrt(squares / static_cast<double>(n - 1)) / std::fabs(mean);
  return s;
}

const std::vector<std::string>& RepeatFigureNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const sc::RealColumn* figure : sc::point::kSpreadFigures) all.push_back(figure->name);
    return all;
  }();
  return names;
}

size_t MedianRepeat(const std::vector<RepeatFigures>& repeats) {
  if (repeats.empty()) throw std::invalid_argument("MedianRepeat: no repeats");
  std::vector<size_t> order(repeats.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return repeats[a].tokens_per_s < repeats[b].tokens_per_s; });
  return order[(order.size() - 1) / 2];
}

void AddRepeatsToReport(Group& point_group, const std::vector<RepeatFigures>& repeats, size_t median) {
  namespace p = sc::point;
  sc::Set(point_group, p::repeat_count, static_cast<int64_t>(repeats.size()));
  sc::Set(point_group, p::median_repeat, static_cast<int64_t>(median + 1));
  Table& table = sc::AddTable(point_group, p::kRepeats);
  std::vector<int64_t> index(repeats.size());
  std::iota(index.begin(), index.end(), int64_t{1});
  sc::AddColumn(table, p::repeats::repeat, index);
  for (const sc::RealColumn* figure : p::kSpreadFigures) sc::AddColumn(table, *figure, ValuesOf(repeats, *figure));

  Table& spread = sc::AddTable(point_group, p::kSpread);
  std::vector<std::string> names;
  std::vector<int64_t> counts;
  std::vector<double> medians, mins, maxes, cvs;
  for (const sc::RealColumn* figure : p::kSpreadFigures) {
    const Spread s = SpreadOf(ValuesOf(repeats, *figure));
    names.push_back(figure->name);
    counts.push_back(static_cast<int64_t>(s.count));
    medians.push_back(s.median);
    mins.push_back(s.min);
    maxes.push_back(s.max);
    cvs.push_back(s.cv);
  }
  sc::AddColumn(spread, p::spread::figure, names);
  sc::AddColumn(spread, p::spread::count, counts);
  sc::AddColumn(spread, p::spread::median, medians);
  sc::AddColumn(spread, p::spread::min, mins);
  sc::AddColumn(spread, p::spread::max, maxes);
  sc::AddColumn(spread, p::spread::cv, cvs);
}

std::string SpreadLine(const std::vector<RepeatFigures>& repeats, size_t median) {
  if (repeats.size() < 2) return "#   1 run: spread unknown (--repeats N measures it)";
  namespace r = sc::point::repeats;
  const Spread tokens = SpreadOf(ValuesOf(repeats, r::tokens_per_s));
  const Spread step = SpreadOf(ValuesOf(repeats, r::step_s));
  const Spread exposed = SpreadOf(ValuesOf(repeats, r::comm_exposed_s));
  return Format("#   over %zu repeats (the figures above are repeat %zu's, at the median): tokens/s median %.0f "
                "(min %.0f, max %.0f, CV %.1f%%); step CV %.1f%%; exposed comm median %.3f ms (CV %.1f%%)",
                repeats.size(), median + 1, tokens.median, tokens.min, tokens.max, tokens.cv * 100, step.cv * 100,
                exposed.median * 1e3, exposed.cv * 100);
}

}  // namespace tb
