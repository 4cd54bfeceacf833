// Small MPI helpers shared by the commands: gathering and broadcasting text and values, and agreeing across ranks
// on whether a step failed anywhere.
#pragma once

#include <mpi.h>

#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "error.h"

namespace tb {

// Gathers one string per rank to `root` (empty vector on other ranks). Collective.
std::vector<std::string> GatherStrings(MPI_Comm comm, const std::string& mine, int root = 0);

// Gathers each rank's list of strings to `root`: one list per rank there (empty strings and empty lists kept as
// they are), none elsewhere. Collective.
std::vector<std::vector<std::string>> GatherStringLists(MPI_Comm comm, const std::vector<std::string>& mine,
                                                        int root = 0);

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
// Broadcasts a string from `root`. Collective.
void BroadcastString(MPI_Comm comm, std::string& text, int root);

// Whether MPI_Init has run in this process: the commands that read reports run without MPI outside a launcher.
bool MpiStarted();

// The lowest failing rank's error, as every rank learns it from AgreeOnFailure.
struct AgreedError {
  int rank = 0;              // the lowest rank whose step threw
  ExitCode code = ExitCode::kRuntime;
  std::string message;       // that rank's message
  int failing_ranks = 0;     // how many ranks' steps threw
  int self = 0;              // this process's rank in the communicator
  int ranks = 1;             // the communicator's size

  // Throws it as an InputError or a RuntimeError, by its code.
  [[noreturn]] void Throw() const;
};

// The one way ranks agree on a failure. Collective over `comm`: runs `step` on every rank, then agrees whether it
// threw anywhere: nothing when it threw nowhere, else the lowest failing rank's error on every rank, so that no
// rank is left waiting in a later collective while another one unwinds. An AgreedFailure thrown by `step` (an
// inner agreement, already reached on every rank) passes through untouched. Without MPI (a command that reads
// reports, outside a launcher) the one process is the whole job: its own error, if any.
std::optional<AgreedError> AgreeOnFailure(MPI_Comm comm, const std::function<void()>& step);

// AgreeOnFailure, and every rank throws the agreed error (AgreedError::Throw). Collective.
void AgreeOnStep(MPI_Comm comm, const std::function<void()>& step);

// Gathers one double per rank to every rank. Collective.
std::vector<double> AllGatherDoubles(MPI_Comm comm, double mine);

// A barrier that sleeps between polls instead of spinning: for ranks that sit out part of a run (the scaling
// sweep's idle ranks) while others measure on the same cores. Collective.
void SleepingBarrier(MPI_Comm comm);

// Joins/splits fields with an ASCII unit separator, for packing small records into one string.
std::string JoinFields(const std::vector<std::string>& fields);
std::vector<std::string> SplitFields(const std::string& packed);

}  // namespace tb
