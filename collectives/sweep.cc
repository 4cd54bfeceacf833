#include "sweep.h"

#include "schema.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <utility>

#include "clock.h"
#include "definitions.h"
#include "console.h"
#include "error.h"
#include "log.h"
#include "mpi_util.h"
#include "verify.h"

namespace tb {
namespace {

// The whole-table column layout, shared by the header and the rows.
TextTable SweepTable() {
  return TextTable({{"size", "(B)", 12},      {"count", "(elements)", 12}, {"type", "", 8},
                    {"redop", "", 6},         {"root", "", 5},             {"time", "(us)", 10},
                    {"algbw", "(GB/s)", 8},   {"busbw", "(GB/s)", 8},      {"#wrong", "", 7},
                    {"time", "(us)", 10},     {"algbw", "(GB/s)", 8},      {"busbw", "(GB/s)", 8},
                    {"#wrong", "", 7}});
}

struct Buffers {
  std::unique_ptr<CommBuffer> send;
  std::unique_ptr<CommBuffer> recv;
};

// Slots start at multiples of this: cudaMalloc's alignment, which NCCL's fastest paths want too.
constexpr size_t kSlotAlignment = 256;

size_t AlignUp(size_t bytes) { return (bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment; }

// nccl-tests' shift (startColl): the buffers are sized for the largest size, and iteration k of a smaller one uses
// slot k mod count of them, so that back-to-back iterations do not find their data in a cache the previous one
// warmed. One buffer in place; out of place each buffer has its own stride and both the same count of slots.
struct Slots {
  size_t send_stride = 0;  // bytes
  size_t recv_stride = 0;
  size_t count = 1;
};

Slots SlotsFor(const Buffers& buffers, const CollectiveCounts& c, size_t type_size, bool in_place) {
  Slots slots;
  if (in_place) {
    slots.send_stride = slots.recv_stride = AlignUp(std::max(c.send_elements, c.recv_elements) * type_size);
    slots.count = buffers.recv->bytes() / slots.recv_stride;
  } else {
    slots.send_stride = AlignUp(c.send_elements * type_size);
    slots.recv_stride = AlignUp(c.recv_elements * type_size);
    slots.count = std::min(buffers.send->bytes() / slots.send_stride, buffers.recv->bytes() / slots.recv_stride);
  }
  slots.count = std::max<size_t>(slots.count, 1);
  return slots;
}

// One mode of one size: what each step of its measurement needs.
struct ModeRun {
  Communicator& comm;
  const CollectiveDef& def;
  Buffers& buffers;
  const CollectiveCounts& c;
  const SweepOptions& o;
  bool in_place;
  Slots slots;
};

// Operand pointers of iteration `iteration`: separate buffers out of place; one buffer holding both in place.
struct Operands {
  const void* send;
  void* recv;
};

Operands OperandsFor(const ModeRun& m, size_t iteration) {
  const size_t slot = iteration % m.slots.count;
  const size_t type_size = DataTypeSize(m.o.type);
  char* recv = static_cast<char*>(m.buffers.recv->data()) + slot * m.slots.recv_stride;
  if (!m.in_place) return {static_cast<char*>(m.buffers.send->data()) + slot * m.slots.send_stride, recv};
  return {recv + m.c.in_place_send_offset * type_size, recv + m.c.in_place_recv_offset * type_size};
}

void RunAt(const ModeRun& m, size_t iteration) {
  const Operands operands = OperandsFor(m, iteration);
  m.def.run(m.comm, operands.send, operands.recv, m.c, m.o.type, m.o.reduce_op, m.o.root);
}

std::string Describe(const ModeRun& m, const std::string& what) {
  return m.def.name + std::string(" ") + (m.in_place ? "in-place" : "out-of-place") + ", " +
         std::to_string(m.c.size_bytes) + " B, " + DataTypeName(m.o.type) + ", " + what;
}

// The timed batch: iters iterations of `aggregate` operations issued together, iteration i's operation a at slot
// i x aggregate + a (nccl-tests' iter*agg_iters+aiter).
void IssueTimedBatch(const ModeRun& m) {
  const size_t aggregate = static_cast<size_t>(m.o.aggregate);
  for (size_t i = 0; i < static_cast<size_t>(m.o.iters); ++i) {
    if (aggregate == 1) {
      RunAt(m, i);
      continue;
    }
    m.comm.IssueTogether([&] {
      for (size_t a = 0; a < aggregate; ++a) RunAt(m, i * aggregate + a);
    });
  }
}

void WarmUp(const ModeRun& m) {
  Watchdog::Scope guard(m.o.watchdog, [&] { return Describe(m, std::to_string(m.o.warmup) + " warm-up iterations"); });
  for (int i = 0; i < m.o.warmup; ++i) RunAt(m, static_cast<size_t>(i));
  m.comm.Synchronize();
  m.comm.Barrier();
  if (m.o.across != MPI_COMM_NULL) {
    InCommunication waiting;
    TB_CHECK_MPI(MPI_Barrier(m.o.across));  // every communicator of the split times this size at once
  }
}

// Times the batch after the warm-up; returns this rank's mean seconds per operation. With --cuda-graph the batch is
// captured once and the graph launched cuda_graph times, as nccl-tests' -G: only the launches are timed.
double TimeOperation(const ModeRun& m) {
  WarmUp(m);
  const SweepOptions& o = m.o;
  Watchdog::Scope guard(o.watchdog, [&] { return Describe(m, "timed batch of " + std::to_string(o.iters) + " iterations"); });
  std::unique_ptr<CapturedOps> graph;
  if (o.cuda_graph > 0) {
    graph = m.comm.Capture([&] { IssueTimedBatch(m); });
    m.comm.Barrier();
  }
  if (o.before_timed_batch) o.before_timed_batch();
  const double start = NowSeconds();
  if (graph) {
    for (int l = 0; l < o.cuda_graph; ++l) graph->Launch();
  } else {
    IssueTimedBatch(m);
  }
  m.comm.Synchronize();
  const double operations = static_cast<double>(o.iters) * o.aggregate * std::max(o.cuda_graph, 1);
  return (NowSeconds() - start) / operations;
}

// Where a row's figures are combined: the sweep's communicator, or `across` under a split, whose rank each of the
// communicator's ranks is (launch_of).
struct RowScope {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<int> launch_of;
};

RowScope ScopeOf(Communicator& comm, const SweepOptions& o) {
  RowScope scope;
  scope.comm = o.across != MPI_COMM_NULL ? o.across : comm.host_comm();
  int mine = comm.rank();
  if (o.across != MPI_COMM_NULL) TB_CHECK_MPI(MPI_Comm_rank(o.across, &mine));
  scope.launch_of.resize(static_cast<size_t>(comm.size()));
  TB_CHECK_MPI(MPI_Allgather(&mine, 1, MPI_INT, scope.launch_of.data(), 1, MPI_INT, comm.host_comm()));
  return scope;
}

// Hands the input of a verified run to `before_check` as host memory: the buffer itself on the host; on a device, a
// host copy of the buffer up to the input's end, uploaded again afterwards (a test feature's cost, only when set).
void ApplyBeforeCheck(const ModeRun& m, CommBuffer& buffer, const void* input) {
  const size_t offset = static_cast<size_t>(static_cast<const char*>(input) - static_cast<char*>(buffer.data()));
  if (m.comm.memory() == MemoryKind::kHost) {
    m.o.before_check(static_cast<char*>(buffer.data()) + offset, m.c.send_elements);
    return;
  }
  std::vector<char> image(offset + m.c.send_elements * DataTypeSize(m.o.type));
  m.comm.Download(buffer, image.data(), image.size());
  m.o.before_check(image.data() + offset, m.c.send_elements);
  m.comm.Upload(buffer, image.data(), image.size());
}

// Fills iteration `iteration`'s operands where they live: the receive side with the sentinel (so that a missing
// write is caught), then the input.
void FillOperands(const ModeRun& m, const BufferChecks& checks, size_t iteration) {
  const Operands operands = OperandsFor(m, iteration);
  const int rank = m.comm.rank();
  void* input = const_cast<void*>(operands.send);
  if (m.in_place) {
    const size_t slot_start = m.c.in_place_send_offset * DataTypeSize(m.o.type);
    void* slot = static_cast<char*>(input) - slot_start;
    checks.fill_sentinel(m.o.type, slot, std::max(m.c.send_elements, m.c.recv_elements));
  } else {
    checks.fill_sentinel(m.o.type, operands.recv, m.c.recv_elements);
  }
  checks.fill_input(m.o.type, input, m.c.send_elements, rank);
  if (m.o.before_check) ApplyBeforeCheck(m, m.in_place ? *m.buffers.recv : *m.buffers.send, input);
}

// One verified run, at the slot of check iteration `iteration`: fill, run (through a graph with --cuda-graph, as
// timed), count the wrong elements where the buffer lives. Adds each wrong element to its source rank's count in
// `by_source` (data movement only; by the scope's numbers).
WrongElements CheckOperation(const ModeRun& m, size_t iteration, const RowScope& scope, std::vector<int64_t>& by_source) {
  const BufferChecks& checks = ChecksFor(m.comm.memory());
  FillOperands(m, checks, iteration);
  m.comm.Barrier();
  {
    Watchdog::Scope guard(m.o.watchdog, [&] { return Describe(m, "verification run"); });
    if (m.o.cuda_graph > 0) {
      m.comm.Capture([&] { RunAt(m, iteration); })->Launch();
    } else {
      RunAt(m, iteration);
    }
    m.comm.Synchronize();
  }
  const ExpectedLayout layout = m.def.expected(m.c, m.comm.rank(), m.comm.size(), m.o.reduce_op, m.o.root);
  WrongElements wrong = checks.count_wrong(m.o.type, OperandsFor(m, iteration).recv, m.c.recv_elements, layout);
  for (size_t source = 0; source < wrong.by_source.size(); ++source) {
    by_source[static_cast<size_t>(scope.launch_of[source])] += wrong.by_source[source];
  }
  return wrong;
}

// The check iterations of one mode, summed over every rank of the scope; this rank's first wrong element kept.
void VerifyMode(const ModeRun& m, const RowScope& scope, ModeResult& result) {
  int scope_size = 0;
  TB_CHECK_MPI(MPI_Comm_size(scope.comm, &scope_size));
  std::vector<int64_t> by_source(static_cast<size_t>(scope_size), 0);
  int64_t wrong = 0;
  for (int i = 0; i < m.o.check_iters; ++i) {
    const WrongElements found = CheckOperation(m, static_cast<size_t>(i), scope, by_source);
    if (found.count > 0 && wrong == 0) result.first_wrong = DescribeFirstWrong(found);
    wrong += found.count;
  }
  TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, scope.comm));
  TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, by_source.data(), scope_size, MPI_INT64_T, MPI_SUM, scope.comm));
  result.wrong = wrong;
  result.wrong_sources = RanksWithCounts(by_source);
}

ModeResult MeasureMode(const ModeRun& run, const RowScope& scope, double bus_factor) {
  ModeResult m;
  m.measured = true;
  const double mine = TimeOperation(run);
  // Each rank's mean, then max (the time), min and average across ranks (of every communicator of a split).
  std::vector<double> all = AllGatherDoubles(scope.comm, mine);
  double max = *std::max_element(all.begin(), all.end());
  double min = *std::min_element(all.begin(), all.end());
  double sum = 0;
  for (double t : all) sum += t;
  m.time_us = max * 1e6;
  m.time_rank_min_us = min * 1e6;
  m.time_rank_avg_us = sum / all.size() * 1e6;
  m.algbw_GBps = static_cast<double>(run.c.size_bytes) / max / 1e9;
  m.busbw_GBps = m.algbw_GBps * bus_factor;
  // On one rank an in-place operation has nothing to move (its data is already where it goes): the time is the
  // call's overhead and S / t no bandwidth of anything (it printed thousands of GB/s), so the rates are N/A.
  if (run.in_place && run.comm.size() == 1) m.algbw_GBps = m.busbw_GBps = std::nan("");
  const bool per_nic = run.o.split.nodes > 1 && HasPerNicRate(run.def);
  m.nic_busbw_GBps = per_nic ? PerNicBusBw(m.busbw_GBps, run.o.split.nodes, run.comm.size()) : std::nan("");
  if (run.o.check_iters > 0) VerifyMode(run, scope, m);
  return m;
}

// This rank's first wrong element in the op's rows, once per op: "all_gather 4096 B in-place: element 0 = 1000, ...".
void WarnFirstWrong(const OpResult& op) {
  for (const SizeResult& row : op.rows) {
    for (const auto& [m, mode] : {std::pair{&row.out_of_place, "out-of-place"}, std::pair{&row.in_place, "in-place"}}) {
      if (m->first_wrong.empty()) continue;
      Warn(Format("%s %llu B %s: the first wrong element here: %s", op.def->name,
                  static_cast<unsigned long long>(row.size_bytes), mode, m->first_wrong.c_str()));
      return;
    }
  }
}

}  // namespace

std::string RanksWithCounts(const std::vector<int64_t>& by_rank) {
  std::string ranks;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r] == 0) continue;
    if (!ranks.empty()) ranks += ',';
    ranks += std::to_string(r);
  }
  return ranks;
}

BufferBytes SweepBufferBytes(const CollectiveDef& def, const SweepOptions& o, int n, int rank) {
  const size_t type_size = DataTypeSize(o.type);
  const uint64_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  const CollectiveCounts big = def.counts(largest, type_size, n, rank);
  return {AlignUp(std::max<size_t>(big.send_elements * type_size, type_size)),
          AlignUp(std::max<size_t>(std::max(big.send_elements, big.recv_elements) * type_size, type_size))};
}

namespace {

// What the sweep needs of its communicator, refused as an input error before any buffer is allocated.
void CheckSweepable(const Communicator& comm, const SweepOptions& o) {
  if (!comm.Supports(o.type)) {
    throw InputError("the " + comm.backend() + " backend cannot run " + DataTypeName(o.type) +
                     " collectives (--dtype); use float, double or int32, or --backend cuda");
  }
  if (o.cuda_graph > 0 && !comm.CanCapture()) {
    throw InputError(Format("--cuda-graph needs the NCCL backend: the %s backend's operations cannot be captured "
                            "into a CUDA graph", comm.backend().c_str()));
  }
}

OpResult StartOp(const Communicator& comm, const CollectiveDef& def, const SweepOptions& o) {
  OpResult op;
  op.def = &def;
  op.n_ranks = comm.size();
  op.nodes = o.split.nodes;
  op.bus_factor = def.bus_factor(comm.size());
  op.backend = comm.backend();
  op.verified_on = ChecksFor(comm.memory()).where;
  return op;
}

// One row: each mode asked for, timed and verified.
SizeResult MeasureSize(Communicator& comm, const CollectiveDef& def, Buffers& buffers, const CollectiveCounts& c,
                       const SweepOptions& o, const RowScope& scope, double bus_factor) {
  const size_t type_size = DataTypeSize(o.type);
  SizeResult row;
  row.size_bytes = c.size_bytes;
  row.count = c.size_bytes / type_size;
  for (const bool in_place : {false, true}) {
    if (!(in_place ? o.in_place : o.out_of_place)) continue;
    const ModeRun run{comm, def, buffers, c, o, in_place, SlotsFor(buffers, c, type_size, in_place)};
    (in_place ? row.in_place : row.out_of_place) = MeasureMode(run, scope, bus_factor);
  }
  return row;
}

}  // namespace

SweepResult RunSweep(Communicator& comm, const SweepOptions& o,
                     const std::function<void(const OpResult&, const SizeResult&)>& on_row) {
  CheckSweepable(comm, o);
  const size_t type_size = DataTypeSize(o.type);
  SweepResult result;
  const RowScope scope = ScopeOf(comm, o);
  for (const CollectiveDef* def : o.ops) {
    OpResult op = StartOp(comm, *def, o);
    // Buffers sized once for the largest size, as nccl-tests does; reused for every size.
    const BufferBytes bytes = SweepBufferBytes(*def, o, comm.size(), comm.rank());
    Buffers buffers;
    buffers.send = comm.Allocate(bytes.send);
    buffers.recv = comm.Allocate(bytes.recv);
    for (uint64_t requested : o.sizes) {
      if (o.stop_requested && o.stop_requested()) {
        result.complete = false;
        break;
      }
      const CollectiveCounts c = def->counts(requested, type_size, comm.size(), comm.rank());
      if (c.op_count == 0) continue;  // smaller than one element per rank for this operation
      const SizeResult row = MeasureSize(comm, *def, buffers, c, o, scope, op.bus_factor);
      for (const ModeResult* m : {&row.out_of_place, &row.in_place}) {
        if (m->wrong > 0) result.wrong_total += m->wrong;
      }
      op.rows.push_back(row);
      if (on_row) on_row(op, row);
    }
    WarnFirstWrong(op);
    result.ops.push_back(std::move(op));
    if (!result.complete) break;
  }
  return result;
}

namespace {

std::vector<std::string> ModeCells(const ModeResult& m) {
  if (!m.measured) return {"-", "-", "-", "-"};
  return {FormatFixed(m.time_us, 2), FormatFixed(m.algbw_GBps, 2), FormatFixed(m.busbw_GBps, 2),
          m.wrong < 0 ? "N/A" : std::to_string(m.wrong)};
}


// "4 ranks", or under a split "2 communicators of 2 ranks at once (--split intra)".
std::string RanksText(const OpResult& op, const SweepOptions& o) {
  if (o.split.split == "all") return std::to_string(op.n_ranks) + " ranks";
  return Format("%d communicator%s of %d ranks at once (--split %s)", o.split.communicators,
                o.split.communicators == 1 ? "" : "s", op.n_ranks, o.split.split.c_str());
}

// "1 op per iteration, issued one by one"; "4 ops per iteration issued together (--aggregate), the timed batch
// launched 10 times as a CUDA graph (--cuda-graph)".
std::string IssueText(const SweepOptions& o) {
  std::string text = o.aggregate == 1 ? "1 op per iteration"
                                      : Format("%d ops per iteration issued together (--aggregate)", o.aggregate);
  if (o.cuda_graph > 0) return text + Format(", the timed batch launched %d times as a CUDA graph (--cuda-graph)", o.cuda_graph);
  return o.aggregate == 1 ? text + ", issued one by one" : text;
}

// The highest per-NIC rate of the op's rows, and its size; none when the op has no such rate here.
std::optional<std::pair<double, uint64_t>> PeakPerNic(const OpResult& op) {
  std::optional<std::pair<double, uint64_t>> peak;
  for (const SizeResult& row : op.rows) {
    for (const ModeResult* m : {&row.out_of_place, &row.in_place}) {
      if (m->measured && std::isfinite(m->nic_busbw_GBps) && (!peak || m->nic_busbw_GBps > peak->first)) {
        peak = std::make_pair(m->nic_busbw_GBps, row.size_bytes);
      }
    }
  }
  return peak;
}

}  // namespace

namespace {

// "NCCL_ALGO=NVLS" or "NCCL_ALGO unset".
std::string EnvironmentText(const char* name) {
  const char* value = std::getenv(name);
  return value ? Format("%s=%s", name, value) : Format("%s unset", name);
}

}  // namespace

std::string BusBwConvention(const OpResult& op) {
  const std::string definition = Format("algbw x %s (nccl-tests)", op.def->bus_factor_formula);
  if (op.backend != "nccl") return definition;
  return definition + Format("; NCCL's algorithm not known to the caller (%s, %s): the ring-equivalent figure, which "
                             "NVLS (NVLink SHARP, reducing in the switch) can lift above the links' rate",
                             EnvironmentText("NCCL_ALGO").c_str(), EnvironmentText("NCCL_NVLS_ENABLE").c_str());
}

std::vector<std::string> SweepHeaderLines(const OpResult& op, const SweepOptions& o) {
  std::vector<std::string> lines = {
      Format("# %s: %s, dtype %s, redop %s, root %d, iters %d, warmup %d, check-iters %d, busbw factor %s = %.4f",
             op.def->name, RanksText(op, o).c_str(), DataTypeName(o.type).c_str(),
             op.def->uses_reduce_op ? ReduceOpName(o.reduce_op).c_str() : "none", op.def->uses_root ? o.root : -1,
             o.iters, o.warmup, o.check_iters, op.def->bus_factor_formula, op.bus_factor),
      Format("# %s; buffer offsets rotate between iterations; %s", IssueText(o).c_str(),
             o.check_iters > 0 ? (std::string("verified on the ") + op.verified_on).c_str() : "not verified"),
      "#",
      Format("# %66s%-37s%s", "", "out-of-place", "in-place"),
  };
  if (op.backend == "nccl") lines.insert(lines.begin() + 2, "# busbw: " + BusBwConvention(op));
  for (std::string& line : SweepTable().HeaderLines()) lines.push_back(std::move(line));
  return lines;
}

std::string SweepRowLine(const SizeResult& row, const OpResult& op, const SweepOptions& o) {
  std::vector<std::string> cells = {std::to_string(row.size_bytes), std::to_string(row.count), DataTypeName(o.type),
                                    op.def->uses_reduce_op ? ReduceOpName(o.reduce_op) : "none",
                                    std::to_string(op.def->uses_root ? o.root : -1)};
  for (const ModeResult* m : {&row.out_of_place, &row.in_place}) {
    for (std::string& cell : ModeCells(*m)) cells.push_back(std::move(cell));
  }
  return SweepTable().Row(cells);
}

std::vector<std::string> SweepFooterLines(const SweepResult& result) {
  std::vector<std::string> lines;
  lines.push_back(Format("# Out of bounds values : %lld %s", static_cast<long long>(result.wrong_total),
                         result.wrong_total == 0 ? "OK" : "FAILED"));
  for (const OpResult& op : result.ops) {
    // nccl-tests' "Avg bus bandwidth": mean busbw over the sizes (out-of-place and in-place rows alike).
    double sum = 0;
    int terms = 0;
    for (const SizeResult& row : op.rows) {
      for (const ModeResult* m : {&row.out_of_place, &row.in_place}) {
        if (m->measured && std::isfinite(m->busbw_GBps)) {
          sum += m->busbw_GBps;
          ++terms;
        }
      }
    }
    if (terms > 0) lines.push_back(Format("# Avg bus bandwidth    : %.4f GB/s (%s)", sum / terms, op.def->name));
    if (const auto peak = PeakPerNic(op)) {
      lines.push_back(Format("# Per-NIC rate         : %.4f GB/s at %llu B (%s; busbw x (k-1)/(n-1), k = %d nodes, n = %d "
                             "ranks: each rank's share of the inter-node traffic)",
                             peak->first, static_cast<unsigned long long>(peak->second), op.def->name, op.nodes,
                             op.n_ranks));
    }
  }
  if (!result.complete) lines.push_back("# Sweep stopped early by a signal: the report is marked interrupted");
  lines.push_back("#");
  return lines;
}

namespace {

namespace sc = schema::collective;

void SetOpAttributes(Group& group, const OpResult& op, const SweepOptions& o) {
  schema::Set(group, sc::op, op.def->name);
  schema::Set(group, sc::dtype, DataTypeName(o.type));
  schema::Set(group, sc::redop, op.def->uses_reduce_op ? ReduceOpName(o.reduce_op) : std::string("none"));
  schema::Set(group, sc::root, op.def->uses_root ? o.root : -1);
  schema::Set(group, sc::n_ranks, op.n_ranks);
  schema::Set(group, sc::iters, o.iters);
  schema::Set(group, sc::warmup, o.warmup);
  schema::Set(group, sc::check_iters, o.check_iters);
  schema::Set(group, sc::bus_factor, op.bus_factor);
  schema::Set(group, sc::bus_factor_formula, op.def->bus_factor_formula);
  schema::Set(group, sc::busbw_convention, BusBwConvention(op));
  schema::Set(group, sc::split, o.split.split);
  schema::Set(group, sc::communicators, o.split.communicators);
  schema::Set(group, sc::nodes, o.split.nodes);
}

// The results table, a row per size; each mode's columns NaN (wrong -1) where the mode did not run.
void AddResultsTable(Group& group, const OpResult& op) {
  namespace r = sc::results;
  const double nan = std::nan("");
  schema::RecordTable<SizeResult> table(sc::kResults);
  table.Column(r::size_bytes, [](const SizeResult& row) { return static_cast<int64_t>(row.size_bytes); })
      .Column(r::count, [](const SizeResult& row) { return static_cast<int64_t>(row.count); });
  for (const std::string& mode : r::kModes) {
    const auto of = [in_place = mode == "in_place"](const SizeResult& row) -> const ModeResult& {
      return in_place ? row.in_place : row.out_of_place;
    };
    table.Column(r::time_us, [=](const SizeResult& row) { return of(row).measured ? of(row).time_us : nan; }, mode)
        .Column(r::time_rank_min_us, [=](const SizeResult& row) { return of(row).measured ? of(row).time_rank_min_us : nan; }, mode)
        .Column(r::time_rank_avg_us, [=](const SizeResult& row) { return of(row).measured ? of(row).time_rank_avg_us : nan; }, mode)
        .Column(r::algbw_GBps, [=](const SizeResult& row) { return of(row).measured ? of(row).algbw_GBps : nan; }, mode)
        .Column(r::busbw_GBps, [=](const SizeResult& row) { return of(row).measured ? of(row).busbw_GBps : nan; }, mode)
        .Column(r::nic_busbw_GBps, [=](const SizeResult& row) { return of(row).measured ? of(row).nic_busbw_GBps : nan; }, mode)
        .Column(r::wrong, [=](const SizeResult& row) { return of(row).measured ? of(row).wrong : int64_t{-1}; }, mode)
        .Column(r::wrong_sources, [=](const SizeResult& row) { return of(row).wrong_sources; }, mode);
  }
  table.Write(group, op.rows);
}

}  // namespace

void AddSweepToReport(Report& report, const SweepResult& result, const SweepOptions& o) {
  Group& summary = schema::GroupOf(report.root, schema::kSummary);
  for (const OpResult& op : result.ops) {
    Group& group = schema::GroupOf(report.root, schema::kCollective, op.def->name);
    SetOpAttributes(group, op, o);
    AddResultsTable(group, op);
    double peak = 0;
    int64_t peak_size = 0;
    for (const bool in_place : {false, true}) {
      for (const SizeResult& row : op.rows) {
        const ModeResult& m = in_place ? row.in_place : row.out_of_place;
        if (m.measured && m.busbw_GBps > peak) {
          peak = m.busbw_GBps;
          peak_size = static_cast<int64_t>(row.size_bytes);
        }
      }
    }
    schema::Set(summary, schema::summary::peak_busbw_GBps, op.def->name, peak);
    schema::Set(summary, schema::summary::peak_busbw_size_bytes, op.def->name, peak_size);
  }
  schema::Set(summary, schema::summary::wrong_elements_total, result.wrong_total);
}

}  // namespace tb
