#include "topology.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "error.h"
#include "mpi_util.h"

extern char** environ;

namespace tb {
namespace {

bool IsRecordedVariable(const std::string& name) {
  for (const char* prefix : {"NCCL_", "OMPI_", "UCX_"}) {
    if (name.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::vector<std::pair<std::string, std::string>> RecordedEnvironment() {
  std::vector<std::pair<std::string, std::string>> variables;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string text(*entry);
    size_t equals = text.find('=');
    if (equals == std::string::npos) continue;
    std::string name = text.substr(0, equals);
    if (IsRecordedVariable(name)) variables.emplace_back(name, text.substr(equals + 1));
  }
  std::sort(variables.begin(), variables.end());
  return variables;
}

// One rank as fields: rank node local_rank local_size host gpu(8 fields) cpu_model cpu_cores cpu_affinity, then env
// pairs.
std::string Pack(const RankTopology& r) {
  std::vector<std::string> fields = {std::to_string(r.rank), std::to_string(r.node), std::to_string(r.local_rank),
                                     std::to_string(r.local_size), r.host, std::to_string(r.gpu.index), r.gpu.name,
                                     r.gpu.uuid, r.gpu.pci_bus_id, std::to_string(r.gpu.memory_bytes),
                                     std::to_string(r.gpu.compute_major), std::to_string(r.gpu.compute_minor),
                                     std::to_string(r.gpu.multiprocessors), r.cpu_model, std::to_string(r.cpu_cores),
                                     r.cpu_affinity};
  for (const auto& [name, value] : r.environment) {
    fields.push_back(name);
    fields.push_back(value);
  }
  return JoinFields(fields);
}

constexpr size_t kFixedFields = 16;

RankTopology Unpack(const std::string& packed) {
  std::vector<std::string> f = SplitFields(packed);
  if (f.size() < kFixedFields) throw RuntimeError("malformed topology record gathered from a rank");
  RankTopology r;
  r.rank = std::stoi(f[0]);
  r.node = std::stoi(f[1]);
  r.local_rank = std::stoi(f[2]);
  r.local_size = std::stoi(f[3]);
  r.host = f[4];
  r.gpu.index = std::stoi(f[5]);
  r.gpu.name = f[6];
  r.gpu.uuid = f[7];
  r.gpu.pci_bus_id = f[8];
  r.gpu.memory_bytes = std::stoull(f[9]);
  r.gpu.compute_major = std::stoi(f[10]);
  r.gpu.compute_minor = std::stoi(f[11]);
  r.gpu.multiprocessors = std::stoi(f[12]);
  r.cpu_model = f[13];
  r.cpu_cores = std::stoi(f[14]);
  r.cpu_affinity = f[15];
  for (size_t i = kFixedFields; i + 1 < f.size(); i += 2) r.environment.emplace_back(f[i], f[i + 1]);
  return r;
}

// Links between every pair of GPUs on this node, packed as records of 4 fields (a, b, peer, link).
std::string PackNodeLinks() {
  std::vector<std::string> fields;
  int gpus = GpuCount();
  for (int a = 0; a < gpus; ++a) {
    for (int b = 0; b < gpus; ++b) {
      if (a == b) continue;
      fields.push_back(std::to_string(a));
      fields.push_back(std::to_string(b));
      fields.push_back(GpuPeerAccess(a, b) ? "1" : "0");
      fields.push_back(GpuLinkType(a, b));
    }
  }
  return JoinFields(fields);
}

}  // namespace

std::string CpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

std::map<std::string, std::string> LibraryVersions() {
  std::map<std::string, std::string> versions;
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(library, &length);
  std::string text(library, length);
  versions["mpi_library"] = text.substr(0, text.find_first_of(",\n"));
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  versions["mpi_version"] = std::to_string(major) + "." + std::to_string(minor);
  versions["cuda_runtime"] = CudaRuntimeVersion();
  versions["cuda_driver"] = CudaDriverVersion();
  versions["nccl"] = NcclVersion();
  versions["cudnn"] = CudnnVersion();
  return versions;
}

RankTopology DescribeRank(const RankContext& ctx) {
  RankTopology r;
  r.rank = ctx.world_rank;
  r.node = ctx.node_index;
  r.local_rank = ctx.local_rank;
  r.local_size = ctx.local_size;
  r.host = ctx.host;
  if (ctx.gpu_index >= 0) r.gpu = QueryGpu(ctx.gpu_index);
  r.cpu_model = CpuModel();
  r.cpu_cores = static_cast<int>(std::thread::hardware_concurrency());
  r.cpu_affinity = ThisProcessCpuList();
  r.environment = RecordedEnvironment();
  return r;
}

std::vector<SharedCpus> FindSharedCpus(const Topology& topology) {
  std::vector<RankCpus> ranks;
  for (const RankTopology& r : topology.ranks) {
    ranks.push_back({r.rank, r.host, ParseIdList(r.cpu_affinity).value_or(std::vector<int>{})});
  }
  return FindSharedCpus(ranks);
}

Topology GatherTopology(MPI_Comm world, const RankContext& ctx) {
  Topology topology;
  std::vector<std::string> ranks = GatherStrings(world, Pack(DescribeRank(ctx)));
  std::string links = ctx.local_rank == 0 && BuiltWithCuda() ? PackNodeLinks() : "";
  std::vector<std::string> node_links = GatherStrings(world, links);
  if (ctx.world_rank != 0) return topology;
  for (const std::string& packed : ranks) topology.ranks.push_back(Unpack(packed));
  for (size_t rank = 0; rank < node_links.size(); ++rank) {
    if (node_links[rank].empty()) continue;
    std::vector<std::string> f = SplitFields(node_links[rank]);
    for (size_t i = 0; i + 3 < f.size(); i += 4) {
      GpuLink link;
      link.node = topology.ranks[rank].node;
      link.host = topology.ranks[rank].host;
      link.gpu_a = std::stoi(f[i]);
      link.gpu_b = std::stoi(f[i + 1]);
      link.peer_access = f[i + 2] == "1";
      link.link = f[i + 3];
      topology.links.push_back(link);
    }
  }
  topology.versions = LibraryVersions();
  return topology;
}

}  // namespace tb
