// validate's reading of a report: the key figures (ExtractFigures) and the run's identity (RunIdentity).
#include <algorithm>
#include <cmath>
#include <set>

#include "io_tables.h"
#include "schema.h"
#include "units.h"
#include "validate.h"
#include "validate_internal.h"

namespace tb {
namespace {

namespace sc = schema;
const double kNaN = std::nan("");

// Message-size bands of the collectives checks: latency-bound, middle, bandwidth-bound.
struct SizeBand {
  const char* name;
  const char* title;
  double min_bytes, max_bytes;  // [min, max)
};
constexpr SizeBand kBands[] = {{"small", "sizes < 64 KiB", 0, 64.0 * 1024},
                               {"medium", "sizes 64 KiB - 16 MiB", 64.0 * 1024, 16.0 * 1024 * 1024},
                               {"large", "sizes >= 16 MiB", 16.0 * 1024 * 1024, 1e300}};

// Each measured size's busbw: out-of-place, or in-place where only that mode ran.
std::vector<std::pair<double, double>> SizeBusbw(const Table& results) {
  namespace r = sc::collective::results;
  const std::vector<int64_t>* sizes = sc::Values(results, r::size_bytes);
  const tb::Column* out = sc::FindColumn(results, r::busbw_GBps, "out_of_place");
  const tb::Column* in = sc::FindColumn(results, r::busbw_GBps, "in_place");
  std::vector<std::pair<double, double>> rows;
  if (!sizes) return rows;
  auto value = [](const tb::Column* c, size_t i) {
    const auto* v = c ? std::get_if<std::vector<double>>(&c->values) : nullptr;
    return v && i < v->size() ? (*v)[i] : kNaN;
  };
  for (size_t i = 0; i < sizes->size(); ++i) {
    const double busbw = std::isfinite(value(out, i)) ? value(out, i) : value(in, i);
    if (std::isfinite(busbw)) rows.emplace_back(static_cast<double>((*sizes)[i]), busbw);
  }
  return rows;
}

void AddCollectiveFigures(const Report& report, std::vector<Figure>& figures) {
  for (const auto& [op, group] : sc::Instances(report.root, sc::kCollective)) {
    const Table* results = sc::FindTable(group, sc::collective::kResults);
    if (!results) continue;
    // A split measures other links than the whole launch: its figures are its own (collectives.intra.all_reduce...).
    const std::string* split_attribute = sc::Find(group, sc::collective::split);
    const std::string split = split_attribute ? *split_attribute : "all";
    const std::string key = split == "all" ? op : split + "." + op;
    const std::string title = split == "all" ? op : op + " (--split " + split + ")";
    const std::vector<std::pair<double, double>> rows = SizeBusbw(*results);
    for (const SizeBand& band : kBands) {
      std::vector<double> in_band;
      for (const auto& [size, busbw] : rows) {
        if (size >= band.min_bytes && size < band.max_bytes) in_band.push_back(busbw);
      }
      if (in_band.empty()) continue;
      figures.push_back(MakeFigure("collectives." + key + ".busbw_GBps." + band.name, "collectives",
                                   title + " busbw, " + band.title + " (median over sizes)", "GB/s", Better::kHigher,
                                   Median(in_band)));
    }
  }
}

void AddP2pFigures(const Report& report, std::vector<Figure>& figures) {
  const Group* p2p = sc::FindGroup(report.root, sc::kP2p);
  if (!p2p) return;
  const std::optional<double> median = sc::Number(p2p, sc::p2p::median_uni_GBps);
  figures.push_back(MakeFigure("p2p.median_uni_GBps", "p2p", "p2p unidirectional bandwidth, median over pairs", "GB/s",
                               Better::kHigher, median.value_or(kNaN)));
  const std::optional<double> bidi = sc::Number(p2p, sc::p2p::median_bidi_GBps);
  figures.push_back(MakeFigure("p2p.median_bidi_GBps", "p2p", "p2p bidirectional bandwidth, median over pairs", "GB/s",
                               Better::kHigher, bidi.value_or(kNaN)));
  // Across nodes, each class on its own: the overall median mixes the two in proportions the layout sets.
  if (sc::Number(p2p, sc::p2p::nodes).value_or(1) > 1) {
    for (const auto* attribute : {&sc::p2p::median_uni_intra_GBps, &sc::p2p::median_uni_inter_GBps}) {
      const bool intra = attribute == &sc::p2p::median_uni_intra_GBps;
      const double value = sc::Number(p2p, *attribute).value_or(kNaN);
      if (std::isnan(value)) continue;  // no pair of that class (one rank per node has no intra-node pairs)
      figures.push_back(MakeFigure(std::string("p2p.") + attribute->name, "p2p",
                                   std::string("p2p unidirectional bandwidth, median over ") +
                                       (intra ? "intra-node" : "inter-node") + " pairs",
                                   "GB/s", Better::kHigher, value));
    }
  }
}

// A share figure of the headline point (fraction of step time; lower is better).
Figure ShareFigure(const std::string& key, const std::string& title, double value) {
  Figure f = MakeFigure(key, "train", title, "fraction", Better::kLower, value);
  f.share = true;
  return f;
}

void AddTrainFigures(const Report& report, std::vector<Figure>& figures) {
  const std::optional<HeadlinePoint> point = FindHeadlinePoint(report);
  if (!point) return;
  namespace p = sc::point;
  const Group* g = point->train;
  figures.push_back(MakeFigure("train.tokens_per_s", "train", "training throughput at " + point->name, "tokens/s",
                               Better::kHigher, sc::Number(g, p::tokens_per_s).value_or(kNaN)));
  const double mfu = sc::Number(g, p::mfu_peak).value_or(kNaN);
  if (std::isfinite(mfu)) {  // NaN: no peak is known for the device (a CPU), so there is nothing to check
    figures.push_back(MakeFigure("train.mfu_peak", "train", "MFU of the peak at " + point->name, "fraction",
                                 Better::kHigher, mfu));
  }
  const double step = sc::Number(g, p::step_s).value_or(kNaN);
  const double exposed = sc::Number(g, p::comm_exposed_s).value_or(kNaN);
  figures.push_back(ShareFigure("train.comm_exposed_share", "exposed communication, share of step time",
                                step > 0 ? exposed / step : kNaN));
  if (point->io) {
    figures.push_back(ShareFigure("train.data_wait_share", "data_wait (+h2d), share of step time",
                                  sc::Number(point->io, sc::io_point::data_wait_share).value_or(kNaN)));
    figures.push_back(ShareFigure("train.checkpoint_stall_share", "checkpoint stall, share of step time",
                                  sc::Number(point->io, sc::io_point::checkpoint_stall_share).value_or(kNaN)));
  }
}

void AddStorageFigures(const Report& report, std::vector<Figure>& figures) {
  const std::optional<HeadlinePoint> point = FindHeadlinePoint(report);
  if (!point || !point->io) return;
  if (const Table* loader = sc::FindTable(point->io, sc::io_point::kLoader)) {
    figures.push_back(MakeFigure("storage.loader_MBps", "storage", "data loader read rate (bytes over read time)",
                                 "MB/s", Better::kHigher, LoaderTotalsOf(*loader).per_read_MBps));
  }
  if (const Table* checkpoints = sc::FindTable(point->io, sc::io_point::kCheckpoints)) {
    const std::vector<double>* rates = sc::Values(*checkpoints, sc::io_point::checkpoints::write_GBps);
    std::vector<double> finite;
    for (double rate : rates ? *rates : std::vector<double>{}) {
      if (std::isfinite(rate) && rate > 0) finite.push_back(rate);
    }
    figures.push_back(MakeFigure("storage.checkpoint_write_GBps", "storage",
                                 "checkpoint write rate per slice (median)", "GB/s", Better::kHigher,
                                 finite.empty() ? kNaN : Median(finite)));
    figures.push_back(MakeFigure("storage.checkpoint_total_GBps", "storage",
                                 "checkpoint write rate, all ranks (bytes over the slowest slice's write)", "GB/s",
                                 Better::kHigher, CheckpointWriteGBps(*checkpoints)));
  }
}

// Text figures compared with a baseline or the last night: what the run ran on.
void AddEnvironmentFigures(const Report& report, std::vector<Figure>& figures) {
  const Group* topology = sc::FindGroup(report.root, sc::kTopology);
  if (!topology) return;
  auto text = [&](const std::string& key, const std::string& title, const std::string& value) {
    Figure f = MakeFigure("environment." + key, "environment", title, "", Better::kHigher, kNaN);
    f.is_text = true;
    f.text = value;
    figures.push_back(f);
  };
  text("devices", "devices of the launch", DeviceSummary(report));
  namespace t = sc::topology;
  for (const schema::TextAttribute* library : {&t::cuda_driver, &t::cuda_runtime, &t::nccl, &t::cudnn, &t::mpi_library}) {
    const std::string* version = sc::Find(topology, *library);
    text(library->name, library->name + " version", version ? *version : "");
  }
}

}  // namespace

Figure MakeFigure(std::string key, std::string family, std::string title, std::string unit, Better better,
                  double value, Subject subject) {
  Figure f;
  f.key = std::move(key);
  f.family = std::move(family);
  f.title = std::move(title);
  f.unit = std::move(unit);
  f.better = better;
  f.value = value;
  f.subject = std::move(subject);
  return f;
}

double Median(std::vector<double> values) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::optional<HeadlinePoint> FindHeadlinePoint(const Report& report) {
  std::optional<HeadlinePoint> best;
  int64_t best_ranks = -1;
  for (const auto& [name, group] : sc::Instances(report.root, sc::kTrainPoint)) {
    const std::optional<PointGroup> point = ParsePointGroupName(name);
    if (!point || point->throttle_MBps > 0 || point->ranks <= best_ranks) continue;  // a storage sweep's are not
    best_ranks = point->ranks;
    best = HeadlinePoint{name, group, sc::FindGroup(report.root, sc::kIoPoint, name)};
  }
  return best;
}

std::string DeviceSummary(const Report& report) {
  const Table* ranks = sc::FindTable(sc::FindGroup(report.root, sc::kTopology), sc::topology::kRanks);
  if (!ranks) return "";
  const std::vector<int64_t>* index = sc::Values(*ranks, sc::topology::ranks::gpu_index);
  const std::vector<std::string>* name = sc::Values(*ranks, sc::topology::ranks::gpu_name);
  if (!index || !name || index->empty()) return "";
  if ((*index)[0] < 0) return std::to_string(index->size()) + " x cpu";
  std::set<std::string> models(name->begin(), name->end());
  return std::to_string(index->size()) + " x " + JoinNames(std::vector<std::string>(models.begin(), models.end()), " + ");
}

namespace {

std::vector<Figure> FiguresOfOneRepeat(const Report& report) {
  std::vector<Figure> figures;
  AddCollectiveFigures(report, figures);
  AddP2pFigures(report, figures);
  AddTrainFigures(report, figures);
  AddStorageFigures(report, figures);
  AddEnvironmentFigures(report, figures);
  return figures;
}

// The latest repeat's figure with its value the median over the repeats that measured it, and their spread.
Figure CombineRepeats(const Figure& latest, const std::vector<std::vector<Figure>>& sets) {
  std::vector<double> values;
  for (const std::vector<Figure>& set : sets) {
    for (const Figure& f : set) {
      if (f.key == latest.key && std::isfinite(f.value)) values.push_back(f.value);
    }
  }
  Figure combined = latest;
  if (latest.is_text || values.empty()) return combined;
  combined.value = Median(values);
  combined.repeats = static_cast<int>(values.size());
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  const double scale = latest.share ? 1.0 : std::fabs(combined.value);
  combined.spread = scale > 0 ? (*high - *low) / scale : 0;
  return combined;
}

}  // namespace

namespace {

// A copy of `report` with `measured`'s groups in place of the root's measured ones (schema::kRepeatGroups), and
// without the groups that hold other measurements (repeats/, confirm/).
Report Overlay(const Report& report, const Group& measured) {
  std::set<std::string> replaced(sc::kRepeatGroups.begin(), sc::kRepeatGroups.end());
  replaced.insert(sc::kRepeatsGroupName);
  replaced.insert(sc::kConfirm.path);
  Report r;
  r.root.attributes = report.root.attributes;
  for (const auto& [name, child] : report.root.children()) {
    if (!replaced.contains(name)) r.root.Child(name) = *child;
  }
  for (const auto& [name, child] : measured.children()) r.root.Child(name) = *child;
  return r;
}

}  // namespace

std::vector<Report> EarlierRepeats(const Report& report) {
  const Group* repeats = report.root.FindChild(sc::kRepeatsGroupName);
  if (!repeats) return {};
  std::vector<std::pair<int, const Group*>> held;
  for (const auto& [name, group] : repeats->children()) {
    if (name.size() > 1 && name[0] == 'r' && name.find_first_not_of("0123456789", 1) == std::string::npos) {
      held.emplace_back(std::atoi(name.c_str() + 1), group.get());
    }
  }
  std::sort(held.begin(), held.end());
  std::vector<Report> earlier;
  for (const auto& [number, group] : held) earlier.push_back(Overlay(report, *group));
  return earlier;
}

std::optional<Report> ConfirmationOf(const Report& report) {
  const Group* confirm = sc::FindGroup(report.root, sc::kConfirm);
  if (!confirm) return std::nullopt;
  return Overlay(report, *confirm);
}

std::set<std::string> ConfirmedPhases(const Report& report) {
  std::set<std::string> phases;
  const Table* table = sc::FindTable(sc::FindGroup(report.root, sc::kSuite), sc::suite::kPhases);
  const auto* phase = table ? sc::Values(*table, sc::suite::phases::phase) : nullptr;
  const auto* repeat = table ? sc::Values(*table, sc::suite::phases::repeat) : nullptr;
  const auto* status = table ? sc::Values(*table, sc::suite::phases::status) : nullptr;
  for (size_t i = 0; phase && repeat && status && i < phase->size(); ++i) {
    if ((*repeat)[i] == sc::suite::kConfirmRepeat && (*status)[i] == "complete") phases.insert((*phase)[i]);
  }
  return phases;
}

std::vector<Figure> ExtractFigures(const Report& report) {
  std::vector<Figure> figures = FiguresOfOneRepeat(report);
  const std::vector<Report> earlier = EarlierRepeats(report);
  if (earlier.empty()) return figures;
  std::vector<std::vector<Figure>> sets;
  for (const Report& r : earlier) sets.push_back(FiguresOfOneRepeat(r));
  sets.push_back(figures);
  for (Figure& f : figures) f = CombineRepeats(f, sets);
  return figures;
}

std::string RunIdentity(const Report& report) {
  const std::string* command = sc::Find(&report.root, sc::root::command);
  std::string identity = command ? *command : "?";
  if (const Group* model = sc::FindGroup(report.root, sc::kModel)) {
    const std::string* name = sc::Find(model, sc::model::name);
    const int64_t* layers = sc::Find(model, sc::model::layers);
    identity += " " + (name ? *name : std::string("?")) + " x" + (layers ? std::to_string(*layers) : "?");
  }
  // A suite's profile decides what ran (phases, sizes, model): runs of two profiles are different configurations.
  if (const std::string* profile = sc::Find(sc::FindGroup(report.root, sc::kSuite), sc::suite::profile)) {
    identity += " profile " + *profile;
  }
  const int64_t* ranks = sc::Find(&report.root, sc::root::n_ranks);
  const int64_t* nodes = sc::Find(&report.root, sc::root::n_nodes);
  identity += ", " + DeviceSummary(report) + ", " + (ranks ? std::to_string(*ranks) : "?") + " ranks on " +
              (nodes ? std::to_string(*nodes) : "?") + " node(s)";
  return identity;
}

}  // namespace tb
