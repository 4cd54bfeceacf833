#include "gpu_health.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "device.h"
#include "error.h"
#include "gpu_health_nvml.h"
#include "mpi_util.h"
#include "nvml_library.h"

namespace tb {
namespace {

const double kNaN = std::nan("");
constexpr const char* kSampledSource = "NVML (libnvidia-ml.so.1)";

// `kept` becomes `value` when that is a number above it (or it has none yet).
void KeepMax(double& kept, double value) {
  if (std::isfinite(value) && (std::isnan(kept) || value > kept)) kept = value;
}

// The value at sorted position `position` of a histogram (value -> count).
double ValueAt(const std::map<double, int64_t>& counts, int64_t position) {
  for (const auto& [value, count] : counts) {
    if (position < count) return value;
    position -= count;
  }
  return kNaN;
}

template <typename Items>
std::string Join(const Items& items, const char* separator) {
  std::string text;
  for (const std::string& item : items) {
    if (!text.empty()) text += separator;
    text += item;
  }
  return text;
}

// Every field of a device record, by kind, in one order: what packing and unpacking walk.
struct FieldRefs {
  std::vector<std::string*> texts;
  std::vector<int64_t*> ints;
  std::vector<double*> reals;
};
FieldRefs Refs(GpuHealthDevice& d) {
  return {{&d.host, &d.pci_bus_id, &d.name, &d.uuid, &d.ranks, &d.clock_event_reasons, &d.nvml_errors},
          {&d.node, &d.index, &d.samples, &d.busy_samples},
          {&d.ecc_corrected_volatile, &d.ecc_uncorrected_volatile, &d.retired_pages, &d.retired_pages_pending,
           &d.remapped_rows_corrected, &d.remapped_rows_uncorrected, &d.remap_pending, &d.remap_failure,
           &d.pcie_gen_current, &d.pcie_width_current, &d.pcie_gen_max, &d.pcie_width_max, &d.sm_clock_min_MHz,
           &d.sm_clock_median_MHz, &d.sm_clock_max_MHz, &d.sm_clock_max_supported_MHz, &d.power_mean_W,
           &d.power_max_W, &d.power_limit_W, &d.temperature_max_C, &d.energy_J}};
}

// The shortest text that reads back as the same double ("nan" for NaN).
std::string RealText(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

template <typename T>
T ParseNumber(const std::string& text) {
  T value{};
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  if (result.ec != std::errc() || result.ptr != text.data() + text.size()) {
    throw std::logic_error("gpu health record: '" + text + "' is not a number");
  }
  return value;
}

}  // namespace

std::string ClockEventReasonNames(uint64_t reasons) {
  static const char* const kNames[] = {"gpu_idle",         "applications_clocks_setting", "sw_power_cap",
                                       "hw_slowdown",      "sync_boost",                  "sw_thermal_slowdown",
                                       "hw_thermal_slowdown", "hw_power_brake_slowdown",  "display_clock_setting"};
  constexpr int kNamed = sizeof(kNames) / sizeof(kNames[0]);
  std::string text;
  for (int bit = 0; bit < 64; ++bit) {
    if ((reasons >> bit & 1) == 0) continue;
    if (!text.empty()) text += ',';
    text += bit < kNamed ? std::string(kNames[bit]) : "bit" + std::to_string(bit);
  }
  return text.empty() ? "none" : text;
}

// ---- the accumulator --------------------------------------------------------------------------------------------

void GpuHealthAccumulator::AddCounters(const GpuSample& s) {
  KeepMax(kept_.ecc_corrected_volatile, s.ecc_corrected);
  KeepMax(kept_.ecc_uncorrected_volatile, s.ecc_uncorrected);
  KeepMax(kept_.retired_pages, s.retired_pages);
  KeepMax(kept_.retired_pages_pending, s.retired_pages_pending);
  KeepMax(kept_.remapped_rows_corrected, s.remapped_rows_corrected);
  KeepMax(kept_.remapped_rows_uncorrected, s.remapped_rows_uncorrected);
  KeepMax(kept_.remap_pending, s.remap_pending);
  KeepMax(kept_.remap_failure, s.remap_failure);
  KeepMax(kept_.power_max_W, s.power_W);
  KeepMax(kept_.power_limit_W, s.power_limit_W);
  KeepMax(kept_.temperature_max_C, s.temperature_C);
}

void GpuHealthAccumulator::Add(const GpuSample& s) {
  if (kept_.samples == 0) energy_first_J_ = s.energy_J;
  energy_last_J_ = s.energy_J;
  ++kept_.samples;
  AddCounters(s);
  // Idle links train down to save power: the link is judged by the samples taken while the GPU worked.
  if (s.clock_event_reasons && (*s.clock_event_reasons & kClockEventGpuIdle) == 0) {
    ++kept_.busy_samples;
    KeepMax(kept_.pcie_gen_current, s.pcie_gen);
    KeepMax(kept_.pcie_width_current, s.pcie_width);
  }
  if (s.clock_event_reasons) reasons_ = reasons_.value_or(0) | *s.clock_event_reasons;
  if (std::isfinite(s.sm_clock_MHz)) ++sm_clocks_MHz_[s.sm_clock_MHz];
  if (std::isfinite(s.power_W)) {
    power_sum_W_ += s.power_W;
    ++power_samples_;
  }
  errors_.insert(s.errors.begin(), s.errors.end());
}

void GpuHealthAccumulator::Fill(GpuHealthDevice& d) const {
  for (auto [to, from] : {std::pair{&d.ecc_corrected_volatile, kept_.ecc_corrected_volatile},
                          {&d.ecc_uncorrected_volatile, kept_.ecc_uncorrected_volatile},
                          {&d.retired_pages, kept_.retired_pages}, {&d.retired_pages_pending, kept_.retired_pages_pending},
                          {&d.remapped_rows_corrected, kept_.remapped_rows_corrected},
                          {&d.remapped_rows_uncorrected, kept_.remapped_rows_uncorrected},
                          {&d.remap_pending, kept_.remap_pending}, {&d.remap_failure, kept_.remap_failure},
                          {&d.pcie_gen_current, kept_.pcie_gen_current}, {&d.pcie_width_current, kept_.pcie_width_current},
                          {&d.power_max_W, kept_.power_max_W}, {&d.power_limit_W, kept_.power_limit_W},
                          {&d.temperature_max_C, kept_.temperature_max_C}}) {
    *to = from;
  }
  d.samples = kept_.samples;
  d.busy_samples = kept_.busy_samples;
  int64_t clocks = 0;
  for (const auto& entry : sm_clocks_MHz_) clocks += entry.second;
  d.sm_clock_min_MHz = clocks ? sm_clocks_MHz_.begin()->first : kNaN;
  d.sm_clock_max_MHz = clocks ? sm_clocks_MHz_.rbegin()->first : kNaN;
  d.sm_clock_median_MHz = clocks ? (ValueAt(sm_clocks_MHz_, (clocks - 1) / 2) + ValueAt(sm_clocks_MHz_, clocks / 2)) / 2
                                 : kNaN;
  d.power_mean_W = power_samples_ ? power_sum_W_ / static_cast<double>(power_samples_) : kNaN;
  d.energy_J = energy_last_J_ - energy_first_J_;  // NaN when either end is
  d.clock_event_reasons = reasons_ ? ClockEventReasonNames(*reasons_) : "not supported";
  d.nvml_errors = Join(errors_, "; ");
}

// ---- records as fields ------------------------------------------------------------------------------------------

void AppendGpuHealthFields(GpuHealthDevice device, std::vector<std::string>& fields) {
  const FieldRefs refs = Refs(device);
  for (const std::string* text : refs.texts) fields.push_back(*text);
  for (const int64_t* number : refs.ints) fields.push_back(std::to_string(*number));
  for (const double* real : refs.reals) fields.push_back(RealText(*real));
}

GpuHealthDevice ReadGpuHealthFields(const std::vector<std::string>& fields, size_t& at) {
  GpuHealthDevice device;
  const FieldRefs refs = Refs(device);
  if (at + refs.texts.size() + refs.ints.size() + refs.reals.size() > fields.size()) {
    throw std::logic_error("gpu health record: too few fields");
  }
  for (std::string* text : refs.texts) *text = fields[at++];
  for (int64_t* number : refs.ints) *number = ParseNumber<int64_t>(fields[at++]);
  for (double* real : refs.reals) {
    const std::string& text = fields[at++];
    *real = text == "nan" ? kNaN : ParseNumber<double>(text);
  }
  return device;
}

// ---- the sampling thread ----------------------------------------------------------------------------------------

// The sampling rank's GPUs: a sample of each at construction, every interval on a thread, and a last one at Stop.
class GpuHealthSampler::NodeSampler {
 public:
  explicit NodeSampler(double interval_s) : interval_s_(interval_s) {
    if (!gpus_.why().empty()) return;
    for (size_t i = 0; i < gpus_.size(); ++i) identities_.push_back(gpus_.Identity(i));
    accumulators_.resize(gpus_.size());
    SampleAll();
    thread_ = std::thread([this] { Loop(); });
  }
  ~NodeSampler() { Stop(); }

  const NvmlGpus& gpus() const { return gpus_; }
  const std::vector<GpuHealthDevice>& identities() const { return identities_; }
  std::string source() const { return gpus_.why().empty() ? kSampledSource : nvml::Unavailable(gpus_.why()); }
  int64_t rounds() const { return rounds_; }

  // Joins the thread, then takes the last sample; once.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stop_) return;
      stop_ = true;
    }
    wake_.notify_all();
    if (!thread_.joinable()) return;
    thread_.join();
    SampleAll();
  }

  // Each GPU's identity with its run's figures (after Stop).
  std::vector<GpuHealthDevice> Devices() const {
    std::vector<GpuHealthDevice> devices = identities_;
    for (size_t i = 0; i < devices.size(); ++i) accumulators_[i].Fill(devices[i]);
    return devices;
  }

 private:
  void SampleAll() {
    std::vector<GpuSample> samples;
    for (size_t i = 0; i < gpus_.size(); ++i) samples.push_back(gpus_.Sample(i));
    for (size_t i = 0; i < samples.size(); ++i) accumulators_[i].Add(samples[i]);
    ++rounds_;
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::duration<double>(interval_s_), [this] { return stop_; })) {
      lock.unlock();
      SampleAll();
      lock.lock();
    }
  }

  NvmlGpus gpus_;
  double interval_s_;
  std::vector<GpuHealthDevice> identities_;
  std::vector<GpuHealthAccumulator> accumulators_;  // the thread's until Stop has joined it
  int64_t rounds_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// ---- the sampler across ranks -----------------------------------------------------------------------------------

GpuHealthSampler::GpuHealthSampler(const RankContext& ctx, double interval_s) : ctx_(ctx), interval_s_(interval_s) {
  TB_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, ctx.world_rank, MPI_INFO_NULL, &node_comm_));
  node_gpus_ = GatherStrings(node_comm_, ctx.gpu_index >= 0 ? QueryGpu(ctx.gpu_index).pci_bus_id : "");
  for (const std::vector<int>& rank : GatherRecords(node_comm_, std::vector<int>{ctx.world_rank})) {
    node_ranks_.push_back(rank.at(0));
  }
  if (ctx.local_rank == 0) sampler_ = std::make_unique<NodeSampler>(interval_s);
}

GpuHealthSampler::~GpuHealthSampler() = default;

EnergyMark GpuHealthSampler::MarkEnergy() const {
  EnergyMark mark;
  if (!sampler_) return mark;
  for (size_t i = 0; i < sampler_->gpus().size(); ++i) mark.energy_J.push_back(sampler_->gpus().EnergyJ(i));
  return mark;
}

// The sampling rank: the energy of this node's GPUs that the ranks flagged in `in_point` used (every GPU of the
// node when none of its ranks is bound to one); 0 when no rank of the node is in the point.
double GpuHealthSampler::NodeEnergyJoules(const EnergySpan& span, const std::vector<int>& in_point) const {
  if (std::find(in_point.begin(), in_point.end(), 1) == in_point.end()) return 0;
  const size_t gpus = sampler_->identities().size();
  if (gpus == 0 || span.begin.energy_J.size() != gpus || span.end.energy_J.size() != gpus) return kNaN;
  const bool bound = std::any_of(node_gpus_.begin(), node_gpus_.end(), [](const std::string& g) { return !g.empty(); });
  std::set<size_t> used;
  for (size_t r = 0; r < node_gpus_.size(); ++r) {
    if (!in_point[r] || (bound && node_gpus_[r].empty())) continue;
    bool listed = false;
    for (size_t i = 0; i < gpus; ++i) {
      if (bound && !nvml::SamePciDevice(node_gpus_[r], sampler_->identities()[i].pci_bus_id)) continue;
      used.insert(i);
      listed = true;
    }
    if (!listed) return kNaN;  // a GPU NVML does not list: its energy is unknown
  }
  double joules = 0;
  for (size_t i : used) joules += span.end.energy_J[i] - span.begin.energy_J[i];
  return joules;
}

double GpuHealthSampler::EnergyJoules(const EnergySpan& span, bool in_point) {
  std::vector<int> flags;
  for (const std::vector<int>& flag : GatherRecords(node_comm_, std::vector<int>{in_point ? 1 : 0})) {
    flags.push_back(flag.at(0));
  }
  const double mine = sampler_ ? NodeEnergyJoules(span, flags) : 0;
  double total = 0;  // a NaN anywhere stays NaN in the sum
  TB_CHECK_MPI(MPI_Allreduce(&mine, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  return total;
}

// The sampling rank's node: host, node index, source, sampling rounds, GPU count, then each GPU's fields.
std::string GpuHealthSampler::PackNode() {
  sampler_->Stop();
  std::vector<GpuHealthDevice> devices = sampler_->Devices();
  std::vector<std::string> fields = {ctx_.host, std::to_string(ctx_.node_index), sampler_->source(),
                                     std::to_string(sampler_->rounds()), std::to_string(devices.size())};
  for (GpuHealthDevice& d : devices) {
    d.host = ctx_.host;
    d.node = ctx_.node_index;
    std::string ranks;
    for (size_t r = 0; r < node_gpus_.size(); ++r) {
      if (!nvml::SamePciDevice(node_gpus_[r], d.pci_bus_id)) continue;
      if (!ranks.empty()) ranks += ',';
      ranks += std::to_string(node_ranks_[r]);
    }
    d.ranks = ranks;
    AppendGpuHealthFields(d, fields);
  }
  return JoinFields(fields);
}

namespace {

// Rank 0: the nodes' packed results as one report.
GpuHealthReport CombineNodes(const std::vector<std::string>& nodes, double interval_s) {
  GpuHealthReport report;
  report.interval_s = interval_s;
  std::vector<std::string> sources;
  std::set<std::string> distinct;
  std::optional<int64_t> fewest;
  for (const std::string& packed : nodes) {
    if (packed.empty()) continue;  // not a sampling rank
    const std::vector<std::string> f = SplitFields(packed);
    sources.push_back("node " + f.at(1) + " (" + f.at(0) + "): " + f.at(2));
    distinct.insert(f.at(2));
    const int64_t rounds = ParseNumber<int64_t>(f.at(3));
    if (f.at(2) == kSampledSource) fewest = std::min(fewest.value_or(rounds), rounds);
    size_t at = 5;
    for (int64_t i = 0; i < ParseNumber<int64_t>(f.at(4)); ++i) report.devices.push_back(ReadGpuHealthFields(f, at));
  }
  report.samples = fewest.value_or(0);
  report.source = distinct.size() == 1 ? *distinct.begin() : Join(sources, "; ");
  return report;
}

}  // namespace

GpuHealthReport GpuHealthSampler::Finish() {
  const std::vector<std::string> nodes = GatherStrings(MPI_COMM_WORLD, sampler_ ? PackNode() : "");
  TB_CHECK_MPI(MPI_Comm_free(&node_comm_));
  return ctx_.world_rank == 0 ? CombineNodes(nodes, interval_s_) : GpuHealthReport{};
}

GpuHealthReport GpuHealthSampler::FinishThisNode() {
  GpuHealthReport report = CombineNodes({sampler_ ? PackNode() : ""}, interval_s_);
  if (ctx_.node_count > 1) {
    report.source += "; only node " + std::to_string(ctx_.node_index) + "'s GPUs: the run failed before the other " +
                     std::to_string(ctx_.node_count - 1) + " nodes' were gathered";
  }
  return report;
}

}  // namespace tb
