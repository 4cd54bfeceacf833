// The tables of `trainbench cost --format csv|json` (and the JSON its HTML page is drawn from), declared once: each
// table (name, title, whether it is one headline row, which view holds it and what a row is) and each column (name,
// unit, one-line description), in the order the exports write them. The builders (cost_tables.cc) fill the tables
// through these declarations and refuse a column out of order or undeclared; tests/cost_analysis_test.cc checks that
// every declared column is built; results/README.md's "CSV and JSON output" tables are generated from them
// (tests/schema_doc_test.sh). The report's own schema is declared the same way in results/model/schema.h.
//
// Units: s, h, B, GB = 1e9 B, GB/s, tokens, tokens/s, USD, USD/h, kWh, J/token, W; `fraction` is a share 0..1; ""
// for counts, flags (1 or 0) and text.
#pragma once

#include <string>
#include <vector>

namespace tb::cost_schema {

struct Column;

class Table {
 public:
  Table(const char* name, const char* title, bool per_run, const char* view, const char* rows);
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  std::string name;   // "rows": exported as "cost.rows"
  std::string title;  // a line for people
  bool per_run;       // one headline row (a JSON object), or any number of rows (a JSON array)
  std::string view;   // which view holds it: "each report", "the command, with --prices and reports"
  std::string rows;   // what a row is
  std::vector<const Column*> columns;  // in declaration order: the exports' order
  std::string FullName() const { return "cost." + name; }
};

struct Column {
  Column(Table& table, const char* name, const char* unit, const char* description);
  Column(const Column&) = delete;
  Column& operator=(const Column&) = delete;

  const Table* table;
  std::string name;
  std::string unit;
  std::string description;
};

// Every declared table, in declaration order.
const std::vector<const Table*>& AllTables();

// results/README.md's tables of the cost exports: per table a line (name, view, rows, title) and its columns.
std::string CostSchemaMarkdown();

// ---- cost.run ---------------------------------------------------------------------------------------------------
inline Table kRun{"run", "the run, its priced point and the projection's fit", true, "each report", "one (headline)"};
namespace run {
inline const Column device{kRun, "device", "", "rank 0's GPU as CUDA names it, or `cpu`"};
inline const Column gpu_model{kRun, "gpu_model", "", "the GPU models it is priced as, comma-separated"};
inline const Column gpu_model_from{kRun, "gpu_model_from", "", "`device` or `--device-as`; empty without a model"};
inline const Column ranks{kRun, "ranks", "", "ranks of the run"};
inline const Column nodes{kRun, "nodes", "", "nodes of the run"};
inline const Column model{kRun, "model", "", "the model it trained"};
inline const Column scaling_mode{kRun, "scaling_mode", "", "`weak` or `strong`"};
inline const Column startup_s{kRun, "startup_s", "s", "process start to the first step"};
inline const Column priced_k{kRun, "priced_k", "", "the measured point priced (the largest k, or `--k`)"};
inline const Column priced_layout{kRun, "priced_layout", "", "its layout, nodes x GPUs per node (`1x2`)"};
inline const Column tokens_per_s{kRun, "tokens_per_s", "tokens/s", "the priced point's, without checkpoint stalls"};
inline const Column tokens_per_s_reported{kRun, "tokens_per_s_reported", "tokens/s", "the priced point's, as reported"};
inline const Column pipeline_parallel{kRun, "pipeline_parallel", "", "the priced point's pipeline stages P (1: none)"};
inline const Column micro_batches{kRun, "micro_batches", "", "its micro-batches per optimizer step M"};
inline const Column comm_pipeline_s{kRun, "comm_pipeline_s", "s",
                                    "its exchanges with the neighbouring stages per step (bubble and transfers) and the "
                                    "tied embedding's all-reduce: out of the gradient communication; empty without "
                                    "stages"};
inline const Column bubble_measured{kRun, "bubble_measured", "fraction",
                                    "the share of the pipelined part its stages waited, as train measured it; empty "
                                    "without stages"};
inline const Column bubble_theory{kRun, "bubble_theory", "fraction", "1F1B's (P-1)/(M+P-1); empty without stages"};
inline const Column checkpoint_stall_s{kRun, "checkpoint_stall_s", "s",
                                       "mean stall per checkpoint (every rank, every event); empty: not measured"};
inline const Column checkpoint_events{kRun, "checkpoint_events", "", "the rank-events averaged"};
inline const Column checkpoint_stall_k{kRun, "checkpoint_stall_k", "", "the point whose checkpoints were averaged"};
inline const Column checkpoint_stall{kRun, "checkpoint_stall", "", "`measured`, or why not"};
inline const Column checkpoint_gb{kRun, "checkpoint_gb", "GB", "one checkpoint's size (with `--prices`)"};
inline const Column checkpoint_size_source{kRun, "checkpoint_size_source", "",
                                           "where the size comes from: measured, the price file, or 12 B/parameter"};
inline const Column joules_per_token{kRun, "joules_per_token", "J/token", "the priced point's measured energy"};
inline const Column power_per_gpu_W{kRun, "power_per_gpu_W", "W", "joules per token x reported tokens/s / ranks"};
inline const Column energy{kRun, "energy", "", "`measured`, or why not"};
inline const Column fit_samples{kRun, "fit_samples", "", "with `--project`: measurements the alpha-beta fit used"};
inline const Column collective_samples{kRun, "collective_samples", "", "of them, all_reduce sweep sizes"};
inline const Column fit_rms_relative_error{kRun, "fit_rms_relative_error", "fraction",
                                           "root mean square of the fit's relative errors"};
inline const Column intra_alpha_s{kRun, "intra_alpha_s", "s", "intra-node latency alpha"};
inline const Column intra_beta_s_per_byte{kRun, "intra_beta_s_per_byte", "s/B", "intra-node beta (1 / bandwidth)"};
inline const Column intra_bandwidth_GBps{kRun, "intra_bandwidth_GBps", "GB/s", "1 / intra-node beta"};
inline const Column intra_fitted{kRun, "intra_fitted", "", "1: fitted to measurements"};
inline const Column intra_origin{kRun, "intra_origin", "", "how the intra-node figures were obtained"};
inline const Column inter_alpha_s{kRun, "inter_alpha_s", "s", "inter-node latency alpha"};
inline const Column inter_beta_s_per_byte{kRun, "inter_beta_s_per_byte", "s/B", "inter-node beta (1 / bandwidth)"};
inline const Column inter_bandwidth_GBps{kRun, "inter_bandwidth_GBps", "GB/s", "1 / inter-node beta"};
inline const Column inter_fitted{kRun, "inter_fitted", "", "1: fitted to measurements"};
inline const Column inter_origin{kRun, "inter_origin", "",
                                 "how the inter-node figures were obtained (fitted, `--inter-node-gbps`, assumed)"};
inline const Column fit_notes{kRun, "fit_notes", "", "what the fit could not separate and fixed, `; `-separated"};
inline const Column overlap{kRun, "overlap", "fraction", "1 - exposed / total communication, as measured"};
inline const Column overlap_measured{kRun, "overlap_measured", "", "0: no point communicated, 0 assumed"};
inline const Column held_out_k{kRun, "held_out_k", "", "the largest k, predicted by a fit without it"};
inline const Column held_out_layout{kRun, "held_out_layout", "", "its layout"};
inline const Column held_out_predicted_step_s{kRun, "held_out_predicted_step_s", "s", "its predicted step"};
inline const Column held_out_measured_step_s{kRun, "held_out_measured_step_s", "s", "its measured step"};
inline const Column held_out_relative_error{kRun, "held_out_relative_error", "fraction",
                                            "|predicted - measured| / measured"};
inline const Column held_out_notes{kRun, "held_out_notes", "", "what the held-out fit assumed, `; `-separated"};
}  // namespace run

// ---- cost.points ------------------------------------------------------------------------------------------------
inline Table kPoints{"points", "measured and projected points", false, "each report",
                     "a measured k, then a projected layout"};
namespace points {
inline const Column layout{kPoints, "layout", "", "nodes x GPUs per node"};
inline const Column gpus{kPoints, "gpus", "", "ranks"};
inline const Column nodes{kPoints, "nodes", "", "nodes of the layout"};
inline const Column source{kPoints, "source", "", "`measured` or `projected`"};
inline const Column k{kPoints, "k", "", "the measured point's k"};
inline const Column step_s{kPoints, "step_s", "s", "without checkpoint stalls"};
inline const Column step_s_reported{kPoints, "step_s_reported", "s", "as reported (measured)"};
inline const Column tokens_per_step{kPoints, "tokens_per_step", "tokens", "over all ranks"};
inline const Column tokens_per_s{kPoints, "tokens_per_s", "tokens/s", "without checkpoint stalls"};
inline const Column tokens_per_s_reported{kPoints, "tokens_per_s_reported", "tokens/s", "as reported (measured)"};
inline const Column comm_s{kPoints, "comm_s", "s", "gradient communication per step (measured, or modelled)"};
inline const Column exposed_s{kPoints, "exposed_s", "s", "of it, what backward did not hide"};
inline const Column stages_s{kPoints, "stages_s", "s",
                             "pipeline stages: the exchanges between them (bubble and transfers) and the tied "
                             "embedding's all-reduce per step, measured (projected: with the change of link); empty "
                             "without stages"};
inline const Column gradient_bytes{kPoints, "gradient_bytes", "B", "per rank per step (measured)"};
inline const Column checkpoint_stall_s{kPoints, "checkpoint_stall_s", "s", "mean stall per checkpoint (measured)"};
inline const Column efficiency{kPoints, "efficiency", "fraction",
                               "projected: throughput / (k / k0 x throughput at the smallest measured k0)"};
inline const Column repeats{kPoints, "repeats", "", "times the point was measured (`train --repeats`)"};
inline const Column tokens_per_s_min{kPoints, "tokens_per_s_min", "tokens/s", "over the repeats"};
inline const Column tokens_per_s_max{kPoints, "tokens_per_s_max", "tokens/s", "over the repeats"};
inline const Column tokens_per_s_cv{kPoints, "tokens_per_s_cv", "fraction",
                                    "coefficient of variation over the repeats; NaN for one"};
}  // namespace points

// ---- cost.layouts -----------------------------------------------------------------------------------------------
inline Table kLayouts{"layouts", "layouts considered on each offering's fabric", false,
                      "each report projected onto a fabric", "a candidate layout x offering x target"};
namespace layouts {
inline const Column offering{kLayouts, "offering", "", "the offering whose fabric it is projected onto"};
inline const Column fabric{kLayouts, "fabric", "", "its fabric"};
inline const Column intra{kLayouts, "intra", "", "the fabric's intra-node kind: `nvswitch`, `nvlink-pairs`, `pcie`, "
                          "`measured`"};
inline const Column target{kLayouts, "target", "", "as `--project` gave it (the priced k without one)"};
inline const Column layout{kLayouts, "layout", "", "the target on the offering's nodes (`4x8`)"};
inline const Column candidate{kLayouts, "candidate", "", "`dp`, `tp2+zero1`, `tp8`, ..."};
inline const Column mode{kLayouts, "mode", "", "`dp`, `zero1` or `fsdp` across the replicas"};
inline const Column tensor_parallel{kLayouts, "tensor_parallel", "", "T: ranks of a tensor-parallel group"};
inline const Column pipeline_parallel{kLayouts, "pipeline_parallel", "",
                                      "P: pipeline stages of whole nodes, outermost (1: none)"};
inline const Column expert_parallel{kLayouts, "expert_parallel", "",
                                    "EP: consecutive replicas sharing each MoE block's experts (1: none)"};
inline const Column micro_batches{kLayouts, "micro_batches", "",
                                  "M per pipeline and step with stages: the tokens per step of the candidates without "
                                  "stages at T, in the run's micro-batches; empty without stages"};
inline const Column replicas{kLayouts, "replicas", "", "GPUs / (T x P)"};
inline const Column step_s{kLayouts, "step_s", "s",
                           "compute + optimizer + activation + exposed + pipeline + bubble + embedding + alltoall"};
inline const Column compute_s{kLayouts, "compute_s", "s", "the run's compute at this shape (with stages: the heaviest "
                              "stage's)"};
inline const Column optimizer_s{kLayouts, "optimizer_s", "s", "AdamW, rescaled by the mode's sharding"};
inline const Column activation_s{kLayouts, "activation_s", "s", "tensor parallel's activation all-reduces"};
inline const Column comm_s{kLayouts, "comm_s", "s", "the mode's gradient collectives, modelled"};
inline const Column exposed_s{kLayouts, "exposed_s", "s", "(1 - overlap) x comm_s"};
inline const Column pipeline_s{kLayouts, "pipeline_s", "s",
                               "stage boundary exchanges: 2 M x (alpha + a micro-batch's activations x beta) of the "
                               "inter-node link (per rank) when the stages span nodes"};
inline const Column bubble_s{kLayouts, "bubble_s", "s",
                             "1F1B's idle slots: (compute + activation + pipeline) x (P-1)/M, (P-1)/(M+P-1) of the "
                             "pipelined part"};
inline const Column embedding_s{kLayouts, "embedding_s", "s",
                                "the tied embedding's gradient all-reduce between the first and last stage"};
inline const Column alltoall_s{kLayouts, "alltoall_s", "s",
                               "expert parallel's dispatch and combine all-to-alls (blocking): the slower of the bytes to "
                               "peers inside the node at the intra-node link and those to other nodes at the GPU's "
                               "share of the NICs, plus latencies"};
inline const Column alltoall_inter_node_bytes{kLayouts, "alltoall_inter_node_bytes", "B",
                                              "of the all-to-all bytes a GPU sends per step, those to other nodes"};
inline const Column tokens_per_step{kLayouts, "tokens_per_step", "tokens", "over all GPUs"};
inline const Column tokens_per_s{kLayouts, "tokens_per_s", "tokens/s", "empty when not modelled"};
inline const Column memory_required_bytes{kLayouts, "memory_required_bytes", "B", "per GPU, calibrated as the run's"};
inline const Column gpu_memory_bytes{kLayouts, "gpu_memory_bytes", "B", "the offering's GPU memory"};
inline const Column memory_fits{kLayouts, "memory_fits", "", "1: required <= GPU memory"};
inline const Column chosen{kLayouts, "chosen", "", "1 for the one priced"};
inline const Column why_not{kLayouts, "why_not", "",
                            "does not fit, not possible, or (with no candidate) why the target was not projected"};
inline const Column reason{kLayouts, "reason", "", "the chosen row: why it won"};
inline const Column links{kLayouts, "links", "", "the fabric's links as used"};
inline const Column assumptions{kLayouts, "assumptions", "", "what was not measured and how it was taken"};
}  // namespace layouts

// ---- cost.rows --------------------------------------------------------------------------------------------------
inline Table kRows{"rows", "cost per configuration and offering", false, "each report, with `--prices`",
                   "a configuration (`k8 1x8` measured, `2x8` projected) x offering of its GPU model whose nodes hold "
                   "the layout"};
namespace rows {
inline const Column config{kRows, "config", "", "`k8 1x8` (measured), `2x8` or `4x8 tp2+zero1` (projected)"};
inline const Column projected{kRows, "projected", "", "1: a projected layout; 0: the measured point"};
inline const Column pipeline_parallel{kRows, "pipeline_parallel", "",
                                      "pipeline stages: the run's (measured; projected with its fitted links), the "
                                      "chosen layout's on a fabric"};
inline const Column offering{kRows, "offering", "", "the price file's offering"};
inline const Column gpu{kRows, "gpu", "", "its GPU model"};
inline const Column gpus{kRows, "gpus", "", "the job's ranks"};
inline const Column nodes{kRows, "nodes", "", "the layout's nodes, at least ceil(gpus / the offering's GPUs per node)"};
inline const Column billed_gpus{kRows, "billed_gpus", "", "nodes x the offering's GPUs per node"};
inline const Column target_tokens{kRows, "target_tokens", "tokens", "the training target"};
inline const Column tokens_per_s{kRows, "tokens_per_s", "tokens/s", "the configuration's, without checkpoint stalls"};
inline const Column job_usd_per_hour{kRows, "job_usd_per_hour", "USD/h", "nodes x node-hour price"};
inline const Column work_hours{kRows, "work_hours", "h", "target / throughput"};
inline const Column startup_hours{kRows, "startup_hours", "h", "measured start-up"};
inline const Column provisioning_hours{kRows, "provisioning_hours", "h", "the offering's, billed"};
inline const Column checkpoint_interval_hours{kRows, "checkpoint_interval_hours", "h", "the interval priced"};
inline const Column interval_is_young_daly{kRows, "interval_is_young_daly", "", "1: the Young/Daly interval"};
inline const Column young_daly_hours{kRows, "young_daly_hours", "h",
                                     "sqrt(2 x stall x job MTBF); empty without a measured stall"};
inline const Column checkpoint_overhead_hours{kRows, "checkpoint_overhead_hours", "h", "work / interval x stall"};
inline const Column run_hours{kRows, "run_hours", "h", "provisioning + start-up + work + checkpoint overhead"};
inline const Column job_mtbf_hours{kRows, "job_mtbf_hours", "h", "MTBF per node / nodes"};
inline const Column expected_failures{kRows, "expected_failures", "", "run / job MTBF"};
inline const Column lost_hours_per_failure{kRows, "lost_hours_per_failure", "h",
                                           "restart + start-up + half an interval"};
inline const Column retry_hours{kRows, "retry_hours", "h", "failures x lost"};
inline const Column time_to_train_hours{kRows, "time_to_train_hours", "h", "run + retry"};
inline const Column gpu_usd{kRows, "gpu_usd", "USD", "price per hour x (run - provisioning)"};
inline const Column provisioning_usd{kRows, "provisioning_usd", "USD", "price per hour x provisioning"};
inline const Column storage_gb{kRows, "storage_gb", "GB", "dataset + kept checkpoints"};
inline const Column storage_usd{kRows, "storage_usd", "USD", "$/GB-month over the time to train"};
inline const Column transfer_usd{kRows, "transfer_usd", "USD", "egress"};
inline const Column retry_usd{kRows, "retry_usd", "USD", "price per hour x retry"};
inline const Column energy_kwh{kRows, "energy_kwh", "kWh", "of the training work; empty without a measured energy"};
inline const Column energy_J_per_token{kRows, "energy_J_per_token", "J/token", "the same per token"};
inline const Column usd_per_kwh{kRows, "usd_per_kwh", "USD/kWh", "the offering's electricity price"};
inline const Column energy_usd{kRows, "energy_usd", "USD", "empty without a measured energy or a price"};
inline const Column total_usd{kRows, "total_usd", "USD",
                              "GPU + provisioning + storage + transfer + retry + energy (when priced)"};
inline const Column total_usd_low{kRows, "total_usd_low", "USD", "the total at the repeats' max tokens/s; empty for "
                                  "one repeat"};
inline const Column total_usd_high{kRows, "total_usd_high", "USD", "the total at the repeats' min tokens/s"};
inline const Column usd_per_million_tokens{kRows, "usd_per_million_tokens", "USD", "total / (target / 1e6)"};
inline const Column gpu_memory_bytes{kRows, "gpu_memory_bytes", "B", "the offering's GPU memory"};
inline const Column memory_required_bytes{kRows, "memory_required_bytes", "B", "per GPU, calibrated"};
inline const Column memory_margin_bytes{kRows, "memory_margin_bytes", "B", "GPU memory - required"};
inline const Column memory_fits{kRows, "memory_fits", "", "1: required <= GPU memory"};
inline const Column marks{kRows, "marks", "", "`cheapest,fastest,deadline`: the decisions the row wins"};
inline const Column time_compute_share{kRows, "time_compute_share", "fraction",
                                       "of the training time: compute and the rest of the step"};
inline const Column time_exposed_comm_share{kRows, "time_exposed_comm_share", "fraction", "exposed communication"};
inline const Column time_data_wait_share{kRows, "time_data_wait_share", "fraction", "data wait"};
inline const Column time_checkpoint_stall_share{kRows, "time_checkpoint_stall_share", "fraction", "checkpoint stall"};
inline const Column exposed_comm_link{kRows, "exposed_comm_link", "", "`intra-node`, or `inter-node` across nodes"};
inline const Column dominant_time_part{kRows, "dominant_time_part", "", "the largest share of the training time"};
inline const Column dominant_time_share{kRows, "dominant_time_share", "fraction", "its share"};
inline const Column dominant_cost_part{kRows, "dominant_cost_part", "", "the largest share of the total cost"};
inline const Column dominant_cost_share{kRows, "dominant_cost_share", "fraction", "its share"};
}  // namespace rows

// ---- cost.decision ----------------------------------------------------------------------------------------------
inline Table kDecision{"decision", "the decision over every run and offering", true,
                       "the command, with `--prices` and reports", "one (headline)"};
namespace decision {
inline const Column offerings{kDecision, "offerings", "", "offerings in the price file"};
inline const Column target_tokens{kDecision, "target_tokens", "tokens", "`--train-tokens`"};
inline const Column target_steps{kDecision, "target_steps", "", "`--train-steps`"};
inline const Column deadline_hours{kDecision, "deadline_hours", "h", "`--deadline-hours`"};
inline const Column cheapest{kDecision, "cheapest", "",
                             "the winning row named as in the text: `RUN CONFIG (measured) on OFFERING`, or "
                             "`(projected)`"};
inline const Column fastest{kDecision, "fastest", "", "likewise"};
inline const Column cheapest_within_deadline{kDecision, "cheapest_within_deadline", "", "likewise"};
inline const Column deadline_met{kDecision, "deadline_met", "", "1: a row trains within the deadline"};
inline const Column unpriced{kDecision, "unpriced", "",
                             "the runs no offering matched, and the configurations whose layout an offering's nodes "
                             "cannot hold, and why; `; `-separated"};
inline const Column cheapest_reason{kDecision, "cheapest_reason", "", "why the cheapest beats its runner-up"};
inline const Column fastest_reason{kDecision, "fastest_reason", "", "why the fastest does"};
inline const Column deadline_reason{kDecision, "deadline_reason", "", "why the cheapest within the deadline does"};
inline const Column failure_rate{kDecision, "failure_rate", "", "`assumed` (the price file's MTBF) or `measured`"};
inline const Column history_runs{kDecision, "history_runs", "", "`--history`: runs with node-hours"};
inline const Column history_failures{kDecision, "history_failures", "", "of them, failed or interrupted"};
inline const Column history_node_hours{kDecision, "history_node_hours", "h", "their node-hours"};
inline const Column measured_mtbf_node_hours{kDecision, "measured_mtbf_node_hours", "h",
                                             "node-hours / failures; empty below 3 failures"};
}  // namespace decision

// ---- cost.memory ------------------------------------------------------------------------------------------------
inline Table kMemory{"memory", "memory fit per GPU", false, "the command, with `--model`",
                     "a GPU (`--gpu-memory`, each offering's)"};
namespace memory {
inline const Column what{kMemory, "what", "", "the model, its shape and mode"};
inline const Column gpu{kMemory, "gpu", "", "`--gpu-memory SIZE`, or the offering and its GPU"};
inline const Column gpu_memory_bytes{kMemory, "gpu_memory_bytes", "B", "the GPU's memory"};
inline const Column weights_bytes{kMemory, "weights_bytes", "B", "per GPU, in the mode"};
inline const Column gradients_bytes{kMemory, "gradients_bytes", "B", "per GPU"};
inline const Column optimizer_bytes{kMemory, "optimizer_bytes", "B", "per GPU"};
inline const Column activations_bytes{kMemory, "activations_bytes", "B", "per GPU"};
inline const Column working_bytes{kMemory, "working_bytes", "B", "fsdp: the units gathered at once"};
inline const Column parallel{kMemory, "parallel", "", "`dp`, `zero1` or `fsdp`"};
inline const Column ranks{kMemory, "ranks", "", "the GPUs the mode shards over"};
inline const Column total_bytes{kMemory, "total_bytes", "B", "the estimate"};
inline const Column calibration{kMemory, "calibration", "", "measured peak / estimate of a run; 1 without one"};
inline const Column calibration_source{kMemory, "calibration_source", "", "that run, or `none`"};
inline const Column required_bytes{kMemory, "required_bytes", "B", "estimate x calibration"};
inline const Column margin_bytes{kMemory, "margin_bytes", "B", "GPU memory - required; negative: short by"};
inline const Column fits{kMemory, "fits", "", "1: required <= GPU memory"};
}  // namespace memory

}  // namespace tb::cost_schema
