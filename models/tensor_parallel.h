// Megatron-LM tensor parallelism for the GPT-2 model of transformer.h, as a CPU reference: the model split over
// the T ranks of one communicator, each holding its slices of the weights (Shoeybi et al. 2019, "Megatron-LM").
//
// The split, per block: attn.qkv (3C, C) column-parallel by heads (rank r holds heads [r·H/T, (r+1)·H/T) of each
// of q, k and v: three row blocks of the (out, in) weight, and the matching bias pieces), attention over the local
// heads, attn.proj (C, C) row-parallel (columns [r·C/T, (r+1)·C/T)), its output all-reduced and then the replicated
// bias added once; mlp.fc (4C, C) column-parallel (rows), GELU local, mlp.proj (C, 4C) row-parallel, all-reduce,
// replicated bias; LayerNorms replicated. Backward all-reduces the input gradient of each column-parallel layer
// (qkv, fc). wte (Vp, C) split by vocabulary rows (rank r: [r·Vp/T, (r+1)·Vp/T)): the embedding looks up its rows
// only and all-reduces, wpe (replicated) is added after; the tied LM head gives logits over the local vocabulary
// slice, a vocab-parallel cross-entropy combines them, and backward all-reduces the head's input gradient.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "communicator.h"
#include "model_config.h"
#include "transformer.h"

namespace tb {

// Throws InputError (one line) unless T >= 1, T divides heads and T divides vocab_padded. (d_model and the MLP's
// width then divide by T as well.)
void CheckTensorParallel(const ModelConfig& config, int tensor_parallel);

// Throws InputError unless the local widths d_model/T and vocab_padded/T (and d_model) are multiples of 8, as the
// CUDA transformer's 16-byte aligned bf16 rows need (cuBLASLt's epilogues, models/cuda/gemm.h). In every build, so
// that train refuses such a split before any work starts.
void CheckCudaTensorParallelWidths(const ModelConfig& config, int tensor_parallel);

// Throws InputError (one line) unless `config` splits T ways for steps of micro_batch x seq tokens on the CUDA
// transformer (`cuda`) or the CPU one: CheckTensorParallel, on CUDA CheckCudaTensorParallelWidths, and T dividing a
// step's tokens into equal shares. What train refuses, and what cost's layout search does not consider.
void CheckTensorParallelStep(const ModelConfig& config, int tensor_parallel, int micro_batch, int seq, bool cuda);

// Why `parallel` (dp, zero1, fsdp) across tensor-parallel groups of T > 1 is not built on this backend, in words
// that follow "--tensor-parallel T " ("" when it is built): fsdp across the groups runs on the CPU reference only.
std::string TensorParallelModeGap(const std::string& parallel, int tensor_parallel, bool cuda);

// The local shapes of rank `rank` of T, which both tensor-parallel models compute with.
struct TensorParallelDims {
  int tp = 1, rank = 0;
  int c = 0;            // C: the residual stream stays whole
  int heads = 0;        // H/T
  int channels = 0;     // Cl = C/T: the local heads' width
  int hidden = 0;       // Fl = mlp_ratio·C/T: the local MLP hidden
  int vocab_rows = 0;   // Vl = Vp/T
  int vocab_begin = 0;  // the first local row's token id
  int vocab_used = 0;   // local rows below V (the real tokens)
};
TensorParallelDims MakeTensorParallelDims(const ModelConfig& config, int tensor_parallel, int rank);

// How a tensor of MakeLayout is split over the tensor-parallel ranks.
enum class TensorSplit {
  kReplicated,  // every rank holds it whole: LayerNorms, row-parallel biases, wpe, lnf
  kVocabRows,   // wte: a block of vocabulary rows
  kQkvHeads,    // attn.qkv weight and bias: the local heads' rows of each of q, k and v
  kOutRows,     // mlp.fc weight and bias: a block of output rows (column-parallel)
  kInColumns,   // attn.proj and mlp.proj weights: a block of input columns (row-parallel)
};
TensorSplit TensorParallelSplit(const ModelConfig& config, size_t slot);

// This rank's flat layout: the slots of MakeLayout in the same order (BlockSlot, LnfWeightSlot apply), each with
// its local element count; the same on every rank of the group.
std::vector<TensorSlot> TensorParallelLayout(const ModelConfig& config, int tensor_parallel);

// A contiguous stretch shared by the local flat buffers and the full model's: local elements [local, local + count)
// are full elements [full, full + count).
struct TensorParallelStretch {
  size_t local = 0;
  size_t full = 0;
  size_t count = 0;
};
// Rank `rank`'s local elements as stretches of the full layout, in local order, covering every local element once
// (a row-parallel weight gives one stretch per row).
std::vector<TensorParallelStretch> TensorParallelStretches(const ModelConfig& config, int tensor_parallel, int rank);

// Elements one training step (Forward and Backward) all-reduces in one tensor-parallel group of T > 1 ranks, for N =
// batch·seq tokens: 4·L·N·C in the blocks (Megatron's 4·L·B·S·h: forward the outputs of attn.proj and mlp.proj,
// backward the input gradients of qkv and fc), plus 2·N·C for the vocab-parallel embedding (forward) and LM head
// (backward, its input gradient), plus 3·N for the vocab-parallel cross-entropy (the row maxima, the sums of exp and
// the target logits). 0 for T = 1 (nothing is all-reduced).
uint64_t TensorParallelAllReduceElements(const ModelConfig& config, int tensor_parallel, int batch, int seq);
// Megatron's count for the blocks alone: 4·L·B·S·C.
uint64_t MegatronActivationElements(const ModelConfig& config, int batch, int seq);

// What a tensor-parallel model's all-reduces did: calls, fp32 elements (bytes = 4 × elements), host seconds inside
// them (each blocking).
struct TensorParallelComm {
  int64_t allreduces = 0;
  uint64_t elements = 0;
  uint64_t bytes = 0;
  double seconds = 0;
};

class TensorParallelStats {
 public:
  virtual ~TensorParallelStats() = default;
  virtual int tensor_parallel() const = 0;       // T
  virtual int tensor_parallel_rank() const = 0;  // this rank's index in the group
  // The last step's all-reduces: from the start of the last Forward to now (so, after Backward, that step's).
  virtual TensorParallelComm last_step_comm() const = 0;
  // The all-reduces since the previous call (then counted afresh): what the train loop takes after forward and after
  // backward, as exposed communication of kind activation.
  virtual TensorParallelComm TakeComm() = 0;
};

// The stats of a model made by MakeCpuTensorParallelTransformer or MakeCudaTensorParallelTransformer; nullptr for any
// other model (not split: T = 1, no activation all-reduces). Tensor parallel's side of a model is here, not in the
// Transformer interface.
TensorParallelStats* TensorParallelStatsOf(Transformer& model);

// Tensor parallel over `tp` (T = tp.size() ranks, tp.rank() its index): from the same seed, the same model as
// MakeCpuTransformer, each rank holding the bits of its slices. parameters(), gradients(), adam_m() and adam_v() are
// the local flat buffers in TensorParallelLayout order (also layout()), so that a data-parallel all-reduce across
// groups averages the local slice. Every rank of `tp` must make it and step it together (the all-reduces are
// blocking, on host memory: an MPI communicator); `tp` must outlive the model. Throws InputError where
// CheckTensorParallel does.
// `placement` (ResolvePlacement over TensorParallelLayout; InputError where it throws) says where the slices sit in the
// other modes, over the ranks that hold the same slices: zero1 shards this model's local elements (ShardOf them),
// fsdp its local units instead (MakeFsdpLayout of TensorParallelLayout) — the model holds its shards of the local units
// and reads whole local units through the UnitAccess of SetUnitAccess, in the full model's order. A pipeline stage
// (the default: the whole model): layout() is StageLayout of TensorParallelLayout, the buffers hold the stage's local
// elements (each with the bits it has in the unsplit model; ZeRO-1's shard is of them), and the stage's edges are the
// whole residual stream, replicated on the group (input_grad, Backward's scratch shared by the slots, is the last
// Backward's until the next). Every rank of `tp` holds the same stage.
std::unique_ptr<Transformer> MakeCpuTensorParallelTransformer(const ModelConfig& config, uint64_t seed,
                                                              Communicator& tp, const ModelPlacement& placement = {});

// The same split on the GPUs (models/cuda/cuda_tp_transformer.cu): one rank of `tp` per GPU, each holding its slices
// on the current device in the mixed precision of MakeCudaTransformer (bf16 GEMMs and attention over the local heads,
// fp32 master weights, gradients, AdamW moments and residual stream), from the same seed the same bits as the CPU
// models' (TensorParallelLayout order, so that a data-parallel all-reduce across groups averages the local slice).
// `tp` is a device-memory communicator (nccl) over the group; each activation all-reduce is fp32 and blocking (the
// model's stream synchronised, the buffer all-reduced in place, the communicator synchronised), counted by
// TensorParallelStatsOf. `options` as for MakeCudaTransformer (max_batch, attention, seq;
// placement: a ZeRO-1 shard of the local elements, no fsdp, the whole model). Throws InputError, before it touches the
// device, where CheckTensorParallel and ResolvePlacement do, for a host-memory communicator, for local widths
// (d_model/T, vocab_padded/T) that are not multiples of 8, for fsdp or a split stage, and for bad options;
// RuntimeError in a build without CUDA, or when the device lacks memory.
std::unique_ptr<Transformer> MakeCudaTensorParallelTransformer(const ModelConfig& config, uint64_t seed,
                                                               Communicator& tp, const CudaTransformerOptions& options);

}  // namespace tb
