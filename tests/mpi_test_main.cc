// GoogleTest main for every test executable: initialises MPI (so the same binary runs alone or under
// mpiexec) and keeps the output of ranks other than 0 quiet, while failures still fail the whole run.
#include <gtest/gtest.h>
#include <mpi.h>

#include "log.h"

namespace {

std::string Hostname() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  return std::string(name, length);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  tb::SetLogIdentity(rank, Hostname());
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (local_failed && rank != 0) std::fprintf(stderr, "rank %d: tests failed on this rank\n", rank);
  MPI_Finalize();
  return any_failed;
}
