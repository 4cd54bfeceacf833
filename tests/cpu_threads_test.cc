// The CPU reference on several threads (models/cpu_kernels.h's contract): every layer but the Matmuls gives one
// thread's bits at 2, 3 and 4 threads; a whole training step (forward, backward, AdamW, the next forward) gives the
// same bits on every run at a given thread count, and agrees to rounding across thread counts. And the pool under it
// (models/cpu_parallel.h): every index once, workers numbered from the caller's 0, errors rethrown, nested and
// concurrent calls.
#include <gtest/gtest.h>

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpu_kernels.h"
#include "cpu_parallel.h"
#include "model_config.h"
#include "peaks.h"
#include "transformer.h"

namespace tb {
namespace {

// OpenBLAS's thread count, which CpuThreads() reads, set for the test's scope and restored after it.
class ThreadsForTest {
 public:
  explicit ThreadsForTest(int threads) : saved_(CpuThreads()) { openblas_set_num_threads(threads); }
  ~ThreadsForTest() { openblas_set_num_threads(saved_); }
  ThreadsForTest(const ThreadsForTest&) = delete;
  ThreadsForTest& operator=(const ThreadsForTest&) = delete;

 private:
  int saved_;
};

// Shapes large enough that every layer splits into several pieces per thread: 640 rows (not a multiple of the
// pieces), three attention row blocks (64, 64, 32), 128 channels, a vocabulary of 1000.
constexpr int kBatch = 4, kSeq = 160, kChannels = 128, kHeads = 4, kVocab = 1000;
constexpr size_t kRows = static_cast<size_t>(kBatch) * kSeq;

using Named = std::map<std::string, std::vector<float>>;

std::vector<float> Normals(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = normal(rng);
  return values;
}

std::vector<int32_t> Tokens(size_t count, int vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<int32_t> tokens(count);
  for (int32_t& t : tokens) t = token(rng);
  return tokens;
}

// Every layer but the two Matmuls, on random inputs, at `threads` threads; gradients start nonzero, as they
// accumulate.
Named RunLayers(int threads) {
  const ThreadsForTest set(threads);
  std::mt19937 rng(29);
  const size_t c = kChannels, n = kRows;
  const std::vector<int32_t> tokens = Tokens(n, kVocab, rng), targets = Tokens(n, kVocab, rng);
  const std::vector<float> wte = Normals(kVocab * c, rng), wpe = Normals(kSeq * c, rng), x = Normals(n * c, rng),
                           dy = Normals(n * c, rng), weight = Normals(c, rng), bias = Normals(c, rng),
                           qkv = Normals(n * 3 * c, rng), hidden = Normals(n * 4 * c, rng);
  Named out;
  out["encoded"].resize(n * c);
  cpu::EncoderForward(out["encoded"].data(), tokens.data(), wte.data(), wpe.data(), kBatch, kSeq, kChannels);
  out["wte_grad"] = Normals(kVocab * c, rng), out["wpe_grad"] = Normals(kSeq * c, rng);
  cpu::EncoderBackward(out["wte_grad"].data(), out["wpe_grad"].data(), dy.data(), tokens.data(), kBatch, kSeq, kChannels);
  out["ln"].resize(n * c), out["mean"].resize(n), out["rstd"].resize(n);
  cpu::LayerNormForward(out["ln"].data(), out["mean"].data(), out["rstd"].data(), x.data(), weight.data(), bias.data(),
                        n, kChannels);
  out["ln_in_grad"] = Normals(n * c, rng), out["ln_weight_grad"] = Normals(c, rng), out["ln_bias_grad"] = Normals(c, rng);
  cpu::LayerNormBackward(out["ln_in_grad"].data(), out["ln_weight_grad"].data(), out["ln_bias_grad"].data(), dy.data(),
                         x.data(), weight.data(), out["mean"].data(), out["rstd"].data(), n, kChannels);
  std::vector<float> scratch(2 * static_cast<size_t>(cpu::kAttentionBlockRows) * kSeq);
  out["attention"].resize(n * c), out["lse"].resize(static_cast<size_t>(kBatch) * kHeads * kSeq);
  cpu::AttentionForward(out["attention"].data(), out["lse"].data(), scratch.data(), qkv.data(), kBatch, kSeq, kChannels,
                        kHeads);
  out["qkv_grad"].resize(n * 3 * c);
  cpu::AttentionBackward(out["qkv_grad"].data(), scratch.data(), dy.data(), qkv.data(), out["lse"].data(), kBatch, kSeq,
                         kChannels, kHeads);
  out["gelu"].resize(hidden.size()), out["gelu_grad"] = Normals(hidden.size(), rng);
  cpu::GeluForward(out["gelu"].data(), hidden.data(), hidden.size());
  cpu::GeluBackward(out["gelu_grad"].data(), hidden.data(), hidden.size());
  out["logits"] = Normals(n * kVocab, rng);
  out["loss"] = {cpu::CrossEntropyForward(out["logits"].data(), targets.data(), n, kVocab)};
  cpu::CrossEntropyBackward(out["logits"].data(), targets.data(), n, kVocab);
  out["params"] = out["wte_grad"], out["m"] = Normals(hidden.size(), rng), out["v"] = Normals(hidden.size(), rng);
  for (float& v : out["v"]) v *= v;
  cpu::AdamWUpdate(out["params"].data(), out["gelu_grad"].data(), out["m"].data(), out["v"].data(), out["params"].size(),
                   AdamWConfig{}, 0.1f, 3);
  return out;
}

// Bitwise, element by element, naming the first element that differs.
void ExpectSameBits(const std::vector<float>& expected, const std::vector<float>& actual, const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(expected[i]), std::bit_cast<uint32_t>(actual[i]))
        << what << " element " << i << ": " << expected[i] << " vs " << actual[i];
  }
}

TEST(CpuThreads, LayersButTheMatmulsGiveOneThreadsBitsAtAnyThreadCount) {
  const Named one = RunLayers(1);
  for (int threads : {2, 3, 4}) {
    const Named many = RunLayers(threads);
    for (const auto& [name, values] : one) ExpectSameBits(values, many.at(name), name + ", " + std::to_string(threads) + " threads");
  }
}

// One training step of the whole model: forward, backward, AdamW, and the next forward's loss.
struct StepBits {
  float loss = 0, next_loss = 0;
  std::vector<float> gradients, parameters;
};

StepBits RunStep(int threads) {
  const ThreadsForTest set(threads);
  const ModelConfig config = CustomModel(2, kChannels, kHeads, kVocab, kSeq);
  auto model = MakeCpuTransformer(config, 19);
  std::mt19937 rng(23);
  const std::vector<int32_t> inputs = Tokens(kRows, kVocab, rng), targets = Tokens(kRows, kVocab, rng);
  const size_t count = model->layout().back().offset + model->layout().back().count;
  StepBits bits;
  bits.loss = model->ForwardBatch(inputs.data(), targets.data(), kBatch, kSeq);
  model->Backward({});
  bits.gradients.assign(model->gradients(), model->gradients() + count);
  model->AdamWStep(AdamWConfig{}, 1);
  bits.parameters.assign(model->parameters(), model->parameters() + count);
  bits.next_loss = model->ForwardBatch(inputs.data(), targets.data(), kBatch, kSeq);
  return bits;
}

TEST(CpuThreads, TrainingStepIsTheSameBitsEveryRunAtAGivenThreadCount) {
  for (int threads : {1, 2, 3}) {
    const StepBits first = RunStep(threads), second = RunStep(threads);
    const std::string at = ", " + std::to_string(threads) + " threads";
    EXPECT_EQ(std::bit_cast<uint32_t>(first.loss), std::bit_cast<uint32_t>(second.loss)) << at;
    ExpectSameBits(first.gradients, second.gradients, "gradient" + at);
    ExpectSameBits(first.parameters, second.parameters, "parameter after AdamW" + at);
    EXPECT_EQ(std::bit_cast<uint32_t>(first.next_loss), std::bit_cast<uint32_t>(second.next_loss)) << at;
  }
}

// Across thread counts only the Matmuls' GEMMs differ (split by the thread count), by rounding: each gradient within 1e-5 of its tensor's largest
// magnitude (the largest difference measured: 9e-7 of it, LayerNorm biases), the losses within 1e-6 relative.
TEST(CpuThreads, TrainingStepAgreesToRoundingAcrossThreadCounts) {
  const StepBits one = RunStep(1);
  const ModelConfig config = CustomModel(2, kChannels, kHeads, kVocab, kSeq);
  const std::vector<TensorSlot> layout = MakeLayout(config);
  for (int threads : {2, 3, 4}) {
    const StepBits many = RunStep(threads);
    SCOPED_TRACE(std::to_string(threads) + " threads");
    EXPECT_NEAR(many.loss, one.loss, 1e-6 * one.loss);
    EXPECT_NEAR(many.next_loss, one.next_loss, 1e-6 * one.next_loss);
    for (const TensorSlot& slot : layout) {
      const auto begin = one.gradients.begin() + slot.offset, end = begin + slot.count;
      float largest = 0;
      for (auto it = begin; it != end; ++it) largest = std::max(largest, std::abs(*it));
      for (size_t i = 0; i < slot.count; ++i) {
        ASSERT_NEAR(many.gradients[slot.offset + i], one.gradients[slot.offset + i], 1e-5f * largest)
            << slot.name << " element " << i;
      }
    }
  }
}

TEST(ParallelFor, EveryIndexOnceOnWorkersNumberedFromTheCaller) {
  for (int threads : {1, 2, 3, 5}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}}) {
      std::vector<std::atomic<int>> calls(count);
      std::atomic<int> bad_worker{0};
      ParallelFor(count, threads, [&](size_t i, int worker) {
        ++calls[i];
        if (worker < 0 || worker >= threads) ++bad_worker;
      });
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(calls[i], 1) << "index " << i << " of " << count << ", " << threads;
      EXPECT_EQ(bad_worker, 0) << count << " indices on " << threads << " threads";
    }
  }
}

TEST(ParallelFor, RethrowsTheWorkersErrorAndStaysUsable) {
  EXPECT_THROW(ParallelFor(100, 3,
                           [](size_t i, int) {
                             if (i == 57) throw std::runtime_error("index 57");
                           }),
               std::runtime_error);
  std::atomic<size_t> sum{0};
  ParallelFor(100, 3, [&](size_t i, int) { sum += i; });
  EXPECT_EQ(sum, 4950u);
}

TEST(ParallelFor, NestedAndConcurrentCallsFinish) {
  std::atomic<size_t> inner{0};
  ParallelFor(8, 2, [&](size_t, int) { ParallelFor(10, 2, [&](size_t, int) { ++inner; }); });
  EXPECT_EQ(inner, 80u);
  std::atomic<size_t> total{0};
  auto many = [&] {
    for (int round = 0; round < 200; ++round) ParallelFor(16, 2, [&](size_t, int) { ++total; });
  };
  std::thread other(many);
  many();
  other.join();
  EXPECT_EQ(total, 2u * 200 * 16);
}

}  // namespace
}  // namespace tb
