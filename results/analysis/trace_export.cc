#include "trace_export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>

#include "error.h"
#include "schema.h"
#include "units.h"

namespace tb {
namespace {

namespace sc = schema;
namespace st = schema::point::steps;
namespace fs = std::filesystem;

// A step's phases, each on a track of its own, in the order the training loop runs them (models/train_loop.cc).
struct LoopPhase {
  const sc::RealColumn* column;
  const char* name;
};
const std::vector<LoopPhase>& LoopPhases() {
  static const std::vector<LoopPhase> phases = {
      {&st::data_wait_s, "data_wait"}, {&st::h2d_s, "h2d"},           {&st::forward_s, "forward"},
      {&st::backward_s, "backward"},   {&st::comm_exposed_s, "comm_exposed"}, {&st::optimizer_s, "optimizer"},
      {&st::checkpoint_stall_s, "checkpoint_stall"}};
  return phases;
}
constexpr size_t kForward = 2, kBackward = 3, kCommExposed = 4;

// Track ids (tid) in each rank's process: the steps, the phases in loop order, then comm_total. From 1: Perfetto
// reads thread 0 of process 0 as the kernel's idle thread (swapper).
constexpr int64_t kStepTrack = 1;
int64_t PhaseTrack(size_t phase) { return kStepTrack + 1 + static_cast<int64_t>(phase); }
int64_t CommTotalTrack() { return PhaseTrack(LoopPhases().size()); }
constexpr const char* kCommTotalTrackName = "comm_total (overlaps backward)";

constexpr const char* kTimeNote =
    "The report's steps table holds how long each step and phase took, not when it began. Each rank's steps are laid "
    "end to end from ts 0, the start of its first step of this point (warm-up steps included, args.warmup = 1), and "
    "each step's phases one after another in the training loop's order (data_wait, h2d, forward, backward, "
    "comm_exposed, optimizer, checkpoint_stall); the part of a step they do not cover (args.other_s) is left empty at "
    "its end. The time between steps was not measured and is not shown, so the ranks drift apart over the steps. "
    "Durations are measurements; positions are this layout.";
constexpr const char* kPhaseNote =
    "comm_exposed is drawn after backward; under fsdp and tensor parallel it also holds the waits for communication "
    "inside forward and backward, and under zero1 the all-gather after the optimizer. checkpoint_stall also holds a "
    "checkpoint's fence before the optimizer. A phase that took no time has no slice. A phase that would run past "
    "its step's end (device and host clocks disagreeing) is cut there, the cut in args.clipped_s.";
constexpr const char* kCommTotalNote =
    "comm_total, on a track of its own: the sum over the step's collectives (gradient buckets, shards, gathers) of "
    "start-to-completion time, which runs under backward (overlap = 1 - comm_exposed / comm_total). Drawn ending "
    "where comm_exposed ends (the wait for the last one); a sum, not a span: collectives in flight together make it "
    "longer than the time they took, so it is cut at the start of backward (of forward under fsdp or tensor "
    "parallel), the measured sum in args.comm_total_s.";

int64_t Nanoseconds(double seconds) { return std::llround(seconds * 1e9); }
// Trace time is in microseconds; a whole number of nanoseconds is k / 1000, which every reader parses back exactly.
double Microseconds(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// The columns of a point's steps table the trace reads; a column the table lacks is null.
struct StepsColumns {
  const std::vector<int64_t>* rank = nullptr;
  const std::vector<int64_t>* step = nullptr;
  const std::vector<int64_t>* warmup = nullptr;
  const std::vector<int64_t>* tokens = nullptr;
  const std::vector<double>* step_s = nullptr;
  const std::vector<double>* loss = nullptr;
  const std::vector<double>* comm_total_s = nullptr;
  std::vector<const std::vector<double>*> phases;  // as LoopPhases()
  size_t rows = 0;
};

StepsColumns ReadSteps(const Table& table) {
  StepsColumns c;
  c.rank = sc::Values(table, st::rank);
  c.step = sc::Values(table, st::step);
  c.warmup = sc::Values(table, st::warmup);
  c.tokens = sc::Values(table, st::tokens);
  c.step_s = sc::Values(table, st::step_s);
  c.loss = sc::Values(table, st::loss);
  c.comm_total_s = sc::Values(table, st::comm_total_s);
  for (const LoopPhase& phase : LoopPhases()) c.phases.push_back(sc::Values(table, *phase.column));
  c.rows = table.rows();
  return c;
}

template <typename T>
Json CellOrNull(const std::vector<T>* column, size_t row) {
  return column ? Json((*column)[row]) : Json(nullptr);
}
double ValueOrNaN(const std::vector<double>* column, size_t row) { return column ? (*column)[row] : std::nan(""); }

const Table* StepsOf(const Group* point) { return sc::FindTable(point, sc::point::kSteps); }

// The report's training points with at least one step row, in the order they ran: by rank count, then a storage
// sweep's rates fast to slow (as train.points lists them).
std::vector<std::pair<std::string, PointGroup>> PointsWithSteps(const Report& report) {
  std::vector<std::pair<std::string, PointGroup>> points;
  for (const auto& [name, group] : sc::Instances(report.root, sc::kTrainPoint)) {
    const std::optional<PointGroup> point = ParsePointGroupName(name);
    const Table* steps = StepsOf(group);
    if (point && steps != nullptr && steps->rows() > 0) points.emplace_back(name, *point);
  }
  std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) {
    if (a.second.ranks != b.second.ranks) return a.second.ranks < b.second.ranks;
    if ((a.second.throttle_MBps == 0) != (b.second.throttle_MBps == 0)) return a.second.throttle_MBps == 0;
    return a.second.throttle_MBps > b.second.throttle_MBps;
  });
  return points;
}

const Group& PointGroupOf(const Report& report, const TracedPoint& point) {
  const Group* group = sc::FindGroup(report.root, sc::kTrainPoint, point.name);
  if (group == nullptr || StepsOf(group) == nullptr) throw InputError("training point " + point.name + " has no steps");
  return *group;
}

// Each rank's row numbers in the steps table, by step.
std::map<int64_t, std::vector<size_t>> RowsByRank(const StepsColumns& c) {
  std::map<int64_t, std::vector<size_t>> rows;
  for (size_t row = 0; row < c.rows; ++row) rows[(*c.rank)[row]].push_back(row);
  for (auto& [rank, list] : rows) {
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) { return (*c.step)[a] < (*c.step)[b]; });
  }
  return rows;
}

// "host:rank:device" from the point's stall budget (the views' place of each rank), else the topology's host.
std::map<int64_t, std::string> ProcessNames(const Report& report, const Group& point, const std::vector<int64_t>& ranks) {
  std::map<int64_t, std::pair<std::string, std::string>> place;
  if (const Table* budget = sc::FindTable(&point, sc::point::kStallBudget)) {
    namespace b = sc::point::stall_budget;
    const auto* rank = sc::Values(*budget, b::rank);
    const auto* host = sc::Values(*budget, b::host);
    const auto* device = sc::Values(*budget, b::device);
    for (size_t r = 0; rank && host && device && r < budget->rows(); ++r) place[(*rank)[r]] = {(*host)[r], (*device)[r]};
  }
  if (const Table* topology = sc::FindTable(sc::FindGroup(report.root, sc::kTopology), sc::topology::kRanks)) {
    const auto* rank = sc::Values(*topology, sc::topology::ranks::rank);
    const auto* host = sc::Values(*topology, sc::topology::ranks::host);
    for (size_t r = 0; rank && host && r < topology->rows(); ++r) place.try_emplace((*rank)[r], (*host)[r], "");
  }
  std::map<int64_t, std::string> names;
  for (int64_t rank : ranks) {
    auto it = place.find(rank);
    const std::string host = it == place.end() || it->second.first.empty() ? "unknown host" : it->second.first;
    const std::string device = it == place.end() || it->second.second.empty() ? "unknown device" : it->second.second;
    names[rank] = host + ":" + std::to_string(rank) + ":" + device;
  }
  return names;
}

Json Metadata(const char* name, int64_t pid, int64_t tid, Json args) {
  return Json{{"ph", "M"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

Json Slice(const std::string& name, const char* category, int64_t pid, int64_t tid, int64_t start_ns, int64_t end_ns,
           Json args) {
  return Json{{"ph", "X"}, {"name", name}, {"cat", category}, {"pid", pid}, {"tid", tid},
              {"ts", Microseconds(start_ns)}, {"dur", Microseconds(end_ns - start_ns)}, {"args", std::move(args)}};
}

// The tracks of one rank's process: its name, then the name and order of each track the table fills.
void AddProcessMetadata(const StepsColumns& c, int64_t rank, const std::string& name, std::vector<Json>& events) {
  events.push_back(Metadata("process_name", rank, kStepTrack, {{"name", name}}));
  events.push_back(Metadata("process_sort_index", rank, kStepTrack, {{"sort_index", rank}}));
  auto track = [&](int64_t tid, const std::string& track_name) {
    events.push_back(Metadata("thread_name", rank, tid, {{"name", track_name}}));
    events.push_back(Metadata("thread_sort_index", rank, tid, {{"sort_index", tid}}));
  };
  track(kStepTrack, "steps");
  for (size_t i = 0; i < LoopPhases().size(); ++i) {
    if (c.phases[i]) track(PhaseTrack(i), LoopPhases()[i].name);
  }
  if (c.comm_total_s) track(CommTotalTrack(), kCommTotalTrackName);
}

// One rank's slices: its steps end to end from 0, each step's phases one after another inside it, comm_total ending
// with comm_exposed. Returns how many slices were cut at their step's end (or comm_total at its floor).
int64_t LayOutRank(const StepsColumns& c, const std::vector<size_t>& rows, int64_t rank, size_t comm_floor,
                   const std::string& file, const std::string& point, std::vector<Json>& events) {
  const size_t phase_count = LoopPhases().size();
  int64_t clipped = 0;
  int64_t step_start = 0;
  for (size_t row : rows) {
    const int64_t step = (*c.step)[row];
    const double step_s = (*c.step_s)[row];
    if (!std::isfinite(step_s) || step_s < 0) {
      throw InputError("cannot trace report '" + file + "': train/" + point + "/steps has step_s " +
                       std::to_string(step_s) + " at rank " + std::to_string(rank) + ", step " + std::to_string(step));
    }
    const int64_t step_end = step_start + Nanoseconds(step_s);
    std::vector<Json> phases;
    std::vector<int64_t> starts(phase_count), ends(phase_count);
    double elapsed_s = 0;  // the step's phases so far, as measured
    for (size_t i = 0; i < phase_count; ++i) {
      const double seconds = ValueOrNaN(c.phases[i], row);
      const int64_t unclipped_start = step_start + Nanoseconds(elapsed_s);
      if (seconds > 0) elapsed_s += seconds;  // NaN (not measured) and 0 take no time
      const int64_t unclipped_end = step_start + Nanoseconds(elapsed_s);
      starts[i] = std::min(unclipped_start, step_end);
      ends[i] = std::min(unclipped_end, step_end);
      if (!(seconds > 0)) continue;
      Json args = {{"step", step}, {"seconds", seconds}};
      if (ends[i] < unclipped_end) {
        args["clipped_s"] = static_cast<double>((unclipped_end - unclipped_start) - (ends[i] - starts[i])) / 1e9;
        ++clipped;
      }
      phases.push_back(Slice(LoopPhases()[i].name, "phase", rank, PhaseTrack(i), starts[i], ends[i], std::move(args)));
    }
    const double comm_total_s = ValueOrNaN(c.comm_total_s, row);
    events.push_back(Slice("ProfilerStep#" + std::to_string(step), "step", rank, kStepTrack, step_start, step_end,
                           {{"step", step},
                            {"warmup", CellOrNull(c.warmup, row)},
                            {"step_s", step_s},
                            {"other_s", step_s - elapsed_s},
                            {"loss", CellOrNull(c.loss, row)},
                            {"tokens", CellOrNull(c.tokens, row)},
                            {"comm_total_s", std::isnan(comm_total_s) ? Json(nullptr) : Json(comm_total_s)}}));
    for (Json& phase : phases) events.push_back(std::move(phase));
    if (comm_total_s > 0) {
      const int64_t end = ends[kCommExposed];
      const int64_t unclipped_start = end - Nanoseconds(comm_total_s);
      const int64_t start = std::max(unclipped_start, starts[comm_floor]);
      Json args = {{"step", step}, {"comm_total_s", comm_total_s},
                   {"comm_exposed_s", CellOrNull(c.phases[kCommExposed], row)}};
      if (start > unclipped_start) {
        args["clipped_s"] = static_cast<double>(start - unclipped_start) / 1e9;
        ++clipped;
      }
      events.push_back(Slice("comm_total", "comm_total", rank, CommTotalTrack(), start, end, std::move(args)));
    }
    step_start = step_end;
  }
  return clipped;
}

// Each rank's events (metadata first), and how many slices were cut.
struct RankEvents {
  int64_t rank = 0;
  std::vector<Json> events;
  int64_t clipped = 0;
};

std::vector<RankEvents> EventsByRank(const Report& report, const std::string& file, const TracedPoint& point) {
  const Group& group = PointGroupOf(report, point);
  const StepsColumns c = ReadSteps(*StepsOf(&group));
  // Communication starts in forward where fsdp gathers or tensor parallel all-reduces activations, else in backward.
  const std::string* parallel = sc::Find(&group, sc::point::parallel);
  const int64_t* tensor_parallel = sc::Find(&group, sc::point::tensor_parallel);
  const bool from_forward = (parallel && *parallel == "fsdp") || (tensor_parallel && *tensor_parallel > 1);
  const std::map<int64_t, std::string> names = ProcessNames(report, group, point.ranks);
  std::vector<RankEvents> ranks;
  for (const auto& [rank, rows] : RowsByRank(c)) {
    RankEvents r;
    r.rank = rank;
    AddProcessMetadata(c, rank, names.at(rank), r.events);
    r.clipped = LayOutRank(c, rows, rank, from_forward ? kForward : kBackward, file, point.name, r.events);
    ranks.push_back(std::move(r));
  }
  return ranks;
}

// What every trace says of where it comes from and how it is laid out (Chrome's trace format keeps such notes in
// otherData; Perfetto and HTA keep it as the trace's metadata).
Json OtherData(const Report& report, const std::string& file, const TracedPoint& point, int64_t clipped) {
  auto text = [&](const sc::TextAttribute& field) {
    const std::string* value = sc::Find(&report.root, field);
    return value ? Json(*value) : Json(nullptr);
  };
  return Json{{"generator", "trainbench report --trace"},
              {"report", file},
              {"command_line", text(sc::root::command_line)},
              {"run_start_utc", text(sc::root::start_utc)},
              {"tool_version", text(sc::root::tool_version)},
              {"point", point.name},
              {"world_size", point.world_size},
              {"time_unit", "us"},
              {"timeline", kTimeNote},
              {"phases", kPhaseNote},
              {"comm_total", kCommTotalNote},
              {"clipped_slices", clipped}};
}

}  // namespace

TracedPoint ChooseTracePoint(const Report& report, const std::string& file, const std::string& requested) {
  const std::vector<std::pair<std::string, PointGroup>> points = PointsWithSteps(report);
  if (points.empty()) {
    const std::string* command = sc::Find(&report.root, sc::root::command);
    throw InputError("cannot trace report '" + file + "': it has no training steps (" +
                     (command ? "a " + *command + " report" : "no train/<point>/steps rows") +
                     "); --trace shows the steps of a train or suite run");
  }
  std::vector<std::string> names;
  for (const auto& [name, unused] : points) names.push_back(name);
  TracedPoint traced;
  traced.name = requested.empty() ? names.back() : requested;
  if (std::find(names.begin(), names.end(), traced.name) == names.end()) {
    throw InputError("--trace-point '" + requested + "': report '" + file + "' has no training point of that name " +
                     "with steps (it has " + JoinNames(names, ", ") + ")");
  }
  const Group& group = PointGroupOf(report, traced);
  const StepsColumns c = ReadSteps(*StepsOf(&group));
  for (const auto& [column, name] : {std::pair{c.rank != nullptr, "rank"}, {c.step != nullptr, "step"},
                                     {c.step_s != nullptr, "step_s"}}) {
    if (!column) throw InputError("cannot trace report '" + file + "': train/" + traced.name + "/steps lacks " + name);
  }
  for (const auto& [rank, rows] : RowsByRank(c)) {
    traced.ranks.push_back(rank);
    traced.steps = std::max(traced.steps, rows.size());
  }
  const int64_t* world_size = sc::Find(&group, sc::point::ranks);
  traced.world_size = world_size ? *world_size : static_cast<int64_t>(traced.ranks.size());
  return traced;
}

Json PointTrace(const Report& report, const std::string& file, const TracedPoint& point) {
  Json events = Json::array();
  int64_t clipped = 0;
  for (RankEvents& rank : EventsByRank(report, file, point)) {
    for (Json& event : rank.events) events.push_back(std::move(event));
    clipped += rank.clipped;
  }
  return Json{{"otherData", OtherData(report, file, point, clipped)}, {"traceEvents", std::move(events)}};
}

std::vector<Json> PointTracesPerRank(const Report& report, const std::string& file, const TracedPoint& point) {
  std::vector<Json> traces;
  for (RankEvents& rank : EventsByRank(report, file, point)) {
    traces.push_back(Json{{"distributedInfo", {{"rank", rank.rank}, {"world_size", point.world_size}}},
                          {"otherData", OtherData(report, file, point, rank.clipped)},
                          {"traceEvents", std::move(rank.events)}});
  }
  return traces;
}

std::string RankTraceFileName(int64_t rank) { return "rank" + std::to_string(rank) + ".json"; }

void CheckTraceDirectory(const std::string& dir, const std::string& flag, const TracedPoint& point) {
  auto fail = [&](const std::string& why) { throw InputError("refusing to write " + flag + " '" + dir + "': " + why); };
  std::error_code error;
  const fs::file_status status = fs::status(dir, error);
  if (!fs::exists(status)) return;
  if (!fs::is_directory(status)) fail("it is not a directory");
  std::set<std::string> ours;
  for (int64_t rank : point.ranks) ours.insert(RankTraceFileName(rank));
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const bool trace_like = name.ends_with(".json") || name.ends_with(".gz");
    if (trace_like && !ours.contains(name)) {
      fail("it holds '" + name + "', which HTA would read as one more rank's trace (it reads every .json and .gz " +
           "file there); give an empty or new directory");
    }
  }
  if (error) fail(error.message());
}

std::string TraceText(const Json& trace) {
  std::string text = "{";
  const char* separator = "\n";
  for (const auto& [key, value] : trace.items()) {
    text += separator + DumpJson(key) + ": ";
    separator = ",\n";
    if (key != "traceEvents") {
      text += DumpJson(value, 1);
      continue;
    }
    text += "[";
    const char* event_separator = "\n";
    for (const Json& event : value) {
      text += event_separator + DumpJson(event, -1);
      event_separator = ",\n";
    }
    text += "\n]";
  }
  return text + "\n}\n";
}

}  // namespace tb
