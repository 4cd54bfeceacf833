#include "report_view.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

namespace tb {
namespace {

// A row addressed by column name, so that cells cannot drift out of line with the column list.
class RowWriter {
 public:
  explicit RowWriter(const ViewTable& table) : table_(table), cells_(table.columns.size()) {}

  RowWriter& Set(const std::string& column, Cell value) {
    for (size_t i = 0; i < table_.columns.size(); ++i) {
      if (table_.columns[i].name == column) {
        cells_[i] = std::move(value);
        return *this;
      }
    }
    throw std::logic_error("report view: table " + table_.FullName() + " has no column " + column);
  }
  std::vector<Cell> Take() { return std::move(cells_); }

 private:
  const ViewTable& table_;
  std::vector<Cell> cells_;
};

ViewTable MakeTable(const std::string& section, const std::string& name, const std::string& title, bool per_run,
                    std::vector<ViewColumn> columns) {
  ViewTable table;
  table.section = section;
  table.name = name;
  table.title = title;
  table.per_run = per_run;
  table.columns = std::move(columns);
  return table;
}

Cell ToCell(const AttributeValue& value) {
  return std::visit([](const auto& v) { return Cell(v); }, value);
}

Cell Attr(const Group* group, const std::string& name) {
  if (group == nullptr) return {};
  auto it = group->attributes.find(name);
  return it == group->attributes.end() ? Cell() : ToCell(it->second);
}

// The cell of `column` in `row`, or nothing when the table lacks the column.
Cell At(const Table& table, const std::string& column, size_t row) {
  const Column* c = table.Find(column);
  if (c == nullptr || row >= c->rows()) return {};
  return std::visit([row](const auto& values) { return Cell(values[row]); }, c->values);
}

// A numeric cell as a double; NaN for anything else.
double Number(const Cell& cell) {
  if (const auto* i = std::get_if<int64_t>(&cell)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&cell)) return *d;
  return std::nan("");
}

std::string Text(const Cell& cell) {
  const auto* s = std::get_if<std::string>(&cell);
  return s ? *s : std::string();
}

// Copies the attributes named by `columns` of `group` into the row (nothing where the group lacks one).
void CopyAttributes(RowWriter& row, const Group* group, const std::vector<ViewColumn>& columns) {
  for (const ViewColumn& column : columns) row.Set(column.name, Attr(group, column.name));
}

// Copies the columns of `source` that the view shares by name, for row `index`.
void CopyColumns(RowWriter& row, const Table& source, const std::vector<ViewColumn>& columns, size_t index) {
  for (const ViewColumn& column : columns) {
    if (source.Find(column.name)) row.Set(column.name, At(source, column.name, index));
  }
}

// Each distinct value with how often it occurs, in order of first appearance, joined by "; ".
std::string CountedList(const std::vector<std::string>& values,
                        const std::function<std::string(const std::string&, int)>& describe) {
  std::vector<std::pair<std::string, int>> counts;
  for (const std::string& value : values) {
    auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == value; });
    if (it == counts.end()) {
      counts.emplace_back(value, 1);
    } else {
      ++it->second;
    }
  }
  std::string text;
  for (const auto& [value, count] : counts) text += (text.empty() ? "" : "; ") + describe(value, count);
  return text;
}

std::string CountTimes(const std::string& value, int count) { return std::to_string(count) + " x " + value; }

// A scaling point's group: "k<N>" or "k<N>_throttle<MBps>".
struct PointEntry {
  std::string name;
  const Group* group;
  int64_t ranks;
  double throttle_MBps;  // 0 = not throttled
};

// The points of `parent` (train or io) in the order they ran: by rank count, then a storage sweep's rates from
// fast to slow (the order --io-throttle takes them in). The last one is the run's headline point.
std::vector<PointEntry> Points(const Group* parent) {
  std::vector<PointEntry> points;
  if (parent == nullptr) return points;
  for (const auto& [name, child] : parent->children()) {
    const std::optional<PointGroup> point = ParsePointGroupName(name);
    if (!point) continue;
    points.push_back(PointEntry{name, child.get(), point->ranks, point->throttle_MBps});
  }
  std::sort(points.begin(), points.end(), [](const PointEntry& a, const PointEntry& b) {
    if (a.ranks != b.ranks) return a.ranks < b.ranks;
    if ((a.throttle_MBps == 0) != (b.throttle_MBps == 0)) return a.throttle_MBps == 0;
    return a.throttle_MBps > b.throttle_MBps;
  });
  return points;
}

const Table* FindTable(const Group* group, const std::string& name) {
  if (group == nullptr) return nullptr;
  auto it = group->tables.find(name);
  return it == group->tables.end() ? nullptr : &it->second;
}

// --- config ------------------------------------------------------------------------------------------------

std::vector<ViewTable> ConfigSection(const Report& report) {
  const Group& root = report.root;
  std::vector<ViewTable> tables;
  std::vector<ViewColumn> run_columns = {
      {"command", ""},       {"command_line", ""}, {"status", ""},      {"status_reason", ""},
      {"start_utc", ""},     {"end_utc", ""},      {"tool_version", ""}, {"git_revision", ""},
      {"n_ranks", "ranks"},  {"n_nodes", "nodes"}, {"backend", ""}};
  ViewTable run = MakeTable("config", "run", "run", true, run_columns);
  RowWriter row(run);
  CopyAttributes(row, &root, run_columns);
  run.rows.push_back(row.Take());
  tables.push_back(std::move(run));

  if (const Group* config = root.FindChild("config")) {
    ViewTable options = MakeTable("config", "options", "options as used", false, {{"option", ""}, {"value", "", -1}});
    for (const auto& [name, value] : config->attributes) {
      RowWriter option(options);
      option.Set("option", name).Set("value", ToCell(value));
      options.rows.push_back(option.Take());
    }
    tables.push_back(std::move(options));
  }
  return tables;
}

// --- topology ------------------------------------------------------------------------------------------------

std::vector<ViewTable> TopologySection(const Report& report) {
  const Group* topology = report.root.FindChild("topology");
  if (topology == nullptr) return {};
  const std::vector<std::string> libraries = {"mpi_library", "mpi_version", "nccl",   "cuda_runtime",
                                              "cuda_driver", "cudnn",       "hdf5"};
  std::vector<ViewColumn> columns = {{"ranks", "ranks"}, {"nodes", "nodes"}, {"hosts", ""},
                                     {"gpus", ""},       {"cpus", ""},       {"gpu_links", ""}};
  for (const std::string& library : libraries) columns.push_back({library, ""});
  ViewTable summary = MakeTable("topology", "summary", "topology", true, columns);
  RowWriter row(summary);

  if (const Table* ranks = FindTable(topology, "ranks")) {
    std::vector<std::string> hosts, gpus, cpus;
    std::set<int64_t> nodes;
    for (size_t r = 0; r < ranks->rows(); ++r) {
      const std::string host = Text(At(*ranks, "host", r));
      if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
      nodes.insert(static_cast<int64_t>(Number(At(*ranks, "node", r))));
      const bool has_gpu = Number(At(*ranks, "gpu_index", r)) >= 0;
      if (has_gpu) gpus.push_back(Text(At(*ranks, "gpu_name", r)));
      // A CPU is counted once per node, not once per rank on it.
      if (Number(At(*ranks, "local_rank", r)) == 0) {
        const double cores = Number(At(*ranks, "cpu_cores", r));
        cpus.push_back(Text(At(*ranks, "cpu_model", r)) +
                       (std::isnan(cores) ? "" : " (" + std::to_string(static_cast<int64_t>(cores)) + " cores)"));
      }
    }
    std::string host_list;
    for (const std::string& host : hosts) host_list += (host_list.empty() ? "" : ", ") + host;
    row.Set("ranks", static_cast<int64_t>(ranks->rows()))
        .Set("nodes", static_cast<int64_t>(nodes.size()))
        .Set("hosts", host_list)
        .Set("gpus", gpus.empty() ? std::string("none") : CountedList(gpus, CountTimes))
        .Set("cpus", CountedList(cpus, CountTimes));
  }
  if (const Table* links = FindTable(topology, "gpu_links")) {
    std::vector<std::string> kinds;
    for (size_t r = 0; r < links->rows(); ++r) {
      const std::string peer = Number(At(*links, "peer_access", r)) == 1 ? "peer access" : "no peer access";
      kinds.push_back(Text(At(*links, "link", r)) + " (" + peer + ")");
    }
    row.Set("gpu_links", kinds.empty() ? std::string("none") : CountedList(kinds, [](const std::string& link, int pairs) {
                   return link + ": " + std::to_string(pairs) + (pairs == 1 ? " pair" : " pairs");
                 }));
  }
  for (const std::string& library : libraries) row.Set(library, Attr(topology, library));
  summary.rows.push_back(row.Take());
  return {summary};
}

// --- collectives ----------------------------------------------------------------------------------------------

std::vector<ViewTable> CollectivesSection(const Report& report) {
  const Group* collectives = report.root.FindChild("collectives");
  if (collectives == nullptr || collectives->children().empty()) return {};
  const Group* summary = report.root.FindChild("summary");

  std::vector<ViewColumn> peak_columns;
  for (const auto& [op, group] : collectives->children()) {
    peak_columns.push_back({op + "_peak_busbw_GBps", "GB/s"});
    peak_columns.push_back({op + "_peak_busbw_size_bytes", "B"});
  }
  peak_columns.push_back({"wrong_elements_total", "elements"});
  ViewTable peak = MakeTable("collectives", "peak", "collectives: best busbw over sizes", true, peak_columns);
  RowWriter peak_row(peak);
  CopyAttributes(peak_row, summary, peak_columns);
  peak.rows.push_back(peak_row.Take());

  ViewTable results = MakeTable(
      "collectives", "results", "collectives, per operation and size (out-of-place, then in-place)", false,
      {{"op", ""},
       {"dtype", ""},
       {"ranks", "ranks"},
       {"size_bytes", "B"},
       {"count", "elements"},
       {"out_of_place_time_us", "us"},
       {"out_of_place_algbw_GBps", "GB/s"},
       {"out_of_place_busbw_GBps", "GB/s"},
       {"out_of_place_wrong", "elements"},
       {"in_place_time_us", "us"},
       {"in_place_algbw_GBps", "GB/s"},
       {"in_place_busbw_GBps", "GB/s"},
       {"in_place_wrong", "elements"}});
  for (const auto& [op, group] : collectives->children()) {
    const Table* table = FindTable(group.get(), "results");
    if (table == nullptr) continue;
    for (size_t r = 0; r < table->rows(); ++r) {
      RowWriter row(results);
      row.Set("op", op).Set("dtype", Attr(group.get(), "dtype")).Set("ranks", Attr(group.get(), "n_ranks"));
      CopyColumns(row, *table, results.columns, r);
      results.rows.push_back(row.Take());
    }
  }
  return {peak, results};
}

// --- p2p ------------------------------------------------------------------------------------------------------

std::vector<ViewTable> P2pSection(const Report& report) {
  const Group* p2p = report.root.FindChild("p2p");
  if (p2p == nullptr) return {};
  const Table* flagged_table = FindTable(p2p, "flagged");

  ViewTable summary = MakeTable("p2p", "summary", "point to point", true,
                                {{"median_uni_GBps", "GB/s", 3},
                                 {"median_bidi_GBps", "GB/s", 3},
                                 {"min_uni_GBps", "GB/s", 3},
                                 {"flagged_pairs", "pairs"},
                                 {"threshold_fraction", "fraction", 0, true},
                                 {"size_bytes", "B"}});
  RowWriter row(summary);
  for (const char* name : {"median_uni_GBps", "median_bidi_GBps", "threshold_fraction", "size_bytes"}) {
    row.Set(name, Attr(p2p, name));
  }
  auto uni = p2p->matrices.find("uni_bw_GBps");
  if (uni != p2p->matrices.end()) {
    double lowest = std::nan("");
    for (double value : uni->second.values) {
      if (!std::isnan(value) && (std::isnan(lowest) || value < lowest)) lowest = value;
    }
    row.Set("min_uni_GBps", lowest);
  }
  if (flagged_table) row.Set("flagged_pairs", static_cast<int64_t>(flagged_table->rows()));
  summary.rows.push_back(row.Take());

  ViewTable flagged = MakeTable("p2p", "flagged", "p2p pairs below the threshold", false,
                                {{"src_rank", ""},
                                 {"dst_rank", ""},
                                 {"src_host", ""},
                                 {"dst_host", ""},
                                 {"src_gpu", ""},
                                 {"dst_gpu", ""},
                                 {"uni_bw_GBps", "GB/s", 3},
                                 {"fraction_of_median", "fraction", 2, true}});
  if (flagged_table) {
    for (size_t r = 0; r < flagged_table->rows(); ++r) {
      RowWriter pair(flagged);
      CopyColumns(pair, *flagged_table, flagged.columns, r);
      flagged.rows.push_back(pair.Take());
    }
  }
  return {summary, flagged};
}

// --- train ----------------------------------------------------------------------------------------------------

const std::vector<ViewColumn>& PointFigureColumns() {
  static const std::vector<ViewColumn> columns = {
      {"ranks", "ranks"},
      {"tokens_per_s", "tokens/s", 0},
      {"tokens_per_s_per_rank", "tokens/s", 0},
      {"mfu_peak", "fraction", 1, true},
      {"mfu_measured_gemm", "fraction", 1, true},
      {"scaling_efficiency", "fraction", 1, true},
      {"overlap", "fraction", 1, true},
      {"step_s", "s", 4}};
  return columns;
}

// The host and device of the point's worst rank, from its stall budget table.
std::pair<Cell, Cell> WorstRankPlace(const Group* point) {
  const Table* budget = FindTable(point, "stall_budget");
  const double worst = Number(Attr(point, "worst_rank"));
  if (budget == nullptr || std::isnan(worst)) return {};
  for (size_t r = 0; r < budget->rows(); ++r) {
    if (Number(At(*budget, "rank", r)) == worst) return {At(*budget, "host", r), At(*budget, "device", r)};
  }
  return {};
}

std::vector<ViewTable> TrainSection(const Report& report) {
  const Group* train = report.root.FindChild("train");
  if (train == nullptr) return {};
  const Group* model = report.root.FindChild("model");
  const std::vector<PointEntry> points = Points(train);

  std::vector<ViewColumn> summary_columns = {{"model", ""}, {"scaled", ""}, {"parameters", ""}, {"backend", ""},
                                             {"device", ""}, {"attention", ""}, {"attention_fallback_reason", ""},
                                             {"scaling_mode", ""}, {"point", ""}};
  for (const ViewColumn& column : PointFigureColumns()) summary_columns.push_back(column);
  const std::vector<ViewColumn> run_columns = {{"peak_flops", "FLOP/s", -1},
                                               {"measured_gemm_flops", "FLOP/s", -1},
                                               {"peak_host_memory_bytes_max", "B", -1},
                                               {"peak_device_memory_bytes_max", "B", -1},
                                               {"startup_s", "s", 2}};
  summary_columns.insert(summary_columns.end(), run_columns.begin(), run_columns.end());
  ViewTable summary = MakeTable("train", "summary", "training (the largest point)", true, summary_columns);
  RowWriter row(summary);
  row.Set("model", Attr(model, "name")).Set("scaled", Attr(model, "scaled")).Set("parameters", Attr(model, "parameters"));
  for (const char* name : {"backend", "device", "attention", "attention_fallback_reason", "scaling_mode"}) {
    row.Set(name, Attr(train, name));
  }
  CopyAttributes(row, train, run_columns);
  if (!points.empty()) {
    row.Set("point", points.back().name);
    CopyAttributes(row, points.back().group, PointFigureColumns());
  }
  summary.rows.push_back(row.Take());

  std::vector<ViewColumn> point_columns = {{"point", ""}};
  for (const ViewColumn& column : PointFigureColumns()) point_columns.push_back(column);
  const std::vector<ViewColumn> point_detail = {{"micro_batch", ""},
                                                {"tokens_per_step", "tokens"},
                                                {"measured_steps", "steps"},
                                                {"comm_total_s", "s", 4},
                                                {"comm_exposed_s", "s", 4},
                                                {"effective_busbw_GBps", "GB/s"},
                                                {"loss_first", "nats", 4},
                                                {"loss_last", "nats", 4},
                                                {"worst_rank", ""}};
  point_columns.insert(point_columns.end(), point_detail.begin(), point_detail.end());
  point_columns.push_back({"worst_rank_host", ""});
  point_columns.push_back({"worst_rank_device", ""});
  ViewTable point_table = MakeTable("train", "points", "training, per scaling point", false, point_columns);

  const std::vector<std::string> phases = {"compute", "comm_exposed", "data_wait", "checkpoint_stall", "other"};
  std::vector<ViewColumn> budget_columns = {
      {"point", ""}, {"rank", ""}, {"host", ""}, {"device", ""}, {"median_step_s", "s", 4}};
  for (const std::string& phase : phases) {
    budget_columns.push_back({phase + "_p50", "fraction", 1, true});
    budget_columns.push_back({phase + "_p95", "fraction", 1, true});
  }
  ViewTable budget = MakeTable("train", "stall_budget", "stall budget per rank (share of step time, p50/p95)",
                               false, budget_columns);

  for (const PointEntry& point : points) {
    RowWriter point_row(point_table);
    point_row.Set("point", point.name);
    CopyAttributes(point_row, point.group, PointFigureColumns());
    CopyAttributes(point_row, point.group, point_detail);
    auto [host, device] = WorstRankPlace(point.group);
    point_row.Set("worst_rank_host", host).Set("worst_rank_device", device);
    point_table.rows.push_back(point_row.Take());

    if (const Table* stall = FindTable(point.group, "stall_budget")) {
      for (size_t r = 0; r < stall->rows(); ++r) {
        RowWriter rank_row(budget);
        rank_row.Set("point", point.name);
        CopyColumns(rank_row, *stall, budget.columns, r);
        budget.rows.push_back(rank_row.Take());
      }
    }
  }
  return {summary, point_table, budget};
}

// --- io -------------------------------------------------------------------------------------------------------

// Checkpoints of one point, one row per checkpoint (step) over the ranks' slices.
void AddCheckpointRows(ViewTable& out, const std::string& point, const Table& slices) {
  struct Checkpoint {
    std::string mode, error;
    int64_t ranks = 0, bytes = 0;
    double stall_s = 0, write_s = 0;
    bool verified = true, ok = true;
  };
  std::map<int64_t, Checkpoint> by_step;
  for (size_t r = 0; r < slices.rows(); ++r) {
    Checkpoint& c = by_step[static_cast<int64_t>(Number(At(slices, "step", r)))];
    c.mode = Text(At(slices, "mode", r));
    c.ranks += 1;
    c.bytes += static_cast<int64_t>(Number(At(slices, "bytes", r)));
    c.stall_s = std::max(c.stall_s, Number(At(slices, "stall_s", r)));
    c.write_s = std::max(c.write_s, Number(At(slices, "write_s", r)));
    c.verified = c.verified && Number(At(slices, "verified", r)) == 1;
    c.ok = c.ok && Number(At(slices, "ok", r)) == 1;
    if (c.error.empty()) c.error = Text(At(slices, "error", r));
  }
  for (const auto& [step, c] : by_step) {
    RowWriter row(out);
    // Every slice is written at once, so the checkpoint's rate is all its bytes over the slowest slice's time.
    row.Set("point", point)
        .Set("step", step)
        .Set("mode", c.mode)
        .Set("ranks", c.ranks)
        .Set("bytes", c.bytes)
        .Set("stall_s_max", c.stall_s)
        .Set("write_s_max", c.write_s)
        .Set("write_GBps", c.write_s > 0 ? c.bytes / c.write_s / 1e9 : std::nan(""))
        .Set("verified", static_cast<int64_t>(c.verified))
        .Set("ok", static_cast<int64_t>(c.ok))
        .Set("error", c.error);
    out.rows.push_back(row.Take());
  }
}

// The io section's columns, declared once for its tables.
const std::vector<ViewColumn>& IoShareColumns() {
  static const std::vector<ViewColumn> columns = {{"data_wait_share", "fraction", 2, true},
                                                  {"checkpoint_stall_share", "fraction", 2, true},
                                                  {"checkpoint_writer_slowdown", "", 3}};
  return columns;
}
const std::vector<ViewColumn>& IoSweepColumns() {
  static const std::vector<ViewColumn> columns = {{"sweep_data_wait_share", "fraction", 2, true},
                                                  {"throttle_at_data_wait_share_MBps", "MB/s", 2}};
  return columns;
}
const std::vector<ViewColumn>& IoPointDetailColumns() {
  static const std::vector<ViewColumn> columns = {{"io_throttle_MBps", "MB/s", 2},
                                                  {"checkpoint_writer_slowdown_steps", "steps"},
                                                  {"dataset_files", "files"},
                                                  {"dataset_files_kept_open", "files"},
                                                  {"dataset_samples", "samples"},
                                                  {"record_bytes", "B"},
                                                  {"dropped_samples_per_epoch", "samples"},
                                                  {"checkpoint_state_bytes", "B"},
                                                  {"resumed_from", ""},
                                                  {"resumed_step", ""},
                                                  {"resume_load_s", "s", 3}};
  return columns;
}
const std::vector<ViewColumn>& LoaderColumns() {
  static const std::vector<ViewColumn> columns = {{"rank", ""},           {"batches", "", 0},
                                                  {"bytes_read", "B", 0}, {"reads", "", 0},
                                                  {"read_s", "s", 4},     {"per_read_MBps", "MB/s", 2},
                                                  {"wait_s", "s", 4}};
  return columns;
}

// `first`, then every column of each list.
std::vector<ViewColumn> Columns(ViewColumn first, std::initializer_list<const std::vector<ViewColumn>*> lists) {
  std::vector<ViewColumn> all = {std::move(first)};
  for (const std::vector<ViewColumn>* list : lists) all.insert(all.end(), list->begin(), list->end());
  return all;
}

// The per-point, per-rank loader and checkpoint tables of the io section.
struct IoTables {
  ViewTable points = MakeTable("io", "points", "I/O, per point", false,
                               Columns({"point", ""}, {&IoShareColumns(), &IoPointDetailColumns()}));
  ViewTable loader = MakeTable("io", "loader", "data loader per rank", false, Columns({"point", ""}, {&LoaderColumns()}));
  ViewTable checkpoints = MakeTable("io", "checkpoints", "checkpoints (all ranks' slices together)", false,
                                    {{"point", ""}, {"step", ""}, {"mode", ""}, {"ranks", "ranks"}, {"bytes", "B"},
                                     {"stall_s_max", "s", 4}, {"write_s_max", "s", 4}, {"write_GBps", "GB/s", 3},
                                     {"verified", ""}, {"ok", ""}, {"error", ""}});
  int64_t last_point_checkpoints = 0;

  void Add(const PointEntry& point) {
    RowWriter row(points);
    row.Set("point", point.name);
    CopyAttributes(row, point.group, IoShareColumns());
    CopyAttributes(row, point.group, IoPointDetailColumns());
    points.rows.push_back(row.Take());
    if (const Table* reads = FindTable(point.group, "loader")) {
      for (size_t r = 0; r < reads->rows(); ++r) {
        RowWriter rank_row(loader);
        rank_row.Set("point", point.name);
        CopyColumns(rank_row, *reads, LoaderColumns(), r);
        loader.rows.push_back(rank_row.Take());
      }
    }
    const size_t before = checkpoints.rows.size();
    if (const Table* slices = FindTable(point.group, "checkpoints")) AddCheckpointRows(checkpoints, point.name, *slices);
    last_point_checkpoints = static_cast<int64_t>(checkpoints.rows.size() - before);
  }
};

// The storage sweep's rates, when the run swept them.
std::optional<ViewTable> SweepRatesTable(const Group* io) {
  const Table* sweep = FindTable(io, "throttle_sweep");
  if (!sweep) return std::nullopt;
  ViewTable rates = MakeTable("io", "throttle_sweep", "storage sweep: emulated read rate per rank", false,
                              {{"io_throttle_MBps", "MB/s", 2},
                               {"data_wait_share", "fraction", 2, true},
                               {"step_s", "s", 4},
                               {"tokens_per_s", "tokens/s", 0}});
  for (size_t r = 0; r < sweep->rows(); ++r) {
    RowWriter rate(rates);
    CopyColumns(rate, *sweep, rates.columns, r);
    rates.rows.push_back(rate.Take());
  }
  return rates;
}

std::vector<ViewTable> IoSection(const Report& report) {
  const Group* io = report.root.FindChild("io");
  if (io == nullptr) return {};
  const std::vector<PointEntry> points = Points(io);
  IoTables detail;
  for (const PointEntry& point : points) detail.Add(point);

  static const std::vector<ViewColumn> kCheckpointCount = {{"checkpoints", ""}};
  ViewTable summary = MakeTable("io", "summary", "I/O (the largest point)", true,
                                Columns({"point", ""}, {&IoShareColumns(), &kCheckpointCount, &IoSweepColumns()}));
  RowWriter row(summary);
  if (!points.empty()) {
    row.Set("point", points.back().name);
    CopyAttributes(row, points.back().group, IoShareColumns());
    row.Set("checkpoints", detail.last_point_checkpoints);
  }
  CopyAttributes(row, io, IoSweepColumns());
  summary.rows.push_back(row.Take());

  std::vector<ViewTable> tables = {summary, detail.points};
  if (!detail.loader.rows.empty()) tables.push_back(std::move(detail.loader));
  if (!detail.checkpoints.rows.empty()) tables.push_back(std::move(detail.checkpoints));
  if (std::optional<ViewTable> rates = SweepRatesTable(io)) tables.push_back(std::move(*rates));
  return tables;
}

}  // namespace

const std::vector<std::string>& ReportSectionNames() {
  static const std::vector<std::string> names = {"config", "topology", "collectives", "p2p", "train", "io"};
  return names;
}

std::vector<ViewTable> ViewSection(const Report& report, const std::string& section) {
  if (section == "config") return ConfigSection(report);
  if (section == "topology") return TopologySection(report);
  if (section == "collectives") return CollectivesSection(report);
  if (section == "p2p") return P2pSection(report);
  if (section == "train") return TrainSection(report);
  if (section == "io") return IoSection(report);
  throw std::invalid_argument("unknown report section '" + section + "'");
}

RunView ViewReport(const Report& report, const std::string& label, const std::vector<std::string>& sections) {
  RunView run{label, {}};
  for (const std::string& section : ReportSectionNames()) {
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) continue;
    for (ViewTable& table : ViewSection(report, section)) run.tables.push_back(std::move(table));
  }
  return run;
}

}  // namespace tb
