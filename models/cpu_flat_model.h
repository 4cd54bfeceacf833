// What the CPU models (the reference, cpu_transformer.cc, and its tensor parallel split, cpu_tp_transformer.cc)
// share: the config, the placement (and so the pipeline stage held) and a layout of it, four flat fp32 host buffers
// (parameters, gradients, AdamW m and v), the selected micro-batch slot, and the accessors of the Transformer interface
// over them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "transformer.h"

namespace tb {

class CpuFlatModel : public Transformer {
 public:
  // Placed by `placement` (ResolvePlacement of `layout`, the model's unsplit layout): layout() is StageLayout of
  // `layout`; the parameter and gradient buffers hold the placement's buffer_elements(), m and v its
  // moment_elements(), all zero.
  CpuFlatModel(const ModelConfig& config, const std::vector<TensorSlot>& layout, const ModelPlacement& placement)
      : config_(config),
        placement_(placement),
        layout_(HeldLayout(layout, placement_)),
        elements_(layout_.back().offset + layout_.back().count),
        params_(placement_.buffer_elements(), 0.0f),
        grads_(placement_.buffer_elements(), 0.0f),
        m_(placement_.moment_elements(), 0.0f),
        v_(placement_.moment_elements(), 0.0f),
        flat_access_(MakeFlatUnitAccess(params_.data(), grads_.data(), ParameterUnits(layout_))) {}

  const ModelConfig& config() const override { return config_; }
  std::string backend() const override { return "cpu"; }
  const std::vector<TensorSlot>& layout() const override { return layout_; }
  size_t parameter_elements() const override { return elements_; }
  float* parameters() override { return params_.data(); }
  float* gradients() override { return grads_.data(); }
  float* adam_m() override { return m_.data(); }
  float* adam_v() override { return v_.data(); }
  std::string attention() const override { return "cpu"; }
  std::unique_ptr<PhaseClock> MakePhaseClock() const override { return MakeHostPhaseClock(); }
  ModelStateBytes state_bytes() const override {
    return {4.0 * params_.size(), 4.0 * grads_.size(), 4.0 * (m_.size() + v_.size())};
  }
  void SetGradientScale(float scale) override { gradient_scale_ = scale; }
  const ModelPlacement& placement() const override { return placement_; }
  void SelectMicroBatch(int slot) override { micro_batch_slot_ = CheckedSlot(stage(), slot); }
  // No edges: a model that holds a split stage overrides it.
  StageEdges stage_edges() override { return {}; }

 protected:
  // The pipeline stage held (the whole model by default).
  const PipelineStage& stage() const { return placement_.stage; }
  // Where Forward and Backward read and write whole units: views of the flat buffers, or under FSDP the UnitAccess
  // given to SetUnitAccess.
  UnitAccess& Access() const {
    UnitAccess* access = placement_.fsdp.enabled() ? unit_access() : flat_access_.get();
    if (access == nullptr) throw std::logic_error("an FSDP model stepped before SetUnitAccess");
    return *access;
  }
  // Backward's start: how it treats the gradients the UnitAccess hands out, for `units` units.
  void BeginBackward(GradientWrite write, size_t units) {
    write_ = write;
    unit_started_.assign(units, false);
  }
  // Unit `unit`'s gradients (`elements` floats) from `access` for this backward. The layers accumulate into them, so
  // Backward's kOverwrite is kept by zeroing them at the backward's first call for the unit (the embeddings are asked
  // for twice); the CUDA model writes them instead.
  float* BackwardGradients(UnitAccess& access, size_t unit, size_t elements) {
    float* grads = access.Gradients(unit);
    if (write_ == GradientWrite::kOverwrite && !unit_started_.at(unit)) std::fill(grads, grads + elements, 0.0f);
    unit_started_.at(unit) = true;
    return grads;
  }
  // d loss / d logits (count floats) times the gradient scale, unless it is 1.
  void ScaleLossGradient(float* logits_grad, size_t count) const {
    if (gradient_scale_ == 1.0f) return;
    for (size_t i = 0; i < count; ++i) logits_grad[i] *= gradient_scale_;
  }

  ModelConfig config_;
  const ModelPlacement placement_;  // resolved
  std::vector<TensorSlot> layout_;
  size_t elements_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<float> m_;
  std::vector<float> v_;
  float gradient_scale_ = 1.0f;
  int micro_batch_slot_ = 0;  // SelectMicroBatch's

 private:
  std::unique_ptr<UnitAccess> flat_access_;  // views of params_ and grads_ (without FSDP)
  GradientWrite write_ = GradientWrite::kOverwrite;
  std::vector<bool> unit_started_;
};

}  // namespace tb
