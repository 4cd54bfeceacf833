#include "report_view.h"

#include "io_tables.h"
#include "console.h"
#include "cpu_placement.h"
#include "pcie_emulation.h"
#include "schema.h"
#include "units.h"

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

// The title of a keyed field's column under its key's heading: "<mode>_busbw_GBps" -> "busbw_GBps".
std::string KeyedLabel(const std::string& name) {
  const size_t open = name.find('<'), close = name.find('>');
  std::string label = name.substr(0, open) + name.substr(close + 1);
  if (label.starts_with('_')) label.erase(0, 1);
  if (label.ends_with('_')) label.pop_back();
  return label;
}

// A column showing the report field `field` (its name, unit and, for a fraction, a percentage in text); a keyed field's
// columns go under their key's heading in text.
ViewColumn Show(const schema::Field& field, int decimals = 2, const std::string& key = "") {
  field.read = true;  // the view shows it, whether or not this report holds a value
  ViewColumn column{key.empty() ? field.name : field.Named(key), field.unit, decimals, field.unit == "fraction", &field,
                    key};
  if (!key.empty()) {
    column.group = key;
    column.label = KeyedLabel(field.name);
  }
  return column;
}
// The column as the console shows it (ViewColumn::console): left out (CSV, JSON and --all-columns show it), a note.
ViewColumn Detail(ViewColumn column) {
  column.console = Console::kDetail;
  return column;
}
ViewColumn Note(ViewColumn column) {
  column.console = Console::kNote;
  return column;
}
// The same field under another name ("ranks" for collectives/<op>/n_ranks).
ViewColumn ShowAs(const std::string& name, const schema::Field& field, int decimals = 2) {
  ViewColumn column = Show(field, decimals);
  column.name = name;
  return column;
}
// A column the view computes.
ViewColumn Computed(const std::string& name, const std::string& unit, int decimals = 2, bool percent = false) {
  return ViewColumn{name, unit, decimals, percent, nullptr, ""};
}

Cell Attr(const Group* group, const schema::Field& field, const std::string& key = "") {
  const std::optional<AttributeValue> value = schema::Value(group, field, key);
  return value ? ToCell(*value) : Cell();
}

// The cell of `column` in `row`, or nothing when there is no such column or row.
Cell CellOf(const Column* column, size_t row) {
  if (column == nullptr || row >= column->rows()) return {};
  return std::visit([row](const auto& values) { return Cell(values[row]); }, column->values);
}
Cell At(const Table& table, const schema::Field& column, size_t row, const std::string& key = "") {
  return CellOf(schema::FindColumn(table, column, key), row);
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

// Copies the attributes the columns show from `group` into the row (nothing where the group lacks one).
void CopyAttributes(RowWriter& row, const Group* group, const std::vector<ViewColumn>& columns) {
  for (const ViewColumn& column : columns) {
    if (column.field) row.Set(column.name, Attr(group, *column.field, column.key));
  }
}

// Copies the columns of `source` that the view's columns show, for row `index`.
void CopyColumns(RowWriter& row, const Table& source, const std::vector<ViewColumn>& columns, size_t index) {
  for (const ViewColumn& column : columns) {
    if (column.field) row.Set(column.name, At(source, *column.field, index, column.key));
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

using schema::FindTable;
namespace sc = schema;

// --- config ------------------------------------------------------------------------------------------------

std::vector<ViewTable> ConfigSection(const Report& report) {
  namespace r = sc::root;
  const Group& root = report.root;
  std::vector<ViewTable> tables;
  std::vector<ViewColumn> run_columns = {Show(r::command),      Show(r::command_line), Show(r::status),
                                         Show(r::status_reason), Show(r::start_utc),    Show(r::end_utc),
                                         Show(r::tool_version), Show(r::git_revision), Show(r::n_ranks),
                                         Show(r::n_nodes),      Show(r::backend),      Show(r::injected_faults),
                                         Show(r::emulated_fabric), Show(r::emulated_fabric_environment),
                                         Show(r::run_id)};
  ViewTable run = MakeTable("config", "run", "run", true, run_columns);
  RowWriter row(run);
  CopyAttributes(row, &root, run_columns);
  run.rows.push_back(row.Take());
  tables.push_back(std::move(run));

  if (const Group* config = sc::FindGroup(root, sc::kConfig)) {
    ViewTable options = MakeTable("config", "options", "options as used", false,
                                  {Computed("option", ""), Computed("value", "", -1)});
    for (const auto& [name, value] : config->attributes) {
      RowWriter option(options);
      const schema::Field* declared = sc::kConfig.FindAttribute(name);  // read through its declaration when it has one
      option.Set("option", name).Set("value", declared ? Attr(config, *declared) : ToCell(value));
      options.rows.push_back(option.Take());
    }
    tables.push_back(std::move(options));
  }
  return tables;
}

// --- topology ------------------------------------------------------------------------------------------------

// Which ranks may run on which CPUs, ranks with the same CPU list together: "ranks 0,1: 0-1"; "rank 0: 0; rank 1: 1".
std::string RankAffinities(const Table& ranks, const Column& affinity) {
  std::vector<std::pair<std::string, std::vector<int>>> lists;  // CPU list -> its ranks, in the order first seen
  for (size_t r = 0; r < ranks.rows(); ++r) {
    const std::string cpus = Text(CellOf(&affinity, r));
    auto it = std::find_if(lists.begin(), lists.end(), [&](const auto& list) { return list.first == cpus; });
    if (it == lists.end()) it = lists.insert(lists.end(), {cpus, {}});
    it->second.push_back(static_cast<int>(Number(At(ranks, sc::topology::ranks::rank, r))));
  }
  std::vector<std::string> parts;
  for (const auto& [cpus, ids] : lists) {
    parts.push_back((ids.size() == 1 ? "rank " : "ranks ") + FormatIdList(ids, 3) + ": " + (cpus.empty() ? "?" : cpus));
  }
  return JoinNames(parts, "; ");
}

// The hosts, node count, GPUs and CPUs of topology/ranks, each kind counted.
void AddRankFigures(RowWriter& row, const Table& ranks) {
  namespace c = sc::topology::ranks;
  std::vector<std::string> hosts, gpus, cpus;
  std::set<int64_t> nodes;
  for (size_t r = 0; r < ranks.rows(); ++r) {
    const std::string host = Text(At(ranks, c::host, r));
    if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    nodes.insert(static_cast<int64_t>(Number(At(ranks, c::node, r))));
    const bool has_gpu = Number(At(ranks, c::gpu_index, r)) >= 0;
    if (has_gpu) gpus.push_back(Text(At(ranks, c::gpu_name, r)));
    // A CPU is counted once per node, not once per rank on it.
    if (Number(At(ranks, c::local_rank, r)) == 0) {
      const double cores = Number(At(ranks, c::cpu_cores, r));
      cpus.push_back(Text(At(ranks, c::cpu_model, r)) +
                     (std::isnan(cores) ? "" : " (" + std::to_string(static_cast<int64_t>(cores)) + " cores)"));
    }
  }
  row.Set("ranks", static_cast<int64_t>(ranks.rows()))
      .Set("nodes", static_cast<int64_t>(nodes.size()))
      .Set("hosts", JoinNames(hosts, ", "))
      .Set("gpus", gpus.empty() ? std::string("none") : CountedList(gpus, CountTimes))
      .Set("cpus", CountedList(cpus, CountTimes));
  const Column* affinity = sc::FindColumn(ranks, c::cpu_affinity);  // reports before it have none
  if (affinity) row.Set("cpu_affinity", RankAffinities(ranks, *affinity));
}

std::vector<ViewTable> TopologySection(const Report& report) {
  namespace t = sc::topology;
  const Group* topology = sc::FindGroup(report.root, sc::kTopology);
  if (topology == nullptr) return {};
  std::vector<ViewColumn> libraries = {Show(t::mpi_library), Show(t::mpi_version), Show(t::nccl),
                                       Show(t::cuda_runtime), Show(t::cuda_driver), Show(t::cudnn),
                                       Show(t::hdf5)};
  std::vector<ViewColumn> columns = {Computed("ranks", "ranks"), Computed("nodes", "nodes"), Computed("hosts", ""),
                                     Computed("gpus", ""),       Computed("cpus", ""),
                                     Computed("cpu_affinity", ""), Show(t::placement_warning),
                                     Computed("gpu_links", "")};
  columns.insert(columns.end(), libraries.begin(), libraries.end());
  ViewTable summary = MakeTable("topology", "summary", "topology", true, columns);
  RowWriter row(summary);
  if (const Table* ranks = FindTable(topology, t::kRanks)) AddRankFigures(row, *ranks);
  if (const Table* links = FindTable(topology, t::kGpuLinks)) {
    std::vector<std::string> kinds;
    const Column* peer_access = sc::FindColumn(*links, t::gpu_links::peer_access);
    const Column* link = sc::FindColumn(*links, t::gpu_links::link);
    for (size_t r = 0; r < links->rows(); ++r) {
      const bool peer = Number(CellOf(peer_access, r)) == 1;
      kinds.push_back(Text(CellOf(link, r)) + (peer ? " (peer access)" : " (no peer access)"));
    }
    row.Set("gpu_links", kinds.empty() ? std::string("none") : CountedList(kinds, [](const std::string& link, int pairs) {
                   return link + ": " + std::to_string(pairs) + (pairs == 1 ? " pair" : " pairs");
                 }));
  }
  CopyAttributes(row, topology, columns);
  summary.rows.push_back(row.Take());
  return {summary};
}

// --- collectives ----------------------------------------------------------------------------------------------

// The sweep's tables: the best busbw of each operation, and a row per operation and size.
std::vector<ViewTable> SweepTables(const Report& report) {
  namespace c = sc::collective;
  const std::vector<std::pair<std::string, const Group*>> ops = sc::Instances(report.root, sc::kCollective);
  if (ops.empty()) return {};
  const Group* summary = sc::FindGroup(report.root, sc::kSummary);

  std::vector<ViewColumn> peak_columns;
  for (const auto& [op, group] : ops) {
    peak_columns.push_back(Show(sc::summary::peak_busbw_GBps, 2, op));
    peak_columns.push_back(Show(sc::summary::peak_busbw_size_bytes, 2, op));
  }
  peak_columns.push_back(Show(sc::summary::wrong_elements_total));
  ViewTable peak = MakeTable("collectives", "peak", "collectives: best busbw over sizes", true, peak_columns);
  RowWriter peak_row(peak);
  CopyAttributes(peak_row, summary, peak_columns);
  peak.rows.push_back(peak_row.Take());

  // split, communicators and nodes: a report from before --split measured one communicator of every rank.
  // The console shows nccl-tests' columns (op, size, count, then per mode time, algbw, busbw, #wrong); a run's dtype,
  // ranks and split are the same on every row, and nic_busbw is for runs across nodes.
  std::vector<ViewColumn> columns = {Computed("op", ""),
                                     Detail(Show(c::dtype)),
                                     Detail(ShowAs("ranks", c::n_ranks)),
                                     Detail(Show(c::split)),
                                     Detail(Show(c::communicators)),
                                     Detail(Show(c::nodes)),
                                     Show(c::results::size_bytes),
                                     Show(c::results::count)};
  constexpr size_t kAttributeColumns = 6;
  const schema::Field* per_mode[] = {&c::results::time_us, &c::results::algbw_GBps, &c::results::busbw_GBps,
                                     &c::results::nic_busbw_GBps, &c::results::wrong};
  for (const std::string& mode : c::results::kModes) {
    for (const schema::Field* field : per_mode) {
      ViewColumn column = Show(*field, 2, mode);
      columns.push_back(field == &c::results::nic_busbw_GBps ? Detail(column) : column);
    }
  }
  ViewTable results = MakeTable("collectives", "results",
                                "collectives, per operation and size", false, columns);
  for (const auto& [op, group] : ops) {
    const Table* table = FindTable(group, c::kResults);
    if (table == nullptr) continue;
    for (size_t r = 0; r < table->rows(); ++r) {
      RowWriter row(results);
      const Cell split = Attr(group, c::split), communicators = Attr(group, c::communicators);
      row.Set("op", op).Set("dtype", Attr(group, c::dtype)).Set("ranks", Attr(group, c::n_ranks));
      const bool before_split = std::holds_alternative<std::monostate>(split);
      row.Set(c::split.name, before_split ? Cell(std::string("all")) : split);
      row.Set(c::communicators.name, before_split ? Cell(int64_t{1}) : communicators);
      row.Set(c::nodes.name, Attr(group, c::nodes));
      CopyColumns(row, *table, std::vector<ViewColumn>(results.columns.begin() + kAttributeColumns, results.columns.end()), r);
      results.rows.push_back(row.Take());
    }
  }
  return {peak, results};
}

// moe_alltoall's points: the layer's shape, the traffic its routing made, each phase's time and rate, a row per
// tokens value.
ViewTable MoeAllToAllTable(const Group& group) {
  namespace m = sc::moe_alltoall;
  const std::vector<ViewColumn> shape = {ShowAs("ranks", m::n_ranks), Detail(Show(m::nodes)), Detail(Show(m::hidden)),
                                         Detail(Show(m::top_k)), Detail(Show(m::experts))};
  std::vector<ViewColumn> columns = {Show(m::results::tokens), Show(m::results::bytes_per_rank, 0),
                                     Show(m::results::local_fraction, 1), Show(m::results::inter_node_fraction, 1)};
  for (const std::string& phase : m::results::kPhases) {
    columns.push_back(Show(m::results::time_us, 2, phase));
    columns.push_back(Show(m::results::GBps, 3, phase));
    columns.push_back(Detail(Show(m::results::inter_node_GBps, 3, phase)));
    columns.push_back(Show(m::results::wrong, 0, phase));
  }
  std::vector<ViewColumn> all = shape;
  all.insert(all.end(), columns.begin(), columns.end());
  ViewTable table = MakeTable("collectives", "moe_alltoall", "moe_alltoall: dispatch and combine, per tokens value",
                              false, all);
  const Table* results = FindTable(&group, m::kResults);
  for (size_t r = 0; results != nullptr && r < results->rows(); ++r) {
    RowWriter row(table);
    row.Set("ranks", Attr(&group, m::n_ranks));
    CopyAttributes(row, &group, std::vector<ViewColumn>(shape.begin() + 1, shape.end()));
    CopyColumns(row, *results, columns, r);
    table.rows.push_back(row.Take());
  }
  return table;
}

std::vector<ViewTable> CollectivesSection(const Report& report) {
  std::vector<ViewTable> tables = SweepTables(report);
  if (const Group* moe = sc::FindGroup(report.root, sc::kMoeAllToAll)) tables.push_back(MoeAllToAllTable(*moe));
  return tables;
}

// --- p2p ------------------------------------------------------------------------------------------------------

std::vector<ViewTable> P2pSection(const Report& report) {
  namespace p = sc::p2p;
  const Group* p2p = sc::FindGroup(report.root, sc::kP2p);
  if (p2p == nullptr) return {};
  const Table* flagged_table = FindTable(p2p, p::kFlagged);

  const std::vector<ViewColumn> attributes = {Show(p::median_uni_GBps, 3), Show(p::median_bidi_GBps, 3)};
  const std::vector<ViewColumn> settings = {Show(p::threshold_fraction, 0), Show(p::size_bytes)};
  // Per link class and the node count: absent in reports from before the classes (one class then).
  const std::vector<ViewColumn> classes = {Show(p::median_uni_intra_GBps, 3), Show(p::median_uni_inter_GBps, 3),
                                           Show(p::nodes)};
  ViewTable summary = MakeTable("p2p", "summary", "point to point", true,
                                {attributes[0], attributes[1], Computed("min_uni_GBps", "GB/s", 3),
                                 Computed("flagged_pairs", "pairs"), settings[0], settings[1], classes[0], classes[1],
                                 classes[2]});
  RowWriter row(summary);
  CopyAttributes(row, p2p, attributes);
  CopyAttributes(row, p2p, settings);
  CopyAttributes(row, p2p, classes);
  if (const Matrix* uni = sc::FindMatrix(p2p, p::uni_bw_GBps)) {
    double lowest = std::nan("");
    for (double value : uni->values) {
      if (!std::isnan(value) && (std::isnan(lowest) || value < lowest)) lowest = value;
    }
    row.Set("min_uni_GBps", lowest);
  }
  if (flagged_table) row.Set("flagged_pairs", static_cast<int64_t>(flagged_table->rows()));
  summary.rows.push_back(row.Take());

  namespace f = p::flagged;
  ViewTable flagged = MakeTable("p2p", "flagged", "p2p pairs below the threshold", false,
                                {Show(f::src_rank), Show(f::dst_rank), Show(f::src_host), Show(f::dst_host),
                                 Show(f::src_gpu), Show(f::dst_gpu), Show(f::uni_bw_GBps, 3), Show(f::link),
                                 Show(f::median_GBps, 3), Show(f::fraction_of_median, 2)});
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
  namespace p = sc::point;
  static const std::vector<ViewColumn> columns = {
      Show(p::ranks),      Show(p::tokens_per_s, 0), Show(p::tokens_per_s_per_rank, 0), Show(p::mfu_peak, 1),
      Show(p::mfu_measured_gemm, 1), Show(p::scaling_efficiency, 1), Show(p::overlap, 1), Show(p::step_s, 4)};
  return columns;
}

// The host and device of the point's worst rank, from its stall budget table.
std::pair<Cell, Cell> WorstRankPlace(const Group* point) {
  namespace b = sc::point::stall_budget;
  const Table* budget = FindTable(point, sc::point::kStallBudget);
  const double worst = Number(Attr(point, sc::point::worst_rank));
  if (budget == nullptr || std::isnan(worst)) return {};
  for (size_t r = 0; r < budget->rows(); ++r) {
    if (Number(At(*budget, b::rank, r)) == worst) return {At(*budget, b::host, r), At(*budget, b::device, r)};
  }
  return {};
}

// The columns, each left out of the console (Detail).
std::vector<ViewColumn> DetailColumns(std::vector<ViewColumn> columns) {
  for (ViewColumn& column : columns) column = Detail(std::move(column));
  return columns;
}

// `first`, then every column of each list.
std::vector<ViewColumn> Columns(std::vector<ViewColumn> first, std::initializer_list<const std::vector<ViewColumn>*> lists) {
  std::vector<ViewColumn> all = std::move(first);
  for (const std::vector<ViewColumn>* list : lists) all.insert(all.end(), list->begin(), list->end());
  return all;
}

// What a point's repeats say of its spread: "3 repeats: tokens/s CV 2.3%" (train.spread has the rest), or "1 run:
// spread unknown" (one repeat, or a report from before --repeats).
std::string SpreadText(const Group* point) {
  namespace sp = sc::point::spread;
  const Table* spread = FindTable(point, sc::point::kSpread);
  const double repeats = Number(Attr(point, sc::point::repeat_count));
  if (spread == nullptr || std::isnan(repeats) || repeats < 2) return "1 run: spread unknown";
  for (size_t r = 0; r < spread->rows(); ++r) {
    if (Text(At(*spread, sp::figure, r)) != sc::point::repeats::tokens_per_s.name) continue;
    return Format("%.0f repeats: tokens/s CV %.1f%%", repeats, Number(At(*spread, sp::cv, r)) * 100);
  }
  return Format("%.0f repeats", repeats);
}

ViewTable TrainSummary(const Report& report, const std::vector<PointEntry>& points) {
  namespace t = sc::train;
  const Group* train = sc::FindGroup(report.root, sc::kTrain);
  const Group* model = sc::FindGroup(report.root, sc::kModel);
  const std::vector<ViewColumn> model_columns = {ShowAs("model", sc::model::name), Show(sc::model::scaled),
                                                 Show(sc::model::parameters)};
  const std::vector<ViewColumn> train_columns = {Show(t::backend), Show(t::device), Show(t::attention),
                                                 Show(t::attention_fallback_reason), Show(t::scaling_mode)};
  const std::vector<ViewColumn> run_columns = {Show(t::peak_flops, -1), Show(t::measured_gemm_flops, -1),
                                               Show(t::peak_host_memory_bytes_max, -1),
                                               Show(t::peak_device_memory_bytes_max, -1), Show(t::startup_s, 2)};
  const std::vector<ViewColumn> point_column = {Computed("point", ""), Computed("spread", "")};
  ViewTable summary = MakeTable("train", "summary", "training (the largest point)", true,
                                Columns(model_columns, {&train_columns, &point_column, &PointFigureColumns(),
                                                        &run_columns}));
  RowWriter row(summary);
  CopyAttributes(row, model, model_columns);
  CopyAttributes(row, train, train_columns);
  CopyAttributes(row, train, run_columns);
  if (!points.empty()) {
    row.Set("point", points.back().name).Set("spread", SpreadText(points.back().group));
    CopyAttributes(row, points.back().group, PointFigureColumns());
  }
  summary.rows.push_back(row.Take());
  return summary;
}

// On the console: the point's figures (PointFigureColumns); these are in CSV, JSON and --all-columns.
const std::vector<ViewColumn>& PointDetailColumns() {
  namespace p = sc::point;
  static const std::vector<ViewColumn> columns = DetailColumns({
      Show(p::micro_batch),     Show(p::tokens_per_step),       Show(p::measured_steps),
      Show(p::comm_total_s, 4), Show(p::comm_exposed_s, 4),     Show(p::effective_busbw_GBps),
      Show(p::nodes),           Show(p::ranks_per_node),        Show(p::allreduce),       Show(p::parallel),
      Show(p::weights_bytes, -1), Show(p::weights_bytes_theory, -1), Show(p::gradients_bytes, -1),
      Show(p::gradients_bytes_theory, -1), Show(p::optimizer_bytes, -1), Show(p::optimizer_bytes_theory, -1),
      Show(p::working_bytes, -1), Show(p::comm_gather_exposed_s, 4),
      Show(p::traffic_gradient_sync_bytes, -1), Show(p::traffic_gradient_sync_bytes_theory, -1),
      Show(p::traffic_parameter_gather_bytes, -1), Show(p::traffic_parameter_gather_bytes_theory, -1),
      Show(p::tensor_parallel), Show(p::comm_activation_s, 4), Show(p::traffic_activation_bytes, -1),
      Show(p::traffic_activation_bytes_theory, -1),
      Show(p::pipeline_parallel), Show(p::micro_batches), Show(p::comm_pipeline_s, 4), Show(p::bubble_measured, 4),
      Show(p::bubble_theory, 4), Show(p::traffic_pipeline_bytes, -1), Show(p::traffic_pipeline_bytes_theory, -1),
      Show(p::expert_parallel), Show(p::comm_alltoall_s, 4), Show(p::alltoall_bytes, -1),
      Show(p::alltoall_inter_node_bytes, -1),
      Show(p::alltoall_bytes_theory, -1), Show(p::alltoall_GBps, 3), Show(p::alltoall_dispatch_GBps, 3),
      Show(p::alltoall_combine_GBps, 3), Show(p::moe_max_over_mean, 3),
      Show(p::moe_dropped_share, 4), Show(p::moe_aux_loss, 4),
      Show(p::comm_intra_s, 4), Show(p::comm_inter_s, 4),
      Show(p::loss_first, 4),   Show(p::loss_last, 4),          Show(p::worst_rank),
      Show(p::repeat_count),    Show(p::median_repeat),
      Computed("worst_rank_host", ""), Computed("worst_rank_device", "")});
  return columns;
}

ViewTable StallBudgetView() {
  namespace b = sc::point::stall_budget;
  std::vector<ViewColumn> columns = {Computed("point", ""), Show(b::rank), Show(b::host), Show(b::device),
                                     Show(b::median_step_s, 4)};
  for (const std::string& part : b::kParts) {
    columns.push_back(Show(b::p50, 1, part));
    columns.push_back(Show(b::p95, 1, part));
  }
  for (const std::string& kind : b::kCommKinds) {  // comm_exposed by kind: in CSV, JSON and --all-columns
    columns.push_back(Detail(Show(b::kind_p50, 1, kind)));
    columns.push_back(Detail(Show(b::kind_p95, 1, kind)));
  }
  return MakeTable("train", "stall_budget", "stall budget per rank (share of step time, p50/p95)", false, columns);
}

// Every row of `table` into a view of `columns` (shown in that order).
ViewTable RowsOf(const std::string& name, const std::string& title, const Table& table, std::vector<ViewColumn> columns) {
  ViewTable view = MakeTable("train", name, title, false, std::move(columns));
  for (size_t r = 0; r < table.rows(); ++r) {
    RowWriter row(view);
    CopyColumns(row, table, view.columns, r);
    view.rows.push_back(row.Take());
  }
  return view;
}

// The inter-node link probe of a run across nodes: its verdict, each pair's rate and each host's judgement.
std::vector<ViewTable> LinkProbeViews(const Group& train) {
  const Table* pairs = FindTable(&train, sc::train::kLinkPairs);
  const Table* hosts = FindTable(&train, sc::train::kLinkHosts);
  if (!pairs || !hosts) return {};
  namespace t = sc::train;
  const std::vector<ViewColumn> columns = {Show(t::link_probe_nodes), Show(t::link_probe_bytes), Show(t::link_probe_iters),
                                           Show(t::link_probe_threshold, 2), Show(t::link_probe_slow_hosts),
                                           Show(t::link_probe_verdict)};
  ViewTable probe = MakeTable("train", "link_probe", "inter-node link probe (before the points)", true, columns);
  RowWriter row(probe);
  CopyAttributes(row, &train, columns);
  probe.rows.push_back(row.Take());
  namespace lp = t::link_pairs;
  namespace lh = t::link_hosts;
  return {probe,
          RowsOf("link_pairs", "link probe: each node pair's rate per local rank", *pairs,
                 {Show(lp::local_rank), Show(lp::node_a), Show(lp::node_b), Show(lp::host_a), Show(lp::host_b),
                  Show(lp::seconds, 4), Show(lp::bidi_GBps, -1)}),
          RowsOf("link_hosts", "link probe: each host's pairs against the others'", *hosts,
                 {Show(lh::node), Show(lh::host), Show(lh::local_rank), Show(lh::median_GBps, -1), Show(lh::others_GBps, -1),
                  Show(lh::fraction, 1), Show(lh::slow)})};
}

// Every point's repeats (a row per repeat) and their spread (a row per figure), where the report has them.
std::vector<ViewTable> RepeatViews(const std::vector<PointEntry>& points) {
  namespace r = sc::point::repeats;
  namespace sp = sc::point::spread;
  ViewTable repeats = MakeTable("train", "repeats", "each repeat's headline figures (--repeats)", false,
                                {Computed("point", ""), Show(r::repeat), Show(r::tokens_per_s, 0), Show(r::step_s, 4),
                                 Show(r::mfu_peak, 1), Show(r::mfu_measured_gemm, 1), Show(r::comm_exposed_s, 4),
                                 Show(r::data_wait_share, 2), Show(r::checkpoint_stall_share, 2),
                                 Detail(Show(r::checkpoint_write_GBps, 3))});
  ViewTable spread = MakeTable("train", "spread", "each headline figure over the repeats: median, min, max, CV", false,
                               {Computed("point", ""), Show(sp::figure), Show(sp::count), Show(sp::median, -1),
                                Show(sp::min, -1), Show(sp::max, -1), Show(sp::cv, 1)});
  for (const PointEntry& point : points) {
    for (ViewTable* view : {&repeats, &spread}) {
      const Table* table = FindTable(point.group, view == &repeats ? sc::point::kRepeats : sc::point::kSpread);
      for (size_t i = 0; table && i < table->rows(); ++i) {
        RowWriter row(*view);
        row.Set("point", point.name);
        CopyColumns(row, *table, view->columns, i);
        view->rows.push_back(row.Take());
      }
    }
  }
  std::vector<ViewTable> views;
  if (!repeats.rows.empty()) views.push_back(std::move(repeats));
  if (!spread.rows.empty()) views.push_back(std::move(spread));
  return views;
}

// Every point's --op-times table (a row per kind of work and phase), where the report has one.
std::vector<ViewTable> OpTimesViews(const std::vector<PointEntry>& points) {
  namespace o = sc::point::op_times;
  ViewTable view = MakeTable("train", "op_times", "the model's work by kind (--op-times), mean per measured step", false,
                             {Computed("point", ""), Show(o::kind), Show(o::phase), Show(o::seconds, 5),
                              Show(o::share, 1), Show(o::tflops, 2), Show(o::gemm_fraction, 1), Show(o::GBps, 1),
                              Show(o::copy_fraction, 1), Detail(Show(o::flops, -1)), Detail(Show(o::bytes, -1))});
  for (const PointEntry& point : points) {
    const Table* table = FindTable(point.group, sc::point::kOpTimes);
    for (size_t i = 0; table && i < table->rows(); ++i) {
      RowWriter row(view);
      row.Set("point", point.name);
      CopyColumns(row, *table, view.columns, i);
      view.rows.push_back(row.Take());
    }
  }
  if (view.rows.empty()) return {};
  return {std::move(view)};
}

std::vector<ViewTable> TrainSection(const Report& report) {
  const Group* train = sc::FindGroup(report.root, sc::kTrain);
  if (train == nullptr) return {};
  const std::vector<PointEntry> points = Points(train);
  ViewTable point_table = MakeTable("train", "points", "training, per scaling point", false,
                                    Columns({Computed("point", "")}, {&PointFigureColumns(), &PointDetailColumns()}));
  ViewTable budget = StallBudgetView();
  for (const PointEntry& point : points) {
    RowWriter point_row(point_table);
    point_row.Set("point", point.name);
    CopyAttributes(point_row, point.group, PointFigureColumns());
    CopyAttributes(point_row, point.group, PointDetailColumns());
    auto [host, device] = WorstRankPlace(point.group);
    point_row.Set("worst_rank_host", host).Set("worst_rank_device", device);
    point_table.rows.push_back(point_row.Take());

    if (const Table* stall = FindTable(point.group, sc::point::kStallBudget)) {
      for (size_t r = 0; r < stall->rows(); ++r) {
        RowWriter rank_row(budget);
        rank_row.Set("point", point.name);
        CopyColumns(rank_row, *stall, budget.columns, r);
        budget.rows.push_back(rank_row.Take());
      }
    }
  }
  std::vector<ViewTable> views = {TrainSummary(report, points), point_table, budget};
  for (ViewTable& view : RepeatViews(points)) views.push_back(std::move(view));
  for (ViewTable& view : OpTimesViews(points)) views.push_back(std::move(view));
  for (ViewTable& view : LinkProbeViews(*train)) views.push_back(std::move(view));
  return views;
}

// --- io -------------------------------------------------------------------------------------------------------

// Checkpoints of one point, one row per checkpoint (step) over the ranks' slices.
void AddCheckpointRows(ViewTable& out, const std::string& point, const Table& slices) {
  for (const auto& [step, ck] : CheckpointsOf(slices)) {
    RowWriter row(out);
    row.Set("point", point)
        .Set("step", step)
        .Set("mode", ck.mode)
        .Set("ranks", ck.ranks)
        .Set("bytes", ck.bytes)
        .Set("stall_s_max", ck.stall_s)
        .Set("write_s_max", ck.write_s)
        .Set("write_GBps", ck.write_GBps())
        .Set("copy_s", ck.copy_s)
        .Set("crc_s", ck.crc_s)
        .Set("write_calls_s", ck.write_calls_s)
        .Set("commit_s", ck.commit_s)
        .Set("verified", static_cast<int64_t>(ck.verified))
        .Set("ok", static_cast<int64_t>(ck.ok))
        .Set("error", ck.error);
    out.rows.push_back(row.Take());
  }
}

// The io section's columns, declared once for its tables.
const std::vector<ViewColumn>& IoShareColumns() {
  namespace p = sc::io_point;
  static const std::vector<ViewColumn> columns = {Show(p::data_wait_share, 2), Show(p::checkpoint_stall_share, 2),
                                                  Show(p::checkpoint_writer_slowdown, 3)};
  return columns;
}
const std::vector<ViewColumn>& IoSweepColumns() {
  static const std::vector<ViewColumn> columns = {Show(sc::io::sweep_data_wait_share, 2),
                                                  Show(sc::io::throttle_at_data_wait_share_MBps, 2)};
  return columns;
}
const std::vector<ViewColumn>& IoPointDetailColumns() {
  namespace p = sc::io_point;
  // On the console, after the shares: the loader's and the checkpoints' rates.
  static const std::vector<ViewColumn> columns = {
      Detail(Show(p::io_throttle_MBps, 2)), Detail(Show(p::checkpoint_writer_slowdown_steps)),
      Detail(Show(p::dataset_files)), Detail(Show(p::dataset_files_kept_open)), Detail(Show(p::dataset_files_mapped)),
      Detail(Show(p::dataset_samples)), Detail(Show(p::record_bytes)), Detail(Show(p::dropped_samples_per_epoch)),
      Detail(Show(p::loader_ranks)), Detail(Show(p::loader_ranks_per_batch)), Detail(Show(p::loader_bytes)),
      Show(p::loader_per_read_MBps, 2), Detail(Show(p::checkpoint_state_bytes)),
      Detail(Show(p::checkpoint_bytes)), Show(p::checkpoint_write_GBps, 3), Detail(Show(p::resumed_from)),
      Detail(Show(p::resumed_step)), Detail(Show(p::resume_load_s, 3))};
  return columns;
}
const std::vector<ViewColumn>& LoaderColumns() {
  namespace l = sc::io_point::loader;
  static const std::vector<ViewColumn> columns = {Show(l::rank),          Show(l::replica),   Show(l::batches, 0),
                                                  Show(l::bytes_read, 0), Show(l::reads, 0),  Show(l::read_s, 4),
                                                  Show(l::per_read_MBps, 2), Show(l::wait_s, 4)};
  return columns;
}

ViewTable CheckpointsView() {
  namespace c = sc::io_point::checkpoints;
  // The slowest slice's stages (copy_s, crc_s, write_calls_s, commit_s) are in CSV, JSON and --all-columns; an error
  // goes under its checkpoint's row.
  return MakeTable("io", "checkpoints", "checkpoints (all ranks' slices together)", false,
                   {Computed("point", ""), ShowAs("step", c::step), ShowAs("mode", c::mode), Computed("ranks", "ranks"),
                    Computed("bytes", "B"), Computed("stall_s_max", "s", 4), Computed("write_s_max", "s", 4),
                    Computed("write_GBps", "GB/s", 3), Detail(ShowAs("copy_s", c::copy_s, 4)),
                    Detail(ShowAs("crc_s", c::crc_s, 4)), Detail(ShowAs("write_calls_s", c::write_calls_s, 4)),
                    Detail(ShowAs("commit_s", c::commit_s, 4)), ShowAs("verified", c::verified), ShowAs("ok", c::ok),
                    Note(ShowAs("error", c::error))});
}

// The per-point, per-rank loader and checkpoint tables of the io section.
struct IoTables {
  ViewTable points = MakeTable("io", "points", "I/O, per point", false,
                               Columns({Computed("point", "")}, {&IoShareColumns(), &IoPointDetailColumns()}));
  ViewTable loader =
      MakeTable("io", "loader", "data loader per rank", false, Columns({Computed("point", "")}, {&LoaderColumns()}));
  ViewTable checkpoints = CheckpointsView();
  int64_t last_point_checkpoints = 0;

  void Add(const PointEntry& point) {
    RowWriter row(points);
    row.Set("point", point.name);
    CopyAttributes(row, point.group, IoShareColumns());
    CopyAttributes(row, point.group, IoPointDetailColumns());
    points.rows.push_back(row.Take());
    if (const Table* reads = FindTable(point.group, sc::io_point::kLoader)) {
      for (size_t r = 0; r < reads->rows(); ++r) {
        RowWriter rank_row(loader);
        rank_row.Set("point", point.name);
        CopyColumns(rank_row, *reads, LoaderColumns(), r);
        loader.rows.push_back(rank_row.Take());
      }
    }
    const size_t before = checkpoints.rows.size();
    if (const Table* slices = FindTable(point.group, sc::io_point::kCheckpoints)) {
      AddCheckpointRows(checkpoints, point.name, *slices);
    }
    last_point_checkpoints = static_cast<int64_t>(checkpoints.rows.size() - before);
  }
};

// The storage sweep's rates, when the run swept them.
std::optional<ViewTable> SweepRatesTable(const Group* io) {
  namespace t = sc::io::throttle_sweep;
  const Table* sweep = FindTable(io, sc::io::kThrottleSweep);
  if (!sweep) return std::nullopt;
  ViewTable rates = MakeTable("io", "throttle_sweep", "storage sweep: emulated read rate per rank", false,
                              {Show(t::io_throttle_MBps, 2), Show(t::data_wait_share, 2), Show(t::step_s, 4),
                               Show(t::tokens_per_s, 0)});
  for (size_t r = 0; r < sweep->rows(); ++r) {
    RowWriter rate(rates);
    CopyColumns(rate, *sweep, rates.columns, r);
    rates.rows.push_back(rate.Take());
  }
  return rates;
}

std::vector<ViewTable> IoSection(const Report& report) {
  const Group* io = sc::FindGroup(report.root, sc::kIo);
  if (io == nullptr) return {};
  const std::vector<PointEntry> points = Points(io);
  IoTables detail;
  for (const PointEntry& point : points) detail.Add(point);

  static const std::vector<ViewColumn> kCheckpointCount = {Computed("checkpoints", "")};
  ViewTable summary = MakeTable("io", "summary", "I/O (the largest point)", true,
                                Columns({Computed("point", "")}, {&IoShareColumns(), &kCheckpointCount, &IoSweepColumns()}));
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

// --- gpu_health -----------------------------------------------------------------------------------------------

const std::vector<ViewColumn>& GpuHealthDeviceColumns() {
  namespace d = sc::gpu_health::devices;
  // On the console: which GPU, its uncorrected errors and pending repairs, power, temperature and energy (validate's
  // gpu_health check judges the rest); every column in CSV, JSON and --all-columns.
  static const std::vector<ViewColumn> columns = {
      Show(d::host), Detail(Show(d::node)), Show(d::index), Show(d::name), Detail(Show(d::pci_bus_id)),
      Detail(Show(d::uuid)), Detail(Show(d::ranks)), Detail(Show(d::samples)), Detail(Show(d::busy_samples)),
      Detail(Show(d::ecc_corrected_volatile, 0)), Show(d::ecc_uncorrected_volatile, 0),
      Detail(Show(d::retired_pages, 0)),
      Detail(Show(d::retired_pages_pending, 0)), Detail(Show(d::remapped_rows_corrected, 0)),
      Detail(Show(d::remapped_rows_uncorrected, 0)), Show(d::remap_pending, 0), Detail(Show(d::remap_failure, 0)),
      Detail(Show(d::pcie_gen_current, 0)), Detail(Show(d::pcie_gen_max, 0)), Detail(Show(d::pcie_width_current, 0)),
      Detail(Show(d::pcie_width_max, 0)), Detail(Show(d::sm_clock_min_MHz, 0)), Detail(Show(d::sm_clock_median_MHz, 0)),
      Detail(Show(d::sm_clock_max_MHz, 0)), Detail(Show(d::sm_clock_max_supported_MHz, 0)),
      Detail(Show(d::clock_event_reasons)), Show(d::power_mean_W, 1), Detail(Show(d::power_max_W, 1)),
      Detail(Show(d::power_limit_W, 1)), Show(d::temperature_max_C, 0), Show(d::energy_J, 1),
      Note(Show(d::nvml_errors))};
  return columns;
}

// Each training point's energy, where the report has it.
ViewTable PointEnergyView(const Report& report) {
  namespace p = sc::point;
  ViewTable energy = MakeTable("gpu_health", "energy", "energy per training point (its GPUs, measured steps)", false,
                               {Computed("point", ""), Show(p::energy_J, 1), Show(p::energy_per_step_J, 3),
                                Show(p::joules_per_token, 4)});
  for (const PointEntry& point : Points(sc::FindGroup(report.root, sc::kTrain))) {
    if (!point.group->attributes.contains(p::energy_J.name)) continue;  // a report from before energy was measured
    RowWriter row(energy);
    row.Set("point", point.name);
    CopyAttributes(row, point.group, energy.columns);
    energy.rows.push_back(row.Take());
  }
  return energy;
}

std::vector<ViewTable> GpuHealthSection(const Report& report) {
  namespace g = sc::gpu_health;
  const Group* health = sc::FindGroup(report.root, sc::kGpuHealth);
  ViewTable energy = PointEnergyView(report);
  if (health == nullptr && energy.rows.empty()) return {};
  const std::vector<ViewColumn> attributes = {Show(g::source), Show(g::samples), Show(g::interval_s, 1)};
  ViewTable summary = MakeTable("gpu_health", "summary", "GPU health (NVML)", true,
                                Columns({Computed("gpus", "")}, {&attributes}));
  RowWriter row(summary);
  CopyAttributes(row, health, attributes);
  const Table* table = FindTable(health, g::kDevices);
  if (table) row.Set("gpus", static_cast<int64_t>(table->rows()));
  summary.rows.push_back(row.Take());
  ViewTable devices = MakeTable("gpu_health", "devices", "GPU health per GPU", false, GpuHealthDeviceColumns());
  for (size_t r = 0; table && r < table->rows(); ++r) {
    RowWriter device(devices);
    CopyColumns(device, *table, devices.columns, r);
    devices.rows.push_back(device.Take());
  }
  std::vector<ViewTable> tables = {summary, devices};
  if (!energy.rows.empty()) tables.push_back(std::move(energy));
  return tables;
}

}  // namespace

const std::vector<std::string>& ReportSectionNames() {
  static const std::vector<std::string> names = {"config", "topology", "collectives", "p2p", "train", "io",
                                                 "gpu_health"};
  return names;
}

std::vector<ViewTable> ViewSection(const Report& report, const std::string& section) {
  if (section == "config") return ConfigSection(report);
  if (section == "topology") return TopologySection(report);
  if (section == "collectives") return CollectivesSection(report);
  if (section == "p2p") return P2pSection(report);
  if (section == "train") return TrainSection(report);
  if (section == "io") return IoSection(report);
  if (section == "gpu_health") return GpuHealthSection(report);
  throw std::invalid_argument("unknown report section '" + section + "'");
}

std::string GpuLinkKinds(const Report& report) {
  const Table* links = sc::FindTable(sc::FindGroup(report.root, sc::kTopology), sc::topology::kGpuLinks);
  const auto* kinds = links ? sc::Values(*links, sc::topology::gpu_links::link) : nullptr;
  std::set<std::string> distinct;
  if (kinds) distinct.insert(kinds->begin(), kinds->end());
  distinct.erase("");
  return JoinNames(std::vector<std::string>(distinct.begin(), distinct.end()), ", ");
}

std::string EmulatedFabricOf(const Report& report) {
  const std::string* fabric = sc::Find(&report.root, sc::root::emulated_fabric);
  return fabric ? *fabric : "";
}

std::string IntraNodeFabric(const Report& report) {
  const std::string links = GpuLinkKinds(report);
  const std::string fabric = EmulatedFabricOf(report);
  if (fabric.empty()) return links;
  return (fabric == kEmulatedPcie ? "PCIe" : fabric) + " emulated on " +
         (links.empty() ? "no GPU pair (one GPU per node)" : links);
}

std::string EmulatedFabricLine(const Report& report) {
  if (EmulatedFabricOf(report).empty()) return "";
  const std::string* environment = sc::Find(&report.root, sc::root::emulated_fabric_environment);
  return "intra-node fabric: " + IntraNodeFabric(report) +
         (environment && !environment->empty() ? " (" + *environment + ")" : "");
}

RunView ViewReport(const Report& report, const std::string& label, const std::vector<std::string>& sections) {
  RunView run{label, {}};
  if (const std::string line = EmulatedFabricLine(report); !line.empty()) run.notes.push_back(line);
  for (const std::string& section : ReportSectionNames()) {
    if (std::find(sections.begin(), sections.end(), section) == sections.end()) continue;
    for (ViewTable& table : ViewSection(report, section)) run.tables.push_back(std::move(table));
  }
  return run;
}

}  // namespace tb
