#include "nvml_library.h"

#include <dlfcn.h>

#include <cstdio>

namespace tb::nvml {

const Library& Library::Get() {
  static const Library library;
  return library;
}

std::vector<EntryPoint*> Library::Optional() {
  return {&nvmlDeviceGetHandleByPciBusId_v2, &nvmlDeviceGetNvLinkState, &nvmlDeviceGetNvLinkRemotePciInfo_v2,
          &nvmlDeviceGetTopologyCommonAncestor, &nvmlDeviceGetCount_v2, &nvmlDeviceGetHandleByIndex_v2,
          &nvmlDeviceGetName, &nvmlDeviceGetUUID, &nvmlDeviceGetPciInfo_v3, &nvmlDeviceGetTotalEccErrors,
          &nvmlDeviceGetRetiredPages_v2, &nvmlDeviceGetRetiredPagesPendingStatus, &nvmlDeviceGetRemappedRows,
          &nvmlDeviceGetCurrPcieLinkGeneration, &nvmlDeviceGetCurrPcieLinkWidth, &nvmlDeviceGetMaxPcieLinkGeneration,
          &nvmlDeviceGetMaxPcieLinkWidth, &nvmlDeviceGetClockInfo, &nvmlDeviceGetMaxClockInfo,
          &nvmlDeviceGetCurrentClocksEventReasons, &nvmlDeviceGetCurrentClocksThrottleReasons,
          &nvmlDeviceGetPowerUsage, &nvmlDeviceGetEnforcedPowerLimit, &nvmlDeviceGetTemperature,
          &nvmlDeviceGetTotalEnergyConsumption};
}

// dlopen and the two entry points without which nothing works; sets why_ otherwise.
bool Library::Open() {
  handle_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* error = dlerror();
    why_ = error != nullptr ? error : "libnvidia-ml.so.1 could not be loaded";
    return false;
  }
  shutdown_ = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(handle_, "nvmlShutdown"));
  if (dlsym(handle_, "nvmlInit_v2") == nullptr || shutdown_ == nullptr) {
    why_ = "libnvidia-ml.so.1 has no nvmlInit_v2 or nvmlShutdown (driver too old?)";
    return false;
  }
  return true;
}

Library::Library() {
  if (!Open()) return;
  error_string_ = reinterpret_cast<const char* (*)(nvmlReturn_t)>(dlsym(handle_, "nvmlErrorString"));
  for (EntryPoint* entry : Optional()) entry->address = dlsym(handle_, entry->name);
  const auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(handle_, "nvmlInit_v2"));
  const nvmlReturn_t result = init();
  if (result != NVML_SUCCESS) {
    why_ = "nvmlInit_v2 failed: " + ErrorText(result);
    return;
  }
  initialized_ = true;
}

Library::~Library() {
  if (initialized_) (void)shutdown_();  // at exit: nothing is left to tell about a failed shutdown
}

std::string Library::ErrorText(nvmlReturn_t result) const {
  if (result == NVML_ERROR_FUNCTION_NOT_FOUND) return "not in this driver's libnvidia-ml.so.1";
  const char* text = error_string_ != nullptr ? error_string_(result) : nullptr;
  return text != nullptr ? text : "NVML error " + std::to_string(result);
}

std::string Unavailable(const std::string& why) { return "NVML not available: " + why; }

bool ParsePciBusId(const std::string& text, PciAddress& address) {
  unsigned int function = 0;
  address.text = text;
  return std::sscanf(text.c_str(), "%x:%x:%x.%x", &address.domain, &address.bus, &address.device, &function) == 4;
}

bool SamePciDevice(const std::string& a, const std::string& b) {
  PciAddress first, second;
  return ParsePciBusId(a, first) && ParsePciBusId(b, second) && first == second;
}

}  // namespace tb::nvml
