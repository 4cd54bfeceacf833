// `trainbench info`: how this binary was built, which backends it can use here, and the topology of this
// launch (every rank's host, node, GPU and CPU; GPU links per node; library versions).
#include "build_info.h"
#include "cli.h"
#include "commands.h"
#include "console.h"
#include "device.h"
#include "log.h"
#include "topology_section.h"

namespace tb {
namespace {

constexpr const char* kUsage =
    "usage: [mpirun -np N] trainbench info [--backend auto|cpu|cuda] [-o FILE]\n"
    "Prints the build configuration, the backends available, and the topology of this launch.";

std::string GiB(uint64_t bytes) { return bytes ? FormatFixed(static_cast<double>(bytes) / (1ULL << 30), 1) : "-"; }

void PrintTopology(const Topology& topology) {
  TextTable table({{"rank", "", 5}, {"host", "", 16}, {"node", "", 4}, {"local", "", 5}, {"gpu", "", 4},
                   {"device", "", 22}, {"memory", "(GiB)", 7}, {"pci bus", "", 13}, {"cpu", "", 0}});
  for (const std::string& line : table.HeaderLines()) Print(line);
  for (const RankTopology& r : topology.ranks) {
    bool gpu = r.gpu.index >= 0;
    Print(table.Row({std::to_string(r.rank), r.host, std::to_string(r.node), std::to_string(r.local_rank),
                     gpu ? std::to_string(r.gpu.index) : "-", gpu ? r.gpu.name : "- (cpu backend)",
                     GiB(r.gpu.memory_bytes), gpu ? r.gpu.pci_bus_id : "-",
                     r.cpu_model + " (" + std::to_string(r.cpu_cores) + " threads)"}));
  }
  if (!topology.links.empty()) {
    Print("#");
    Print("# GPU links per node (peer = cudaDeviceCanAccessPeer; link from NVML)");
    TextTable links({{"node", "", 5}, {"host", "", 16}, {"gpu a", "", 5}, {"gpu b", "", 5}, {"peer", "", 4}, {"link", "", 0}});
    for (const std::string& line : links.HeaderLines()) Print(line);
    for (const GpuLink& l : topology.links) {
      Print(links.Row({std::to_string(l.node), l.host, std::to_string(l.gpu_a), std::to_string(l.gpu_b),
                       l.peer_access ? "yes" : "no", l.link}));
    }
  }
  size_t variables = 0;
  for (const RankTopology& r : topology.ranks) variables += r.environment.size();
  Print(Format("# environment: %zu NCCL_*/OMPI_*/UCX_* variables over all ranks (in the report's topology/environment)",
               variables));
}

}  // namespace

int RunInfoCommand(const CommandInput& input) {
  CommonOptions common;
  po::options_description options("info options");
  AddCommonOptions(options, common);
  std::unique_ptr<CommandRun> run = StartCommand("info", input, options, kUsage, common, [](CommandRun&) {});
  const Topology& topology = run->GatherTopologyIntoReport();

  const int gpus = GpuCount();
  Print(Format("trainbench %s (git %s)", kToolVersion, kGitRevision), true);
  Print(Format("# build      : %s, %s; CUDA backend %s", kBuildType, kCxxCompiler,
               BuiltWithCuda() ? Format("built (CUDA %s, architectures %s)", kCudaToolkitVersion, kCudaArchitectures).c_str()
                               : "not built (built without CUDA)"));
  Print(Format("# backends   : mpi (cpu) available; nccl (cuda) %s; this launch uses %s",
               !BuiltWithCuda() ? "not built" : gpus > 0 ? Format("available, %d GPU(s) on rank 0's host", gpus).c_str()
                                                         : "built, but no usable GPU here",
               run->backend().c_str()));
  if (input.ctx.world_rank == 0) {
    std::string versions;
    for (const auto& [library, version] : topology.versions) versions += (versions.empty() ? "" : ", ") + library + " " + version;
    Print("# libraries  : " + versions + ", hdf5 " + Hdf5LibraryVersion());
  }
  Print(Format("# launch     : %d ranks on %d nodes", input.ctx.world_size, input.ctx.node_count));
  Print("#");
  PrintTopology(topology);
  return run->Finish(false);
}

}  // namespace tb
