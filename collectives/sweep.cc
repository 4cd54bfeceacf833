#include "sweep.h"

#include "schema.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "clock.h"
#include "definitions.h"
#include "console.h"
#include "error.h"
#include "mpi_util.h"

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

// Operand pointers for one mode: separate buffers out of place; one buffer holding both in place.
struct Operands {
  const void* send;
  void* recv;
};

Operands OperandsFor(Buffers& buffers, const CollectiveCounts& c, size_t type_size, bool in_place) {
  if (!in_place) return {buffers.send->data(), buffers.recv->data()};
  char* base = static_cast<char*>(buffers.recv->data());
  return {base + c.in_place_send_offset * type_size, base + c.in_place_recv_offset * type_size};
}

std::string Describe(const CollectiveDef& def, const CollectiveCounts& c, DataType type, bool in_place,
                     const std::string& what) {
  return def.name + std::string(" ") + (in_place ? "in-place" : "out-of-place") + ", " + std::to_string(c.size_bytes) +
         " B, " + DataTypeName(type) + ", " + what;
}

// Times `iters` back-to-back operations after `warmup` untimed ones; returns this rank's mean seconds per op.
double TimeOperation(Communicator& comm, const CollectiveDef& def, Operands operands, const CollectiveCounts& c,
                     const SweepOptions& o, bool in_place) {
  {
    Watchdog::Scope guard(o.watchdog, [&] {
      return Describe(def, c, o.type, in_place, std::to_string(o.warmup) + " warm-up iterations");
    });
    for (int i = 0; i < o.warmup; ++i) def.run(comm, operands.send, operands.recv, c, o.type, o.reduce_op, o.root);
    comm.Synchronize();
    comm.Barrier();
    if (o.across != MPI_COMM_NULL) {
      InCommunication waiting;
      TB_CHECK_MPI(MPI_Barrier(o.across));  // every communicator of the split times this size at once
    }
  }
  Watchdog::Scope guard(o.watchdog, [&] {
    return Describe(def, c, o.type, in_place, "timed batch of " + std::to_string(o.iters) + " iterations");
  });
  if (o.before_timed_batch) o.before_timed_batch();
  double start = NowSeconds();
  for (int i = 0; i < o.iters; ++i) def.run(comm, operands.send, operands.recv, c, o.type, o.reduce_op, o.root);
  comm.Synchronize();
  return (NowSeconds() - start) / o.iters;
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

// One verified run: fill inputs, run, compare every defined output element. Returns the wrong count, and adds each
// wrong element to its source rank's count in `by_source` (data movement only; by the scope's numbers).
int64_t CheckOperation(Communicator& comm, const CollectiveDef& def, Buffers& buffers, const CollectiveCounts& c,
                       const SweepOptions& o, bool in_place, const RowScope& scope, std::vector<int64_t>& by_source) {
  const int rank = comm.rank(), n = comm.size();
  const size_t type_size = DataTypeSize(o.type);
  // Host images of the buffers: the receive side starts as sentinel so that a missing write is caught.
  std::vector<char> recv_image(buffers.recv->bytes());
  for (size_t i = 0; i < recv_image.size() / type_size; ++i) StoreElement(o.type, recv_image.data(), i, kSentinel);
  if (in_place) {
    for (size_t i = 0; i < c.send_elements; ++i) {
      StoreElement(o.type, recv_image.data(), c.in_place_send_offset + i, InputValue(rank, i));
    }
    if (o.before_check) o.before_check(recv_image.data() + c.in_place_send_offset * type_size, c.send_elements);
    comm.Upload(*buffers.recv, recv_image.data(), recv_image.size());
  } else {
    std::vector<char> send_image(buffers.send->bytes());
    for (size_t i = 0; i < c.send_elements; ++i) StoreElement(o.type, send_image.data(), i, InputValue(rank, i));
    if (o.before_check) o.before_check(send_image.data(), c.send_elements);
    comm.Upload(*buffers.send, send_image.data(), send_image.size());
    comm.Upload(*buffers.recv, recv_image.data(), recv_image.size());
  }
  comm.Barrier();
  {
    Watchdog::Scope guard(o.watchdog, [&] { return Describe(def, c, o.type, in_place, "verification run"); });
    Operands operands = OperandsFor(buffers, c, type_size, in_place);
    def.run(comm, operands.send, operands.recv, c, o.type, o.reduce_op, o.root);
    comm.Synchronize();
  }
  comm.Download(*buffers.recv, recv_image.data(), recv_image.size());
  const size_t recv_offset = in_place ? c.in_place_recv_offset : 0;
  int64_t wrong = 0;
  for (size_t i = 0; i < c.recv_elements; ++i) {
    double expected = 0;
    if (!def.expected(c, rank, n, i, o.reduce_op, o.root, &expected)) continue;
    if (ValueMatches(o.type, LoadElement(o.type, recv_image.data(), recv_offset + i), expected, n)) continue;
    ++wrong;
    if (def.source) ++by_source[static_cast<size_t>(scope.launch_of[static_cast<size_t>(def.source(c, rank, n, i, o.root))])];
  }
  return wrong;
}

// "1", "0,2": the ranks with a non-zero count.
std::string RanksWithCounts(const std::vector<int64_t>& by_source) {
  std::string ranks;
  for (size_t r = 0; r < by_source.size(); ++r) {
    if (by_source[r] > 0) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  }
  return ranks;
}

ModeResult MeasureMode(Communicator& comm, const CollectiveDef& def, Buffers& buffers, const CollectiveCounts& c,
                       const SweepOptions& o, bool in_place, const RowScope& scope, double bus_factor) {
  ModeResult m;
  m.measured = true;
  const size_t type_size = DataTypeSize(o.type);
  double mine = TimeOperation(comm, def, OperandsFor(buffers, c, type_size, in_place), c, o, in_place);
  // Each rank's mean, then max (the time), min and average across ranks (of every communicator of a split).
  std::vector<double> all = AllGatherDoubles(scope.comm, mine);
  double max = *std::max_element(all.begin(), all.end());
  double min = *std::min_element(all.begin(), all.end());
  double sum = 0;
  for (double t : all) sum += t;
  m.time_us = max * 1e6;
  m.time_rank_min_us = min * 1e6;
  m.time_rank_avg_us = sum / all.size() * 1e6;
  m.algbw_GBps = static_cast<double>(c.size_bytes) / max / 1e9;
  m.busbw_GBps = m.algbw_GBps * bus_factor;
  // On one rank an in-place operation has nothing to move (its data is already where it goes): the time is the
  // call's overhead and S / t no bandwidth of anything (it printed thousands of GB/s), so the rates are N/A.
  if (in_place && comm.size() == 1) m.algbw_GBps = m.busbw_GBps = std::nan("");
  const bool per_nic = o.split.nodes > 1 && HasPerNicRate(def);
  m.nic_busbw_GBps = per_nic ? PerNicBusBw(m.busbw_GBps, o.split.nodes, comm.size()) : std::nan("");
  if (o.check_iters > 0) {
    int64_t wrong = 0;
    int scope_size = 0;
    TB_CHECK_MPI(MPI_Comm_size(scope.comm, &scope_size));
    std::vector<int64_t> by_source(static_cast<size_t>(scope_size), 0);
    for (int i = 0; i < o.check_iters; ++i) wrong += CheckOperation(comm, def, buffers, c, o, in_place, scope, by_source);
    TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, scope.comm));
    TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, by_source.data(), scope_size, MPI_INT64_T, MPI_SUM, scope.comm));
    m.wrong = wrong;
    m.wrong_sources = RanksWithCounts(by_source);
  }
  return m;
}


}  // namespace

BufferBytes SweepBufferBytes(const CollectiveDef& def, const SweepOptions& o, int n, int rank) {
  const size_t type_size = DataTypeSize(o.type);
  const uint64_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  const CollectiveCounts big = def.counts(largest, type_size, n, rank);
  return {std::max<size_t>(big.send_elements * type_size, type_size),
          std::max<size_t>(std::max(big.send_elements, big.recv_elements) * type_size, type_size)};
}

SweepResult RunSweep(Communicator& comm, const SweepOptions& o,
                     const std::function<void(const OpResult&, const SizeResult&)>& on_row) {
  const int n = comm.size();
  const size_t type_size = DataTypeSize(o.type);
  if (!comm.Supports(o.type)) {
    throw InputError("the " + comm.backend() + " backend cannot run " + DataTypeName(o.type) +
                     " collectives (--dtype); use float, double or int32, or --backend cuda");
  }
  SweepResult result;
  const RowScope scope = ScopeOf(comm, o);
  for (const CollectiveDef* def : o.ops) {
    OpResult op;
    op.def = def;
    op.n_ranks = n;
    op.nodes = o.split.nodes;
    op.bus_factor = def->bus_factor(n);
    // Buffers sized once for the largest size, as nccl-tests does; reused for every size.
    const BufferBytes bytes = SweepBufferBytes(*def, o, n, comm.rank());
    Buffers buffers;
    buffers.send = comm.Allocate(bytes.send);
    buffers.recv = comm.Allocate(bytes.recv);
    for (uint64_t requested : o.sizes) {
      if (o.stop_requested && o.stop_requested()) {
        result.complete = false;
        break;
      }
      CollectiveCounts c = def->counts(requested, type_size, n, comm.rank());
      if (c.op_count == 0) continue;  // smaller than one element per rank for this operation
      SizeResult row;
      row.size_bytes = c.size_bytes;
      row.count = c.size_bytes / type_size;
      if (o.out_of_place) row.out_of_place = MeasureMode(comm, *def, buffers, c, o, false, scope, op.bus_factor);
      if (o.in_place) row.in_place = MeasureMode(comm, *def, buffers, c, o, true, scope, op.bus_factor);
      for (const ModeResult* m : {&row.out_of_place, &row.in_place}) {
        if (m->wrong > 0) result.wrong_total += m->wrong;
      }
      op.rows.push_back(row);
      if (on_row) on_row(op, row);
    }
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

std::vector<std::string> SweepHeaderLines(const OpResult& op, const SweepOptions& o) {
  std::vector<std::string> lines = {
      Format("# %s: %s, dtype %s, redop %s, root %d, iters %d, warmup %d, check-iters %d, busbw factor %s = %.4f",
             op.def->name, RanksText(op, o).c_str(), DataTypeName(o.type).c_str(),
             op.def->uses_reduce_op ? ReduceOpName(o.reduce_op).c_str() : "none", op.def->uses_root ? o.root : -1,
             o.iters, o.warmup, o.check_iters, op.def->bus_factor_formula, op.bus_factor),
      "#",
      Format("# %66s%-37s%s", "", "out-of-place", "in-place"),
  };
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
