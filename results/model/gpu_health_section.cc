#include "gpu_health_section.h"

#include "schema.h"

namespace tb {

void AddGpuHealthToReport(Group& group, const GpuHealthReport& health) {
  namespace g = schema::gpu_health;
  namespace d = g::devices;
  using D = GpuHealthDevice;
  schema::Set(group, g::source, health.source);
  schema::Set(group, g::interval_s, health.interval_s);
  schema::Set(group, g::samples, health.samples);
  schema::RecordTable<D>(g::kDevices)
      .Column(d::host, [](const D& x) { return x.host; })
      .Column(d::node, [](const D& x) { return x.node; })
      .Column(d::index, [](const D& x) { return x.index; })
      .Column(d::pci_bus_id, [](const D& x) { return x.pci_bus_id; })
      .Column(d::name, [](const D& x) { return x.name; })
      .Column(d::uuid, [](const D& x) { return x.uuid; })
      .Column(d::ranks, [](const D& x) { return x.ranks; })
      .Column(d::samples, [](const D& x) { return x.samples; })
      .Column(d::busy_samples, [](const D& x) { return x.busy_samples; })
      .Column(d::ecc_corrected_volatile, [](const D& x) { return x.ecc_corrected_volatile; })
      .Column(d::ecc_uncorrected_volatile, [](const D& x) { return x.ecc_uncorrected_volatile; })
      .Column(d::retired_pages, [](const D& x) { return x.retired_pages; })
      .Column(d::retired_pages_pending, [](const D& x) { return x.retired_pages_pending; })
      .Column(d::remapped_rows_corrected, [](const D& x) { return x.remapped_rows_corrected; })
      .Column(d::remapped_rows_uncorrected, [](const D& x) { return x.remapped_rows_uncorrected; })
      .Column(d::remap_pending, [](const D& x) { return x.remap_pending; })
      .Column(d::remap_failure, [](const D& x) { return x.remap_failure; })
      .Column(d::pcie_gen_current, [](const D& x) { return x.pcie_gen_current; })
      .Column(d::pcie_gen_max, [](const D& x) { return x.pcie_gen_max; })
      .Column(d::pcie_width_current, [](const D& x) { return x.pcie_width_current; })
      .Column(d::pcie_width_max, [](const D& x) { return x.pcie_width_max; })
      .Column(d::sm_clock_min_MHz, [](const D& x) { return x.sm_clock_min_MHz; })
      .Column(d::sm_clock_median_MHz, [](const D& x) { return x.sm_clock_median_MHz; })
      .Column(d::sm_clock_max_MHz, [](const D& x) { return x.sm_clock_max_MHz; })
      .Column(d::sm_clock_max_supported_MHz, [](const D& x) { return x.sm_clock_max_supported_MHz; })
      .Column(d::clock_event_reasons, [](const D& x) { return x.clock_event_reasons; })
      .Column(d::power_mean_W, [](const D& x) { return x.power_mean_W; })
      .Column(d::power_max_W, [](const D& x) { return x.power_max_W; })
      .Column(d::power_limit_W, [](const D& x) { return x.power_limit_W; })
      .Column(d::temperature_max_C, [](const D& x) { return x.temperature_max_C; })
      .Column(d::energy_J, [](const D& x) { return x.energy_J; })
      .Column(d::nvml_errors, [](const D& x) { return x.nvml_errors; })
      .Write(group, health.devices);
}

}  // namespace tb
