// --inject's parser (src/core/inject.h): every kind, lists and repeats, and every bad spec as one InputError line
// naming --inject.
#include <gtest/gtest.h>

#include "error.h"
#include "inject.h"

namespace tb {
namespace {

// The message of the InputError that parsing `values` at `world` ranks throws ("" when it parses).
std::string ParseError(const std::vector<std::string>& values, int world = 2) {
  try {
    ParseInjection(values, world);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Inject, ParsesEveryKind) {
  const InjectionPlan plan =
      ParseInjection({"slow-rank=1:300,slow-link=0-2:250.5", "wrong-value=2", "hang=0,io-stall=40"}, 3);
  ASSERT_EQ(plan.faults().size(), 5u);
  EXPECT_EQ(plan.SlowRankMs(1), 300);
  EXPECT_EQ(plan.SlowRankMs(0), 0);
  EXPECT_EQ(plan.LinkDelayUs(0, 2), 250.5);
  EXPECT_EQ(plan.LinkDelayUs(2, 0), 250.5);  // a link has no direction
  EXPECT_EQ(plan.LinkDelayUs(0, 1), 0);
  EXPECT_TRUE(plan.WrongValue(2));
  EXPECT_FALSE(plan.WrongValue(1));
  EXPECT_TRUE(plan.Hangs(0));
  EXPECT_FALSE(plan.Hangs(2));
  EXPECT_EQ(plan.IoStallMs(), 40);
  EXPECT_EQ(plan.Describe(), "slow-rank=1:300,slow-link=0-2:250.5,wrong-value=2,hang=0,io-stall=40");
  EXPECT_EQ(plan.Find(FaultKind::kSlowLink)->peer, 2);
}

TEST(Inject, NothingGivenIsNothingInjected) {
  const InjectionPlan plan = ParseInjection({}, 4);
  EXPECT_TRUE(plan.empty());
  EXPECT_EQ(plan.Describe(), "");
  EXPECT_EQ(plan.Find(FaultKind::kHang), nullptr);
}

TEST(Inject, RepeatedFaultsAddUp) {
  const InjectionPlan plan = ParseInjection({"slow-rank=0:10", "slow-rank=0:5", "slow-link=1-0:7,slow-link=0-1:3"}, 2);
  EXPECT_EQ(plan.SlowRankMs(0), 15);
  EXPECT_EQ(plan.LinkDelayUs(0, 1), 10);
}

TEST(Inject, EveryBadSpecIsOneLineNamingInject) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"slow-disk=1", "unknown kind 'slow-disk' (accepted: slow-rank=R:MS, slow-link=A-B:US, wrong-value=R, hang=R, "
                      "io-stall=MS)"},
      {"hang", "expected hang=R"},
      {"hang=2", "rank 2 is outside this launch's 2 ranks (0..1)"},
      {"hang=-1", "rank -1 is outside"},
      {"hang=0x1", "'0x1' is not a rank"},
      {"hang=", "'' is not a rank"},
      {"wrong-value=99999999999999", "is not a rank"},
      {"slow-rank=1", "expected slow-rank=R:MS"},
      {"slow-rank=1:-5", "'-5' is out of range (accepted: a decimal number of milliseconds in (0, 1e7])"},
      {"slow-rank=1:0", "'0' is out of range"},
      {"slow-rank=1:inf", "'inf' is not a decimal number"},
      {"slow-rank=1:0x10", "'0x10' is not a decimal number"},
      {"slow-rank=1:1e99", "out of range"},
      {"slow-rank=1:5ms", "'5ms' is not a decimal number"},
      {"slow-link=1-1:50", "a link joins two different ranks (A != B)"},
      {"slow-link=0:50", "expected slow-link=A-B:US"},
      {"slow-link=0-1", "expected slow-link=A-B:US"},
      {"slow-link=0-3:50", "rank 3 is outside"},
      {"slow-link=0-1:nan", "'nan' is not a decimal number (accepted: a decimal number of microseconds"},
      {"io-stall=-1", "out of range"},
      {"io-stall=fast", "not a decimal number"},
  };
  for (const auto& [spec, why] : cases) {
    const std::string message = ParseError({spec});
    EXPECT_EQ(message.rfind("--inject '" + spec + "': ", 0), 0u) << spec << ": " << message;
    EXPECT_NE(message.find(why), std::string::npos) << spec << ": " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << spec;
  }
}

TEST(Inject, EmptyListItemsAreRefused) {
  EXPECT_NE(ParseError({"hang=0,"}).find("--inject"), std::string::npos);
  EXPECT_NE(ParseError({"hang=0,,hang=1"}).find("--inject"), std::string::npos);
  EXPECT_NE(ParseError({""}).find("--inject"), std::string::npos);
}

TEST(Inject, EachCommandInjectsOnlyWhatItCan) {
  const InjectionPlan all = ParseInjection({"slow-rank=0:1,slow-link=0-1:1,wrong-value=1,hang=1,io-stall=1"}, 2);
  EXPECT_NO_THROW(RequireInjectable(ParseInjection({"slow-rank=0:1,slow-link=0-1:1,wrong-value=1,hang=1"}, 2),
                                    "collectives"));
  EXPECT_NO_THROW(RequireInjectable(ParseInjection({"slow-link=0-1:1,hang=1"}, 2), "p2p"));
  EXPECT_NO_THROW(RequireInjectable(ParseInjection({"slow-rank=0:1,slow-link=0-1:1,hang=1,io-stall=1"}, 2), "train"));
  try {
    RequireInjectable(all, "train");
    FAIL() << "train accepted wrong-value";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--inject 'wrong-value=1': train cannot inject wrong-value (it applies to collectives, suite)");
  }
  try {
    RequireInjectable(ParseInjection({"io-stall=5"}, 2), "collectives");
    FAIL() << "collectives accepted io-stall";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--inject 'io-stall=5': collectives cannot inject io-stall (it applies to train, suite)");
  }
  EXPECT_THROW(RequireInjectable(ParseInjection({"slow-rank=1:5"}, 2), "p2p"), InputError);
}

}  // namespace
}  // namespace tb
