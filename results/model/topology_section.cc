#include "topology_section.h"

#include <hdf5.h>

#include <stdexcept>

#include "schema.h"

namespace tb {
namespace {

namespace s = schema::topology;

struct EnvironmentRow {
  int rank;
  std::string name, value;
};

}  // namespace

void AddTopologyToReport(Group& group, const Topology& topology) {
  schema::RecordTable<RankTopology>(s::kRanks)
      .Column(s::ranks::rank, [](const RankTopology& r) { return r.rank; })
      .Column(s::ranks::host, [](const RankTopology& r) { return r.host; })
      .Column(s::ranks::node, [](const RankTopology& r) { return r.node; })
      .Column(s::ranks::local_rank, [](const RankTopology& r) { return r.local_rank; })
      .Column(s::ranks::local_size, [](const RankTopology& r) { return r.local_size; })
      .Column(s::ranks::gpu_index, [](const RankTopology& r) { return r.gpu.index; })
      .Column(s::ranks::gpu_name, [](const RankTopology& r) { return r.gpu.name; })
      .Column(s::ranks::gpu_uuid, [](const RankTopology& r) { return r.gpu.uuid; })
      .Column(s::ranks::gpu_pci_bus, [](const RankTopology& r) { return r.gpu.pci_bus_id; })
      .Column(s::ranks::gpu_memory_bytes, [](const RankTopology& r) { return static_cast<int64_t>(r.gpu.memory_bytes); })
      .Column(s::ranks::cpu_model, [](const RankTopology& r) { return r.cpu_model; })
      .Column(s::ranks::cpu_cores, [](const RankTopology& r) { return r.cpu_cores; })
      .Column(s::ranks::cpu_affinity, [](const RankTopology& r) { return r.cpu_affinity; })
      .Write(group, topology.ranks);

  schema::RecordTable<GpuLink>(s::kGpuLinks)
      .Column(s::gpu_links::node, [](const GpuLink& l) { return l.node; })
      .Column(s::gpu_links::host, [](const GpuLink& l) { return l.host; })
      .Column(s::gpu_links::gpu_a, [](const GpuLink& l) { return l.gpu_a; })
      .Column(s::gpu_links::gpu_b, [](const GpuLink& l) { return l.gpu_b; })
      .Column(s::gpu_links::peer_access, [](const GpuLink& l) { return l.peer_access ? 1 : 0; })
      .Column(s::gpu_links::link, [](const GpuLink& l) { return l.link; })
      .Write(group, topology.links);

  std::vector<EnvironmentRow> environment;
  for (const RankTopology& r : topology.ranks) {
    for (const auto& [name, value] : r.environment) environment.push_back({r.rank, name, value});
  }
  schema::RecordTable<EnvironmentRow>(s::kEnvironment)
      .Column(s::environment::rank, [](const EnvironmentRow& e) { return e.rank; })
      .Column(s::environment::name, [](const EnvironmentRow& e) { return e.name; })
      .Column(s::environment::value, [](const EnvironmentRow& e) { return e.value; })
      .Write(group, environment);

  // Each library's version under its declared name: one the topology names but the schema does not is an error.
  for (const auto& [library, version] : topology.versions) {
    const schema::Field* field = schema::kTopology.FindAttribute(library);
    if (field == nullptr || field->type != schema::Type::kText) {
      throw std::logic_error("report schema: topology has no string attribute " + library);
    }
    group.Set(field->name, version);
  }
  schema::Set(group, s::hdf5, Hdf5LibraryVersion());
  schema::Set(group, s::placement_warning, PlacementWarning(FindSharedCpus(topology)));
}
std::string Hdf5LibraryVersion() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

}  // namespace tb
