// What the CPU models (the reference, cpu_transformer.cc, and its tensor parallel split, cpu_tp_transformer.cc)
// share: the config, the pipeline stage held and a layout of it, four flat fp32 host buffers (parameters, gradients,
// AdamW m and v), the selected micro-batch slot, and the accessors of the Transformer interface over them.
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
  // Holds `stage` (resolved; the whole model by default) of `layout`: layout() is StageLayout of it. The parameter and
  // gradient buffers hold `buffer_elements`, m and v `moment_elements` (a sharded model's shares), all zero.
  CpuFlatModel(const ModelConfig& config, const std::vector<TensorSlot>& layout, size_t buffer_elements,
               size_t moment_elements, const PipelineStage& stage = {})
      : config_(config),
        stage_(ResolveStage(stage, config)),
        layout_(StageLayout(layout, stage_)),
        elements_(layout_.back().offset + layout_.back().count),
        params_(buffer_elements, 0.0f),
        grads_(buffer_elements, 0.0f),
        m_(moment_elements, 0.0f),
        v_(moment_elements, 0.0f) {}

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
  const PipelineStage& pipeline_stage() const override { return stage_; }
  void SelectMicroBatch(int slot) override { micro_batch_slot_ = CheckedSlot(stage_, slot); }
  // No edges: a model that holds a split stage overrides it.
  StageEdges stage_edges() override { return {}; }

 protected:
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
  PipelineStage stage_;
  std::vector<TensorSlot> layout_;
  size_t elements_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<float> m_;
  std::vector<float> v_;
  float gradient_scale_ = 1.0f;
  int micro_batch_slot_ = 0;  // SelectMicroBatch's

 private:
  GradientWrite write_ = GradientWrite::kOverwrite;
  std::vector<bool> unit_started_;
};

}  // namespace tb
