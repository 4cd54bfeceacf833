// The rank probe (src/core/rank_probe.h) over real sockets at 2 and 4 ranks: rank 0 hears every rank's answer, a
// rank's word of its timeout reaches rank 0's handler, and a rank that cannot answer in time is reported as none.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "clock.h"
#include "rank_probe.h"

namespace tb {
namespace {

int Rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}
int Size() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

TEST(RankProbe, RankZeroHearsEveryRank) {
  const int rank = Rank();
  RankProbe probe(MPI_COMM_WORLD, [rank] { return "rank " + std::to_string(rank) + " here"; }, nullptr);
  if (rank == 0) {
    const std::vector<ProbeAnswer> answers = probe.AskAll(10);
    ASSERT_EQ(answers.size(), static_cast<size_t>(Size()));
    for (int r = 0; r < Size(); ++r) {
      ASSERT_TRUE(answers[r].line) << "rank " << r << " gave no answer";
      EXPECT_TRUE(answers[r].connected) << "rank " << r;
      EXPECT_EQ(*answers[r].line, "rank " + std::to_string(r) + " here");
      EXPECT_TRUE(probe.Reachable(r)) << "rank " << r;
    }
    EXPECT_FALSE(probe.Reachable(Size()));
  } else {
    EXPECT_TRUE(probe.AskAll(1).empty());
  }
  MPI_Barrier(MPI_COMM_WORLD);  // every server stays up until rank 0 has asked
}

TEST(RankProbe, ATimeoutIsToldToRankZero) {
  const int rank = Rank();
  std::atomic<int> told_by{-1};
  std::string told_what;
  RankProbe probe(MPI_COMM_WORLD, [] { return std::string("x"); }, [&](int from, const std::string& operation) {
    told_what = operation;
    told_by = from;
  });
  if (rank == Size() - 1) {
    EXPECT_TRUE(probe.TellRoot("training step 3 on 4 ranks", 10));
  }
  if (rank == 0) {
    const double give_up = NowSeconds() + 10;
    while (told_by < 0 && NowSeconds() < give_up) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(told_by.load(), Size() - 1);
    EXPECT_EQ(told_what, "training step 3 on 4 ranks");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(RankProbe, ARankThatDoesNotAnswerInTimeIsNone) {
  const int rank = Rank();
  // Once the probe is up (every rank reachable), the last rank's answer takes far longer than rank 0 waits: it is
  // reported as no answer, the others are heard.
  std::atomic<bool> slow{false};
  RankProbe probe(MPI_COMM_WORLD, [rank, &slow] {
    if (slow && rank == Size() - 1) std::this_thread::sleep_for(std::chrono::seconds(3));
    return std::string("fine");
  }, nullptr);
  slow = true;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_TRUE(probe.Reachable(Size() - 1));
    const double start = NowSeconds();
    const std::vector<ProbeAnswer> answers = probe.AskAll(0.5);
    EXPECT_LT(NowSeconds() - start, 2.5);
    for (int r = 0; r + 1 < Size(); ++r) EXPECT_TRUE(answers[r].line) << "rank " << r;
    EXPECT_FALSE(answers[Size() - 1].line);
    EXPECT_TRUE(answers[Size() - 1].connected) << "a slow rank is reached, and silent";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace tb
