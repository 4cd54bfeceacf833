#include "op_summary.h"

#include "console.h"
#include "schema.h"

namespace tb {
namespace {

// Means over every rank's measured steps: each op slot, comm_exposed and the step.
struct OpMeans {
  OpSeconds slots{};
  double comm_exposed_s = 0;   // outside forward and backward, pipeline exchanges apart
  double comm_pipeline_s = 0;  // pipeline exchanges and the waits for them
  double step_s = 0;
};

OpMeans MeansOf(const std::vector<RankSteps>& ranks) {
  OpMeans m;
  size_t count = 0;
  for (const RankSteps& rank : ranks) {
    for (const StepRecord& r : rank.steps) {
      if (r.warmup) continue;
      for (int i = 0; i < kOpSlots; ++i) m.slots[i] += r.op_s[i];
      // The waits inside the model are comm_model's; the pipeline's have a row of their own.
      m.comm_exposed_s += r.comm_exposed_s - r.comm_model_waits_s - r.comm_pipeline_s;
      m.comm_pipeline_s += r.comm_pipeline_s;
      m.step_s += r.step_s;
      ++count;
    }
  }
  if (count == 0) return m;
  for (double& s : m.slots) s /= static_cast<double>(count);
  m.comm_exposed_s /= static_cast<double>(count);
  m.comm_pipeline_s /= static_cast<double>(count);
  m.step_s /= static_cast<double>(count);
  return m;
}

// The row's rates from its seconds and work.
void SetRates(OpRow& row, const OpRates& rates) {
  if (row.seconds <= 0) return;
  if (row.flops > 0) {
    row.tflops = row.flops / row.seconds / 1e12;
    if (rates.gemm_flops > 0) row.gemm_fraction = row.flops / row.seconds / rates.gemm_flops;
  }
  if (row.bytes > 0) {
    row.GBps = row.bytes / row.seconds / 1e9;
    if (rates.copy_bytes_per_s > 0) row.copy_fraction = row.bytes / row.seconds / rates.copy_bytes_per_s;
  }
}

}  // namespace

std::vector<OpRow> SummarizeOpTimes(const std::vector<RankSteps>& ranks, const OpShape& shape, const OpRates& rates) {
  const OpMeans m = MeansOf(ranks);
  const double tokens = static_cast<double>(shape.micro_batch) * shape.seq;
  std::vector<OpRow> rows;
  double marked = 0;
  for (int k = 0; k < kOpKinds; ++k) {
    const OpKind kind = static_cast<OpKind>(k);
    const bool per_step = kind == OpKind::kOptimizer || kind == OpKind::kCommModel;  // one row, in backward's slot
    if (kind == OpKind::kCommModel && !shape.comm_model) continue;
    for (const bool backward : {false, true}) {
      if (per_step && !backward) continue;
      OpRow row;
      row.kind = OpKindName(kind);
      row.phase = per_step ? "step" : backward ? "backward" : "forward";
      row.seconds = m.slots[OpSlot(kind, backward)];
      const OpWork work = WorkOf(shape.config, kind, backward, tokens, shape.seq, shape.bf16, shape.parameter_elements,
                                 shape.tensor_parallel);
      // Per micro-batch over the stages, or per step on a rank's own elements.
      const double times = kind == OpKind::kOptimizer ? 1.0 : static_cast<double>(shape.grad_accum) / shape.stages;
      row.flops = work.flops * times;
      row.bytes = work.bytes * times;
      SetRates(row, rates);
      marked += row.seconds;
      rows.push_back(row);
    }
  }
  rows.push_back(OpRow{"comm_exposed", "step", m.comm_exposed_s});
  if (shape.stages > 1) rows.push_back(OpRow{"comm_pipeline", "step", m.comm_pipeline_s});
  rows.push_back(OpRow{"other", "step", m.step_s - marked - m.comm_exposed_s - m.comm_pipeline_s});
  for (OpRow& row : rows) row.share = m.step_s > 0 ? row.seconds / m.step_s : 0.0;
  return rows;
}

std::vector<std::string> OpTimesLines(const std::vector<OpRow>& rows, const OpRates& rates) {
  std::vector<std::string> lines = WrapLines(
      Format("op times: mean per measured step over the point's ranks; rates against the measured GEMM rate "
             "(%.4g TFLOP/s) and copy rate (%.4g GB/s, read + written)",
             rates.gemm_flops / 1e12, rates.copy_bytes_per_s / 1e9),
      "# ", "#   ");
  const TextTable table({{"kind", "", 13}, {"phase", "", 9}, {"time", "(ms)", 10}, {"share", "(%)", 7},
                         {"rate", "(TFLOP/s)", 10}, {"of_gemm", "(%)", 8}, {"rate", "(GB/s)", 9},
                         {"of_copy", "(%)", 8}});
  for (const std::string& line : table.HeaderLines()) lines.push_back(line);
  auto percent = [](double fraction) { return FormatFixed(fraction * 100, 1); };
  for (const OpRow& r : rows) {
    lines.push_back(table.Row({r.kind, r.phase, FormatFixed(r.seconds * 1e3, 3), percent(r.share),
                               FormatFixed(r.tflops, 2), percent(r.gemm_fraction), FormatFixed(r.GBps, 1),
                               percent(r.copy_fraction)}));
  }
  return lines;
}

void AddOpTimesTable(Group& point, const std::vector<OpRow>& rows) {
  namespace c = schema::point::op_times;
  schema::RecordTable<OpRow> table(schema::point::kOpTimes);
  table.Column(c::kind, [](const OpRow& r) { return r.kind; })
      .Column(c::phase, [](const OpRow& r) { return r.phase; })
      .Column(c::seconds, [](const OpRow& r) { return r.seconds; })
      .Column(c::share, [](const OpRow& r) { return r.share; })
      .Column(c::flops, [](const OpRow& r) { return r.flops; })
      .Column(c::bytes, [](const OpRow& r) { return r.bytes; })
      .Column(c::tflops, [](const OpRow& r) { return r.tflops; })
      .Column(c::gemm_fraction, [](const OpRow& r) { return r.gemm_fraction; })
      .Column(c::GBps, [](const OpRow& r) { return r.GBps; })
      .Column(c::copy_fraction, [](const OpRow& r) { return r.copy_fraction; })
      .Write(point, rows);
}

}  // namespace tb
