// The `topology` group of a report (schema in results/README.md), built from a gathered Topology.
#pragma once

#include <string>

#include "report.h"
#include "topology.h"

namespace tb {

void AddTopologyToReport(Group& topology_group, const Topology& topology);

// "1.10.8": the HDF5 library this binary writes reports with.
std::string Hdf5LibraryVersion();

}  // namespace tb
