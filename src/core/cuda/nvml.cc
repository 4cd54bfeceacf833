#include "cuda/nvml.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

namespace tb::nvml {
namespace {

// The few declarations needed from nvml.h (NVML's stable C API), under NVML's own names so they can be looked up.
using nvmlReturn_t = int;  // a C enum
constexpr nvmlReturn_t NVML_SUCCESS = 0;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEnableState_t = int;  // a C enum
constexpr nvmlEnableState_t NVML_FEATURE_ENABLED = 1;
using nvmlGpuTopologyLevel_t = int;  // a C enum: 0, 10, ..., 50 (see TopologyLevelName)
constexpr unsigned NVML_NVLINK_MAX_LINKS = 18;
constexpr int NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32;
constexpr int NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16;

// nvmlPciInfo_t as filled by the _v2 link query.
struct nvmlPciInfo_t {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

// The library and the entry points used, resolved once. Never unloaded: NVML may keep threads of its own.
class Library {
 public:
  // Loads and initialises NVML on the first call (thread-safe, a function-local static); later calls reuse it.
  static const Library& Get() {
    static const Library library;
    return library;
  }

  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }  // why NVML is not usable; "" when it is

  std::string ErrorText(nvmlReturn_t result) const {
    const char* text = error_string_ != nullptr ? error_string_(result) : nullptr;
    return text != nullptr ? text : "NVML error " + std::to_string(result);
  }

  nvmlReturn_t (*get_handle_by_pci_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*get_nvlink_state)(nvmlDevice_t, unsigned int, nvmlEnableState_t*) = nullptr;
  nvmlReturn_t (*get_nvlink_remote_pci_info)(nvmlDevice_t, unsigned int, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*get_topology_common_ancestor)(nvmlDevice_t, nvmlDevice_t, nvmlGpuTopologyLevel_t*) = nullptr;

 private:
  Library() {
    handle_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      const char* error = dlerror();
      why_ = error != nullptr ? error : "libnvidia-ml.so.1 could not be loaded";
      return;
    }
    nvmlReturn_t (*init)() = nullptr;
    if (!Resolve("nvmlInit_v2", init) || !Resolve("nvmlShutdown", shutdown_) ||
        !Resolve("nvmlErrorString", error_string_) ||
        !Resolve("nvmlDeviceGetHandleByPciBusId_v2", get_handle_by_pci_bus_id) ||
        !Resolve("nvmlDeviceGetNvLinkState", get_nvlink_state) ||
        !Resolve("nvmlDeviceGetNvLinkRemotePciInfo_v2", get_nvlink_remote_pci_info) ||
        !Resolve("nvmlDeviceGetTopologyCommonAncestor", get_topology_common_ancestor)) {
      return;
    }
    const nvmlReturn_t result = init();
    if (result != NVML_SUCCESS) {
      why_ = "nvmlInit_v2 failed: " + ErrorText(result);
      return;
    }
    initialized_ = true;
  }

  ~Library() {
    if (initialized_) (void)shutdown_();
  }

  // Sets why_ when `name` is missing (an older driver).
  template <typename Function>
  bool Resolve(const char* name, Function& function) {
    function = reinterpret_cast<Function>(dlsym(handle_, name));
    if (function == nullptr) why_ = std::string("libnvidia-ml.so.1 has no ") + name + " (driver too old?)";
    return function != nullptr;
  }

  void* handle_ = nullptr;
  bool initialized_ = false;
  std::string why_;
  nvmlReturn_t (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
};

struct PciAddress {
  unsigned int domain = 0;
  unsigned int bus = 0;
  unsigned int device = 0;
  std::string text;  // as NVML spells it, for looking the device up
  bool operator==(const PciAddress& other) const {
    return domain == other.domain && bus == other.bus && device == other.device;
  }
};

// Compared by number, not text: CUDA writes "0000:1b:00.0", NVML "00000000:1B:00.0".
bool ParsePciBusId(const std::string& text, PciAddress& address) {
  unsigned int function = 0;
  address.text = text;
  return std::sscanf(text.c_str(), "%x:%x:%x.%x", &address.domain, &address.bus, &address.device, &function) == 4;
}

// Where each active NVLink of `device` ends.
std::vector<PciAddress> ActiveLinkEnds(const Library& nvml, nvmlDevice_t device) {
  std::vector<PciAddress> ends;
  for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
    nvmlEnableState_t active = 0;
    // GPUs without NVLink, and links past the device's count, answer with an error: not a link.
    if (nvml.get_nvlink_state(device, link, &active) != NVML_SUCCESS || active != NVML_FEATURE_ENABLED) continue;
    nvmlPciInfo_t remote = {};
    if (nvml.get_nvlink_remote_pci_info(device, link, &remote) != NVML_SUCCESS) continue;
    remote.busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE - 1] = '\0';
    ends.push_back({remote.domain, remote.bus, remote.device, remote.busId});
  }
  return ends;
}

const char* TopologyLevelName(nvmlGpuTopologyLevel_t level) {
  switch (level) {
    case 0: return "same board";          // NVML_TOPOLOGY_INTERNAL
    case 10: return "single switch";      // NVML_TOPOLOGY_SINGLE
    case 20: return "multiple switches";  // NVML_TOPOLOGY_MULTIPLE
    case 30: return "host bridge";        // NVML_TOPOLOGY_HOSTBRIDGE
    case 40: return "same CPU";           // NVML_TOPOLOGY_NODE
    case 50: return "across CPUs";        // NVML_TOPOLOGY_SYSTEM
    default: return nullptr;
  }
}

std::string Unknown(const std::string& why) { return "unknown (NVML not available: " + why + ")"; }

}  // namespace

std::string LinkBetween(const std::string& pci_bus_id_a, const std::string& pci_bus_id_b) {
  const Library& nvml = Library::Get();
  if (!nvml.ok()) return Unknown(nvml.why());

  PciAddress address_b;
  if (!ParsePciBusId(pci_bus_id_b, address_b)) return Unknown("cannot read PCI bus id '" + pci_bus_id_b + "'");
  nvmlDevice_t device_a = nullptr;
  nvmlDevice_t device_b = nullptr;
  for (auto [bus_id, device] : {std::pair{&pci_bus_id_a, &device_a}, std::pair{&pci_bus_id_b, &device_b}}) {
    const nvmlReturn_t result = nvml.get_handle_by_pci_bus_id(bus_id->c_str(), device);
    if (result != NVML_SUCCESS) {
      return Unknown("nvmlDeviceGetHandleByPciBusId_v2(" + *bus_id + ") failed: " + nvml.ErrorText(result));
    }
  }

  const std::vector<PciAddress> ends_a = ActiveLinkEnds(nvml, device_a);
  const auto direct = std::count(ends_a.begin(), ends_a.end(), address_b);
  if (direct > 0) return "NVLink x" + std::to_string(direct);

  // Links of a and b that end at the same device which is not a GPU NVML knows: an NVSwitch between them.
  const std::vector<PciAddress> ends_b = ActiveLinkEnds(nvml, device_b);
  const auto via_switch = std::count_if(ends_a.begin(), ends_a.end(), [&](const PciAddress& end) {
    if (std::find(ends_b.begin(), ends_b.end(), end) == ends_b.end()) return false;
    nvmlDevice_t gpu = nullptr;
    return nvml.get_handle_by_pci_bus_id(end.text.c_str(), &gpu) != NVML_SUCCESS;
  });
  if (via_switch > 0) return "NVLink x" + std::to_string(via_switch) + " via NVSwitch";

  nvmlGpuTopologyLevel_t level = 0;
  const nvmlReturn_t result = nvml.get_topology_common_ancestor(device_a, device_b, &level);
  if (result != NVML_SUCCESS) return Unknown("nvmlDeviceGetTopologyCommonAncestor failed: " + nvml.ErrorText(result));
  const char* name = TopologyLevelName(level);
  return name != nullptr ? std::string("PCIe ") + name : "PCIe (NVML topology level " + std::to_string(level) + ")";
}

}  // namespace tb::nvml
