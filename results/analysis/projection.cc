#include "projection.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "console.h"
#include "definitions.h"
#include "error.h"
#include "flags.h"
#include "units.h"

namespace tb {
namespace {

constexpr int kParameters = 4;
constexpr const char* kParameterNames[kParameters] = {"alpha_intra", "beta_intra", "alpha_inter", "beta_inter"};
// Below this pivot the (unit-scaled) normal equations are singular: a column is a combination of the others.
constexpr double kSingularPivot = 1e-9;

// Solves the square system m x = rhs in place (Gaussian elimination with partial pivoting). False when singular.
bool Solve(std::vector<std::vector<double>> m, std::vector<double> rhs, std::vector<double>& x) {
  const size_t n = rhs.size();
  for (size_t col = 0; col < n; ++col) {
    size_t pivot = col;
    for (size_t row = col + 1; row < n; ++row) {
      if (std::fabs(m[row][col]) > std::fabs(m[pivot][col])) pivot = row;
    }
    if (std::fabs(m[pivot][col]) < kSingularPivot) return false;
    std::swap(m[pivot], m[col]);
    std::swap(rhs[pivot], rhs[col]);
    for (size_t row = col + 1; row < n; ++row) {
      const double f = m[row][col] / m[col][col];
      for (size_t j = col; j < n; ++j) m[row][j] -= f * m[col][j];
      rhs[row] -= f * rhs[col];
    }
  }
  x.assign(n, 0.0);
  for (size_t i = n; i-- > 0;) {
    double sum = rhs[i];
    for (size_t j = i + 1; j < n; ++j) sum -= m[i][j] * x[j];
    x[i] = sum / m[i][i];
  }
  return true;
}

// Least squares of sum_i (c_i . p / t_i - 1)^2 over the parameters in `active`; the others stay 0. Columns are
// scaled to unit norm first (alpha coefficients count steps, beta coefficients count bytes: 1e9 apart).
bool SolveRelative(const std::vector<AllReduceSample>& samples, const std::vector<int>& active,
                   std::array<double, kParameters>& params) {
  const size_t n = active.size();
  std::vector<std::vector<double>> rows;
  for (const AllReduceSample& s : samples) {
    const std::array<double, kParameters> c = AllReduceCoefficients(s.nodes, s.gpus_per_node, s.bytes, s.ops);
    std::vector<double> row(n);
    for (size_t j = 0; j < n; ++j) row[j] = c[static_cast<size_t>(active[j])] / s.time_s;
    rows.push_back(std::move(row));
  }
  std::vector<double> scale(n, 0.0);
  for (const auto& row : rows) {
    for (size_t j = 0; j < n; ++j) scale[j] += row[j] * row[j];
  }
  for (double& s : scale) s = std::sqrt(s);
  std::vector<std::vector<double>> normal(n, std::vector<double>(n, 0.0));
  std::vector<double> rhs(n, 0.0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < n; ++i) {
      rhs[i] += row[i] / scale[i];
      for (size_t j = 0; j < n; ++j) normal[i][j] += row[i] / scale[i] * row[j] / scale[j];
    }
  }
  std::vector<double> x;
  if (!Solve(normal, rhs, x)) return false;
  params.fill(0.0);
  for (size_t j = 0; j < n; ++j) params[static_cast<size_t>(active[j])] = x[j] / scale[j];
  return true;
}

std::string ParameterLabel(int index) { return kParameterNames[index]; }

}  // namespace

std::array<double, 4> AllReduceCoefficients(int nodes, int gpus_per_node, double bytes, double ops) {
  const double g = gpus_per_node, m = nodes;
  return {ops * 2.0 * (g - 1.0), AllReduceBusFactor(gpus_per_node) * bytes, ops * 2.0 * (m - 1.0),
          AllReduceBusFactor(nodes) * bytes / g};
}

std::pair<double, double> LinkParameters::At(double bytes) const {
  for (const SizeBand& band : bands) {
    if (bytes < band.below_bytes) return {band.alpha_s, band.beta_s_per_byte};
  }
  return {alpha_s, beta_s_per_byte};
}

std::vector<SizeBand> EmptySizeBands() {
  return {{64.0 * 1024, 0, 0, 0, "small (< 64 KiB)"},
          {16.0 * 1024 * 1024, 0, 0, 0, "medium (64 KiB - 16 MiB)"},
          {INFINITY, 0, 0, 0, "large (>= 16 MiB)"}};
}

namespace {

// The link class a sample measures alone: intra (one node of several ranks) or inter (one rank per node).
bool Measures(const AllReduceSample& s, bool inter) {
  return inter ? s.gpus_per_node == 1 && s.nodes > 1 : s.nodes == 1 && s.gpus_per_node > 1;
}

const LinkParameters& ClassOf(const LinkModel& links, bool inter) { return inter ? links.inter : links.intra; }

// `link` (the all-sizes pair) with its bands fitted to the samples of its class.
void AddBands(LinkParameters& link, const std::vector<AllReduceSample>& samples, bool inter) {
  double lower = 0;
  for (SizeBand band : EmptySizeBands()) {
    std::vector<AllReduceSample> in;
    std::set<double> sizes;
    for (const AllReduceSample& s : samples) {
      const double message = s.bytes / s.ops;
      if (Measures(s, inter) && message >= lower && message < band.below_bytes) {
        in.push_back(s);
        sizes.insert(message);
      }
    }
    lower = band.below_bytes;
    band.samples = static_cast<int>(in.size());
    const AlphaBetaFit fit = sizes.size() >= 2 ? FitAlphaBeta(in) : AlphaBetaFit{};
    const LinkParameters& own = ClassOf(fit.links, inter);
    const bool fitted = sizes.size() >= 2 && own.beta_s_per_byte > 0;
    band.alpha_s = fitted ? own.alpha_s : link.alpha_s;
    band.beta_s_per_byte = fitted ? own.beta_s_per_byte : link.beta_s_per_byte;
    if (!fitted) {
      band.name += sizes.empty()     ? ": not measured, the all-sizes fit"
                   : sizes.size() < 2 ? ": one size, the all-sizes fit"
                                      : ": no bandwidth fitted on its own, the all-sizes fit";
    }
    link.bands.push_back(band);
  }
}

int OwnBands(const LinkParameters& link) {
  int own = 0;
  for (const SizeBand& band : link.bands) own += band.name.find("the all-sizes fit") == std::string::npos;
  return own;
}

}  // namespace

LinkParameters FitIntraBands(const std::vector<AllReduceSample>& samples) {
  LinkParameters link;
  const AlphaBetaFit all = FitAlphaBeta(samples);
  link.alpha_s = all.links.intra.alpha_s;
  link.beta_s_per_byte = all.links.intra.beta_s_per_byte;
  link.fitted = all.links.intra.fitted && link.beta_s_per_byte > 0;
  if (link.fitted) AddBands(link, samples, false);
  return link;
}

void BandLinks(LinkModel& links, const std::vector<AllReduceSample>& samples, bool inter_given) {
  for (bool inter : {false, true}) {
    LinkParameters& link = inter ? links.inter : links.intra;
    if (!link.fitted || (inter && inter_given)) continue;
    LinkParameters banded = link;
    AddBands(banded, samples, inter);
    if (OwnBands(banded) == 0) continue;  // nothing measured per band: the all-sizes pair
    banded.origin += Format(", %d of 3 size bands fitted on their own", OwnBands(banded));
    link = banded;
  }
}

double PredictAllReduceSeconds(const LinkModel& links, int nodes, int gpus_per_node, double bytes, double ops) {
  const std::array<double, 4> c = AllReduceCoefficients(nodes, gpus_per_node, bytes, ops);
  const double message = ops > 0 ? bytes / ops : bytes;
  const auto [alpha_intra, beta_intra] = links.intra.At(message);
  const auto [alpha_inter, beta_inter] = links.inter.At(message / std::max(1, gpus_per_node));
  return c[0] * alpha_intra + c[1] * beta_intra + c[2] * alpha_inter + c[3] * beta_inter;
}

AlphaBetaFit FitAlphaBeta(const std::vector<AllReduceSample>& samples) {
  AlphaBetaFit fit;
  std::vector<AllReduceSample> usable;
  for (const AllReduceSample& s : samples) {
    if (s.time_s > 0 && std::isfinite(s.time_s) && s.nodes * s.gpus_per_node > 1) usable.push_back(s);
  }
  fit.samples = static_cast<int>(usable.size());
  // The parameters some sample depends on.
  std::vector<int> active;
  for (int j = 0; j < kParameters; ++j) {
    for (const AllReduceSample& s : usable) {
      if (AllReduceCoefficients(s.nodes, s.gpus_per_node, s.bytes, s.ops)[static_cast<size_t>(j)] != 0) {
        active.push_back(j);
        break;
      }
    }
  }
  std::array<double, kParameters> params{};
  while (!active.empty()) {
    if (!SolveRelative(usable, active, params)) {
      // Not identifiable: fix an alpha at 0 (a latency cannot be told from a bandwidth when every sample has the
      // same bytes per message step), the inter-node one first when both are active.
      auto alpha = std::find_if(active.rbegin(), active.rend(), [](int j) { return j % 2 == 0; });
      if (alpha == active.rend()) break;  // betas alone singular cannot happen with nonzero columns; stay unfitted
      fit.notes.push_back(ParameterLabel(*alpha) + " cannot be separated from the bandwidth term by these " +
                          "measurements (one size per message count): fixed at 0");
      active.erase(std::next(alpha).base());
      continue;
    }
    // Keep the parameters physical: fix the most negative one at 0 and fit the rest again.
    int worst = -1;
    for (int j : active) {
      if (params[static_cast<size_t>(j)] < 0 && (worst < 0 || params[static_cast<size_t>(j)] < params[static_cast<size_t>(worst)])) {
        worst = j;
      }
    }
    if (worst < 0) break;
    fit.notes.push_back(ParameterLabel(worst) + " fitted negative: fixed at 0");
    active.erase(std::find(active.begin(), active.end(), worst));
    params.fill(0.0);
  }
  const bool fitted = !active.empty();
  auto class_fitted = [&](int alpha_index) {
    return fitted && (std::count(active.begin(), active.end(), alpha_index) ||
                      std::count(active.begin(), active.end(), alpha_index + 1));
  };
  fit.links.intra = {params[0], params[1], class_fitted(0), "", {}};
  fit.links.inter = {params[2], params[3], class_fitted(2), "", {}};
  double sum = 0;
  for (const AllReduceSample& s : usable) {
    const double r = PredictAllReduceSeconds(fit.links, s.nodes, s.gpus_per_node, s.bytes, s.ops) / s.time_s - 1.0;
    sum += r * r;
  }
  fit.rms_relative_error = usable.empty() ? 0.0 : std::sqrt(sum / usable.size());
  return fit;
}

LinkModel ResolveLinks(const AlphaBetaFit& fit, const LinkOverrides& overrides) {
  LinkModel links = fit.links;
  links.intra.origin = links.intra.fitted ? "fitted" : "not measured";
  if (overrides.inter_node_gbps) {
    links.inter.beta_s_per_byte = 8.0 / (*overrides.inter_node_gbps * 1e9);
    links.inter.origin = Format("bandwidth from --inter-node-gbps %g", *overrides.inter_node_gbps);
  } else if (links.inter.fitted) {
    links.inter.origin = "bandwidth fitted";
  } else {
    links.inter.origin = "no multi-node measurement; --inter-node-gbps gives the rate per GPU";
    return links;  // no bandwidth: the class cannot be used, whatever its latency
  }
  if (links.inter.fitted) {
    links.inter.origin += ", latency fitted";
  } else {
    links.inter.alpha_s = overrides.inter_node_latency_s;
    links.inter.origin += Format(", latency %g us assumed (--inter-node-latency-us)", overrides.inter_node_latency_s * 1e6);
  }
  return links;
}

std::string MissingLinks(const LinkModel& links, const Layout& layout) {
  if (layout.gpus_per_node > 1 && !links.intra.fitted) {
    return "no intra-node measurement (give a collectives report with --collectives, or a run with --scaling to k > 1)";
  }
  if (layout.nodes > 1 && !(links.inter.beta_s_per_byte > 0)) {
    return "no inter-node measurement (give --inter-node-gbps, the network rate per GPU)";
  }
  return "";
}

std::string Layout::Name() const { return std::to_string(nodes) + "x" + std::to_string(gpus_per_node); }

Layout PipelineStageSpan(const Layout& layout, int pipeline_parallel) {
  const int per_stage = layout.gpus() / std::max(1, pipeline_parallel);
  if (per_stage >= layout.gpus_per_node) return {per_stage / layout.gpus_per_node, layout.gpus_per_node};
  return {1, per_stage};
}

bool StageBoundariesCrossNodes(const Layout& layout, int pipeline_parallel) {
  return pipeline_parallel > 1 && layout.nodes > 1;
}

OneFOneBTime PipelineTime(double compute_s, double exchange_s, int pipeline_parallel, int micro_batches) {
  OneFOneBTime t;
  if (pipeline_parallel < 2) return t;
  t.transfers_s = 2.0 * micro_batches * exchange_s;
  t.bubble_s = (compute_s + t.transfers_s) * (pipeline_parallel - 1) / micro_batches;
  return t;
}

double BoundaryExchangeSeconds(const LinkModel& links, const LinkParameters& intra_p2p, const Layout& layout,
                               int pipeline_parallel, double bytes) {
  const LinkParameters& link = StageBoundariesCrossNodes(layout, pipeline_parallel) ? links.inter : intra_p2p;
  const auto [alpha, beta] = link.At(bytes);
  return alpha + bytes * beta;
}

AllToAllTime AllToAllSeconds(const LinkModel& links, const Layout& layout, int expert_parallel, double bytes,
                             double ops) {
  AllToAllTime t;
  if (expert_parallel < 2 || !(bytes > 0) || !(ops > 0)) return t;
  const int local = std::min(expert_parallel, layout.gpus_per_node);  // the group's ranks on this rank's node
  const double peers = expert_parallel - 1.0;
  const double intra_bytes = bytes * (local - 1) / peers;
  t.inter_node_bytes = bytes - intra_bytes;
  // Each all-to-all's message to one peer sets the band.
  auto seconds = [&](const LinkParameters& link, double part, double peers_on_link) {
    if (!(part > 0)) return 0.0;
    const auto [alpha, beta] = link.At(part / ops / peers_on_link);
    return ops * alpha + part * beta;
  };
  t.seconds = std::max(seconds(links.intra, intra_bytes, local - 1.0),
                       seconds(links.inter, t.inter_node_bytes, expert_parallel - local));
  return t;
}

double EmbeddingAllReduceSeconds(const LinkModel& links, const Layout& layout, double bytes) {
  if (!(bytes > 0)) return 0.0;
  return layout.nodes > 1 ? PredictAllReduceSeconds(links, 2, 1, bytes, 1) : PredictAllReduceSeconds(links, 1, 2, bytes, 1);
}

std::vector<Layout> ParseLayouts(const std::string& text, int gpus_per_node, const std::string& flag) {
  constexpr long kMaxGpus = 1 << 20;
  auto positive = [&](const std::string& item, const std::string& digits) {
    const bool decimal = IsDecimalNumber(digits, false) && digits.size() <= 8;
    const long value = decimal ? std::strtol(digits.c_str(), nullptr, 10) : 0;
    if (value <= 0 || value > kMaxGpus) {
      throw InputError(flag + " '" + item + "': expected a GPU count (16) or nodes x GPUs per node (2x8)");
    }
    return static_cast<int>(value);
  };
  std::vector<Layout> layouts;
  for (const std::string& item : SplitFlagList(text, flag)) {
    const size_t x = item.find_first_of("xX");
    Layout layout;
    if (x != std::string::npos) {
      layout.nodes = positive(item, item.substr(0, x));
      layout.gpus_per_node = positive(item, item.substr(x + 1));
    } else {
      const int k = positive(item, item);
      if (k > gpus_per_node && k % gpus_per_node != 0) {
        throw InputError(flag + " '" + item + "': not a multiple of --gpus-per-node " + std::to_string(gpus_per_node) +
                         " (write NxG, e.g. 3x4, for another layout)");
      }
      layout.nodes = k <= gpus_per_node ? 1 : k / gpus_per_node;
      layout.gpus_per_node = k <= gpus_per_node ? k : gpus_per_node;
    }
    if (static_cast<long>(layout.nodes) * layout.gpus_per_node > kMaxGpus) {
      throw InputError(flag + " '" + item + "': too many GPUs");
    }
    layouts.push_back(layout);
  }
  if (layouts.empty()) throw InputError(flag + ": expected a list such as 16,32,64 or 1x8,2x4");
  return layouts;
}

StepModel::StepModel(const std::vector<TrainPointInput>& points, bool weak, const TrainPointInput& smallest)
    : reference_(points.back()), smallest_(smallest), weak_(weak) {
  for (auto it = points.rbegin(); it != points.rend(); ++it) {
    if (it->comm_total_s > 0) {
      overlap_ = std::clamp(1.0 - it->comm_exposed_s / it->comm_total_s, 0.0, 1.0);
      overlap_measured_ = true;
      break;
    }
  }
}

namespace {

// The change of a pipeline reference's stage traffic from its layout to `layout` (its P and M kept): the boundary
// exchanges of 1F1B's slots and the tied embedding's all-reduce, each where the layout puts it (0 when it stays on the
// same link). The intra-node exchange is taken at the fitted all-reduce link's rates (a pair's rate is not fitted).
double PipelineLinkChange(const TrainPointInput& ref, const LinkModel& links, const Layout& layout) {
  const int pp = ref.pipeline_parallel;
  const Layout measured{ref.nodes, ref.gpus_per_node};
  if (pp < 2 || StageBoundariesCrossNodes(measured, pp) == StageBoundariesCrossNodes(layout, pp)) return 0.0;
  const int m = ref.micro_batches;
  auto slots = [&](const Layout& at) {
    return PipelineTime(0.0, BoundaryExchangeSeconds(links, links.intra, at, pp, ref.edge_bytes), pp, m)
        .pipelined_s(0.0);
  };
  return slots(layout) - slots(measured) + EmbeddingAllReduceSeconds(links, layout, ref.embedding_bytes) -
         EmbeddingAllReduceSeconds(links, measured, ref.embedding_bytes);
}

}  // namespace

ProjectedPoint StepModel::Project(const LinkModel& links, const Layout& layout) const {
  ProjectedPoint p;
  p.layout = layout;
  const int k = layout.gpus();
  const double base = (reference_.step_s - reference_.comm_exposed_s) *
                      (weak_ ? 1.0 : static_cast<double>(reference_.k) / k);
  const int t = reference_.tensor_parallel, pp = reference_.pipeline_parallel;
  const Layout stage = PipelineStageSpan(layout, pp);  // the layout itself without stages
  p.comm_s = k > t * pp ? PredictAllReduceSeconds(links, stage.nodes, stage.gpus_per_node / t, reference_.CommBytes(),
                                                  reference_.buckets)
                        : 0.0;
  p.exposed_s = (1.0 - overlap_) * p.comm_s;
  // The pipeline's exchanges and embedding all-reduce are in the base as measured, plus their change of link.
  const double change = PipelineLinkChange(reference_, links, layout);
  p.pipeline_s = reference_.pipeline_s + reference_.embedding_s + change;
  p.step_s = base + p.exposed_s + change;
  p.tokens_per_step = weak_ ? reference_.tokens_per_step / reference_.k * k : reference_.tokens_per_step;
  p.tokens_per_s = p.tokens_per_step / p.step_s;
  const double smallest_rate = smallest_.tokens_per_step / smallest_.step_s;
  p.efficiency = p.tokens_per_s / (static_cast<double>(k) / smallest_.k * smallest_rate);
  return p;
}

ModeCollectives CollectivesOf(const std::string& parallel, double gradient_bytes, double buckets,
                              double gathered_bytes) {
  if (parallel == "dp") return {gradient_bytes, buckets};
  if (parallel == "zero1") return {gradient_bytes, 1.0};
  if (parallel == "fsdp") {
    const double gathered = gathered_bytes > 0 ? gathered_bytes : 2 * gradient_bytes;
    return {(gradient_bytes + gathered) / 2, (buckets + 2 * buckets - 2) / 2};
  }
  throw InputError("unknown parallel mode '" + parallel + "' (dp, zero1, fsdp)");
}

std::vector<AllReduceSample> TrainSamples(const std::vector<TrainPointInput>& points) {
  std::vector<AllReduceSample> samples;
  for (const TrainPointInput& p : points) {
    if (p.k < 2) continue;
    if (p.tensor_parallel > 1 && p.activation_ops > 0 && p.activation_bytes > 0 && p.activation_s > 0 &&
        p.gpus_per_node % p.tensor_parallel == 0) {
      samples.push_back({1, p.tensor_parallel, p.activation_bytes, p.activation_ops, p.activation_s,
                         "train k=" + std::to_string(p.k) + " activation all-reduces (tensor parallel " +
                             std::to_string(p.tensor_parallel) + ")"});
    }
    if (p.k <= p.tensor_parallel * p.pipeline_parallel) continue;  // one replica per stage: no gradient sync
    if (!(p.comm_total_s > 0)) continue;
    const Layout stage = PipelineStageSpan({p.nodes, p.gpus_per_node}, p.pipeline_parallel);
    samples.push_back({stage.nodes, stage.gpus_per_node / p.tensor_parallel, p.CommBytes(), p.buckets, p.comm_total_s,
                       "train k=" + std::to_string(p.k) + (p.parallel == "dp" ? " gradient buckets" : " " + p.parallel)});
  }
  return samples;
}

std::optional<HeldOutCheck> CheckHeldOut(const std::vector<TrainPointInput>& points,
                                         const std::vector<AllReduceSample>& collective_samples, bool weak,
                                         const LinkOverrides& overrides) {
  if (points.size() < 2) return std::nullopt;
  const TrainPointInput& held = points.back();
  const std::vector<TrainPointInput> rest(points.begin(), points.end() - 1);
  std::vector<AllReduceSample> samples = collective_samples;
  for (const AllReduceSample& s : TrainSamples(rest)) samples.push_back(s);
  const AlphaBetaFit fit = FitAlphaBeta(samples);
  LinkModel links = ResolveLinks(fit, overrides);
  BandLinks(links, samples, overrides.inter_node_gbps.has_value());
  HeldOutCheck check;
  check.k = held.k;
  check.layout = {held.nodes, held.gpus_per_node};
  if (!MissingLinks(links, check.layout).empty()) return std::nullopt;
  const StepModel model(rest, weak, points.front());
  check.predicted_step_s = model.Project(links, check.layout).step_s;
  check.measured_step_s = held.step_s;
  check.relative_error = std::fabs(check.predicted_step_s - check.measured_step_s) / check.measured_step_s;
  check.notes = fit.notes;
  if (!model.overlap_measured()) {
    check.notes.push_back("no communicating point below k=" + std::to_string(held.k) + ": overlap assumed 0");
  }
  return check;
}

}  // namespace tb
