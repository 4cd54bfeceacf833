// Ranks that must share CPUs (src/core/cpu_placement.h) on hand-made affinity lists: the CPU list format, the rule
// (each rank a CPU of its own from its affinity set), the warning's words, and validate's environment.placement check
// and the topology view on hand-built reports.
#include <gtest/gtest.h>

#include <fstream>

#include "cpu_placement.h"
#include "report_view.h"
#include "schema.h"
#include "validate.h"
#include "validate_internal.h"

namespace tb {
namespace {

namespace sc = schema;

TEST(CpuList, FormatsRangesAsTheKernelDoes) {
  EXPECT_EQ(FormatIdList({}), "");
  EXPECT_EQ(FormatIdList({8, 3, 0, 1, 2, 2}), "0-3,8");
  EXPECT_EQ(FormatIdList({0, 1}), "0-1");
  EXPECT_EQ(FormatIdList({0, 2, 4}), "0,2,4");
  // Ranks: a pair is two names, three in a row a range.
  EXPECT_EQ(FormatIdList({0, 1}, 3), "0,1");
  EXPECT_EQ(FormatIdList({0, 1, 2, 5, 6}, 3), "0-2,5,6");
}

TEST(CpuList, ParsesWhatItFormatsAndRefusesTheRest) {
  EXPECT_EQ(ParseIdList("0-3,8"), (std::vector<int>{0, 1, 2, 3, 8}));
  EXPECT_EQ(ParseIdList("5"), (std::vector<int>{5}));
  EXPECT_EQ(ParseIdList("2,0-1,1"), (std::vector<int>{0, 1, 2}));
  for (const char* bad : {"", "a", "1,", ",1", "1-", "-1", "3-1", "1 ", "0x1", "1,,2"}) {
    EXPECT_EQ(ParseIdList(bad), std::nullopt) << "'" << bad << "'";
  }
}

// What the kernel says this process may run on, in its own words.
TEST(CpuList, ThisProcessIsWhatProcStatusSays) {
  std::ifstream status("/proc/self/status");
  std::string line, kernel;
  while (std::getline(status, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) kernel = line.substr(line.find_first_not_of(" \t", 18));
  }
  ASSERT_FALSE(kernel.empty());
  EXPECT_EQ(ThisProcessCpuList(), kernel);
}

RankCpus On(int rank, const std::string& cpus, const std::string& host = "h") {
  return {rank, host, ParseIdList(cpus).value_or(std::vector<int>{})};
}

TEST(SharedCpus, TwoRanksBoundToOneCpuShareIt) {
  const std::vector<SharedCpus> shared = FindSharedCpus({On(0, "0"), On(1, "0")});
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].host, "h");
  EXPECT_EQ(shared[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(shared[0].cpus, (std::vector<int>{0}));
}

TEST(SharedCpus, RanksThatCanEachHaveACpuDoNotShare) {
  EXPECT_TRUE(FindSharedCpus({On(0, "0-1"), On(1, "0-1")}).empty());  // unbound, two ranks on two CPUs
  EXPECT_TRUE(FindSharedCpus({On(0, "0"), On(1, "1")}).empty());      // mpirun's binding
  EXPECT_TRUE(FindSharedCpus({On(0, "0-1"), On(1, "0")}).empty());    // the unbound one takes CPU 1
  EXPECT_TRUE(FindSharedCpus({On(0, "0")}).empty());
  EXPECT_TRUE(FindSharedCpus({}).empty());
  // Another host's CPU 0 is another CPU.
  EXPECT_TRUE(FindSharedCpus({On(0, "0", "a"), On(1, "0", "b")}).empty());
}

TEST(SharedCpus, MoreUnboundRanksThanCpusShare) {
  const std::vector<SharedCpus> shared = FindSharedCpus({On(0, "0-1"), On(1, "0-1"), On(2, "0-1")});
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(shared[0].cpus, (std::vector<int>{0, 1}));
}

// No two sets overlap pairwise in full, yet three ranks have two CPUs among them.
TEST(SharedCpus, AChainOfOverlapsIsOneGroup) {
  const std::vector<SharedCpus> shared = FindSharedCpus({On(2, "1"), On(0, "0"), On(1, "0-1")});
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].ranks, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(shared[0].cpus, (std::vector<int>{0, 1}));
}

// Only the ranks that contend are named: rank 2 may use CPU 1, which nobody else may, and rank 3 has CPU 2.
TEST(SharedCpus, NamesOnlyTheContendingRanks) {
  const std::vector<SharedCpus> shared = FindSharedCpus({On(0, "0"), On(1, "0"), On(2, "0-2"), On(3, "2")});
  ASSERT_EQ(shared.size(), 1u);
  EXPECT_EQ(shared[0].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(shared[0].cpus, (std::vector<int>{0}));
}

TEST(SharedCpus, SeparateGroupsByHostAndCpu) {
  const std::vector<SharedCpus> shared = FindSharedCpus({On(0, "0", "b"), On(1, "0", "b"), On(2, "1", "b"),
                                                         On(3, "1", "b"), On(4, "2-3", "b"), On(5, "0", "a"),
                                                         On(6, "0", "a")});
  ASSERT_EQ(shared.size(), 3u);
  EXPECT_EQ(shared[0].host, "a");
  EXPECT_EQ(shared[0].ranks, (std::vector<int>{5, 6}));
  EXPECT_EQ(shared[1].host, "b");
  EXPECT_EQ(shared[1].ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(shared[1].cpus, (std::vector<int>{0}));
  EXPECT_EQ(shared[2].ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(shared[2].cpus, (std::vector<int>{1}));
}

TEST(SharedCpus, RanksOfUnknownPlacementAreLeftOut) {
  EXPECT_TRUE(FindSharedCpus({On(0, "0"), On(1, "")}).empty());
}

TEST(PlacementWarning, NamesRanksHostAndCpusThenTheConsequence) {
  EXPECT_EQ(PlacementWarning({}), "");
  const std::string one = PlacementWarning(FindSharedCpus({On(0, "0", "node07"), On(1, "0", "node07")}));
  EXPECT_EQ(one.rfind("ranks 0,1 on node07 share CPUs 0: figures measure the placement, not the cluster (", 0), 0u)
      << one;
  std::vector<RankCpus> many;
  for (int r = 0; r < 10; ++r) many.push_back(On(r, "0", "host" + std::to_string(r / 2)));
  const std::string five = PlacementWarning(FindSharedCpus(many));
  EXPECT_EQ(five.rfind("ranks 0,1 on host0 share CPUs 0; ranks 2,3 on host1 share CPUs 0; ranks 4,5 on host2 share "
                       "CPUs 0; and 2 more groups: figures measure",
                       0),
            0u)
      << five;
}

// A report of `affinities.size()` ranks on one host, with topology/ranks' cpu_affinity unless `with_column` is false.
Report PlacedReport(const std::vector<std::string>& affinities, bool with_column = true) {
  Report r;
  sc::Set(r.root, sc::root::command, "collectives");
  sc::Set(r.root, sc::root::start_utc, "2026-12-01T00:00:00Z");
  sc::Set(r.root, sc::root::status, "complete");
  struct Rank {
    int64_t rank;
    std::string cpus;
  };
  std::vector<Rank> ranks;
  for (size_t i = 0; i < affinities.size(); ++i) ranks.push_back({static_cast<int64_t>(i), affinities[i]});
  auto table = sc::RecordTable<Rank>(sc::topology::kRanks);
  table.Column(sc::topology::ranks::rank, [](const Rank& x) { return x.rank; })
      .Column(sc::topology::ranks::host, [](const Rank&) { return std::string("node07"); })
      .Column(sc::topology::ranks::gpu_index, [](const Rank&) { return -1; })
      .Column(sc::topology::ranks::gpu_name, [](const Rank&) { return std::string(); });
  if (with_column) table.Column(sc::topology::ranks::cpu_affinity, [](const Rank& x) { return x.cpus; });
  table.Write(sc::GroupOf(r.root, sc::kTopology), ranks);
  return r;
}

const Check& Placement(const std::vector<Check>& checks) {
  for (const Check& c : checks) {
    if (c.figure.key == "environment.placement") return c;
  }
  throw std::runtime_error("no check environment.placement");
}

TEST(ValidatePlacement, WarnsWhenRanksShareCpus) {
  const std::vector<Check> checks = ValidateReport(PlacedReport({"0", "0"}), {});
  const Check& c = Placement(checks);
  EXPECT_EQ(c.verdict, Verdict::kWarn);
  EXPECT_EQ(c.figure.family, "environment");
  EXPECT_EQ(c.figure.value, 2);
  EXPECT_EQ(c.figure.subject.rank, "0,1");
  EXPECT_EQ(c.figure.subject.host, "node07");
  EXPECT_EQ(c.message.rfind("ranks 0,1 on node07 share CPUs 0: figures measure the placement", 0), 0u) << c.message;
}

TEST(ValidatePlacement, PassesWhenEachRankHasACpu) {
  const Check& c = Placement(ValidateReport(PlacedReport({"0", "1"}), {}));
  EXPECT_EQ(c.verdict, Verdict::kPass);
  EXPECT_EQ(c.figure.value, 0);
  EXPECT_EQ(Placement(ValidateReport(PlacedReport({"0-1", "0-1"}), {})).verdict, Verdict::kPass);
}

TEST(ValidatePlacement, UnknownWithoutTheAffinities) {
  const Check& old = Placement(ValidateReport(PlacedReport({"0", "0"}, false), {}));
  EXPECT_EQ(old.verdict, Verdict::kUnknown);
  EXPECT_TRUE(std::isnan(old.figure.value));
  std::vector<Check> bare;  // a report without a topology group
  AddPlacementCheck(Report{}, bare);
  EXPECT_EQ(Placement(bare).verdict, Verdict::kUnknown);
  // One rank's list missing: the others have CPUs of their own, but missing data is never a pass.
  const Check& partial = Placement(ValidateReport(PlacedReport({"0", ""}), {}));
  EXPECT_EQ(partial.verdict, Verdict::kUnknown);
  EXPECT_EQ(partial.figure.subject.rank, "1");
}

// The topology view's cell of `column` (monostate when the view left it empty).
Cell TopologyCell(const Report& report, const std::string& column) {
  const std::vector<ViewTable> tables = ViewSection(report, "topology");
  for (const ViewTable& table : tables) {
    for (size_t c = 0; table.name == "summary" && c < table.columns.size(); ++c) {
      if (table.columns[c].name == column) return table.rows.at(0).at(c);
    }
  }
  ADD_FAILURE() << "no topology.summary column " << column;
  return {};
}

TEST(TopologyView, ShowsEachRanksCpusAndTheWarning) {
  Report shared = PlacedReport({"0", "0", "2-3"});
  sc::Set(sc::GroupOf(shared.root, sc::kTopology), sc::topology::placement_warning, std::string("ranks 0,1 on ..."));
  EXPECT_EQ(std::get<std::string>(TopologyCell(shared, "cpu_affinity")), "ranks 0,1: 0; rank 2: 2-3");
  EXPECT_EQ(std::get<std::string>(TopologyCell(shared, "placement_warning")), "ranks 0,1 on ...");
  EXPECT_EQ(std::get<std::string>(TopologyCell(PlacedReport({"0-1", "0-1", "0-1"}), "cpu_affinity")),
            "ranks 0-2: 0-1");
  EXPECT_EQ(std::get<std::string>(TopologyCell(PlacedReport({"0", ""}), "cpu_affinity")), "rank 0: 0; rank 1: ?");
  // A report from before the affinities: both empty.
  EXPECT_TRUE(std::holds_alternative<std::monostate>(TopologyCell(PlacedReport({"0"}, false), "cpu_affinity")));
  EXPECT_TRUE(std::holds_alternative<std::monostate>(TopologyCell(PlacedReport({"0"}, false), "placement_warning")));
}

}  // namespace
}  // namespace tb
