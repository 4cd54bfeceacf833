#include "gpu_health_nvml.h"

#include <cmath>

namespace tb {
namespace {

using namespace tb::nvml;

// One device's reads: a value where NVML succeeded, NaN where it did not; failures other than "not supported" (or
// an entry point this library lacks) are kept in `errors`, named by the entry point.
class Reader {
 public:
  Reader(const Library& nvml, std::vector<std::string>* errors) : nvml_(nvml), errors_(errors) {}

  // Whether `result` of `entry` gave a value.
  bool Succeeded(const EntryPoint& entry, nvmlReturn_t result) const {
    if (result == NVML_SUCCESS) return true;
    if (result != NVML_ERROR_NOT_SUPPORTED && result != NVML_ERROR_FUNCTION_NOT_FOUND && errors_ != nullptr) {
      errors_->push_back(std::string(entry.name) + ": " + nvml_.ErrorText(result));
    }
    return false;
  }

  // function(args..., &value) x scale, or NaN.
  template <typename Value, typename... Params, typename... Args>
  double Read(const Function<Params...>& function, double scale, Args... args) const {
    Value value{};
    const nvmlReturn_t result = function(args..., &value);
    return Succeeded(function, result) ? static_cast<double>(value) * scale : std::nan("");
  }

  // A text query into a buffer of `size`; "not supported" when NVML gives none.
  std::string Text(const Function<nvmlDevice_t, char*, unsigned int>& function, nvmlDevice_t device,
                   unsigned int size) const {
    std::vector<char> buffer(size + 1, '\0');
    return Succeeded(function, function(device, buffer.data(), size)) ? std::string(buffer.data()) : "not supported";
  }

  const Library& nvml() const { return nvml_; }

 private:
  const Library& nvml_;
  std::vector<std::string>* errors_;
};

// Both causes' retired pages; a count query (no buffer) answers NVML_ERROR_INSUFFICIENT_SIZE when there are any.
void ReadRetiredPages(const Reader& r, nvmlDevice_t device, GpuSample& s) {
  const Library& nvml = r.nvml();
  s.retired_pages_pending = r.Read<nvmlEnableState_t>(nvml.nvmlDeviceGetRetiredPagesPendingStatus, 1, device);
  double total = 0;
  for (nvmlPageRetirementCause_t cause : {NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                                          NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR}) {
    unsigned int count = 0;
    const nvmlReturn_t result = nvml.nvmlDeviceGetRetiredPages_v2(device, cause, &count, nullptr, nullptr);
    if (result != NVML_ERROR_INSUFFICIENT_SIZE && !r.Succeeded(nvml.nvmlDeviceGetRetiredPages_v2, result)) return;
    total += count;
  }
  s.retired_pages = total;
}

void ReadRemappedRows(const Reader& r, nvmlDevice_t device, GpuSample& s) {
  const Library& nvml = r.nvml();
  unsigned int corrected = 0, uncorrected = 0, pending = 0, failure = 0;
  const nvmlReturn_t result = nvml.nvmlDeviceGetRemappedRows(device, &corrected, &uncorrected, &pending, &failure);
  if (!r.Succeeded(nvml.nvmlDeviceGetRemappedRows, result)) return;
  s.remapped_rows_corrected = corrected;
  s.remapped_rows_uncorrected = uncorrected;
  s.remap_pending = pending;
  s.remap_failure = failure;
}

// The clock event reasons, through the older name where the library lacks the newer one.
std::optional<uint64_t> ReadClockEventReasons(const Reader& r, nvmlDevice_t device) {
  const Library& nvml = r.nvml();
  unsigned long long reasons = 0;
  nvmlReturn_t result = nvml.nvmlDeviceGetCurrentClocksEventReasons(device, &reasons);
  if (result == NVML_ERROR_FUNCTION_NOT_FOUND) {
    result = nvml.nvmlDeviceGetCurrentClocksThrottleReasons(device, &reasons);
    if (!r.Succeeded(nvml.nvmlDeviceGetCurrentClocksThrottleReasons, result)) return std::nullopt;
  } else if (!r.Succeeded(nvml.nvmlDeviceGetCurrentClocksEventReasons, result)) {
    return std::nullopt;
  }
  return static_cast<uint64_t>(reasons);
}

}  // namespace

NvmlGpus::NvmlGpus() : nvml_(Library::Get()) {
  if (!nvml_.ok()) {
    why_ = nvml_.why();
    return;
  }
  unsigned int count = 0;
  const nvmlReturn_t result = nvml_.nvmlDeviceGetCount_v2(&count);
  if (result != NVML_SUCCESS) {
    why_ = "nvmlDeviceGetCount_v2 failed: " + nvml_.ErrorText(result);
    return;
  }
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t device = nullptr;
    const nvmlReturn_t handle = nvml_.nvmlDeviceGetHandleByIndex_v2(i, &device);
    if (handle != NVML_SUCCESS) {
      why_ = "nvmlDeviceGetHandleByIndex_v2(" + std::to_string(i) + ") failed: " + nvml_.ErrorText(handle);
      devices_.clear();
      return;
    }
    devices_.push_back(device);
  }
  if (devices_.empty()) why_ = "NVML lists no GPU on this host";
}

GpuHealthDevice NvmlGpus::Identity(size_t gpu) const {
  const nvmlDevice_t device = devices_.at(gpu);
  const Reader r(nvml_, nullptr);  // a failure shows as "not supported" here and as an error in the samples
  GpuHealthDevice d;
  d.index = static_cast<int64_t>(gpu);
  d.name = r.Text(nvml_.nvmlDeviceGetName, device, NVML_DEVICE_NAME_V2_BUFFER_SIZE);
  d.uuid = r.Text(nvml_.nvmlDeviceGetUUID, device, NVML_DEVICE_UUID_V2_BUFFER_SIZE);
  nvmlPciInfo_t pci = {};
  const bool has_pci = r.Succeeded(nvml_.nvmlDeviceGetPciInfo_v3, nvml_.nvmlDeviceGetPciInfo_v3(device, &pci));
  pci.busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE - 1] = '\0';
  d.pci_bus_id = has_pci ? std::string(pci.busId) : "not supported";
  d.pcie_gen_max = r.Read<unsigned int>(nvml_.nvmlDeviceGetMaxPcieLinkGeneration, 1, device);
  d.pcie_width_max = r.Read<unsigned int>(nvml_.nvmlDeviceGetMaxPcieLinkWidth, 1, device);
  d.sm_clock_max_supported_MHz = r.Read<unsigned int>(nvml_.nvmlDeviceGetMaxClockInfo, 1, device, NVML_CLOCK_SM);
  return d;
}

GpuSample NvmlGpus::Sample(size_t gpu) const {
  const nvmlDevice_t device = devices_.at(gpu);
  GpuSample s;
  const Reader r(nvml_, &s.errors);
  const Library& n = nvml_;
  s.ecc_corrected = r.Read<unsigned long long>(n.nvmlDeviceGetTotalEccErrors, 1, device,
                                               NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC);
  s.ecc_uncorrected = r.Read<unsigned long long>(n.nvmlDeviceGetTotalEccErrors, 1, device,
                                                 NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC);
  ReadRetiredPages(r, device, s);
  ReadRemappedRows(r, device, s);
  s.pcie_gen = r.Read<unsigned int>(n.nvmlDeviceGetCurrPcieLinkGeneration, 1, device);
  s.pcie_width = r.Read<unsigned int>(n.nvmlDeviceGetCurrPcieLinkWidth, 1, device);
  s.sm_clock_MHz = r.Read<unsigned int>(n.nvmlDeviceGetClockInfo, 1, device, NVML_CLOCK_SM);
  s.clock_event_reasons = ReadClockEventReasons(r, device);
  s.power_W = r.Read<unsigned int>(n.nvmlDeviceGetPowerUsage, 1e-3, device);  // mW
  s.power_limit_W = r.Read<unsigned int>(n.nvmlDeviceGetEnforcedPowerLimit, 1e-3, device);
  s.temperature_C = r.Read<unsigned int>(n.nvmlDeviceGetTemperature, 1, device, NVML_TEMPERATURE_GPU);
  s.energy_J = r.Read<unsigned long long>(n.nvmlDeviceGetTotalEnergyConsumption, 1e-3, device);  // mJ
  return s;
}

double NvmlGpus::EnergyJ(size_t gpu) const {
  const Reader r(nvml_, nullptr);
  return r.Read<unsigned long long>(nvml_.nvmlDeviceGetTotalEnergyConsumption, 1e-3, devices_.at(gpu));
}

}  // namespace tb
