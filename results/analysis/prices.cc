#include "prices.h"

#include "toml_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "console.h"
#include "error.h"
#include "paths.h"
#include "units.h"

namespace tb {
namespace {

// ---- GPU models ----------------------------------------------------------------------------------------------

// Upper-cased words of a device or model name, with '-', '_' and ',' as separators.
std::vector<std::string> NameWords(const std::string& name) {
  std::string text;
  for (char c : name) text += (c == '-' || c == '_' || c == ',') ? ' ' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

std::string Canonical(const std::string& name) {
  return JoinNames(NameWords(name), " ");
}

// ---- price file ----------------------------------------------------------------------------------------------

constexpr const char* kOfferingKeys =
    "name, gpu, gpus_per_node, usd_per_gpu_hour, usd_per_node_hour, gpu_memory_gib, storage_usd_per_gb_month, "
    "egress_usd_per_gb, mtbf_node_hours, restart_hours, provisioning_hours, usd_per_kwh, fabric";
constexpr const char* kFabricKeys =
    "name, intra, intra_allreduce_busbw_GBps, intra_p2p_GBps, intra_latency_us, intra_source, pcie_gen, pcie_lanes, "
    "gpus_per_switch, intra_report, nics_per_node, nic_gbps, network_latency_us, network_source";
constexpr const char* kAssumptionKeys =
    "checkpoint_size_gb, checkpoints_kept, dataset_gb, egress_gb, checkpoint_interval_hours, young_daly_interval";

Offering ReadOffering(const toml::table& table, const std::string& file, size_t index) {
  // Errors name the offering, or its number until its name is known.
  const auto where = [](const std::string& name) { return std::string("offering '").append(name).append("': "); };
  const std::string number = std::string("#").append(std::to_string(index + 1));
  const std::optional<std::string> name = FieldReader(table, file, where(number)).OptionalString("name");
  FieldReader r(table, file, where(name.value_or(number)));
  Offering o;
  o.line = r.TableLine();
  o.name = r.String("name");
  const std::string gpu = r.String("gpu");
  o.gpu = FindGpuModel(gpu, At(file, r.LineOf("gpu")) + "offering '" + o.name + "'").name;
  const int64_t per_node = r.Integer("gpus_per_node");
  if (per_node <= 0 || per_node > 1024) r.Fail(r.LineOf("gpus_per_node"), "gpus_per_node must be 1..1024");
  o.gpus_per_node = static_cast<int>(per_node);
  o.usd_per_gpu_hour = r.OptionalNumber("usd_per_gpu_hour");
  o.usd_per_node_hour = r.OptionalNumber("usd_per_node_hour");
  if (o.usd_per_gpu_hour.has_value() == o.usd_per_node_hour.has_value()) {
    r.Fail(r.TableLine(), o.usd_per_gpu_hour ? "give usd_per_gpu_hour or usd_per_node_hour, not both"
                                             : "missing price: give usd_per_gpu_hour or usd_per_node_hour");
  }
  if (o.usd_per_gpu_hour) r.CheckSign("usd_per_gpu_hour", *o.usd_per_gpu_hour, true);
  if (o.usd_per_node_hour) r.CheckSign("usd_per_node_hour", *o.usd_per_node_hour, true);
  const std::optional<double> memory = r.OptionalNumber("gpu_memory_gib");
  if (memory) r.CheckSign("gpu_memory_gib", *memory, true);
  o.gpu_memory_gib = memory.value_or(FindGpuModel(o.gpu, "").memory_gib);
  o.storage_usd_per_gb_month = r.Number("storage_usd_per_gb_month", false);
  o.egress_usd_per_gb = r.Number("egress_usd_per_gb", false);
  o.mtbf_node_hours = r.Number("mtbf_node_hours", true);
  o.restart_hours = r.Number("restart_hours", false);
  const std::optional<double> provisioning = r.OptionalNumber("provisioning_hours");
  if (provisioning) r.CheckSign("provisioning_hours", *provisioning, false);
  o.provisioning_hours = provisioning.value_or(0.0);
  o.usd_per_kwh = r.OptionalNumber("usd_per_kwh");
  if (o.usd_per_kwh) r.CheckSign("usd_per_kwh", *o.usd_per_kwh, false);
  o.fabric = r.OptionalString("fabric").value_or("");
  r.RejectUnknown(kOfferingKeys);
  return o;
}

CostAssumptions ReadAssumptions(const toml::table& table, const std::string& file) {
  FieldReader r(table, file, "[assumptions] ");
  CostAssumptions a;
  if (const toml::node* size = r.Find("checkpoint_size_gb")) {
    if (size->is_string()) {
      if (size->as_string()->get() != "measured") {
        r.Fail(NodeLine(*size), "checkpoint_size_gb must be \"measured\" or a number of GB");
      }
    } else {
      a.checkpoint_size = CheckpointSizeSource::kGigabytes;
      a.checkpoint_gb = r.Number("checkpoint_size_gb", false);
    }
  }
  if (table.contains("checkpoints_kept")) {
    const int64_t kept = r.Integer("checkpoints_kept");
    if (kept < 0 || kept > 1000000) r.Fail(r.LineOf("checkpoints_kept"), "checkpoints_kept must be 0..1000000");
    a.checkpoints_kept = static_cast<int>(kept);
  }
  if (table.contains("dataset_gb")) a.dataset_gb = r.Number("dataset_gb", false);
  if (table.contains("egress_gb")) a.egress_gb = r.Number("egress_gb", false);
  if (table.contains("checkpoint_interval_hours")) {
    a.checkpoint_interval_hours = r.Number("checkpoint_interval_hours", true);
  }
  a.young_daly_interval = r.OptionalBool("young_daly_interval").value_or(false);
  r.RejectUnknown(kAssumptionKeys);
  return a;
}

// The tables of an array ([[offering]], [[fabric]]), each read by `read` (table, file, index), their names unique:
// "FILE:LINE: KIND name 'x' used twice".
template <typename T, typename Read>
std::vector<T> ReadNamedTables(const toml::array& tables, const std::string& file, const char* kind, Read read) {
  std::vector<T> items;
  std::set<std::string> names;
  for (size_t i = 0; i < tables.size(); ++i) {
    T item = read(*tables[i].as_table(), file, i);
    if (!names.insert(item.name).second) {
      throw InputError(At(file, item.line) + kind + " name '" + item.name + "' used twice");
    }
    items.push_back(std::move(item));
  }
  return items;
}


// ---- fabrics -------------------------------------------------------------------------------------------------

// A figure of a fabric: absent, or a number > 0.
std::optional<double> Figure(FieldReader& r, const std::string& key) {
  const std::optional<double> value = r.OptionalNumber(key);
  if (value) r.CheckSign(key, *value, true);
  return value;
}

// A source that says where and when: non-empty, with a year (19xx or 20xx) in it.
std::string Source(FieldReader& r, const std::string& key, const std::string& what) {
  const std::optional<std::string> text = r.OptionalString(key);
  if (!text) r.Fail(r.TableLine(), "missing " + key + ": every " + what + " figure says where it comes from and when");
  bool year = false;
  for (size_t i = 0; i + 4 <= text->size() && !year; ++i) {
    const std::string y = text->substr(i, 4);
    const bool digits = std::all_of(y.begin(), y.end(), [](char c) { return c >= '0' && c <= '9'; });
    const bool bounded = (i == 0 || !std::isdigit(static_cast<unsigned char>((*text)[i - 1]))) &&
                         (i + 4 == text->size() || !std::isdigit(static_cast<unsigned char>((*text)[i + 4])));
    year = digits && bounded && (y.starts_with("19") || y.starts_with("20"));
  }
  if (!year) r.Fail(r.LineOf(key), key + " must say when the figures were taken (a year), got '" + *text + "'");
  return *text;
}

IntraKind ReadIntraKind(FieldReader& r) {
  const std::string kind = r.String("intra");
  for (IntraKind k : {IntraKind::kNvSwitch, IntraKind::kNvLinkPairs, IntraKind::kPcie, IntraKind::kMeasured}) {
    if (kind == IntraKindName(k)) return k;
  }
  r.Fail(r.LineOf("intra"), "intra must be \"nvswitch\", \"nvlink-pairs\", \"pcie\" or \"measured\", got '" + kind + "'");
}

// PCIe's generation, width and GPUs per switch; no figure above what such a link carries in one direction.
void ReadPcie(FieldReader& r, IntraLink& in) {
  const int64_t gen = r.Integer("pcie_gen"), lanes = r.Integer("pcie_lanes"), per_switch = r.Integer("gpus_per_switch");
  if (gen < 1 || gen > 6) r.Fail(r.LineOf("pcie_gen"), "pcie_gen must be 1..6, got " + std::to_string(gen));
  if (lanes != 1 && lanes != 2 && lanes != 4 && lanes != 8 && lanes != 16) {
    r.Fail(r.LineOf("pcie_lanes"), "pcie_lanes must be 1, 2, 4, 8 or 16, got " + std::to_string(lanes));
  }
  if (per_switch < 1 || per_switch > 64) r.Fail(r.LineOf("gpus_per_switch"), "gpus_per_switch must be 1..64");
  in.pcie_gen = static_cast<int>(gen);
  in.pcie_lanes = static_cast<int>(lanes);
  in.gpus_per_switch = static_cast<int>(per_switch);
  const double limit = PcieDirectionGBps(in.pcie_gen, in.pcie_lanes);
  for (const auto& [key, value] : {std::pair{"intra_allreduce_busbw_GBps", in.all_reduce_busbw_GBps},
                                   std::pair{"intra_p2p_GBps", in.p2p_GBps}}) {
    if (value && *value > limit) {
      r.Fail(r.LineOf(key), Format("%s %g exceeds what PCIe gen %d x%d carries in one direction (%.1f GB/s)", key,
                                   *value, in.pcie_gen, in.pcie_lanes, limit));
    }
  }
}

// The PCIe keys go with a PCIe link only.
void RejectPcieKeys(FieldReader& r, const toml::table& table) {
  for (const char* key : {"pcie_gen", "pcie_lanes", "gpus_per_switch"}) {
    if (table.contains(key)) r.Fail(r.LineOf(key), "pcie_gen, pcie_lanes and gpus_per_switch go with intra = \"pcie\"");
  }
}

// The report of a measured link (ReadPriceFile reads it), and no declared all-reduce beside it.
void ReadMeasuredKeys(FieldReader& r, const toml::table& table, IntraLink& in) {
  in.report = r.String("intra_report");
  if (in.all_reduce_busbw_GBps || in.latency_us) {
    r.Fail(r.LineOf(in.all_reduce_busbw_GBps ? "intra_allreduce_busbw_GBps" : "intra_latency_us"),
           "a measured link takes its all-reduce from intra_report: declare none");
  }
  if (table.contains("intra_source")) in.source = Source(r, "intra_source", "intra-node");
}

IntraLink ReadIntraLink(FieldReader& r, const toml::table& table) {
  IntraLink in;
  in.line = r.TableLine();
  in.kind = ReadIntraKind(r);
  in.all_reduce_busbw_GBps = Figure(r, "intra_allreduce_busbw_GBps");
  in.p2p_GBps = Figure(r, "intra_p2p_GBps");
  in.latency_us = Figure(r, "intra_latency_us");
  if (in.kind == IntraKind::kPcie) {
    ReadPcie(r, in);
  } else {
    RejectPcieKeys(r, table);
  }
  if (in.kind == IntraKind::kMeasured) {
    ReadMeasuredKeys(r, table, in);
    return in;
  }
  if (table.contains("intra_report")) r.Fail(r.LineOf("intra_report"), "intra_report goes with intra = \"measured\"");
  if (in.all_reduce_busbw_GBps || in.p2p_GBps || in.latency_us || table.contains("intra_source")) {
    in.source = Source(r, "intra_source", "intra-node");
  }
  return in;
}

Network ReadNetwork(FieldReader& r, const toml::table& table) {
  Network net;
  if (table.contains("nics_per_node")) {
    const int64_t nics = r.Integer("nics_per_node");
    if (nics < 1 || nics > 64) r.Fail(r.LineOf("nics_per_node"), "nics_per_node must be 1..64, got " + std::to_string(nics));
    net.nics_per_node = static_cast<int>(nics);
  }
  net.nic_gbps = Figure(r, "nic_gbps");
  net.latency_us = Figure(r, "network_latency_us");
  if (net.nics_per_node || net.nic_gbps || net.latency_us || table.contains("network_source")) {
    net.source = Source(r, "network_source", "network");
  }
  return net;
}

Fabric ReadFabric(const toml::table& table, const std::string& file, size_t index) {
  const auto where = [](const std::string& name) { return std::string("fabric '").append(name).append("': "); };
  const std::string number = std::string("#").append(std::to_string(index + 1));
  const std::optional<std::string> name = FieldReader(table, file, where(number)).OptionalString("name");
  FieldReader r(table, file, where(name.value_or(number)));
  Fabric fabric;
  fabric.line = r.TableLine();
  fabric.name = r.String("name");
  fabric.intra = ReadIntraLink(r, table);
  fabric.network = ReadNetwork(r, table);
  r.RejectUnknown(kFabricKeys);
  return fabric;
}


// Every offering's fabric is declared.
void CheckFabricNames(const PriceFile& prices) {
  for (const Offering& o : prices.offerings) {
    if (!o.fabric.empty() && !prices.FabricOf(o)) {
      std::vector<std::string> declared;
      for (const Fabric& f : prices.fabrics) declared.push_back(f.name);
      throw InputError(At(prices.path, o.line) + "offering '" + o.name + "': fabric '" + o.fabric +
                       "' is not declared (" +
                       (declared.empty() ? std::string("the file has no [[fabric]] tables") : "declared: " + JoinNames(declared, ", ")) +
                       ")");
    }
  }
}

// Anything at the top level but [assumptions], [[fabric]] and [[offering]].
[[noreturn]] void RejectTopLevel(const std::string& name, const toml::node& node, const std::string& file) {
  const char* accepted = " (accepted: [assumptions], [[fabric]], [[offering]])";
  if (node.is_table()) throw InputError(At(file, NodeLine(node)) + "unknown table [" + name + "]" + accepted);
  if (node.is_array_of_tables()) throw InputError(At(file, NodeLine(node)) + "unknown table [[" + name + "]]" + accepted);
  throw InputError(At(file, NodeLine(node)) + "key '" + name +
                   "' outside a table (price files hold [assumptions], [[fabric]] and [[offering]] tables)");
}

}  // namespace

const std::vector<GpuModel>& KnownGpuModels() {
  // Memory as sold, in GiB (a datasheet's "80GB" of HBM is 80 GiB); the more specific names first.
  static const std::vector<GpuModel> models = {
      {"B200", {"B200"}, {}, 180},
      {"GH200", {"GH200"}, {}, 96},
      {"H200 NVL", {"H200", "NVL"}, {}, 141},
      {"H200 SXM", {"H200"}, {"NVL"}, 141},
      {"H100 NVL", {"H100", "NVL"}, {}, 94},
      {"H100 PCIe", {"H100", "PCIE"}, {}, 80},
      {"H100 SXM", {"H100"}, {"PCIE", "NVL"}, 80},
      {"A100 SXM 80GB", {"A100", "SXM4", "80GB"}, {}, 80},
      {"A100 SXM 40GB", {"A100", "SXM4", "40GB"}, {}, 40},
      {"A100 PCIe 80GB", {"A100", "PCIE", "80GB"}, {}, 80},
      {"A100 PCIe 40GB", {"A100", "PCIE", "40GB"}, {}, 40},
      {"L40S", {"L40S"}, {}, 48},
      {"L4", {"L4"}, {}, 24},
      {"A10G", {"A10G"}, {}, 24},
      {"V100 32GB", {"V100", "32GB"}, {}, 32},
      {"V100 16GB", {"V100", "16GB"}, {}, 16},
  };
  return models;
}

std::optional<GpuModel> MatchGpuModel(const std::string& device_name) {
  const std::vector<std::string> words = NameWords(device_name);
  auto has = [&](const std::string& w) { return std::find(words.begin(), words.end(), w) != words.end(); };
  for (const GpuModel& model : KnownGpuModels()) {
    if (std::all_of(model.required.begin(), model.required.end(), has) &&
        std::none_of(model.excluded.begin(), model.excluded.end(), has)) {
      return model;
    }
  }
  return std::nullopt;
}

const GpuModel& FindGpuModel(const std::string& name, const std::string& where) {
  const std::string wanted = Canonical(name);
  for (const GpuModel& model : KnownGpuModels()) {
    if (Canonical(model.name) == wanted) return model;
  }
  throw InputError(where + ": unknown GPU '" + name + "' (known: " + KnownGpuModelNames() + ")");
}

std::string KnownGpuModelNames() {
  std::vector<std::string> names;
  for (const GpuModel& model : KnownGpuModels()) names.push_back(model.name);
  return JoinNames(names, ", ");
}

double Offering::NodeHourUsd() const {
  return usd_per_node_hour ? *usd_per_node_hour : *usd_per_gpu_hour * gpus_per_node;
}

PriceFile ParsePriceFile(const std::string& text, const std::string& path) {
  const toml::table doc = ParseToml(text, path);
  PriceFile prices;
  prices.path = path;
  for (const auto& [key, node] : doc) {
    const std::string name(key.str());
    if (name == "assumptions" && node.is_table()) {
      prices.assumptions = ReadAssumptions(*node.as_table(), path);
    } else if (name == "offering" && node.is_array_of_tables()) {
      prices.offerings = ReadNamedTables<Offering>(*node.as_array(), path, "offering", ReadOffering);
    } else if (name == "fabric" && node.is_array_of_tables()) {
      prices.fabrics = ReadNamedTables<Fabric>(*node.as_array(), path, "fabric", ReadFabric);
    } else {
      RejectTopLevel(name, node, path);
    }
  }
  if (prices.offerings.empty()) throw InputError(path + ": no [[offering]] tables: nothing to price");
  CheckFabricNames(prices);
  return prices;
}

const Fabric* PriceFile::FabricOf(const Offering& offering) const {
  if (offering.fabric.empty()) return nullptr;
  for (const Fabric& f : fabrics) {
    if (f.name == offering.fabric) return &f;
  }
  return nullptr;
}

PriceFile ReadPriceFile(const std::string& path) {
  PriceFile prices = ParsePriceFile(ReadTextFile(path, "price file"), path);
  for (Fabric& fabric : prices.fabrics) {
    if (fabric.intra.kind == IntraKind::kMeasured) ReadMeasuredIntraLink(fabric, path);
  }
  return prices;
}

}  // namespace tb
