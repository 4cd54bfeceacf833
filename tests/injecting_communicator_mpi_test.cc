// InjectingCommunicator (--inject's communicator faults) over MPI: values pass through unchanged, a slow link delays
// exactly its pair's messages (a sleep is a lower bound on time, so the check is certain under any load), the
// delay survives Prefix, and a plan without communicator faults leaves the communicator as it was.
#include <gtest/gtest.h>
#include <mpi.h>

#include <memory>
#include <vector>

#include "clock.h"
#include "injecting_communicator.h"
#include "mpi_communicator.h"

namespace tb {
namespace {

constexpr double kDelayUs = 200000;  // 0.2 s: far above any MPI message here

TEST(InjectingCommunicator, PassesValuesThrough) {
  const InjectionPlan plan = ParseInjection({"slow-link=0-1:1"}, 2);
  InjectingCommunicator comm(MakeMpiCommunicator(MPI_COMM_WORLD), plan);
  std::vector<float> send(8, 1.0f + static_cast<float>(comm.rank())), recv(8, 0.0f);
  comm.AllReduce(send.data(), recv.data(), send.size(), DataType::kFloat32, ReduceOp::kSum);
  const int n = comm.size();
  for (float v : recv) EXPECT_EQ(v, static_cast<float>(n * (n + 1) / 2));
}

// Seconds ranks 0 and 1 spend in one message round with each other (send and receive at once); 0 elsewhere.
// Collective (a barrier first).
double ExchangeSeconds(Communicator& comm) {
  float send = 1.0f, recv = 0.0f;
  comm.Barrier();
  if (comm.rank() > 1) return 0;
  const double start = NowSeconds();
  comm.SendRecv(&send, 1 - comm.rank(), &recv, 1 - comm.rank(), 1, DataType::kFloat32);
  return NowSeconds() - start;
}

TEST(InjectingCommunicator, DelaysItsPairsMessagesAndKeepsItThroughPrefix) {
  InjectingCommunicator comm(MakeMpiCommunicator(MPI_COMM_WORLD),
                             ParseInjection({"slow-link=0-1:" + std::to_string(kDelayUs)}, 2));
  const int rank = comm.rank();
  const double seconds = ExchangeSeconds(comm);
  if (rank <= 1) EXPECT_GE(seconds, kDelayUs / 1e6);  // both ends wait
  std::unique_ptr<Communicator> pair = comm.Prefix(2);
  ASSERT_EQ(pair != nullptr, rank <= 1);
  if (pair) EXPECT_GE(ExchangeSeconds(*pair), kDelayUs / 1e6);
  EXPECT_EQ(comm.Prefix(1) != nullptr, rank == 0);
}

TEST(InjectingCommunicator, OnlyCommunicatorFaultsWrap) {
  std::unique_ptr<Communicator> mpi = MakeMpiCommunicator(MPI_COMM_WORLD);
  Communicator* raw = mpi.get();
  std::unique_ptr<Communicator> same = WithInjectedFaults(std::move(mpi), ParseInjection({"slow-rank=0:5,io-stall=1"}, 2));
  EXPECT_EQ(same.get(), raw);
  std::unique_ptr<Communicator> wrapped = WithInjectedFaults(std::move(same), ParseInjection({"hang=1"}, 2));
  EXPECT_NE(dynamic_cast<InjectingCommunicator*>(wrapped.get()), nullptr);
}

}  // namespace
}  // namespace tb
