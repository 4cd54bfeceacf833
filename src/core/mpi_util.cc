#include "mpi_util.h"

#include <chrono>
#include <thread>

#include "error.h"
#include "watchdog.h"

namespace tb {

bool MpiStarted() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

namespace {
constexpr char kFieldSeparator = '\x1f';
}

std::vector<std::string> GatherStrings(MPI_Comm comm, const std::string& mine, int root) {
  int rank = 0, size = 1;
  TB_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  TB_CHECK_MPI(MPI_Comm_size(comm, &size));
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(rank == root ? size : 0);
  TB_CHECK_MPI(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, root, comm));
  std::vector<int> offsets(lengths.size(), 0);
  int total = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    offsets[i] = total;
    total += lengths[i];
  }
  std::string all(static_cast<size_t>(total), '\0');
  TB_CHECK_MPI(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR,
                           root, comm));
  std::vector<std::string> result;
  for (size_t i = 0; i < lengths.size(); ++i) result.push_back(all.substr(offsets[i], lengths[i]));
  return result;
}

void BroadcastString(MPI_Comm comm, std::string& text, int root) {
  uint64_t length = text.size();
  TB_CHECK_MPI(MPI_Bcast(&length, 1, MPI_UINT64_T, root, comm));
  text.resize(length);
  TB_CHECK_MPI(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, root, comm));
}

void AgreedError::Throw() const {
  if (code == ExitCode::kInput) throw InputError(message);
  throw RuntimeError(message);
}

std::optional<AgreedError> AgreeOnFailure(MPI_Comm comm, const std::function<void()>& step) {
  AgreedError mine;
  bool failed = false;
  try {
    step();
  } catch (const AgreedFailure&) {
    throw;
  } catch (const Error& e) {
    failed = true;
    mine = {0, e.code(), e.what(), 0};
  } catch (const std::exception& e) {
    failed = true;
    mine = {0, ExitCode::kRuntime, e.what(), 0};
  }
  if (!MpiStarted()) return failed ? std::optional<AgreedError>(AgreedError{0, mine.code, mine.message, 1, 0, 1}) : std::nullopt;
  int rank = 0, size = 1;
  TB_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  TB_CHECK_MPI(MPI_Comm_size(comm, &size));
  // The lowest failing rank and its code; `size` when no rank failed.
  int ours[2] = {failed ? rank : size, static_cast<int>(mine.code)};
  int lowest[2] = {size, 0};
  TB_CHECK_MPI(MPI_Allreduce(ours, lowest, 1, MPI_2INT, MPI_MINLOC, comm));
  if (lowest[0] == size) return std::nullopt;
  int failing = failed ? 1 : 0;
  TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_SUM, comm));
  AgreedError agreed{lowest[0], static_cast<ExitCode>(lowest[1]), mine.message, failing, rank, size};
  BroadcastString(comm, agreed.message, agreed.rank);
  return agreed;
}

void AgreeOnStep(MPI_Comm comm, const std::function<void()>& step) {
  if (const std::optional<AgreedError> failure = AgreeOnFailure(comm, step)) failure->Throw();
}

std::vector<std::vector<std::string>> GatherStringLists(MPI_Comm comm, const std::vector<std::string>& mine,
                                                        int root) {
  // The count first, so that a list of one empty string and an empty list stay apart.
  std::vector<std::string> fields = {std::to_string(mine.size())};
  fields.insert(fields.end(), mine.begin(), mine.end());
  std::vector<std::vector<std::string>> lists;
  for (const std::string& packed : GatherStrings(comm, JoinFields(fields), root)) {
    std::vector<std::string> items = SplitFields(packed);
    items.erase(items.begin());
    lists.push_back(std::move(items));
  }
  return lists;
}

std::vector<double> AllGatherDoubles(MPI_Comm comm, double mine) {
  int size = 1;
  TB_CHECK_MPI(MPI_Comm_size(comm, &size));
  std::vector<double> all(size);
  TB_CHECK_MPI(MPI_Allgather(&mine, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, comm));
  return all;
}

void SleepingBarrier(MPI_Comm comm) {
  InCommunication waiting;
  MPI_Request request = MPI_REQUEST_NULL;
  TB_CHECK_MPI(MPI_Ibarrier(comm, &request));
  int done = 0;
  while (true) {
    TB_CHECK_MPI(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

std::string JoinFields(const std::vector<std::string>& fields) {
  std::string packed;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) packed += kFieldSeparator;
    packed += fields[i];
  }
  return packed;
}

std::vector<std::string> SplitFields(const std::string& packed) {
  std::vector<std::string> fields;
  size_t start = 0;
  while (true) {
    size_t end = packed.find(kFieldSeparator, start);
    fields.push_back(packed.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return fields;
}

}  // namespace tb
