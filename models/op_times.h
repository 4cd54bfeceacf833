// `train --op-times`: where a step's time goes inside the model, by kind of work. The model marks where each kind
// begins in Forward, Backward and AdamWStep on the clock that times its work (CUDA events on its stream, with NVTX
// ranges of the same names for a profiler; the host clock on the CPU); the interval up to the next mark is that
// kind's. WorkOf gives each kind's FLOPs and bytes per step, so that a time becomes a rate.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "model_config.h"

namespace tb {

class PhaseClock;

// The kinds of work, in the order of a step's forward, then the communication inside forward and backward (tensor
// parallel's activation all-reduces, fsdp's parameter gathers and gradient reduce-scatters, expert parallel's
// all-to-alls, dp's bucket all-reduces started as gradients become ready), which interrupts the kind that waited.
enum class OpKind : int { kEmbedding, kLayerNorm, kAttention, kMlp, kLmHead, kOptimizer, kCommModel };
constexpr int kOpKinds = 7;
// A kind's time in forward or in backward (the optimizer's and comm_model's count as backward: they are one row for
// the step).
constexpr int kOpSlots = 2 * kOpKinds;
constexpr int OpSlot(OpKind kind, bool backward) { return 2 * static_cast<int>(kind) + (backward ? 1 : 0); }
using OpSeconds = std::array<double, kOpSlots>;

// "embedding", "layernorm", "attention", "mlp", "lm_head", "optimizer", "comm_model".
const char* OpKindName(OpKind kind);
// What each kind holds, for the report and --help.
const char* OpKindScope(OpKind kind);

// A kind's work in one forward or backward of one micro-batch (the optimizer's: one step over the flat buffers).
// flops follows the MFU convention, ModelFlopsPerToken's (2 per multiply-add of a matmul weight forward, 4 backward;
// causal attention's scores 2·T·C per token per layer forward, 4 backward; an MoE block's MLP its router and K
// experts: over the kinds and both passes they add up to it per token), 0 for kinds without matmuls; bytes is what
// the kernels must read and write at least (element sizes of the backend: bf16 activations and fp32 residual stream
// on the GPU, fp32 on the CPU), 0 for the matmul kinds, whose rate is their FLOP/s, and for comm_model. Over
// `tensor_parallel` ranks a rank does 1/T of every matmul (its heads, its MLP columns, its slice of the vocabulary)
// and all of the rest.
struct OpWork {
  double flops = 0;
  double bytes = 0;
};
OpWork WorkOf(const ModelConfig& config, OpKind kind, bool backward, double tokens, int seq, bool bf16,
              double parameter_elements, int tensor_parallel = 1);

class OpTimes {
 public:
  explicit OpTimes(std::unique_ptr<PhaseClock> clock);
  ~OpTimes();
  OpTimes(const OpTimes&) = delete;
  OpTimes& operator=(const OpTimes&) = delete;

  // The work of `kind` in forward or backward starts here (what was marked before ends).
  void Begin(OpKind kind, bool backward);
  // The marked work ends here: the end of a forward, a backward or an optimizer step.
  void End();
  // Communication the model waits for, between these two: comm_model's, then the kind it interrupted resumes (or
  // nothing, where it came after End or before any mark).
  void BeginWait();
  void EndWait();
  // Waits for the last mark; adds each slot's seconds since the last call to `seconds`.
  void TakeInto(OpSeconds& seconds);

 private:
  std::unique_ptr<PhaseClock> clock_;
  std::vector<int> slots_;  // per mark: the slot its following interval belongs to (-1: none)
};

// Runs `wait`, communication inside forward or backward, between op_times' BeginWait and EndWait (null: just runs
// it); returns what it returns.
template <class Wait>
auto MarkWait(OpTimes* op_times, Wait&& wait) {
  if (op_times == nullptr) return wait();
  op_times->BeginWait();
  if constexpr (std::is_void_v<std::invoke_result_t<Wait&>>) {
    wait();
    op_times->EndWait();
  } else {
    auto result = wait();
    op_times->EndWait();
    return result;
  }
}

}  // namespace tb
