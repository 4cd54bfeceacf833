// Gemm over cuBLASLt (see gemm.h for the contracts). bf16 A and B, fp32 accumulation and scale, bf16 or fp32 D.
//
// Row-major through cuBLASLt's column-major convention: a row-major matrix X (r, c) with leading dimension c
// occupies the same bytes as the column-major matrix Xᵀ (c, r) with leading dimension c. cuBLASLt computes
// D (m, n) = op(A) (m, k) · op(B) (k, n), column-major, with A stored (m, k) or, transposed, (k, m). So:
//
//   forward         out (N, OC) = in · Wᵀ          ⇔ outᵀ (OC, N) = W (OC, IC) · inᵀ (IC, N)
//                   W row-major (OC, IC) is column-major (IC, OC), ld IC: A = W, transa = T (op(A) = W)
//                   in row-major (N, IC) is column-major (IC, N), ld IC:   B = in, transb = N
//                   D = out as column-major (OC, N), ld OC; m = OC, n = N, k = IC; bias has m = OC entries
//                   (cuBLASLt broadcasts a bias of D's row count over D's columns) and the GELU aux matrix
//                   has D's shape and ld.
//   input grad      in_grad (N, IC) = out_grad · W ⇔ in_gradᵀ (IC, N) = Wᵀ (IC, OC) · out_gradᵀ (OC, N)
//                   A = W as column-major (IC, OC), ld IC, transa = N; B = out_grad as (OC, N), ld OC,
//                   transb = N; D = in_grad (IC, N), ld IC; m = IC, n = N, k = OC; DGELU's aux = gelu_pre
//                   has D's shape and ld.
//   weight grad     W_grad (OC, IC) (+)= out_gradᵀ · in ⇔ W_gradᵀ (IC, OC) (+)= inᵀ (IC, N) · out_grad
//                   (N, OC)
//                   A = in as (IC, N), ld IC, transa = N; B = out_grad stored (OC, N), ld OC, transb = T
//                   (op(B) = (N, OC)); C = D = W_grad (IC, OC), ld IC, fp32, beta = 1 (accumulate) or 0
//                   (overwrite: C is not read); m = IC, n = OC, k = N. BGRADB's bias gradient reduces op(B) over k
//                   = N: OC entries, the columns of D, the column sums of out_grad (N, OC), in D's type (fp32).
//   DGELU_BGRAD     on the input grad: the bias gradient is the sum of D (IC, N) over its columns: IC entries,
//                   D's rows; D is bf16, the bias gradient asked for in fp32 (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE).
//
// C always has D's type, shape and leading dimension, so one layout serves both: cuBLASLt's in-place rule (C == D,
// as for the weight gradients and the residual adds) wants C's layout to be D's.
//
// Algorithm choice: a new plan asks the heuristic for up to kAutotuneCandidates algorithms and, unless autotuning is
// off, times each (one warm-up, then kAutotuneRepeats runs between CUDA events, on the Gemm's stream) before its first
// real call, keeping the fastest median (autotune.h: ties within 1 % go to the heuristic's order). The timing runs
// read the call's real A, B (and a C that is not D) but write a scratch D (C too when C is D: the accumulating calls)
// and scratch epilogue outputs (GELU aux, bias gradients): the caller's outputs are touched only by the real call.
// One-off cost per plan, paid in the first step: the candidates' 6 runs each (a few ms for the transformer's largest
// GEMMs), a scratch allocation of D's size (stream-ordered; without the memory the heuristic's first is kept) and a
// host wait for the stream.
//
// Bias gradients: the BGRADB (weight grad) and DGELU_BGRAD (input grad) epilogues write them, where the heuristic has
// an algorithm for the shape with that epilogue; they only overwrite, so an accumulating backward, a shape without
// such an algorithm, or a bias gradient that is not 16-byte aligned takes gpu::ColumnSum (partial sums over many
// blocks, then their sum in order) instead.
#include "cuda/gemm.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/autotune.h"
#include "cuda/autotune_timing.h"
#include "cuda/cublas_check.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_raii.h"
#include "error.h"

namespace tb::gpu {
namespace {

// cuBLASLt's split-K and stream-K algorithms on Hopper want a workspace; 32 MiB is what NVIDIA suggests there.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// cuBLASLt's epilogues read bias and aux in 16-byte vectors.
constexpr uintptr_t kEpilogueAlignment = 16;
// The GELU aux matrix's leading dimension must be a multiple of 8 elements (cublasLt.h, EPILOGUE_AUX_LD).
constexpr int64_t kAuxLdMultiple = 8;

// Owners of cuBLASLt's opaque handles: each type's destroy function, called once, result ignored (a failed
// destroy means the context is already broken, and whatever broke it has reported).
template <auto Destroy>
struct LtDeleter {
  template <typename T>
  void operator()(T* handle) const noexcept {
    (void)Destroy(handle);
  }
};
using LtHandle = std::unique_ptr<std::remove_pointer_t<cublasLtHandle_t>, LtDeleter<cublasLtDestroy>>;
using MatmulDesc = std::unique_ptr<std::remove_pointer_t<cublasLtMatmulDesc_t>, LtDeleter<cublasLtMatmulDescDestroy>>;
using MatrixLayout =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatrixLayout_t>, LtDeleter<cublasLtMatrixLayoutDestroy>>;
using MatmulPreference =
    std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, LtDeleter<cublasLtMatmulPreferenceDestroy>>;

// The largest power of two up to 256 that divides the address: what cuBLASLt's heuristic assumes of a pointer
// (256 unless told otherwise), so each plan is chosen for the alignment its pointers really have.
uint32_t AlignmentOf(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

std::string Hex(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", pointer);
  return text;
}

const char* EpilogueName(cublasLtEpilogue_t epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: return "none";
    case CUBLASLT_EPILOGUE_BIAS: return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return "GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return "DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return "DGELU_BGRAD";
    case CUBLASLT_EPILOGUE_BGRADB: return "BGRADB";
    default: return "other";
  }
}

// One column-major matmul D = alpha·op(A)·op(B) + beta·C with an epilogue, as cuBLASLt sees it. A and B are bf16;
// C has D's type and layout (C may be D itself, or unread when beta is 0).
struct Matmul {
  const char* caller;
  cublasOperation_t transa;
  cublasOperation_t transb;
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  const void* c;  // null: beta must be 0, and D is passed in its place
  void* d;
  int64_t ldd;
  cudaDataType_t d_type;
  float beta;
  cublasLtEpilogue_t epilogue;
  const void* bias;  // BIAS epilogues (read; D's type, m entries); BGRAD ones (written; bias_type)
  const void* aux;   // GELU_AUX (written) and DGELU (read) epilogues; D's type, (m, n) with ld aux_ld
  int64_t aux_ld;
  bool float_bias = false;  // the bias (gradient) is fp32 whatever D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE)
  // Strided batch: `batch` matmuls of this shape, the b-th's operands at b times these strides (elements) from the
  // pointers above (1: one matmul, strides unread).
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0, stride_bias = 0, stride_aux = 0;
};

// What a plan depends on: the descriptors' contents and the pointer alignments the heuristic saw.
struct PlanKey {
  int epilogue;
  int transa, transb;
  int64_t m, n, k, lda, ldb, ldd, aux_ld;
  int d_type;
  bool float_bias;
  uint32_t align_a, align_b, align_c, align_d, align_bias, align_aux;
  int64_t batch, stride_a, stride_b, stride_d, stride_bias, stride_aux;
  auto operator<=>(const PlanKey&) const = default;
};

struct Plan {
  MatmulDesc desc;
  MatrixLayout a, b, d;  // d is C's layout too
  // The heuristic's candidates, best first (std::array: nvcc 13.0's front end crashes on a std::vector of these
  // structs with array members, in C++20).
  std::array<cublasLtMatmulAlgo_t, kAutotuneCandidates> candidates{};
  int candidate_count = 0;
  cublasLtMatmulAlgo_t algo;  // the one the calls run: candidates[0] until timed
  bool found = false;  // the heuristic had an algorithm (a key without one is kept, so it is asked once)
  bool chosen = false;  // the algorithm has been chosen (timed, or not, once)
  std::string reason;  // why not, when not found
};

template <typename T>
void SetDescAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  TB_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

template <typename T>
void SetPreference(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute,
                   const T& value) {
  TB_CHECK_CUBLAS(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

// A matrix layout; with batch > 1, `batch` matrices of it `stride` elements apart.
MatrixLayout MakeLayout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch = 1,
                        int64_t stride = 0) {
  cublasLtMatrixLayout_t layout = nullptr;
  TB_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols),
                                             ld));
  MatrixLayout owned(layout);
  if (batch > 1) {
    const auto count = static_cast<int32_t>(batch);
    TB_CHECK_CUBLAS(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    TB_CHECK_CUBLAS(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return owned;
}

// The epilogue pointers change from call to call; the descriptor is reused, so they are set before each use.
void SetEpiloguePointers(cublasLtMatmulDesc_t desc, const Matmul& call) {
  if (call.bias != nullptr) SetDescAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, call.bias);
  if (call.aux != nullptr) SetDescAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, call.aux);
}

bool WritesAux(cublasLtEpilogue_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

bool WritesBias(cublasLtEpilogue_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_BGRADB || epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

size_t RoundUp256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// "m 2304 n 8192 k 768 op T,N D bf16": the plan's shape as kernel_choices() reports it.
std::string ShapeText(const Matmul& call) {
  const std::string batch = call.batch > 1 ? "batch " + std::to_string(call.batch) + " " : "";
  return batch + "m " + std::to_string(call.m) + " n " + std::to_string(call.n) + " k " + std::to_string(call.k) +
         " op " + (call.transa == CUBLAS_OP_N ? "N" : "T") + "," + (call.transb == CUBLAS_OP_N ? "N" : "T") + " D " +
         (call.d_type == CUDA_R_32F ? "fp32" : "bf16");
}

}  // namespace

struct Gemm::Impl {
  cudaStream_t stream;
  LtHandle handle;
  DeviceBuffer workspace;
  std::map<PlanKey, Plan> plans;
  DeviceBuffer column_sum_scratch;  // the bias gradients' partial sums, grown to the largest shape seen
  bool fuse_bias_gradients = true;
  size_t fused_bias_gradients = 0;
  bool autotune = AutotuneFromEnvironment();
  std::vector<KernelChoice> choices;  // one per plan with an algorithm, in the order they were chosen

  explicit Impl(void* stream_pointer) : stream(static_cast<cudaStream_t>(stream_pointer)) {
    cublasLtHandle_t raw = nullptr;
    TB_CHECK_CUBLAS(cublasLtCreate(&raw));
    handle.reset(raw);
    workspace = DeviceBuffer(kWorkspaceBytes);
  }

  // The plan for `call`'s shape, types, epilogue and pointer alignments: built and chosen by cuBLASLt's heuristic
  // on first use, then reused; `found` false when the heuristic has no algorithm for it.
  Plan& PlanFor(const Matmul& call) {
    const void* c = call.c != nullptr ? call.c : call.d;
    const PlanKey key{static_cast<int>(call.epilogue), static_cast<int>(call.transa), static_cast<int>(call.transb),
                      call.m, call.n, call.k, call.lda, call.ldb, call.ldd, call.aux_ld, static_cast<int>(call.d_type),
                      call.float_bias, AlignmentOf(call.a), AlignmentOf(call.b), AlignmentOf(c),
                      AlignmentOf(call.d), AlignmentOf(call.bias), AlignmentOf(call.aux), call.batch,
                      call.stride_a, call.stride_b, call.stride_d, call.stride_bias, call.stride_aux};
    if (const auto found = plans.find(key); found != plans.end()) return found->second;
    return plans.emplace(key, BuildPlan(call, key)).first->second;
  }

  Plan BuildPlan(const Matmul& call, const PlanKey& key) {
    Plan plan;
    cublasLtMatmulDesc_t desc = nullptr;
    TB_CHECK_CUBLAS(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    plan.desc.reset(desc);
    SetDescAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(call.transa));
    SetDescAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(call.transb));
    SetDescAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(call.epilogue));
    // Bias and aux take D's type, cuBLASLt's default for bf16 and fp32 outputs, unless the bias is asked for in fp32.
    if (call.float_bias) SetDescAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F));
    if (call.aux != nullptr) SetDescAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, call.aux_ld);
    if (call.batch > 1 && call.bias != nullptr) {
      SetDescAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, call.stride_bias);
    }
    if (call.batch > 1 && call.aux != nullptr) {
      SetDescAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, call.stride_aux);
    }
    // The heuristic reads the epilogue pointers' values to learn their alignment.
    SetEpiloguePointers(desc, call);

    const bool a_transposed = call.transa != CUBLAS_OP_N;
    const bool b_transposed = call.transb != CUBLAS_OP_N;
    plan.a = MakeLayout(CUDA_R_16BF, a_transposed ? call.k : call.m, a_transposed ? call.m : call.k, call.lda,
                        call.batch, call.stride_a);
    plan.b = MakeLayout(CUDA_R_16BF, b_transposed ? call.n : call.k, b_transposed ? call.k : call.n, call.ldb,
                        call.batch, call.stride_b);
    plan.d = MakeLayout(call.d_type, call.m, call.n, call.ldd, call.batch, call.stride_d);

    cublasLtMatmulPreference_t raw_preference = nullptr;
    TB_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&raw_preference));
    const MatmulPreference preference(raw_preference);
    SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{kWorkspaceBytes});
    SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a);
    SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b);
    SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
    SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
    // Split-K partial sums stay in fp32 (in the workspace) or are not made at all: the in-place and output-type
    // schemes add them up in D's type, bf16, a rounding per partial. Seen on an H200 (37 x 200 x 100, GELU epilogue,
    // no bias): 287 of 7400 pre-activations outside the bf16 tolerance of the fp32 product with every scheme
    // allowed, none with these two.
    SetPreference(raw_preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                  uint32_t{CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE});

    cublasLtMatmulHeuristicResult_t results[kAutotuneCandidates] = {};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle.get(), desc, plan.a.get(), plan.b.get(),
                                                                 plan.d.get(), plan.d.get(), raw_preference,
                                                                 kAutotuneCandidates, results, &found);
    plan.found = status == CUBLAS_STATUS_SUCCESS && found > 0;
    if (plan.found) {
      plan.candidate_count = std::min(found, kAutotuneCandidates);
      for (int i = 0; i < plan.candidate_count; ++i) plan.candidates[static_cast<size_t>(i)] = results[i].algo;
      plan.algo = plan.candidates[0];
    } else {
      plan.reason = status != CUBLAS_STATUS_SUCCESS
                        ? std::string(cublasGetStatusName(status)) + ": " + cublasGetStatusString(status)
                        : "the heuristic found no algorithm";
    }
    return plan;
  }

  // Enqueues `call` with `algo`; cuBLASLt's status (not checked: a candidate being timed may fail).
  cublasStatus_t Launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const Matmul& call) {
    SetEpiloguePointers(plan.desc.get(), call);
    const float alpha = 1.0f;
    return cublasLtMatmul(handle.get(), plan.desc.get(), &alpha, call.a, plan.a.get(), call.b, plan.b.get(),
                          &call.beta, call.c != nullptr ? call.c : call.d, plan.d.get(), call.d, plan.d.get(), &algo,
                          workspace.data(), workspace.bytes(), stream);
  }

  // Runs `call`; false (nothing run) when cuBLASLt has no algorithm for it. A plan's first call chooses its
  // algorithm first.
  bool TryRun(const Matmul& call) {
    Plan& plan = PlanFor(call);
    if (!plan.found) return false;
    if (!plan.chosen) ChooseAlgorithm(plan, call);
    TB_CHECK_CUBLAS(Launch(plan, plan.algo, call));
    return true;
  }

  // Times the plan's candidates (when autotuning, and the stream is not being captured) and keeps the fastest;
  // records the choice either way.
  void ChooseAlgorithm(Plan& plan, const Matmul& call) {
    plan.chosen = true;
    std::vector<std::optional<double>> medians;
    int chosen = 0;
    if (autotune && CanTimeOn(stream)) {
      medians = TimeCandidates(plan, call);
      chosen = ChooseFastest(medians);
      if (chosen > 0) plan.algo = plan.candidates[static_cast<size_t>(chosen)];
    }
    choices.push_back(MakeKernelChoice(std::string("gemm ") + call.caller + " " + EpilogueName(call.epilogue),
                                       ShapeText(call), medians, chosen));
  }

  // Each candidate's median seconds on `call`'s inputs with scratch outputs (nullopt: it failed to run); empty when
  // the scratch memory was not there.
  std::vector<std::optional<double>> TimeCandidates(const Plan& plan, const Matmul& call) {
    const size_t element_bytes = call.d_type == CUDA_R_32F ? 4 : 2;
    // A batch's outputs reach (batch - 1) strides past the first one's.
    const auto span = [&](int64_t one, int64_t stride) {
      return static_cast<size_t>(call.batch > 1 ? (call.batch - 1) * stride + one : one);
    };
    const size_t d_bytes = RoundUp256(element_bytes * span(call.ldd * call.n, call.stride_d));
    const size_t aux_bytes =
        WritesAux(call.epilogue) ? RoundUp256(element_bytes * span(call.aux_ld * call.n, call.stride_aux)) : 0;
    const size_t bias_bytes =
        WritesBias(call.epilogue) ? RoundUp256(sizeof(float) * span(std::max(call.m, call.n), call.stride_bias)) : 0;
    const TimingScratch scratch(d_bytes + aux_bytes + bias_bytes, stream);
    if (scratch.data() == nullptr) return {};
    char* base = static_cast<char*>(scratch.data());
    Matmul timing = call;
    timing.d = base;
    if (call.c == call.d) timing.c = base;  // in place: C is D; a separate C is only read
    if (aux_bytes > 0) timing.aux = base + d_bytes;
    if (bias_bytes > 0) timing.bias = base + d_bytes + aux_bytes;
    std::vector<std::optional<double>> medians;
    for (int i = 0; i < plan.candidate_count; ++i) {
      const cublasLtMatmulAlgo_t& algo = plan.candidates[static_cast<size_t>(i)];
      const auto run = [&] { return Launch(plan, algo, timing) == CUBLAS_STATUS_SUCCESS; };
      medians.push_back(MedianRunSeconds(stream, run));
    }
    return medians;
  }

  // Runs `call`; throws a RuntimeError naming the shape and epilogue when cuBLASLt has no algorithm for it.
  void Run(const Matmul& call) {
    if (TryRun(call)) return;
    const std::string what = std::string("cuBLASLt algorithm for Gemm::") + call.caller + " (m " +
                             std::to_string(call.m) + ", n " + std::to_string(call.n) + ", k " +
                             std::to_string(call.k) + ", D " + (call.d_type == CUDA_R_32F ? "fp32" : "bf16") +
                             ", epilogue " + EpilogueName(call.epilogue) + ")";
    throw RuntimeError(FormatFailure(what.c_str(), __FILE__, __LINE__, PlanFor(call).reason,
                                     "this GPU or cuBLAS version may not support this combination of shapes, "
                                     "types, alignments and epilogue"));
  }

  // `call` with a bias gradient epilogue writing `bias_grad`, where allowed and cuBLASLt can: whether it ran.
  bool TryFusedBiasGradient(Matmul call, cublasLtEpilogue_t epilogue, float* bias_grad) {
    if (!fuse_bias_gradients || reinterpret_cast<uintptr_t>(bias_grad) % kEpilogueAlignment != 0) return false;
    call.epilogue = epilogue;
    call.bias = bias_grad;
    call.float_bias = true;
    if (!TryRun(call)) return false;
    ++fused_bias_gradients;
    return true;
  }

  // Scratch for ColumnSum over (rows, cols). Growing frees the old buffer: cudaFree waits for the device, so no
  // queued column sum still uses it (first calls of a new shape only).
  float* ColumnSumScratch(size_t rows, int cols) {
    const size_t bytes = ColumnSumScratchFloats(rows, cols) * sizeof(float);
    if (bytes > column_sum_scratch.bytes()) column_sum_scratch = DeviceBuffer(bytes);
    return static_cast<float*>(column_sum_scratch.data());
  }

};

namespace {

void CheckShape(const char* caller, size_t rows, int in_features, int out_features) {
  if (in_features < 1 || out_features < 1 || rows > static_cast<size_t>(INT64_MAX)) {
    throw RuntimeError(std::string("Gemm::") + caller + ": invalid shape (rows " + std::to_string(rows) +
                       ", in_features " + std::to_string(in_features) + ", out_features " +
                       std::to_string(out_features) + ")");
  }
}

// cuBLASLt's epilogues load bias and aux in 16-byte vectors; a less aligned pointer would be read wrongly or
// fault, so refuse it with the reason.
void CheckEpiloguePointer(const char* caller, const char* name, const void* pointer) {
  if (pointer != nullptr && reinterpret_cast<uintptr_t>(pointer) % kEpilogueAlignment != 0) {
    throw RuntimeError(std::string("Gemm::") + caller + ": " + name + " (" + Hex(pointer) +
                       ") is not 16-byte aligned, which cuBLASLt's epilogues need (offset buffers by multiples of 8 "
                       "bf16 or 4 fp32 values)");
  }
}

void CheckAuxLd(const char* caller, const char* name, int features) {
  if (features % kAuxLdMultiple != 0) {
    throw RuntimeError(std::string("Gemm::") + caller + ": " + name + " has " + std::to_string(features) +
                       " columns, and cuBLASLt's GELU epilogues need a multiple of 8");
  }
}

}  // namespace

Gemm::Gemm(void* stream) : impl_(std::make_unique<Impl>(stream)) {}

Gemm::~Gemm() = default;

void Gemm::LinearForward(Bf16* out, Bf16* pre_gelu, const Bf16* in, const Bf16* weight, const Bf16* bias,
                         size_t rows, int in_features, int out_features) {
  constexpr const char* kCaller = "LinearForward";
  CheckShape(kCaller, rows, in_features, out_features);
  CheckEpiloguePointer(kCaller, "bias", bias);
  CheckEpiloguePointer(kCaller, "pre_gelu", pre_gelu);
  if (pre_gelu != nullptr) CheckAuxLd(kCaller, "pre_gelu", out_features);
  if (rows == 0) return;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (pre_gelu != nullptr) {
    epilogue = bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  } else if (bias != nullptr) {
    epilogue = CUBLASLT_EPILOGUE_BIAS;
  }
  impl_->Run(Matmul{kCaller, CUBLAS_OP_T, CUBLAS_OP_N, out_features, static_cast<int64_t>(rows), in_features, weight,
                    in_features, in, in_features, nullptr, out, out_features, CUDA_R_16BF, 0.0f, epilogue, bias,
                    pre_gelu, out_features});
}

void Gemm::LinearForwardFloat(float* out, const float* residual, const Bf16* in, const Bf16* weight,
                              const float* bias, size_t rows, int in_features, int out_features) {
  constexpr const char* kCaller = "LinearForwardFloat";
  CheckShape(kCaller, rows, in_features, out_features);
  CheckEpiloguePointer(kCaller, "bias", bias);
  if (rows == 0) return;
  // C = residual with beta = 1; cuBLASLt allows C and D to be the same buffer when their layouts match, as here.
  impl_->Run(Matmul{kCaller, CUBLAS_OP_T, CUBLAS_OP_N, out_features, static_cast<int64_t>(rows), in_features, weight,
                    in_features, in, in_features, residual, out, out_features, CUDA_R_32F,
                    residual != nullptr ? 1.0f : 0.0f, bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT,
                    bias, nullptr, 0});
}

bool Gemm::LinearBackwardInput(Bf16* in_grad, const Bf16* out_grad, const Bf16* weight, const Bf16* gelu_pre,
                               size_t rows, int in_features, int out_features, float* gelu_bias_grad) {
  constexpr const char* kCaller = "LinearBackwardInput";
  CheckShape(kCaller, rows, in_features, out_features);
  CheckEpiloguePointer(kCaller, "gelu_pre", gelu_pre);
  if (gelu_pre != nullptr) CheckAuxLd(kCaller, "gelu_pre", in_features);
  if (rows == 0) return false;
  const Matmul call{kCaller, CUBLAS_OP_N, CUBLAS_OP_N, in_features, static_cast<int64_t>(rows), out_features, weight,
                    in_features, out_grad, out_features, nullptr, in_grad, in_features, CUDA_R_16BF, 0.0f,
                    gelu_pre != nullptr ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT, nullptr, gelu_pre,
                    in_features};
  if (gelu_pre != nullptr && gelu_bias_grad != nullptr &&
      impl_->TryFusedBiasGradient(call, CUBLASLT_EPILOGUE_DGELU_BGRAD, gelu_bias_grad)) {
    return true;
  }
  impl_->Run(call);
  return false;
}

void Gemm::LinearBackwardWeights(float* weight_grad, float* bias_grad, const Bf16* out_grad, const Bf16* in,
                                 size_t rows, int in_features, int out_features, GradientWrite write) {
  constexpr const char* kCaller = "LinearBackwardWeights";
  CheckShape(kCaller, rows, in_features, out_features);
  if (rows == 0) return;
  const bool overwrite = write == GradientWrite::kOverwrite;
  const Matmul call{kCaller, CUBLAS_OP_N, CUBLAS_OP_T, in_features, out_features, static_cast<int64_t>(rows), in,
                    in_features, out_grad, out_features, weight_grad, weight_grad, in_features, CUDA_R_32F,
                    overwrite ? 0.0f : 1.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0};
  if (bias_grad != nullptr && overwrite && impl_->TryFusedBiasGradient(call, CUBLASLT_EPILOGUE_BGRADB, bias_grad)) {
    return;
  }
  impl_->Run(call);
  if (bias_grad != nullptr) {
    ColumnSum(bias_grad, out_grad, rows, out_features, write, impl_->ColumnSumScratch(rows, out_features),
              impl_->stream);
  }
}

namespace {

void CheckBatch(const char* caller, size_t rows, int in_features, int out_features, int batch) {
  CheckShape(caller, rows, in_features, out_features);
  if (batch < 1) throw RuntimeError(std::string("Gemm::") + caller + ": batch " + std::to_string(batch) + " < 1");
}

}  // namespace

void Gemm::BatchedLinearForward(Bf16* out, Bf16* pre_gelu, const Bf16* in, const Bf16* weight, const Bf16* bias,
                                size_t rows, int in_features, int out_features, int batch) {
  constexpr const char* kCaller = "BatchedLinearForward";
  CheckBatch(kCaller, rows, in_features, out_features, batch);
  CheckEpiloguePointer(kCaller, "bias", bias);
  CheckEpiloguePointer(kCaller, "pre_gelu", pre_gelu);
  if (pre_gelu != nullptr) CheckAuxLd(kCaller, "pre_gelu", out_features);
  if (rows == 0) return;
  const auto n = static_cast<int64_t>(rows);
  Matmul call{kCaller, CUBLAS_OP_T, CUBLAS_OP_N, out_features, n, in_features, weight, in_features, in, in_features,
              nullptr, out, out_features, CUDA_R_16BF, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0};
  call.batch = batch;
  call.stride_a = int64_t{out_features} * in_features;
  call.stride_b = n * in_features;
  call.stride_d = n * out_features;
  if (bias != nullptr || pre_gelu != nullptr) {
    Matmul fused = call;
    fused.epilogue = pre_gelu == nullptr ? CUBLASLT_EPILOGUE_BIAS
                     : bias != nullptr   ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                         : CUBLASLT_EPILOGUE_GELU_AUX;
    fused.bias = bias;
    fused.stride_bias = out_features;
    fused.aux = pre_gelu;
    fused.aux_ld = out_features;
    fused.stride_aux = call.stride_d;
    if (impl_->TryRun(fused)) return;
  }
  // No batched algorithm with the epilogue: the plain product (into pre_gelu when there is a GELU), then the bias
  // and the GELU in one pass.
  if (pre_gelu != nullptr) call.d = pre_gelu;
  impl_->Run(call);
  if (bias != nullptr || pre_gelu != nullptr) {
    BatchedBiasGelu(out, pre_gelu, bias, rows, out_features, batch, impl_->stream);
  }
}

void Gemm::BatchedLinearBackwardInput(Bf16* in_grad, const Bf16* out_grad, const Bf16* weight, const Bf16* gelu_pre,
                                      size_t rows, int in_features, int out_features, int batch) {
  constexpr const char* kCaller = "BatchedLinearBackwardInput";
  CheckBatch(kCaller, rows, in_features, out_features, batch);
  CheckEpiloguePointer(kCaller, "gelu_pre", gelu_pre);
  if (gelu_pre != nullptr) CheckAuxLd(kCaller, "gelu_pre", in_features);
  if (rows == 0) return;
  const auto n = static_cast<int64_t>(rows);
  Matmul call{kCaller, CUBLAS_OP_N, CUBLAS_OP_N, in_features, n, out_features, weight, in_features, out_grad,
              out_features, nullptr, in_grad, in_features, CUDA_R_16BF, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
              nullptr, 0};
  call.batch = batch;
  call.stride_a = int64_t{out_features} * in_features;
  call.stride_b = n * out_features;
  call.stride_d = n * in_features;
  if (gelu_pre != nullptr) {
    Matmul fused = call;
    fused.epilogue = CUBLASLT_EPILOGUE_DGELU;
    fused.aux = gelu_pre;
    fused.aux_ld = in_features;
    fused.stride_aux = call.stride_d;
    if (impl_->TryRun(fused)) return;
  }
  impl_->Run(call);
  if (gelu_pre != nullptr) GeluBackward(in_grad, gelu_pre, rows * batch * in_features, impl_->stream);
}

void Gemm::BatchedLinearBackwardWeights(float* weight_grad, float* bias_grad, const Bf16* out_grad, const Bf16* in,
                                        size_t rows, int in_features, int out_features, int batch,
                                        GradientWrite write) {
  constexpr const char* kCaller = "BatchedLinearBackwardWeights";
  CheckBatch(kCaller, rows, in_features, out_features, batch);
  if (rows == 0) return;
  const auto n = static_cast<int64_t>(rows);
  Matmul call{kCaller, CUBLAS_OP_N, CUBLAS_OP_T, in_features, out_features, n, in, in_features, out_grad,
              out_features, weight_grad, weight_grad, in_features, CUDA_R_32F,
              write == GradientWrite::kOverwrite ? 0.0f : 1.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0};
  call.batch = batch;
  call.stride_a = n * in_features;
  call.stride_b = n * out_features;
  call.stride_d = int64_t{out_features} * in_features;
  impl_->Run(call);
  if (bias_grad != nullptr) BatchedColumnSum(bias_grad, out_grad, rows, out_features, batch, write, impl_->stream);
}

void Gemm::set_fused_bias_gradients(bool allowed) { impl_->fuse_bias_gradients = allowed; }

void Gemm::set_autotune(bool on) { impl_->autotune = on; }

std::vector<KernelChoice> Gemm::kernel_choices() const { return impl_->choices; }

size_t Gemm::fused_bias_gradients() const { return impl_->fused_bias_gradients; }

}  // namespace tb::gpu
