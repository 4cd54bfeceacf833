// validate's policy files (TOML through toml_reader.h): tolerances, the straggler rule, history length, and
// thresholds per GPU model.
#include <set>

#include "console.h"
#include "error.h"
#include "prices.h"
#include "toml_reader.h"
#include "units.h"
#include "validate.h"

namespace tb {
namespace {

constexpr const char* kTopKeys = "tolerance, straggler, history, environment, derived, gpu";
constexpr const char* kOps[] = {"all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce",
                                "sendrecv"};
constexpr const char* kBands[] = {"small", "medium", "large"};

const toml::table* Section(FieldReader& top, const std::string& key) {
  const toml::node* node = top.Find(key);
  if (!node) return nullptr;
  if (!node->is_table()) top.Fail(NodeLine(*node), "[" + key + "] must be a table");
  return node->as_table();
}

// A fraction in [0, 1) (`positive`: > 0).
double Fraction(FieldReader& r, const std::string& key, double fallback, bool positive) {
  const std::optional<double> value = r.OptionalNumber(key);
  if (!value) return fallback;
  if (!(*value >= 0 && *value < 1) || (positive && !(*value > 0))) {
    r.Fail(r.LineOf(key), key + " must be a fraction in " + (positive ? "(0, 1)" : "[0, 1)") + ", got " +
                              Format("%g", *value));
  }
  return *value;
}

int Count(FieldReader& r, const std::string& key, int fallback) {
  if (!r.Find(key)) return fallback;
  const int64_t value = r.Integer(key);
  if (value < 1 || value > 100000) r.Fail(r.LineOf(key), key + " must be 1..100000, got " + std::to_string(value));
  return static_cast<int>(value);
}

void ReadTolerance(const toml::table& table, const std::string& file, ValidatePolicy& p) {
  FieldReader r(table, file, "[tolerance] ");
  p.warn = Fraction(r, "warn", p.warn, false);
  p.fail = Fraction(r, "fail", p.fail, true);
  p.share_warn = Fraction(r, "share_warn", p.share_warn, false);
  p.share_fail = Fraction(r, "share_fail", p.share_fail, true);
  if (p.warn > p.fail) r.Fail(r.LineOf("warn"), "warn must not exceed fail");
  if (p.share_warn > p.share_fail) r.Fail(r.LineOf("share_warn"), "share_warn must not exceed share_fail");
  r.RejectUnknown("warn, fail, share_warn, share_fail");
}

void ReadStraggler(const toml::table& table, const std::string& file, ValidatePolicy& p) {
  FieldReader r(table, file, "[straggler] ");
  if (r.OptionalNumber("z")) {
    p.straggler_z = r.Number("z", true);
    if (p.straggler_z > 1000) r.Fail(r.LineOf("z"), "z must be at most 1000");
  }
  if (r.OptionalNumber("floor")) {
    p.straggler_floor = r.Number("floor", false);
    if (p.straggler_floor > 1000) r.Fail(r.LineOf("floor"), "floor must be at most 1000 (100000%)");
  }
  if (r.OptionalNumber("floor_cpu")) {
    p.straggler_floor_cpu = r.Number("floor_cpu", false);
    if (p.straggler_floor_cpu > 1000) r.Fail(r.LineOf("floor_cpu"), "floor_cpu must be at most 1000 (100000%)");
  }
  r.RejectUnknown("z, floor, floor_cpu");
}

void ReadHistorySection(const toml::table& table, const std::string& file, ValidatePolicy& p) {
  FieldReader r(table, file, "[history] ");
  p.history_nights = Count(r, "nights", p.history_nights);
  p.history_min_nights = Count(r, "min_nights", p.history_min_nights);
  if (p.history_min_nights > p.history_nights) r.Fail(r.LineOf("min_nights"), "min_nights must not exceed nights");
  if (r.OptionalNumber("max_widening")) {
    p.history_max_widening = r.Number("max_widening", true);
    if (!(p.history_max_widening >= 1 && p.history_max_widening <= 10)) {
      r.Fail(r.LineOf("max_widening"), "max_widening must be 1..10 (times the fail band), got " +
                                           Format("%g", p.history_max_widening));
    }
  }
  r.RejectUnknown("nights, min_nights, max_widening");
}

void ReadEnvironment(const toml::table& table, const std::string& file, ValidatePolicy& p) {
  FieldReader r(table, file, "[environment] ");
  if (std::optional<std::string> drift = r.OptionalString("drift")) {
    if (*drift != "warn" && *drift != "fail") r.Fail(r.LineOf("drift"), "drift must be \"warn\" or \"fail\", got \"" + *drift + "\"");
    p.environment_drift_fails = *drift == "fail";
  }
  r.RejectUnknown("drift");
}

void ReadDerived(const toml::table& table, const std::string& file, ValidatePolicy& p) {
  FieldReader r(table, file, "[derived] ");
  if (r.OptionalNumber("nvlink_GBps")) p.nvlink_GBps = r.Number("nvlink_GBps", true);
  if (r.OptionalNumber("storage_write_GBps")) p.storage_write_GBps = r.Number("storage_write_GBps", true);
  if (r.OptionalNumber("storage_read_MBps")) p.storage_read_MBps = r.Number("storage_read_MBps", true);
  if (r.OptionalNumber("nic_GBps")) p.nic_GBps = r.Number("nic_GBps", true);
  p.derived_efficiency = Fraction(r, "efficiency", p.derived_efficiency, true);
  r.RejectUnknown("nvlink_GBps, storage_write_GBps, storage_read_MBps, nic_GBps, efficiency");
}

// [gpu."H100 SXM"] (or [gpu.cpu]): figure key = expected value.
void ReadGpuThresholds(const toml::table& table, const std::string& file, ValidatePolicy& p) {
  const std::vector<std::string> keys = PolicyFigureKeys();
  for (const auto& [name, node] : table) {
    const std::string model(name.str());
    if (!node.is_table()) throw InputError(At(file, NodeLine(node)) + "[gpu." + model + "] must be a table");
    const std::string canonical = model == "cpu" ? model : FindGpuModel(model, At(file, NodeLine(node)) + "[gpu]").name;
    FieldReader r(*node.as_table(), file, "[gpu." + model + "] ");
    for (const std::string& key : keys) {
      if (r.OptionalNumber(key)) p.gpu_thresholds[canonical][key] = r.Number(key, false);
    }
    r.RejectUnknown("figure keys such as train.tokens_per_s, collectives.all_reduce.busbw_GBps.large, "
                    "p2p.median_uni_GBps (results/README.md, \"Validation\")");
  }
}

}  // namespace

std::vector<std::string> PolicyFigureKeys() {
  std::vector<std::string> keys;
  for (const char* op : kOps) {
    for (const char* band : kBands) keys.push_back(std::string("collectives.") + op + ".busbw_GBps." + band);
  }
  for (const char* key : {"p2p.median_uni_GBps", "p2p.median_bidi_GBps", "train.tokens_per_s", "train.mfu_peak",
                          "train.comm_exposed_share", "train.data_wait_share", "train.checkpoint_stall_share",
                          "storage.loader_MBps", "storage.checkpoint_write_GBps", "storage.checkpoint_total_GBps"}) {
    keys.push_back(key);
  }
  return keys;
}

ValidatePolicy ParseValidatePolicy(const std::string& text, const std::string& file) {
  const toml::table doc = ParseToml(text, file);
  ValidatePolicy p;
  p.file = file;
  FieldReader top(doc, file, "");
  if (const toml::table* t = Section(top, "tolerance")) ReadTolerance(*t, file, p);
  if (const toml::table* t = Section(top, "straggler")) ReadStraggler(*t, file, p);
  if (const toml::table* t = Section(top, "history")) ReadHistorySection(*t, file, p);
  if (const toml::table* t = Section(top, "environment")) ReadEnvironment(*t, file, p);
  if (const toml::table* t = Section(top, "derived")) ReadDerived(*t, file, p);
  if (const toml::table* t = Section(top, "gpu")) ReadGpuThresholds(*t, file, p);
  top.RejectUnknown(kTopKeys);
  return p;
}

ValidatePolicy ReadValidatePolicy(const std::string& path) {
  return ParseValidatePolicy(ReadTextFile(path, "policy file"), path);
}

}  // namespace tb
