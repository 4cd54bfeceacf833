// Causal attention through cuDNN's fused scaled-dot-product attention (flash attention), built with the cuDNN C++
// frontend's graph API (see attention.h). Host code only (the kernels are cuDNN's), so this is a .cc file: the
// host compiler takes the frontend's large headers far faster than nvcc, and as system headers their warnings
// stay theirs. The one translation unit that includes the frontend.
//
// Tensors as cuDNN sees them, all over the caller's buffers (no copies), dims [B, NH, T, hd]:
//   Q, K, V    the packed qkv (B, T, 3C) at element offsets 0, C, 2C; strides [T·3C, hd, 3C, 1]
//   O, dO      (B, T, C); strides [T·C, hd, C, 1]
//   Stats      (B, NH, T, 1) fp32; strides [NH·T, T, 1, 1]: exactly the lse (B, NH, T) of attention.h
//   dQ, dK, dV qkv_grad (B, T, 3C), interleaved as Q, K, V
// Stats is cuDNN's softmax statistic, the natural-log log-sum-exp of each row of scaled scores,
// max + ln Σ exp(scale·q·k − max) (the frontend's set_stats_use_log2 documents this natural-log convention as
// cuDNN's own, and it is left off): the same quantity as cpu::AttentionForward's lse, so Forward's lse means the
// same for both implementations. Scale 1/sqrt(hd); causal mask aligned top-left (query i sees keys 0..i).
//
// Graphs are built once per (batch, seq) and kept: validate, build the operation graph, execution plans from
// heuristics A with the fallback list, check support, build plans. The constructor builds the (max_batch,
// max_seq) pair, so an unsupported GPU, cuDNN or shape shows at once, with cuDNN's reason, and the caller can
// fall back to the cuBLAS implementation.
//
// Plan choice (autotune.h): every plan that builds is built (BuildPlanPolicy_t::ALL), and on a graph's first run
// each is timed (one warm-up, then kAutotuneRepeats runs between CUDA events, execute_plan_at_index of this frontend,
// 1.32) on the call's real inputs with scratch outputs, on the attention's stream; the fastest median is kept (ties
// within 1 % to the heuristic's order) and recorded in kernel_choices(). Plans needing more workspace than the first
// plan or kTimedWorkspaceBytes are not timed. One-off cost per graph: building every plan (some engines compile
// with NVRTC, seconds each), 6 runs of each plan, a scratch allocation of the outputs' size and a host wait.
// TRAINBENCH_AUTOTUNE=0 builds and runs the frontend's first plan, as before.
#include <cudnn.h>
#include <cudnn_frontend.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda/attention.h"
#include "cuda/autotune.h"
#include "cuda/autotune_timing.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_raii.h"
#include "error.h"

namespace tb::cuda_detail {

inline const char* CudnnHint(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_NOT_INITIALIZED:
      return "cuDNN could not start: is a GPU visible and does the cuDNN library match this CUDA version?";
    case CUDNN_STATUS_ALLOC_FAILED:
      return "out of GPU memory: use a smaller batch or fewer layers, or look for other processes in nvidia-smi";
    default:
      return "set CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr to see cuDNN's log";
  }
}

[[noreturn]] inline void ThrowCudnnError(cudnnStatus_t status, const char* what, const char* file, int line) {
  std::string message = cudnnGetErrorString(status);
  char last_error[512] = {};
  cudnnGetLastErrorString(last_error, sizeof(last_error));
  if (last_error[0] != '\0') message += std::string(" (") + last_error + ")";
  throw RuntimeError(FormatFailure(what, file, line, message, CudnnHint(status)));
}

[[noreturn]] inline void ThrowCudnnFrontendError(const std::string& message, const char* what, const char* file,
                                                 int line) {
  throw RuntimeError(FormatFailure(what, file, line, "cuDNN: " + message,
                                   "set CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=stderr to see the "
                                   "frontend's log; the cuBLAS attention (MakeCublasAttention) runs where cuDNN's "
                                   "fused attention does not"));
}

}  // namespace tb::cuda_detail

// For cuDNN's C API (cudnnStatus_t).
#define TB_CHECK_CUDNN(expr)                                                            \
  do {                                                                                  \
    const cudnnStatus_t tb_cudnn_status_ = (expr);                                      \
    if (tb_cudnn_status_ != CUDNN_STATUS_SUCCESS)                                       \
      ::tb::cuda_detail::ThrowCudnnError(tb_cudnn_status_, #expr, __FILE__, __LINE__);  \
  } while (0)

// For the frontend's calls, which return cudnn_frontend::error_t with cuDNN's reason in its message.
#define TB_CHECK_CUDNN_FE(expr)                                                                           \
  do {                                                                                                    \
    auto tb_fe_status_ = (expr);                                                                          \
    if (tb_fe_status_.is_bad())                                                                           \
      ::tb::cuda_detail::ThrowCudnnFrontendError(tb_fe_status_.get_message(), #expr, __FILE__, __LINE__); \
  } while (0)

namespace tb::gpu {
namespace {

namespace fe = cudnn_frontend;
using GraphPtr = std::shared_ptr<fe::graph::Graph>;

// Fixed tensor ids, so that a variant pack is a plain id → pointer map.
enum TensorUid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct CudnnDeleter {
  void operator()(cudnnHandle_t handle) const noexcept { (void)cudnnDestroy(handle); }
};
using CudnnHandle = std::unique_ptr<std::remove_pointer_t<cudnnHandle_t>, CudnnDeleter>;

// Dims and strides of one (batch, seq) problem; see the top of the file.
struct Layout {
  std::vector<int64_t> dims;         // [B, NH, T, hd]
  std::vector<int64_t> qkv_strides;  // over (B, T, 3C)
  std::vector<int64_t> out_strides;  // over (B, T, C)
  std::vector<int64_t> stats_dims;   // [B, NH, T, 1]
  std::vector<int64_t> stats_strides;

  Layout(int64_t batch, int64_t seq, int64_t channels, int64_t heads) {
    const int64_t head_dim = channels / heads;
    dims = {batch, heads, seq, head_dim};
    qkv_strides = {seq * 3 * channels, head_dim, 3 * channels, 1};
    out_strides = {seq * channels, head_dim, channels, 1};
    stats_dims = {batch, heads, seq, 1};
    stats_strides = {heads * seq, seq, 1, 1};
  }
};

GraphPtr NewGraph() {
  auto graph = std::make_shared<fe::graph::Graph>();
  graph->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return graph;
}

std::shared_ptr<fe::graph::Tensor_attributes> Input(fe::graph::Graph& graph, const char* name, TensorUid uid,
                                                    const std::vector<int64_t>& dims,
                                                    const std::vector<int64_t>& strides) {
  return graph.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(strides));
}

// Plans needing up to this much workspace (or the first plan's, if more) are timed; beyond it, a faster plan would
// cost the model memory it did not plan for (the CUDA transformer keeps 256 MiB for all plans and workspaces).
constexpr int64_t kTimedWorkspaceBytes = int64_t{64} << 20;

// Validates the graph, lowers it to cuDNN, and builds the plans that heuristics A (then the fallback list) offer
// and that this device supports: all of them (`all`, for timing), or the first.
void BuildPlans(fe::graph::Graph& graph, cudnnHandle_t handle, bool all) {
  TB_CHECK_CUDNN_FE(graph.validate());
  TB_CHECK_CUDNN_FE(graph.build_operation_graph(handle));
  TB_CHECK_CUDNN_FE(graph.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}));
  TB_CHECK_CUDNN_FE(graph.check_support());
  TB_CHECK_CUDNN_FE(graph.build_plans(all ? fe::BuildPlanPolicy_t::ALL : fe::BuildPlanPolicy_t::HEURISTICS_CHOICE));
}

GraphPtr BuildForwardGraph(cudnnHandle_t handle, const Layout& layout, float scale, bool all_plans) {
  GraphPtr graph = NewGraph();
  const auto q = Input(*graph, "Q", kQ, layout.dims, layout.qkv_strides);
  const auto k = Input(*graph, "K", kK, layout.dims, layout.qkv_strides);
  const auto v = Input(*graph, "V", kV, layout.dims, layout.qkv_strides);
  const auto options = fe::graph::SDPA_attributes()
                           .set_name("causal_attention")
                           .set_generate_stats(true)
                           .set_causal_mask(true)
                           .set_attn_scale(scale);
  const auto [o, stats] = graph->sdpa(q, k, v, options);
  o->set_output(true).set_uid(kO).set_dim(layout.dims).set_stride(layout.out_strides);
  stats->set_output(true)
      .set_uid(kStats)
      .set_data_type(fe::DataType_t::FLOAT)
      .set_dim(layout.stats_dims)
      .set_stride(layout.stats_strides);
  BuildPlans(*graph, handle, all_plans);
  return graph;
}

GraphPtr BuildBackwardGraph(cudnnHandle_t handle, const Layout& layout, float scale, bool all_plans) {
  GraphPtr graph = NewGraph();
  const auto q = Input(*graph, "Q", kQ, layout.dims, layout.qkv_strides);
  const auto k = Input(*graph, "K", kK, layout.dims, layout.qkv_strides);
  const auto v = Input(*graph, "V", kV, layout.dims, layout.qkv_strides);
  const auto o = Input(*graph, "O", kO, layout.dims, layout.out_strides);
  const auto d_o = Input(*graph, "dO", kDO, layout.dims, layout.out_strides);
  const auto stats = Input(*graph, "Stats", kStats, layout.stats_dims, layout.stats_strides);
  stats->set_data_type(fe::DataType_t::FLOAT);
  const auto options = fe::graph::SDPA_backward_attributes()
                           .set_name("causal_attention_backward")
                           .set_causal_mask(true)
                           .set_attn_scale(scale);
  const auto [dq, dk, dv] = graph->sdpa_backward(q, k, v, o, d_o, stats, options);
  dq->set_output(true).set_uid(kDQ).set_dim(layout.dims).set_stride(layout.qkv_strides);
  dk->set_output(true).set_uid(kDK).set_dim(layout.dims).set_stride(layout.qkv_strides);
  dv->set_output(true).set_uid(kDV).set_dim(layout.dims).set_stride(layout.qkv_strides);
  BuildPlans(*graph, handle, all_plans);
  return graph;
}

int64_t WorkspaceSize(const fe::graph::Graph& graph) {
  int64_t bytes = 0;
  TB_CHECK_CUDNN_FE(graph.get_workspace_size(bytes));
  return bytes;
}

// The plans worth timing, in the heuristics' order: those that built, needing no more workspace than the first
// plan or kTimedWorkspaceBytes.
std::vector<int64_t> TimedPlans(const fe::graph::Graph& graph) {
  const int64_t limit = std::max(WorkspaceSize(graph), kTimedWorkspaceBytes);
  std::vector<int64_t> plans;
  for (int64_t index = 0; index < graph.get_execution_plan_count(); ++index) {
    int64_t bytes = 0;
    if (graph.get_workspace_size_plan_at_index(index, bytes).is_good() && bytes <= limit) plans.push_back(index);
  }
  return plans;
}

// The workspace the graph's plans need: the first plan's, or with `timed` the most of any plan to be timed.
int64_t WorkspaceNeeded(const fe::graph::Graph& graph, bool timed) {
  int64_t needed = WorkspaceSize(graph);
  if (!timed) return needed;
  for (const int64_t index : TimedPlans(graph)) {
    int64_t bytes = 0;
    TB_CHECK_CUDNN_FE(graph.get_workspace_size_plan_at_index(index, bytes));
    needed = std::max(needed, bytes);
  }
  return needed;
}

// "9.19.0" from cudnnGetVersion()'s 91900.
std::string CudnnVersionText() {
  const size_t version = cudnnGetVersion();
  return std::to_string(version / 10000) + "." + std::to_string(version % 10000 / 100) + "." +
         std::to_string(version % 100);
}

void* Mutable(const void* pointer) { return const_cast<void*>(pointer); }

constexpr const char* kOneTokenRefusal =
    "sequences of 1 token are not run on cuDNN's fused attention: its SDPA backward fails on them (use the cuBLAS "
    "attention, or a longer --seq)";

class CudnnAttention final : public Attention {
 public:
  CudnnAttention(int channels, int heads, int max_batch, int max_seq, int seq, void* stream)
      : channels_(channels),
        heads_(heads),
        max_batch_(max_batch),
        max_seq_(max_seq),
        scale_(1.0f / std::sqrt(static_cast<float>(channels / heads))),
        stream_(static_cast<cudaStream_t>(stream)),
        autotune_(AutotuneFromEnvironment()) {
    cudnnHandle_t raw = nullptr;
    TB_CHECK_CUDNN(cudnnCreate(&raw));
    handle_.reset(raw);
    TB_CHECK_CUDNN(cudnnSetStream(raw, stream_));
    GraphsFor(max_batch, seq, true, true);
  }

  std::string name() const override { return "cudnn-sdpa"; }

  size_t workspace_bytes() const override { return workspace_.bytes(); }

  std::vector<KernelChoice> kernel_choices() const override { return choices_; }

  void Forward(Bf16* out, float* lse, const Bf16* qkv, int batch, int seq) override {
    CheckShape("Forward", batch, seq);
    TunedGraph& graph = GraphsFor(batch, seq, true, false).forward;
    std::unordered_map<int64_t, void*> pack = {
        {kQ, Mutable(qkv)},           {kK, Mutable(qkv + channels_)}, {kV, Mutable(qkv + 2 * channels_)},
        {kO, out},                    {kStats, lse}};
    if (!graph.chosen) {
      const size_t out_bytes = static_cast<size_t>(batch) * seq * channels_ * sizeof(Bf16);
      const size_t lse_bytes = static_cast<size_t>(batch) * heads_ * seq * sizeof(float);
      const size_t lse_offset = (out_bytes + 255) / 256 * 256;
      ChoosePlan(graph, pack, {{kO, 0}, {kStats, lse_offset}}, lse_offset + lse_bytes, "forward", batch, seq);
    }
    Execute(graph, pack);
  }

  void Backward(Bf16* qkv_grad, const Bf16* out_grad, const Bf16* qkv, const Bf16* out, const float* lse, int batch,
                int seq) override {
    CheckShape("Backward", batch, seq);
    TunedGraph& graph = GraphsFor(batch, seq, false, true).backward;
    std::unordered_map<int64_t, void*> pack = {
        {kQ, Mutable(qkv)},   {kK, Mutable(qkv + channels_)},      {kV, Mutable(qkv + 2 * channels_)},
        {kO, Mutable(out)},   {kDO, Mutable(out_grad)},            {kStats, Mutable(lse)},
        {kDQ, qkv_grad},      {kDK, qkv_grad + channels_},         {kDV, qkv_grad + 2 * channels_}};
    if (!graph.chosen) {
      const size_t row_bytes = static_cast<size_t>(channels_) * sizeof(Bf16);  // dQ, dK, dV interleaved as in qkv_grad
      ChoosePlan(graph, pack, {{kDQ, 0}, {kDK, row_bytes}, {kDV, 2 * row_bytes}},
                 static_cast<size_t>(batch) * seq * 3 * row_bytes, "backward", batch, seq);
    }
    Execute(graph, pack);
  }

 private:
  // A graph and the plan its runs use: chosen on the first run (nullopt: the frontend's own first plan).
  struct TunedGraph {
    GraphPtr graph;
    std::optional<int64_t> plan;
    bool chosen = false;
  };
  struct Graphs {
    TunedGraph forward;
    TunedGraph backward;
  };

  void Execute(const TunedGraph& tuned, std::unordered_map<int64_t, void*>& pack) {
    if (tuned.plan) {
      TB_CHECK_CUDNN_FE(tuned.graph->execute_plan_at_index(handle_.get(), pack, workspace_.data(), *tuned.plan));
    } else {
      TB_CHECK_CUDNN_FE(tuned.graph->execute(handle_.get(), pack, workspace_.data()));
    }
  }

  // Chooses `tuned`'s plan on its first run: times each plan on `pack` with the `outputs` (uid, byte offset) moved
  // into a scratch of `scratch_bytes`, so the caller's outputs are written only by the real run; records the choice.
  void ChoosePlan(TunedGraph& tuned, std::unordered_map<int64_t, void*> pack,
                  const std::vector<std::pair<int64_t, size_t>>& outputs, size_t scratch_bytes, const char* what,
                  int batch, int seq) {
    tuned.chosen = true;
    std::vector<std::optional<double>> medians;
    int chosen = 0;
    if (autotune_ && CanTimeOn(stream_)) {
      const TimingScratch scratch(scratch_bytes, stream_);
      if (scratch.data() != nullptr) {
        for (const auto& [uid, offset] : outputs) pack[uid] = static_cast<char*>(scratch.data()) + offset;
        const std::vector<int64_t> plans = TimedPlans(*tuned.graph);
        for (const int64_t index : plans) {
          medians.push_back(MedianRunSeconds(stream_, [&] {
            return tuned.graph->execute_plan_at_index(handle_.get(), pack, workspace_.data(), index).is_good();
          }));
        }
        chosen = ChooseFastest(medians);
        if (chosen >= 0) tuned.plan = plans[static_cast<size_t>(chosen)];
      }
    }
    const std::string shape = "B " + std::to_string(batch) + " T " + std::to_string(seq) + " NH " +
                              std::to_string(heads_) + " hd " + std::to_string(channels_ / heads_);
    choices_.push_back(MakeKernelChoice(std::string("cudnn-sdpa ") + what, shape, medians, chosen));
  }

  void CheckShape(const char* caller, int batch, int seq) const {
    if (seq == 1) throw RuntimeError(std::string("cuDNN attention ") + caller + ": " + kOneTokenRefusal);
    if (batch < 1 || batch > max_batch_ || seq < 1 || seq > max_seq_) {
      throw RuntimeError("cuDNN attention " + std::string(caller) + ": batch " + std::to_string(batch) + ", seq " +
                         std::to_string(seq) + " outside what it was made for (batch 1.." +
                         std::to_string(max_batch_) + ", seq 1.." + std::to_string(max_seq_) + ")");
    }
  }

  // The graphs for (batch, seq), building the ones asked for on first use, and a workspace large enough for them.
  // Growing the workspace frees the old one: cudaFree waits for the device, so no queued graph still uses it.
  Graphs& GraphsFor(int batch, int seq, bool forward, bool backward) {
    Graphs& graphs = graphs_[{batch, seq}];
    if ((!forward || graphs.forward.graph != nullptr) && (!backward || graphs.backward.graph != nullptr)) {
      return graphs;  // built before, and the workspace sized for them then
    }
    const Layout layout(batch, seq, channels_, heads_);
    try {
      if (forward && graphs.forward.graph == nullptr) {
        graphs.forward.graph = BuildForwardGraph(handle_.get(), layout, scale_, autotune_);
      }
      if (backward && graphs.backward.graph == nullptr) {
        graphs.backward.graph = BuildBackwardGraph(handle_.get(), layout, scale_, autotune_);
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& error) {
      // The frontend throws std::runtime_error where no SDPA implementation fits the attributes.
      throw RuntimeError("cuDNN attention graph (batch " + std::to_string(batch) + ", seq " + std::to_string(seq) +
                         "): cuDNN: " + error.what());
    }
    int64_t needed = 0;
    for (const GraphPtr& graph : {graphs.forward.graph, graphs.backward.graph}) {
      if (graph != nullptr) needed = std::max(needed, WorkspaceNeeded(*graph, autotune_));
    }
    if (static_cast<size_t>(needed) > workspace_.bytes()) workspace_ = DeviceBuffer(static_cast<size_t>(needed));
    return graphs;
  }

  int channels_;
  int heads_;
  int max_batch_;
  int max_seq_;
  float scale_;
  cudaStream_t stream_;
  bool autotune_;  // time every plan (TRAINBENCH_AUTOTUNE not 0)
  CudnnHandle handle_;
  std::map<std::pair<int, int>, Graphs> graphs_;
  DeviceBuffer workspace_;
  std::vector<KernelChoice> choices_;
};

}  // namespace

std::unique_ptr<Attention> MakeCudnnAttention(int channels, int heads, int max_batch, int max_seq, void* stream,
                                              int seq) {
  if (seq == 0) seq = max_seq;
  if (channels < 1 || heads < 1 || channels % heads != 0 || max_batch < 1 || max_seq < 1 || seq < 1 ||
      seq > max_seq) {
    throw RuntimeError("MakeCudnnAttention: invalid shape (channels " + std::to_string(channels) + ", heads " +
                       std::to_string(heads) + ", max_batch " + std::to_string(max_batch) + ", max_seq " +
                       std::to_string(max_seq) + ", seq " + std::to_string(seq) + ")");
  }
  // Before any graph: the caller falls back (auto) or refuses (cudnn) before its run starts.
  if (seq == 1 || max_seq == 1) throw RuntimeError(std::string("cuDNN fused attention: ") + kOneTokenRefusal);
  try {
    return std::make_unique<CudnnAttention>(channels, heads, max_batch, max_seq, seq, stream);
  } catch (const RuntimeError& error) {
    throw RuntimeError("cuDNN fused attention is not available for " + std::to_string(heads) + " heads of " +
                       std::to_string(channels / heads) + " (cuDNN " + CudnnVersionText() + "): " + error.what());
  }
}

}  // namespace tb::gpu
