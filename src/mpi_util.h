// Small MPI helpers shared by the commands: gathering variable-length text and values to a root.
#pragma once

#include <mpi.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace tb {

// Gathers one string per rank to `root` (empty vector on other ranks). Collective.
std::vector<std::string> GatherStrings(MPI_Comm comm, const std::string& mine, int root = 0);

// Gathers each rank's records to `root` as their bytes, laid out as T (the same binary on every rank): one vector per
// rank on `root`, none elsewhere. Collective. For plain records (StepRecord), instead of packing fields by index.
template <typename T>
std::vector<std::vector<T>> GatherRecords(MPI_Comm comm, const std::vector<T>& mine, int root = 0) {
  static_assert(std::is_trivially_copyable_v<T>, "records travel as their bytes");
  const std::string bytes(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(T));
  std::vector<std::vector<T>> all;
  for (const std::string& packed : GatherStrings(comm, bytes, root)) {
    std::vector<T> records(packed.size() / sizeof(T));
    std::memcpy(records.data(), packed.data(), records.size() * sizeof(T));
    all.push_back(std::move(records));
  }
  return all;
}

// Gathers one double per rank to every rank. Collective.
std::vector<double> AllGatherDoubles(MPI_Comm comm, double mine);

// A barrier that sleeps between polls instead of spinning: for ranks that sit out part of a run (the scaling
// sweep's idle ranks) while others measure on the same cores. Collective.
void SleepingBarrier(MPI_Comm comm);

// Joins/splits fields with an ASCII unit separator, for packing small records into one string.
std::string JoinFields(const std::vector<std::string>& fields);
std::vector<std::string> SplitFields(const std::string& packed);

}  // namespace tb
