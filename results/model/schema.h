// The report schema, declared once: every group, table, matrix, attribute and column a report holds, with its
// name, type, unit and one-line description. Writers fill reports through these declarations (schema::Set,
// AddColumn), the views, cost's reader and the damage check read through them (Find, Values), the README's schema
// tables and results/analysis/schema_names.py (the names plots.py reads) are generated from them and checked by a test
// (tests/schema_doc.cc). Adding a field: declare it here, set it where it is measured.
//
// Units: s, us, B, GB/s = 1e9 B/s, MB/s = 1e6 B/s, FLOP/s, tokens/s; `fraction` is a share 0..1.
#pragma once

#include "schema_types.h"

namespace tb::schema {

// ---- / (the root) -------------------------------------------------------------------------------------------
inline GroupSpec kRoot{"/", "what ran, when, and how it ended; every command writes these"};
namespace root {
inline const TextAttribute schema{kRoot, "schema", "", "`trainbench.report`"};
inline const IntAttribute schema_version{kRoot, "schema_version", "", "`1`"};
inline const TextAttribute tool_version{kRoot, "tool_version", "", "the build's version"};
inline const TextAttribute git_revision{kRoot, "git_revision", "", "the build's git revision"};
inline const TextAttribute command{kRoot, "command", "", "the command, e.g. `collectives`"};
inline const TextAttribute command_line{kRoot, "command_line", "", "the full command line"};
inline const TextAttribute start_utc{kRoot, "start_utc", "", "ISO 8601 start, e.g. `2024-05-01T12:00:00Z`"};
inline const TextAttribute run_id{kRoot, "run_id", "",
                                  "32 hex digits drawn at random when the run starts: what tells two runs apart "
                                  "(validate's history keys nights on it); absent in reports before it"};
inline const IntAttribute n_ranks{kRoot, "n_ranks", "ranks", "ranks in the run"};
inline const IntAttribute n_nodes{kRoot, "n_nodes", "nodes", "nodes (distinct hosts) in the run"};
inline const TextAttribute backend{kRoot, "backend", "", "`mpi` or `nccl`: the communicator that ran"};
inline const TextAttribute status{kRoot, "status", "", "`complete`, `interrupted` or `failed`"};
inline const TextAttribute status_reason{kRoot, "status_reason", "",
                                         "why, when not complete (`\"\"` otherwise); its forms are listed above the tables"};
inline const TextAttribute end_utc{kRoot, "end_utc", "", "ISO 8601 end of the run (or of the last phase written)"};
inline const TextAttribute injected_faults{kRoot, "injected_faults", "",
                                           "collectives, p2p, train: the faults injected on purpose (`--inject`, a "
                                           "test feature), e.g. `slow-rank=1:300`; `\"\"` for a real measurement"};
inline const TextAttribute emulated_fabric{kRoot, "emulated_fabric", "",
                                           "collectives, p2p, train: `pcie` when `--emulate-pcie` kept NCCL off "
                                           "NVLink: intra-node traffic went through PCIe and host memory, as on a "
                                           "PCIe node without GPU peer-to-peer; `\"\"` for the node's own fabric; "
                                           "absent in reports before it"};
inline const TextAttribute emulated_fabric_environment{
    kRoot, "emulated_fabric_environment", "",
    "collectives, p2p, train: the NCCL variables `--emulate-pcie` set on every rank, "
    "`NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0`; `\"\"` when not emulated; absent in reports before it"};
inline const TextAttribute stuck_ranks{kRoot, "stuck_ranks", "",
                                       "only after a timeout: the ranks the others waited for, comma-separated (no "
                                       "answer to rank 0's probe, or outside communication for half the timeout); "
                                       "`\"\"` when every rank waited in communication (the stall was in it)"};
}  // namespace root

// ---- config -------------------------------------------------------------------------------------------------
inline GroupSpec kConfig{"config",
                         "every option of the command, recorded from its one declaration (`trainbench <command> "
                         "--help` describes each): named as the long flag with dashes turned into underscores "
                         "(`--check-iters` -> `check_iters`), the value given or its default (a switch as 0/1, a text "
                         "option not given as \"\"), or the value as used where the command resolves it (train: "
                         "layers, d_model, heads, vocab, seq, global_batch, scaling, record_bytes; collectives: dtype, "
                         "redop; data generate: tokens, shard_tokens). Listed here: the ones other code reads, and "
                         "those no flag names (`overlap`, `buffer_offsets`, `verified_on`)"};
namespace config {
inline const RealAttribute bucket_mb{kConfig, "bucket_mb", "MiB", "train: gradient bucket size (`--bucket-mb`)"};
inline const IntAttribute seq{kConfig, "seq", "tokens", "train: sequence length (`--seq`)"};
inline const TextAttribute data{kConfig, "data", "", "train: the dataset directory (`--data`; empty: synthetic tokens)"};
inline const IntAttribute checkpoint_every{kConfig, "checkpoint_every", "steps",
                                           "train: steps between checkpoints (`--checkpoint-every`; 0: none)"};
inline const TextAttribute resume{kConfig, "resume", "", "train: the checkpoint resumed from (`--resume`)"};
inline const IntAttribute overlap{kConfig, "overlap", "",
                                  "train: 1 when gradients are all-reduced during backward (no `--no-overlap`)"};
inline const TextAttribute model{kConfig, "model", "", "train: the model preset (`--model`)"};
inline const IntAttribute micro_batch{kConfig, "micro_batch", "",
                                      "train: sequences per rank per forward and backward, as used: --micro-batch "
                                      "under weak scaling; under strong scaling the first point's (each point's "
                                      "is train/<point>/micro_batch)"};
inline const IntAttribute global_batch{kConfig, "global_batch", "", "train: sequences per step over every rank, as used"};
inline const IntAttribute warmup_steps{kConfig, "warmup_steps", "steps", "train: untimed steps before the measured ones"};
inline const IntAttribute steps{kConfig, "steps", "steps", "train: measured steps (`--steps`)"};
inline const TextAttribute parallel{kConfig, "parallel", "", "train: `dp`, `zero1` or `fsdp` (`--parallel`)"};
inline const IntAttribute tensor_parallel{kConfig, "tensor_parallel", "", "train: ranks per tensor parallel group"};
inline const IntAttribute repeats{kConfig, "repeats", "",
                                  "train: times the measured phase ran (`--repeats`); suite: times the phases ran"};
inline const TextAttribute buffer_offsets{kConfig, "buffer_offsets", "",
                                          "collectives: `rotating`: iteration k of a size uses slot k mod m of the "
                                          "buffers sized for the largest size (m slots of the size rounded up to "
                                          "256 B), as nccl-tests shifts them, so that no iteration finds its data in "
                                          "a cache the previous one warmed; absent in reports before it"};
inline const TextAttribute verified_on{kConfig, "verified_on", "",
                                       "collectives: where the elements were filled and checked: `device` (kernels; "
                                       "only the counts come to the host: cuda backend), `host` (cpu backend) or "
                                       "`none` (`--check-iters 0`); absent in reports before it"};
}  // namespace config

// ---- topology -----------------------------------------------------------------------------------------------
inline GroupSpec kTopology{"topology", "where each rank ran, the GPU links of each node, the library versions"};
namespace topology {
inline const TextAttribute mpi_library{kTopology, "mpi_library", "", "MPI_Get_library_version, first line"};
inline const TextAttribute mpi_version{kTopology, "mpi_version", "", "MPI standard version, e.g. `3.1`"};
inline const TextAttribute cuda_runtime{kTopology, "cuda_runtime", "", "CUDA runtime version (empty without CUDA)"};
inline const TextAttribute cuda_driver{kTopology, "cuda_driver", "", "CUDA driver version (empty without a GPU)"};
inline const TextAttribute nccl{kTopology, "nccl", "", "NCCL version (empty without NCCL)"};
inline const TextAttribute cudnn{kTopology, "cudnn", "", "cuDNN version (empty without cuDNN)"};
inline const TextAttribute hdf5{kTopology, "hdf5", "", "HDF5 library version"};
inline const TextAttribute placement_warning{
    kTopology, "placement_warning", "",
    "`\"\"` when each rank can have a CPU of its own; else the warning the command printed, naming the ranks of a "
    "host that must share CPUs (their `cpu_affinity` sets give some group of them fewer CPUs than ranks, e.g. two "
    "ranks bound to one CPU): such figures measure the placement, not the cluster; absent in reports before it"};

inline TableSpec kRanks{kTopology, "ranks", "one row per rank: where it ran and on what (gpu_index -1 = CPU backend)"};
namespace ranks {
inline const IntColumn rank{kRanks, "rank", "", "rank in the launch"};
inline const TextColumn host{kRanks, "host", "", "host name"};
inline const IntColumn node{kRanks, "node", "", "node index (ranks of one host share it)"};
inline const IntColumn local_rank{kRanks, "local_rank", "", "rank within its node"};
inline const IntColumn local_size{kRanks, "local_size", "", "ranks on its node"};
inline const IntColumn gpu_index{kRanks, "gpu_index", "", "the GPU it used, -1 on the CPU backend"};
inline const TextColumn gpu_name{kRanks, "gpu_name", "", "GPU model"};
inline const TextColumn gpu_uuid{kRanks, "gpu_uuid", "", "GPU UUID"};
inline const TextColumn gpu_pci_bus{kRanks, "gpu_pci_bus", "", "GPU PCI bus id"};
inline const IntColumn gpu_memory_bytes{kRanks, "gpu_memory_bytes", "B", "GPU memory"};
inline const TextColumn cpu_model{kRanks, "cpu_model", "", "CPU model"};
inline const IntColumn cpu_cores{kRanks, "cpu_cores", "", "CPU cores of the host"};
inline const TextColumn cpu_affinity{kRanks, "cpu_affinity", "",
                                     "the CPUs the rank may run on, as the kernel lists them (`0-3,8`; "
                                     "sched_getaffinity: the launcher's binding, taskset, a cgroup); `\"\"` when "
                                     "unknown; absent in reports before it"};
}  // namespace ranks

inline TableSpec kGpuLinks{kTopology, "gpu_links",
                           "every ordered pair of GPUs on each node: peer access (cudaDeviceCanAccessPeer) and link "
                           "type (NVML)"};
namespace gpu_links {
inline const IntColumn node{kGpuLinks, "node", "", "node index"};
inline const TextColumn host{kGpuLinks, "host", "", "host name"};
inline const IntColumn gpu_a{kGpuLinks, "gpu_a", "", "first GPU's index"};
inline const IntColumn gpu_b{kGpuLinks, "gpu_b", "", "second GPU's index"};
inline const IntColumn peer_access{kGpuLinks, "peer_access", "", "1 when a can access b's memory directly"};
inline const TextColumn link{kGpuLinks, "link", "", "link from NVML, e.g. `NVLink x18`, `PCIe host bridge`"};
}  // namespace gpu_links

inline TableSpec kEnvironment{kTopology, "environment", "NCCL_*, OMPI_* and UCX_* environment variables of each rank"};
namespace environment {
inline const IntColumn rank{kEnvironment, "rank", "", "rank"};
inline const TextColumn name{kEnvironment, "name", "", "variable"};
inline const TextColumn value{kEnvironment, "value", "", "its value"};
}  // namespace environment
}  // namespace topology

// ---- collectives/<op> ---------------------------------------------------------------------------------------
inline GroupSpec kCollective{"collectives/<op>",
                             "one group per operation swept: all_reduce, all_gather, reduce_scatter, alltoall, "
                             "broadcast, reduce, sendrecv"};
namespace collective {
inline const TextAttribute op{kCollective, "op", "", "the operation"};
inline const TextAttribute dtype{kCollective, "dtype", "", "element type, e.g. `float`"};
inline const TextAttribute redop{kCollective, "redop", "", "reduction (`sum`, ...), `none` for data movement"};
inline const IntAttribute root{kCollective, "root", "", "root rank; -1 for rootless operations"};
inline const IntAttribute n_ranks{kCollective, "n_ranks", "ranks", "ranks n"};
inline const IntAttribute iters{kCollective, "iters", "", "timed iterations per size"};
inline const IntAttribute warmup{kCollective, "warmup", "", "untimed iterations per size"};
inline const IntAttribute check_iters{kCollective, "check_iters", "", "verified iterations per size"};
inline const RealAttribute bus_factor{kCollective, "bus_factor", "", "busbw / algbw (see the definitions above)"};
inline const TextAttribute bus_factor_formula{kCollective, "bus_factor_formula", "", "e.g. `2(n-1)/n`"};
inline const TextAttribute busbw_convention{kCollective, "busbw_convention", "",
                                            "what busbw means here: `algbw x <factor> (nccl-tests)`; on the nccl "
                                            "backend also NCCL_ALGO and NCCL_NVLS_ENABLE as set and that busbw is the "
                                            "ring-equivalent figure whatever algorithm NCCL ran (with NVLS, which "
                                            "reduces in the switch, it can exceed the links' rate: "
                                            "collectives/README.md); absent in reports before it"};
inline const TextAttribute split{kCollective, "split", "",
                                 "`all` (one communicator of every rank), `intra` (one per node, of its ranks) or "
                                 "`inter` (one per local rank, of one rank per node), all measuring at once "
                                 "(--split); absent in reports before it: `all`"};
inline const IntAttribute communicators{kCollective, "communicators", "",
                                        "communicators of n_ranks each that measured at once; times are over every "
                                        "rank of every one"};
inline const IntAttribute nodes{kCollective, "nodes", "nodes", "nodes k each communicator spans"};

inline TableSpec kResults{kCollective, "results",
                          "per size: time = max over ranks of each rank's mean time per operation; algbw = "
                          "size_bytes/time; busbw = algbw x bus_factor; GB = 1e9 bytes; wrong = elements that failed "
                          "verification (-1 = not checked, NaN times = mode not run)"};
namespace results {
inline const IntColumn size_bytes{kResults, "size_bytes", "B", "S, bytes per rank buffer"};
inline const IntColumn count{kResults, "count", "elements", "elements per rank buffer"};
inline const std::vector<std::string> kModes = {"out_of_place", "in_place"};
inline const RealColumn time_us{kResults, "<mode>_time_us", "us", "time per op: max over ranks of each rank's mean",
                                kModes};
inline const RealColumn time_rank_min_us{kResults, "<mode>_time_rank_min_us", "us",
                                         "min over ranks of each rank's mean", kModes};
inline const RealColumn time_rank_avg_us{kResults, "<mode>_time_rank_avg_us", "us",
                                         "average over ranks of each rank's mean", kModes};
inline const RealColumn algbw_GBps{kResults, "<mode>_algbw_GBps", "GB/s", "S / time", kModes};
inline const RealColumn busbw_GBps{kResults, "<mode>_busbw_GBps", "GB/s", "algbw x bus_factor", kModes};
inline const RealColumn nic_busbw_GBps{kResults, "<mode>_nic_busbw_GBps", "GB/s",
                                       "per-NIC rate busbw x (k-1)/(n-1), k = nodes: each rank's share of the "
                                       "inter-node traffic of a hierarchical algorithm over the op's time (what one "
                                       "NIC per rank carries); all_reduce, reduce_scatter and all_gather on k > 1 "
                                       "nodes, NaN otherwise", kModes};
inline const IntColumn wrong{kResults, "<mode>_wrong", "elements",
                             "elements that failed verification; -1 when not checked", kModes};
inline const TextColumn wrong_sources{kResults, "<mode>_wrong_sources", "",
                                      "the ranks whose data arrived wrong, comma-separated, for the operations that "
                                      "move data (all_gather, alltoall, broadcast, sendrecv: each element is one "
                                      "rank's); empty when none was, and for reductions, whose every element mixes "
                                      "all ranks' inputs", kModes};
}  // namespace results
}  // namespace collective

// ---- moe_alltoall -------------------------------------------------------------------------------------------
inline GroupSpec kMoeAllToAll{"moe_alltoall",
                              "collectives --ops moe_alltoall: a mixture-of-experts layer's dispatch and combine (an "
                              "alltoallv of bf16 token rows each way), a row per --moe-tokens value; definitions in "
                              "collectives/README.md"};
namespace moe_alltoall {
inline const IntAttribute n_ranks{kMoeAllToAll, "n_ranks", "ranks", "ranks, every one holding experts / n_ranks experts"};
inline const IntAttribute nodes{kMoeAllToAll, "nodes", "nodes", "nodes the ranks are on"};
inline const IntAttribute hidden{kMoeAllToAll, "hidden", "elements", "elements per token row (`--moe-hidden`)"};
inline const IntAttribute top_k{kMoeAllToAll, "top_k", "", "distinct experts per token (`--moe-top-k`)"};
inline const IntAttribute experts{kMoeAllToAll, "experts", "", "experts over every rank (`--moe-experts`)"};
inline const IntAttribute seed{kMoeAllToAll, "seed", "", "seed of the routing (`--moe-seed`)"};
inline const TextAttribute dtype{kMoeAllToAll, "dtype", "", "element type of the rows: `bfloat16`"};
inline const IntAttribute iters{kMoeAllToAll, "iters", "", "timed dispatches (and combines) per point"};
inline const IntAttribute warmup{kMoeAllToAll, "warmup", "", "untimed dispatch and combine pairs per point"};
inline const IntAttribute check_iters{kMoeAllToAll, "check_iters", "", "verified dispatch and combine pairs per point"};
inline const TextAttribute bytes_convention{kMoeAllToAll, "bytes_convention", "",
                                            "how bytes and GB/s are counted (as DeepEP's benchmark counts them)"};

inline TableSpec kResults{kMoeAllToAll, "results",
                          "per tokens value: the traffic the routing makes, and each phase's time (max over ranks of "
                          "each rank's mean), rate and verification"};
namespace results {
inline const IntColumn tokens{kResults, "tokens", "tokens", "tokens per rank"};
inline const RealColumn bytes_per_rank{kResults, "bytes_per_rank", "B",
                                       "mean over ranks of the bytes a rank sends in dispatch (each token once per "
                                       "rank holding one of its experts, itself included); the same as it receives, "
                                       "and as combine sends and receives"};
inline const IntColumn max_sent_bytes{kResults, "max_sent_bytes", "B", "the most bytes one rank sends in dispatch"};
inline const IntColumn max_received_bytes{kResults, "max_received_bytes", "B",
                                          "the most bytes one rank receives in dispatch (and sends in combine)"};
inline const RealColumn local_fraction{kResults, "local_fraction", "fraction",
                                       "share of the rows that stay on their rank (the rest cross to other ranks)"};
inline const RealColumn inter_node_fraction{kResults, "inter_node_fraction", "fraction",
                                            "share of the rows that cross to another node (0 on one node)"};
inline const std::vector<std::string> kPhases = {"dispatch", "combine"};
inline const RealColumn time_us{kResults, "<phase>_time_us", "us", "time: max over ranks of each rank's mean",
                                kPhases};
inline const RealColumn time_rank_min_us{kResults, "<phase>_time_rank_min_us", "us",
                                         "min over ranks of each rank's mean", kPhases};
inline const RealColumn time_rank_avg_us{kResults, "<phase>_time_rank_avg_us", "us",
                                         "average over ranks of each rank's mean", kPhases};
inline const RealColumn GBps{kResults, "<phase>_GBps", "GB/s",
                             "bytes_per_rank / time, GB = 1e9 bytes: DeepEP's per-rank figure", kPhases};
inline const RealColumn inter_node_GBps{kResults, "<phase>_inter_node_GBps", "GB/s",
                                        "the mean bytes a rank sends to other nodes / time (<phase>_GBps x "
                                        "inter_node_fraction): what each rank's link out of its node carried; NaN "
                                        "on one node", kPhases};
inline const IntColumn wrong{kResults, "<phase>_wrong", "elements",
                             "elements that failed verification over every rank; -1 when not checked", kPhases};
inline const TextColumn wrong_sources{kResults, "<phase>_wrong_sources", "",
                                      "the ranks whose rows arrived wrong, comma-separated; empty when none did",
                                      kPhases};
}  // namespace results
}  // namespace moe_alltoall

// ---- p2p ----------------------------------------------------------------------------------------------------
inline GroupSpec kP2p{"p2p", "rank-pair bandwidth and latency (row = sender, column = receiver)"};
namespace p2p {
inline const IntAttribute size_bytes{kP2p, "size_bytes", "B", "message size of the bandwidth streams"};
inline const IntAttribute iters{kP2p, "iters", "", "messages per bandwidth measurement"};
inline const IntAttribute latency_bytes{kP2p, "latency_bytes", "B", "message size of the ping-pong"};
inline const IntAttribute latency_iters{kP2p, "latency_iters", "", "round trips per latency measurement"};
inline const RealAttribute threshold_fraction{kP2p, "threshold_fraction", "fraction",
                                              "a pair is flagged below this share of the median"};
inline const RealAttribute median_uni_GBps{kP2p, "median_uni_GBps", "GB/s", "median unidirectional bandwidth"};
inline const RealAttribute median_bidi_GBps{kP2p, "median_bidi_GBps", "GB/s", "median bidirectional bandwidth"};
inline const RealAttribute median_uni_intra_GBps{kP2p, "median_uni_intra_GBps", "GB/s",
                                                  "median unidirectional bandwidth of the pairs on one node; NaN "
                                                  "when there are none"};
inline const RealAttribute median_uni_inter_GBps{kP2p, "median_uni_inter_GBps", "GB/s",
                                                  "median unidirectional bandwidth of the pairs across nodes; NaN "
                                                  "when there are none"};
inline const IntAttribute nodes{kP2p, "nodes", "nodes", "nodes the ranks were on"};
inline const IntAttribute complete{kP2p, "complete", "", "1 when every pair was measured"};

inline const MatrixSpec uni_bw_GBps{kP2p, "uni_bw_GBps", "GB/s",
                                    "unidirectional bandwidth, row = sender rank, col = receiver rank: size_bytes x iters "
                                    "/ time, GB = 1e9 bytes; NaN on the diagonal and for pairs not measured"};
inline const MatrixSpec bidi_bw_GBps{kP2p, "bidi_bw_GBps", "GB/s",
                                     "bidirectional bandwidth, symmetric: 2 x size_bytes x iters / time with both "
                                     "ranks sending and receiving at once; NaN on the diagonal and for pairs not "
                                     "measured"};
inline const MatrixSpec latency_us{kP2p, "latency_us", "us",
                                   "latency, symmetric: half the mean round-trip time of a latency_bytes ping-pong; "
                                   "NaN on the diagonal and for pairs not measured"};

inline TableSpec kFlagged{kP2p, "flagged",
                          "pairs whose unidirectional bandwidth is below threshold_fraction x the median of their "
                          "class, intra-node or inter-node (zero rows when none is)"};
namespace flagged {
inline const IntColumn src_rank{kFlagged, "src_rank", "", "sender"};
inline const IntColumn dst_rank{kFlagged, "dst_rank", "", "receiver"};
inline const TextColumn src_host{kFlagged, "src_host", "", "sender's host"};
inline const TextColumn dst_host{kFlagged, "dst_host", "", "receiver's host"};
inline const TextColumn src_gpu{kFlagged, "src_gpu", "", "sender's device"};
inline const TextColumn dst_gpu{kFlagged, "dst_gpu", "", "receiver's device"};
inline const RealColumn uni_bw_GBps{kFlagged, "uni_bw_GBps", "GB/s", "the pair's unidirectional bandwidth"};
inline const TextColumn link{kFlagged, "link", "", "`intra` (both ranks on one node) or `inter`"};
inline const RealColumn median_GBps{kFlagged, "median_GBps", "GB/s", "the median of the pairs of its class"};
inline const RealColumn fraction_of_median{kFlagged, "fraction_of_median", "fraction", "uni_bw_GBps / median_GBps"};
}  // namespace flagged
}  // namespace p2p

// ---- model (train) ------------------------------------------------------------------------------------------
inline GroupSpec kModel{"model", "the model that ran (train); models/README.md defines the counts and the estimate"};
namespace model {
inline const TextAttribute name{kModel, "name", "", "preset, e.g. `gpt-13b`"};
inline const IntAttribute layers{kModel, "layers", "", "layers that ran"};
inline const IntAttribute preset_layers{kModel, "preset_layers", "", "the preset's layers"};
inline const TextAttribute scaled{kModel, "scaled", "", "what --layers changed (\"4 of gpt-13b's 40 layers\"; \"\")"};
inline const IntAttribute d_model{kModel, "d_model", "", "hidden size"};
inline const IntAttribute heads{kModel, "heads", "", "attention heads"};
inline const IntAttribute vocab{kModel, "vocab", "", "vocabulary"};
inline const IntAttribute vocab_padded{kModel, "vocab_padded", "", "vocabulary padded for the GEMMs"};
inline const IntAttribute max_seq{kModel, "max_seq", "tokens", "the preset's context length"};
inline const IntAttribute parameters{kModel, "parameters", "",
                                     "exact, real vocabulary, tied embeddings counted once"};
inline const IntAttribute matmul_parameters{kModel, "matmul_parameters", "", "N_matmul"};
inline const IntAttribute active_parameters{kModel, "active_parameters", "",
                                            "those one token's forward uses: the router and top-k experts of each "
                                            "MoE block (= parameters for a dense model)"};
inline const IntAttribute active_matmul_parameters{kModel, "active_matmul_parameters", "",
                                                   "N_matmul with top-k of the experts: what FLOPs and MFU count"};
inline const IntAttribute experts{kModel, "experts", "", "experts per MoE block E (0: a dense model)"};
inline const IntAttribute top_k{kModel, "top_k", "", "experts per token K (0: a dense model)"};
inline const IntAttribute expert_ffn{kModel, "expert_ffn", "", "each expert's hidden width (0: a dense model)"};
inline const IntAttribute moe_every{kModel, "moe_every", "", "block l is an MoE block when l % moe_every == 0"};
inline const IntAttribute moe_layers{kModel, "moe_layers", "", "MoE blocks"};
inline const RealAttribute capacity_factor{kModel, "capacity_factor", "",
                                           "an expert takes ceil(factor x tokens x K / E) per batch"};
inline const RealAttribute aux_loss_coef{kModel, "aux_loss_coef", "", "weight of the load-balancing loss"};
inline const RealAttribute model_flops_per_token{kModel, "model_flops_per_token", "FLOP",
                                                 "at the run's sequence length, by flops_convention"};
inline const TextAttribute flops_convention{kModel, "flops_convention", "", "`6*N_matmul + 6*L*T*d`"};
inline const RealAttribute memory_weights_bytes{kModel, "memory_weights_bytes", "B", "per-rank estimate"};
inline const RealAttribute memory_gradients_bytes{kModel, "memory_gradients_bytes", "B", "per-rank estimate"};
inline const RealAttribute memory_optimizer_bytes{kModel, "memory_optimizer_bytes", "B", "per-rank estimate"};
inline const RealAttribute memory_activations_bytes{kModel, "memory_activations_bytes", "B", "per-rank estimate (under tensor parallel, one rank's share: EstimateMemory)"};
inline const TextAttribute memory_precision{kModel, "memory_precision", "", "the precisions the estimate assumes"};
}  // namespace model

// ---- train --------------------------------------------------------------------------------------------------
inline GroupSpec kTrain{"train", "the training run as a whole"};
namespace train {
inline const TextAttribute scaling_mode{kTrain, "scaling_mode", "", "`weak` or `strong`"};
inline const TextAttribute backend{kTrain, "backend", "", "`cpu` or `cuda`"};
inline const TextAttribute device{kTrain, "device", "",
                                  "rank 0's: \"NVIDIA H200 (GPU 0)\" or \"cpu (N BLAS threads)\""};
inline const TextAttribute attention{kTrain, "attention", "", "what ran: `cpu`, `cudnn-sdpa` or `cublas`"};
inline const TextAttribute cuda_graphs{kTrain, "cuda_graphs", "",
                                       "`off`, or with --cuda-graph `forward and backward`: each micro-batch's passes "
                                       "replayed from CUDA graphs captured at their second call at the point's shape "
                                       "(backward runs eagerly where dp's bucket all-reduces start from inside it: "
                                       "more than one data-parallel rank)"};
inline const TextAttribute attention_fallback_reason{kTrain, "attention_fallback_reason", "",
                                                     "why --attention auto did not get cuDNN's fused SDPA (cuda)"};
inline const RealAttribute measured_gemm_flops{kTrain, "measured_gemm_flops", "FLOP/s",
                                               "the slowest rank's start-up GEMM rate"};
inline const TextAttribute measured_gemm{kTrain, "measured_gemm", "", "how it was measured"};
inline const RealAttribute copy_bytes_per_s{kTrain, "copy_bytes_per_s", "B/s",
                                            "--op-times: the slowest rank's start-up copy rate, bytes read plus "
                                            "written per second (a 1 GiB device-to-device cudaMemcpy on a GPU, a "
                                            "256 MiB memcpy on the CPU); absent without --op-times"};
inline const RealAttribute peak_flops{kTrain, "peak_flops", "FLOP/s",
                                      "dense bf16 of rank 0's device from the peak table; NaN without an entry"};
inline const TextAttribute peak_source{kTrain, "peak_source", "", "where the peak comes from"};
inline const RealAttribute mpi_init_s{kTrain, "mpi_init_s", "s", "MPI_Init_thread"};
inline const RealAttribute communicator_init_s{kTrain, "communicator_init_s", "s",
                                               "from MPI ready to the training communicator"};
inline const RealAttribute startup_s{kTrain, "startup_s", "s", "process start to the start of the first step"};
inline const RealAttribute peak_host_memory_bytes_max{kTrain, "peak_host_memory_bytes_max", "B",
                                                      "max over ranks of the peak resident set"};
inline const RealAttribute peak_device_memory_bytes_max{kTrain, "peak_device_memory_bytes_max", "B",
                                                        "max over ranks of the peak GPU memory in use"};

inline TableSpec kMemory{kTrain, "memory",
                         "peak resident host memory of each rank's process over the whole run (getrusage); peak "
                         "device memory in use on each rank's GPU (total - free from cudaMemGetInfo at the model's "
                         "high points; 0 on the CPU backend)"};
namespace memory {
inline const IntColumn rank{kMemory, "rank", "", "rank"};
inline const RealColumn peak_host_memory_bytes{kMemory, "peak_host_memory_bytes", "B", "peak resident set"};
inline const RealColumn peak_device_memory_bytes{kMemory, "peak_device_memory_bytes", "B", "peak GPU memory in use"};
}  // namespace memory

// The CUDA model's kernels chosen by timing candidates (models/cuda/autotune.h), from rank 0's first point; absent on
// the CPU backend, which chooses none.
inline TableSpec kKernelChoices{kTrain, "kernel_choices",
                                "one row per kernel chosen by timing, in the order chosen: each cuBLASLt matmul plan's "
                                "algorithm among the heuristic's top 8, each cuDNN SDPA graph's execution plan; rank "
                                "0's model in the first point (TRAINBENCH_AUTOTUNE=0: the heuristic's first, untimed)"};
namespace kernel_choices {
inline const TextColumn what{kKernelChoices, "what", "",
                             "\"gemm <Gemm method> <cuBLASLt epilogue>\" or \"cudnn-sdpa forward|backward\""};
inline const TextColumn shape{kKernelChoices, "shape", "",
                              "GEMM: m n k, op(A),op(B) and D's type in cuBLASLt's column-major view; attention: "
                              "batch B, sequence T, heads NH, head size hd"};
inline const IntColumn candidates{kKernelChoices, "candidates", "",
                                  "candidates tried, failed ones included; 0: not timed"};
inline const IntColumn chosen{kKernelChoices, "chosen", "",
                              "the winner's index in the heuristic's order (0: its first); the first within 1 % of "
                              "the fastest median"};
inline const RealColumn chosen_s{kKernelChoices, "chosen_s", "s",
                                 "the winner's median of 5 runs after a warm-up; NaN when not timed"};
inline const RealColumn first_s{kKernelChoices, "first_s", "s",
                                "the heuristic's first's median; NaN when not timed or it failed"};
}  // namespace kernel_choices

// The inter-node link probe (collectives/link_probe.h): written when the launch spans nodes and --link-probe is on.
inline const IntAttribute link_probe_bytes{kTrain, "link_probe_bytes", "B", "message size per direction"};
inline const IntAttribute link_probe_iters{kTrain, "link_probe_iters", "", "timed exchanges per pair"};
inline const IntAttribute link_probe_nodes{kTrain, "link_probe_nodes", "nodes", "nodes probed"};
inline const RealAttribute link_probe_threshold{kTrain, "link_probe_threshold", "fraction",
                                                "a host's link is slow below this share of the other pairs' rate"};
inline const TextAttribute link_probe_slow_hosts{kTrain, "link_probe_slow_hosts", "",
                                                 "hosts whose link is slow, comma-separated; \"\" when none is or "
                                                 "fewer than 3 nodes could not tell"};
inline const TextAttribute link_probe_verdict{kTrain, "link_probe_verdict", "", "the probe's verdict in words"};
inline TableSpec kLinkPairs{kTrain, "link_pairs",
                            "one row per local rank and node pair: local rank j of node_a and of node_b exchanging "
                            "link_probe_bytes both ways link_probe_iters times, the pairs of a round at once"};
namespace link_pairs {
inline const IntColumn local_rank{kLinkPairs, "local_rank", "", "the local rank on both nodes"};
inline const IntColumn node_a{kLinkPairs, "node_a", "", "the lower node"};
inline const IntColumn node_b{kLinkPairs, "node_b", "", "the higher node"};
inline const TextColumn host_a{kLinkPairs, "host_a", "", "node_a's host"};
inline const TextColumn host_b{kLinkPairs, "host_b", "", "node_b's host"};
inline const RealColumn seconds{kLinkPairs, "seconds", "s", "the timed exchanges, as the slower side saw them"};
inline const RealColumn bidi_GBps{kLinkPairs, "bidi_GBps", "GB/s",
                                  "2 x link_probe_bytes x link_probe_iters / seconds, GB = 1e9 bytes"};
}  // namespace link_pairs
inline TableSpec kLinkHosts{kTrain, "link_hosts",
                            "one row per node and local rank (3 nodes or more): the median rate of its pairs against "
                            "the median of the pairs without it; zero rows with 2 nodes, whose one link has two ends"};
namespace link_hosts {
inline const IntColumn node{kLinkHosts, "node", "", "node index"};
inline const TextColumn host{kLinkHosts, "host", "", "its host"};
inline const IntColumn local_rank{kLinkHosts, "local_rank", "", "the local rank whose link"};
inline const RealColumn median_GBps{kLinkHosts, "median_GBps", "GB/s", "median bidi_GBps of its pairs"};
inline const RealColumn others_GBps{kLinkHosts, "others_GBps", "GB/s", "median bidi_GBps of the pairs without it"};
inline const RealColumn fraction{kLinkHosts, "fraction", "fraction", "median_GBps / others_GBps"};
inline const IntColumn slow{kLinkHosts, "slow", "", "1 when fraction < link_probe_threshold"};
}  // namespace link_hosts
}  // namespace train

// ---- train/<point> ------------------------------------------------------------------------------------------
// A point's group name: kPointPrefix and the rank count ("k8"), then for a storage sweep's rate kThrottleMarker and
// the rate in MB/s per rank as %g writes it ("k8_throttle200"). Built and parsed by PointGroupName and
// ParsePointGroupName (report.h), and in Python by schema_names.point_ranks.
inline constexpr const char* kPointPrefix = "k";
inline constexpr const char* kThrottleMarker = "_throttle";
inline GroupSpec kTrainPoint{"train/<point>",
                             "one group per scaling point: `k<N>` for the first N ranks, `k<N>_throttle<MBps>` for a "
                             "storage sweep's rate"};
namespace point {
inline const IntAttribute ranks{kTrainPoint, "ranks", "ranks", "ranks k"};
inline const IntAttribute micro_batch{kTrainPoint, "micro_batch", "", "sequences per rank per step"};
inline const IntAttribute tokens_per_step{kTrainPoint, "tokens_per_step", "tokens", "over all k ranks"};
inline const IntAttribute measured_steps{kTrainPoint, "measured_steps", "steps", "steps after the warm-up"};
inline const RealAttribute step_s{kTrainPoint, "step_s", "s",
                                  "mean over measured steps of the slowest rank's step time"};
inline const RealAttribute step_s_p95{kTrainPoint, "step_s_p95", "s",
                                      "p95 over measured steps of the slowest rank's step time (nearest rank)"};
inline const RealAttribute tokens_per_s{kTrainPoint, "tokens_per_s", "tokens/s", "tokens_per_step / step_s"};
inline const RealAttribute tokens_per_s_per_rank{kTrainPoint, "tokens_per_s_per_rank", "tokens/s", "tokens_per_s / k"};
inline const RealAttribute model_flops_per_token{kTrainPoint, "model_flops_per_token", "FLOP", "as in model"};
inline const RealAttribute mfu_peak{kTrainPoint, "mfu_peak", "fraction",
                                    "model FLOP/s per rank / peak dense FLOP/s; NaN without a peak"};
inline const RealAttribute mfu_measured_gemm{kTrainPoint, "mfu_measured_gemm", "fraction",
                                             "model FLOP/s per rank / the measured GEMM rate"};
inline const RealAttribute scaling_efficiency{kTrainPoint, "scaling_efficiency", "fraction",
                                              "weak: throughput(k) / (k/k0 throughput(k0)); strong: T(k0) k0 / "
                                              "(k T(k)); k0 = the smallest point; NaN for a single point"};
inline const RealAttribute comm_total_s{kTrainPoint, "comm_total_s", "s", "mean per step and rank"};
inline const RealAttribute comm_exposed_s{kTrainPoint, "comm_exposed_s", "s", "mean per step and rank"};
inline const RealAttribute comm_intra_s{kTrainPoint, "comm_intra_s", "s",
                                        "comm_total inside nodes: a hierarchical all-reduce's reduce-scatter and "
                                        "all-gather steps, mean per step and rank; NaN where the all-reduce cannot "
                                        "tell (flat, NCCL)"};
inline const RealAttribute comm_inter_s{kTrainPoint, "comm_inter_s", "s",
                                        "comm_total across nodes: its inter-node all-reduce step; NaN likewise"};
inline const IntAttribute nodes{kTrainPoint, "nodes", "nodes", "nodes the k ranks were on"};
inline const IntAttribute ranks_per_node{kTrainPoint, "ranks_per_node", "ranks", "ranks of the point on each node"};
inline const TextAttribute allreduce{kTrainPoint, "allreduce", "",
                                     "the gradient all-reduce: `flat` (the backend's own algorithm), "
                                     "`hierarchical` (reduce-scatter in each node, all-reduce across, all-gather), or "
                                     "`none` (zero1 reduce-scatters instead)"};
inline const RealAttribute weights_bytes{kTrainPoint, "weights_bytes", "B",
                                        "rank 0's model allocated for the compute copy of the weights"};
inline const RealAttribute gradients_bytes{kTrainPoint, "gradients_bytes", "B", "... for the gradients"};
inline const RealAttribute optimizer_bytes{kTrainPoint, "optimizer_bytes", "B",
                                          "... for the optimizer state (fp32 master weights when the compute copy is "
                                          "bf16; AdamW m and v)"};
inline const RealAttribute weights_bytes_theory{kTrainPoint, "weights_bytes_theory", "B",
                                               "ZeRO's figure for the mode, Psi = the flat buffer's elements: 2 Psi "
                                               "(bf16) or 4 Psi (fp32, the CPU reference)"};
inline const RealAttribute gradients_bytes_theory{kTrainPoint, "gradients_bytes_theory", "B",
                                                 "2 Psi (bf16) or 4 Psi (fp32)"};
inline const RealAttribute optimizer_bytes_theory{kTrainPoint, "optimizer_bytes_theory", "B",
                                                 "12 Psi (bf16: fp32 master, m, v) or 8 Psi (fp32: m, v); divided by "
                                                 "the ranks under zero1"};
inline const TextAttribute parallel{kTrainPoint, "parallel", "",
                                    "`dp` (whole model per rank, gradients all-reduced), `zero1` (AdamW's state "
                                    "sharded: gradients reduce-scattered, parameters all-gathered, after backward) or "
                                    "`fsdp` (parameters, gradients and AdamW's state sharded: each layer all-gathered "
                                    "before its forward and its backward, its gradients reduce-scattered); absent in "
                                    "reports before it: dp"};
inline const RealAttribute comm_gather_exposed_s{kTrainPoint, "comm_gather_exposed_s", "s",
                                                 "the part of comm_exposed_s waiting for parameter all-gathers, mean "
                                                 "per step and rank; absent in reports before it"};
inline const RealAttribute traffic_gradient_sync_bytes{
    kTrainPoint, "traffic_gradient_sync_bytes", "B",
    "bytes a rank sends per step for the gradients in ring algorithms, from the collectives issued: 2(N-1)/N of "
    "each all-reduced buffer, (N-1)/N of each reduce-scattered one; absent in reports before it"};
inline const RealAttribute traffic_parameter_gather_bytes{
    kTrainPoint, "traffic_parameter_gather_bytes", "B",
    "the same for the parameters' all-gathers: (N-1)/N of each whole buffer gathered"};
inline const RealAttribute traffic_gradient_sync_bytes_theory{
    kTrainPoint, "traffic_gradient_sync_bytes_theory", "B",
    "ZeRO's volume for the mode, times (N-1)/N and the gradient buffer's bytes: 2 Psi (dp) or Psi (zero1, fsdp)"};
inline const RealAttribute traffic_parameter_gather_bytes_theory{
    kTrainPoint, "traffic_parameter_gather_bytes_theory", "B",
    "likewise: 0 (dp), Psi (zero1), 2 Psi (fsdp: every layer gathered for forward and again for backward)"};
inline const IntAttribute tensor_parallel{kTrainPoint, "tensor_parallel", "",
                                          "ranks per tensor parallel group (1: none); absent in reports before it"};
inline const RealAttribute comm_activation_s{kTrainPoint, "comm_activation_s", "s",
                                             "the part of comm_exposed_s in tensor parallel's activation "
                                             "all-reduces, mean per step and rank"};
inline const RealAttribute traffic_activation_bytes{
    kTrainPoint, "traffic_activation_bytes", "B",
    "bytes a rank sends per step in tensor parallel's activation all-reduces: 2(T-1)/T of each buffer"};
inline const RealAttribute traffic_activation_bytes_theory{
    kTrainPoint, "traffic_activation_bytes_theory", "B",
    "Megatron's: 4 L B S d elements per step (one all-reduce after each row-parallel layer in forward, one per "
    "column-parallel layer in backward) x element bytes x 2(T-1)/T"};
inline const IntAttribute pipeline_parallel{kTrainPoint, "pipeline_parallel", "",
                                            "pipeline stages P (1: none); absent in reports before it"};
inline const IntAttribute expert_parallel{kTrainPoint, "expert_parallel", "",
                                          "ranks each MoE block's experts are spread over EP (1: none); absent in "
                                          "reports before it"};
inline const RealAttribute comm_alltoall_s{kTrainPoint, "comm_alltoall_s", "s",
                                           "the part of comm_exposed_s in expert parallel's dispatch and combine "
                                           "all-to-alls (blocking, waits for the slowest peer included), mean per step "
                                           "and rank"};
inline const RealAttribute alltoall_bytes{kTrainPoint, "alltoall_bytes", "B",
                                          "dispatch and combine bytes a rank sends to other ranks per step, mean over "
                                          "ranks"};
inline const RealAttribute alltoall_inter_node_bytes{kTrainPoint, "alltoall_inter_node_bytes", "B",
                                                    "of alltoall_bytes, those sent to ranks on other nodes (expert "
                                                    "groups across nodes: --allow-cross-node-ep)"};
inline const RealAttribute alltoall_bytes_theory{
    kTrainPoint, "alltoall_bytes_theory", "B",
    "balanced routing, nothing dropped: 4 all-to-alls (dispatch and combine, forward and backward) x MoE blocks x M x "
    "B x S x top-k x d x 4 B (fp32 rows; 2 B, bf16, on the cuda backend) x (EP-1)/EP"};
inline const RealAttribute alltoall_GBps{kTrainPoint, "alltoall_GBps", "GB/s",
                                         "alltoall_bytes / comm_alltoall_s: bytes sent to other ranks over the time in "
                                         "the all-to-alls, waits for the slowest peer included (1e9 B; each of a "
                                         "token's K choices is a row of its own, where DeepEP sends a token once per "
                                         "rank)"};
inline const RealAttribute alltoall_dispatch_GBps{
    kTrainPoint, "alltoall_dispatch_GBps", "GB/s",
    "dispatch bytes sent to other ranks over the dispatches' time (1e9 B, waits included); DeepEP publishes 153 GB/s "
    "on H800 over NVLink and 43-58 GB/s across nodes over 400G RDMA for its dispatch (a token once per rank, and "
    "across nodes only the bytes that cross: collectives --ops moe_alltoall measures that convention)"};
inline const RealAttribute alltoall_combine_GBps{kTrainPoint, "alltoall_combine_GBps", "GB/s",
                                                 "combine bytes sent to other ranks over the combines' time (DeepEP: "
                                                 "158 GB/s on H800 over NVLink, as alltoall_dispatch_GBps)"};
inline const RealAttribute moe_max_over_mean{kTrainPoint, "moe_max_over_mean", "",
                                             "load balance: the worst MoE block's busiest expert over its mean (1: "
                                             "balanced), each step's over every rank's tokens, mean over the measured "
                                             "steps"};
inline const RealAttribute moe_dropped_share{kTrainPoint, "moe_dropped_share", "fraction",
                                             "routed choices dropped past their expert's capacity"};
inline const RealAttribute moe_aux_loss{kTrainPoint, "moe_aux_loss", "",
                                        "the load-balancing loss, mean over ranks and measured steps (coef at "
                                        "perfect balance)"};
inline const IntAttribute micro_batches{kTrainPoint, "micro_batches", "",
                                        "micro-batches per optimizer step M (--micro-batches, --grad-accum)"};
inline const RealAttribute comm_pipeline_s{kTrainPoint, "comm_pipeline_s", "s",
                                           "the part of comm_exposed_s in the exchanges with the neighbouring pipeline "
                                           "stages (waiting for them and the transfers), mean per step and rank"};
inline const RealAttribute bubble_measured{
    kTrainPoint, "bubble_measured", "fraction",
    "the share of a step's pipelined part that stages waited: comm_pipeline_s / (forward_s + backward_s + "
    "comm_pipeline_s), means over ranks and measured steps (the transfers count as waiting); NaN without stages"};
inline const RealAttribute bubble_theory{kTrainPoint, "bubble_theory", "fraction",
                                         "1F1B's (P-1)/(M+P-1) (Narayanan et al. 2021), transfers taken as free"};
inline const RealAttribute traffic_pipeline_bytes{kTrainPoint, "traffic_pipeline_bytes", "B",
                                                  "bytes a rank sends per step to its neighbouring stages (activations "
                                                  "forward, their gradients backward), mean over ranks"};
inline const RealAttribute traffic_pipeline_bytes_theory{
    kTrainPoint, "traffic_pipeline_bytes_theory", "B",
    "M x micro_batch x seq x d_model x 4 B (fp32) once per neighbour a stage sends to (forward to the next, backward "
    "to the previous), mean over ranks"};
inline const RealAttribute working_bytes{kTrainPoint, "working_bytes", "B",
                                         "fsdp: rank 0's working buffers (the units gathered at once and their "
                                         "gradients), outside ZeRO's 16 Psi/N; 0 in the other modes"};
inline const RealAttribute overlap{kTrainPoint, "overlap", "fraction", "1 - comm_exposed / comm_total"};
inline const RealAttribute gradient_bytes{kTrainPoint, "gradient_bytes", "B", "all-reduced per rank per step"};
inline const IntAttribute gradient_buckets{kTrainPoint, "gradient_buckets", "",
                                           "gradient collectives per rank per step: dp's all-reduces (the buckets of "
                                           "--bucket-mb), zero1's 1 reduce-scatter, fsdp's one per unit (layers + "
                                           "2)"};
inline const RealAttribute effective_busbw_GBps{kTrainPoint, "effective_busbw_GBps", "GB/s",
                                                "what a rank sends per step in ring algorithms (traffic_gradient_"
                                                "sync_bytes + traffic_parameter_gather_bytes) / comm_total: for dp "
                                                "gradient_bytes / comm_total x 2(k-1)/k, nccl-tests' busbw; NaN for "
                                                "k = 1"};
inline const RealAttribute loss_first{kTrainPoint, "loss_first", "nats", "mean over ranks, first measured step"};
inline const RealAttribute loss_last{kTrainPoint, "loss_last", "nats", "mean over ranks, last measured step"};
inline const IntAttribute worst_rank{kTrainPoint, "worst_rank", "", "the rank with the largest median step time"};
inline const RealAttribute energy_J{kTrainPoint, "energy_J", "J",
                                    "energy of the point's GPUs over its measured steps, from the driver's energy "
                                    "counter (NVML; on the CPU backend every GPU of the nodes it ran on); NaN when "
                                    "NVML gives none (see gpu_health)"};
inline const RealAttribute energy_per_step_J{kTrainPoint, "energy_per_step_J", "J", "energy_J / measured_steps"};
inline const RealAttribute joules_per_token{kTrainPoint, "joules_per_token", "J/token",
                                            "energy_J / (measured_steps x tokens_per_step)"};

inline TableSpec kSteps{kTrainPoint, "steps",
                        "a row per rank per step; warmup=1 rows are excluded from every statistic"};
namespace steps {
inline const IntColumn rank{kSteps, "rank", "", "rank"};
inline const IntColumn step{kSteps, "step", "", "step index"};
inline const IntColumn warmup{kSteps, "warmup", "", "1 = run but excluded from every statistic"};
inline const RealColumn data_wait_s{kSteps, "data_wait_s", "s", "waiting for the batch"};
inline const RealColumn h2d_s{kSteps, "h2d_s", "s", "unpacking the batch's tokens into int32 ids and copying them to the model's memory (pinned staging and an asynchronous copy on a GPU, a host copy on the CPU)"};
inline const RealColumn forward_s{kSteps, "forward_s", "s", "forward pass"};
inline const RealColumn backward_s{kSteps, "backward_s", "s", "backward pass, including starting bucket all-reduces"};
inline const RealColumn comm_total_s{kSteps, "comm_total_s", "s", "sum over buckets of start-to-completion time"};
inline const RealColumn comm_exposed_s{kSteps, "comm_exposed_s", "s",
                                       "waiting for communication: dp's buckets after backward, zero1's collectives, "
                                       "fsdp's gathers and reduce-scatters where compute did not hide them"};
inline const RealColumn comm_gather_exposed_s{kSteps, "comm_gather_exposed_s", "s",
                                              "the part of comm_exposed_s waiting for parameter all-gathers (zero1, "
                                              "fsdp); absent in reports before it"};
inline const RealColumn comm_activation_s{kSteps, "comm_activation_s", "s",
                                          "the part of comm_exposed_s (and comm_total_s) in tensor parallel's "
                                          "activation all-reduces; absent in reports before it"};
inline const RealColumn comm_pipeline_s{kSteps, "comm_pipeline_s", "s",
                                        "the part of comm_exposed_s (and comm_total_s) in pipeline parallel's "
                                        "exchanges with the neighbouring stages; absent in reports before it"};
inline const RealColumn comm_embedding_s{kSteps, "comm_embedding_s", "s",
                                         "the part of comm_exposed_s (and comm_total_s) in the tied embedding's "
                                         "gradient all-reduce between a pipeline's first and last stage"};
inline const IntColumn pipeline_send_bytes{kSteps, "pipeline_send_bytes", "B",
                                           "sent to the neighbouring stages: activations forward, their gradients "
                                           "backward"};
inline const IntColumn embedding_allreduce_bytes{kSteps, "embedding_allreduce_bytes", "B",
                                                 "the tied embedding's gradient all-reduced (first and last stage)"};
inline const RealColumn comm_alltoall_s{kSteps, "comm_alltoall_s", "s",
                                        "the part of comm_exposed_s (and comm_total_s) in expert parallel's dispatch "
                                        "and combine all-to-alls inside forward and backward; absent in reports "
                                        "before it"};
inline const RealColumn alltoall_dispatch_s{kSteps, "alltoall_dispatch_s", "s",
                                            "comm_alltoall_s's dispatches: token rows (and their output gradients) "
                                            "to the experts' ranks, the row counts' exchange included"};
inline const RealColumn alltoall_combine_s{kSteps, "alltoall_combine_s", "s",
                                           "comm_alltoall_s's combines: expert outputs (and input gradients) back"};
inline const RealColumn comm_experts_s{kSteps, "comm_experts_s", "s",
                                       "the part of comm_exposed_s (and comm_total_s) in the experts' gradient "
                                       "all-reduce over the ranks holding the same experts"};
inline const IntColumn alltoall_dispatch_bytes{kSteps, "alltoall_dispatch_bytes", "B",
                                               "token rows (and, in backward, their output gradients) sent to other "
                                               "ranks' experts"};
inline const IntColumn alltoall_combine_bytes{kSteps, "alltoall_combine_bytes", "B",
                                              "expert outputs (and, in backward, input gradients) sent back to "
                                              "other ranks"};
inline const IntColumn alltoall_inter_node_bytes{kSteps, "alltoall_inter_node_bytes", "B",
                                                 "of the dispatch and combine bytes, those sent to ranks on other "
                                                 "nodes"};
inline const IntColumn experts_allreduce_bytes{kSteps, "experts_allreduce_bytes", "B",
                                               "the experts' gradients all-reduced over the ranks holding them"};
inline const IntColumn moe_choices{kSteps, "moe_choices", "", "tokens x top-k routed, over micro-batches and MoE blocks"};
inline const IntColumn moe_dropped{kSteps, "moe_dropped", "", "of them dropped past their expert's capacity"};
inline const RealColumn moe_max_over_mean{kSteps, "moe_max_over_mean", "",
                                          "the worst MoE block's busiest expert over its mean (1: balanced), over "
                                          "the step's tokens of every data parallel rank"};
inline const RealColumn moe_aux_loss{kSteps, "moe_aux_loss", "",
                                     "the load-balancing loss (summed over blocks, mean over micro-batches), "
                                     "not in loss"};
inline const RealColumn comm_intra_s{kSteps, "comm_intra_s", "s",
                                     "comm_total_s inside nodes (hierarchical all-reduce); NaN where not told apart"};
inline const RealColumn comm_inter_s{kSteps, "comm_inter_s", "s",
                                     "comm_total_s across nodes (hierarchical all-reduce); NaN where not told apart"};
inline const RealColumn optimizer_s{kSteps, "optimizer_s", "s", "AdamW"};
inline const RealColumn checkpoint_stall_s{kSteps, "checkpoint_stall_s", "s", "blocked by a checkpoint"};
inline const RealColumn step_s{kSteps, "step_s", "s", "wall time of the step"};
inline const IntColumn tokens{kSteps, "tokens", "tokens", "tokens of the rank's batch"};
inline const RealColumn loss{kSteps, "loss", "nats", "the rank's mean cross-entropy"};
inline const IntColumn data_bytes{kSteps, "data_bytes", "B", "bytes read for the batch; 0 with synthetic tokens"};
inline const RealColumn data_read_MBps{kSteps, "data_read_MBps", "MB/s",
                                       "data_bytes over the span from the batch's first read starting to its last ending"};
inline const IntColumn loader_queue_depth{kSteps, "loader_queue_depth", "batches",
                                          "batches ready when the step asked; -1 with synthetic tokens"};
inline const IntColumn checkpoint_writing{kSteps, "checkpoint_writing", "",
                                          "1 when an asynchronous checkpoint writer was busy as the step began"};
}  // namespace steps

inline TableSpec kStallBudget{kTrainPoint, "stall_budget",
                              "shares of step time per rank over the measured steps (nearest-rank percentiles): "
                              "compute = forward+backward+optimizer; data_wait includes h2d; other = the rest"};
namespace stall_budget {
inline const std::vector<std::string> kParts = {"compute", "comm_exposed", "data_wait", "checkpoint_stall", "other"};
inline const IntColumn rank{kStallBudget, "rank", "", "rank"};
inline const TextColumn host{kStallBudget, "host", "", "its host"};
inline const TextColumn device{kStallBudget, "device", "", "its device"};
inline const RealColumn median_step_s{kStallBudget, "median_step_s", "s", "median step time"};
inline const RealColumn p50{kStallBudget, "<part>_p50", "fraction", "the part's share of step time, p50", kParts};
inline const RealColumn p95{kStallBudget, "<part>_p95", "fraction", "the part's share of step time, p95", kParts};
inline const RealColumn p99{kStallBudget, "<part>_p99", "fraction", "the part's share of step time, p99", kParts};
// comm_exposed by kind (they add up to it): gradient sync (dp's all-reduce, zero1's and fsdp's reduce-scatters, the
// tied embedding's all-reduce between a pipeline's first and last stage), parameter gather (zero1's and fsdp's
// all-gathers), activation (tensor parallel's all-reduces inside forward and backward) and pipeline (the exchanges
// with the neighbouring stages: waiting for them, the bubble, and the transfers), alltoall (expert parallel's
// dispatch and combine inside forward and backward); absent in reports before them.
inline const std::vector<std::string> kCommKinds = {"comm_gradient_sync", "comm_param_gather", "comm_activation",
                                                    "comm_pipeline", "comm_alltoall"};
inline const RealColumn kind_p50{kStallBudget, "<kind>_p50", "fraction", "the kind's share of step time, p50",
                                 kCommKinds};
inline const RealColumn kind_p95{kStallBudget, "<kind>_p95", "fraction", "the kind's share of step time, p95",
                                 kCommKinds};
inline const RealColumn kind_p99{kStallBudget, "<kind>_p99", "fraction", "the kind's share of step time, p99",
                                 kCommKinds};
}  // namespace stall_budget

// `train --op-times`: the model's work by kind (models/op_times.h); absent without it.
inline TableSpec kOpTimes{kTrainPoint, "op_times",
                          "a row per kind of work and phase (forward, backward; the optimizer's step), then "
                          "comm_model (where the mode communicates inside forward and backward), comm_exposed, "
                          "comm_pipeline (with pipeline stages) and other (the rest of the step): mean seconds per "
                          "measured step over the point's ranks, timed by marks on the model's stream (CUDA events; "
                          "the host clock on the CPU), so that the rows add up to the mean step (comm_model holds the "
                          "communication inside forward and backward, tensor parallel's activation all-reduces, "
                          "fsdp's gathers and reduce-scatters, expert parallel's all-to-alls, dp's bucket all-reduces "
                          "started and progressed as gradients become ready, taken out of the kind that waited; "
                          "comm_pipeline the exchanges between stages and the waits for them; comm_exposed the rest "
                          "of the step's communication); with stages a rank works on its stage's layers only, and "
                          "flops and bytes are the means over the point's ranks as the seconds are; with tensor "
                          "parallel a rank's matmul flops are 1/T of the model's; present with --op-times"};
namespace op_times {
inline const TextColumn kind{kOpTimes, "kind", "",
                             "embedding, layernorm, attention (qkv and output projections, attention itself), mlp, "
                             "lm_head (tied head and cross-entropy), optimizer, comm_model, comm_exposed, "
                             "comm_pipeline, other"};
inline const TextColumn phase{kOpTimes, "phase", "", "forward, backward or step"};
inline const RealColumn seconds{kOpTimes, "seconds", "s", "mean per measured step (all its micro-batches)"};
inline const RealColumn share{kOpTimes, "share", "fraction", "of the mean step time"};
inline const RealColumn flops{kOpTimes, "flops", "FLOP",
                              "per step and rank, by the MFU convention (2 per multiply-add of a matmul weight forward, 4 "
                              "backward; causal attention 2 T C per token per layer forward, 4 backward; a tensor "
                              "parallel rank's 1/T of them); 0 without matmuls"};
inline const RealColumn bytes{kOpTimes, "bytes", "B",
                              "per step and rank, what the kind must read and write at least (layernorm, embedding, "
                              "optimizer); 0 for the matmul kinds"};
inline const RealColumn tflops{kOpTimes, "tflops", "TFLOP/s", "flops / seconds; NaN without flops"};
inline const RealColumn gemm_fraction{kOpTimes, "gemm_fraction", "fraction",
                                      "tflops over the GEMM rate measured in the run (train/measured_gemm_flops)"};
inline const RealColumn GBps{kOpTimes, "GBps", "GB/s", "bytes / seconds; NaN without bytes"};
inline const RealColumn copy_fraction{kOpTimes, "copy_fraction", "fraction",
                                      "GBps over the device's copy rate measured in the run (train/copy_bytes_per_s); "
                                      "above 1 where the kind's data stays in cache"};
}  // namespace op_times

// Pipeline parallel (`train --pipeline-parallel P`): a row per stage, its plan next to what its ranks measured.
inline TableSpec kStages{kTrainPoint, "stages",
                         "a row per pipeline stage: what it holds (the plan) and what its ranks measured (means over "
                         "them and the measured steps); present with --pipeline-parallel"};
namespace stages {
inline const IntColumn stage{kStages, "stage", "", "the stage, from 0 (the embeddings) to P-1 (the LM head)"};
inline const IntColumn first_layer{kStages, "first_layer", "", "its first block"};
inline const IntColumn last_layer{kStages, "last_layer", "", "its last block"};
inline const IntColumn slots{kStages, "slots", "micro-batches",
                             "micro-batches whose activations it holds at once under 1F1B: min(P - stage, M)"};
inline const RealColumn parameters{kStages, "parameters", "",
                                   "elements it holds, before tensor parallel divides them (wte on the first and, "
                                   "as the tied LM head, on the last)"};
inline const RealColumn activations_bytes_theory{
    kStages, "activations_bytes_theory", "B",
    "EstimateMemory's activations of its blocks (and the head's on the last stage) x slots, per rank"};
inline const RealColumn activations_bytes{kStages, "activations_bytes", "B",
                                          "what the stage's models allocated for activations (every micro-batch "
                                          "slot's) and backward's scratch, the most of its ranks; NaN where the model "
                                          "does not say (tensor parallel)"};
inline const RealColumn forward_s{kStages, "forward_s", "s", "forward compute per step (all micro-batches)"};
inline const RealColumn backward_s{kStages, "backward_s", "s", "backward compute per step"};
inline const RealColumn comm_pipeline_s{kStages, "comm_pipeline_s", "s", "exchanges with its neighbours per step"};
inline const RealColumn bubble_measured{kStages, "bubble_measured", "fraction",
                                        "comm_pipeline_s / (forward_s + backward_s + comm_pipeline_s)"};
inline const RealColumn pipeline_send_bytes{kStages, "pipeline_send_bytes", "B", "sent per step per rank"};
inline const RealColumn pipeline_send_bytes_theory{kStages, "pipeline_send_bytes_theory", "B",
                                                   "M x micro_batch x seq x d_model x 4 B per neighbour sent to"};
inline const TextColumn next_stage_link{kStages, "next_stage_link", "",
                                        "inter-node where a rank of the stage and its peer in the next stage are on "
                                        "different hosts (its activations cross the network), intra-node where none "
                                        "is; empty for the last stage"};
}  // namespace stages

// Repeats (`train --repeats N`): the measured phase run N times, each after its own warm-up on a fresh model.
inline const IntAttribute repeat_count{kTrainPoint, "repeats", "",
                                       "times the measured phase ran (`--repeats`), each after its own warm-up; "
                                       "absent in reports before it: 1"};
inline const IntAttribute median_repeat{kTrainPoint, "median_repeat", "",
                                        "the repeat (from 1) at the median tokens/s, the lower of the middle two for "
                                        "an even count: the group's other attributes and tables are that repeat's"};
inline TableSpec kRepeats{kTrainPoint, "repeats",
                          "a row per repeat: its headline figures, as the point's attributes of the same names "
                          "define them"};
namespace repeats {
inline const IntColumn repeat{kRepeats, "repeat", "", "the repeat, from 1 in the order they ran"};
inline const RealColumn tokens_per_s{kRepeats, "tokens_per_s", "tokens/s", "tokens_per_step / step_s"};
inline const RealColumn step_s{kRepeats, "step_s", "s", "mean over measured steps of the slowest rank's step time"};
inline const RealColumn mfu_peak{kRepeats, "mfu_peak", "fraction", "NaN without a peak"};
inline const RealColumn mfu_measured_gemm{kRepeats, "mfu_measured_gemm", "fraction", "against the measured GEMM rate"};
inline const RealColumn comm_exposed_s{kRepeats, "comm_exposed_s", "s", "mean per step and rank"};
inline const RealColumn data_wait_share{kRepeats, "data_wait_share", "fraction",
                                        "sum of (data_wait + h2d) / sum of step time, every rank's measured steps"};
inline const RealColumn checkpoint_stall_share{kRepeats, "checkpoint_stall_share", "fraction",
                                               "sum of checkpoint_stall / sum of step time"};
inline const RealColumn checkpoint_write_GBps{kRepeats, "checkpoint_write_GBps", "GB/s",
                                              "every checkpoint's bytes (all ranks) / the sum of each checkpoint's "
                                              "slowest slice write_s; NaN without checkpoints"};
}  // namespace repeats
inline TableSpec kSpread{kTrainPoint, "spread",
                         "a row per headline figure of the repeats table, over the repeats that measured it: median "
                         "(of an even count, the mean of the middle two), min, max and the coefficient of variation "
                         "(sample standard deviation / mean; NaN for one repeat)"};
namespace spread {
inline const TextColumn figure{kSpread, "figure", "", "the repeats table's column, e.g. `tokens_per_s`"};
inline const IntColumn count{kSpread, "count", "", "repeats that measured it (NaN values left out)"};
inline const RealColumn median{kSpread, "median", "", "in the figure's unit"};
inline const RealColumn min{kSpread, "min", "", "in the figure's unit"};
inline const RealColumn max{kSpread, "max", "", "in the figure's unit"};
inline const RealColumn cv{kSpread, "cv", "fraction", "sample standard deviation / mean"};
}  // namespace spread
// The figures the spread table has a row of (its `figure` column names them): the repeats table's columns but
// `repeat`, in its order. The writer (models/train_repeats.cc) and the readers (the views, cost) name them so.
inline const std::vector<const RealColumn*> kSpreadFigures = {
    &repeats::tokens_per_s,      &repeats::step_s,          &repeats::mfu_peak,
    &repeats::mfu_measured_gemm, &repeats::comm_exposed_s,  &repeats::data_wait_share,
    &repeats::checkpoint_stall_share, &repeats::checkpoint_write_GBps};
}  // namespace point

// ---- io -----------------------------------------------------------------------------------------------------
inline GroupSpec kIo{"io", "train with --data, --checkpoint-every or --resume: the run's I/O as a whole"};
namespace io {
inline const TextAttribute data_verify{kIo, "data_verify", "",
                                       "what the checksum pass before the first step checked, or why nothing"};
inline const RealAttribute data_verify_bytes{kIo, "data_verify_bytes", "B", "payload bytes read, all ranks"};
inline const RealAttribute data_verify_s{kIo, "data_verify_s", "s", "the slowest rank's wall time"};
inline const RealAttribute sweep_data_wait_share{kIo, "sweep_data_wait_share", "fraction",
                                                 "storage sweep: the target share (--data-wait-share)"};
inline const RealAttribute throttle_at_data_wait_share_MBps{
    kIo, "throttle_at_data_wait_share_MBps", "MB/s",
    "the rate per rank at which data_wait reaches that share, linear between the two rates around the crossing; "
    "NaN when it never does, or already does at the fastest rate"};

inline TableSpec kThrottleSweep{kIo, "throttle_sweep",
                                "storage sweep: the same run at decreasing --io-throttle rates per rank; "
                                "data_wait_share = (data_wait + h2d) / step time over every rank's measured steps"};
namespace throttle_sweep {
inline const RealColumn io_throttle_MBps{kThrottleSweep, "io_throttle_MBps", "MB/s", "emulated read rate per rank"};
inline const RealColumn data_wait_share{kThrottleSweep, "data_wait_share", "fraction", "as in io/<point>"};
inline const RealColumn step_s{kThrottleSweep, "step_s", "s", "as in train/<point>"};
inline const RealColumn tokens_per_s{kThrottleSweep, "tokens_per_s", "tokens/s", "as in train/<point>"};
}  // namespace throttle_sweep
}  // namespace io

// ---- io/<point> ---------------------------------------------------------------------------------------------
inline GroupSpec kIoPoint{"io/<point>", "one group per run of the loop, named as its train group"};
namespace io_point {
inline const RealAttribute data_wait_share{kIoPoint, "data_wait_share", "fraction",
                                           "sum of (data_wait + h2d) / sum of step time, every rank's measured steps"};
inline const RealAttribute checkpoint_stall_share{kIoPoint, "checkpoint_stall_share", "fraction",
                                                  "sum of checkpoint_stall / sum of step time"};
inline const RealAttribute io_throttle_MBps{kIoPoint, "io_throttle_MBps", "MB/s", "emulated read rate; 0 = none"};
inline const RealAttribute checkpoint_writer_slowdown{
    kIoPoint, "checkpoint_writer_slowdown", "",
    "mean step time of steps begun while an asynchronous writer was busy / that of the others, both without the "
    "steps that took a checkpoint; NaN when either kind is missing"};
inline const IntAttribute checkpoint_writer_slowdown_steps{kIoPoint, "checkpoint_writer_slowdown_steps", "steps",
                                                           "steps begun while a writer was busy"};
inline const TextAttribute resumed_from{kIoPoint, "resumed_from", "", "--resume: the checkpoint directory"};
inline const IntAttribute resumed_step{kIoPoint, "resumed_step", "", "--resume: the step it holds"};
inline const RealAttribute resume_load_s{kIoPoint, "resume_load_s", "s", "--resume: time to load it"};
inline const IntAttribute resume_saved_ranks{kIoPoint, "resume_saved_ranks", "ranks", "--resume: ranks that saved it"};
inline const TextAttribute resume_unchecked{kIoPoint, "resume_unchecked", "",
                                            "--resume: trajectory options an older checkpoint does not record and that were "
                                            "assumed equal, comma-separated; empty when every one was compared (src/README.md)"};
inline const IntAttribute dataset_files{kIoPoint, "dataset_files", "files", "loader: files of the dataset"};
inline const IntAttribute dataset_files_kept_open{kIoPoint, "dataset_files_kept_open", "files",
                                                  "loader: files kept open; the rest are opened for each read (more files than half the descriptor limit)"};
inline const IntAttribute dataset_files_mapped{
    kIoPoint, "dataset_files_mapped", "files",
    "loader: files read from memory maps (--read mmap, or auto for a dataset within a quarter of the host's memory); "
    "the rest with pread"};
inline const IntAttribute dataset_samples{kIoPoint, "dataset_samples", "samples", "loader: samples of the dataset"};
inline const IntAttribute record_bytes{kIoPoint, "record_bytes", "B", "loader: bytes per sample"};
inline const IntAttribute batches_per_epoch{kIoPoint, "batches_per_epoch", "", "loader: global batches per epoch"};
inline const IntAttribute dropped_samples_per_epoch{kIoPoint, "dropped_samples_per_epoch", "samples",
                                                    "loader: past the last whole global batch"};
inline const TextAttribute checkpoint_dir{kIoPoint, "checkpoint_dir", "", "checkpoints: the directory"};
inline const IntAttribute checkpoint_state_bytes{kIoPoint, "checkpoint_state_bytes", "B",
                                                 "checkpoints: the whole state (fp32 weights, both AdamW moments)"};
inline const IntAttribute checkpoint_bytes{kIoPoint, "checkpoint_bytes", "B",
                                           "checkpoints: bytes written, every rank's slice of every checkpoint"};
inline const RealAttribute checkpoint_write_GBps{
    kIoPoint, "checkpoint_write_GBps", "GB/s",
    "checkpoints: checkpoint_bytes / the sum of each checkpoint's slowest slice write_s, the rate the "
    "storage took them at, comparable with fio writing the same bytes in as many files with fsync "
    "(tests/perf/checkpoint_vs_fio.sh); NaN without a checkpoint"};
inline const IntAttribute loader_ranks{
    kIoPoint, "loader_ranks", "ranks",
    "loader: ranks that read batches: each replica's tensor parallel ranks of its first and last pipeline stage (every "
    "rank without stages); a middle stage reads none"};
inline const IntAttribute loader_ranks_per_batch{
    kIoPoint, "loader_ranks_per_batch", "ranks",
    "loader: ranks that read each data parallel replica's batch (the same samples): tensor_parallel, times 2 with "
    "pipeline stages (the first takes the inputs, the last the targets); 1 for plain data parallel"};
inline const IntAttribute loader_bytes{
    kIoPoint, "loader_bytes", "B",
    "loader: bytes read, summed over the loader_ranks ranks that read: each batch counted loader_ranks_per_batch "
    "times (the dataset's bytes consumed are loader_bytes / loader_ranks_per_batch)"};
inline const RealAttribute loader_per_read_MBps{
    kIoPoint, "loader_per_read_MBps", "MB/s",
    "loader: loader_bytes / the sum of every read's time (one read stream's rate, comparable with fio's "
    "one-job random reads of record_bytes, tests/perf/loader_vs_fio.sh)"};

inline TableSpec kLoader{kIoPoint, "loader",
                         "per rank that reads (loader_ranks of them): batches handed to the loop, bytes read, reads, "
                         "the sum of read times (workers overlap, so bytes/read_s is a per-read rate), and the loop's "
                         "total wait for batches"};
namespace loader {
inline const IntColumn rank{kLoader, "rank", "", "rank"};
inline const IntColumn replica{kLoader, "replica", "",
                               "the data parallel replica whose share of each global batch it reads (= rank without "
                               "tensor parallel or pipeline stages)"};
inline const RealColumn batches{kLoader, "batches", "", "batches handed to the loop"};
inline const RealColumn bytes_read{kLoader, "bytes_read", "B", "bytes read"};
inline const RealColumn reads{kLoader, "reads", "", "reads"};
inline const RealColumn read_s{kLoader, "read_s", "s", "sum over reads (workers overlap)"};
inline const RealColumn per_read_MBps{kLoader, "per_read_MBps", "MB/s", "bytes_read / read_s"};
inline const RealColumn wait_s{kLoader, "wait_s", "s", "the loop's total wait for batches"};
}  // namespace loader

inline TableSpec kCheckpoints{kIoPoint, "checkpoints",
                              "a row per checkpoint per rank: its slice's bytes; stall_s = time the training loop "
                              "was blocked (sync: copy, write, fsync and manifest; async: the copy of device memory at "
                              "the checkpoint, at the next optimizer step the copy of what the writer had not read "
                              "yet, and any wait for the writer); write_s = write + fsync + rename of the slice file; "
                              "write_GBps = bytes / write_s (1e9 B/s); crc32c of the slice; verified = read back "
                              "after fsync with the same checksum; ok = the checkpoint is complete"};
namespace checkpoints {
inline const IntColumn step{kCheckpoints, "step", "", "steps completed"};
inline const IntColumn rank{kCheckpoints, "rank", "", "rank"};
inline const TextColumn mode{kCheckpoints, "mode", "", "`sync` or `async`"};
inline const IntColumn bytes{kCheckpoints, "bytes", "B", "the rank's slice"};
inline const RealColumn stall_s{kCheckpoints, "stall_s", "s", "time the loop was blocked"};
inline const RealColumn write_s{kCheckpoints, "write_s", "s", "write + fsync + rename of the slice"};
inline const RealColumn write_GBps{kCheckpoints, "write_GBps", "GB/s", "bytes / write_s"};
inline const RealColumn copy_s{kCheckpoints, "copy_s", "s",
                               "of write_s: copying device memory to the host block by block (0: a host state)"};
inline const RealColumn crc_s{kCheckpoints, "crc_s", "s", "of write_s: the CRC-32C of the slice"};
inline const RealColumn write_calls_s{kCheckpoints, "write_calls_s", "s",
                                      "of write_s: the write() calls (the page cache, or the device once the dirty "
                                      "limit is reached)"};
inline const RealColumn commit_s{kCheckpoints, "commit_s", "s",
                                 "of write_s: fsync of what writeback had not yet written, rename, directory sync"};
inline const IntColumn crc32c{kCheckpoints, "crc32c", "", "CRC-32C of the slice"};
inline const IntColumn verified{kCheckpoints, "verified", "", "1: read back after fsync with the same checksum"};
inline const IntColumn ok{kCheckpoints, "ok", "", "1: the checkpoint is complete"};
inline const TextColumn error{kCheckpoints, "error", "", "why not"};
}  // namespace checkpoints
}  // namespace io_point

// ---- suite --------------------------------------------------------------------------------------------------
inline GroupSpec kSuite{"suite", "trainbench suite: the profile it ran and how each phase of each repeat ended"};
namespace suite {
inline const TextAttribute profile{kSuite, "profile", "", "`--profile`: a built-in name (`quick`, `nightly`) or the file"};
inline const TextAttribute phase_order{kSuite, "phase_order", "", "the profile's phases in the order they ran, comma-separated"};
inline const IntAttribute repeats{kSuite, "repeats", "",
                                  "how often the phases ran (`--repeats`): the latest repeat's figures are at the "
                                  "root, each earlier repeat r's under `repeats/r<r>`"};
inline const TextAttribute workdir{kSuite, "workdir", "",
                                   "the directory the suite wrote its dataset and checkpoints into (removed at the "
                                   "end unless `--keep-workdir`)"};
inline const RealAttribute data_write_GBps{kSuite, "data_write_GBps", "GB/s",
                                           "the dataset the suite wrote for train's loader: bytes / seconds until "
                                           "every rank had written its shards (NaN: train read data of its own)"};
inline TableSpec kPhases{kSuite, "phases", "one row per phase and repeat, in the order they ran"};
namespace phases {
inline const TextColumn phase{kPhases, "phase", "", "`data` (writing the dataset), `collectives`, `p2p`, `train`"};
inline const IntColumn repeat{kPhases, "repeat", "",
                               "1..repeats, or 0 for the confirmation (`--confirm-within`: the phase measured again "
                               "because a figure of it failed; its groups under `confirm`)"};
inline const TextColumn status{kPhases, "status", "",
                               "`complete`, `failed`, `interrupted` (a stop signal), or `running` (in a report "
                               "written while the phase ran: the job ended during it)"};
inline const TextColumn reason{kPhases, "reason", "", "why a phase failed, as its command would have said it"};
inline const RealColumn seconds{kPhases, "seconds", "s", "wall time of the phase"};
}  // namespace phases
// suite/phases' repeat of a confirmation.
inline constexpr int64_t kConfirmRepeat = 0;
}  // namespace suite
// The top-level groups one repeat of a suite writes, which repeats/r<r> holds for each earlier repeat.
inline const std::vector<std::string> kRepeatGroups = {"collectives", "p2p", "train", "io", "summary"};
inline constexpr const char* kRepeatsGroupName = "repeats";
inline GroupSpec kConfirm{"confirm",
                          "suite `--confirm-within`: when a figure failed, its phases measured again in the same launch "
                          "(bounded in time), laid out as the root holds them: `collectives`, `p2p`, or `train` and "
                          "`io`, and `summary` as it stood after them; the root keeps the first measurement. validate "
                          "fails a figure only when its confirmation fails too. In a report that ended during the "
                          "confirmation (its suite/phases row `running`), `confirm` holds the first measurement of "
                          "the phases being measured again"};
inline GroupSpec kRepeat{"repeats/<repeat>",
                         "suite `--repeats N`: one group `r<r>` per earlier repeat r = 1..N-1 holding that "
                         "repeat's `collectives`, `p2p`, `train`, `io` and `summary` groups, laid out as the root "
                         "holds the latest repeat's"};

// ---- gpu_health ---------------------------------------------------------------------------------------------
inline GroupSpec kGpuHealth{"gpu_health",
                            "collectives, p2p, train, data generate: each node's GPUs as NVML reports them, read by the "
                            "node's lowest local rank when the measurement starts, every interval_s during it and at "
                            "the end; NaN (text: `not supported`) where NVML gives nothing, never 0"};
namespace gpu_health {
inline const TextAttribute source{kGpuHealth, "source", "",
                                  "`NVML (libnvidia-ml.so.1)`, or `NVML not available: <why>` (per node where nodes "
                                  "differ)"};
inline const RealAttribute interval_s{kGpuHealth, "interval_s", "s", "between samples during the run"};
inline const IntAttribute samples{kGpuHealth, "samples", "", "sampling rounds of the node that took the fewest"};

inline TableSpec kDevices{kGpuHealth, "devices",
                          "one row per GPU of every node that NVML lists (zero rows without NVML); counters are the "
                          "highest value seen, volatile ones counted since the driver loaded; a busy sample is one "
                          "whose clock event reasons lack gpu_idle"};
namespace devices {
inline const TextColumn host{kDevices, "host", "", "host name"};
inline const IntColumn node{kDevices, "node", "", "node index"};
inline const IntColumn index{kDevices, "index", "", "NVML's index of the GPU on its node"};
inline const TextColumn pci_bus_id{kDevices, "pci_bus_id", "", "PCI bus id as NVML writes it"};
inline const TextColumn name{kDevices, "name", "", "GPU model"};
inline const TextColumn uuid{kDevices, "uuid", "", "GPU UUID"};
inline const TextColumn ranks{kDevices, "ranks", "", "the ranks bound to it, comma-separated (`\"\"`: none)"};
inline const IntColumn samples{kDevices, "samples", "", "samples of this GPU"};
inline const IntColumn busy_samples{kDevices, "busy_samples", "", "samples whose clock event reasons lack gpu_idle"};
inline const RealColumn ecc_corrected_volatile{kDevices, "ecc_corrected_volatile", "errors",
                                               "corrected (single-bit) ECC errors, volatile count"};
inline const RealColumn ecc_uncorrected_volatile{kDevices, "ecc_uncorrected_volatile", "errors",
                                                 "uncorrected (double-bit) ECC errors, volatile count"};
inline const RealColumn retired_pages{kDevices, "retired_pages", "pages",
                                      "pages retired for multiple single-bit or a double-bit error (pre-Ampere)"};
inline const RealColumn retired_pages_pending{kDevices, "retired_pages_pending", "",
                                              "1: a page retirement waits for the next driver load"};
inline const RealColumn remapped_rows_corrected{kDevices, "remapped_rows_corrected", "rows",
                                                "rows remapped for correctable errors (Ampere and later)"};
inline const RealColumn remapped_rows_uncorrected{kDevices, "remapped_rows_uncorrected", "rows",
                                                  "rows remapped for uncorrectable errors"};
inline const RealColumn remap_pending{kDevices, "remap_pending", "", "1: a row remap waits for the next GPU reset"};
inline const RealColumn remap_failure{kDevices, "remap_failure", "", "1: a row remap failed"};
inline const RealColumn pcie_gen_current{kDevices, "pcie_gen_current", "",
                                         "PCIe generation: the highest current value over the busy samples (idle "
                                         "links train down); NaN when no sample was busy"};
inline const RealColumn pcie_gen_max{kDevices, "pcie_gen_max", "", "PCIe generation the GPU and its slot can reach"};
inline const RealColumn pcie_width_current{kDevices, "pcie_width_current", "lanes",
                                           "PCIe width: the highest current value over the busy samples"};
inline const RealColumn pcie_width_max{kDevices, "pcie_width_max", "lanes", "PCIe width the GPU and its slot can reach"};
inline const RealColumn sm_clock_min_MHz{kDevices, "sm_clock_min_MHz", "MHz", "SM clock, lowest sample"};
inline const RealColumn sm_clock_median_MHz{kDevices, "sm_clock_median_MHz", "MHz", "SM clock, median of the samples"};
inline const RealColumn sm_clock_max_MHz{kDevices, "sm_clock_max_MHz", "MHz", "SM clock, highest sample"};
inline const RealColumn sm_clock_max_supported_MHz{kDevices, "sm_clock_max_supported_MHz", "MHz",
                                                   "the SM clock's maximum (nvmlDeviceGetMaxClockInfo)"};
inline const TextColumn clock_event_reasons{kDevices, "clock_event_reasons", "",
                                            "clock event (throttle) reasons seen in any sample, comma-separated "
                                            "(`sw_power_cap`, `hw_slowdown`, `sw_thermal_slowdown`, "
                                            "`hw_thermal_slowdown`, `hw_power_brake_slowdown`, `gpu_idle`, ...), "
                                            "`none`, or `not supported`"};
inline const RealColumn power_mean_W{kDevices, "power_mean_W", "W", "power draw, mean of the samples"};
inline const RealColumn power_max_W{kDevices, "power_max_W", "W", "power draw, highest sample"};
inline const RealColumn power_limit_W{kDevices, "power_limit_W", "W", "enforced power limit (highest seen)"};
inline const RealColumn temperature_max_C{kDevices, "temperature_max_C", "C", "GPU temperature, highest sample"};
inline const RealColumn energy_J{kDevices, "energy_J", "J",
                                 "the driver's energy counter at the last sample minus at the first"};
inline const TextColumn nvml_errors{kDevices, "nvml_errors", "",
                                    "NVML failures other than `not supported`, `; `-separated (`\"\"`: none)"};
}  // namespace devices
}  // namespace gpu_health

// ---- summary ------------------------------------------------------------------------------------------------
inline GroupSpec kSummary{"summary", "headline figures that report, cost and validate read"};
namespace summary {
inline const RealAttribute peak_busbw_GBps{kSummary, "<op>_peak_busbw_GBps", "GB/s",
                                           "collectives: the best busbw of the operation over sizes"};
inline const IntAttribute peak_busbw_size_bytes{kSummary, "<op>_peak_busbw_size_bytes", "B",
                                                "collectives: the size where it occurred"};
inline const IntAttribute wrong_elements_total{kSummary, "wrong_elements_total", "elements",
                                               "collectives: the sum of all checked `wrong` entries"};
inline const RealAttribute p2p_median_uni_GBps{kSummary, "p2p_median_uni_GBps", "GB/s", "p2p: as p2p/median_uni_GBps"};
inline const IntAttribute p2p_flagged_pairs{kSummary, "p2p_flagged_pairs", "pairs", "p2p: rows of p2p/flagged"};
inline const TextAttribute train_points{kSummary, "train_points", "",
                                        "train: the measured points' group names in the order they ran, "
                                        "comma-separated (`k1,k2`, or `k1_throttle800,...`)"};
inline const RealAttribute train_tokens_per_s{kSummary, "train_tokens_per_s", "tokens/s", "train: of the largest point"};
inline const IntAttribute train_ranks{kSummary, "train_ranks", "ranks", "train: ranks of the largest point"};
inline const RealAttribute train_scaling_efficiency{kSummary, "train_scaling_efficiency", "fraction",
                                                    "train: of the largest point"};
inline const IntAttribute tokens_written{kSummary, "tokens_written", "tokens", "data generate: tokens written"};
inline const IntAttribute shards_written{kSummary, "shards_written", "files", "data generate: shards written"};
inline const IntAttribute bytes_written{kSummary, "bytes_written", "B", "data generate: bytes written"};
inline const RealAttribute seconds{kSummary, "seconds", "s", "data generate: wall time until every rank had written its shards"};
inline const RealAttribute write_GBps{kSummary, "write_GBps", "GB/s", "data generate: bytes_written / seconds"};
}  // namespace summary

// Fields that neither `report`'s views nor cost's reader read: kept in the report for the user's own analysis
// (h5py, pandas), plots.py and the nightly checks. tests/schema_coverage.cc checks that every other field is read
// by the views or cost and that none of these is, so this list stays exact.
inline const std::vector<const Field*> kStoredOnly = {
    // The identity ReadReport checks before anything else.
    &root::schema, &root::schema_version,
    // A timeout's stuck ranks: validate's run.status concerns them; `report` shows them in the status reason.
    &root::stuck_ranks,
    // Where each rank ran, in detail, and the environment.
    &topology::ranks::local_size, &topology::ranks::gpu_uuid, &topology::ranks::gpu_pci_bus,
    &topology::ranks::gpu_memory_bytes, &topology::gpu_links::node, &topology::gpu_links::host,
    &topology::gpu_links::gpu_a, &topology::gpu_links::gpu_b, &topology::environment::rank,
    &topology::environment::name, &topology::environment::value,
    // How a collective ran (plots.py draws the bus factor), and each size's spread over ranks.
    &collective::op, &collective::redop, &collective::root, &collective::iters, &collective::warmup,
    &collective::check_iters, &collective::bus_factor, &collective::bus_factor_formula, &collective::busbw_convention,
    &collective::results::time_rank_min_us, &collective::results::time_rank_avg_us,
    // How p2p ran, and its other two matrices.
    &p2p::iters, &p2p::latency_bytes, &p2p::latency_iters, &p2p::complete,
    // Whether the CUDA model's passes ran from CUDA graphs (train --cuda-graph; the same bits either way).
    &train::cuda_graphs,
    // The model's shape and the FLOP convention behind MFU.
    &model::preset_layers, &model::vocab_padded, &model::matmul_parameters, &model::model_flops_per_token, &model::flops_convention,
    // Mixture of experts: the model's active counts and MoE blocks (cost reads its shape); each step's routing and
    // all-to-alls (the point's attributes summarise them).
    &model::active_parameters, &model::active_matmul_parameters, &model::moe_layers,
    &point::steps::comm_alltoall_s, &point::steps::alltoall_dispatch_s, &point::steps::alltoall_combine_s,
    &point::steps::comm_experts_s, &point::steps::alltoall_dispatch_bytes,
    &point::steps::alltoall_combine_bytes, &point::steps::alltoall_inter_node_bytes, &point::steps::experts_allreduce_bytes, &point::steps::moe_choices,
    &point::steps::moe_dropped, &point::steps::moe_max_over_mean, &point::steps::moe_aux_loss,
    &point::model_flops_per_token, &point::step_s_p95,
    // How the rates MFU divides by were found, start-up parts, and each rank's peak memory.
    &train::measured_gemm, &train::copy_bytes_per_s, &train::peak_source, &train::mpi_init_s,
    &train::communicator_init_s,
    &train::memory::rank, &train::memory::peak_host_memory_bytes, &train::memory::peak_device_memory_bytes,
    // The kernels the CUDA model chose by timing, for whoever compares runs or kernels.
    &train::kernel_choices::what, &train::kernel_choices::shape, &train::kernel_choices::candidates,
    &train::kernel_choices::chosen, &train::kernel_choices::chosen_s, &train::kernel_choices::first_s,
    // Every step's phases: the figures above are computed from them when the run is summarised.
    &point::steps::rank, &point::steps::forward_s,
    &point::steps::backward_s, &point::steps::comm_total_s, &point::steps::comm_exposed_s,
    &point::steps::comm_gather_exposed_s, &point::steps::comm_activation_s, &point::steps::comm_intra_s, &point::steps::comm_inter_s, &point::steps::tokens, &point::steps::loss, &point::steps::data_bytes,
    &point::steps::data_read_MBps, &point::steps::loader_queue_depth, &point::steps::checkpoint_writing,
    // (comm_embedding_s and embedding_allreduce_bytes: cost reads them.)
    &point::steps::comm_pipeline_s, &point::steps::pipeline_send_bytes,
    // Pipeline parallel's stages: the point's attributes summarise them.
    &point::stages::stage, &point::stages::first_layer, &point::stages::last_layer, &point::stages::slots,
    &point::stages::parameters, &point::stages::activations_bytes_theory, &point::stages::activations_bytes, &point::stages::forward_s,
    &point::stages::backward_s, &point::stages::comm_pipeline_s, &point::stages::bubble_measured,
    &point::stages::pipeline_send_bytes, &point::stages::pipeline_send_bytes_theory, &point::stages::next_stage_link,
    &point::stall_budget::p99, &point::stall_budget::kind_p99,
    // The data check before the first step, resume and loader details, and each slice of a checkpoint.
    &io::data_verify, &io::data_verify_bytes, &io::data_verify_s, &io_point::resume_saved_ranks,
    &io_point::resume_unchecked, &io_point::batches_per_epoch, &io_point::checkpoint_dir,
    &io_point::checkpoints::rank, &io_point::checkpoints::write_GBps, &io_point::checkpoints::crc32c,
    // Headlines for scripts and the nightly checks; the views compute them from the groups they summarise.
    &summary::p2p_median_uni_GBps, &summary::p2p_flagged_pairs, &summary::train_points, &summary::train_tokens_per_s,
    &summary::train_ranks, &summary::train_scaling_efficiency, &summary::tokens_written, &summary::shards_written,
    &summary::bytes_written, &summary::seconds, &summary::write_GBps,
    // validate reads it; the view shows the counts.
    &collective::results::wrong_sources,
    // How a suite went: validate reads it (its phase checks), people read it with `h5dump` or h5py.
    &suite::profile, &suite::phase_order, &suite::repeats, &suite::workdir, &suite::data_write_GBps,
    &suite::phases::phase, &suite::phases::repeat, &suite::phases::status, &suite::phases::reason,
    &suite::phases::seconds,
    // How moe_alltoall ran, its busiest ranks and each phase's spread over ranks (`report` shows the rest).
    &moe_alltoall::seed, &moe_alltoall::dtype, &moe_alltoall::iters, &moe_alltoall::warmup, &moe_alltoall::check_iters,
    &moe_alltoall::bytes_convention, &moe_alltoall::results::max_sent_bytes, &moe_alltoall::results::max_received_bytes,
    &moe_alltoall::results::time_rank_min_us, &moe_alltoall::results::time_rank_avg_us,
    &moe_alltoall::results::wrong_sources,
};

// The matrices the views do not read (they show p2p's median bidirectional rate from its attribute).
inline const std::vector<const MatrixSpec*> kStoredOnlyMatrices = {&p2p::bidi_bw_GBps, &p2p::latency_us};

// Fields only a GPU run writes (the coverage test's runs are on the CPU).
inline const std::vector<const Field*> kGpuOnly = {&train::attention_fallback_reason};
// Tables only a GPU run writes: the kernels the CUDA model chose by timing.
inline const std::vector<const TableSpec*> kGpuOnlyTables = {&train::kKernelChoices};

}  // namespace tb::schema
