// Projection of a training run to other GPU counts and layouts with an alpha-beta model of the gradient
// all-reduce, fitted to the run's own measurements (collective sweeps and the training buckets).
//
// Model. A link class c (intra-node, inter-node) has a latency alpha_c (s per message step) and an inverse
// bandwidth beta_c (s per byte). An all-reduce of S bytes per rank:
//   one node, n ranks (ring):     t = 2(n-1)/n * S * beta_intra + 2(n-1) * alpha_intra
//   m nodes x g ranks (hierarchical: reduce-scatter inside each node, all-reduce of each rank's S/g shard across
//   the m nodes at the inter-node rate per rank, all-gather inside each node):
//     t = 2(g-1)/g * S * beta_intra + 2(g-1) * alpha_intra + 2(m-1)/m * (S/g) * beta_inter + 2(m-1) * alpha_inter
// (m = 1 gives the ring; g = 1 a ring across nodes). B all-reduces of S_1..S_B bytes add up: the S terms see the
// total bytes, the alpha terms count B times. Every measurement is thus linear in (alpha_intra, beta_intra,
// alpha_inter, beta_inter) and they are fitted by least squares on the relative error (each equation divided by
// its measured time, so that 8-byte and 1-GB messages weigh alike), with the parameters kept >= 0.
#pragma once

#include <array>
#include <utility>
#include <optional>
#include <string>
#include <vector>

namespace tb {

// A timed all-reduce measurement: `ops` all-reduces of `bytes` per rank in total, on `nodes` x `gpus_per_node`
// ranks, taking `time_s`.
struct AllReduceSample {
  int nodes = 1;
  int gpus_per_node = 1;
  double bytes = 0;
  double ops = 1;
  double time_s = 0;
  std::string source;  // what was measured, e.g. "all_reduce 1048576 B at 8 ranks", "train k=4 buckets"
};

// The four model coefficients of a sample: time = c[0]*alpha_intra + c[1]*beta_intra + c[2]*alpha_inter +
// c[3]*beta_inter.
std::array<double, 4> AllReduceCoefficients(int nodes, int gpus_per_node, double bytes, double ops);

// One message-size band of a link: NCCL chooses its algorithm (ring, tree, NVLS) and protocol (LL, LL128, Simple) by
// message size, so one alpha-beta pair over every size is off where it switches (ASTRA-sim's validation found single
// fits 10-20% off for that reason); a link measured over a sweep is fitted per band.
struct SizeBand {
  double below_bytes = 0;  // the band holds messages of fewer bytes (and at least the previous band's)
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  int samples = 0;
  std::string name;        // "small (< 64 KiB)"
};

struct LinkParameters {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  bool fitted = false;  // from measurements (false: not measured, or given by the user)
  std::string origin;   // how the values were obtained, for the output
  // Per message-size band, when fitted so (empty: alpha_s and beta_s_per_byte for every size).
  std::vector<SizeBand> bands;
  double bandwidth_GBps() const { return beta_s_per_byte > 0 ? 1.0 / beta_s_per_byte / 1e9 : 0; }
  // alpha and beta for messages of `bytes` bytes: the band's, or the single pair.
  std::pair<double, double> At(double bytes) const;
};

// The bands a sweep is split into: small < 64 KiB <= medium < 16 MiB <= large (validate's collective bands).
std::vector<SizeBand> EmptySizeBands();
// Fits one node's all-reduce samples (nodes == 1) per band; a band with fewer than two distinct sizes takes the fit
// over every size. The returned link has the all-sizes fit as its single pair and the bands; `fitted` false when
// nothing could be fitted.
LinkParameters FitIntraBands(const std::vector<AllReduceSample>& samples);


struct LinkModel {
  LinkParameters intra;
  LinkParameters inter;
};

struct AlphaBetaFit {
  LinkModel links;
  int samples = 0;
  double rms_relative_error = 0;  // over the fitted samples
  std::vector<std::string> notes;  // what could not be identified and what was assumed instead
};

// The fitted links with bands: the intra-node link's from the samples of one node (sweep sizes and training points),
// the inter-node link's from those of one rank per node (collectives --split inter), each band with two sizes or
// more on its own, the rest at the all-sizes fit; a class given by the user (`inter_given`: --inter-node-gbps) or
// without any own band stays as it is. The origin says how many bands were fitted.
void BandLinks(LinkModel& links, const std::vector<AllReduceSample>& samples, bool inter_given);

// Fits the parameters that the samples determine; a link class without samples stays unfitted (zeros), an alpha
// that the samples cannot tell from beta (all at one size-to-message ratio) is fixed at 0 and noted.
AlphaBetaFit FitAlphaBeta(const std::vector<AllReduceSample>& samples);

double PredictAllReduceSeconds(const LinkModel& links, int nodes, int gpus_per_node, double bytes, double ops);

struct Layout {
  int nodes = 1;
  int gpus_per_node = 1;
  int gpus() const { return nodes * gpus_per_node; }
  std::string Name() const;  // "2x8"
};

// What the user gives for links the run did not measure (or wants to replace).
struct LinkOverrides {
  std::optional<double> inter_node_gbps;  // network rate per GPU, Gbit/s: replaces the fitted inter-node beta
  double inter_node_latency_s = 5e-6;     // inter-node alpha when the run measured no inter-node link
};

// The fit's links with the overrides applied: intra-node as fitted; inter-node beta = 8 / (gbps x 1e9) when
// given, else as fitted (neither: no bandwidth, the class cannot be used); inter-node alpha as fitted, else the
// override latency.
LinkModel ResolveLinks(const AlphaBetaFit& fit, const LinkOverrides& overrides);

// Why `links` cannot model `layout` (a link class it needs has no bandwidth), or "" when it can.
std::string MissingLinks(const LinkModel& links, const Layout& layout);

// A measured training point, as the projection uses it.
struct TrainPointInput {
  int k = 0;
  int nodes = 1;
  int gpus_per_node = 1;
  double step_s = 0;            // without checkpoint stalls
  double comm_total_s = 0;      // all-reduce time per step (sum over buckets)
  double comm_exposed_s = 0;    // what backward did not hide
  double gradient_bytes = 0;    // per rank per step
  double buckets = 1;           // all-reduces per step (all-reduce-equivalent: ModeCollectives)
  double tokens_per_step = 0;   // over all k ranks
  std::string parallel = "dp";  // the mode the point ran: dp, zero1, fsdp
  // Tensor parallel groups of this many ranks inside a node: the gradients are synchronised over gpus_per_node / T
  // ranks per node, and the activation all-reduces (inside the group, the same at every layout) stay in the compute
  // base; comm_total_s and comm_exposed_s then hold the gradients' communication only.
  int tensor_parallel = 1;
  double comm_bytes = 0;        // all-reduce-equivalent bytes per step (ModeCollectives); 0: gradient_bytes
  // Tensor parallel's activation all-reduces per step, each over the T ranks of a group inside a node: the buffers'
  // bytes, how many, and their seconds (blocking: start to completion). Measurements of the intra-node link that
  // TrainSamples adds to the fit (a run of one group has no gradient sync to fit it with).
  double activation_bytes = 0;
  double activation_ops = 0;
  double activation_s = 0;
  // Pipeline parallel P (Megatron's 1F1B over M micro-batches, stages outermost: PipelineStageSpan): the gradients are
  // synchronised over a stage's k / (T P) replicas, and these stay in the compute base, carried as measured (with the
  // modelled change of link where the layout moves the stage boundaries between intra- and inter-node) — comm_total_s
  // and comm_exposed_s then hold the gradients' communication only.
  int pipeline_parallel = 1;
  int micro_batches = 1;
  double pipeline_s = 0;        // the exchanges with the neighbouring stages per step: the bubble and the transfers
  double embedding_s = 0;       // the tied embedding's gradient all-reduce between a pipeline's first and last stage
  double edge_bytes = 0;        // one boundary exchange: a micro-batch's residual stream (fp32), per rank
  double embedding_bytes = 0;   // that all-reduce's buffer
  // Expert parallel EP (MoE blocks' experts over EP consecutive ranks): the dispatch and combine all-to-alls per step
  // (blocking, inside forward and backward), carried in the compute base as measured by a projection onto fitted
  // links; comm_total_s and comm_exposed_s hold the gradients' communication only.
  int expert_parallel = 1;
  double alltoall_s = 0;
  double alltoall_bytes = 0;    // sent to other ranks per step, per rank
  double CommBytes() const { return comm_bytes > 0 ? comm_bytes : gradient_bytes; }
};

// Pipeline parallel P on `layout`: stage s on ranks [s k/P, (s+1) k/P) (Megatron orders the stages outermost). The
// ranks of one stage: whole nodes when k/P is a multiple of the node's GPUs, else k/P ranks of one node. Its gradient
// collectives run over these (g/T per node).
Layout PipelineStageSpan(const Layout& layout, int pipeline_parallel);
// Whether a stage boundary crosses nodes: with P > 1 some rank's peer in the next stage is on another node as soon as
// the layout has several (the last rank of a node sends to a rank past it).
bool StageBoundariesCrossNodes(const Layout& layout, int pipeline_parallel);

// 1F1B (Narayanan et al. 2021) on the heaviest stage: M micro-batches of compute and, per micro-batch, one exchange
// with each neighbour (its activations forward, their gradients backward), in M + P - 1 slots; P - 1 of them idle.
struct OneFOneBTime {
  double transfers_s = 0;  // 2 M exchanges
  double bubble_s = 0;     // (compute + transfers) (P-1)/M: (P-1)/(M+P-1) of the pipelined part
  double pipelined_s(double compute_s) const { return compute_s + transfers_s + bubble_s; }
};
OneFOneBTime PipelineTime(double compute_s, double exchange_s, int pipeline_parallel, int micro_batches);
// One boundary exchange of `bytes` per rank: alpha + bytes x beta of the inter-node link when a boundary crosses nodes
// (the per-rank share of the node's NICs: every rank of a stage sends at once), else of `intra_p2p`.
double BoundaryExchangeSeconds(const LinkModel& links, const LinkParameters& intra_p2p, const Layout& layout,
                               int pipeline_parallel, double bytes);
// The tied embedding's gradient all-reduce between the first and last stage: two ranks, on two nodes when the layout
// has several.
double EmbeddingAllReduceSeconds(const LinkModel& links, const Layout& layout, double bytes);

// Expert parallel's all-to-alls per step: `bytes` a rank sends to the EP - 1 others of its group (EP consecutive ranks
// of `layout`, `gpus_per_node` of them per node: inside one node while EP fits it) in `ops` all-to-alls, balanced over
// the peers. The bytes to peers on the rank's node go at the intra-node link's rate (`links.intra`, per rank), those
// to other nodes at the rank's share of its node's NICs (`links.inter`: an all-to-all does not aggregate a node's
// NICs beyond that, nccl-tests#267); both run at once, so the slower sets the time, plus each all-to-all's latency on
// that link.
struct AllToAllTime {
  double seconds = 0;
  double inter_node_bytes = 0;  // of `bytes`, those to other nodes
};
AllToAllTime AllToAllSeconds(const LinkModel& links, const Layout& layout, int expert_parallel, double bytes,
                             double ops);

// A step's collectives as all-reduces for the alpha-beta model: a ring reduce-scatter or all-gather of S bytes
// takes half the bytes term and half the latency steps of an all-reduce of S ((n-1) against 2(n-1)), so a mode's
// step moves `bytes` in `ops` all-reduces' worth.
struct ModeCollectives {
  double bytes = 0;
  double ops = 0;
};
// dp: gradient_bytes in `buckets` all-reduces; zero1: a reduce-scatter and an all-gather of gradient_bytes (one
// all-reduce's worth); fsdp: `buckets` unit reduce-scatters (Ψ) and 2 x buckets - 2 unit all-gathers (every block
// twice, the embeddings and final LayerNorm once), gathered_bytes of them in all (2Ψ when not known, ZeRO's
// volume). Throws InputError for another mode.
ModeCollectives CollectivesOf(const std::string& parallel, double gradient_bytes, double buckets,
                              double gathered_bytes = 0);


// Parses "16,32,2x4": a count k becomes ceil(k / gpus_per_node) nodes of min(k, gpus_per_node) GPUs (k must then
// be a multiple of gpus_per_node); "MxG" is M nodes of G GPUs. Throws InputError naming `flag`.
std::vector<Layout> ParseLayouts(const std::string& text, int gpus_per_node, const std::string& flag);

struct ProjectedPoint {
  Layout layout;
  double comm_s = 0;         // modelled all-reduce time per step
  double exposed_s = 0;      // (1 - overlap) x comm_s
  double pipeline_s = 0;     // pipeline parallel: the reference's exchanges with its neighbours (bubble, transfers)
                             // and tied-embedding all-reduce, with the modelled change of link at this layout
  double step_s = 0;         // compute (and the rest of the step) + exposed
  double tokens_per_step = 0;
  double tokens_per_s = 0;
  double efficiency = 0;     // throughput(k) / (k/k0 x throughput(k0)), k0 = the smallest measured point
};

// The step model: step(k) = base(k) + (1 - overlap) x comm(k), where base is the reference point's step time
// without its exposed communication (weak scaling: the same per rank at every k; strong: scaled by k_ref / k),
// overlap = 1 - comm_exposed/comm_total of the largest reference point that communicated (0 when none did), and
// comm(k) the modelled all-reduce of the gradient buckets.
class StepModel {
 public:
  // `points` ascending by k; the reference is the last one; `smallest` is the efficiency baseline.
  StepModel(const std::vector<TrainPointInput>& points, bool weak, const TrainPointInput& smallest);
  ProjectedPoint Project(const LinkModel& links, const Layout& layout) const;
  double overlap() const { return overlap_; }
  bool overlap_measured() const { return overlap_measured_; }
  const TrainPointInput& reference() const { return reference_; }

 private:
  TrainPointInput reference_;
  TrainPointInput smallest_;
  bool weak_;
  double overlap_ = 0;
  bool overlap_measured_ = false;
};

// Samples of the training buckets: comm_total per step of each point with k > 1 and more than one tensor-parallel
// group (`ops` = buckets, over the gpus_per_node / T ranks per node that hold the same slices); and of a tensor
// parallel point's activation all-reduces (one node of T ranks, `ops` = activation_ops), when its groups lie inside
// nodes.
std::vector<AllReduceSample> TrainSamples(const std::vector<TrainPointInput>& points);

// The model's error on a point it was not fitted on: the fit and the step model use every collective sample and
// every training point below the largest k; the largest is predicted.
struct HeldOutCheck {
  int k = 0;
  Layout layout;
  double predicted_step_s = 0;
  double measured_step_s = 0;
  double relative_error = 0;  // |predicted - measured| / measured
  std::vector<std::string> notes;
};
// nullopt when fewer than two training points were measured, or the points below the largest leave a link class
// that the largest point uses without any fitted parameter (then there is nothing to predict from).
std::optional<HeldOutCheck> CheckHeldOut(const std::vector<TrainPointInput>& points,
                                         const std::vector<AllReduceSample>& collective_samples, bool weak,
                                         const LinkOverrides& overrides);

}  // namespace tb
