// NVML, the driver's management library, loaded at run time (dlopen) on first use: trainbench builds without an
// NVML header or library and still runs where the driver does not ship it.
#pragma once

#include <string>

namespace tb::nvml {

// How the GPUs at PCI bus ids `pci_bus_id_a` and `pci_bus_id_b` ("0000:1b:00.0") are connected:
//   "NVLink xN"                N active links from a that end at b,
//   "NVLink xN via NVSwitch"   N active links from a that end at a switch b is linked to as well,
//   "PCIe <level>"             their closest common PCIe ancestor (same board, single switch, multiple switches,
//                              host bridge, same CPU, across CPUs),
//   "unknown (NVML not available: <why>)" when NVML cannot be loaded or answer.
// Thread-safe.
std::string LinkBetween(const std::string& pci_bus_id_a, const std::string& pci_bus_id_b);

}  // namespace tb::nvml
