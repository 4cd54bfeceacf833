#include "cost_tables.h"

#include <stdexcept>

#include "cost_schema.h"
#include "fabric.h"
#include "units.h"

namespace tb {
namespace {

namespace cs = cost_schema;

// A declared table filled row by row: each Add gives the next declared column's cell (its name and unit come from the
// declaration). A column out of declaration order, of another table, or a row without every column is a bug.
class TableBuilder {
 public:
  explicit TableBuilder(const cs::Table& spec, const std::string& title_detail = "") : spec_(spec) {
    table_.section = "cost";
    table_.name = spec.name;
    table_.title = spec.title + title_detail;
    table_.per_run = spec.per_run;
  }
  TableBuilder& Row() {
    CheckComplete();
    table_.rows.emplace_back();
    return *this;
  }
  TableBuilder& Add(const cs::Column& column, Cell cell) {
    std::vector<Cell>& row = table_.rows.back();
    if (row.size() >= spec_.columns.size() || spec_.columns[row.size()] != &column) {
      throw std::logic_error(spec_.FullName() + ": column '" + column.name + "' of " + column.table->FullName() +
                             " is not the next declared column");
    }
    if (table_.rows.size() == 1) table_.columns.push_back({column.name, column.unit});
    row.push_back(std::move(cell));
    return *this;
  }
  ViewTable Take() {
    CheckComplete();
    return std::move(table_);
  }

 private:
  void CheckComplete() const {
    if (!table_.rows.empty() && table_.rows.back().size() != spec_.columns.size()) {
      throw std::logic_error(spec_.FullName() + ": a row without every declared column");
    }
  }
  const cs::Table& spec_;
  ViewTable table_;
};

Cell Opt(const std::optional<double>& value) { return value ? Cell(*value) : Cell(); }
Cell Int(int64_t value) { return Cell(value); }
Cell Flag(bool value) { return Cell(int64_t{value ? 1 : 0}); }
Cell Text(const std::string& text) { return Cell(text); }

// The five columns of one fitted link class in cost.run.
struct LinkColumns {
  const cs::Column &alpha, &beta, &bandwidth, &fitted, &origin;
};

void AddLink(TableBuilder& t, const LinkColumns& c, const LinkParameters* l) {
  t.Add(c.alpha, l ? Cell(l->alpha_s) : Cell())
      .Add(c.beta, l ? Cell(l->beta_s_per_byte) : Cell())
      .Add(c.bandwidth, l ? Cell(l->bandwidth_GBps()) : Cell())
      .Add(c.fitted, l ? Flag(l->fitted) : Cell())
      .Add(c.origin, l ? Cell(l->origin) : Cell());
}

// The held-out check of the projection; every cell empty without one.
void AddHeldOut(TableBuilder& t, const std::optional<HeldOutCheck>& check) {
  namespace r = cs::run;
  const HeldOutCheck* h = check ? &*check : nullptr;
  t.Add(r::held_out_k, h ? Int(h->k) : Cell())
      .Add(r::held_out_layout, h ? Cell(h->layout.Name()) : Cell())
      .Add(r::held_out_predicted_step_s, h ? Cell(h->predicted_step_s) : Cell())
      .Add(r::held_out_measured_step_s, h ? Cell(h->measured_step_s) : Cell())
      .Add(r::held_out_relative_error, h ? Cell(h->relative_error) : Cell())
      .Add(r::held_out_notes, h && !h->notes.empty() ? Cell(JoinNames(h->notes, "; ")) : Cell());
}

// The projection's fit of one run; every cell empty without --project.
void AddFit(TableBuilder& t, const RunAnalysis& a) {
  namespace r = cs::run;
  const AlphaBetaFit* fit = a.fit ? &*a.fit : nullptr;
  t.Add(r::fit_samples, fit ? Int(fit->samples) : Cell())
      .Add(r::collective_samples, fit ? Int(static_cast<int64_t>(a.collective_samples.size())) : Cell())
      .Add(r::fit_rms_relative_error, fit ? Cell(fit->rms_relative_error) : Cell());
  AddLink(t, {r::intra_alpha_s, r::intra_beta_s_per_byte, r::intra_bandwidth_GBps, r::intra_fitted, r::intra_origin},
          fit ? &a.links.intra : nullptr);
  AddLink(t, {r::inter_alpha_s, r::inter_beta_s_per_byte, r::inter_bandwidth_GBps, r::inter_fitted, r::inter_origin},
          fit ? &a.links.inter : nullptr);
  t.Add(r::fit_notes, fit && !fit->notes.empty() ? Cell(JoinNames(fit->notes, "; ")) : Cell())
      .Add(r::overlap, fit ? Cell(a.step_model->overlap()) : Cell())
      .Add(r::overlap_measured, fit ? Flag(a.step_model->overlap_measured()) : Cell());
  AddHeldOut(t, a.held_out);
}

// cost.run: the run as measured, the point priced, its checkpoint stall and size, and the projection's fit.
ViewTable RunTable(const RunAnalysis& a, bool priced) {
  namespace r = cs::run;
  const RunMeasurement& m = a.m;
  const MeasuredPoint& p = m.points[a.priced];
  const bool stages = p.train.pipeline_parallel > 1;
  TableBuilder t(cs::kRun);
  t.Row().Add(r::device, m.device).Add(r::gpu_model, GpuNames(a))
      .Add(r::gpu_model_from, Text(!a.gpu ? "" : a.device_as ? "--device-as" : "device"))
      .Add(r::ranks, Int(m.ranks)).Add(r::nodes, Int(m.nodes)).Add(r::model, m.model_name)
      .Add(r::scaling_mode, Text(m.weak_scaling ? "weak" : "strong")).Add(r::startup_s, m.startup_s)
      .Add(r::priced_k, Int(p.train.k)).Add(r::priced_layout, Layout{p.train.nodes, p.train.gpus_per_node}.Name())
      .Add(r::tokens_per_s, TokensPerS(p)).Add(r::tokens_per_s_reported, p.tokens_per_s_reported)
      .Add(r::pipeline_parallel, Int(p.train.pipeline_parallel)).Add(r::micro_batches, Int(p.train.micro_batches))
      .Add(r::comm_pipeline_s, stages ? Cell(p.train.pipeline_s + p.train.embedding_s) : Cell())
      .Add(r::bubble_measured, stages ? Cell(p.bubble_measured) : Cell())
      .Add(r::bubble_theory, stages ? Cell(p.bubble_theory) : Cell())
      .Add(r::checkpoint_stall_s, Opt(a.stall_s))
      .Add(r::checkpoint_events, a.stall_s ? Int(a.stall_events) : Cell())
      .Add(r::checkpoint_stall_k, a.stall_s ? Int(a.stall_k) : Cell())
      .Add(r::checkpoint_stall, Text(a.stall_s ? "measured" : "n/a: run with --checkpoint-every to measure"))
      .Add(r::checkpoint_gb, priced ? Cell(a.checkpoint_gb) : Cell())
      .Add(r::checkpoint_size_source, priced ? Cell(a.checkpoint_size_source) : Cell())
      .Add(r::joules_per_token, a.power_per_gpu_W ? Cell(p.joules_per_token) : Cell())
      .Add(r::power_per_gpu_W, Opt(a.power_per_gpu_W))
      .Add(r::energy, Text(a.power_per_gpu_W ? "measured" : "n/a: the report has no joules_per_token (no NVML energy)"));
  AddFit(t, a);
  return t.Take();
}

// A candidate's cells in cost.layouts: all empty without a candidate (`why_not` aside), its figures empty when it
// was not modelled.
struct CandidateCells {
  Cell name, mode, tp, pp, ep, micro_batches, replicas, step, compute, optimizer, activation, comm, exposed, pipeline,
      bubble, embedding, alltoall, alltoall_inter_bytes, tokens_per_step, tokens_per_s, memory_required, gpu_memory, memory_fits, why_not, assumptions;
};

CandidateCells CellsOf(const LayoutCandidate& c) {
  CandidateCells cells;
  cells.name = c.Name();
  cells.mode = c.mode;
  cells.tp = Int(c.tp);
  cells.pp = Int(c.pp);
  cells.ep = Int(c.ep);
  if (c.micro_batches > 0) cells.micro_batches = Int(c.micro_batches);
  cells.replicas = Int(c.replicas());
  if (c.considered) {
    cells.step = c.step_s;
    cells.compute = c.compute_s;
    cells.optimizer = c.optimizer_s;
    cells.activation = c.activation_s;
    cells.comm = c.comm_s;
    cells.exposed = c.exposed_s;
    cells.pipeline = c.pipeline_s;
    cells.bubble = c.bubble_s;
    cells.embedding = c.embedding_s;
    cells.alltoall = c.alltoall_s;
    cells.alltoall_inter_bytes = c.alltoall_inter_bytes;
    cells.tokens_per_step = c.tokens_per_step;
    cells.tokens_per_s = c.tokens_per_s;
    cells.memory_required = c.memory.required_bytes;
    cells.gpu_memory = c.memory.gpu_memory_bytes;
    cells.memory_fits = Flag(c.memory.fits);
  }
  cells.why_not = c.why_not;
  if (!c.assumptions.empty()) cells.assumptions = JoinNames(c.assumptions, "; ");
  return cells;
}

// One row of cost.layouts: candidate `c` of a target on an offering's fabric (nullptr: no candidate, only why).
void AddLayoutRow(TableBuilder& t, const FabricProjection& fp, const LayoutCandidate* c, bool chosen) {
  namespace l = cs::layouts;
  const LayoutChoice* ch = fp.choice ? &*fp.choice : nullptr;
  CandidateCells cells;
  if (c) {
    cells = CellsOf(*c);
  } else {
    cells.why_not = ch ? ch->reason : fp.why_not;
  }
  t.Row().Add(l::offering, fp.offering->name).Add(l::fabric, fp.fabric->name)
      .Add(l::intra, Text(IntraKindName(fp.fabric->intra.kind))).Add(l::target, fp.target.text)
      .Add(l::layout, ch ? Cell(ch->layout.Name()) : Cell()).Add(l::candidate, cells.name).Add(l::mode, cells.mode)
      .Add(l::tensor_parallel, cells.tp).Add(l::pipeline_parallel, cells.pp).Add(l::expert_parallel, cells.ep)
      .Add(l::micro_batches, cells.micro_batches)
      .Add(l::replicas, cells.replicas).Add(l::step_s, cells.step)
      .Add(l::compute_s, cells.compute).Add(l::optimizer_s, cells.optimizer).Add(l::activation_s, cells.activation)
      .Add(l::comm_s, cells.comm).Add(l::exposed_s, cells.exposed).Add(l::pipeline_s, cells.pipeline)
      .Add(l::bubble_s, cells.bubble).Add(l::embedding_s, cells.embedding).Add(l::alltoall_s, cells.alltoall)
      .Add(l::alltoall_inter_node_bytes, cells.alltoall_inter_bytes).Add(l::tokens_per_step, cells.tokens_per_step)
      .Add(l::tokens_per_s, cells.tokens_per_s).Add(l::memory_required_bytes, cells.memory_required)
      .Add(l::gpu_memory_bytes, cells.gpu_memory).Add(l::memory_fits, cells.memory_fits).Add(l::chosen, Flag(chosen))
      .Add(l::why_not, cells.why_not).Add(l::reason, chosen ? Cell(ch->reason) : Cell())
      .Add(l::links, ch ? Cell(ch->links) : Cell()).Add(l::assumptions, cells.assumptions);
}

// cost.layouts: every layout considered on each offering's fabric, the chosen one marked.
ViewTable LayoutsTable(const RunAnalysis& a) {
  TableBuilder t(cs::kLayouts);
  for (const FabricProjection& fp : a.on_fabrics) {
    const LayoutChoice* ch = fp.choice ? &*fp.choice : nullptr;
    if (!ch || ch->candidates.empty()) {
      AddLayoutRow(t, fp, nullptr, false);
      continue;
    }
    for (size_t i = 0; i < ch->candidates.size(); ++i) AddLayoutRow(t, fp, &ch->candidates[i], ch->chosen == i);
  }
  return t.Take();
}

void AddMeasuredPoint(TableBuilder& t, const MeasuredPoint& p) {
  namespace q = cs::points;
  const Layout layout{p.train.nodes, p.train.gpus_per_node};
  t.Row().Add(q::layout, layout.Name()).Add(q::gpus, Int(layout.gpus())).Add(q::nodes, Int(layout.nodes))
      .Add(q::source, Text("measured")).Add(q::k, Int(p.train.k)).Add(q::step_s, p.train.step_s)
      .Add(q::step_s_reported, p.step_s_reported).Add(q::tokens_per_step, p.train.tokens_per_step)
      .Add(q::tokens_per_s, TokensPerS(p)).Add(q::tokens_per_s_reported, p.tokens_per_s_reported)
      .Add(q::comm_s, p.train.comm_total_s).Add(q::exposed_s, p.train.comm_exposed_s)
      .Add(q::stages_s, p.train.pipeline_parallel > 1 ? Cell(p.train.pipeline_s + p.train.embedding_s) : Cell())
      .Add(q::gradient_bytes, p.train.gradient_bytes).Add(q::checkpoint_stall_s, Opt(p.checkpoint_stall_s))
      .Add(q::efficiency, Cell()).Add(q::repeats, Int(p.repeats))
      .Add(q::tokens_per_s_min, p.tokens_per_s_min).Add(q::tokens_per_s_max, p.tokens_per_s_max)
      .Add(q::tokens_per_s_cv, p.tokens_per_s_cv);
}

void AddProjectedPoint(TableBuilder& t, const ProjectedPoint& p, bool stages) {
  namespace q = cs::points;
  t.Row().Add(q::layout, p.layout.Name()).Add(q::gpus, Int(p.layout.gpus())).Add(q::nodes, Int(p.layout.nodes))
      .Add(q::source, Text("projected")).Add(q::k, Cell()).Add(q::step_s, p.step_s)
      .Add(q::step_s_reported, Cell()).Add(q::tokens_per_step, p.tokens_per_step)
      .Add(q::tokens_per_s, p.tokens_per_s).Add(q::tokens_per_s_reported, Cell())
      .Add(q::comm_s, p.comm_s).Add(q::exposed_s, p.exposed_s)
      .Add(q::stages_s, stages ? Cell(p.pipeline_s) : Cell()).Add(q::gradient_bytes, Cell())
      .Add(q::checkpoint_stall_s, Cell()).Add(q::efficiency, p.efficiency).Add(q::repeats, Cell())
      .Add(q::tokens_per_s_min, Cell()).Add(q::tokens_per_s_max, Cell()).Add(q::tokens_per_s_cv, Cell());
}

// cost.points: the measured points, then the projected layouts.
ViewTable PointsTable(const RunAnalysis& a) {
  TableBuilder t(cs::kPoints);
  for (const MeasuredPoint& p : a.m.points) AddMeasuredPoint(t, p);
  const bool stages = a.m.points.back().train.pipeline_parallel > 1;
  for (const ProjectedPoint& p : a.projected) AddProjectedPoint(t, p, stages);
  return t.Take();
}

// Where the row's training time and cost go (cost_reasons.h): every share, and the largest of each.
void AddShares(TableBuilder& t, const RowShares& shares, int nodes) {
  namespace w = cs::rows;
  const cs::Column* time_columns[] = {&w::time_compute_share, &w::time_exposed_comm_share, &w::time_data_wait_share,
                                      &w::time_checkpoint_stall_share};
  for (size_t i = 0; i < shares.time.size(); ++i) t.Add(*time_columns[i], shares.time[i].fraction);
  t.Add(w::exposed_comm_link, Text(nodes > 1 ? "inter-node" : "intra-node"))
      .Add(w::dominant_time_part, shares.dominant_time.part)
      .Add(w::dominant_time_share, shares.dominant_time.fraction)
      .Add(w::dominant_cost_part, shares.dominant_cost.part)
      .Add(w::dominant_cost_share, shares.dominant_cost.fraction);
}

void AddCostRow(TableBuilder& t, const CostRow& r, const std::string& marks, const RowShares& shares) {
  namespace w = cs::rows;
  const CostBreakdown& c = r.cost;
  t.Row().Add(w::config, r.config.label).Add(w::projected, Flag(r.config.projected))
      .Add(w::pipeline_parallel, Int(r.config.pp))
      .Add(w::offering, r.offering->name).Add(w::gpu, r.offering->gpu).Add(w::gpus, Int(r.inputs.gpus))
      .Add(w::nodes, Int(c.nodes)).Add(w::billed_gpus, Int(c.billed_gpus))
      .Add(w::target_tokens, r.inputs.target_tokens).Add(w::tokens_per_s, r.inputs.tokens_per_s)
      .Add(w::job_usd_per_hour, c.job_usd_per_hour).Add(w::work_hours, c.work_hours)
      .Add(w::startup_hours, c.startup_hours).Add(w::provisioning_hours, c.provisioning_hours)
      .Add(w::checkpoint_interval_hours, c.checkpoint_interval_hours)
      .Add(w::interval_is_young_daly, Flag(c.interval_is_young_daly)).Add(w::young_daly_hours, Opt(c.young_daly_hours))
      .Add(w::checkpoint_overhead_hours, c.checkpoint_overhead_hours).Add(w::run_hours, c.run_hours)
      .Add(w::job_mtbf_hours, c.job_mtbf_hours).Add(w::expected_failures, c.expected_failures)
      .Add(w::lost_hours_per_failure, c.lost_hours_per_failure).Add(w::retry_hours, c.retry_hours)
      .Add(w::time_to_train_hours, c.time_to_train_hours).Add(w::gpu_usd, c.gpu_usd)
      .Add(w::provisioning_usd, c.provisioning_usd).Add(w::storage_gb, c.storage_gb).Add(w::storage_usd, c.storage_usd)
      .Add(w::transfer_usd, c.transfer_usd).Add(w::retry_usd, c.retry_usd)
      .Add(w::energy_kwh, Opt(c.energy_kwh)).Add(w::energy_J_per_token, Opt(c.energy_J_per_token))
      .Add(w::usd_per_kwh, Opt(r.offering->usd_per_kwh)).Add(w::energy_usd, Opt(c.energy_usd))
      .Add(w::total_usd, c.total_usd).Add(w::total_usd_low, Opt(r.total_usd_low))
      .Add(w::total_usd_high, Opt(r.total_usd_high)).Add(w::usd_per_million_tokens, c.usd_per_million_tokens)
      .Add(w::gpu_memory_bytes, r.memory.gpu_memory_bytes).Add(w::memory_required_bytes, r.memory.required_bytes)
      .Add(w::memory_margin_bytes, r.memory.margin_bytes).Add(w::memory_fits, Flag(r.memory.fits))
      .Add(w::marks, marks);
  AddShares(t, shares, r.config.layout.nodes);
}

// cost.rows of run `run`: its configurations on every offering of its GPU model, with the decision's marks.
ViewTable RowsTable(const CostRun& c, size_t run) {
  TableBuilder t(cs::kRows);
  for (size_t i = 0; i < c.rows.size(); ++i) {
    if (c.rows[i].config.run == run) AddCostRow(t, c.rows[i], Marks(i, c.decision), c.shares[i]);
  }
  return t.Take();
}

// cost.decision: the target and the rows that win (named as in the text), and the runs left unpriced.
ViewTable DecisionTable(const CostRun& c) {
  namespace d = cs::decision;
  const CostDecision& w = c.decision;
  const std::optional<FailureHistory>& h = c.failures;
  auto name = [&](const std::optional<size_t>& i) { return i ? Cell(RowName(c.rows[*i], c.runs)) : Cell(); };
  auto reason = [](const std::optional<size_t>& i, const std::string& why) { return i ? Cell(why) : Cell(); };
  TableBuilder t(cs::kDecision);
  t.Row().Add(d::offerings, Int(static_cast<int64_t>(c.prices->offerings.size())))
      .Add(d::target_tokens, Opt(c.plan.target_tokens)).Add(d::target_steps, Opt(c.plan.target_steps))
      .Add(d::deadline_hours, Opt(c.plan.deadline)).Add(d::cheapest, name(w.cheapest))
      .Add(d::fastest, name(w.fastest)).Add(d::cheapest_within_deadline, name(w.cheapest_within_deadline))
      .Add(d::deadline_met, c.plan.deadline ? Flag(w.cheapest_within_deadline.has_value()) : Cell())
      .Add(d::unpriced, c.notes.empty() ? Cell() : Cell(JoinNames(c.notes, "; ")))
      .Add(d::cheapest_reason, reason(w.cheapest, c.reasons.cheapest))
      .Add(d::fastest_reason, reason(w.fastest, c.reasons.fastest))
      .Add(d::deadline_reason, reason(w.cheapest_within_deadline, c.reasons.deadline))
      .Add(d::failure_rate, Text(c.measured_failures ? "measured" : "assumed"))
      .Add(d::history_runs, h ? Int(h->runs) : Cell()).Add(d::history_failures, h ? Int(h->failures) : Cell())
      .Add(d::history_node_hours, h ? Cell(h->node_hours) : Cell())
      .Add(d::measured_mtbf_node_hours, h && h->measured() ? Cell(h->mtbf_node_hours()) : Cell());
  return t.Take();
}

// cost.memory: --model's estimate against --gpu-memory and each offering's GPU, a row per GPU.
ViewTable MemoryTable(const CostRun& c) {
  namespace w = cs::memory;
  const MemoryCheck& check = *c.model_memory;
  const MemoryBreakdown& e = c.model_estimate;
  TableBuilder t(cs::kMemory, " (" + ModeWords(check.mode) + ")");
  for (const auto& [gpu, fit] : c.model_fits) {
    t.Row().Add(w::what, check.what).Add(w::gpu, gpu).Add(w::gpu_memory_bytes, fit.gpu_memory_bytes)
        .Add(w::weights_bytes, e.weights_bytes).Add(w::gradients_bytes, e.gradients_bytes)
        .Add(w::optimizer_bytes, e.optimizer_bytes).Add(w::activations_bytes, e.activations_bytes)
        .Add(w::working_bytes, e.working_bytes).Add(w::parallel, check.mode)
        .Add(w::ranks, Int(check.ranks)).Add(w::total_bytes, e.total_bytes()).Add(w::calibration, fit.calibration)
        .Add(w::calibration_source, Text(check.calibration ? check.calibration->source : "none"))
        .Add(w::required_bytes, fit.required_bytes).Add(w::margin_bytes, fit.margin_bytes)
        .Add(w::fits, Flag(fit.fits));
  }
  return t.Take();
}

}  // namespace

std::vector<RunView> CostViews(const CostRun& c) {
  std::vector<RunView> views;
  for (size_t i = 0; i < c.runs.size(); ++i) {
    RunView& view = views.emplace_back(RunView{RunName(c.runs[i]), {}});
    view.tables.push_back(RunTable(c.runs[i], c.prices.has_value()));
    view.tables.push_back(PointsTable(c.runs[i]));
    if (!c.runs[i].on_fabrics.empty()) view.tables.push_back(LayoutsTable(c.runs[i]));
    if (c.prices) view.tables.push_back(RowsTable(c, i));
  }
  RunView all{c.prices ? c.prices->path : "--model " + c.plan.model, {}};
  if (c.prices && !c.runs.empty()) all.tables.push_back(DecisionTable(c));
  if (c.model_memory) all.tables.push_back(MemoryTable(c));
  if (!all.tables.empty()) views.push_back(std::move(all));
  return views;
}

}  // namespace tb
