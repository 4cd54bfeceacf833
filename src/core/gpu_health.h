// GPU health from NVML over a run, in every build: on each node the lowest local rank opens NVML (nvml_library.h)
// and, when it lists GPUs, reads every GPU of its node when the measurement starts, every interval on a background
// thread while it runs, and at the end; the nodes' results are gathered to rank 0. A figure NVML does not give (an
// entry point this driver's library lacks, or NVML_ERROR_NOT_SUPPORTED) is NaN, or "not supported" for text — never
// 0. The sampling thread only calls NVML (the process runs MPI_THREAD_SINGLE). Definitions: results/README.md
// ("gpu_health").
#pragma once

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "context.h"

namespace tb {

inline constexpr double kGpuHealthNaN = NAN;

// NVML's clock event ("throttle") reasons (nvmlClocksEventReason*), by bit.
inline constexpr uint64_t kClockEventGpuIdle = 0x1;
// The names of the reasons set in `reasons`, comma-separated, in bit order ("sw_power_cap,hw_power_brake_slowdown";
// "bit12" for a bit NVML had not named when this was written); "none" for 0.
std::string ClockEventReasonNames(uint64_t reasons);

// One reading of one GPU; NaN where NVML gave nothing.
struct GpuSample {
  double ecc_corrected = kGpuHealthNaN;    // volatile counts (since the driver loaded)
  double ecc_uncorrected = kGpuHealthNaN;
  double retired_pages = kGpuHealthNaN;    // both causes (multiple single-bit, double-bit)
  double retired_pages_pending = kGpuHealthNaN;  // 1: a retirement waits for the next driver load
  double remapped_rows_corrected = kGpuHealthNaN;
  double remapped_rows_uncorrected = kGpuHealthNaN;
  double remap_pending = kGpuHealthNaN;    // 1: a remap waits for the next reset
  double remap_failure = kGpuHealthNaN;    // 1: a remap failed
  double pcie_gen = kGpuHealthNaN;         // the link's current generation and width
  double pcie_width = kGpuHealthNaN;
  double sm_clock_MHz = kGpuHealthNaN;
  double power_W = kGpuHealthNaN;
  double power_limit_W = kGpuHealthNaN;    // enforced
  double temperature_C = kGpuHealthNaN;    // the GPU sensor
  double energy_J = kGpuHealthNaN;         // the driver's energy counter (since it loaded)
  std::optional<uint64_t> clock_event_reasons;
  std::vector<std::string> errors;         // "nvmlDeviceGetPowerUsage: GPU is lost": failures other than "not supported"
};

// One GPU over a run, as the report's gpu_health/devices table holds it.
struct GpuHealthDevice {
  std::string host;
  int64_t node = 0;
  int64_t index = 0;                 // NVML's index on its node
  std::string pci_bus_id, name, uuid;
  std::string ranks;                 // the ranks bound to it, comma-separated; "" when none
  std::string clock_event_reasons = "not supported";  // the union over samples (ClockEventReasonNames)
  std::string nvml_errors;           // distinct failures other than "not supported", "; "-separated
  int64_t samples = 0;
  int64_t busy_samples = 0;          // samples whose clock event reasons lack gpu_idle
  double ecc_corrected_volatile = kGpuHealthNaN, ecc_uncorrected_volatile = kGpuHealthNaN;  // the highest seen
  double retired_pages = kGpuHealthNaN, retired_pages_pending = kGpuHealthNaN;
  double remapped_rows_corrected = kGpuHealthNaN, remapped_rows_uncorrected = kGpuHealthNaN;
  double remap_pending = kGpuHealthNaN, remap_failure = kGpuHealthNaN;
  double pcie_gen_current = kGpuHealthNaN, pcie_width_current = kGpuHealthNaN;  // the highest current over busy samples
  double pcie_gen_max = kGpuHealthNaN, pcie_width_max = kGpuHealthNaN;
  double sm_clock_min_MHz = kGpuHealthNaN, sm_clock_median_MHz = kGpuHealthNaN, sm_clock_max_MHz = kGpuHealthNaN;
  double sm_clock_max_supported_MHz = kGpuHealthNaN;
  double power_mean_W = kGpuHealthNaN, power_max_W = kGpuHealthNaN, power_limit_W = kGpuHealthNaN;
  double temperature_max_C = kGpuHealthNaN;
  double energy_J = kGpuHealthNaN;   // the counter at the last sample minus at the first
};

// A device's samples summarised as they arrive (a run may last days: nothing grows with its length but the set of
// distinct SM clocks).
class GpuHealthAccumulator {
 public:
  void Add(const GpuSample& sample);
  // The run's figures into `device` (its identity and maxima are the caller's).
  void Fill(GpuHealthDevice& device) const;

 private:
  void AddCounters(const GpuSample& sample);

  GpuHealthDevice kept_;                       // the highest-seen and busy figures, as they will be reported
  std::map<double, int64_t> sm_clocks_MHz_;    // value -> samples
  double power_sum_W_ = 0;
  int64_t power_samples_ = 0;
  double energy_first_J_ = kGpuHealthNaN, energy_last_J_ = kGpuHealthNaN;
  std::optional<uint64_t> reasons_;
  std::set<std::string> errors_;
};

// Every node's GPUs, on rank 0.
struct GpuHealthReport {
  // "NVML (libnvidia-ml.so.1)" when every node sampled; "NVML not available: <why>" when none did (each node's
  // reason, "node N (host): ...", where they differ); a mix names each node that did not.
  std::string source;
  double interval_s = 1;
  int64_t samples = 0;  // sampling rounds (start, every interval, end) of the node that took the fewest
  std::vector<GpuHealthDevice> devices;
};

// One GPU's record as text fields and back, for gathering (JoinFields): appended to `fields`; read from
// fields[at...], `at` moved past them. Numbers keep every bit (NaN too).
void AppendGpuHealthFields(GpuHealthDevice device, std::vector<std::string>& fields);
GpuHealthDevice ReadGpuHealthFields(const std::vector<std::string>& fields, size_t& at);

// The energy counters of this node's GPUs at one moment (J, NaN where unread); empty off the sampling rank.
struct EnergyMark {
  std::vector<double> energy_J;
};
struct EnergySpan {
  EnergyMark begin, end;
};

class GpuHealthSampler {
 public:
  // Collective over MPI_COMM_WORLD. `interval_s`: seconds between background samples.
  explicit GpuHealthSampler(const RankContext& ctx, double interval_s = 1.0);
  ~GpuHealthSampler();
  GpuHealthSampler(const GpuHealthSampler&) = delete;
  GpuHealthSampler& operator=(const GpuHealthSampler&) = delete;

  // This node's GPUs' energy counters now (the sampling rank; an empty mark elsewhere).
  EnergyMark MarkEnergy() const;
  // Collective over MPI_COMM_WORLD: the energy (J) between the span's marks of the GPUs of the ranks with
  // `in_point` — the GPUs they are bound to or, on a node where no rank is bound to one (the CPU backend), every
  // GPU of that node; NaN when any of those GPUs gave no energy or such a node has no NVML. The same on every rank.
  double EnergyJoules(const EnergySpan& span, bool in_point);
  // Collective: stops sampling (after a last sample) and gathers every node's GPUs to rank 0; an empty report
  // elsewhere. Call once.
  GpuHealthReport Finish();
  // Rank 0 alone, for a run that failed (the other ranks may never arrive): stops sampling and returns this node's
  // GPUs, the source saying that the other nodes are missing.
  GpuHealthReport FinishThisNode();

 private:
  class NodeSampler;
  std::string PackNode();
  double NodeEnergyJoules(const EnergySpan& span, const std::vector<int>& in_point) const;

  RankContext ctx_;
  double interval_s_;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
  std::vector<std::string> node_gpus_;  // sampling rank: the PCI bus id of each node rank's GPU ("" none)
  std::vector<int> node_ranks_;         // sampling rank: their world ranks
  std::unique_ptr<NodeSampler> sampler_;  // the sampling rank only
};

}  // namespace tb
