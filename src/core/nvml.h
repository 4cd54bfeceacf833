// GPU link types from NVML (nvml_library.h: loaded at run time, in every build).
#pragma once

#include <string>

namespace tb::nvml {

// How the GPUs at PCI bus ids `pci_bus_id_a` and `pci_bus_id_b` ("0000:1b:00.0") are connected:
//   "NVLink xN"                N active links from a that end at b,
//   "NVLink xN via NVSwitch"   N active links from a that end at a switch b is linked to as well,
//   "PCIe <level>"             their closest common PCIe ancestor (same board, single switch, multiple switches,
//                              host bridge, same CPU, across CPUs),
//   "unknown (NVML not available: <why>)" when NVML cannot be loaded or answer (or lacks a query this needs).
// Thread-safe.
std::string LinkBetween(const std::string& pci_bus_id_a, const std::string& pci_bus_id_b);

}  // namespace tb::nvml
