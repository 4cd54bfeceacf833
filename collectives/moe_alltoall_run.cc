// The MoE point measured: each rank's blocks planned from the routing, warm-up, dispatch and combine timed as batches,
// then verified row by row where the receiving rank reads them; the console lines and the report group.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>

#include "clock.h"
#include "console.h"
#include "error.h"
#include "moe_alltoall.h"
#include "mpi_util.h"
#include "random.h"
#include "schema.h"
#include "sweep.h"

namespace tb {
namespace {

// Bit patterns of the rows. A row word's sign bit and lowest exponent bit are clear, so every word is a finite bf16
// and never the sentinel, a NaN.
constexpr uint16_t kSentinelWord = 0xFFFF;
constexpr uint16_t kFiniteMask = 0x7F7F;

// Word j of a row whose hash (RowHash of its origin and token) is `row_hash`: rows differ by origin and token, and
// words within a row by position.
uint16_t RowWord(uint64_t row_hash, int64_t j) {
  const uint32_t mixed = static_cast<uint32_t>(row_hash) + static_cast<uint32_t>(j) * 0x9E3779B1u;
  return static_cast<uint16_t>((mixed >> 16) & kFiniteMask);
}

uint64_t RowHash(uint64_t seed, int origin, int64_t token) {
  return SplitMix64(seed ^ SplitMix64((static_cast<uint64_t>(origin) << 40) ^ static_cast<uint64_t>(token)));
}

// The rows of one block: which of `origin`'s tokens, in order, at `offset` (elements) of the buffer; `peer` is the rank
// at the other end of the block (its destination in a send buffer, its sender in a receive buffer).
struct RowBlock {
  int origin = 0;
  int peer = 0;
  std::vector<int64_t> tokens;
  size_t offset = 0;
};

// The blocks of one buffer, contiguous in rank order, with the AllToAllV's counts and offsets (elements).
struct BlockLayout {
  std::vector<RowBlock> blocks;
  std::vector<size_t> counts;
  std::vector<size_t> offsets;
  size_t elements = 0;
};

void PlaceBlocks(BlockLayout& layout, int64_t hidden) {
  for (RowBlock& block : layout.blocks) {
    block.offset = layout.elements;
    layout.counts.push_back(block.tokens.size() * static_cast<size_t>(hidden));
    layout.offsets.push_back(block.offset);
    layout.elements += layout.counts.back();
  }
}

// One rank's side of a point: dispatch sends `sent` (its tokens, by destination) and receives `received` (the peers'
// tokens, by sender); combine sends `received` back and receives into the layout of `sent`.
struct RankPlan {
  BlockLayout sent;
  BlockLayout received;
};

RankPlan PlanRank(const MoeShape& shape, int ranks, int rank) {
  RankPlan plan;
  for (int p = 0; p < ranks; ++p) {
    plan.sent.blocks.push_back({rank, p, {}, 0});
    plan.received.blocks.push_back({p, p, {}, 0});
  }
  for (int from = 0; from < ranks; ++from) {
    for (int64_t token = 0; token < shape.tokens; ++token) {
      for (const int to : TokenDestinations(shape, ranks, from, token)) {
        if (from == rank) plan.sent.blocks[static_cast<size_t>(to)].tokens.push_back(token);
        if (to == rank) plan.received.blocks[static_cast<size_t>(from)].tokens.push_back(token);
      }
    }
  }
  PlaceBlocks(plan.sent, shape.hidden);
  PlaceBlocks(plan.received, shape.hidden);
  return plan;
}

void WriteRows(const BlockLayout& layout, const MoeShape& shape, uint16_t* words) {
  for (const RowBlock& block : layout.blocks) {
    uint16_t* row = words + block.offset;
    for (const int64_t token : block.tokens) {
      const uint64_t hash = RowHash(shape.seed, block.origin, token);
      for (int64_t j = 0; j < shape.hidden; ++j) row[j] = RowWord(hash, j);
      row += shape.hidden;
    }
  }
}

// Wrong words of `words` against the rows `layout` says are there, each added to its block's peer in `by_peer`.
int64_t CountWrongRows(const BlockLayout& layout, const MoeShape& shape, const uint16_t* words,
                       std::vector<int64_t>& by_peer) {
  int64_t wrong = 0;
  for (const RowBlock& block : layout.blocks) {
    const uint16_t* row = words + block.offset;
    int64_t block_wrong = 0;
    for (const int64_t token : block.tokens) {
      const uint64_t hash = RowHash(shape.seed, block.origin, token);
      for (int64_t j = 0; j < shape.hidden; ++j) block_wrong += row[j] != RowWord(hash, j);
      row += shape.hidden;
    }
    by_peer[static_cast<size_t>(block.peer)] += block_wrong;
    wrong += block_wrong;
  }
  return wrong;
}

// `use` on a host image of the first `elements` words of `buffer`: the buffer itself on the host; on a device a copy,
// downloaded first when `download` and uploaded afterwards when `upload`.
template <typename Use>
void OnHostWords(Communicator& comm, CommBuffer& buffer, size_t elements, bool download, bool upload, Use use) {
  if (comm.memory() == MemoryKind::kHost) {
    use(static_cast<uint16_t*>(buffer.data()));
    return;
  }
  std::vector<uint16_t> image(elements);
  if (download) comm.Download(buffer, image.data(), elements * sizeof(uint16_t));
  use(image.data());
  if (upload) comm.Upload(buffer, image.data(), elements * sizeof(uint16_t));
}

struct MoeBuffers {
  std::unique_ptr<CommBuffer> dispatch_send;
  std::unique_ptr<CommBuffer> dispatch_recv;  // also combine's send: where an expert's outputs would be
  std::unique_ptr<CommBuffer> combine_recv;
};

// One point: what each step of its measurement needs.
struct PointRun {
  Communicator& comm;
  const MoeOptions& o;
  const MoeShape& shape;
  const RankPlan& plan;
  MoeBuffers& buffers;
};

void Dispatch(const PointRun& m) {
  m.comm.AllToAllV(m.buffers.dispatch_send->data(), m.plan.sent.counts, m.plan.sent.offsets,
                   m.buffers.dispatch_recv->data(), m.plan.received.counts, m.plan.received.offsets,
                   DataType::kBFloat16);
}

void Combine(const PointRun& m) {
  m.comm.AllToAllV(m.buffers.dispatch_recv->data(), m.plan.received.counts, m.plan.received.offsets,
                   m.buffers.combine_recv->data(), m.plan.sent.counts, m.plan.sent.offsets, DataType::kBFloat16);
}

std::string Describe(const PointRun& m, const std::string& what) {
  return Format("%s, %lld tokens per rank, %s", kMoeAllToAllOp, static_cast<long long>(m.shape.tokens), what.c_str());
}

void WarmUp(const PointRun& m) {
  Watchdog::Scope guard(m.o.watchdog, [&] { return Describe(m, std::to_string(m.o.warmup) + " warm-up pairs"); });
  for (int i = 0; i < m.o.warmup; ++i) {
    Dispatch(m);
    Combine(m);
  }
  m.comm.Synchronize();
  m.comm.Barrier();
}

// `iters` of `phase` back to back, started together; the max, min and average over ranks of each rank's mean.
MoePhaseResult TimePhase(const PointRun& m, const char* name, void (*phase)(const PointRun&)) {
  double mine = 0;
  {
    Watchdog::Scope guard(m.o.watchdog, [&] { return Describe(m, Format("timed batch of %d %ss", m.o.iters, name)); });
    m.comm.Barrier();
    if (m.o.before_timed_batch) m.o.before_timed_batch();
    const double start = NowSeconds();
    for (int i = 0; i < m.o.iters; ++i) phase(m);
    m.comm.Synchronize();
    mine = (NowSeconds() - start) / m.o.iters;
  }
  const std::vector<double> all = AllGatherDoubles(m.comm.host_comm(), mine);
  MoePhaseResult result;
  result.time_us = *std::max_element(all.begin(), all.end()) * 1e6;
  result.time_rank_min_us = *std::min_element(all.begin(), all.end()) * 1e6;
  double sum = 0;
  for (const double t : all) sum += t;
  result.time_rank_avg_us = sum / static_cast<double>(all.size()) * 1e6;
  return result;
}

void FillSentinel(Communicator& comm, CommBuffer& buffer, size_t elements) {
  OnHostWords(comm, buffer, elements, false, true,
              [&](uint16_t* words) { std::fill_n(words, elements, kSentinelWord); });
}

// Runs `phase` once, verified under the watchdog; returns the wrong words of `received` (its receive side).
int64_t CheckedRun(const PointRun& m, const char* name, void (*phase)(const PointRun&), CommBuffer& recv,
                   const BlockLayout& received, std::vector<int64_t>& by_peer) {
  m.comm.Barrier();
  {
    Watchdog::Scope guard(m.o.watchdog, [&] { return Describe(m, Format("verified %s", name)); });
    phase(m);
    m.comm.Synchronize();
  }
  int64_t wrong = 0;
  OnHostWords(m.comm, recv, received.elements, true, false,
              [&](uint16_t* words) { wrong = CountWrongRows(received, m.shape, words, by_peer); });
  return wrong;
}

void SumOverRanks(const PointRun& m, MoePhaseResult& phase, int64_t wrong, std::vector<int64_t>& by_peer) {
  TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, m.comm.host_comm()));
  TB_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, by_peer.data(), static_cast<int>(by_peer.size()), MPI_INT64_T, MPI_SUM,
                             m.comm.host_comm()));
  phase.wrong = wrong;
  phase.wrong_sources = RanksWithCounts(by_peer);
}

// The verified pairs: fresh rows dispatched into a sentinel-filled buffer and checked; then the expert's side rewritten
// with exactly the rows it should hold, so that combine, into a sentinel-filled buffer too, is judged on its own.
void VerifyPoint(const PointRun& m, MoePointResult& point) {
  const size_t n = static_cast<size_t>(m.comm.size());
  std::vector<int64_t> dispatch_by_sender(n, 0), combine_by_sender(n, 0);
  int64_t dispatch_wrong = 0, combine_wrong = 0;
  for (int i = 0; i < m.o.check_iters; ++i) {
    OnHostWords(m.comm, *m.buffers.dispatch_send, m.plan.sent.elements, false, true,
                [&](uint16_t* words) { WriteRows(m.plan.sent, m.shape, words); });
    FillSentinel(m.comm, *m.buffers.dispatch_recv, m.plan.received.elements);
    FillSentinel(m.comm, *m.buffers.combine_recv, m.plan.sent.elements);
    dispatch_wrong +=
        CheckedRun(m, "dispatch", Dispatch, *m.buffers.dispatch_recv, m.plan.received, dispatch_by_sender);
    OnHostWords(m.comm, *m.buffers.dispatch_recv, m.plan.received.elements, false, true,
                [&](uint16_t* words) { WriteRows(m.plan.received, m.shape, words); });
    combine_wrong += CheckedRun(m, "combine", Combine, *m.buffers.combine_recv, m.plan.sent, combine_by_sender);
  }
  SumOverRanks(m, point.dispatch, dispatch_wrong, dispatch_by_sender);
  SumOverRanks(m, point.combine, combine_wrong, combine_by_sender);
}

// Buffers of at least one element, so that a rank with nothing to send or receive still has distinct ones.
std::unique_ptr<CommBuffer> AllocateWords(Communicator& comm, size_t elements) {
  return comm.Allocate(std::max<size_t>(elements, 1) * sizeof(uint16_t));
}

MoePointResult MeasurePoint(Communicator& comm, const MoeOptions& o, int64_t tokens) {
  MoeShape shape = o.shape;
  shape.tokens = tokens;
  const RankPlan plan = PlanRank(shape, comm.size(), comm.rank());
  MoeBuffers buffers{AllocateWords(comm, plan.sent.elements), AllocateWords(comm, plan.received.elements),
                     AllocateWords(comm, plan.sent.elements)};
  const PointRun run{comm, o, shape, plan, buffers};
  MoeTraffic traffic = PlanMoeTraffic(shape, comm.size());
  traffic.node_of = o.node_of;
  MoePointResult point;
  point.tokens = tokens;
  point.bytes_per_rank = traffic.BytesPerRank();
  point.max_sent_bytes = traffic.MaxSentBytes();
  point.max_received_bytes = traffic.MaxReceivedBytes();
  point.local_fraction = traffic.LocalFraction();
  point.inter_node_fraction = traffic.InterNodeFraction();
  const bool across_nodes = std::set<int>(o.node_of.begin(), o.node_of.end()).size() > 1;
  WarmUp(run);
  point.dispatch = TimePhase(run, "dispatch", Dispatch);
  point.combine = TimePhase(run, "combine", Combine);
  for (MoePhaseResult* phase : {&point.dispatch, &point.combine}) {
    phase->GBps = point.bytes_per_rank / (phase->time_us * 1e-6) / 1e9;
    phase->inter_node_GBps = across_nodes ? phase->GBps * point.inter_node_fraction : std::nan("");
  }
  if (o.check_iters > 0) VerifyPoint(run, point);
  return point;
}

}  // namespace

MoeResult RunMoeAllToAll(Communicator& comm, const MoeOptions& o,
                         const std::function<void(const MoePointResult&)>& on_point) {
  MoeResult result;
  for (const int64_t tokens : o.tokens) {
    if (o.stop_requested && o.stop_requested()) {
      result.complete = false;
      break;
    }
    MoePointResult point = MeasurePoint(comm, o, tokens);
    for (const MoePhaseResult* phase : {&point.dispatch, &point.combine}) {
      if (phase->wrong > 0) result.wrong_total += phase->wrong;
    }
    if (on_point) on_point(point);
    result.points.push_back(std::move(point));
  }
  return result;
}

namespace {

TextTable MoeTable() {
  return TextTable({{"tokens", "", 8},
                    {"bytes/rank", "(B)", 13},
                    {"local", "(%)", 6},
                    {"inter", "(%)", 6},
                    {"time", "(us)", 12, "dispatch"},
                    {"GB/s", "", 9, "dispatch"},
                    {"#wrong", "", 7, "dispatch"},
                    {"time", "(us)", 12, "combine"},
                    {"GB/s", "", 9, "combine"},
                    {"#wrong", "", 7, "combine"}});
}

constexpr const char* kBytesConvention =
    "each token goes once to every rank holding one of its experts, itself included (DeepEP's normal kernels); "
    "bytes/rank = the mean over ranks of the bytes a rank sends in dispatch (= receives; combine moves the same "
    "rows back); GB/s = bytes/rank / time, GB = 1e9 bytes: DeepEP's per-rank figure (its intranode benchmark's "
    "bytes received over NVLink / time); inter (%) = the share of the rows that cross to another node";

}  // namespace

std::vector<std::string> MoeHeaderLines(const MoeOptions& o, int ranks) {
  std::vector<std::string> lines = {
      Format("# %s: %d ranks, %d experts (%d per rank), top-%d per token, hidden %lld, bfloat16, seed %llu, iters %d, "
             "warmup %d, check-iters %d",
             kMoeAllToAllOp, ranks, o.shape.experts, o.shape.experts / ranks, o.shape.top_k,
             static_cast<long long>(o.shape.hidden), static_cast<unsigned long long>(o.shape.seed), o.iters, o.warmup,
             o.check_iters)};
  for (std::string& line : WrapLines(kBytesConvention, "# ", "#   ")) lines.push_back(std::move(line));
  lines.push_back("#");
  for (std::string& line : MoeTable().HeaderLines()) lines.push_back(std::move(line));
  return lines;
}

namespace {

std::vector<std::string> PhaseCells(const MoePhaseResult& phase) {
  return {FormatFixed(phase.time_us, 2), FormatFixed(phase.GBps, 3),
          phase.wrong < 0 ? "N/A" : std::to_string(phase.wrong)};
}

}  // namespace

std::string MoeRowLine(const MoePointResult& point) {
  std::vector<std::string> cells = {std::to_string(point.tokens), Format("%.0f", point.bytes_per_rank),
                                    FormatFixed(point.local_fraction * 100, 1),
                                    FormatFixed(point.inter_node_fraction * 100, 1)};
  for (const MoePhaseResult* phase : {&point.dispatch, &point.combine}) {
    for (std::string& cell : PhaseCells(*phase)) cells.push_back(std::move(cell));
  }
  return MoeTable().Row(cells);
}

namespace {

namespace sm = schema::moe_alltoall;

void SetMoeAttributes(Group& group, const MoeOptions& o, int ranks) {
  schema::Set(group, sm::n_ranks, ranks);
  schema::Set(group, sm::nodes, static_cast<int64_t>(std::set<int>(o.node_of.begin(), o.node_of.end()).size()));
  schema::Set(group, sm::hidden, o.shape.hidden);
  schema::Set(group, sm::top_k, o.shape.top_k);
  schema::Set(group, sm::experts, o.shape.experts);
  schema::Set(group, sm::seed, static_cast<int64_t>(o.shape.seed));
  schema::Set(group, sm::dtype, DataTypeName(DataType::kBFloat16));
  schema::Set(group, sm::iters, o.iters);
  schema::Set(group, sm::warmup, o.warmup);
  schema::Set(group, sm::check_iters, o.check_iters);
  schema::Set(group, sm::bytes_convention, std::string(kBytesConvention));
}

}  // namespace

void AddMoeToReport(Report& report, const MoeResult& result, const MoeOptions& o, int ranks) {
  namespace r = sm::results;
  Group& group = schema::GroupOf(report.root, schema::kMoeAllToAll);
  SetMoeAttributes(group, o, ranks);
  schema::RecordTable<MoePointResult> table(sm::kResults);
  table.Column(r::tokens, [](const MoePointResult& p) { return p.tokens; })
      .Column(r::bytes_per_rank, [](const MoePointResult& p) { return p.bytes_per_rank; })
      .Column(r::max_sent_bytes, [](const MoePointResult& p) { return p.max_sent_bytes; })
      .Column(r::max_received_bytes, [](const MoePointResult& p) { return p.max_received_bytes; })
      .Column(r::local_fraction, [](const MoePointResult& p) { return p.local_fraction; })
      .Column(r::inter_node_fraction, [](const MoePointResult& p) { return p.inter_node_fraction; });
  for (const std::string& name : r::kPhases) {
    const auto of = [combine = name == "combine"](const MoePointResult& p) -> const MoePhaseResult& {
      return combine ? p.combine : p.dispatch;
    };
    table.Column(r::time_us, [=](const MoePointResult& p) { return of(p).time_us; }, name)
        .Column(r::time_rank_min_us, [=](const MoePointResult& p) { return of(p).time_rank_min_us; }, name)
        .Column(r::time_rank_avg_us, [=](const MoePointResult& p) { return of(p).time_rank_avg_us; }, name)
        .Column(r::GBps, [=](const MoePointResult& p) { return of(p).GBps; }, name)
        .Column(r::inter_node_GBps, [=](const MoePointResult& p) { return of(p).inter_node_GBps; }, name)
        .Column(r::wrong, [=](const MoePointResult& p) { return of(p).wrong; }, name)
        .Column(r::wrong_sources, [=](const MoePointResult& p) { return of(p).wrong_sources; }, name);
  }
  table.Write(group, result.points);
}

}  // namespace tb
