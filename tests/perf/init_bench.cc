// Host-side cost of a model's initial weights: the way the CUDA transformer set them up before (one thread drawing
// the whole normal stream in order into a pageable vector of all P parameters, then one copy of it) against what it
// does now (InitializeParameterRange chunk by chunk into one reused staging buffer, on CpuThreads() threads), in the
// same invocation. The old generator is kept here, as it was, as the raw baseline; every chunk of the new way is
// compared with it bit for bit. The device copy is not timed (no GPU needed): on a GPU host both ways copy the same
// bytes, the new one from pinned memory.
//   [OPENBLAS_NUM_THREADS=N] perf_init_bench [--model NAME] [--layers N] [--chunk-mib MiB]
// (CpuThreads() is OpenBLAS's thread count: all cores unless OPENBLAS_NUM_THREADS says otherwise.)
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>

#include "model_config.h"
#include "peaks.h"
#include "random.h"
#include "transformer.h"

namespace {

// The generator layout.cc used before the stream became jump-ahead: Box–Muller with a spare, in order.
class SequentialNormals {
 public:
  explicit SequentialNormals(uint64_t seed) : state_(seed) {}
  float Next(float stddev) {
    if (has_spare_) {
      has_spare_ = false;
      return static_cast<float>(spare_ * stddev);
    }
    const double u1 = 1.0 - Uniform();
    const double u2 = Uniform();
    const double radius = std::sqrt(-2.0 * std::log(u1));
    constexpr double kTwoPi = 6.283185307179586;
    spare_ = radius * std::sin(kTwoPi * u2);
    has_spare_ = true;
    return static_cast<float>(radius * std::cos(kTwoPi * u2) * stddev);
  }

 private:
  double Uniform() { return static_cast<double>(tb::NextSplitMix64(state_) >> 11) * 0x1.0p-53; }
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// The old InitializeParameters, into a fresh zeroed vector as the CUDA transformer allocated it.
std::vector<float> OldInitialize(const tb::ModelConfig& config, const std::vector<tb::TensorSlot>& layout,
                                 uint64_t seed, size_t elements) {
  std::vector<float> params(elements);
  const float residual_stddev = 0.02f / std::sqrt(2.0f * config.layers);
  SequentialNormals normal(seed);
  for (const tb::TensorSlot& slot : layout) {
    float* p = params.data() + slot.offset;
    if (!slot.decay && slot.name.ends_with(".weight")) {
      std::fill(p, p + slot.count, 1.0f);
    } else if (slot.decay) {
      const size_t drawn = slot.name == "wte" ? static_cast<size_t>(config.vocab) * config.d_model : slot.count;
      const float stddev = slot.name.ends_with(".proj.weight") ? residual_stddev : 0.02f;
      for (size_t i = 0; i < drawn; ++i) p[i] = normal.Next(stddev);
    }
  }
  return params;
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);  // the library's error helpers use MPI's error strings
  std::string model = "gpt2-1.5b";
  int layers = 0;
  size_t chunk_mib = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--model") model = argv[i + 1];
    else if (flag == "--layers") layers = std::atoi(argv[i + 1]);
    else if (flag == "--chunk-mib") chunk_mib = std::strtoull(argv[i + 1], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: perf_init_bench [--model NAME] [--layers N] [--chunk-mib MiB]\n");
      return 2;
    }
  }
  tb::ModelConfig config = tb::FindPreset(model);
  if (layers > 0) config = tb::WithLayers(config, layers);
  const std::vector<tb::TensorSlot> layout = tb::MakeLayout(config);
  const size_t elements = layout.back().offset + layout.back().count;
  constexpr uint64_t kSeed = 1234;
  std::printf("# model %s, %d layers, %zu parameters (%.2f GB fp32); %d threads, chunks of %zu MiB\n",
              config.name.c_str(), config.layers, elements, elements * 4e-9, tb::CpuThreads(), chunk_mib);

  auto start = std::chrono::steady_clock::now();
  const std::vector<float> old_params = OldInitialize(config, layout, kSeed, elements);
  const double old_s = Seconds(start);

  const size_t chunk = std::min(elements, chunk_mib * (size_t{1} << 20) / sizeof(float));
  std::vector<float> staging(chunk);
  size_t mismatched_chunks = 0;
  double new_s = 0;
  for (size_t begin = 0; begin < elements; begin += chunk) {
    const size_t count = std::min(chunk, elements - begin);
    start = std::chrono::steady_clock::now();
    tb::InitializeParameterRange(config, layout, kSeed, begin, begin + count, staging.data());
    new_s += Seconds(start);  // only the drawing: the comparison below is the benchmark's, not the model's
    if (std::memcmp(staging.data(), old_params.data() + begin, count * sizeof(float)) != 0) ++mismatched_chunks;
  }
  std::printf("old_s %.3f  (one thread, in order, into a pageable vector of all parameters)\n", old_s);
  std::printf("new_s %.3f  (InitializeParameterRange per chunk, %d threads)\n", new_s, tb::CpuThreads());
  std::printf("ratio new/old %.3f; identical bits: %s\n", new_s / old_s,
              mismatched_chunks == 0 ? "yes" : ("NO, " + std::to_string(mismatched_chunks) + " chunks differ").c_str());
  MPI_Finalize();
  return mismatched_chunks == 0 ? 0 : 1;
}
