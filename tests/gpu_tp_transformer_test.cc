// The tensor-parallel CUDA transformer (MakeCudaTensorParallelTransformer, models/cuda/cuda_tp_transformer.cu) against
// the CPU models on a tiny model (4 heads of 16 channels, vocabulary 100 padded to 128). Every test that runs a model
// skips, saying why, when no GPU is usable (and in a build without CUDA, where the stub is checked instead).
//
// - One rank over a one-rank NCCL communicator: the same layout and initial bits as the CPU tensor-parallel reference
//   at T = 1, and its loss, gradients (per tensor) and gradient order within gpu_transformer_test.cc's bf16
//   tolerances, as the single-GPU CUDA model's are; three AdamW steps keep the losses together.
// - T = 2 and T = 4 ranks as threads of this process, all on one GPU, over a test communicator that all-reduces
//   through host memory (ThreadGroup below): each rank's slices start with the full CPU model's bits, every rank gets
//   the same loss, near the full model's, and its gradients are the full model's slices within the same tolerances;
//   the all-reduces are counted as TensorParallelAllReduceElements gives. This checks the split itself on one device
//   (the slices' offsets in the kernels, the vocab-parallel cross-entropy, the padding-only slice at T = 4). The
//   multi-GPU split, with NCCL's all-reduces between devices, is unverified until run on several GPUs; the CPU
//   reference's own T = 2 and 4 numerics are checked under mpiexec by tests/tensor_parallel_mpi_test.cc.
// - The inputs it refuses are refused before the device is touched: that test needs no GPU in a CUDA build.
//
// Tolerances (gpu_transformer_test.cc explains them): the loss within 1e-2 relative, each tensor's gradient within
// 3e-2 in relative norm; bf16 activations and GEMM operands against the CPU's fp32. A wrong slice, offset or
// all-reduce gives O(1).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/kernels.h"
#include "device.h"
#include "error.h"
#include "forwarding_communicator.h"
#include "gpu_test_util.h"
#include "model_config.h"
#include "mpi_communicator.h"
#include "nccl_communicator.h"
#include "tensor_parallel.h"
#include "transformer.h"

namespace tb {
namespace {

using tb::test::DownloadDevice;
using tb::test::InputErrorOf;
using tb::test::NoGpuMessage;
using tb::test::RelativeDifference;

constexpr int kBatch = 2;
constexpr int kSeq = 16;
constexpr double kLossTolerance = 1e-2;      // relative (gpu_transformer_test.cc)
constexpr double kGradientTolerance = 3e-2;  // relative norm per tensor (gpu_transformer_test.cc)

// 2 layers, d_model 64, 4 heads (T = 2 and 4 divide them, leaving local widths of 32 and 16), vocabulary 100 padded to
// 128: at T = 4 the second rank holds 4 real tokens and 28 padding rows, the last two padding only.
ModelConfig SmallModel() { return CustomModel(2, 64, 4, 100, kSeq); }

struct Batch {
  std::vector<int32_t> inputs, targets;
};

// Random ids; the last real token is an input and a target, so the last slice holding real tokens takes part in the
// lookup and in the loss.
Batch RandomBatch(int vocab, int batch, int seq, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  Batch b;
  for (int i = 0; i < batch * seq; ++i) {
    b.inputs.push_back(token(generator));
    b.targets.push_back(token(generator));
  }
  b.inputs[1] = vocab - 1;
  b.targets[2] = vocab - 1;
  return b;
}

CudaTransformerOptions Options() {
  CudaTransformerOptions options;
  options.max_batch = kBatch;
  return options;
}

// How many elements differ in their bits (or in number).
size_t CountDifferent(const std::vector<float>& actual, const std::vector<float>& expected) {
  if (actual.size() != expected.size()) return std::max(actual.size(), expected.size());
  size_t different = 0;
  for (size_t i = 0; i < actual.size(); ++i) different += actual[i] != expected[i];
  return different;
}

// Per local slot, the relative difference of `actual` from `expected` must stay within the gradient tolerance.
void ExpectSlotsNear(const std::vector<TensorSlot>& layout, const std::vector<float>& actual,
                     const std::vector<float>& expected, const std::string& what) {
  for (const TensorSlot& slot : layout) {
    EXPECT_LT(RelativeDifference(actual.data() + slot.offset, expected.data() + slot.offset, slot.count),
              kGradientTolerance)
        << what << ": " << slot.name;
  }
}

// --- the ranks of a group as threads on one GPU ----------------------------------------------------------------

// The T ranks of one tensor-parallel group as threads of this process, all on one GPU. AllReduce copies each rank's
// device buffer to the host, combines them in rank order once every rank has arrived, and copies the result back to
// each: what NCCL does between GPUs, slowly, so that the split can be checked on one device. A rank that fails calls
// Abandon, and the others' waits throw instead of hanging.
class ThreadGroup {
 public:
  explicit ThreadGroup(int ranks) : ranks_(ranks), contributions_(ranks) {}
  int ranks() const { return ranks_; }

  void AllReduce(int rank, float* device, size_t count, ReduceOp op) {
    contributions_[rank].resize(count);
    CopyDeviceToHost(contributions_[rank].data(), device, count * sizeof(float));
    std::vector<float> result;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const uint64_t round = round_;
      if (++arrived_ == ranks_) {
        Combine(count, op);
        arrived_ = 0;
        ++round_;
        all_arrived_.notify_all();
      } else if (!all_arrived_.wait_for(lock, std::chrono::seconds(120),
                                        [&] { return round_ != round || abandoned_; }) ||
                 round_ == round) {
        throw RuntimeError("ThreadGroup: rank " + std::to_string(rank) + " waited in vain for the other ranks");
      }
      result = result_;  // before any rank can finish the next round, which needs this one
    }
    CopyHostToDevice(device, result.data(), count * sizeof(float));
    gpu::SynchronizeDevice();  // the copy from pageable memory has landed before the model's stream reads it
  }

  void Abandon() {
    const std::lock_guard<std::mutex> lock(mutex_);
    abandoned_ = true;
    all_arrived_.notify_all();
  }

 private:
  void Combine(size_t count, ReduceOp op) {
    result_ = contributions_[0];
    for (int r = 1; r < ranks_; ++r) {
      if (contributions_[r].size() != count) throw RuntimeError("ThreadGroup: the ranks' all-reduces differ in count");
      for (size_t i = 0; i < count; ++i) {
        const float value = contributions_[r][i];
        result_[i] = op == ReduceOp::kMax ? std::max(result_[i], value) : result_[i] + value;
      }
    }
  }

  const int ranks_;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
  int arrived_ = 0;
  uint64_t round_ = 0;
  bool abandoned_ = false;
  std::vector<std::vector<float>> contributions_;  // per rank; each written only by its rank, before it arrives
  std::vector<float> result_;
};

// Rank `rank` of a ThreadGroup as a device-memory Communicator: its all-reduces (fp32 sum or max, in place) go
// through the group, blocking; what else a model might call goes to a one-rank MPI communicator.
class ThreadRankCommunicator : public ForwardingCommunicator {
 public:
  ThreadRankCommunicator(ThreadGroup& group, int rank)
      : ForwardingCommunicator(MakeMpiCommunicator(MPI_COMM_SELF)), group_(group), rank_(rank) {}
  std::string backend() const override { return "thread-group"; }
  MemoryKind memory() const override { return MemoryKind::kDevice; }
  int rank() const override { return rank_; }
  int size() const override { return group_.ranks(); }
  void AllReduce(const void* send, void* recv, size_t count, DataType type, ReduceOp op) override {
    if (send != recv || type != DataType::kFloat32 || (op != ReduceOp::kSum && op != ReduceOp::kMax)) {
      throw RuntimeError("ThreadRankCommunicator: only in-place fp32 sums and maxima");
    }
    group_.AllReduce(rank_, static_cast<float*>(recv), count, op);
  }
  void Synchronize() override {}  // every all-reduce is complete when it returns

 private:
  ThreadGroup& group_;
  int rank_;
};

// Runs work(rank) for every rank of `group` on a thread of its own, bound to GPU 0; rethrows the failure that came
// first (the others' are then the abandoned waits it caused).
void RunRanks(ThreadGroup& group, const std::function<void(int rank)>& work) {
  std::mutex mutex;
  std::exception_ptr first_failure;
  std::vector<std::thread> threads;
  for (int r = 0; r < group.ranks(); ++r) {
    threads.emplace_back([&, r] {
      try {
        BindGpu(0);
        work(r);
      } catch (...) {
        {
          const std::lock_guard<std::mutex> lock(mutex);
          if (!first_failure) first_failure = std::current_exception();
        }
        group.Abandon();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (first_failure) std::rethrow_exception(first_failure);
}

// One forward and backward on a fresh gradient buffer: the loss and the order gradient_ready reported the slots in.
struct StepResult {
  float loss = 0.0f;
  std::vector<size_t> order;
};

StepResult ForwardBackward(Transformer& model, const Batch& batch) {
  StepResult result;
  result.loss = model.ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  model.Backward([&](size_t slot) { result.order.push_back(slot); });
  return result;
}

// A full-model buffer's values at rank `rank`'s local elements (TensorParallelStretches).
std::vector<float> LocalSlice(const ModelConfig& config, int tp, int rank, const float* full, size_t local_elements) {
  std::vector<float> local(local_elements);
  for (const TensorParallelStretch& s : TensorParallelStretches(config, tp, rank)) {
    std::copy(full + s.full, full + s.full + s.count, local.begin() + static_cast<ptrdiff_t>(s.local));
  }
  return local;
}

// --- one rank over NCCL ----------------------------------------------------------------------------------------

TEST(CudaTensorParallel, OneRankMatchesTheCpuReference) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  BindGpu(0);
  const std::unique_ptr<Communicator> nccl = MakeNcclCommunicator(MPI_COMM_SELF);
  const std::unique_ptr<Communicator> mpi = MakeMpiCommunicator(MPI_COMM_SELF);
  const ModelConfig config = SmallModel();
  auto cpu = MakeCpuTensorParallelTransformer(config, 11, *mpi);
  auto single = MakeCudaTransformer(config, 11, Options());
  auto gpu = MakeCudaTensorParallelTransformer(config, 11, *nccl, Options());
  SCOPED_TRACE("attention " + gpu->attention());
  EXPECT_EQ(gpu->backend(), "cuda");
  ASSERT_NE(TensorParallelStatsOf(*gpu), nullptr);
  EXPECT_EQ(TensorParallelStatsOf(*gpu)->tensor_parallel(), 1);
  EXPECT_EQ(TensorParallelStatsOf(*gpu)->tensor_parallel_rank(), 0);
  ASSERT_EQ(gpu->parameter_elements(), cpu->parameter_elements());
  ASSERT_EQ(gpu->layout().size(), cpu->layout().size());
  for (size_t s = 0; s < cpu->layout().size(); ++s) {
    EXPECT_EQ(gpu->layout()[s].name, cpu->layout()[s].name);
    EXPECT_EQ(gpu->layout()[s].offset, cpu->layout()[s].offset);
  }
  const size_t n = cpu->parameter_elements();
  EXPECT_EQ(CountDifferent(DownloadDevice(gpu->parameters(), n),
                           std::vector<float>(cpu->parameters(), cpu->parameters() + n)),
            0u)
      << "of " << n << " initial parameters differ from the CPU reference's";

  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 12);
  const StepResult cpu_step = ForwardBackward(*cpu, batch);
  const StepResult single_step = ForwardBackward(*single, batch);
  const StepResult gpu_step = ForwardBackward(*gpu, batch);
  EXPECT_NEAR(gpu_step.loss, cpu_step.loss, kLossTolerance * cpu_step.loss);
  EXPECT_NEAR(gpu_step.loss, single_step.loss, kLossTolerance * single_step.loss);
  EXPECT_EQ(gpu_step.order, cpu_step.order);
  const std::vector<float> grads = DownloadDevice(gpu->gradients(), n);
  ExpectSlotsNear(cpu->layout(), grads, std::vector<float>(cpu->gradients(), cpu->gradients() + n), "cpu reference");
  ExpectSlotsNear(cpu->layout(), grads, DownloadDevice(single->gradients(), n), "single-GPU model");
  const TensorSlot& wte = cpu->layout()[kWteSlot];
  for (size_t i = static_cast<size_t>(config.vocab) * config.d_model; i < wte.count; ++i) {
    ASSERT_EQ(grads[wte.offset + i], 0.0f) << "wte padding element " << i;
  }
  const TensorParallelComm comm = TensorParallelStatsOf(*gpu)->TakeComm();  // a group of one all-reduces nothing
  EXPECT_EQ(comm.allreduces, 0);
  EXPECT_EQ(comm.bytes, 0u);

  const Batch shorter = RandomBatch(config.vocab, 1, kSeq - 7, 13);
  const float cpu_shorter = cpu->ForwardBatch(shorter.inputs.data(), shorter.targets.data(), 1, kSeq - 7);
  const float gpu_shorter = gpu->ForwardBatch(shorter.inputs.data(), shorter.targets.data(), 1, kSeq - 7);
  EXPECT_NEAR(gpu_shorter, cpu_shorter, kLossTolerance * cpu_shorter);
}

// Three AdamW steps at a large learning rate on the same batch: the losses fall together with the reference's (a
// stale bf16 copy or a wrong AdamW range would part them), and wte's padding rows stay zero.
TEST(CudaTensorParallel, OneRankTrainsAsTheCpuReference) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  BindGpu(0);
  const std::unique_ptr<Communicator> nccl = MakeNcclCommunicator(MPI_COMM_SELF);
  const std::unique_ptr<Communicator> mpi = MakeMpiCommunicator(MPI_COMM_SELF);
  const ModelConfig config = SmallModel();
  auto cpu = MakeCpuTensorParallelTransformer(config, 21, *mpi);
  auto gpu = MakeCudaTensorParallelTransformer(config, 21, *nccl, Options());
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 22);
  AdamWConfig adamw;
  adamw.learning_rate = 1e-2f;
  for (int64_t step = 1; step <= 3; ++step) {
    const float cpu_loss = ForwardBackward(*cpu, batch).loss;
    const float gpu_loss = ForwardBackward(*gpu, batch).loss;
    EXPECT_NEAR(gpu_loss, cpu_loss, kLossTolerance * cpu_loss) << "step " << step;
    cpu->AdamWStep(adamw, step);
    gpu->AdamWStep(adamw, step);
  }
  const float cpu_after = cpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  const float gpu_after = gpu->ForwardBatch(batch.inputs.data(), batch.targets.data(), kBatch, kSeq);
  EXPECT_NEAR(gpu_after, cpu_after, kLossTolerance * cpu_after);
  const std::vector<float> params = DownloadDevice(gpu->parameters(), gpu->parameter_elements());
  const TensorSlot& wte = gpu->layout()[kWteSlot];
  for (size_t i = static_cast<size_t>(config.vocab) * config.d_model; i < wte.count; ++i) {
    ASSERT_EQ(params[wte.offset + i], 0.0f) << "wte padding element " << i;
  }
}

// --- T ranks as threads on one GPU -------------------------------------------------------------------------------

void ExpectSplitMatchesTheFullModel(int tp) {
  SCOPED_TRACE("T = " + std::to_string(tp));
  const ModelConfig config = SmallModel();
  auto full = MakeCpuTransformer(config, 31);
  const Batch batch = RandomBatch(config.vocab, kBatch, kSeq, 32);
  const StepResult full_step = ForwardBackward(*full, batch);

  ThreadGroup group(tp);
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::unique_ptr<Transformer>> ranks;
  for (int r = 0; r < tp; ++r) {
    comms.push_back(std::make_unique<ThreadRankCommunicator>(group, r));
    ranks.push_back(MakeCudaTensorParallelTransformer(config, 31, *comms[r], Options()));
  }
  for (int r = 0; r < tp; ++r) {
    const size_t n = ranks[r]->parameter_elements();
    const std::vector<float> expected = LocalSlice(config, tp, r, full->parameters(), n);
    EXPECT_EQ(CountDifferent(DownloadDevice(ranks[r]->parameters(), n), expected), 0u)
        << "of rank " << r << "'s " << n << " initial parameters differ from the full model's";
  }
  std::vector<StepResult> steps(tp);
  std::vector<TensorParallelComm> comm(tp);
  RunRanks(group, [&](int r) {
    steps[r] = ForwardBackward(*ranks[r], batch);
    comm[r] = TensorParallelStatsOf(*ranks[r])->TakeComm();
  });
  const uint64_t elements = TensorParallelAllReduceElements(config, tp, kBatch, kSeq);
  for (int r = 0; r < tp; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(steps[r].loss, steps[0].loss) << "every rank combines the same all-reduced values";
    EXPECT_NEAR(steps[r].loss, full_step.loss, kLossTolerance * full_step.loss);
    EXPECT_EQ(steps[r].order, full_step.order);
    const size_t n = ranks[r]->parameter_elements();
    ExpectSlotsNear(ranks[r]->layout(), DownloadDevice(ranks[r]->gradients(), n),
                    LocalSlice(config, tp, r, full->gradients(), n), "full CPU model's slice");
    // Blocks: 2 forward and 2 backward each; the embedding, the cross-entropy's two, the LM head's input gradient.
    EXPECT_EQ(comm[r].allreduces, 4 * config.layers + 4);
    EXPECT_EQ(comm[r].bytes, 4 * elements);
    EXPECT_EQ(TensorParallelStatsOf(*ranks[r])->last_step_comm().elements, elements);
  }
}

TEST(CudaTensorParallel, TwoRanksOnOneGpuMatchTheFullModel) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  BindGpu(0);
  ExpectSplitMatchesTheFullModel(2);
}

TEST(CudaTensorParallel, FourRanksOnOneGpuMatchTheFullModel) {
  if (GpuCount() == 0) GTEST_SKIP() << NoGpuMessage();
  BindGpu(0);
  ExpectSplitMatchesTheFullModel(4);
}

// --- inputs refused, and the build without CUDA ------------------------------------------------------------------

// Refused with an InputError before any device call: in a CUDA build on a machine without a GPU a device call would
// throw RuntimeError instead, so this test needs no GPU.
TEST(CudaTensorParallel, RefusesBadSplitsBeforeTouchingTheDevice) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA: the stub is checked by CudaTensorParallelStub";
  const ModelConfig config = SmallModel();
  ThreadGroup three(3);
  ThreadRankCommunicator of_three(three, 0);
  const std::string heads = InputErrorOf([&] { MakeCudaTensorParallelTransformer(config, 1, of_three, Options()); });
  EXPECT_NE(heads.find("does not divide --heads"), std::string::npos) << heads;

  const std::unique_ptr<Communicator> host = MakeMpiCommunicator(MPI_COMM_SELF);
  const std::string memory = InputErrorOf([&] { MakeCudaTensorParallelTransformer(config, 1, *host, Options()); });
  EXPECT_NE(memory.find("device-memory communicator"), std::string::npos) << memory;

  ThreadGroup sixteen(16);
  ThreadRankCommunicator of_sixteen(sixteen, 0);
  const std::string widths = InputErrorOf(
      [&] { MakeCudaTensorParallelTransformer(CustomModel(1, 64, 16, 100, kSeq), 1, of_sixteen, Options()); });
  EXPECT_NE(widths.find("multiples of 8"), std::string::npos) << widths;

  ThreadGroup one(1);
  ThreadRankCommunicator alone(one, 0);
  CudaTransformerOptions fsdp = Options();
  fsdp.placement.fsdp = MakeFsdpLayout(MakeLayout(config), 2, 0);
  EXPECT_NE(InputErrorOf([&] { MakeCudaTensorParallelTransformer(config, 1, alone, fsdp); }).find("fsdp"),
            std::string::npos);
  CudaTransformerOptions no_batch = Options();
  no_batch.max_batch = 0;
  EXPECT_NE(InputErrorOf([&] { MakeCudaTensorParallelTransformer(config, 1, alone, no_batch); }), "");
  CudaTransformerOptions small_shard = Options();
  small_shard.placement.shard = OptimizerShard{16, 0, 16};  // a capacity far below the local elements
  const std::string shard = InputErrorOf([&] { MakeCudaTensorParallelTransformer(config, 1, alone, small_shard); });
  EXPECT_NE(shard.find("does not fit"), std::string::npos) << shard;
}

TEST(CudaTensorParallelStub, SaysBuiltWithoutCuda) {
  if (BuiltWithCuda()) GTEST_SKIP() << "this trainbench was built with CUDA: there is no stub to check";
  ThreadGroup one(1);
  ThreadRankCommunicator alone(one, 0);
  try {
    MakeCudaTensorParallelTransformer(SmallModel(), 1, alone, Options());
    ADD_FAILURE() << "MakeCudaTensorParallelTransformer did not throw in a build without CUDA";
  } catch (const RuntimeError& error) {
    EXPECT_NE(std::string(error.what()).find("built without CUDA"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace tb
