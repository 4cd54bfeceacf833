#include "comparability.h"

#include <algorithm>
#include <functional>

#include "console.h"
#include "error.h"
#include "report_view.h"
#include "schema.h"

namespace tb {
namespace {

namespace sc = schema;

// What a variable reads from one report: its value as text, "" when the report does not record it.
using Reader = std::function<std::string(const Report&)>;

struct VariableSpec {
  const char* name;
  const char* consequence;  // nullptr: a difference is what is compared (shown, not warned)
  Reader read;
};

std::string Text(const AttributeValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&value)) return Format("%g", *d);
  const std::string& s = std::get<std::string>(value);
  return s.empty() ? "none" : s;  // recorded as empty ("no CUDA"): a value, unlike not recorded
}

Reader Attribute(const sc::GroupSpec& group, const sc::Field& field) {
  return [&group, &field](const Report& report) {
    const std::optional<AttributeValue> value = sc::Value(sc::FindGroup(report.root, group), field);
    return value ? Text(*value) : std::string();
  };
}

// The training point of the most ranks (its figures are the headline); nullptr without one.
const Group* LargestPoint(const Report& report) {
  const Group* largest = nullptr;
  int64_t most = 0;
  for (const auto& [name, group] : sc::Instances(report.root, sc::kTrainPoint)) {
    const std::optional<PointGroup> point = ParsePointGroupName(name);
    if (!point || point->throttle_MBps != 0 || point->ranks <= most) continue;
    most = point->ranks;
    largest = group;
  }
  return largest;
}

// The build: its version and git revision (the version alone stays the same between releases).
std::string ToolVersion(const Report& report) {
  const std::string* version = sc::Find(&report.root, sc::root::tool_version);
  const std::string* revision = sc::Find(&report.root, sc::root::git_revision);
  if (!version) return "";
  return revision && !revision->empty() ? *version + " (" + *revision + ")" : *version;
}

std::string ModelShape(const Report& report) {
  const Group* model = sc::FindGroup(report.root, sc::kModel);
  const auto* layers = sc::Find(model, sc::model::layers);
  const auto* d_model = sc::Find(model, sc::model::d_model);
  const auto* heads = sc::Find(model, sc::model::heads);
  const auto* vocab = sc::Find(model, sc::model::vocab);
  if (!layers || !d_model || !heads || !vocab) return "";
  return Format("L%lld d%lld h%lld V%lld", static_cast<long long>(*layers), static_cast<long long>(*d_model),
                static_cast<long long>(*heads), static_cast<long long>(*vocab));
}

// Synthetic tokens, or the dataset by its shape (its path differs from machine to machine).
std::string Data(const Report& report) {
  const std::string* path = sc::Find(sc::FindGroup(report.root, sc::kConfig), sc::config::data);
  if (!path) return "";
  if (path->empty()) return "synthetic";
  for (const auto& [name, group] : sc::Instances(report.root, sc::kIoPoint)) {
    const auto* samples = sc::Find(group, sc::io_point::dataset_samples);
    const auto* bytes = sc::Find(group, sc::io_point::record_bytes);
    if (samples && bytes) {
      return Format("%lld samples of %lld B", static_cast<long long>(*samples), static_cast<long long>(*bytes));
    }
  }
  return "dataset " + *path;
}

// The precision the backend trains in (models/README.md): the CPU reference in fp32, CUDA in bf16 with fp32
// master weights and AdamW state.
std::string Precision(const Report& report) {
  const std::string* backend = sc::Find(sc::FindGroup(report.root, sc::kTrain), sc::train::backend);
  if (!backend) return "";
  if (*backend == "cuda") return "bf16 (fp32 master)";
  if (*backend == "cpu") return "fp32";
  return *backend;
}

std::string RanksPerNode(const Report& report) {
  if (const auto* per_node = sc::Find(LargestPoint(report), sc::point::ranks_per_node)) return std::to_string(*per_node);
  const auto* ranks = sc::Find(&report.root, sc::root::n_ranks);
  const auto* nodes = sc::Find(&report.root, sc::root::n_nodes);
  if (!ranks || !nodes || *nodes <= 0) return "";
  return *ranks % *nodes == 0 ? std::to_string(*ranks / *nodes) : "uneven";
}

std::string Device(const Report& report) {
  if (const auto* device = sc::Find(sc::FindGroup(report.root, sc::kTrain), sc::train::device)) return *device;
  const Table* ranks = sc::FindTable(sc::FindGroup(report.root, sc::kTopology), sc::topology::kRanks);
  if (!ranks) return "";
  const auto* gpu = sc::Values(*ranks, sc::topology::ranks::gpu_name);
  const auto* cpu = sc::Values(*ranks, sc::topology::ranks::cpu_model);
  if (gpu && !gpu->empty() && !gpu->front().empty()) return gpu->front();
  return cpu && !cpu->empty() ? cpu->front() : "";
}

// The GPU link types the topology found, each once; "none recorded" without GPU links (the CPU backend). A run that
// emulated another fabric says so ("PCIe emulated on NVLink x18"): it is not the NVLink run it sits beside.
std::string Interconnect(const Report& report) {
  if (!sc::FindGroup(report.root, sc::kTopology)) return "";
  const std::string fabric = IntraNodeFabric(report);
  return fabric.empty() ? "none recorded" : fabric;
}

constexpr const char* kThroughput = "throughput is not comparable";
constexpr const char* kComputeLibrary = "compute times may differ for the library alone";
constexpr const char* kCommLibrary = "communication times may differ for the library alone";

const std::vector<VariableSpec>& Variables() {
  static const std::vector<VariableSpec> variables = {
      {"command", nullptr, Attribute(sc::kRoot, sc::root::command)},
      {"tool_version", "the code that ran may differ", ToolVersion},
      {"model", kThroughput, Attribute(sc::kConfig, sc::config::model)},
      {"model_shape", kThroughput, ModelShape},
      {"data", "data-loader stalls are not comparable", Data},
      {"precision", kThroughput, Precision},
      {"micro_batch", kThroughput, Attribute(sc::kConfig, sc::config::micro_batch)},
      {"seq", kThroughput, Attribute(sc::kConfig, sc::config::seq)},
      {"global_batch", kThroughput, Attribute(sc::kConfig, sc::config::global_batch)},
      {"ranks_per_node", "the load on each node's links is not comparable", RanksPerNode},
      {"warmup_steps", "the measured steps start at different points", Attribute(sc::kConfig, sc::config::warmup_steps)},
      {"steps", "the figures average different numbers of steps", Attribute(sc::kConfig, sc::config::steps)},
      {"cuda_runtime", kComputeLibrary, Attribute(sc::kTopology, sc::topology::cuda_runtime)},
      {"cudnn", kComputeLibrary, Attribute(sc::kTopology, sc::topology::cudnn)},
      {"nccl", kCommLibrary, Attribute(sc::kTopology, sc::topology::nccl)},
      {"mpi_library", kCommLibrary, Attribute(sc::kTopology, sc::topology::mpi_library)},
      {"device", nullptr, Device},
      {"nodes", nullptr, Attribute(sc::kRoot, sc::root::n_nodes)},
      {"interconnect", nullptr, Interconnect},
      {"parallel", nullptr, Attribute(sc::kConfig, sc::config::parallel)},
      {"tensor_parallel", nullptr, Attribute(sc::kConfig, sc::config::tensor_parallel)},
      {"repeats", nullptr, Attribute(sc::kConfig, sc::config::repeats)},
  };
  return variables;
}

// Whether run `run` records a value another run (of its command, when `commands` is given) records differently.
bool Disagrees(const ComparedVariable& variable, const std::vector<std::string>& commands, size_t run) {
  const std::vector<std::string>& values = variable.values;
  for (size_t i = 0; i < values.size(); ++i) {
    const bool same_command = commands.empty() || commands[i] == commands[run];
    if (same_command && !values[i].empty() && !values[run].empty() && values[i] != values[run]) return true;
  }
  return false;
}

// The values that differ, each once, in run order: only between runs of one command (a suite's collectives and
// train reports are shown together, not compared), except for the command itself.
std::vector<std::string> DifferingValues(const ComparedVariable& variable, const std::vector<std::string>& commands) {
  const std::vector<std::string> none;
  std::vector<std::string> distinct;
  for (size_t run = 0; run < variable.values.size(); ++run) {
    const std::string& value = variable.values[run];
    if (std::find(distinct.begin(), distinct.end(), value) != distinct.end()) continue;
    if (Disagrees(variable, variable.name == "command" ? none : commands, run)) distinct.push_back(value);
  }
  return distinct;
}

}  // namespace

Comparison CompareRuns(const std::vector<const Report*>& reports, const std::vector<std::string>& labels) {
  if (reports.size() != labels.size()) throw std::logic_error("CompareRuns: one label per report");
  Comparison comparison;
  comparison.runs = labels;
  std::vector<std::string> commands;
  for (const Report* report : reports) commands.push_back(Attribute(sc::kRoot, sc::root::command)(*report));
  for (const VariableSpec& spec : Variables()) {
    ComparedVariable variable;
    variable.name = spec.name;
    variable.warned = spec.consequence != nullptr;
    variable.consequence = spec.consequence ? spec.consequence : "";
    for (const Report* report : reports) variable.values.push_back(spec.read(*report));
    const bool recorded = std::any_of(variable.values.begin(), variable.values.end(),
                                      [](const std::string& value) { return !value.empty(); });
    if (!recorded) continue;
    variable.differs = !DifferingValues(variable, commands).empty();
    comparison.variables.push_back(std::move(variable));
  }
  comparison.commands = std::move(commands);
  return comparison;
}

std::vector<std::string> ComparisonWarnings(const Comparison& comparison) {
  std::vector<std::string> warnings;
  for (const ComparedVariable& variable : comparison.variables) {
    if (!variable.differs || !variable.warned) continue;
    std::string values;
    for (const std::string& value : DifferingValues(variable, comparison.commands)) {
      values += (values.empty() ? "" : " vs ") + value;
    }
    warnings.push_back("runs differ in " + variable.name + " (" + values + "): " + variable.consequence);
  }
  return warnings;
}

std::string DifferenceText(const ComparedVariable& variable) {
  if (!variable.differs) return "no";
  return variable.warned ? "yes: not comparable" : "yes: compared";
}

void RequireComparable(const Comparison& comparison) {
  const std::vector<std::string> warnings = ComparisonWarnings(comparison);
  if (warnings.empty()) return;
  throw InputError("runs are not comparable (--require-comparable): " + warnings.front() +
                   (warnings.size() > 1 ? Format("; %zu more difference%s", warnings.size() - 1, warnings.size() > 2 ? "s" : "")
                                          : ""));
}

std::optional<Comparison> CompareReports(const std::vector<Report>& reports, const std::vector<std::string>& labels,
                                         bool require) {
  if (reports.size() < 2) return std::nullopt;
  std::vector<const Report*> pointers;
  for (const Report& report : reports) pointers.push_back(&report);
  Comparison comparison = CompareRuns(pointers, labels);
  if (require) RequireComparable(comparison);
  return comparison;
}

}  // namespace tb
