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

struct FigureSpec {
  const char* name;
  double RepeatFigures::*member;
  const sc::RealColumn* column;
};

const std::vector<FigureSpec>& Figures() {
  namespace r = sc::point::repeats;
  static const std::vector<FigureSpec> figures = {
      {"tokens_per_s", &RepeatFigures::tokens_per_s, &r::tokens_per_s},
      {"step_s", &RepeatFigures::step_s, &r::step_s},
      {"mfu_peak", &RepeatFigures::mfu_peak, &r::mfu_peak},
      {"mfu_measured_gemm", &RepeatFigures::mfu_measured_gemm, &r::mfu_measured_gemm},
      {"comm_exposed_s", &RepeatFigures::comm_exposed_s, &r::comm_exposed_s},
      {"data_wait_share", &RepeatFigures::data_wait_share, &r::data_wait_share},
      {"checkpoint_stall_share", &RepeatFigures::checkpoint_stall_share, &r::checkpoint_stall_share},
      {"checkpoint_write_GBps", &RepeatFigures::checkpoint_write_GBps, &r::checkpoint_write_GBps},
  };
  return figures;
}

const FigureSpec& FigureNamed(const std::string& name) {
  for (const FigureSpec& figure : Figures()) {
    if (figure.name == name) return figure;
  }
  throw std::invalid_argument("no repeat figure named " + name);
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
    for (const FigureSpec& figure : Figures()) all.push_back(figure.name);
    return all;
  }();
  return names;
}

std::vector<double> FigureValues(const std::vector<RepeatFigures>& repeats, const std::string& name) {
  const FigureSpec& figure = FigureNamed(name);
  std::vector<double> values;
  for (const RepeatFigures& r : repeats) values.push_back(r.*figure.member);
  return values;
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
  for (const FigureSpec& figure : Figures()) sc::AddColumn(table, *figure.column, FigureValues(repeats, figure.name));

  Table& spread = sc::AddTable(point_group, p::kSpread);
  std::vector<std::string> names;
  std::vector<int64_t> counts;
  std::vector<double> medians, mins, maxes, cvs;
  for (const FigureSpec& figure : Figures()) {
    const Spread s = SpreadOf(FigureValues(repeats, figure.name));
    names.push_back(figure.name);
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
  const Spread tokens = SpreadOf(FigureValues(repeats, "tokens_per_s"));
  const Spread step = SpreadOf(FigureValues(repeats, "step_s"));
  const Spread exposed = SpreadOf(FigureValues(repeats, "comm_exposed_s"));
  return Format("#   over %zu repeats (the figures above are repeat %zu's, at the median): tokens/s median %.0f "
                "(min %.0f, max %.0f, CV %.1f%%); step CV %.1f%%; exposed comm median %.3f ms (CV %.1f%%)",
                repeats.size(), median + 1, tokens.median, tokens.min, tokens.max, tokens.cv * 100, step.cv * 100,
                exposed.median * 1e3, exposed.cv * 100);
}

}  // namespace tb
