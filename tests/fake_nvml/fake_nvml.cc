// A stand-in for the driver's libnvidia-ml.so.1, for testing trainbench's NVML use on machines without a GPU: the
// entry points trainbench calls, answering from a text file named by $TRAINBENCH_FAKE_NVML (read at nvmlInit_v2).
// Built twice by tests/CMakeLists.txt: as today's driver, and with FAKE_NVML_OLD_DRIVER as an older one that lacks
// nvmlDeviceGetCurrentClocksEventReasons (it has the older ...ThrottleReasons), nvmlDeviceGetRemappedRows and
// nvmlDeviceGetTotalEnergyConsumption.
//
// The file: '#' comments; `init_error N` makes nvmlInit_v2 return N; each `device` line starts a GPU, followed by
// `key value` lines. A key not given makes its query answer NVML_ERROR_NOT_SUPPORTED (3). Keys:
//   name, uuid, pci_bus_id                                    text
//   ecc_corrected, ecc_uncorrected                            volatile counts
//   retired_pages_single_bit, retired_pages_double_bit, retired_pages_pending
//   remapped_rows "corrected uncorrected pending failure"
//   pcie_gen, pcie_gen_max, pcie_width, pcie_width_max, sm_clock_MHz, sm_clock_max_MHz
//   clock_event_reasons                                       a decimal bit mask (128 = hw_power_brake_slowdown)
//   power_mW, power_limit_mW, temperature_C
//   energy_mJ, energy_mJ_per_s                                the counter at nvmlInit_v2, and its growth per second
//   fail FUNCTION CODE                                        FUNCTION returns CODE (e.g. 15, GPU is lost)
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Return = int;
constexpr Return kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotSupported = 3, kInsufficientSize = 7,
                 kUnknown = 999;

struct Device {
  std::map<std::string, std::string> values;
  std::map<std::string, int> failures;  // entry point -> its return code
};

struct State {
  bool initialized = false;
  std::vector<Device> devices;
  std::chrono::steady_clock::time_point start;
};
State state;

Return Load(const char* path) {
  std::ifstream in(path);
  if (!in) return kUnknown;  // the test named a file that is not there
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key, rest;
    if (!(words >> key) || key[0] == '#') continue;
    std::getline(words >> std::ws, rest);
    if (key == "init_error") return std::atoi(rest.c_str());
    if (key == "device") {
      state.devices.emplace_back();
    } else if (!state.devices.empty() && key == "fail") {
      std::istringstream f(rest);
      std::string function;
      int code = 0;
      f >> function >> code;
      state.devices.back().failures[function] = code;
    } else if (!state.devices.empty()) {
      state.devices.back().values[key] = rest;
    }
  }
  return kSuccess;
}

Device* Find(void* handle) {
  const auto index = reinterpret_cast<uintptr_t>(handle) - 1;  // handles are index + 1, never null
  return state.initialized && index < state.devices.size() ? &state.devices[index] : nullptr;
}

// The code a query of `function` on `device` answers before its value: not initialised, a bad handle, a failure
// the file asks for, or kNotSupported when the file lacks `key`.
Return Check(void* handle, const char* function, const char* key) {
  const Device* d = Find(handle);
  if (!state.initialized) return kUninitialized;
  if (d == nullptr) return kInvalidArgument;
  if (auto f = d->failures.find(function); f != d->failures.end()) return f->second;
  return key == nullptr || d->values.count(key) ? kSuccess : kNotSupported;
}

template <typename T>
Return Number(void* handle, const char* function, const char* key, T* out) {
  const Return rc = Check(handle, function, key);
  if (rc == kSuccess) *out = static_cast<T>(std::strtoull(Find(handle)->values.at(key).c_str(), nullptr, 10));
  return rc;
}

Return Text(void* handle, const char* function, const char* key, char* out, unsigned int length) {
  const Return rc = Check(handle, function, key);
  if (rc != kSuccess) return rc;
  const std::string& value = Find(handle)->values.at(key);
  if (value.size() + 1 > length) return kInsufficientSize;
  std::memcpy(out, value.c_str(), value.size() + 1);
  return kSuccess;
}

}  // namespace

extern "C" {

// The nvmlPciInfo_t layout (68 bytes): busIdLegacy[16], five unsigned ints, busId[32].
struct FakePciInfo {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

__attribute__((visibility("default"))) Return nvmlInit_v2() {
  const char* path = std::getenv("TRAINBENCH_FAKE_NVML");
  if (path == nullptr) return 9;  // NVML_ERROR_DRIVER_NOT_LOADED
  state = State{};
  const Return rc = Load(path);
  state.initialized = rc == kSuccess;
  state.start = std::chrono::steady_clock::now();
  return rc;
}

__attribute__((visibility("default"))) Return nvmlShutdown() {
  state.initialized = false;
  return kSuccess;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(Return rc) {
  switch (rc) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
  }
}

__attribute__((visibility("default"))) Return nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!state.initialized) return kUninitialized;
  *count = static_cast<unsigned int>(state.devices.size());
  return kSuccess;
}

__attribute__((visibility("default"))) Return nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (!state.initialized) return kUninitialized;
  if (index >= state.devices.size()) return kInvalidArgument;
  *device = reinterpret_cast<void*>(uintptr_t{index} + 1);
  return kSuccess;
}

__attribute__((visibility("default"))) Return nvmlDeviceGetName(void* d, char* name, unsigned int length) {
  return Text(d, "nvmlDeviceGetName", "name", name, length);
}

__attribute__((visibility("default"))) Return nvmlDeviceGetUUID(void* d, char* uuid, unsigned int length) {
  return Text(d, "nvmlDeviceGetUUID", "uuid", uuid, length);
}

__attribute__((visibility("default"))) Return nvmlDeviceGetPciInfo_v3(void* d, FakePciInfo* pci) {
  const Return rc = Check(d, "nvmlDeviceGetPciInfo_v3", "pci_bus_id");
  if (rc != kSuccess) return rc;
  *pci = FakePciInfo{};
  std::strncpy(pci->busId, Find(d)->values.at("pci_bus_id").c_str(), sizeof(pci->busId) - 1);
  return kSuccess;
}

__attribute__((visibility("default"))) Return nvmlDeviceGetTotalEccErrors(void* d, int type, int counter,
                                                                          unsigned long long* count) {
  if (counter != 0) return kNotSupported;  // only the volatile counts are in the file
  return Number(d, "nvmlDeviceGetTotalEccErrors", type == 0 ? "ecc_corrected" : "ecc_uncorrected", count);
}

__attribute__((visibility("default"))) Return nvmlDeviceGetRetiredPages_v2(void* d, int cause, unsigned int* count,
                                                                           unsigned long long* addresses,
                                                                           unsigned long long*) {
  unsigned int pages = 0;
  const Return rc = Number(d, "nvmlDeviceGetRetiredPages_v2",
                           cause == 0 ? "retired_pages_single_bit" : "retired_pages_double_bit", &pages);
  if (rc != kSuccess) return rc;
  const bool fits = *count >= pages;
  if (fits && addresses != nullptr) std::memset(addresses, 0, pages * sizeof(*addresses));
  *count = pages;
  return fits ? kSuccess : kInsufficientSize;
}

__attribute__((visibility("default"))) Return nvmlDeviceGetRetiredPagesPendingStatus(void* d, int* pending) {
  return Number(d, "nvmlDeviceGetRetiredPagesPendingStatus", "retired_pages_pending", pending);
}

#ifndef FAKE_NVML_OLD_DRIVER
__attribute__((visibility("default"))) Return nvmlDeviceGetRemappedRows(void* d, unsigned int* corrected,
                                                                        unsigned int* uncorrected,
                                                                        unsigned int* pending, unsigned int* failure) {
  const Return rc = Check(d, "nvmlDeviceGetRemappedRows", "remapped_rows");
  if (rc != kSuccess) return rc;
  std::istringstream in(Find(d)->values.at("remapped_rows"));
  in >> *corrected >> *uncorrected >> *pending >> *failure;
  return kSuccess;
}
#endif

__attribute__((visibility("default"))) Return nvmlDeviceGetCurrPcieLinkGeneration(void* d, unsigned int* value) {
  return Number(d, "nvmlDeviceGetCurrPcieLinkGeneration", "pcie_gen", value);
}
__attribute__((visibility("default"))) Return nvmlDeviceGetCurrPcieLinkWidth(void* d, unsigned int* value) {
  return Number(d, "nvmlDeviceGetCurrPcieLinkWidth", "pcie_width", value);
}
__attribute__((visibility("default"))) Return nvmlDeviceGetMaxPcieLinkGeneration(void* d, unsigned int* value) {
  return Number(d, "nvmlDeviceGetMaxPcieLinkGeneration", "pcie_gen_max", value);
}
__attribute__((visibility("default"))) Return nvmlDeviceGetMaxPcieLinkWidth(void* d, unsigned int* value) {
  return Number(d, "nvmlDeviceGetMaxPcieLinkWidth", "pcie_width_max", value);
}

__attribute__((visibility("default"))) Return nvmlDeviceGetClockInfo(void* d, int type, unsigned int* mhz) {
  return type == 1 ? Number(d, "nvmlDeviceGetClockInfo", "sm_clock_MHz", mhz) : kNotSupported;  // NVML_CLOCK_SM
}
__attribute__((visibility("default"))) Return nvmlDeviceGetMaxClockInfo(void* d, int type, unsigned int* mhz) {
  return type == 1 ? Number(d, "nvmlDeviceGetMaxClockInfo", "sm_clock_max_MHz", mhz) : kNotSupported;
}

#ifndef FAKE_NVML_OLD_DRIVER
__attribute__((visibility("default"))) Return nvmlDeviceGetCurrentClocksEventReasons(void* d,
                                                                                     unsigned long long* reasons) {
  return Number(d, "nvmlDeviceGetCurrentClocksEventReasons", "clock_event_reasons", reasons);
}
#endif
__attribute__((visibility("default"))) Return nvmlDeviceGetCurrentClocksThrottleReasons(void* d,
                                                                                        unsigned long long* reasons) {
  return Number(d, "nvmlDeviceGetCurrentClocksThrottleReasons", "clock_event_reasons", reasons);
}

__attribute__((visibility("default"))) Return nvmlDeviceGetPowerUsage(void* d, unsigned int* mw) {
  return Number(d, "nvmlDeviceGetPowerUsage", "power_mW", mw);
}
__attribute__((visibility("default"))) Return nvmlDeviceGetEnforcedPowerLimit(void* d, unsigned int* mw) {
  return Number(d, "nvmlDeviceGetEnforcedPowerLimit", "power_limit_mW", mw);
}
__attribute__((visibility("default"))) Return nvmlDeviceGetTemperature(void* d, int sensor, unsigned int* celsius) {
  return sensor == 0 ? Number(d, "nvmlDeviceGetTemperature", "temperature_C", celsius) : kNotSupported;
}

#ifndef FAKE_NVML_OLD_DRIVER
__attribute__((visibility("default"))) Return nvmlDeviceGetTotalEnergyConsumption(void* d, unsigned long long* mj) {
  unsigned long long at_start = 0, per_s = 0;
  Return rc = Number(d, "nvmlDeviceGetTotalEnergyConsumption", "energy_mJ", &at_start);
  if (rc == kSuccess) rc = Number(d, "nvmlDeviceGetTotalEnergyConsumption", "energy_mJ_per_s", &per_s);
  if (rc != kSuccess) return rc;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - state.start).count();
  *mj = at_start + static_cast<unsigned long long>(elapsed * static_cast<double>(per_s));
  return kSuccess;
}
#endif

}  // extern "C"
