// Price files for `trainbench cost`: TOML (read by toml++, TOML 1.0) and the offerings and assumptions it
// describes. Prices always come from a file the user edits, never from code; the only table in
// code is the list of GPU models an offering may name, with the rules that match them to device names.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fabric.h"

namespace tb {

// ---- GPU models ----------------------------------------------------------------------------------------------
// Matching rules: a device name (as CUDA reports it: "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB") is
// upper-cased with '-', '_' and ',' turned into spaces and split into words; a model matches when every one of its
// `required` words is present and none of its `excluded` words is. Models are tried in table order, the more
// specific first. An offering's `gpu` must be a model name (case-insensitive, spaces or dashes alike).

struct GpuModel {
  std::string name;                     // "H100 SXM"
  std::vector<std::string> required;    // words that must all appear, e.g. {"H100"}
  std::vector<std::string> excluded;    // words that must not appear, e.g. {"PCIE", "NVL"}
  double memory_gib = 0;                // per GPU as sold (datasheet "80GB" HBM is 80 GiB), the default for gpu_memory_gib
};

const std::vector<GpuModel>& KnownGpuModels();
// The model a device name belongs to; nullopt when none matches (CPUs included).
std::optional<GpuModel> MatchGpuModel(const std::string& device_name);
// The model an offering names; throws InputError listing the known names when there is none.
const GpuModel& FindGpuModel(const std::string& name, const std::string& where);
// "H100 SXM, H100 PCIe, ...".
std::string KnownGpuModelNames();

// ---- Price file ----------------------------------------------------------------------------------------------

struct Offering {
  std::string name;                    // "aws-p5.48xlarge-on-demand"
  std::string gpu;                     // a known model name, as the table spells it
  int gpus_per_node = 0;
  std::optional<double> usd_per_gpu_hour;   // exactly one of these two
  std::optional<double> usd_per_node_hour;
  double gpu_memory_gib = 0;           // per GPU (GiB); the model's default when not given
  double storage_usd_per_gb_month = 0;
  double egress_usd_per_gb = 0;
  double mtbf_node_hours = 0;          // mean time between failures of one node
  double restart_hours = 0;            // time from a failure until the job runs again (detect, replace, requeue)
  // Time the rented nodes spend before the processes start (instance start, image pull, data staging): billed, and
  // added to the measured process start-up in time to train. 0 when the file gives none.
  double provisioning_hours = 0;
  std::optional<double> usd_per_kwh;   // electricity, where the offering bills it (own or colocated nodes)
  std::string fabric;                  // the [[fabric]] its nodes have ("" when the file names none)
  int line = 0;                        // of the [[offering]] header

  // Price of one node for one hour: node-hour price, or gpu-hour price x GPUs per node (whole nodes are billed).
  double NodeHourUsd() const;
};

// How big a checkpoint is, for storage.
enum class CheckpointSizeSource { kMeasured, kGigabytes };

struct CostAssumptions {
  CheckpointSizeSource checkpoint_size = CheckpointSizeSource::kMeasured;  // "measured" or a number of GB
  double checkpoint_gb = 0;            // when kGigabytes
  int checkpoints_kept = 2;            // kept on storage at once
  double dataset_gb = 0;               // training data kept on storage for the run
  double egress_gb = 0;                // moved out at the end (the final checkpoint, logs)
  double checkpoint_interval_hours = 1.0;
  bool young_daly_interval = false;    // use the Young/Daly interval when the run measured a checkpoint stall
};

struct PriceFile {
  std::string path;
  CostAssumptions assumptions;
  std::vector<Fabric> fabrics;
  std::vector<Offering> offerings;
  // The fabric `offering` names; nullptr when it names none.
  const Fabric* FabricOf(const Offering& offering) const;
};

// Reads and validates a price file: every offering has name, gpu (a known model), gpus_per_node > 0, exactly one of
// usd_per_gpu_hour and usd_per_node_hour, and non-negative storage/egress prices, mtbf_node_hours > 0,
// restart_hours >= 0, usd_per_kwh >= 0 when given; numbers are finite; unknown keys and tables are errors (a typo must not silently price at 0).
// [[fabric]] tables (results/README.md, "Fabrics"): every figure > 0 with its source and year, PCIe figures within
// the link's rate; an offering's `fabric` must name one. ReadPriceFile also reads measured fabrics' reports.
// Throws InputError "FILE:LINE: ..." (a TOML syntax error: "FILE:LINE: not valid TOML: <toml++'s words> (column C)").
PriceFile ParsePriceFile(const std::string& text, const std::string& path);
PriceFile ReadPriceFile(const std::string& path);

}  // namespace tb
