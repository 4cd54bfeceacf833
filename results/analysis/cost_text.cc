#include "cost_text.h"

#include <algorithm>
#include <cmath>

#include "console.h"
#include "fabric.h"
#include "reporter.h"
#include "units.h"

namespace tb {
namespace {


using Lines = std::vector<std::string>;

void Append(Lines& lines, const Lines& more) { lines.insert(lines.end(), more.begin(), more.end()); }

std::string Gib(double bytes) { return Format("%.1f GiB", bytes / kGiB); }

std::string MemoryCell(const MemoryFit& fit) {
  return Format("%s %+.1f", fit.fits ? "yes" : "NO", fit.margin_bytes / kGiB);
}

// "energy: measured ..." or why there is none, for the run's lines.
std::string EnergyLine(const RunAnalysis& a) {
  const MeasuredPoint& p = a.m.points[a.priced];
  if (!a.power_per_gpu_W) {
    return "#   energy: not measured (the report has no joules_per_token: NVML gave no energy counter); no energy "
           "cost is added";
  }
  return Format("#   energy: measured %.4g J/token at k=%d (the driver's energy counter over the measured steps), "
                "%.4g W per GPU; priced at each offering's usd_per_kwh (none where it has none)",
                p.joules_per_token, p.train.k, *a.power_per_gpu_W);
}

// "# run r.h5: cpu, priced as H100 SXM (--device-as); tiny; measured k = 1,2 on 1 node(s), weak scaling, ...".
std::string RunHeadline(const RunAnalysis& a) {
  const RunMeasurement& m = a.m;
  std::vector<std::string> ks;
  for (const MeasuredPoint& p : m.points) ks.push_back(std::to_string(p.train.k));
  std::string line = Format("# run %s: %s%s; %s; measured k = %s on %d node(s), %s scaling", m.path.c_str(),
                            m.device.c_str(),
                            !a.gpu        ? " (no known GPU model)"
                            : a.device_as ? (", priced as " + GpuNames(a) + " (--device-as)").c_str()
                                          : (" -> " + a.gpu->name).c_str(),
                            m.model_name.c_str(), JoinNames(ks, ",").c_str(), m.nodes, m.weak_scaling ? "weak" : "strong");
  line += ", --parallel " + m.parallel;
  const int t = m.points.back().train.tensor_parallel;
  if (t > 1) line += Format(" --tensor-parallel %d (its activation all-reduces counted as compute)", t);
  const MeasuredPoint& p = a.m.points[a.priced];
  if (p.train.pipeline_parallel > 1) {
    line += Format(" --pipeline-parallel %d --micro-batches %d (1F1B: bubble %.1f%% measured, %.1f%% in theory; its "
                   "exchanges between stages and tied-embedding all-reduce kept out of the gradient communication)",
                   p.train.pipeline_parallel, p.train.micro_batches, 100 * p.bubble_measured, 100 * p.bubble_theory);
  }
  return line;
}

Lines RunLines(const RunAnalysis& a, bool priced) {
  Lines lines = {RunHeadline(a)};
  const MeasuredPoint& p = a.m.points[a.priced];
  lines.push_back(Format("#   priced point k=%d (%s): %.6g tokens/s without checkpoint stalls (%.6g as reported), "
                         "start-up %.1f s",
                         p.train.k, Layout{p.train.nodes, p.train.gpus_per_node}.Name().c_str(),
                         TokensPerS(p), p.tokens_per_s_reported, a.m.startup_s));
  if (a.stall_s) {
    lines.push_back(Format("#   checkpoint: stall %.3g s (mean of %d rank-events at k=%d)", *a.stall_s, a.stall_events,
                           a.stall_k) +
                    (priced ? Format(", %.3g GB (%s)", a.checkpoint_gb, a.checkpoint_size_source.c_str()) : ""));
  } else {
    lines.push_back(std::string("#   checkpoint stall and Young/Daly interval: n/a: run with --checkpoint-every to measure") +
                    (priced ? Format("; size %.3g GB (%s)", a.checkpoint_gb, a.checkpoint_size_source.c_str()) : ""));
  }
  lines.push_back(EnergyLine(a));
  lines.push_back(p.repeats < 2 ? "#   1 run: spread unknown (train --repeats N measures it); no cost range"
                                : Format("#   %d repeats: tokens/s median %.6g (min %.6g, max %.6g, CV %.1f%%), priced at "
                                         "the median; the cost range is the total at the max and at the min",
                                         p.repeats, p.tokens_per_s_median, p.tokens_per_s_min, p.tokens_per_s_max,
                                         p.tokens_per_s_cv * 100));
  return lines;
}

// The fitted links, each band under its class.
Lines LinkLines(const LinkModel& links) {
  Lines lines;
  auto link = [](const char* name, const LinkParameters& l) {
    if (!(l.beta_s_per_byte > 0)) return Format("#   %s: not measured (%s)", name, l.origin.c_str());
    return Format("#   %s: alpha %.3g us, beta 1/(%.4g GB/s) (%s)", name, l.alpha_s * 1e6, l.bandwidth_GBps(),
                  l.origin.c_str());
  };
  for (const auto& [name, l] : {std::pair{"intra-node", &links.intra}, std::pair{"inter-node", &links.inter}}) {
    lines.push_back(link(name, *l));
    for (const SizeBand& band : l->bands) {
      lines.push_back(Format("#     band %s: alpha %.3g us, beta 1/(%.4g GB/s), %d sample%s", band.name.c_str(),
                             band.alpha_s * 1e6, band.beta_s_per_byte > 0 ? 1e-9 / band.beta_s_per_byte : 0.0,
                             band.samples, band.samples == 1 ? "" : "s"));
    }
  }
  return lines;
}

// The measured points and the projected layouts, a row each.
Lines PointLines(const RunAnalysis& a) {
  const bool stages = a.m.points.back().train.pipeline_parallel > 1;
  std::vector<TextTable::ColumnSpec> columns = {{"layout", "", 8},   {"gpus", "", 6},     {"step", "(s)", 10},
                                                {"comm", "(s)", 10}, {"exposed", "(s)", 10}, {"tokens/s", "", 12},
                                                {"efficiency", "", 10}, {"source", "", 10}};
  if (stages) columns.insert(columns.begin() + 5, {"stages", "(s)", 10});
  TextTable table(columns);
  Lines lines = table.HeaderLines();
  auto row = [&](std::vector<std::string> cells, double stages_s) {
    if (stages) cells.insert(cells.begin() + 5, Format("%.4g", stages_s));
    lines.push_back(table.Row(cells));
  };
  for (const MeasuredPoint& p : a.m.points) {
    const Layout layout{p.train.nodes, p.train.gpus_per_node};
    row({layout.Name(), std::to_string(p.train.k), Format("%.4g", p.train.step_s), Format("%.4g", p.train.comm_total_s),
         Format("%.4g", p.train.comm_exposed_s), Format("%.6g", TokensPerS(p)), "-", "measured"},
        p.train.pipeline_s + p.train.embedding_s);
  }
  for (const ProjectedPoint& q : a.projected) {
    row({q.layout.Name(), std::to_string(q.layout.gpus()), Format("%.4g", q.step_s), Format("%.4g", q.comm_s),
         Format("%.4g", q.exposed_s), Format("%.6g", q.tokens_per_s), Format("%.3f", q.efficiency), "projected"},
        q.pipeline_s);
  }
  if (stages) {
    lines.push_back("#  comm, exposed: gradient collectives; stages: the exchanges between pipeline stages (bubble and "
                    "transfers) and the tied embedding's all-reduce, as measured (projected: with the change of link "
                    "where the layout moves the stage boundaries between intra- and inter-node)");
  }
  return lines;
}

Lines ProjectionLines(const RunAnalysis& a) {
  const AlphaBetaFit& fit = *a.fit;
  Lines lines = {"# projection of " + RunName(a) +
                 " (alpha-beta all-reduce model, ring inside a node, hierarchical across nodes):"};
  lines.push_back(Format("#   fit: %d samples (%zu collective sizes, the rest training buckets), rms relative error %.1f%%",
                         fit.samples, a.collective_samples.size(), fit.rms_relative_error * 100));
  Append(lines, LinkLines(a.links));
  for (const std::string& note : fit.notes) lines.push_back("#   note: " + note);
  lines.push_back(a.step_model->overlap_measured()
                      ? Format("#   overlap %.2f (measured at the largest communicating point)", a.step_model->overlap())
                      : std::string("#   overlap: no point communicated; assumed 0 (every all-reduce exposed)"));
  if (a.held_out) {
    const HeldOutCheck& h = *a.held_out;
    lines.push_back(Format("#   held out k=%d (%s): predicted step %.4g s, measured %.4g s: error %.1f%% "
                           "(fitted without it)",
                           h.k, h.layout.Name().c_str(), h.predicted_step_s, h.measured_step_s, h.relative_error * 100));
    for (const std::string& note : h.notes) lines.push_back("#   held-out note: " + note);
  } else {
    lines.push_back("#   held-out error: n/a (needs two measured k and a fit without the largest)");
  }
  Append(lines, PointLines(a));
  return lines;
}

// Each list's entries once, in their order.
void AddOnce(Lines& lines, const std::string& line) {
  if (std::find(lines.begin(), lines.end(), line) == lines.end()) lines.push_back(line);
}

// The candidates of one target on one offering's fabric, the one chosen and why.
Lines ChoiceLines(const LayoutChoice& ch) {
  TextTable table({{"layout", "", 20}, {"step", "(s)", 10}, {"compute", "(s)", 10}, {"exposed", "(s)", 10},
                   {"activ.", "(s)", 9}, {"stages", "(s)", 9}, {"a2a", "(s)", 9}, {"tokens/s", "", 11},
                   {"memory", "(GiB)", 9}, {"", "", 0}});
  Lines lines;
  if (!ch.links.empty()) lines.push_back("#     links: " + ch.links);
  Append(lines, table.HeaderLines());
  Lines assumptions;
  Lines impossible;  // one line per tensor-parallel size (and pipeline size) the model cannot take
  for (size_t i = 0; i < ch.candidates.size(); ++i) {
    const LayoutCandidate& c = ch.candidates[i];
    if (!c.considered) {
      const std::string shape = (c.pp > 1 ? Format("pp%d", c.pp) + (c.tp > 1 ? "+" : "") : std::string()) +
                                (c.tp > 1 || c.pp == 1 ? Format("tp%d", c.tp) : std::string());
      AddOnce(impossible, "#     " + shape + ": not possible: " + c.why_not);
      continue;
    }
    lines.push_back(table.Row({c.layout.Name() + " " + c.Name(), Format("%.4g", c.step_s),
                               Format("%.4g", c.compute_s + c.optimizer_s), Format("%.4g", c.exposed_s),
                               Format("%.3g", c.activation_s), Format("%.3g", c.pipeline_s + c.bubble_s + c.embedding_s),
                               Format("%.3g", c.alltoall_s), Format("%.6g", c.tokens_per_s), Format("%.3g", c.memory.required_bytes / kGiB),
                               ch.chosen == i ? "chosen" : c.why_not}));
    for (const std::string& note : c.assumptions) AddOnce(assumptions, note);
  }
  Append(lines, impossible);
  lines.push_back("#     " + std::string(ch.chosen ? "chosen: " : "none chosen: ") + ch.reason);
  for (const std::string& note : assumptions) lines.push_back("#     assumed: " + note);
  return lines;
}

// The layouts considered for a run on each offering's fabric, the one chosen and why.
Lines FabricLines(const RunAnalysis& a) {
  const ProjectionBasis& b = a.basis;
  Lines lines = {Format("# projection of %s onto each offering's fabric: compute %.4g s per step (the priced k=%d, "
                        "%s, T=%d%s, without its communication; optimizer %.3g s), collectives at the fabric's rates, "
                        "overlap %.2f %s",
                        RunName(a).c_str(), b.ComputeS(), b.k, b.mode.c_str(), b.tp,
                        b.pp > 1 ? Format(", P=%d: a stage's, the whole model's on a replica's tokens", b.pp).c_str() : "",
                        b.optimizer_s, b.overlap, b.overlap_source.c_str())};
  const bool stages = std::any_of(a.on_fabrics.begin(), a.on_fabrics.end(), [](const FabricProjection& fp) {
    return fp.choice && std::any_of(fp.choice->candidates.begin(), fp.choice->candidates.end(),
                                    [](const LayoutCandidate& c) { return c.pp > 1; });
  });
  if (stages) {
    lines.push_back("#   stages: pipeline candidates' boundary exchanges, 1F1B bubble and tied-embedding all-reduce "
                    "(ppP: P stages of whole nodes, outermost)");
  }
  for (const FabricProjection& fp : a.on_fabrics) {
    lines.push_back(Format("#   on %s (fabric %s, %s), %s GPUs:", fp.offering->name.c_str(), fp.fabric->name.c_str(),
                           IntraKindName(fp.fabric->intra.kind), fp.target.text.c_str()));
    if (fp.choice) {
      Append(lines, ChoiceLines(*fp.choice));
    } else {
      lines.push_back("#     not projected: " + fp.why_not);
    }
  }
  return lines;
}

Lines MemoryLines(const CostRun& c) {
  const MemoryCheck& check = *c.model_memory;
  const MemoryBreakdown& e = c.model_estimate;
  Lines lines = {"# memory fit, per GPU (" + ModeWords(check.mode) + "): " + check.what};
  lines.push_back("#   weights " + Gib(e.weights_bytes) + ", gradients " + Gib(e.gradients_bytes) + ", optimizer " +
                  Gib(e.optimizer_bytes) + ", activations " + Gib(e.activations_bytes) +
                  (e.working_bytes > 0 ? ", gathered layers " + Gib(e.working_bytes) : std::string()) + ": total " +
                  Gib(e.total_bytes()));
  lines.push_back(check.calibration ? Format("#   calibration x%.3f: %s", check.calibration->factor,
                                             check.calibration->source.c_str())
                                    : std::string("#   calibration: none (no report measured device memory)"));
  for (const auto& [name, fit] : c.model_fits) {
    lines.push_back(Format("#   %s, %s: needs %s: %s", name.c_str(), Gib(fit.gpu_memory_bytes).c_str(),
                           Gib(fit.required_bytes).c_str(),
                           fit.fits ? ("fits, " + Gib(fit.margin_bytes) + " to spare").c_str()
                                    : ("does NOT fit, short by " + Gib(-fit.margin_bytes)).c_str()));
  }
  return lines;
}

// The cost table's columns: the range column only when a run repeated its measurement, the provisioning ones only
// when an offering gives a provisioning time.
std::vector<TextTable::ColumnSpec> CostColumns(const CostRun& c, bool ranged, bool provisioning) {
  size_t run_width = 3, offering_width = 8;
  for (const CostRow& r : c.rows) {
    run_width = std::max(run_width, RunName(c.runs[r.config.run]).size());
    offering_width = std::max(offering_width, r.offering->name.size());
  }
  std::vector<TextTable::ColumnSpec> columns = {
      {"run", "", static_cast<int>(run_width)}, {"config", "", 8}, {"source", "", 9},
      {"offering", "", static_cast<int>(offering_width)}, {"gpus", "", 5}, {"nodes", "", 5}, {"time", "(h)", 9},
      {"gpu", "($)", 12}, {"storage", "($)", 10}, {"egress", "($)", 9}, {"energy", "($)", 9}, {"failures", "", 8},
      {"retry", "($)", 10}, {"total", "($)", 12}, {"per_1M_tok", "($)", 10}, {"ckpt_every", "(h)", 10},
      {"young_daly", "(h)", 10}, {"fits", "(GiB)", 10}, {"", "", 0}};
  if (ranged) columns.insert(columns.begin() + 14, {"range", "($)", 19});
  if (provisioning) columns.insert(columns.begin() + 8, {{"prov", "(h)", 6}, {"prov", "($)", 9}});
  return columns;
}

std::vector<std::string> CostCells(const CostRun& c, size_t i, bool ranged, bool provisioning) {
  const CostRow& r = c.rows[i];
  const CostBreakdown& b = r.cost;
  std::vector<std::string> cells = {
      RunName(c.runs[r.config.run]), r.config.label, Source(r.config), r.offering->name, std::to_string(r.inputs.gpus),
      std::to_string(b.nodes), Format("%.1f", b.time_to_train_hours), Usd(b.gpu_usd), Usd(b.storage_usd),
      Usd(b.transfer_usd), b.energy_usd ? Usd(*b.energy_usd) : b.energy_kwh ? "no price" : "n/a",
      Format("%.2f", b.expected_failures), Usd(b.retry_usd), Usd(b.total_usd),
      Format("%.4f", b.usd_per_million_tokens),
      Format("%.2f%s", b.checkpoint_interval_hours, b.interval_is_young_daly ? "yd" : ""),
      b.young_daly_hours ? Format("%.2f", *b.young_daly_hours) : "n/a", MemoryCell(r.memory), Marks(i, c.decision)};
  if (ranged) {
    cells.insert(cells.begin() + 14, r.total_usd_low ? Usd(*r.total_usd_low) + "-" + Usd(*r.total_usd_high)
                                                     : std::string("1 run"));
  }
  if (provisioning) cells.insert(cells.begin() + 8, {Format("%.2f", b.provisioning_hours), Usd(b.provisioning_usd)});
  return cells;
}

Lines CostTable(const CostRun& c) {
  const bool provisioning =
      std::any_of(c.rows.begin(), c.rows.end(), [](const CostRow& r) { return r.cost.provisioning_hours > 0; });
  const bool ranged = std::any_of(c.rows.begin(), c.rows.end(), [](const CostRow& r) { return r.total_usd_low.has_value(); });
  const TextTable table(CostColumns(c, ranged, provisioning));
  Lines lines = table.HeaderLines();
  for (size_t i = 0; i < c.rows.size(); ++i) lines.push_back(table.Row(CostCells(c, i, ranged, provisioning)));
  return lines;
}

// What --history measured of failures, beside what the price file assumes, and which the retry cost takes.
std::string FailureLine(const FailureHistory& h, bool used, const std::vector<Offering>& offerings) {
  double low = INFINITY, high = 0;
  for (const Offering& o : offerings) {
    low = std::min(low, o.mtbf_node_hours);
    high = std::max(high, o.mtbf_node_hours);
  }
  const std::string seen = Format("# failures: history %s: %d failed or interrupted of %d runs in %.4g node-hours",
                                  h.dir.c_str(), h.failures, h.runs, h.node_hours);
  if (used) {
    return seen + Format(": MTBF %.4g h per node measured, used for every offering (--failure-rate measured)",
                         h.mtbf_node_hours());
  }
  const std::string assumed = low == high ? Format("%.4g h", low) : Format("%.4g-%.4g h", low, high);
  if (!h.measured()) {
    return seen + Format(": too few failures to measure a rate (%d of the %d needed); the retry cost takes the "
                         "price file's MTBF of %s per node",
                         h.failures, FailureHistory::kMinFailures, assumed.c_str());
  }
  return seen + Format(": MTBF %.4g h per node measured, against %s assumed by the price file (used; "
                       "--failure-rate measured takes the history's)",
                       h.mtbf_node_hours(), assumed.c_str());
}

std::string Header(const CostRun& c) {
  const CostPlan& p = c.plan;
  return std::string("# trainbench cost: ") +
         (c.runs.empty() ? std::string("memory fit") : Format("%zu run(s)", c.runs.size())) +
         (c.prices ? Format("; prices %s (%zu offerings)", c.prices->path.c_str(), c.prices->offerings.size()) : "") +
         (p.target_tokens ? Format("; target %.4g tokens", *p.target_tokens) : "") +
         (p.target_steps ? Format("; target %.4g steps", *p.target_steps) : "") +
         (p.deadline ? Format("; deadline %g h", *p.deadline) : "");
}

// A block of lines after a "#" line that separates it from the one above.
void Block(Lines& lines, const Lines& block) {
  lines.push_back("#");
  Append(lines, block);
}

}  // namespace

std::string Usd(double value) {
  if (!std::isfinite(value)) return "n/a";
  if (std::fabs(value) < 100) return Format("$%.2f", value);
  const std::string digits = Format("%.0f", std::fabs(value));
  std::string grouped = value < 0 ? "-$" : "$";
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return grouped;
}

std::vector<std::string> CostTextLines(const CostRun& c) {
  Lines lines = {Header(c)};
  if (c.comparison) Block(lines, ComparisonLines(*c.comparison));
  if (c.failures) Block(lines, {FailureLine(*c.failures, c.measured_failures, c.prices->offerings)});
  for (const RunAnalysis& a : c.runs) Block(lines, RunLines(a, c.prices.has_value()));
  for (const RunAnalysis& a : c.runs) {
    if (a.fit) Block(lines, ProjectionLines(a));
  }
  for (const RunAnalysis& a : c.runs) {
    if (!a.on_fabrics.empty()) Block(lines, FabricLines(a));
  }
  if (c.model_memory) Block(lines, MemoryLines(c));
  if (c.rows.empty()) return lines;
  Block(lines, {Format("# cost per run and offering (source: measured = the run's priced point, projected = its "
                       "projection; nodes = the layout's, rented whole; energy: measured, at the offering's "
                       "usd_per_kwh, 'no price' without one, 'n/a' unmeasured; ckpt_every 'yd' = the Young/Daly "
                       "interval; fits = GPU memory left, %s)",
                       c.model_memory ? "the --model checked" : "each run's model as run")});
  Append(lines, CostTable(c));
  for (const std::string& note : c.notes) lines.push_back("# " + note);
  return lines;
}

std::vector<std::string> DecisionLines(const CostRun& c) {
  Lines lines;
  if (c.rows.empty()) return lines;
  const CostDecision& d = c.decision;
  auto describe = [&](size_t i, const std::string& reason) {
    const CostRow& r = c.rows[i];
    return RowName(r, c.runs) + ": " + Usd(r.cost.total_usd) +
           (r.total_usd_low ? " (" + Usd(*r.total_usd_low) + "-" + Usd(*r.total_usd_high) + " over the repeats)"
                            : std::string(" (1 run: spread unknown)")) +
           Format(", %.1f h to train, $%.4f per 1M tokens", r.cost.time_to_train_hours, r.cost.usd_per_million_tokens) +
           "; " + CommReason(r.config, c.runs[r.config.run]) + "; " + DominantText(c.shares[i]) + "; why: " + reason;
  };
  if (d.cheapest) lines.push_back("# cheapest: " + describe(*d.cheapest, c.reasons.cheapest));
  if (d.fastest) lines.push_back("# fastest: " + describe(*d.fastest, c.reasons.fastest));
  if (const std::optional<double> deadline = c.plan.deadline) {
    lines.push_back(d.cheapest_within_deadline
                        ? Format("# cheapest within %g h: ", *deadline) +
                              describe(*d.cheapest_within_deadline, c.reasons.deadline)
                        : Format("# none meets the deadline of %g h (the fastest takes %.1f h)", *deadline,
                                 c.rows[*d.fastest].cost.time_to_train_hours));
  }
  return lines;
}

}  // namespace tb
