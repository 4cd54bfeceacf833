// Small MPI helpers shared by the commands: gathering variable-length text and values to a root.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace tb {

// Gathers one string per rank to `root` (empty vector on other ranks). Collective.
std::vector<std::string> GatherStrings(MPI_Comm comm, const std::string& mine, int root = 0);

// Gathers one double per rank to every rank. Collective.
std::vector<double> AllGatherDoubles(MPI_Comm comm, double mine);

// A barrier that sleeps between polls instead of spinning: for ranks that sit out part of a run (the scaling
// sweep's idle ranks) while others measure on the same cores. Collective.
void SleepingBarrier(MPI_Comm comm);

// Joins/splits fields with an ASCII unit separator, for packing small records into one string.
std::string JoinFields(const std::vector<std::string>& fields);
std::vector<std::string> SplitFields(const std::string& packed);

}  // namespace tb
