// validate's rules on hand-built reports: the verdict bands, the layers of expectations, stragglers, verification,
// history, the policy file and its errors, and the JUnit/Prometheus texts.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "error.h"
#include "schema.h"
#include "validate.h"
#include "validate_outputs.h"

namespace tb {
namespace {

namespace sc = schema;

// A 4-rank CPU training run of tiny x2 at `tokens_per_s`, rank r's median step time steps[r].
Report TrainReport(double tokens_per_s, std::vector<double> steps = {1.0, 1.0, 1.0, 1.0},
                   const std::string& model = "tiny") {
  Report r;
  sc::Set(r.root, sc::root::command, "train");
  sc::Set(r.root, sc::root::start_utc, "2026-12-01T00:00:00Z");
  sc::Set(r.root, sc::root::status, "complete");
  sc::Set(r.root, sc::root::n_ranks, static_cast<int64_t>(steps.size()));
  sc::Set(r.root, sc::root::n_nodes, 1);
  Group& model_group = sc::GroupOf(r.root, sc::kModel);
  sc::Set(model_group, sc::model::name, model);
  sc::Set(model_group, sc::model::layers, 2);
  struct Rank {
    int64_t rank;
    std::string host;
    double step;
  };
  std::vector<Rank> ranks;
  for (size_t i = 0; i < steps.size(); ++i) ranks.push_back({static_cast<int64_t>(i), "host" + std::to_string(i), steps[i]});
  sc::RecordTable<Rank>(sc::topology::kRanks)
      .Column(sc::topology::ranks::rank, [](const Rank& x) { return x.rank; })
      .Column(sc::topology::ranks::host, [](const Rank& x) { return x.host; })
      .Column(sc::topology::ranks::gpu_index, [](const Rank&) { return -1; })
      .Column(sc::topology::ranks::gpu_name, [](const Rank&) { return std::string(); })
      .Write(sc::GroupOf(r.root, sc::kTopology), ranks);
  Group& point = sc::GroupOf(r.root, sc::kTrainPoint, "k" + std::to_string(steps.size()));
  sc::Set(point, sc::point::tokens_per_s, tokens_per_s);
  sc::Set(point, sc::point::step_s, 1.0);
  sc::Set(point, sc::point::comm_exposed_s, 0.1);
  sc::Set(point, sc::point::mfu_peak, std::nan(""));
  sc::RecordTable<Rank>(sc::point::kStallBudget)
      .Column(sc::point::stall_budget::rank, [](const Rank& x) { return x.rank; })
      .Column(sc::point::stall_budget::host, [](const Rank& x) { return x.host; })
      .Column(sc::point::stall_budget::device, [](const Rank&) { return std::string("cpu"); })
      .Column(sc::point::stall_budget::median_step_s, [](const Rank& x) { return x.step; })
      .Write(point, ranks);
  return r;
}

const Check& Find(const std::vector<Check>& checks, const std::string& key) {
  for (const Check& c : checks) {
    if (c.figure.key == key) return c;
  }
  throw std::runtime_error("no check " + key);
}

std::string PolicyError(const std::string& text) {
  try {
    ParseValidatePolicy(text, "p.toml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

ValidateInputs AgainstBaseline(const Report& baseline) {
  ValidateInputs inputs;
  inputs.baseline = baseline;
  inputs.baseline_file = "base.h5";
  return inputs;
}

TEST(Validate, ThroughputBandsAgainstABaseline) {
  const Report base = TrainReport(1000);
  // Default bands: within 5% passes, within 10% warns, beyond fails.
  EXPECT_EQ(Find(ValidateReport(TrainReport(980), AgainstBaseline(base)), "train.tokens_per_s").verdict, Verdict::kPass);
  EXPECT_EQ(Find(ValidateReport(TrainReport(930), AgainstBaseline(base)), "train.tokens_per_s").verdict, Verdict::kWarn);
  const Check fail = Find(ValidateReport(TrainReport(800), AgainstBaseline(base)), "train.tokens_per_s");
  EXPECT_EQ(fail.verdict, Verdict::kFail);
  EXPECT_DOUBLE_EQ(*fail.expected, 1000);
  EXPECT_EQ(fail.source, "baseline base.h5");
  // Faster than expected is never a failure.
  EXPECT_EQ(Find(ValidateReport(TrainReport(5000), AgainstBaseline(base)), "train.tokens_per_s").verdict, Verdict::kPass);
}

// A 16-rank alltoall over 2 nodes of 8 whose large-message busbw is `busbw`.
Report AllToAllAcrossNodes(double busbw, int64_t nodes = 2) {
  Report r = TrainReport(1000);
  Group& group = sc::GroupOf(r.root, sc::kCollective, "alltoall");
  sc::Set(group, sc::collective::n_ranks, 16);
  sc::Set(group, sc::collective::nodes, nodes);
  sc::Set(group, sc::collective::split, std::string("all"));
  struct Row {
    int64_t size;
    double busbw;
  };
  sc::RecordTable<Row>(sc::collective::kResults)
      .Column(sc::collective::results::size_bytes, [](const Row& x) { return x.size; })
      .Column(sc::collective::results::busbw_GBps, [](const Row& x) { return x.busbw; }, "out_of_place")
      .Write(group, std::vector<Row>{{int64_t{64} << 20, busbw}});
  return r;
}

// nccl-tests issue 267: an alltoall across nodes runs at one NIC's rate; its busbw reads (n-1)/(n-m) of it, the
// part inside each node going over NVLink meanwhile.
TEST(Validate, AllToAllAcrossNodesExpectsOneNicsRate) {
  const std::string key = "collectives.alltoall.busbw_GBps.large";
  ValidateInputs inputs;
  inputs.policy = ParseValidatePolicy("[derived]\nnic_GBps = 48\n", "p.toml");
  const Check ok = Find(ValidateReport(AllToAllAcrossNodes(80), inputs), key);
  ASSERT_TRUE(ok.expected.has_value());
  EXPECT_DOUBLE_EQ(*ok.expected, 48 * 15.0 / 8 * 0.8);  // 72 GB/s
  EXPECT_EQ(ok.verdict, Verdict::kPass);
  EXPECT_NE(ok.source.find("derived: one NIC's rate 48 GB/s x (n-1)/(n-m) = 15/8"), std::string::npos) << ok.source;
  EXPECT_EQ(Find(ValidateReport(AllToAllAcrossNodes(40), inputs), key).verdict, Verdict::kFail);
  // Without the NIC's rate, or on one node, nothing is derived.
  EXPECT_FALSE(Find(ValidateReport(AllToAllAcrossNodes(80), {}), key).expected.has_value());
  EXPECT_FALSE(Find(ValidateReport(AllToAllAcrossNodes(80, 1), inputs), key).expected.has_value());
  EXPECT_NE(PolicyError("[derived]\nnic_GBps = -1\n"), "");
}

TEST(Validate, P2pExpectationDerivedFromNvlinkBelowThePolicy) {
  Report r = TrainReport(1000);
  sc::Set(sc::GroupOf(r.root, sc::kP2p), sc::p2p::median_uni_GBps, 330.0);
  struct Link {
    std::string link;
  };
  const std::vector<Link> links(12, Link{"NVLink x18 via NVSwitch"});
  sc::RecordTable<Link>(sc::topology::kGpuLinks)
      .Column(sc::topology::gpu_links::link, [](const Link& l) { return l.link; })
      .Write(sc::GroupOf(r.root, sc::kTopology), links);
  const Check c = Find(ValidateReport(r, {}), "p2p.median_uni_GBps");
  EXPECT_DOUBLE_EQ(*c.expected, 18 * 25 * 0.8);  // 360 GB/s
  EXPECT_NE(c.source.find("derived: NVLink x18"), std::string::npos) << c.source;
  EXPECT_EQ(c.verdict, Verdict::kWarn);  // 330 is 8.3% short of 360: past the 5% warn band, inside the 10% fail band
  ValidateInputs with_policy;
  with_policy.policy = ParseValidatePolicy("[gpu.cpu]\n\"p2p.median_uni_GBps\" = 300\n", "p.toml");
  EXPECT_DOUBLE_EQ(*Find(ValidateReport(r, with_policy), "p2p.median_uni_GBps").expected, 300);  // policy wins
}

// An all-PCIe node: p2p is expected at the slowest used GPU's link (generation and width as NVML reports them, at
// their maximum) x the efficiency; a GPU no rank used does not count, and a link NVML did not report gives nothing.
TEST(Validate, ExpectationDerivedFromPcieGenerationAndWidth) {
  Report r = TrainReport(1000);
  sc::Set(sc::GroupOf(r.root, sc::kP2p), sc::p2p::median_uni_GBps, 20.0);
  struct Link {
    std::string link;
  };
  sc::RecordTable<Link>(sc::topology::kGpuLinks)
      .Column(sc::topology::gpu_links::link, [](const Link& l) { return l.link; })
      .Write(sc::GroupOf(r.root, sc::kTopology), std::vector<Link>(6, Link{"PCIe host bridge"}));
  struct Gpu {
    std::string ranks;
    double gen, width;
  };
  auto with_gpus = [&](const std::vector<Gpu>& gpus) {
    Report copy = r;
    namespace d = sc::gpu_health::devices;
    sc::RecordTable<Gpu>(sc::gpu_health::kDevices)
        .Column(d::ranks, [](const Gpu& g) { return g.ranks; })
        .Column(d::pcie_gen_max, [](const Gpu& g) { return g.gen; })
        .Column(d::pcie_width_max, [](const Gpu& g) { return g.width; })
        .Write(sc::GroupOf(copy.root, sc::kGpuHealth), gpus);
    return Find(ValidateReport(copy, {}), "p2p.median_uni_GBps");
  };
  const Check c = with_gpus({{"0", 5, 16}, {"1", 4, 16}, {"2", 5, 16}, {"", 3, 1}});
  ASSERT_TRUE(c.expected.has_value());
  EXPECT_NEAR(*c.expected, 16 * 16 * (128.0 / 130) / 8 * 0.8, 1e-9);  // gen4 x16: 31.5 GB/s x 0.8
  EXPECT_NE(c.source.find("derived: PCIe gen4 x16"), std::string::npos) << c.source;
  EXPECT_EQ(c.verdict, Verdict::kFail);  // 20 is 21% short of 25.2
  EXPECT_FALSE(with_gpus({{"0", 4, 16}, {"1", std::nan(""), 16}}).expected.has_value());
  EXPECT_FALSE(Find(ValidateReport(r, {}), "p2p.median_uni_GBps").expected.has_value());  // no gpu_health
}

// The storage's own rates in [derived] (fio's): the checkpoints' rate over all ranks (bytes / the sum of each
// checkpoint's slowest slice) and the loader's per-read rate are expected at them x efficiency.
TEST(Validate, StorageExpectationsDerivedFromTheDevicesRates) {
  Report r = TrainReport(1000);
  Group& io = sc::GroupOf(r.root, sc::kIoPoint, "k4");
  struct Slice {
    int64_t step, rank;
    double write_s;
  };
  // Two checkpoints of two 1 GB slices; the slowest slices took 1.25 s and 1.0 s: 4 GB / 2.25 s = 1.78 GB/s.
  const std::vector<Slice> slices = {{10, 0, 1.0}, {10, 1, 1.25}, {20, 0, 1.0}, {20, 1, 0.5}};
  namespace c = sc::io_point::checkpoints;
  sc::RecordTable<Slice>(sc::io_point::kCheckpoints)
      .Column(c::step, [](const Slice& x) { return x.step; })
      .Column(c::rank, [](const Slice& x) { return x.rank; })
      .Column(c::bytes, [](const Slice&) { return int64_t{1000000000}; })
      .Column(c::write_s, [](const Slice& x) { return x.write_s; })
      .Column(c::write_GBps, [](const Slice& x) { return 1.0 / x.write_s; })
      .Column(c::ok, [](const Slice&) { return 1; })
      .Write(io, slices);
  struct Reader {
    double bytes, seconds;
  };
  sc::RecordTable<Reader>(sc::io_point::kLoader)  // 1e9 B over 2 s of reads: 500 MB/s per read
      .Column(sc::io_point::loader::bytes_read, [](const Reader& x) { return x.bytes; })
      .Column(sc::io_point::loader::read_s, [](const Reader& x) { return x.seconds; })
      .Write(io, std::vector<Reader>{{6e8, 1.2}, {4e8, 0.8}});
  EXPECT_EQ(Find(ValidateReport(r, {}), "storage.checkpoint_total_GBps").verdict, Verdict::kUnknown);  // no rate given
  ValidateInputs inputs;
  inputs.policy = ParseValidatePolicy("[derived]\nstorage_write_GBps = 2\nstorage_read_MBps = 1000\n", "p.toml");
  const std::vector<Check> checks = ValidateReport(r, inputs);
  const Check& write = Find(checks, "storage.checkpoint_total_GBps");
  EXPECT_NEAR(write.figure.value, 4.0 / 2.25, 1e-9);
  EXPECT_DOUBLE_EQ(*write.expected, 2 * 0.8);
  EXPECT_EQ(write.verdict, Verdict::kPass);
  EXPECT_NE(write.source.find("derived: storage writes 2 GB/s x efficiency 0.8"), std::string::npos) << write.source;
  const Check& read = Find(checks, "storage.loader_MBps");
  EXPECT_NEAR(read.figure.value, 500, 1e-9);
  EXPECT_DOUBLE_EQ(*read.expected, 800);
  EXPECT_EQ(read.verdict, Verdict::kFail);  // 37.5% short of 800
  inputs.policy = ParseValidatePolicy("[derived]\nstorage_write_GBps = 2.5\n", "p.toml");
  EXPECT_EQ(Find(ValidateReport(r, inputs), "storage.checkpoint_total_GBps").verdict, Verdict::kFail);  // 11% short
  EXPECT_NE(PolicyError("[derived]\nstorage_write_GBps = 0\n").find("storage_write_GBps"), std::string::npos);
}

TEST(Validate, NoExpectationIsUnknownNeverPass) {
  const std::vector<Check> checks = ValidateReport(TrainReport(1000), {});
  EXPECT_EQ(Find(checks, "train.tokens_per_s").verdict, Verdict::kUnknown);
  EXPECT_EQ(OverallVerdict(checks), Verdict::kWarn);
}

TEST(Validate, StragglerByLeaveOneOutRobustZ) {
  // The reports of these tests ran on the CPU backend: a straggler is 50% slower there (floor_cpu).
  const std::vector<Check> checks = ValidateReport(TrainReport(1000, {1.00, 1.01, 0.99, 1.80}), {});
  const Check& slow = Find(checks, "train.step_s.rank3");
  EXPECT_EQ(slow.verdict, Verdict::kFail);
  EXPECT_EQ(slow.figure.subject.host, "host3");
  EXPECT_NE(slow.message.find("straggler on host3"), std::string::npos) << slow.message;
  EXPECT_EQ(Find(checks, "train.step_s.rank0").verdict, Verdict::kPass);
  EXPECT_EQ(OverallVerdict(checks), Verdict::kFail);
  // Two ranks still compare; a difference under the floor is not a straggler, however large its z.
  EXPECT_EQ(Find(ValidateReport(TrainReport(1000, {1.0, 1.6}), {}), "train.step_s.rank1").verdict, Verdict::kFail);
  EXPECT_EQ(Find(ValidateReport(TrainReport(1000, {1.0, 1.4}), {}), "train.step_s.rank1").verdict, Verdict::kPass);
  // The policy's floor_cpu sets it; floor (5%) is the GPU backend's.
  ValidateInputs tight;
  tight.policy = ParseValidatePolicy("[straggler]\nfloor_cpu = 0.05\n", "p.toml");
  EXPECT_EQ(Find(ValidateReport(TrainReport(1000, {1.0, 1.1}), tight), "train.step_s.rank1").verdict, Verdict::kFail);
  EXPECT_EQ(Find(ValidateReport(TrainReport(1000, {1.0, 1.03}), tight), "train.step_s.rank1").verdict, Verdict::kPass);
}

TEST(Validate, ARunThatDidNotCompleteFailsWithItsReason) {
  Report r = TrainReport(1000);
  sc::Set(r.root, sc::root::status, "failed");
  sc::Set(r.root, sc::root::status_reason, "timeout: all_reduce did not complete within 5 s");
  const Check status = Find(ValidateReport(r, {}), "run.status");  // a copy: the checks are a temporary
  EXPECT_EQ(status.verdict, Verdict::kFail);
  EXPECT_NE(status.message.find("timeout: all_reduce"), std::string::npos) << status.message;
  sc::Set(r.root, sc::root::status, "complete");
  EXPECT_EQ(Find(ValidateReport(r, {}), "run.status").verdict, Verdict::kPass);
}

TEST(Validate, AnyWrongElementFails) {
  Report r = TrainReport(1000);
  Group& op = sc::GroupOf(r.root, sc::kCollective, "all_reduce");
  Table& results = sc::AddTable(op, sc::collective::kResults);
  sc::AddColumn(results, sc::collective::results::size_bytes, std::vector<int64_t>{1024, 1 << 20});
  sc::AddColumn(results, sc::collective::results::busbw_GBps, "out_of_place", std::vector<double>{1, 2});
  sc::AddColumn(results, sc::collective::results::wrong, "out_of_place", std::vector<int64_t>{0, 3});
  const Check wrong = Find(ValidateReport(r, {}), "collectives.all_reduce.wrong_elements");
  EXPECT_EQ(wrong.verdict, Verdict::kFail);
  EXPECT_DOUBLE_EQ(wrong.figure.value, 3);
}

TEST(Validate, HistoryWinsOverBaselineAndWidensByItsSpread) {
  ValidateInputs inputs = AgainstBaseline(TrainReport(2000));
  for (double v : {1000.0, 1010.0, 990.0}) {
    HistoryEntry night;
    night.values["train.tokens_per_s"] = v;
    inputs.history.push_back(night);
  }
  const Check c = Find(ValidateReport(TrainReport(960), inputs), "train.tokens_per_s");
  EXPECT_DOUBLE_EQ(*c.expected, 1000);  // the nights' median, not the baseline's 2000
  EXPECT_NE(c.source.find("history"), std::string::npos);
  EXPECT_EQ(c.verdict, Verdict::kPass);  // 4% short: inside the 5% warn band
  // Fewer nights than min_nights give no expectation from history.
  inputs.history.resize(2);
  EXPECT_EQ(Find(ValidateReport(TrainReport(960), inputs), "train.tokens_per_s").source, "baseline base.h5");
}

// History whose nights vary widely: the bands widen only up to the cap, a drop beyond the policy's fail band is
// never a pass, and a large drop fails however noisy the nights (issue 35: an 80% drop once passed a 130% band).
TEST(Validate, NoisyHistoryWidensTheBandsOnlyUpToTheCap) {
  auto nights = [](std::vector<double> values) {
    ValidateInputs inputs;
    for (double v : values) {
      HistoryEntry night;
      night.values["train.tokens_per_s"] = v;
      inputs.history.push_back(night);
    }
    return inputs;
  };
  // sigma = 1.4826 x MAD 900 = 1334, 57% of the median 2338: far past the cap (2.5 x 10% = 25%).
  const ValidateInputs noisy = nights({2338, 3238, 1438, 4000, 600, 2338, 3300});
  const Check drop = Find(ValidateReport(TrainReport(469), noisy), "train.tokens_per_s");
  EXPECT_EQ(drop.verdict, Verdict::kFail) << drop.message;  // 80% short: beyond the capped 25%
  EXPECT_DOUBLE_EQ(drop.tolerance, 0.25);
  EXPECT_NE(drop.message.find("history too noisy to judge"), std::string::npos) << drop.message;
  // A small drop in such noise is not judged a pass: a warn that names the nights' spread.
  const Check small = Find(ValidateReport(TrainReport(2300), noisy), "train.tokens_per_s");
  EXPECT_EQ(small.verdict, Verdict::kWarn) << small.message;
  EXPECT_TRUE(small.noisy);
  EXPECT_NE(small.message.find("sigma 57.1%"), std::string::npos) << small.message;
  // Nights noisy within the cap (sigma 5.9%): 15% short is beyond the policy's 10% fail band, inside the widened
  // 17.8%: a warn, not a pass; 20% short fails.
  const ValidateInputs moderate = nights({1000, 1040, 960, 1000, 1050, 950});
  const Check warned = Find(ValidateReport(TrainReport(850), moderate), "train.tokens_per_s");
  EXPECT_EQ(warned.verdict, Verdict::kWarn) << warned.message;
  EXPECT_NE(warned.message.find("widened by the nights' noise"), std::string::npos) << warned.message;
  EXPECT_EQ(Find(ValidateReport(TrainReport(800), moderate), "train.tokens_per_s").verdict, Verdict::kFail);
  // The cap comes from the policy.
  ValidateInputs tight = noisy;
  tight.policy.history_max_widening = 1;
  EXPECT_DOUBLE_EQ(Find(ValidateReport(TrainReport(2300), tight), "train.tokens_per_s").tolerance, 0.10);
  EXPECT_NE(PolicyError("[history]\nmax_widening = 0.5\n").find("max_widening must be 1..10"), std::string::npos);
}

// A suite measures a failing figure's phase again in the same launch (confirm/): the figure fails only when the
// confirmation fails too; else it is a transient (warn, noisy). A phase not measured again leaves the failure as is.
TEST(Validate, AFailureStandsOnlyWhenItsConfirmationFailsToo) {
  auto with_confirmation = [](const Report& first, const Report& again, const std::string& status) {
    Report r = first;
    sc::Set(r.root, sc::root::command, "suite");
    Group& confirm = sc::GroupOf(r.root, sc::kConfirm);
    confirm.Child("train") = *again.root.FindChild("train");
    struct Row {
      std::string phase;
      int64_t repeat;
      std::string status;
    };
    sc::RecordTable<Row>(sc::suite::kPhases)
        .Column(sc::suite::phases::phase, [](const Row& x) { return x.phase; })
        .Column(sc::suite::phases::repeat, [](const Row& x) { return x.repeat; })
        .Column(sc::suite::phases::status, [](const Row& x) { return x.status; })
        .Column(sc::suite::phases::reason, [](const Row&) { return std::string(); })
        .Column(sc::suite::phases::seconds, [](const Row&) { return 1.0; })
        .Write(sc::GroupOf(r.root, sc::kSuite), std::vector<Row>{{"train", 1, "complete"}, {"train", 0, status}});
    return r;
  };
  const Report slow = TrainReport(1000, {1, 1, 1, 3});
  EXPECT_EQ(Find(ValidateReport(slow, {}), "train.step_s.rank3").verdict, Verdict::kFail);
  const Check transient =
      Find(ValidateReport(with_confirmation(slow, TrainReport(1000), "complete"), {}), "train.step_s.rank3");
  EXPECT_EQ(transient.verdict, Verdict::kWarn) << transient.message;
  EXPECT_TRUE(transient.noisy);
  EXPECT_NE(transient.message.find("not confirmed: measured again in the same launch, pass"), std::string::npos)
      << transient.message;
  const Check confirmed = Find(ValidateReport(with_confirmation(slow, slow, "complete"), {}), "train.step_s.rank3");
  EXPECT_EQ(confirmed.verdict, Verdict::kFail);
  EXPECT_NE(confirmed.message.find("; confirmed: measured again in the same launch, it fails too"), std::string::npos)
      << confirmed.message;
  // A confirmation that did not finish confirms nothing: the failure stands, saying so.
  const Check unfinished =
      Find(ValidateReport(with_confirmation(slow, TrainReport(1000), "running"), {}), "train.step_s.rank3");
  EXPECT_EQ(unfinished.verdict, Verdict::kFail);
  EXPECT_NE(unfinished.message.find("not measured again"), std::string::npos) << unfinished.message;
}

// Of two ranks, the slower one may be slow or the other fast: the check names neither (only their common host).
TEST(Validate, TwoRanksCannotTellWhichOfThemIsSlow) {
  Report two = TrainReport(1000, {1.0, 3.0});
  const Check c = Find(ValidateReport(two, {}), "train.step_s.rank1");
  EXPECT_EQ(c.verdict, Verdict::kFail);
  EXPECT_EQ(c.figure.subject.rank, "0,1");
  EXPECT_EQ(c.figure.subject.host, "");  // host0 and host1: either may be off
  EXPECT_NE(c.message.find("two ranks cannot tell which of them is off"), std::string::npos) << c.message;
  EXPECT_EQ(c.message.find("straggler on"), std::string::npos) << c.message;
}

// A report whose topology names no devices (no gpu_index column) is judged, not an exception.
TEST(Validate, AReportWithoutDevicesIsJudged) {
  Report r = TrainReport(1000);
  sc::GroupOf(r.root, sc::kTopology).tables.erase(sc::topology::kRanks.name);
  EXPECT_NO_THROW(ValidateReport(r, {}));
}

TEST(Validate, BaselineOfAnotherConfigurationIsBadInput) {
  try {
    ValidateReport(TrainReport(1000), AgainstBaseline(TrainReport(1000, {1, 1, 1, 1}, "gpt2-124m")));
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("is another configuration"), std::string::npos) << e.what();
  }
}

TEST(ValidatePolicy, ReadsEveryKeyAndThresholdsPerModel) {
  const ValidatePolicy p = ParseValidatePolicy(
      "[tolerance]\nwarn = 0.02\nfail = 0.2\n[straggler]\nz = 5\nfloor = 0.1\n[history]\nnights = 7\nmin_nights = 2\n"
      "[environment]\ndrift = \"fail\"\n[gpu.cpu]\n\"train.tokens_per_s\" = 900\n",
      "p.toml");
  EXPECT_DOUBLE_EQ(p.warn, 0.02);
  EXPECT_DOUBLE_EQ(p.fail, 0.2);
  EXPECT_DOUBLE_EQ(p.straggler_z, 5);
  EXPECT_EQ(p.history_nights, 7);
  EXPECT_TRUE(p.environment_drift_fails);
  ValidateInputs inputs;
  inputs.policy = p;
  const Check c = Find(ValidateReport(TrainReport(850), inputs), "train.tokens_per_s");
  EXPECT_DOUBLE_EQ(*c.expected, 900);
  EXPECT_EQ(c.verdict, Verdict::kWarn);  // 5.6% short: between warn 2% and fail 20%
  EXPECT_NE(c.source.find("policy p.toml"), std::string::npos);
}

TEST(ValidatePolicy, EveryMistakeIsOneLineNamingFileLineAndKey) {
  EXPECT_EQ(PolicyError("[tolerance]\nwran = 0.1\n"), "p.toml:2: [tolerance] unknown key 'wran' (accepted: warn, fail, share_warn, share_fail)");
  EXPECT_NE(PolicyError("[tolerance]\nwarn = 0.3\nfail = 0.1\n").find("warn must not exceed fail"), std::string::npos);
  EXPECT_NE(PolicyError("[tolerance]\nfail = 1.5\n").find("fail must be a fraction in (0, 1)"), std::string::npos);
  EXPECT_NE(PolicyError("[gpu.\"Z9000\"]\n\"train.tokens_per_s\" = 1\n").find("Z9000"), std::string::npos);
  EXPECT_NE(PolicyError("[gpu.cpu]\n\"train.speed\" = 1\n").find("unknown key 'train.speed'"), std::string::npos);
  EXPECT_NE(PolicyError("[bogus]\n").find("unknown key 'bogus'"), std::string::npos);
  EXPECT_NE(PolicyError("[tolerance\n").find("p.toml:1: not valid TOML"), std::string::npos);
}

TEST(ValidateOutputs, JunitAndPrometheusNameEveryCheck) {
  const Report run = TrainReport(800, {1.0, 1.0, 1.0, 1.5});
  const std::vector<Check> checks = ValidateReport(run, AgainstBaseline(TrainReport(1000, {1.0, 1.0, 1.0, 1.5})));
  const std::string xml = JunitXml(run, checks);
  EXPECT_NE(xml.find("<testsuite name=\"train\""), std::string::npos);
  EXPECT_NE(xml.find("classname=\"host3\" name=\"train.step_s.rank3\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<failure type=\"fail\" message=\"measured 800 tokens/s, expected 1000"), std::string::npos) << xml;
  const std::string prom = PrometheusText(run, checks);
  EXPECT_NE(prom.find("trainbench_check_status{check=\"train.tokens_per_s\",family=\"train\",host=\"host0\""),
            std::string::npos) << prom;
  EXPECT_NE(prom.find("trainbench_validate_verdict{host=\"host0\"} 2"), std::string::npos) << prom;
  EXPECT_NE(prom.find("# TYPE trainbench_check_measured_tokens_per_second gauge"), std::string::npos);
}

TEST(ValidateHistory, AForeignFileIsBadInputAndARunCountsOnce) {
  const std::string dir = ::testing::TempDir() + "/validate_history_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const Report run = TrainReport(1000);
  EXPECT_FALSE(AddToHistory(dir, run, "r.h5", ExtractFigures(run), 30).empty());
  EXPECT_TRUE(AddToHistory(dir, run, "r.h5", ExtractFigures(run), 30).empty());  // the same night again
  const std::vector<HistoryEntry> nights = ReadHistory(dir);
  ASSERT_EQ(nights.size(), 1u);
  EXPECT_DOUBLE_EQ(nights[0].values.at("train.tokens_per_s"), 1000);
  EXPECT_EQ(nights[0].identity, RunIdentity(run));
  std::ofstream(dir + "/notes.txt") << "hello\n";
  EXPECT_THROW(ReadHistory(dir), InputError);
  std::filesystem::remove(dir + "/notes.txt");
  std::ofstream(dir + "/x.json") << "{\"format\": \"something else\"}\n";
  EXPECT_THROW(ReadHistory(dir), InputError);
  std::filesystem::remove_all(dir);
}

// Nights are keyed by the run (its run_id), not its start second: two configurations, or a failing night after a
// passing one, started in the same second are both kept; the same run twice is kept once.
TEST(ValidateHistory, RunsOfTheSameSecondAreDistinctNights) {
  const std::string dir = ::testing::TempDir() + "/validate_history_same_second";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Report passing = TrainReport(1000), failing = TrainReport(500), other = TrainReport(900, {1, 1}, "other");
  sc::Set(passing.root, sc::root::run_id, "00000000000000000000000000000001");
  sc::Set(failing.root, sc::root::run_id, "00000000000000000000000000000002");
  sc::Set(other.root, sc::root::run_id, "00000000000000000000000000000003");
  EXPECT_FALSE(AddToHistory(dir, passing, "p.h5", ExtractFigures(passing), 30).empty());
  EXPECT_FALSE(AddToHistory(dir, failing, "f.h5", ExtractFigures(failing), 30, false).empty());
  EXPECT_FALSE(AddToHistory(dir, other, "o.h5", ExtractFigures(other), 30).empty());
  EXPECT_TRUE(AddToHistory(dir, failing, "f.h5", ExtractFigures(failing), 30, false).empty());
  const std::vector<HistoryEntry> nights = ReadHistory(dir);
  ASSERT_EQ(nights.size(), 3u);
  EXPECT_TRUE(IsEntryOf(nights[0], passing) || IsEntryOf(nights[1], passing) || IsEntryOf(nights[2], passing));
  // A report from before run_id is keyed by a digest of what it recorded: runs that differ differ.
  EXPECT_NE(RunKey(TrainReport(1000)), RunKey(TrainReport(1001)));
  EXPECT_EQ(RunKey(TrainReport(1000)), RunKey(TrainReport(1000)));
  std::filesystem::remove_all(dir);
}

// A damaged entry is one line naming the file and the field, never a library's exception text.
TEST(ValidateHistory, AWrongTypedFieldNamesTheFileAndTheField) {
  const std::string dir = ::testing::TempDir() + "/validate_history_types";
  auto error_of = [&](const std::string& entry) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/n.json") << entry;
    try {
      ReadHistory(dir);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string head = R"({"format": "trainbench.history", "version": 1, "run": "r.h5", "start_utc": "x", )"
                           R"("identity": "i", "texts": {}, )";
  EXPECT_NE(error_of(head + R"("values": {"train.tokens_per_s": "fast"}})")
                .find("n.json': damaged entry: \"values.train.tokens_per_s\" must be a number or null, got string"),
            std::string::npos);
  EXPECT_NE(error_of(head + R"("values": {}, "node_hours": -2})").find("\"node_hours\" must be a number >= 0"),
            std::string::npos);
  EXPECT_NE(error_of(head + R"("values": {}, "counted": "yes"})").find("\"counted\" must be true or false"),
            std::string::npos);
  EXPECT_NE(error_of(head + R"("values": {}, "status": "great"})").find("\"status\" must be"), std::string::npos);
  EXPECT_NE(error_of(head + R"("values": []})").find("\"values\" must be an object"), std::string::npos);
  EXPECT_NE(error_of(R"({"format": "trainbench.history", "version": "1"})").find("history version \"1\" is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"format": 7})").find("not a history entry"), std::string::npos);
  EXPECT_EQ(error_of(head + R"("values": {}, "node_hours": 0.5})"), "no error");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tb
