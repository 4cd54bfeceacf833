#include "nvml.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "nvml_library.h"

namespace tb::nvml {
namespace {

// Where each active NVLink of `device` ends.
std::vector<PciAddress> ActiveLinkEnds(const Library& nvml, nvmlDevice_t device) {
  std::vector<PciAddress> ends;
  for (unsigned int link = 0; link < NVML_NVLINK_MAX_LINKS; ++link) {
    nvmlEnableState_t active = 0;
    // GPUs without NVLink, and links past the device's count, answer with an error: not a link.
    if (nvml.nvmlDeviceGetNvLinkState(device, link, &active) != NVML_SUCCESS || active != NVML_FEATURE_ENABLED) {
      continue;
    }
    nvmlPciInfo_t remote = {};
    if (nvml.nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, &remote) != NVML_SUCCESS) continue;
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

std::string Unknown(const std::string& why) { return "unknown (" + Unavailable(why) + ")"; }

// Why the library cannot tell link types: not loaded, or an entry point they need is missing; "" when it can.
std::string LinkQueriesMissing(const Library& nvml) {
  if (!nvml.ok()) return nvml.why();
  for (const EntryPoint* entry : {static_cast<const EntryPoint*>(&nvml.nvmlDeviceGetHandleByPciBusId_v2),
                                  static_cast<const EntryPoint*>(&nvml.nvmlDeviceGetNvLinkState),
                                  static_cast<const EntryPoint*>(&nvml.nvmlDeviceGetNvLinkRemotePciInfo_v2),
                                  static_cast<const EntryPoint*>(&nvml.nvmlDeviceGetTopologyCommonAncestor)}) {
    if (entry->address == nullptr) return std::string("libnvidia-ml.so.1 has no ") + entry->name + " (driver too old?)";
  }
  return "";
}

// "NVLink xN via NVSwitch" or "PCIe <level>" when a and b have no direct link.
std::string IndirectLink(const Library& nvml, nvmlDevice_t device_a, nvmlDevice_t device_b,
                         const std::vector<PciAddress>& ends_a) {
  // Links of a and b that end at the same device which is not a GPU NVML knows: an NVSwitch between them.
  const std::vector<PciAddress> ends_b = ActiveLinkEnds(nvml, device_b);
  const auto via_switch = std::count_if(ends_a.begin(), ends_a.end(), [&](const PciAddress& end) {
    if (std::find(ends_b.begin(), ends_b.end(), end) == ends_b.end()) return false;
    nvmlDevice_t gpu = nullptr;
    return nvml.nvmlDeviceGetHandleByPciBusId_v2(end.text.c_str(), &gpu) != NVML_SUCCESS;
  });
  if (via_switch > 0) return "NVLink x" + std::to_string(via_switch) + " via NVSwitch";

  nvmlGpuTopologyLevel_t level = 0;
  const nvmlReturn_t result = nvml.nvmlDeviceGetTopologyCommonAncestor(device_a, device_b, &level);
  if (result != NVML_SUCCESS) return Unknown("nvmlDeviceGetTopologyCommonAncestor failed: " + nvml.ErrorText(result));
  const char* name = TopologyLevelName(level);
  return name != nullptr ? std::string("PCIe ") + name : "PCIe (NVML topology level " + std::to_string(level) + ")";
}

}  // namespace

std::string LinkBetween(const std::string& pci_bus_id_a, const std::string& pci_bus_id_b) {
  const Library& nvml = Library::Get();
  if (const std::string missing = LinkQueriesMissing(nvml); !missing.empty()) return Unknown(missing);

  PciAddress address_b;
  if (!ParsePciBusId(pci_bus_id_b, address_b)) return Unknown("cannot read PCI bus id '" + pci_bus_id_b + "'");
  nvmlDevice_t device_a = nullptr;
  nvmlDevice_t device_b = nullptr;
  for (auto [bus_id, device] : {std::pair{&pci_bus_id_a, &device_a}, std::pair{&pci_bus_id_b, &device_b}}) {
    const nvmlReturn_t result = nvml.nvmlDeviceGetHandleByPciBusId_v2(bus_id->c_str(), device);
    if (result != NVML_SUCCESS) {
      return Unknown("nvmlDeviceGetHandleByPciBusId_v2(" + *bus_id + ") failed: " + nvml.ErrorText(result));
    }
  }

  const std::vector<PciAddress> ends_a = ActiveLinkEnds(nvml, device_a);
  const auto direct = std::count(ends_a.begin(), ends_a.end(), address_b);
  if (direct > 0) return "NVLink x" + std::to_string(direct);
  return IndirectLink(nvml, device_a, device_b, ends_a);
}

}  // namespace tb::nvml
