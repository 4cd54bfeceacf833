// What every rank runs on: host, node, GPU, CPU, libraries and environment, gathered to rank 0.
#pragma once

#include <mpi.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "context.h"
#include "cpu_placement.h"
#include "device.h"

namespace tb {

struct RankTopology {
  int rank = 0;
  int node = 0;
  int local_rank = 0;
  int local_size = 1;
  std::string host;
  GpuInfo gpu;  // gpu.index == -1 when the rank runs on the CPU backend
  std::string cpu_model;
  int cpu_cores = 0;
  std::string cpu_affinity;  // the CPUs it may run on, "0-3,8" (sched_getaffinity); "" when unknown
  std::vector<std::pair<std::string, std::string>> environment;  // NCCL_*, OMPI_*, UCX_*
};

// A pair of GPUs on one node, as seen from that node.
struct GpuLink {
  int node = 0;
  std::string host;
  int gpu_a = 0;
  int gpu_b = 0;
  bool peer_access = false;
  std::string link;  // "NVLink x18", "PCIe host bridge", "unknown (...)"
};

struct Topology {
  std::vector<RankTopology> ranks;
  std::vector<GpuLink> links;
  std::map<std::string, std::string> versions;  // library -> version text, as seen by rank 0
};

// Describes this rank (collective-free).
RankTopology DescribeRank(const RankContext& ctx);

// Gathers every rank's description and each node's GPU links to rank 0 (collective over `world`); the
// returned Topology is complete on rank 0 and empty elsewhere.
Topology GatherTopology(MPI_Comm world, const RankContext& ctx);

// The ranks of each host that must share CPUs (FindSharedCpus over the ranks' cpu_affinity).
std::vector<SharedCpus> FindSharedCpus(const Topology& topology);

// Versions of MPI, CUDA, NCCL and cuDNN linked into this binary.
std::map<std::string, std::string> LibraryVersions();

std::string CpuModel();

}  // namespace tb
