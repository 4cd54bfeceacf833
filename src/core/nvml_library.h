// NVML, the driver's management library, loaded at run time (dlopen of libnvidia-ml.so.1) on first use, in every
// build: trainbench needs neither NVML's header nor its library to build, and runs where the driver lacks it.
// Internal to core (nvml.cc's link types, gpu_health.cc's sampler); declares only what they use, under NVML's own
// names (NVML's stable C API, nvml.h).
#pragma once

#include <string>
#include <vector>

namespace tb::nvml {

using nvmlReturn_t = int;  // a C enum
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;

using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEnableState_t = int;  // a C enum
constexpr nvmlEnableState_t NVML_FEATURE_ENABLED = 1;
using nvmlGpuTopologyLevel_t = int;  // a C enum: 0, 10, ..., 50
using nvmlMemoryErrorType_t = int;
constexpr nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
constexpr nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
using nvmlEccCounterType_t = int;
constexpr nvmlEccCounterType_t NVML_VOLATILE_ECC = 0;
using nvmlPageRetirementCause_t = int;
constexpr nvmlPageRetirementCause_t NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0;
constexpr nvmlPageRetirementCause_t NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1;
using nvmlClockType_t = int;
constexpr nvmlClockType_t NVML_CLOCK_SM = 1;
using nvmlTemperatureSensors_t = int;
constexpr nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU = 0;

constexpr unsigned NVML_NVLINK_MAX_LINKS = 18;
constexpr int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
constexpr int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;
constexpr int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
constexpr int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;

// nvmlPciInfo_t as the _v2 link query and nvmlDeviceGetPciInfo_v3 fill it (68 bytes).
struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

// One entry point of the library: its name and address (null when this driver's library lacks it, an older one).
struct EntryPoint {
  explicit EntryPoint(const char* symbol) : name(symbol) {}
  const char* name;
  void* address = nullptr;
};

// An entry point returning nvmlReturn_t; calling a missing one returns NVML_ERROR_FUNCTION_NOT_FOUND, so that
// every caller handles it as it handles "not supported".
template <typename... Params>
struct Function : EntryPoint {
  using EntryPoint::EntryPoint;
  nvmlReturn_t operator()(Params... params) const {
    if (address == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
    return reinterpret_cast<nvmlReturn_t (*)(Params...)>(address)(params...);
  }
};

// The library, initialised once (nvmlInit_v2) and never unloaded: NVML may keep threads of its own. Every entry
// point but nvmlInit_v2 and nvmlShutdown is optional. Thread-safe after Get() (NVML itself is).
class Library {
 public:
  // Loads and initialises NVML on the first call (a function-local static); later calls reuse it.
  static const Library& Get();

  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }  // why NVML is not usable; "" when it is
  // NVML's words for `result` (nvmlErrorString), or "NVML error N".
  std::string ErrorText(nvmlReturn_t result) const;

  // Link types (nvml.cc).
  Function<const char*, nvmlDevice_t*> nvmlDeviceGetHandleByPciBusId_v2{"nvmlDeviceGetHandleByPciBusId_v2"};
  Function<nvmlDevice_t, unsigned int, nvmlEnableState_t*> nvmlDeviceGetNvLinkState{"nvmlDeviceGetNvLinkState"};
  Function<nvmlDevice_t, unsigned int, nvmlPciInfo_t*> nvmlDeviceGetNvLinkRemotePciInfo_v2{
      "nvmlDeviceGetNvLinkRemotePciInfo_v2"};
  Function<nvmlDevice_t, nvmlDevice_t, nvmlGpuTopologyLevel_t*> nvmlDeviceGetTopologyCommonAncestor{
      "nvmlDeviceGetTopologyCommonAncestor"};
  // Devices and their identity (gpu_health.cc).
  Function<unsigned int*> nvmlDeviceGetCount_v2{"nvmlDeviceGetCount_v2"};
  Function<unsigned int, nvmlDevice_t*> nvmlDeviceGetHandleByIndex_v2{"nvmlDeviceGetHandleByIndex_v2"};
  Function<nvmlDevice_t, char*, unsigned int> nvmlDeviceGetName{"nvmlDeviceGetName"};
  Function<nvmlDevice_t, char*, unsigned int> nvmlDeviceGetUUID{"nvmlDeviceGetUUID"};
  Function<nvmlDevice_t, nvmlPciInfo_t*> nvmlDeviceGetPciInfo_v3{"nvmlDeviceGetPciInfo_v3"};
  // Memory errors and repairs.
  Function<nvmlDevice_t, nvmlMemoryErrorType_t, nvmlEccCounterType_t, unsigned long long*>
      nvmlDeviceGetTotalEccErrors{"nvmlDeviceGetTotalEccErrors"};
  Function<nvmlDevice_t, nvmlPageRetirementCause_t, unsigned int*, unsigned long long*, unsigned long long*>
      nvmlDeviceGetRetiredPages_v2{"nvmlDeviceGetRetiredPages_v2"};
  Function<nvmlDevice_t, nvmlEnableState_t*> nvmlDeviceGetRetiredPagesPendingStatus{
      "nvmlDeviceGetRetiredPagesPendingStatus"};
  Function<nvmlDevice_t, unsigned int*, unsigned int*, unsigned int*, unsigned int*> nvmlDeviceGetRemappedRows{
      "nvmlDeviceGetRemappedRows"};
  // PCIe link, clocks, power, temperature, energy.
  Function<nvmlDevice_t, unsigned int*> nvmlDeviceGetCurrPcieLinkGeneration{"nvmlDeviceGetCurrPcieLinkGeneration"};
  Function<nvmlDevice_t, unsigned int*> nvmlDeviceGetCurrPcieLinkWidth{"nvmlDeviceGetCurrPcieLinkWidth"};
  Function<nvmlDevice_t, unsigned int*> nvmlDeviceGetMaxPcieLinkGeneration{"nvmlDeviceGetMaxPcieLinkGeneration"};
  Function<nvmlDevice_t, unsigned int*> nvmlDeviceGetMaxPcieLinkWidth{"nvmlDeviceGetMaxPcieLinkWidth"};
  Function<nvmlDevice_t, nvmlClockType_t, unsigned int*> nvmlDeviceGetClockInfo{"nvmlDeviceGetClockInfo"};
  Function<nvmlDevice_t, nvmlClockType_t, unsigned int*> nvmlDeviceGetMaxClockInfo{"nvmlDeviceGetMaxClockInfo"};
  Function<nvmlDevice_t, unsigned long long*> nvmlDeviceGetCurrentClocksEventReasons{
      "nvmlDeviceGetCurrentClocksEventReasons"};
  Function<nvmlDevice_t, unsigned long long*> nvmlDeviceGetCurrentClocksThrottleReasons{
      "nvmlDeviceGetCurrentClocksThrottleReasons"};  // the older name of the same query
  Function<nvmlDevice_t, unsigned int*> nvmlDeviceGetPowerUsage{"nvmlDeviceGetPowerUsage"};
  Function<nvmlDevice_t, unsigned int*> nvmlDeviceGetEnforcedPowerLimit{"nvmlDeviceGetEnforcedPowerLimit"};
  Function<nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int*> nvmlDeviceGetTemperature{"nvmlDeviceGetTemperature"};
  Function<nvmlDevice_t, unsigned long long*> nvmlDeviceGetTotalEnergyConsumption{
      "nvmlDeviceGetTotalEnergyConsumption"};

 private:
  Library();
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  std::vector<EntryPoint*> Optional();
  bool Open();

  void* handle_ = nullptr;
  bool initialized_ = false;
  std::string why_;
  nvmlReturn_t (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
};

// "NVML not available: <why>": the one wording of NVML's absence, for link types and GPU health alike.
std::string Unavailable(const std::string& why);

// A PCI address, compared by number: CUDA writes "0000:1b:00.0", NVML "00000000:1B:00.0".
struct PciAddress {
  unsigned int domain = 0;
  unsigned int bus = 0;
  unsigned int device = 0;
  std::string text;  // as written, for looking the device up
  bool operator==(const PciAddress& other) const {
    return domain == other.domain && bus == other.bus && device == other.device;
  }
};
// False when `text` is not "domain:bus:device.function" in hexadecimal.
bool ParsePciBusId(const std::string& text, PciAddress& address);
// Whether two PCI bus ids name the same device; false when either cannot be read.
bool SamePciDevice(const std::string& a, const std::string& b);

}  // namespace tb::nvml
