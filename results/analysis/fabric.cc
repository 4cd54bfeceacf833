#include "fabric.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "console.h"
#include "error.h"
#include "report.h"
#include "report_view.h"
#include "run_measurement.h"
#include "schema.h"
#include "units.h"

namespace tb {

const char* IntraKindName(IntraKind kind) {
  switch (kind) {
    case IntraKind::kNvSwitch: return "nvswitch";
    case IntraKind::kNvLinkPairs: return "nvlink-pairs";
    case IntraKind::kPcie: return "pcie";
    case IntraKind::kMeasured: return "measured";
  }
  return "?";
}

double PcieDirectionGBps(int gen, int lanes) {
  // GT/s per lane and the share of the bits that carry data.
  static const double kTransfers[] = {0, 2.5, 5, 8, 16, 32, 64};
  static const double kEncoding[] = {0, 0.8, 0.8, 128.0 / 130, 128.0 / 130, 128.0 / 130, 242.0 / 256};
  if (gen < 1 || gen > 6) return 0;
  return kTransfers[gen] * kEncoding[gen] / 8.0 * lanes;
}

namespace {

// The intra-node link of a declared fabric, or why it has none for `ranks_per_node` > 1.
std::string IntraLinkOf(const Fabric& fabric, LinkParameters& link) {
  const IntraLink& in = fabric.intra;
  if (in.kind == IntraKind::kMeasured) {
    link = in.measured;
    if (!link.fitted) {
      return "fabric '" + fabric.name + "': its report '" + in.report + "' measured no usable all_reduce sweep";
    }
    link.origin = "measured: all_reduce sweep of '" + in.report + "'" +
                  (in.emulated.empty() ? "" : " (" + in.emulated + " emulated)") + ", fitted per size band" +
                  (in.p2p_GBps ? Format(", p2p %g GB/s", *in.p2p_GBps) : std::string());
    return "";
  }
  if (!in.all_reduce_busbw_GBps || !in.latency_us) {
    return "fabric '" + fabric.name + "' declares no " +
           (!in.all_reduce_busbw_GBps ? "intra_allreduce_busbw_GBps" : "intra_latency_us") +
           ": layouts of several GPUs per node are not projected";
  }
  link.alpha_s = *in.latency_us * 1e-6;
  link.beta_s_per_byte = 1.0 / (*in.all_reduce_busbw_GBps * 1e9);
  link.origin = Format("%s, all_reduce busbw %g GB/s, latency %g us%s (%s)", IntraKindName(in.kind),
                       *in.all_reduce_busbw_GBps, *in.latency_us,
                       in.p2p_GBps ? Format(", p2p %g GB/s", *in.p2p_GBps).c_str() : "", in.source.c_str());
  return "";
}

// The network's per-rank parameters with `ranks_per_node` ranks sharing the node's NICs, or why it has none.
std::string InterLinkOf(const Fabric& fabric, int ranks_per_node, LinkParameters& link) {
  const Network& net = fabric.network;
  if (!net.nics_per_node || !net.nic_gbps || !net.latency_us) {
    return "fabric '" + fabric.name + "' declares no " +
           (!net.nics_per_node ? "nics_per_node" : !net.nic_gbps ? "nic_gbps" : "network_latency_us") +
           ": layouts of several nodes are not projected";
  }
  const double per_rank_gbps = net.NodeGbps() / std::max(1, ranks_per_node);
  link.alpha_s = *net.latency_us * 1e-6;
  link.beta_s_per_byte = 8.0 / (per_rank_gbps * 1e9);
  link.origin = Format("%d x %g Gbit/s NICs per node, %g Gbit/s per rank with %d rank%s per node, latency %g us (%s)",
                       *net.nics_per_node, *net.nic_gbps, per_rank_gbps, ranks_per_node,
                       ranks_per_node == 1 ? "" : "s", *net.latency_us, net.source.c_str());
  return "";
}

}  // namespace

FabricLinks LinksOnFabric(const Fabric& fabric, int nodes, int ranks_per_node) {
  FabricLinks out;
  if (ranks_per_node > 1) out.missing = IntraLinkOf(fabric, out.links.intra);
  if (out.missing.empty() && nodes > 1) out.missing = InterLinkOf(fabric, ranks_per_node, out.links.inter);
  return out;
}

namespace {

// The all_reduce sweep of a collectives report of one node; `where` starts each error ("FILE:LINE: fabric 'x': ").
void ReadSweep(const Report& report, const std::string& where, IntraLink& in) {
  if (!schema::FindGroup(report.root, schema::kCollective, "all_reduce")) {
    throw InputError(where + "intra_report '" + in.report + "' has no all_reduce sweep (run collectives --ops "
                     "all_reduce on one node)");
  }
  const std::vector<AllReduceSample> samples = ReadAllReduceSamples(report, in.report_path);
  for (const AllReduceSample& s : samples) {
    if (s.nodes != 1) {
      throw InputError(where + "intra_report '" + in.report + "' measured " + std::to_string(s.nodes) +
                       " nodes: a measured intra-node link comes from one node (or collectives --split intra)");
    }
  }
  in.measured = FitIntraBands(samples);
}

// The median pair rate of a p2p report of one node.
void ReadPairRate(const Report& report, const std::string& where, IntraLink& in) {
  const Group* group = schema::FindGroup(report.root, schema::kP2p);
  const std::optional<double> nodes = schema::Number(group, schema::p2p::nodes);
  const std::optional<double> rate = schema::Number(group, schema::p2p::median_uni_GBps);
  if (!nodes || *nodes != 1) {
    throw InputError(where + "intra_report '" + in.report + "' is a p2p run of " +
                     (nodes ? Format("%g nodes", *nodes) : std::string("unknown nodes")) +
                     ": a measured intra-node link comes from one node");
  }
  if (!rate || !(*rate > 0)) throw InputError(where + "intra_report '" + in.report + "' has no p2p median rate");
  if (in.p2p_GBps) {
    throw InputError(where + "intra_p2p_GBps is declared and measured by the p2p report '" + in.report +
                     "': give one of them");
  }
  in.p2p_GBps = *rate;
}

}  // namespace

void ReadMeasuredIntraLink(Fabric& fabric, const std::string& price_file) {
  IntraLink& in = fabric.intra;
  const std::string where = price_file + ":" + std::to_string(in.line) + ": fabric '" + fabric.name + "': ";
  const std::filesystem::path given(in.report);
  in.report_path = given.is_absolute()
                       ? in.report
                       : (std::filesystem::path(price_file).parent_path() / given).lexically_normal().string();
  Report report;
  try {
    report = ReadReport(in.report_path);
  } catch (const InputError& e) {
    throw InputError(where + "intra_report: " + e.what());
  }
  const std::string* command = schema::Find(&report.root, schema::root::command);
  const std::string ran = command ? *command : "?";
  if (ran == "collectives") {
    ReadSweep(report, where, in);
  } else if (ran == "p2p") {
    ReadPairRate(report, where, in);
  } else {
    throw InputError(where + "intra_report '" + in.report + "' is a report of '" + ran +
                     "': a measured intra-node link comes from a collectives or p2p run of one node");
  }
  in.emulated = EmulatedFabricOf(report);
  if (in.source.empty()) in.source = "measured by '" + in.report + "'";
}

}  // namespace tb
