// The runtime context of one rank: MPI world, node and local rank, and the GPU it is bound to.
#pragma once

#include <cstdint>

#include <mpi.h>

#include <string>

namespace tb {

// Owns MPI initialisation for the process (MPI_Init_thread in the constructor, MPI_Finalize in the
// destructor unless MPI was aborted).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  // Collective: a barrier (no rank ends before the others are done: under mpirun's own shutdown, the first rank to
  // end makes mpirun kill the rest at once), then MPI_Finalize, bounded once a stop signal has come: when one is
  // pending (or arrives meanwhile) and finalize has not returned kStoppedFinalizeGrace_s later, the process exits
  // with `exit_code` without waiting for it. Under mpirun's own shutdown (mpirun got SIGTERM or Ctrl-C) Open MPI
  // 4.1's runtime no longer answers MPI_Finalize, and the SIGKILL it sends 1 s after the ranks' SIGTERM would end a
  // rank that has written its report with 137.
  void Finalize(int exit_code);
  static constexpr double kStoppedFinalizeGrace_s = 0.2;
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

// Seconds MPI_Init_thread took in this process (0 before MpiSession), and the monotonic time at which the
// process started its main() (for start-up time: launch to first step).
double MpiInitSeconds();
double ProcessStartSeconds();

// Peak resident host memory of this process so far, in bytes (getrusage).
double PeakHostMemoryBytes();
// The host's physical memory in bytes (sysconf).
uint64_t PhysicalMemoryBytes();

struct RankContext {
  int world_rank = 0;
  int world_size = 1;
  int node_index = 0;   // 0..node_count-1, in order of each node's lowest world rank
  int node_count = 1;
  int local_rank = 0;   // rank among the ranks on this node (MPI_Comm_split_type shared)
  int local_size = 1;
  std::string host;     // MPI_Get_processor_name
  int gpu_index = -1;   // CUDA ordinal this rank uses, -1 when it runs on the CPU backend
};

// Discovers world, node and local rank over `world` (collective).
RankContext DiscoverContext(MPI_Comm world);

// Whether an MPI launcher (mpirun, srun with PMI or PMIx, hydra) started this process: its environment names the
// process's rank. Commands that read reports only (report, cost, validate, history) start MPI only then, so
// that they run anywhere without MPI's start-up (about half a second per process).
bool LaunchedByMpi();
// The context of a process that runs without MPI: rank 0 of 1 on this host.
RankContext LocalContext();

// Binds rank to GPU local_rank % GpuCount() and records it in ctx.gpu_index. Throws InputError when there
// are fewer GPUs than local ranks would need with `require_one_each`, RuntimeError when binding fails.
void BindRankToGpu(RankContext& ctx, bool require_one_each);

std::string Hostname();

}  // namespace tb
