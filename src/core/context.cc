#include "context.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "clock.h"
#include "device.h"
#include "error.h"
#include "mpi_util.h"
#include "signals.h"

namespace tb {
namespace {

double g_mpi_init_s = 0;
double g_process_start_s = 0;

}  // namespace

double MpiInitSeconds() { return g_mpi_init_s; }
double ProcessStartSeconds() { return g_process_start_s; }

double PeakHostMemoryBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024.0;  // Linux reports KiB
}

uint64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : uint64_t{1} << 34;
}

MpiSession::MpiSession(int* argc, char*** argv) {
  g_process_start_s = NowSeconds();
  int provided = 0;
  // MPI is called from the main thread only; the watchdog thread's emergency MPI_Abort is outside any thread
  // level's promise (FUNNELED forbids it too). SINGLE, not FUNNELED: in Open MPI 4.1 any higher level turns on
  // internal locking that costs ~0.25 us per small collective (tests/perf/README.md, "Finding").
  TB_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_SINGLE, &provided));
  g_mpi_init_s = NowSeconds() - g_process_start_s;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiSession::Finalize(int exit_code) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // No rank ends before rank 0 has written its last: when one rank ends, mpirun ends the others at once if it is
  // shutting down (Open MPI 4.1), and rank 0 could lose its report's last write and leave a temporary file.
  MPI_Barrier(MPI_COMM_WORLD);
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::thread guard([&] {
    std::unique_lock<std::mutex> lock(mutex);
    double stop_seen_s = -1;
    while (!finished.wait_for(lock, std::chrono::milliseconds(10), [&] { return done; })) {
      if (PendingStopSignal() == 0) continue;
      if (stop_seen_s < 0) stop_seen_s = NowSeconds();
      if (NowSeconds() - stop_seen_s >= kStoppedFinalizeGrace_s) {
        std::fflush(nullptr);
        ::_exit(exit_code);
      }
    }
  });
  MPI_Finalize();
  {
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
  }
  finished.notify_one();
  guard.join();
}

std::string Hostname() {
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  if (MpiStarted() && MPI_Get_processor_name(name, &length) == MPI_SUCCESS && length > 0) return std::string(name, length);
  char fallback[256] = {};
  gethostname(fallback, sizeof fallback - 1);
  return fallback;
}

RankContext DiscoverContext(MPI_Comm world) {
  RankContext ctx;
  TB_CHECK_MPI(MPI_Comm_rank(world, &ctx.world_rank));
  TB_CHECK_MPI(MPI_Comm_size(world, &ctx.world_size));
  ctx.host = Hostname();

  MPI_Comm node_comm = MPI_COMM_NULL;
  TB_CHECK_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, ctx.world_rank, MPI_INFO_NULL, &node_comm));
  TB_CHECK_MPI(MPI_Comm_rank(node_comm, &ctx.local_rank));
  TB_CHECK_MPI(MPI_Comm_size(node_comm, &ctx.local_size));

  // Node index: number the node leaders (local rank 0) in world-rank order, then share it within the node.
  int is_leader = ctx.local_rank == 0 ? 1 : 0;
  int leaders_before_me = 0;
  TB_CHECK_MPI(MPI_Exscan(&is_leader, &leaders_before_me, 1, MPI_INT, MPI_SUM, world));
  if (ctx.world_rank == 0) leaders_before_me = 0;  // MPI_Exscan leaves rank 0's result undefined
  int node_index = leaders_before_me;
  TB_CHECK_MPI(MPI_Bcast(&node_index, 1, MPI_INT, 0, node_comm));
  ctx.node_index = node_index;
  TB_CHECK_MPI(MPI_Allreduce(&is_leader, &ctx.node_count, 1, MPI_INT, MPI_SUM, world));
  MPI_Comm_free(&node_comm);
  return ctx;
}

bool LaunchedByMpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

RankContext LocalContext() {
  RankContext ctx;
  ctx.host = Hostname();
  return ctx;
}

void BindRankToGpu(RankContext& ctx, bool require_one_each) {
  int gpus = GpuCount();
  if (gpus == 0) throw InputError("no GPU is usable on " + ctx.host + " (--backend cuda needs one per rank)");
  if (require_one_each && ctx.local_size > gpus) {
    throw InputError(std::to_string(ctx.local_size) + " ranks on " + ctx.host + " but only " +
                     std::to_string(gpus) + " GPUs: start one rank per GPU");
  }
  ctx.gpu_index = ctx.local_rank % gpus;
  BindGpu(ctx.gpu_index);
}

}  // namespace tb
