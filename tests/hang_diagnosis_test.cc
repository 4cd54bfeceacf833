// The watchdog's record of where this rank is, its one-line form, and the diagnosis that names the ranks a stuck
// job waits for (src/core/watchdog.h, hang_diagnosis.h).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "hang_diagnosis.h"
#include "watchdog.h"

namespace tb {
namespace {

WatchdogState Waiting(const std::string& operation, double seconds) {
  return {operation, "", seconds, true};
}
WatchdogState Outside(const std::string& operation, const std::string& last, double seconds) {
  return {operation, last, seconds, false};
}

TEST(InCommunication, MarksTheProcessWhileAnyScopeIsOpen) {
  EXPECT_FALSE(InCommunication::Now());
  {
    InCommunication outer;
    EXPECT_TRUE(InCommunication::Now());
    {
      InCommunication inner;
      EXPECT_TRUE(InCommunication::Now());
    }
    EXPECT_TRUE(InCommunication::Now());
  }
  EXPECT_FALSE(InCommunication::Now());
}

TEST(WatchdogState, FollowsBeginAndEnd) {
  Watchdog watchdog(100, [](const std::string&, double) {});
  EXPECT_EQ(watchdog.State().operation, "");
  watchdog.Begin("step 1");
  EXPECT_EQ(watchdog.State().operation, "step 1");
  watchdog.Begin("step 2");  // a new operation without End: the one before is the last
  EXPECT_EQ(watchdog.State().last_operation, "step 1");
  watchdog.End();
  const WatchdogState after = watchdog.State();
  EXPECT_EQ(after.operation, "");
  EXPECT_EQ(after.last_operation, "step 2");
  EXPECT_GE(after.seconds, 0);
  EXPECT_LT(after.seconds, 50);
}

TEST(WatchdogState, ATimedOutOperationIsStillReportedAndFiresOnce) {
  std::atomic<int> fired{0};
  Watchdog watchdog(0.05, [&](const std::string& operation, double) {
    EXPECT_EQ(operation, "stuck");
    ++fired;
  });
  watchdog.Begin("stuck");
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(watchdog.State().operation, "stuck");  // what the probe tells rank 0 after the handler ran
  EXPECT_GE(watchdog.State().seconds, 0.3);
  watchdog.End();
}

TEST(EncodeWatchdogState, RoundTripsAndRefusesOtherLines) {
  const WatchdogState s = Outside("training step 3 on 2 ranks", "training step 2 on 2 ranks", 4.25);
  const std::optional<WatchdogState> back = DecodeWatchdogState(EncodeWatchdogState(s));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->operation, s.operation);
  EXPECT_EQ(back->last_operation, s.last_operation);
  EXPECT_DOUBLE_EQ(back->seconds, 4.25);
  EXPECT_FALSE(back->in_communication);
  EXPECT_TRUE(DecodeWatchdogState(EncodeWatchdogState(Waiting("x", 1)))->in_communication);
  EXPECT_FALSE(DecodeWatchdogState(""));
  EXPECT_FALSE(DecodeWatchdogState("ok"));
  EXPECT_FALSE(DecodeWatchdogState("a\x1f" "b\x1f" "nan?\x1f" "1"));
  EXPECT_FALSE(DecodeWatchdogState("a\x1f" "b\x1f" "1.0\x1f" "2"));
}

TEST(DiagnoseHang, NamesTheRankOutsideCommunicationInTheSameOperation) {
  const HangDiagnosis d = DiagnoseHang({Waiting("all_reduce", 3.1), Outside("all_reduce", "", 3.0),
                                        Waiting("all_reduce", 3.0)},
                                       {"a", "b", "c"}, 3);
  EXPECT_EQ(d.stuck, std::vector<int>{1});
  EXPECT_EQ(d.text, "stuck: rank 1 (b) outside communication for 3.0 s, in the same operation; 2 of 3 ranks wait in "
                    "communication in 'all_reduce'");
}

TEST(DiagnoseHang, NamesARankOutsideAnyGuardedOperationAndOneThatDidNotAnswer) {
  const HangDiagnosis d = DiagnoseHang({Outside("", "checkpoint", 9), Waiting("step 4", 3), std::nullopt},
                                       {"a", "b", "c"}, 3);
  EXPECT_EQ(d.stuck, (std::vector<int>{0, 2}));
  EXPECT_NE(d.text.find("rank 0 (a) outside communication for 9.0 s, outside any guarded operation, after "
                        "'checkpoint'"), std::string::npos) << d.text;
  EXPECT_NE(d.text.find("rank 2 (c) did not answer"), std::string::npos) << d.text;
  EXPECT_NE(d.text.find("1 of 3 ranks wait in communication in 'step 4'"), std::string::npos) << d.text;
}

TEST(DiagnoseHang, ARankOutsideCommunicationBrieflyIsRunningNotStuck) {
  // Under half the timeout in one place: it is on its way (a p2p pair's partner, a rank between two steps).
  const HangDiagnosis d = DiagnoseHang({Waiting("x", 3), Outside("y", "x", 1.4)}, {"a", "a"}, 3);
  EXPECT_TRUE(d.stuck.empty());
  EXPECT_EQ(d.text, "no rank stayed behind: all 2 answered, 1 waiting in communication in 'x', so the stall is inside "
                    "the communication (a link, a GPU or the network)");
}

TEST(DiagnoseHang, EveryRankWaitingMeansTheStallIsInTheCommunication) {
  const HangDiagnosis d = DiagnoseHang({Waiting("a", 3), Waiting("b", 3)}, {"h", "h"}, 3);
  EXPECT_TRUE(d.stuck.empty());
  EXPECT_EQ(d.text, "no rank stayed behind: all 2 answered, 2 waiting in communication, so the stall is inside the "
                    "communication (a link, a GPU or the network)");
}

TEST(DiagnoseHang, NamesEightAndCountsTheRest) {
  std::vector<std::optional<WatchdogState>> answers(12);  // nobody answered
  answers[0] = Waiting("x", 3);
  const HangDiagnosis d = DiagnoseHang(answers, {}, 3);
  EXPECT_EQ(d.stuck.size(), 11u);
  EXPECT_NE(d.text.find("rank 8 (?) did not answer"), std::string::npos) << d.text;
  EXPECT_EQ(d.text.find("rank 9 "), std::string::npos) << d.text;
  EXPECT_NE(d.text.find("; and 3 more; 1 of 12 ranks wait"), std::string::npos) << d.text;
}

TEST(DiagnoseHang, ARankTheProbeNeverReachedIsUnknownNotStuck) {
  // Rank 2 was unreachable from the start (a firewall): its silence now names nothing.
  const HangDiagnosis d = DiagnoseHang({Waiting("x", 3), Outside("x", "", 3), std::nullopt}, {"a", "a", "b"}, 3, {2});
  EXPECT_EQ(d.stuck, std::vector<int>{1});
  EXPECT_NE(d.text.find("; 1 rank(s) unknown (the probe could not reach them"), std::string::npos) << d.text;
  const HangDiagnosis none = DiagnoseHang({Waiting("x", 3), std::nullopt}, {"a", "b"}, 3, {1});
  EXPECT_TRUE(none.stuck.empty());
  EXPECT_EQ(none.text.rfind("no rank that answered stayed behind: 1 of 2 ranks wait in communication in 'x'; 1 rank(s)", 0),
            0u) << none.text;
}

// A rank the probe reached when the measurement began and cannot reach now: its host is named as unreachable.
TEST(HangDiagnosis, ARankNoConnectionReachesNamesItsHostUnreachable) {
  const HangDiagnosis d = DiagnoseHang({Waiting("step 7", 3), std::nullopt, std::nullopt}, {"node0", "node1", "node1"},
                                       3, {}, {1, 2});
  EXPECT_EQ(d.stuck, (std::vector<int>{1, 2}));
  EXPECT_NE(d.text.find("rank 1 (node1) could not be reached; rank 2 (node1) could not be reached"), std::string::npos)
      << d.text;
  EXPECT_NE(d.text.find("; host node1 unreachable (no connection to its ranks: down, or the link cut)"),
            std::string::npos)
      << d.text;
  // Connected, but silent: stopped, not cut off.
  const HangDiagnosis silent = DiagnoseHang({Waiting("step 7", 3), std::nullopt}, {"node0", "node1"}, 3);
  EXPECT_EQ(silent.text.find("unreachable (no connection"), std::string::npos) << silent.text;
}

}  // namespace
}  // namespace tb
