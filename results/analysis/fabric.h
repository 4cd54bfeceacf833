// Fabrics of the price file: how the GPUs of one node reach each other (the intra-node link) and how nodes reach
// each other (the network), with every figure's source. An offering names the fabric its nodes have; `cost`
// projects a measured run onto it (layout_search.h). Declared figures come from the file; a "measured" intra-node
// link comes from a collectives or p2p report of one node of that type (MeasureIntraLink).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "projection.h"

namespace tb {

// What connects the GPUs of a node. kMeasured: taken from a report of one such node.
enum class IntraKind { kNvSwitch, kNvLinkPairs, kPcie, kMeasured };
const char* IntraKindName(IntraKind kind);  // "nvswitch", "nvlink-pairs", "pcie", "measured"

// The intra-node link. all_reduce_busbw_GBps is the bus bandwidth of an all-reduce over the whole node (nccl-tests'
// busbw: algbw x 2(n-1)/n), which for a ring is 1 / beta of the alpha-beta model; latency_us its alpha (per ring
// step). Optional figures a projection may need: a layout that needs one the fabric lacks is not projected.
struct IntraLink {
  IntraKind kind = IntraKind::kNvSwitch;
  std::optional<double> all_reduce_busbw_GBps;
  std::optional<double> p2p_GBps;  // one direction, one pair (shown; pipeline stages sit on whole nodes)
  std::optional<double> latency_us;
  int pcie_gen = 0, pcie_lanes = 0, gpus_per_switch = 0;  // kPcie
  std::string source;       // where the figures come from, with its date
  std::string report;       // kMeasured: the report (as the file names it) and the path read
  std::string report_path;
  // kMeasured: the report's all_reduce sweep (one node), fitted per size band once when read (FitIntraBands;
  // `fitted` false when the report has no sweep, as a p2p report).
  LinkParameters measured;
  std::string emulated;     // kMeasured: "pcie" when the report ran with --emulate-pcie
  int line = 0;
};

// The network between nodes: NICs per node at nic_gbps each, the latency of one message step.
struct Network {
  std::optional<int> nics_per_node;
  std::optional<double> nic_gbps;
  std::optional<double> latency_us;
  std::string source;
  double NodeGbps() const { return nics_per_node && nic_gbps ? *nics_per_node * *nic_gbps : 0.0; }
};

struct Fabric {
  std::string name;
  IntraLink intra;
  Network network;
  int line = 0;
};

// The PCIe rate of one direction of a link of `lanes` lanes of generation `gen` (1..6), GB/s after line encoding
// (8b/10b to gen 2, 128b/130b from gen 3; gen 6's FLIT mode taken as 242/256): gen 4 x16 = 31.5 GB/s.
double PcieDirectionGBps(int gen, int lanes);

// The link parameters of a fabric for a layout of `gpus_per_node` ranks per node (of the offering's nodes), and
// what is missing when it cannot model that layout (empty when it can). Intra-node: alpha = latency, beta =
// 1 / busbw (declared), or fitted per message-size band to the measured sweep. Inter-node: the hierarchical
// all-reduce's per-rank rate when `ranks_per_node` ranks share the node's NICs: nics x Gbit/s / ranks_per_node;
// alpha = the network latency.
struct FabricLinks {
  LinkModel links;                    // a measured intra-node link carries its size bands
  std::string missing;                // why the layout cannot be modelled on this fabric ("" when it can)
};
FabricLinks LinksOnFabric(const Fabric& fabric, int nodes, int ranks_per_node);

// Reads the report of a "measured" intra-node link (its path relative to the price file's folder): a collectives
// run of one node gives the all_reduce sweep (and its emulation label), a p2p run of one node the median
// unidirectional rate. Throws InputError "FILE:LINE: fabric 'x': ..." for another report (a train run, several
// nodes, no all_reduce or p2p measurement) or one that cannot be read.
void ReadMeasuredIntraLink(Fabric& fabric, const std::string& price_file);

}  // namespace tb
