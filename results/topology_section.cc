#include "topology_section.h"

#include <hdf5.h>

namespace tb {

void AddTopologyToReport(Group& group, const Topology& topology) {
  std::vector<int64_t> rank, node, local_rank, local_size, gpu_index, gpu_memory, cpu_cores;
  std::vector<std::string> host, gpu_name, gpu_uuid, gpu_pci, cpu_model;
  std::vector<int64_t> env_rank;
  std::vector<std::string> env_name, env_value;
  for (const RankTopology& r : topology.ranks) {
    rank.push_back(r.rank);
    node.push_back(r.node);
    local_rank.push_back(r.local_rank);
    local_size.push_back(r.local_size);
    host.push_back(r.host);
    gpu_index.push_back(r.gpu.index);
    gpu_name.push_back(r.gpu.name);
    gpu_uuid.push_back(r.gpu.uuid);
    gpu_pci.push_back(r.gpu.pci_bus_id);
    gpu_memory.push_back(static_cast<int64_t>(r.gpu.memory_bytes));
    cpu_model.push_back(r.cpu_model);
    cpu_cores.push_back(r.cpu_cores);
    for (const auto& [name, value] : r.environment) {
      env_rank.push_back(r.rank);
      env_name.push_back(name);
      env_value.push_back(value);
    }
  }
  Table& ranks = group.tables["ranks"];
  ranks.description = "one row per rank: where it ran and on what (gpu_index -1 = CPU backend)";
  ranks.Add("rank", "", rank)
      .Add("host", "", host)
      .Add("node", "", node)
      .Add("local_rank", "", local_rank)
      .Add("local_size", "", local_size)
      .Add("gpu_index", "", gpu_index)
      .Add("gpu_name", "", gpu_name)
      .Add("gpu_uuid", "", gpu_uuid)
      .Add("gpu_pci_bus", "", gpu_pci)
      .Add("gpu_memory_bytes", "B", gpu_memory)
      .Add("cpu_model", "", cpu_model)
      .Add("cpu_cores", "", cpu_cores);

  std::vector<int64_t> link_node, gpu_a, gpu_b, peer;
  std::vector<std::string> link_host, link;
  for (const GpuLink& l : topology.links) {
    link_node.push_back(l.node);
    link_host.push_back(l.host);
    gpu_a.push_back(l.gpu_a);
    gpu_b.push_back(l.gpu_b);
    peer.push_back(l.peer_access ? 1 : 0);
    link.push_back(l.link);
  }
  Table& links = group.tables["gpu_links"];
  links.description = "every ordered pair of GPUs on each node: peer access (cudaDeviceCanAccessPeer) and link type (NVML)";
  links.Add("node", "", link_node)
      .Add("host", "", link_host)
      .Add("gpu_a", "", gpu_a)
      .Add("gpu_b", "", gpu_b)
      .Add("peer_access", "", peer)
      .Add("link", "", link);

  Table& environment = group.tables["environment"];
  environment.description = "NCCL_*, OMPI_* and UCX_* environment variables of each rank";
  environment.Add("rank", "", env_rank).Add("name", "", env_name).Add("value", "", env_value);

  for (const auto& [library, version] : topology.versions) group.Set(library, version);
  group.Set("hdf5", Hdf5LibraryVersion());
}

std::string Hdf5LibraryVersion() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "unknown";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

}  // namespace tb
