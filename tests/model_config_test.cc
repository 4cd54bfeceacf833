// Model presets and accounting: parameter counts, FLOPs per token and the memory estimate, each checked against
// values worked out here from the architecture rather than through the code under test.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "error.h"
#include "model_config.h"

namespace tb {
namespace {

// Closed form for the GPT-2 block with mlp_ratio 4: per layer 12*C^2 weights and 13*C biases and LayerNorm
// parameters (qkv 3C, proj C, fc 4C, fc_proj C, two LayerNorms 4C); embeddings (V + T)*C; final LayerNorm 2C.
int64_t ExpectedTotal(int64_t layers, int64_t c, int64_t vocab, int64_t seq) {
  return layers * (12 * c * c + 13 * c) + (vocab + seq + 2) * c;
}

// Runs `make` and returns the InputError message it throws ("" when it throws nothing).
template <typename Make>
std::string InputErrorOf(Make make) {
  try {
    make();
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), ExitCode::kInput);
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return "";
}

TEST(ModelConfig, Gpt2SmallHasTheKnownParameterCount) {
  ParameterCount count = CountParameters(FindPreset("gpt2-124m"));
  EXPECT_EQ(count.token_embedding, 50257 * 768);
  EXPECT_EQ(count.position_embedding, 1024 * 768);
  EXPECT_EQ(count.per_layer, 7087872);  // 12 * 768^2 + 13 * 768
  EXPECT_EQ(count.final_norm, 1536);
  EXPECT_EQ(count.total, 124439808);
  // Four matrices per layer (3C^2 + C^2 + 4C^2 + 4C^2) and the tied LM head; no biases, norms or wpe.
  EXPECT_EQ(count.matmul, 12 * 12 * 768 * 768 + 50257 * 768);
  EXPECT_EQ(count.matmul, 123532032);
}

TEST(ModelConfig, PresetsHaveRealShapes) {
  struct Shape {
    std::string name;
    int layers, d_model, heads;
  };
  const std::vector<Shape> expected = {
      {"gpt2-124m", 12, 768, 12}, {"gpt2-350m", 24, 1024, 16}, {"gpt2-774m", 36, 1280, 20},
      {"gpt2-1.5b", 48, 1600, 25}, {"gpt-2.7b", 32, 2560, 32}, {"gpt-6.7b", 32, 4096, 32},
      {"gpt-13b", 40, 5120, 40},  {"gpt-70b", 80, 8192, 64},
  };
  std::vector<std::string> names = {"tiny"};  // the CPU demo shape comes first, then the GPT shapes, then MoE
  for (const Shape& shape : expected) names.push_back(shape.name);
  for (const char* moe : {"moe-tiny", "moe-mixtral-8x7b", "moe-deepseek-v3"}) names.push_back(moe);
  EXPECT_EQ(PresetNames(), names);

  int64_t previous_total = 0;
  for (const Shape& shape : expected) {
    SCOPED_TRACE(shape.name);
    ModelConfig config = FindPreset(shape.name);
    EXPECT_EQ(config.name, shape.name);
    EXPECT_EQ(config.layers, shape.layers);
    EXPECT_EQ(config.d_model, shape.d_model);
    EXPECT_EQ(config.heads, shape.heads);
    EXPECT_EQ(config.vocab, 50257);
    EXPECT_EQ(config.vocab_padded, 50304);
    EXPECT_EQ(config.seq, 1024);
    EXPECT_EQ(config.mlp_ratio, 4);
    EXPECT_EQ(config.preset_layers, shape.layers);
    EXPECT_EQ(config.scaled, "");
    EXPECT_FALSE(config.moe.has_value());
    EXPECT_NO_THROW(ValidateModel(config));
    int64_t total = CountParameters(config).total;
    EXPECT_EQ(total, ExpectedTotal(shape.layers, shape.d_model, 50257, 1024));
    EXPECT_GT(total, previous_total);  // PresetNames is in size order
    previous_total = total;
  }
}

TEST(ModelConfig, Gpt2XlCountsAbout1p56Billion) {
  const int64_t c = 1600;
  const int64_t block = 2 * c                // ln1
                        + 3 * c * c + 3 * c  // qkv
                        + c * c + c          // attention projection
                        + 2 * c              // ln2
                        + 4 * c * c + 4 * c  // fc
                        + 4 * c * c + c;     // fc projection
  const int64_t expected = 50257 * c + 1024 * c + 48 * block + 2 * c;
  EXPECT_EQ(expected, 1557611200);
  ParameterCount count = CountParameters(FindPreset("gpt2-1.5b"));
  EXPECT_EQ(count.per_layer, block);
  EXPECT_EQ(count.total, expected);
  EXPECT_NEAR(static_cast<double>(count.total), 1.56e9, 0.005e9);
}

TEST(ModelConfig, FlopsPerTokenFollowTheDesignConvention) {
  const ModelConfig gpt2 = FindPreset("gpt2-124m");
  const double n_matmul = 12.0 * (3 * 768.0 * 768 + 768.0 * 768 + 4 * 768.0 * 768 + 4 * 768.0 * 768) + 50257.0 * 768;
  const double expected = 6 * n_matmul + 6 * 12.0 * 1024 * 768;
  EXPECT_DOUBLE_EQ(expected, 797815296.0);
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(gpt2, 1024), expected);
  // Only the attention term depends on the sequence length.
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(gpt2, 1024) - ModelFlopsPerToken(gpt2, 512), 6 * 12.0 * 512 * 768);
}

TEST(ModelConfig, WithLayersKeepsPerLayerShapesAndSaysWhatWasScaled) {
  const ModelConfig full = FindPreset("gpt-13b");
  const ModelConfig scaled = WithLayers(full, 4);
  EXPECT_EQ(scaled.layers, 4);
  EXPECT_EQ(scaled.preset_layers, 40);
  EXPECT_EQ(scaled.scaled, "4 of gpt-13b's 40 layers");
  EXPECT_EQ(scaled.name, "gpt-13b");
  EXPECT_EQ(scaled.d_model, full.d_model);
  EXPECT_EQ(scaled.heads, full.heads);

  ParameterCount full_count = CountParameters(full);
  ParameterCount scaled_count = CountParameters(scaled);
  EXPECT_EQ(scaled_count.per_layer, full_count.per_layer);
  EXPECT_EQ(scaled_count.token_embedding, full_count.token_embedding);
  EXPECT_EQ(full_count.total - scaled_count.total, 36 * full_count.per_layer);
  EXPECT_EQ(scaled_count.total, ExpectedTotal(4, 5120, 50257, 1024));
  // Per-layer FLOPs stay those of the real model.
  EXPECT_DOUBLE_EQ((ModelFlopsPerToken(full, 1024) - ModelFlopsPerToken(scaled, 1024)) / 36,
                   6 * 12.0 * 5120 * 5120 + 6 * 1024.0 * 5120);

  // Scaling again still refers to the preset; its own layer count scales nothing.
  EXPECT_EQ(WithLayers(scaled, 8).scaled, "8 of gpt-13b's 40 layers");
  EXPECT_EQ(WithLayers(scaled, 40).scaled, "");
  EXPECT_EQ(WithLayers(full, 40).scaled, "");
  EXPECT_EQ(InputErrorOf([&] { WithLayers(full, 0); }), "--layers 0 must be at least 1");
  EXPECT_EQ(InputErrorOf([&] { WithLayers(full, -3); }), "--layers -3 must be at least 1");
}

TEST(ModelConfig, UnknownPresetListsTheAcceptedNames) {
  EXPECT_EQ(InputErrorOf([] { FindPreset("gpt3"); }),
            "unknown model 'gpt3' for --model (accepted: tiny, gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1.5b, gpt-2.7b, "
            "gpt-6.7b, gpt-13b, gpt-70b, moe-tiny, moe-mixtral-8x7b, moe-deepseek-v3)");
  EXPECT_THROW(FindPreset("GPT2-124M"), InputError);
  EXPECT_THROW(FindPreset(""), InputError);
}

TEST(ModelConfig, CustomShapes) {
  ModelConfig config = CustomModel(2, 64, 4, 1000, 32);
  EXPECT_EQ(config.name, "custom");
  EXPECT_EQ(config.layers, 2);
  EXPECT_EQ(config.d_model, 64);
  EXPECT_EQ(config.heads, 4);
  EXPECT_EQ(config.head_dim(), 16);
  EXPECT_EQ(config.vocab, 1000);
  EXPECT_EQ(config.vocab_padded, 1024);
  EXPECT_EQ(config.seq, 32);
  EXPECT_EQ(config.mlp_ratio, 4);
  EXPECT_EQ(config.preset_layers, 2);
  EXPECT_EQ(config.scaled, "");
  EXPECT_EQ(CountParameters(config).total, ExpectedTotal(2, 64, 1000, 32));
  EXPECT_EQ(CustomModel(1, 2, 1, 2, 1).vocab_padded, 128);
  EXPECT_EQ(CustomModel(1, 2, 1, 128, 1).vocab_padded, 128);
  EXPECT_EQ(CustomModel(1, 2, 1, 129, 1).vocab_padded, 256);
}

TEST(ModelConfig, ValidationNamesTheField) {
  EXPECT_EQ(InputErrorOf([] { CustomModel(0, 64, 4, 1000, 32); }), "--layers 0 must be at least 1");
  EXPECT_EQ(InputErrorOf([] { CustomModel(2, -1, 4, 1000, 32); }), "--d-model -1 must be at least 1");
  EXPECT_EQ(InputErrorOf([] { CustomModel(2, 64, 0, 1000, 32); }), "--heads 0 must be at least 1");
  EXPECT_EQ(InputErrorOf([] { CustomModel(2, 64, 4, 1000, 0); }), "--seq 0 must be at least 1");
  EXPECT_EQ(InputErrorOf([] { CustomModel(2, 64, 4, 1, 32); }),
            "--vocab 1 must be at least 2 (a loss needs two tokens)");
  EXPECT_EQ(InputErrorOf([] { CustomModel(2, 64, 4, -5, 32); }),
            "--vocab -5 must be at least 2 (a loss needs two tokens)");
  EXPECT_EQ(InputErrorOf([] { CustomModel(2, 64, 4, INT_MAX, 32); }),
            "--vocab 2147483647 is too large (at most 2147483520)");
  EXPECT_EQ(CustomModel(1, 2, 1, 2147483520, 1).vocab_padded, 2147483520);
  EXPECT_EQ(InputErrorOf([] { CustomModel(2, 100, 3, 1000, 32); }), "--d-model 100 is not divisible by --heads 3");
  EXPECT_EQ(InputErrorOf([] { CustomModel(2, 30, 2, 1000, 32); }),
            "head dimension 15 (--d-model 30 / --heads 2) must be even");
  EXPECT_EQ(InputErrorOf([] { CustomModel(1000, 1 << 20, 16, 50257, 1024); }),
            "--layers 1000, --d-model 1048576, --vocab 50257 and --seq 1024 give more than 1e15 parameters");
  EXPECT_THROW(WithLayers(FindPreset("gpt-70b"), INT_MAX), InputError);

  // Fields the flags do not set directly are still checked on configs built by hand.
  ModelConfig config = FindPreset("gpt2-124m");
  config.vocab_padded = 50257;
  EXPECT_EQ(InputErrorOf([&] { ValidateModel(config); }),
            "vocab_padded 50257 must be a multiple of 128 no smaller than --vocab 50257");
  config.vocab_padded = 128;
  EXPECT_THROW(ValidateModel(config), InputError);
  config = FindPreset("gpt2-124m");
  config.mlp_ratio = 0;
  EXPECT_EQ(InputErrorOf([&] { ValidateModel(config); }), "mlp_ratio 0 must be at least 1");
  EXPECT_THROW(CountParameters(config), InputError);
}

TEST(ModelConfig, RunShapeMustFitTheModel) {
  const ModelConfig gpt2 = FindPreset("gpt2-124m");
  EXPECT_EQ(InputErrorOf([&] { ModelFlopsPerToken(gpt2, 2048); }),
            "sequence length 2048 is outside 1..1024, the positions of model 'gpt2-124m'");
  EXPECT_THROW(ModelFlopsPerToken(gpt2, 0), InputError);
  EXPECT_EQ(InputErrorOf([&] { EstimateMemory(gpt2, 0, 1024, true); }), "micro-batch 0 must be at least 1");
  EXPECT_THROW(EstimateMemory(gpt2, 1, 1025, true), InputError);
}

TEST(ModelConfig, TinyPresetIsASmallCpuShape) {
  const ModelConfig tiny = FindPreset("tiny");
  EXPECT_EQ(tiny.layers, 2);
  EXPECT_EQ(tiny.d_model, 128);
  EXPECT_EQ(tiny.heads, 4);
  EXPECT_EQ(tiny.vocab, 4096);
  EXPECT_EQ(tiny.vocab_padded, 4096);
  EXPECT_EQ(tiny.seq, 256);
  EXPECT_EQ(CountParameters(tiny).total, ExpectedTotal(2, 128, 4096, 256));
}

TEST(MemoryEstimate, SixteenBytesPerParameterBeforeActivations) {
  for (const std::string& name : PresetNames()) {
    SCOPED_TRACE(name);
    const ModelConfig config = FindPreset(name);
    if (config.moe) continue;  // refused (MoeModelsAreRefusedWhereOnlyDenseIsBuilt)
    // The flat buffers hold the padded embedding table (Vp rows, not V).
    const double allocated = static_cast<double>(CountParameters(config).total) +
                             static_cast<double>(config.vocab_padded - config.vocab) * config.d_model;
    const int seq = config.seq;
    const MemoryEstimate bf16 = EstimateMemory(config, 1, seq, true);
    EXPECT_DOUBLE_EQ(bf16.weights_bytes, 2 * allocated);
    EXPECT_DOUBLE_EQ(bf16.gradients_bytes, 2 * allocated);
    EXPECT_DOUBLE_EQ(bf16.optimizer_bytes, 12 * allocated);  // fp32 master, m, v
    const MemoryEstimate fp32 = EstimateMemory(config, 1, seq, false);
    EXPECT_DOUBLE_EQ(fp32.weights_bytes, 4 * allocated);
    EXPECT_DOUBLE_EQ(fp32.gradients_bytes, 4 * allocated);
    EXPECT_DOUBLE_EQ(fp32.optimizer_bytes, 8 * allocated);  // m, v; the weights are the master copy
    EXPECT_DOUBLE_EQ(fp32.weights_bytes + fp32.gradients_bytes + fp32.optimizer_bytes, 16 * allocated);
    EXPECT_LT(bf16.activations_bytes, fp32.activations_bytes);
    EXPECT_DOUBLE_EQ(bf16.total_bytes(), 16 * allocated + bf16.activations_bytes);
  }
}

TEST(MemoryEstimate, MatchesZeroPaperMixedPrecisionAdam) {
  // ZeRO (Rajbhandari et al. 2020): mixed-precision Adam holds 16 bytes per parameter, 7.5B -> 120 GB. A
  // 23-layer model of gpt-13b's width with an already aligned vocabulary has 7,499,514,880 parameters.
  const ModelConfig config = CustomModel(23, 5120, 40, 50304, 1024);
  const int64_t total = CountParameters(config).total;
  EXPECT_EQ(total, ExpectedTotal(23, 5120, 50304, 1024));
  EXPECT_NEAR(static_cast<double>(total), 7.5e9, 1e6);
  const MemoryEstimate estimate = EstimateMemory(config, 1, 1024, true);
  const double state = estimate.weights_bytes + estimate.gradients_bytes + estimate.optimizer_bytes;
  EXPECT_DOUBLE_EQ(state, 16.0 * static_cast<double>(total));
  EXPECT_NEAR(state, 120e9, 0.02e9);
}

TEST(MemoryEstimate, ActivationsFollowTheDocumentedFormula) {
  // L=2, C=8, H=2, V=10 (Vp=128), T=4, one sequence. Per layer and token: 16*C elements (LayerNorm inputs 2C,
  // ln1 out C, qkv 3C, attention out C, ln2 out C, fc out and GELU out 2*4C) plus H*T probabilities, plus four
  // fp32 LayerNorm statistics. After the last layer: 2C elements, two fp32 statistics, Vp fp32 logits and one
  // fp32 loss.
  const ModelConfig config = CustomModel(2, 8, 2, 10, 4);
  const double bf16_layer = 16 * 8 * 2 + 2 * 4 * 2 + 4 * 4;    // 288
  const double bf16_final = 2 * 8 * 2 + 2 * 4 + 128 * 4 + 4;   // 556
  EXPECT_DOUBLE_EQ(EstimateMemory(config, 1, 4, true).activations_bytes, 4 * (2 * bf16_layer + bf16_final));
  const double fp32_layer = 16 * 8 * 4 + 2 * 4 * 4 + 4 * 4;    // 560
  const double fp32_final = 2 * 8 * 4 + 2 * 4 + 128 * 4 + 4;   // 588
  EXPECT_DOUBLE_EQ(EstimateMemory(config, 1, 4, false).activations_bytes, 4 * (2 * fp32_layer + fp32_final));
  // A shorter sequence than the model's maximum: fewer tokens, and shorter probability rows.
  const double short_layer = 16 * 8 * 2 + 2 * 2 * 2 + 4 * 4;
  EXPECT_DOUBLE_EQ(EstimateMemory(config, 1, 2, true).activations_bytes, 2 * (2 * short_layer + bf16_final));
}

TEST(MemoryEstimate, TensorParallelSplitsWhatMegatronSplits) {
  // The same model over T = 2: per layer and token the residual stream (2C), ln1 and ln2 outputs (2C) and the four
  // statistics stay whole; qkv (3C), the attention output (C), fc out and GELU out (2*4C) and the H*T probabilities
  // halve. After the last layer the Vp logits halve and the rest stays.
  const ModelConfig config = CustomModel(2, 8, 2, 10, 4);
  const double whole_layer = 4 * 8 * 2 + 4 * 4;                     // 80
  const double split_layer = (12 * 8 * 2 + 2 * 4 * 2) / 2.0;        // 104
  const double final_token = 2 * 8 * 2 + 2 * 4 + 128 * 4 / 2.0 + 4;  // 300
  const MemoryEstimate t2 = EstimateMemory(config, 1, 4, true, 2);
  EXPECT_DOUBLE_EQ(t2.activations_bytes, 4 * (2 * (whole_layer + split_layer) + final_token));
  const MemoryEstimate t1 = EstimateMemory(config, 1, 4, true, 1);
  EXPECT_DOUBLE_EQ(t1.activations_bytes, EstimateMemory(config, 1, 4, true).activations_bytes);
  EXPECT_DOUBLE_EQ(t2.total_bytes() - t2.activations_bytes, t1.total_bytes() - t1.activations_bytes);  // states whole
  EXPECT_EQ(InputErrorOf([&] { EstimateMemory(config, 1, 4, true, 0); }), "tensor parallel size must be at least 1, got 0");
}

TEST(MemoryEstimate, ActivationsGrowLinearlyInMicroBatch) {
  const ModelConfig config = WithLayers(FindPreset("gpt-6.7b"), 2);
  const MemoryEstimate one = EstimateMemory(config, 1, 1024, true);
  const MemoryEstimate two = EstimateMemory(config, 2, 1024, true);
  const MemoryEstimate eight = EstimateMemory(config, 8, 1024, true);
  EXPECT_GT(one.activations_bytes, 0);
  EXPECT_DOUBLE_EQ(two.activations_bytes, 2 * one.activations_bytes);
  EXPECT_DOUBLE_EQ(eight.activations_bytes, 8 * one.activations_bytes);
  EXPECT_DOUBLE_EQ(eight.weights_bytes + eight.gradients_bytes + eight.optimizer_bytes,
                   one.weights_bytes + one.gradients_bytes + one.optimizer_bytes);
  EXPECT_DOUBLE_EQ(eight.total_bytes() - one.total_bytes(), 7 * one.activations_bytes);
}

// --- mixture of experts ------------------------------------------------------------------------------------

// Closed forms for our MoE block on C channels: ln1, qkv, attention projection, ln2 (4C² + 8C), a router (E, C)
// without bias, and experts that are GELU MLPs of width F (fc (F, C) + F, proj (C, F) + C).
int64_t AttentionPart(int64_t c) { return 4 * c * c + 8 * c; }
int64_t Expert(int64_t c, int64_t f) { return 2 * c * f + f + c; }
int64_t MoeBlock(int64_t c, int64_t e, int64_t f) { return AttentionPart(c) + e * c + e * Expert(c, f); }

TEST(MoeConfig, MoeTinyCountsByHand) {
  const ModelConfig config = FindPreset("moe-tiny");
  ASSERT_TRUE(config.moe.has_value());
  EXPECT_EQ(config.layers, 2);
  EXPECT_EQ(config.d_model, 128);
  EXPECT_EQ(config.heads, 4);
  EXPECT_EQ(config.vocab, 4096);
  EXPECT_EQ(config.seq, 256);
  EXPECT_EQ(config.moe->experts, 4);
  EXPECT_EQ(config.moe->top_k, 2);
  EXPECT_EQ(config.moe->expert_ffn, 512);
  EXPECT_EQ(config.moe->every, 1);
  EXPECT_DOUBLE_EQ(config.moe->capacity_factor, 1.25);
  EXPECT_DOUBLE_EQ(config.moe->aux_loss_coef, 0.01);

  // Per MoE block: attention part 4·128² + 8·128 = 66,560; router 4·128 = 512; each expert
  // 2·128·512 + 512 + 128 = 131,712. Outside the blocks: wte 4096·128, wpe 256·128, lnf 256 = 557,312.
  const ParameterCount count = CountParameters(config);
  EXPECT_EQ(count.per_moe_layer, 66560 + 512 + 4 * 131712);
  EXPECT_EQ(count.per_moe_layer, 593920);
  EXPECT_EQ(count.moe_layers, 2);
  EXPECT_EQ(count.total, 557312 + 2 * 593920);
  EXPECT_EQ(count.total, 1745152);
  EXPECT_EQ(count.active, 557312 + 2 * (66560 + 512 + 2 * 131712));
  EXPECT_EQ(count.active, 1218304);
  // Matmul weights: the tied LM head 4096·128, per block 4·128² attention, the router, 2·128·512 per expert.
  EXPECT_EQ(count.matmul, 4096 * 128 + 2 * (65536 + 512 + 4 * 131072));
  EXPECT_EQ(count.active_matmul, 4096 * 128 + 2 * (65536 + 512 + 2 * 131072));
  EXPECT_EQ(count.active_matmul, 1180672);
  // FLOPs by active parameters: 6 · 1,180,672 + 6 · 2 · 256 · 128 at T = 256.
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(config, 256), 6.0 * 1180672 + 6.0 * 2 * 256 * 128);
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(config, 256), 7477248.0);
}

TEST(MoeConfig, DenseModelsHaveActiveEqualToTotal) {
  for (const char* name : {"tiny", "gpt2-124m", "gpt-70b"}) {
    SCOPED_TRACE(name);
    const ParameterCount count = CountParameters(FindPreset(name));
    EXPECT_EQ(count.active, count.total);
    EXPECT_EQ(count.active_matmul, count.matmul);
    EXPECT_EQ(count.moe_layers, 0);
    EXPECT_EQ(count.per_moe_layer, 0);
  }
}

// Mixtral 8x7B publishes 46.7B parameters in total and 12.9B active per token (Jiang et al. 2024). Our preset keeps its
// widths but builds our block: 2-matrix GELU experts with biases instead of 3-matrix SwiGLU, full multi-head attention
// with biases instead of 8 grouped KV heads, LayerNorm with biases instead of RMSNorm, and GPT-2's tied 50257-token
// vocabulary with learned positions instead of Mixtral's untied 32000 and RoPE. Ours: 32,429,125,632 in total and
// 9,877,008,384 active. Undoing exactly those differences gives Mixtral's own count, 46,702,792,704.
TEST(MoeConfig, MixtralClassAgainstThePublishedCount) {
  const ModelConfig config = FindPreset("moe-mixtral-8x7b");
  const int64_t c = 4096, f = 14336, e = 8, k = 2, layers = 32;
  const ParameterCount count = CountParameters(config);
  EXPECT_EQ(count.per_moe_layer, MoeBlock(c, e, f));
  EXPECT_EQ(count.total, 51281 * c + 2 * c + layers * MoeBlock(c, e, f));
  EXPECT_EQ(count.total, 32429125632);
  EXPECT_EQ(count.active, 51281 * c + 2 * c + layers * (AttentionPart(c) + e * c + k * Expert(c, f)));
  EXPECT_EQ(count.active, 9877008384);

  const int64_t third_matrix = c * f - f - c;  // per expert: SwiGLU's third matrix, no biases
  const int64_t gqa_attention = c * (c + 1024 + 1024) + c * c;  // wq, wk, wv (8 KV heads of 128), wo; no biases
  const int64_t attention_change = gqa_attention + 2 * c - AttentionPart(c);  // two RMSNorm gains
  const int64_t outside_change = 2 * 32000 * c + c - 51281 * c - 2 * c;  // untied vocabulary, no wpe, RMSNorm gain
  EXPECT_EQ(count.total + layers * (e * third_matrix + attention_change) + outside_change, 46702792704);
  EXPECT_EQ(count.active + layers * (k * third_matrix + attention_change) + outside_change, 12879925248);
}

// DeepSeek-V3 publishes 671B in total and 37B active (DeepSeek-AI 2024). Our preset has its widths (61 layers of 7168,
// 128 heads, 256 routed experts of 2048, top-8) in our block, in every layer: it leaves out the 3 dense first blocks,
// the shared expert, MLA attention, SwiGLU's third matrix and the multi-token prediction module. Ours:
// 471,651,480,576 in total and 27,352,044,544 active, about 2/3 and 3/4 of the published counts; SwiGLU's third
// matrix alone (61·256·7168·2048 = 229.3B) brings the total to 700.9B, within 5% of 671B.
TEST(MoeConfig, DeepSeekV3ClassAgainstThePublishedCount) {
  const ModelConfig config = FindPreset("moe-deepseek-v3");
  const int64_t c = 7168, f = 2048, e = 256, k = 8, layers = 61;
  EXPECT_EQ(config.head_dim(), 56);
  const ParameterCount count = CountParameters(config);
  EXPECT_EQ(count.total, 51281 * c + 2 * c + layers * MoeBlock(c, e, f));
  EXPECT_EQ(count.total, 471651480576);
  EXPECT_EQ(count.active, 51281 * c + 2 * c + layers * (AttentionPart(c) + e * c + k * Expert(c, f)));
  EXPECT_EQ(count.active, 27352044544);
  const double with_third_matrix = static_cast<double>(count.total) + static_cast<double>(layers * e * c * f);
  EXPECT_NEAR(with_third_matrix, 671e9, 0.05 * 671e9);
  EXPECT_NEAR(static_cast<double>(count.active), 37e9, 0.3 * 37e9);
  // MFU counts active parameters: 6 · N_active_matmul + 6·L·T·C, far below the 6 · N_matmul of every expert.
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(config, 1024),
                   6.0 * static_cast<double>(count.active_matmul) + 6.0 * layers * 1024 * c);
  EXPECT_LT(ModelFlopsPerToken(config, 1024), 0.1 * 6.0 * static_cast<double>(count.matmul));
}

TEST(MoeConfig, WithLayersKeepsTheExpertShapes) {
  const ModelConfig full = FindPreset("moe-mixtral-8x7b");
  const ModelConfig scaled = WithLayers(full, 2);
  EXPECT_EQ(scaled.scaled, "2 of moe-mixtral-8x7b's 32 layers");
  ASSERT_TRUE(scaled.moe.has_value());
  EXPECT_EQ(scaled.moe->experts, 8);
  EXPECT_EQ(scaled.moe->expert_ffn, 14336);
  const ParameterCount full_count = CountParameters(full);
  const ParameterCount scaled_count = CountParameters(scaled);
  EXPECT_EQ(scaled_count.moe_layers, 2);
  EXPECT_EQ(scaled_count.per_moe_layer, full_count.per_moe_layer);
  EXPECT_EQ(full_count.total - scaled_count.total, 30 * full_count.per_moe_layer);
  EXPECT_EQ(full_count.active - scaled_count.active,
            30 * (AttentionPart(4096) + 8 * 4096 + 2 * Expert(4096, 14336)));
}

TEST(MoeConfig, EveryNthBlockAndTheDefaultExpertWidth) {
  MoeConfig moe;
  moe.experts = 8;
  moe.top_k = 1;
  moe.every = 2;
  const ModelConfig config = WithMoe(FindPreset("gpt2-124m"), moe);
  EXPECT_EQ(config.moe->expert_ffn, 4 * 768);  // 0 asks for the dense MLP's width
  EXPECT_TRUE(IsMoeBlock(config, 0));
  EXPECT_FALSE(IsMoeBlock(config, 1));
  EXPECT_TRUE(IsMoeBlock(config, 10));
  EXPECT_EQ(MoeBlockCount(config), 6);  // blocks 0, 2, 4, 6, 8, 10
  EXPECT_EQ(MoeBlockCount(WithLayers(config, 3)), 2);
  EXPECT_EQ(MoeBlockCount(FindPreset("gpt2-124m")), 0);
  EXPECT_FALSE(IsMoeBlock(FindPreset("gpt2-124m"), 0));

  const int64_t c = 768;
  const ParameterCount dense = CountParameters(FindPreset("gpt2-124m"));
  const ParameterCount count = CountParameters(config);
  EXPECT_EQ(count.per_layer, dense.per_layer);
  EXPECT_EQ(count.per_moe_layer, MoeBlock(c, 8, 4 * c));
  EXPECT_EQ(count.total, dense.total + 6 * (MoeBlock(c, 8, 4 * c) - dense.per_layer));
  // Top-1 with experts of the dense width: a token uses what the dense block has, plus the router.
  EXPECT_EQ(count.active, dense.total + 6 * 8 * c);
  EXPECT_EQ(count.active_matmul, dense.matmul + 6 * 8 * c);
}

TEST(MoeConfig, ValidationNamesTheFlag) {
  const ModelConfig tiny = FindPreset("tiny");
  const auto with = [&](auto change) {
    MoeConfig moe;
    change(moe);
    return InputErrorOf([&] { WithMoe(tiny, moe); });
  };
  EXPECT_EQ(with([](MoeConfig& m) { m.experts = 0; }), "--experts 0 must be at least 1");
  EXPECT_EQ(with([](MoeConfig& m) { m.top_k = 0; }), "--top-k 0 must lie in 1..8 (1 to --experts)");
  EXPECT_EQ(with([](MoeConfig& m) { m.top_k = 9; }), "--top-k 9 must lie in 1..8 (1 to --experts)");
  EXPECT_EQ(with([](MoeConfig& m) { m.expert_ffn = -4; }), "--expert-ffn -4 must be at least 1");
  EXPECT_EQ(with([](MoeConfig& m) { m.every = 0; }), "--moe-every 0 must be at least 1");
  const std::string capacity = " must be a finite number above 0 (at least --experts / --top-k never drops a token)";
  EXPECT_EQ(with([](MoeConfig& m) { m.capacity_factor = 0; }), "--capacity-factor 0" + capacity);
  EXPECT_EQ(with([](MoeConfig& m) { m.capacity_factor = -1.5; }), "--capacity-factor -1.5" + capacity);
  EXPECT_EQ(with([](MoeConfig& m) { m.capacity_factor = std::nan(""); }), "--capacity-factor nan" + capacity);
  EXPECT_EQ(with([](MoeConfig& m) { m.aux_loss_coef = -0.01; }),
            "--aux-loss-coef -0.01 must be a finite number, at least 0");
  MoeConfig edges;
  edges.top_k = edges.experts;
  edges.aux_loss_coef = 0;
  edges.capacity_factor = 1e-3;
  EXPECT_NO_THROW(WithMoe(tiny, edges));
  // Experts count towards the 1e15 limit.
  MoeConfig huge;
  huge.experts = 1 << 20;
  huge.expert_ffn = 1 << 20;
  EXPECT_EQ(InputErrorOf([&] { WithMoe(FindPreset("gpt-70b"), huge); }),
            "--layers 80, --d-model 8192, --vocab 50257 and --seq 1024 with their experts give more than 1e15 "
            "parameters");
}

// The memory estimate of an MoE model: every expert's states on one rank, E/EP of them under expert parallel (the
// rest whole), and an MoE block's activations in place of the MLP's.
TEST(MoeConfig, MemoryEstimateCountsTheExpertsHeld) {
  const ModelConfig config = FindPreset("moe-tiny");
  const ParameterCount count = CountParameters(config);
  const double experts = ExpertParameters(config);
  const MoeConfig& moe = *config.moe;
  EXPECT_DOUBLE_EQ(experts, static_cast<double>(MoeBlockCount(config)) * moe.experts *
                                (2.0 * config.d_model * moe.expert_ffn + moe.expert_ffn + config.d_model));
  const double padding = static_cast<double>(config.vocab_padded - config.vocab) * config.d_model;
  const MemoryEstimate one = EstimateMemory(config, 2, 64, false);
  EXPECT_DOUBLE_EQ(one.weights_bytes, 4.0 * (static_cast<double>(count.total) + padding));
  const MemoryEstimate two = EstimateMemory(config, 2, 64, false, 1, 2);
  EXPECT_DOUBLE_EQ(two.weights_bytes, 4.0 * (static_cast<double>(count.total) + padding - experts / 2));
  EXPECT_DOUBLE_EQ(two.optimizer_bytes, 2 * two.weights_bytes);
  // Expert parallel keeps the rows it sends and gets back as well.
  EXPECT_GT(two.activations_bytes, one.activations_bytes);
  const ActivationBytes bytes = ActivationBytesPerToken(config, 64, false);
  const double f = moe.expert_ffn, c = config.d_model;
  EXPECT_DOUBLE_EQ(bytes.moe_layer - bytes.layer,
                   -2.0 * 4 * config.mlp_ratio * c + 4.0 * moe.experts + moe.top_k * (12.0 + 4 * (2 * c + 2 * f)));
  EXPECT_EQ(InputErrorOf([&] { EstimateMemory(config, 2, 64, false, 1, 3); }),
            "expert parallel 3 does not divide the 4 experts of model 'moe-tiny'");
  EXPECT_THROW(EstimateMemory(FindPreset("tiny"), 2, 64, false, 1, 2), InputError);
}

}  // namespace
}  // namespace tb
