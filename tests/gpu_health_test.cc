// GPU health without a GPU: the sampler's summaries (nothing NVML did not give becomes 0; links judged by their busy
// samples; energy between the first and the last sample), a device record through the gather's fields and back,
// the report's gpu_health group and its view, a training point's energy, and validate's gpu_health rules on
// hand-built reports. The sampler against a (fake) libnvidia-ml.so.1 is gpu_health_cli_test.sh.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_health.h"
#include "gpu_health_section.h"
#include "report_view.h"
#include "schema.h"
#include "train_summary.h"
#include "validate.h"

namespace tb {
namespace {

namespace sc = schema;
const double kNaN = std::nan("");

GpuSample BusySample(double pcie_gen, double sm_clock_MHz, double power_W, double energy_J) {
  GpuSample s;
  s.ecc_corrected = 0;
  s.ecc_uncorrected = 0;
  s.pcie_gen = pcie_gen;
  s.pcie_width = 16;
  s.sm_clock_MHz = sm_clock_MHz;
  s.power_W = power_W;
  s.energy_J = energy_J;
  s.clock_event_reasons = 0x4;  // sw_power_cap: working at its power limit
  return s;
}

TEST(GpuHealth, ClockEventReasonNames) {
  EXPECT_EQ(ClockEventReasonNames(0), "none");
  EXPECT_EQ(ClockEventReasonNames(0x1), "gpu_idle");
  EXPECT_EQ(ClockEventReasonNames(0x4 | 0x80), "sw_power_cap,hw_power_brake_slowdown");
  EXPECT_EQ(ClockEventReasonNames(0x8 | 0x20 | 0x40 | 0x100), "hw_slowdown,sw_thermal_slowdown,hw_thermal_slowdown,"
                                                              "display_clock_setting");
  EXPECT_EQ(ClockEventReasonNames(uint64_t{1} << 12), "bit12");
}

TEST(GpuHealth, SummariesKeepWhatNvmlDidNotGiveAsNaN) {
  GpuHealthAccumulator a;
  a.Add(GpuSample{});  // NVML answered nothing at all
  GpuHealthDevice d;
  a.Fill(d);
  EXPECT_EQ(d.samples, 1);
  EXPECT_EQ(d.busy_samples, 0);
  for (double value : {d.ecc_corrected_volatile, d.ecc_uncorrected_volatile, d.retired_pages, d.remap_pending,
                       d.pcie_gen_current, d.sm_clock_median_MHz, d.power_mean_W, d.power_max_W, d.temperature_max_C,
                       d.energy_J}) {
    EXPECT_TRUE(std::isnan(value));
  }
  EXPECT_EQ(d.clock_event_reasons, "not supported");
  EXPECT_EQ(d.nvml_errors, "");
}

TEST(GpuHealth, LinksByTheirBusySamplesClocksAndEnergyOverTheRun) {
  GpuHealthAccumulator a;
  a.Add(BusySample(4, 1500, 300, 1000));
  GpuSample idle = BusySample(1, 345, 60, 1100);  // an idle link trains down: not the link's state under load
  idle.clock_event_reasons = 0x1;
  a.Add(idle);
  GpuSample braked = BusySample(3, 1700, 500, 1500);
  braked.clock_event_reasons = 0x4 | 0x80;
  braked.ecc_uncorrected = 2;
  braked.errors = {"nvmlDeviceGetTemperature: GPU is lost"};
  a.Add(braked);
  a.Add(BusySample(kNaN, 1900, kNaN, 1800));  // a sample without link or power reads
  GpuHealthDevice d;
  a.Fill(d);
  EXPECT_EQ(d.samples, 4);
  EXPECT_EQ(d.busy_samples, 3);
  EXPECT_EQ(d.pcie_gen_current, 4);  // the highest over busy samples
  EXPECT_EQ(d.sm_clock_min_MHz, 345);
  EXPECT_EQ(d.sm_clock_median_MHz, (1500 + 1700) / 2.0);
  EXPECT_EQ(d.sm_clock_max_MHz, 1900);
  EXPECT_DOUBLE_EQ(d.power_mean_W, (300 + 60 + 500) / 3.0);
  EXPECT_EQ(d.power_max_W, 500);
  EXPECT_EQ(d.energy_J, 800);  // the last sample's counter minus the first's
  EXPECT_EQ(d.ecc_uncorrected_volatile, 2);
  EXPECT_EQ(d.ecc_corrected_volatile, 0);
  EXPECT_EQ(d.clock_event_reasons, "gpu_idle,sw_power_cap,hw_power_brake_slowdown");
  EXPECT_EQ(d.nvml_errors, "nvmlDeviceGetTemperature: GPU is lost");
}

TEST(GpuHealth, EnergyIsNaNWhenEitherEndLacksIt) {
  GpuHealthAccumulator a;
  a.Add(BusySample(5, 1500, 300, 1000));
  a.Add(BusySample(5, 1500, 300, kNaN));
  GpuHealthDevice d;
  a.Fill(d);
  EXPECT_TRUE(std::isnan(d.energy_J));
}

TEST(GpuHealth, ARecordTravelsThroughItsFieldsBitForBit) {
  GpuHealthDevice d;
  d.host = "node07";
  d.node = 3;
  d.index = 5;
  d.pci_bus_id = "00000000:1B:00.0";
  d.name = "NVIDIA H100 80GB HBM3";
  d.ranks = "24,25";
  d.clock_event_reasons = "sw_power_cap";
  d.samples = 42;
  d.energy_J = 0.1 + 0.2;  // not a short decimal
  d.power_mean_W = 1e-300;
  std::vector<std::string> fields = {"before"};
  AppendGpuHealthFields(d, fields);
  AppendGpuHealthFields(GpuHealthDevice{}, fields);
  size_t at = 1;
  const GpuHealthDevice back = ReadGpuHealthFields(fields, at);
  EXPECT_EQ(back.host, "node07");
  EXPECT_EQ(back.node, 3);
  EXPECT_EQ(back.index, 5);
  EXPECT_EQ(back.ranks, "24,25");
  EXPECT_EQ(back.samples, 42);
  EXPECT_EQ(back.energy_J, 0.1 + 0.2);
  EXPECT_EQ(back.power_mean_W, 1e-300);
  EXPECT_TRUE(std::isnan(back.ecc_uncorrected_volatile));
  const GpuHealthDevice second = ReadGpuHealthFields(fields, at);
  EXPECT_EQ(at, fields.size());
  EXPECT_TRUE(std::isnan(second.energy_J));
  EXPECT_THROW(ReadGpuHealthFields(fields, at), std::logic_error);
}

// ---- the report, its view and validate -------------------------------------------------------------------------

GpuHealthDevice HealthyGpu(int index, const std::string& ranks) {
  GpuHealthDevice d;
  d.host = "node07";
  d.index = index;
  d.pci_bus_id = "00000000:1" + std::to_string(index) + ":00.0";
  d.name = "NVIDIA H100 80GB HBM3";
  d.ranks = ranks;
  d.samples = 10;
  d.busy_samples = 8;
  d.ecc_corrected_volatile = d.ecc_uncorrected_volatile = 0;
  d.remap_pending = d.remap_failure = d.remapped_rows_corrected = d.remapped_rows_uncorrected = 0;
  d.pcie_gen_current = d.pcie_gen_max = 5;
  d.pcie_width_current = d.pcie_width_max = 16;
  d.clock_event_reasons = "sw_power_cap";
  d.energy_J = 1000;
  return d;
}

// A run on `backend` ("nccl": its rank 0 on GPU 0 of node07) with these GPUs' health (none: no gpu_health group).
Report HealthReport(const std::string& backend, const std::optional<std::vector<GpuHealthDevice>>& gpus) {
  Report r;
  sc::Set(r.root, sc::root::command, "collectives");
  sc::Set(r.root, sc::root::status, "complete");
  sc::Set(r.root, sc::root::backend, backend);
  struct Rank {
    std::string host;
    int64_t gpu;
  };
  sc::RecordTable<Rank>(sc::topology::kRanks)
      .Column(sc::topology::ranks::rank, [](const Rank&) { return 0; })
      .Column(sc::topology::ranks::host, [](const Rank& x) { return x.host; })
      .Column(sc::topology::ranks::gpu_index, [](const Rank& x) { return x.gpu; })
      .Column(sc::topology::ranks::gpu_name, [](const Rank& x) { return x.gpu < 0 ? "" : "NVIDIA H100 80GB HBM3"; })
      .Write(sc::GroupOf(r.root, sc::kTopology), {{"node07", backend == "nccl" ? 0 : -1}});
  if (gpus) {
    GpuHealthReport health;
    health.source = "NVML (libnvidia-ml.so.1)";
    health.samples = 10;
    health.devices = *gpus;
    AddGpuHealthToReport(sc::GroupOf(r.root, sc::kGpuHealth), health);
  }
  return r;
}

std::vector<Check> HealthChecks(const Report& report) {
  std::vector<Check> checks;
  for (const Check& c : ValidateReport(report, ValidateInputs{})) {
    if (c.figure.family == "gpu_health") checks.push_back(c);
  }
  return checks;
}

TEST(GpuHealthValidate, OneCheckPerGpuNamedByHostAndGpu) {
  GpuHealthDevice bad = HealthyGpu(1, "1");
  bad.ecc_uncorrected_volatile = 2;
  bad.pcie_gen_current = 3;
  const std::vector<Check> checks = HealthChecks(HealthReport("nccl", std::vector{HealthyGpu(0, "0"), bad}));
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].figure.key, "gpu_health.node07.gpu0");
  EXPECT_EQ(checks[0].verdict, Verdict::kPass);
  EXPECT_EQ(checks[1].figure.key, "gpu_health.node07.gpu1");
  EXPECT_EQ(checks[1].verdict, Verdict::kFail);
  EXPECT_EQ(checks[1].figure.subject.host, "node07");
  EXPECT_EQ(checks[1].figure.subject.gpu, "GPU 1 NVIDIA H100 80GB HBM3 (00000000:11:00.0)");
  EXPECT_EQ(checks[1].figure.subject.rank, "1");
  EXPECT_NE(checks[1].message.find("2 uncorrected ECC errors"), std::string::npos) << checks[1].message;
  EXPECT_NE(checks[1].message.find("PCIe gen 3 of 5 while busy (downtrained)"), std::string::npos);
}

// Each rule alone on an otherwise healthy GPU.
Verdict VerdictWith(void (*change)(GpuHealthDevice&)) {
  GpuHealthDevice d = HealthyGpu(0, "0");
  change(d);
  return HealthChecks(HealthReport("nccl", std::vector{d})).at(0).verdict;
}

TEST(GpuHealthValidate, EachRule) {
  EXPECT_EQ(VerdictWith([](GpuHealthDevice&) {}), Verdict::kPass);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.ecc_corrected_volatile = 7; }), Verdict::kWarn);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.remap_pending = 1; }), Verdict::kFail);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.remap_failure = 1; }), Verdict::kFail);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.remap_pending = kNaN, d.retired_pages_pending = 1; }), Verdict::kFail);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.pcie_width_current = 8; }), Verdict::kWarn);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.clock_event_reasons = "sw_thermal_slowdown"; }), Verdict::kWarn);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.clock_event_reasons = "sw_power_cap,hw_slowdown"; }), Verdict::kFail);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.clock_event_reasons = "hw_power_brake_slowdown"; }), Verdict::kFail);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.nvml_errors = "nvmlDeviceGetPowerUsage: GPU is lost"; }),
            Verdict::kWarn);
  // Missing data is unknown, never a pass; a problem found still decides.
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.ecc_uncorrected_volatile = kNaN; }), Verdict::kUnknown);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.remap_pending = kNaN; }), Verdict::kUnknown);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.clock_event_reasons = "not supported"; }), Verdict::kUnknown);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.pcie_gen_max = kNaN; }), Verdict::kUnknown);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.ecc_uncorrected_volatile = kNaN, d.remap_failure = 1; }),
            Verdict::kFail);
  // A GPU the run used but never saw busy cannot show its link under load: unknown. One no rank used idles, and
  // its link is not judged.
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.busy_samples = 0; }), Verdict::kUnknown);
  EXPECT_EQ(VerdictWith([](GpuHealthDevice& d) { d.busy_samples = 0, d.ranks = "", d.pcie_gen_current = 1; }),
            Verdict::kPass);
}

TEST(GpuHealthValidate, WithoutDataAGpuRunIsUnknownAndACpuRunHasNoCheck) {
  EXPECT_TRUE(HealthChecks(HealthReport("mpi", std::nullopt)).empty());
  EXPECT_TRUE(HealthChecks(HealthReport("mpi", std::vector<GpuHealthDevice>{})).empty());
  const std::vector<Check> old = HealthChecks(HealthReport("nccl", std::nullopt));
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].verdict, Verdict::kUnknown);
  EXPECT_EQ(old[0].figure.key, "gpu_health");
  const std::vector<Check> none = HealthChecks(HealthReport("nccl", std::vector<GpuHealthDevice>{}));
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].verdict, Verdict::kUnknown);
  EXPECT_EQ(none[0].figure.key, "gpu_health.node07");
  EXPECT_EQ(none[0].figure.subject.host, "node07");
}

TEST(GpuHealthReport, TheViewShowsEveryGpuAndEachPointsEnergy) {
  Report r = HealthReport("nccl", std::vector{HealthyGpu(0, "0"), HealthyGpu(1, "")});
  ScalingPoint p;
  p.k = 2;
  p.measured_steps = 10;
  p.tokens_per_step = 4096;
  Group& point = sc::GroupOf(r.root, sc::kTrainPoint, "k2");
  AddPointEnergyToReport(point, 2048, p);
  EXPECT_DOUBLE_EQ(*sc::Find(&point, sc::point::energy_per_step_J), 204.8);
  EXPECT_DOUBLE_EQ(*sc::Find(&point, sc::point::joules_per_token), 2048.0 / (10 * 4096));
  const std::vector<ViewTable> tables = ViewSection(r, "gpu_health");
  ASSERT_EQ(tables.size(), 3u);
  EXPECT_EQ(tables[0].FullName(), "gpu_health.summary");
  EXPECT_EQ(tables[1].FullName(), "gpu_health.devices");
  EXPECT_EQ(tables[1].rows.size(), 2u);
  EXPECT_EQ(tables[2].FullName(), "gpu_health.energy");
  ASSERT_EQ(tables[2].rows.size(), 1u);
  EXPECT_EQ(std::get<std::string>(tables[2].rows[0][0]), "k2");
  // Without NVML the energy is NaN, never 0.
  Group& unmeasured = sc::GroupOf(r.root, sc::kTrainPoint, "k1");
  AddPointEnergyToReport(unmeasured, kNaN, p);
  EXPECT_TRUE(std::isnan(*sc::Find(&unmeasured, sc::point::joules_per_token)));
  // A report from before GPU health has no such section.
  EXPECT_TRUE(ViewSection(HealthReport("mpi", std::nullopt), "gpu_health").empty());
}

}  // namespace
}  // namespace tb
