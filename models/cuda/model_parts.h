// What the two CUDA transformers (cuda_transformer.cu, cuda_tp_transformer.cu) share besides the kernels: how their
// tensors are carved out of one allocation, what they keep free for the libraries, and their PhaseClock.
#pragma once

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/cuda_raii.h"
#include "cuda/kernels.h"
#include "cuda/moe_layer.h"
#include "transformer.h"

namespace tb::cuda_model {

// Every tensor is carved at this alignment: cuBLASLt and cuDNN pick their fastest kernels for 16-byte aligned
// operands, and 256 bytes is what cudaMalloc itself guarantees.
inline constexpr size_t kTensorAlignment = 256;
// Device memory the libraries may still take after construction (cuBLASLt plans, cuDNN graphs and their
// workspaces are built on first use of a shape), kept free by the memory check so that a model which passes it
// does not fail in its first step. cuBLASLt's recommended workspace on Hopper is 32 MiB.
inline constexpr uint64_t kLibraryReserveBytes = 256ull << 20;

// Typed tensors carved out of one allocation. Run twice: first with a null base to count the bytes, then over the
// allocation to point every tensor, so that the layout is written down once.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* Take(size_t count) {
    const size_t offset = used_;
    used_ += (count * sizeof(T) + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
    return base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + offset);
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

// What one block keeps from forward for backward, N = B·T tokens, at the widths the rank holds: C, 3C, the heads and
// 4C of the whole model, or under tensor parallel the local heads' channels Cl, heads H/T and MLP hidden Fl.
struct BlockActivations {
  gpu::Bf16* ln1 = nullptr;        // (N, C)
  float* ln1_mean = nullptr;       // (N)
  float* ln1_rstd = nullptr;       // (N)
  gpu::Bf16* qkv = nullptr;        // (N, 3C) or (N, 3Cl): [q | k | v] of the heads held
  gpu::Bf16* atty = nullptr;       // (N, C) or (N, Cl) attention output, before the projection
  float* att_lse = nullptr;        // (B, heads held, T) log-sum-exp of each attention row
  float* residual2 = nullptr;      // (N, C) residual after attention
  gpu::Bf16* ln2 = nullptr;        // (N, C)
  float* ln2_mean = nullptr;       // (N)
  float* ln2_rstd = nullptr;       // (N)
  gpu::Bf16* fch = nullptr;        // (N, 4C) or (N, Fl) MLP hidden, before GELU (the GELU epilogue's aux output)
  gpu::Bf16* fch_gelu = nullptr;   // the same, after GELU
  float* residual3 = nullptr;      // (N, C) residual after the MLP: the block's output
  gpu::MoeLayerActivations moe;    // an MoE block's routing and experts' activations (fch and fch_gelu then empty)
};

// One block's activations for `n` tokens out of `carve`: `channels` (C) whole, `head_channels` (C or Cl) and `heads`
// (NH or H/T) for attention, `hidden` (4C or Fl) for the MLP.
inline void CarveBlockActivations(Carver& carve, BlockActivations& a, size_t n, size_t channels, size_t head_channels,
                                  size_t heads, size_t hidden) {
  a.ln1 = carve.Take<gpu::Bf16>(n * channels);
  a.ln1_mean = carve.Take<float>(n);
  a.ln1_rstd = carve.Take<float>(n);
  a.qkv = carve.Take<gpu::Bf16>(n * 3 * head_channels);
  a.atty = carve.Take<gpu::Bf16>(n * head_channels);
  a.att_lse = carve.Take<float>(n * heads);
  a.residual2 = carve.Take<float>(n * channels);
  a.ln2 = carve.Take<gpu::Bf16>(n * channels);
  a.ln2_mean = carve.Take<float>(n);
  a.ln2_rstd = carve.Take<float>(n);
  a.fch = carve.Take<gpu::Bf16>(n * hidden);
  a.fch_gelu = carve.Take<gpu::Bf16>(n * hidden);
  a.residual3 = carve.Take<float>(n * channels);
}

// PhaseClock over CUDA events recorded on the model's stream. The events are created as marks first need them
// and reused every step after, so a step allocates nothing. Host waits between marks (the tensor-parallel model's
// blocking all-reduces) leave the stream idle, so an interval includes them.
class CudaPhaseClock : public PhaseClock {
 public:
  explicit CudaPhaseClock(cudaStream_t stream) : stream_(stream) {}

  void Mark() override {
    if (marks_ == events_.size()) events_.emplace_back();
    events_[marks_++].Record(stream_);
  }

  // NVTX ranges (header-only NVTX 3: nothing happens unless a profiler such as Nsight Systems is attached).
  void Range(const char* name) override {
    if (range_open_) nvtxRangePop();
    range_open_ = name != nullptr;
    if (range_open_) nvtxRangePushA(name);
  }

  std::vector<double> Intervals() override {
    const size_t marks = marks_;
    marks_ = 0;
    std::vector<double> intervals;
    if (marks == 1) events_[0].Synchronize();
    for (size_t i = 1; i < marks; ++i) intervals.push_back(Event::ElapsedSeconds(events_[i - 1], events_[i]));
    return intervals;
  }

 private:
  cudaStream_t stream_;
  std::vector<Event> events_;
  size_t marks_ = 0;
  bool range_open_ = false;
};

}  // namespace tb::cuda_model
