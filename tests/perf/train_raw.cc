// The baseline of tests/perf/train_overhead.sh: the same model code and the same BLAS calls as one rank of
// `trainbench train`, in a bare loop — no timers per phase, no buckets, no communicator, no watchdog, no
// report. Prints the median step time over the measured steps.
//   train_raw LAYERS D_MODEL HEADS VOCAB SEQ MICRO_BATCH STEPS WARMUP SEED
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "model_config.h"
#include "peaks.h"
#include "train_loop.h"
#include "transformer.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);  // the model library's error helpers use MPI's error strings
  if (argc != 10) {
    std::fprintf(stderr, "usage: train_raw LAYERS D_MODEL HEADS VOCAB SEQ MICRO_BATCH STEPS WARMUP SEED\n");
    return 2;
  }
  const int layers = std::atoi(argv[1]), d_model = std::atoi(argv[2]), heads = std::atoi(argv[3]);
  const int vocab = std::atoi(argv[4]), seq = std::atoi(argv[5]), batch = std::atoi(argv[6]);
  const int steps = std::atoi(argv[7]), warmup = std::atoi(argv[8]);
  const uint64_t seed = std::strtoull(argv[9], nullptr, 10);
  tb::SetCpuThreadsPerRank(1);
  tb::ModelConfig config = tb::CustomModel(layers, d_model, heads, vocab, seq);
  std::unique_ptr<tb::Transformer> model = tb::MakeCpuTransformer(config, seed);
  tb::AdamWConfig adamw;
  std::vector<int32_t> inputs, targets;
  std::vector<double> times;
  for (int step = 0; step < warmup + steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    tb::SyntheticBatch(seed, 0, step, batch, seq, vocab, inputs, targets);
    model->ForwardBatch(inputs.data(), targets.data(), batch, seq);
    model->Backward([](size_t) {});
    model->AdamWStep(adamw, step + 1);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step >= warmup) times.push_back(seconds);
  }
  std::sort(times.begin(), times.end());
  std::printf("median_step_s %.9f\n", times[times.size() / 2]);
  MPI_Finalize();
  return 0;
}
