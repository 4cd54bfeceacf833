// Checkpoints under mpiexec: bit-exact round trips (sync, async, emulated device buffers), keep-K pruning, the
// newest complete checkpoint, other world sizes on resume, every kind of bad checkpoint as one agreed
// InputError, disk full on a small tmpfs (warn goes on, fail throws on every rank, the previous checkpoint
// still loads), and checkpoints in parts (ranks holding different state): round trips, another number of replicas,
// another layout refused, a part's missing slice.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "checkpoint.h"
#include "checkpoint_format.h"
#include "error.h"
#include "input_error_of.h"

namespace tb {
namespace {

namespace fs = std::filesystem;

int Rank(MPI_Comm comm = MPI_COMM_WORLD) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int Size(MPI_Comm comm = MPI_COMM_WORLD) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

bool OnAllRanks(bool mine, MPI_Comm comm = MPI_COMM_WORLD) {
  int local = mine ? 1 : 0, all = 0;
  MPI_Allreduce(&local, &all, 1, MPI_INT, MPI_MIN, comm);
  return all == 1;
}

std::string BroadcastFromZero(std::string text) {
  int length = static_cast<int>(text.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  text.resize(static_cast<size_t>(length));
  MPI_Bcast(text.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  return text;
}

// A directory every rank sees, made by rank 0 under the build tree (a real disk) and removed at the end.
class SharedTempDir {
 public:
  SharedTempDir() {
    std::string pattern;
    if (Rank() == 0) {
      pattern = (fs::current_path() / "checkpoint_test_XXXXXX").string();
      if (!::mkdtemp(pattern.data())) pattern.clear();
    }
    path_ = BroadcastFromZero(pattern);
    if (path_.empty()) throw std::runtime_error("mkdtemp failed");
  }
  ~SharedTempDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (Rank() == 0) {
      std::error_code ec;
      fs::remove_all(path_, ec);
    }
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (fs::path(path_) / name).string(); }

 private:
  std::string path_;
};

// Training state made of buffers whose sizes are not multiples of anything, so that slices cross buffer
// boundaries at every world size. The last buffer stands in for device memory: it is reached only through
// the copier, which counts its calls.
struct TestState {
  explicit TestState(std::vector<size_t> sizes = {1001, 4099, 777}) {
    for (size_t bytes : sizes) data.emplace_back(bytes);
  }
  void Fill(uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (auto& buffer : data) {
      for (auto& byte : buffer) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        byte = static_cast<unsigned char>(x);
      }
    }
  }
  void Clear() {
    for (auto& buffer : data) std::fill(buffer.begin(), buffer.end(), 0);
  }
  std::vector<StateBuffer> Buffers() {
    const char* names[] = {"params", "adam_m", "adam_v", "extra"};
    std::vector<StateBuffer> buffers;
    for (size_t i = 0; i < data.size(); ++i) {
      buffers.push_back({names[i], data[i].data(), data[i].size(), i + 1 == data.size()});
    }
    return buffers;
  }
  DeviceCopier Copier() {
    DeviceCopier copier;
    copier.to_host = [this](void* host, const void* device, uint64_t bytes) {
      ++to_host_calls;
      std::memcpy(host, device, bytes);
    };
    copier.to_device = [this](void* device, const void* host, uint64_t bytes) {
      ++to_device_calls;
      std::memcpy(device, host, bytes);
    };
    return copier;
  }
  std::vector<std::vector<unsigned char>> data;
  int to_host_calls = 0;
  int to_device_calls = 0;
};

CheckpointMeta Meta(int64_t step) {
  CheckpointMeta meta;
  meta.step = step;
  meta.model_fingerprint = "test-model d=8 layers=2";
  meta.values["rng_seed"] = "1234";
  meta.values["loader_position"] = "epoch 0 sample " + std::to_string(step * 8);
  return meta;
}

CheckpointOptions Options(const std::string& dir, CheckpointMode mode = CheckpointMode::kSync) {
  CheckpointOptions options;
  options.dir = dir;
  options.mode = mode;
  options.block_bytes = 1000;  // several blocks per slice
  return options;
}

LoadedCheckpoint Load(const std::string& path, TestState& state, MPI_Comm comm = MPI_COMM_WORLD,
                      uint64_t chunk = 64ull << 20, CheckpointPart part = {}) {
  return LoadCheckpoint(comm, path, state.Buffers(), "test-model d=8 layers=2", state.Copier(), chunk, part);
}

// Every rank got the same one-line InputError containing `expected`.
void ExpectAgreedInputError(const std::string& message, const std::string& expected) {
  EXPECT_NE(message.find(expected), std::string::npos) << "message: " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(BroadcastFromZero(message), message);
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Checkpoint, SyncRoundTripIsBitExact) {
  SharedTempDir root;
  TestState state;
  state.Fill(1);
  const TestState saved = state;
  CheckpointOptions options = Options(root.path());
  options.verify = true;
  {
    Checkpointer checkpointer(MPI_COMM_WORLD, options, state.Buffers(), state.Copier());
    EXPECT_EQ(checkpointer.state_bytes(), 1001u + 4099u + 777u);
    checkpointer.Save(Meta(5));
    ASSERT_EQ(checkpointer.events().size(), 1u);
    const CheckpointEvent& event = checkpointer.events()[0];
    EXPECT_TRUE(event.ok) << event.error;
    EXPECT_TRUE(event.verified);
    EXPECT_EQ(event.step, 5);
    EXPECT_EQ(event.rank, Rank());
    EXPECT_EQ(event.bytes, checkpointer.slice_bytes());
    EXPECT_GT(event.write_s, 0);
    EXPECT_GT(event.stall_s, 0);
    EXPECT_FALSE(checkpointer.WriterBusy());
  }
  const std::string step_dir = root / "step-00000005";
  std::vector<std::string> expected = {"manifest.txt"};
  for (int r = 0; r < Size(); ++r) expected.push_back(checkpoint::RankFileName(r));
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(Entries(step_dir), expected);
  EXPECT_EQ(Entries(root.path()), std::vector<std::string>{"step-00000005"});  // no .partial, no .tmp

  state.Clear();
  const LoadedCheckpoint loaded = Load(root.path(), state);
  EXPECT_EQ(state.data, saved.data);
  EXPECT_GT(state.to_device_calls, 0);
  EXPECT_EQ(loaded.dir, step_dir);
  EXPECT_EQ(loaded.meta.step, 5);
  EXPECT_EQ(loaded.meta.values, Meta(5).values);
  EXPECT_EQ(loaded.meta.model_fingerprint, "test-model d=8 layers=2");
  EXPECT_EQ(loaded.saved_world_size, Size());
  EXPECT_EQ(loaded.bytes, 1001u + 4099u + 777u);

  // The manifest is plain text that names what it describes.
  const std::string manifest =
      checkpoint::ReadTextFile((fs::path(step_dir) / "manifest.txt").string(), "manifest");
  EXPECT_NE(manifest.find("world_size " + std::to_string(Size()) + "\n"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("buffer adam_m 4099\n"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("meta loader_position epoch 0 sample 40\n"), std::string::npos) << manifest;
}

TEST(Checkpoint, AsyncSavesTheSnapshotWhileTrainingGoesOn) {
  SharedTempDir root;
  TestState state;
  state.Fill(1);
  const TestState first = state;
  TestState second = state;
  {
    Checkpointer checkpointer(MPI_COMM_WORLD, Options(root.path(), CheckpointMode::kAsync), state.Buffers(),
                              state.Copier());
    checkpointer.Save(Meta(1));
    checkpointer.BeforeUpdate();  // the optimizer is about to change the state the writer may still be reading
    state.Fill(2);  // training changes the state while the writer works on the snapshot
    second = state;
    // Poll alone completes it: every rank keeps polling until its own event is recorded.
    while (checkpointer.events().empty()) checkpointer.Poll();
    EXPECT_TRUE(checkpointer.events()[0].ok) << checkpointer.events()[0].error;
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_TRUE(fs::exists(root / "step-00000001/manifest.txt"));
    checkpointer.Save(Meta(2));
    checkpointer.Drain();
    ASSERT_EQ(checkpointer.events().size(), 2u);
    for (const CheckpointEvent& event : checkpointer.events()) {
      EXPECT_TRUE(event.ok) << event.error;
      EXPECT_EQ(event.mode, CheckpointMode::kAsync);
      EXPECT_GT(event.write_s, 0);
      EXPECT_NE(event.crc32c, 0u);
    }
    EXPECT_FALSE(checkpointer.WriterBusy());
  }
  state.Clear();
  EXPECT_EQ(Load(root / "step-00000001", state).meta.step, 1);
  EXPECT_EQ(state.data, first.data);
  state.Clear();
  EXPECT_EQ(Load(root.path(), state).meta.step, 2);
  EXPECT_EQ(state.data, second.data);
}

// The async writer's source, driven by hand: blocks read from the live memory until Freeze, which waits for the
// block being read, copies only what was not read yet, and sends every later block to the snapshot.
TEST(DeferredSnapshot, FreezeCopiesOnlyWhatTheWriterHasNotRead) {
  std::vector<std::byte> live(100), device_copy(40), snapshot(140, std::byte{0});
  for (size_t i = 0; i < live.size(); ++i) live[i] = static_cast<std::byte>(i + 1);
  for (size_t i = 0; i < device_copy.size(); ++i) snapshot[100 + i] = device_copy[i] = static_cast<std::byte>(200 + i);
  checkpoint::DeferredSnapshot source(snapshot.data(), {{live.data(), 0, 100}, {nullptr, 100, 40}});
  ASSERT_EQ(source.parts(), 2u);
  EXPECT_EQ(source.part_bytes(0), 100u);
  // The first 30 bytes come from the live memory itself.
  EXPECT_EQ(source.Acquire(0, 0, 30), live.data());
  // Freeze must wait for that block: the caller may change the memory once it returns.
  std::atomic<bool> frozen{false};
  uint64_t copied = 0;
  std::thread freezer([&] {
    copied = source.Freeze();
    frozen = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(frozen) << "Freeze returned while a block was being read";
  source.Release();
  freezer.join();
  EXPECT_EQ(copied, 70u);  // bytes 30..99 of the host part; the device part was in the snapshot already
  std::fill(live.begin(), live.end(), std::byte{0xEE});  // the optimizer changes the state
  const std::byte* rest = source.Acquire(0, 30, 70);
  EXPECT_EQ(rest, snapshot.data() + 30);
  for (size_t i = 0; i < 70; ++i) ASSERT_EQ(rest[i], static_cast<std::byte>(31 + i)) << i;
  source.Release();
  EXPECT_EQ(std::memcmp(source.Acquire(1, 0, 40), device_copy.data(), 40), 0);
  source.Release();
  EXPECT_EQ(source.Freeze(), 0u);  // again: nothing more

  // A block read from the snapshot (device memory copied at Save) is not the state: Freeze does not wait for it
  // (on a GPU it would otherwise wait for an 8 MiB write at each optimizer step).
  checkpoint::DeferredSnapshot device_only(snapshot.data(), {{nullptr, 0, 140}});
  device_only.Acquire(0, 0, 64);
  auto freeze = std::async(std::launch::async, [&] { return device_only.Freeze(); });
  const bool waited = freeze.wait_for(std::chrono::seconds(10)) != std::future_status::ready;
  device_only.Release();
  EXPECT_FALSE(waited) << "Freeze waited for a block of the snapshot";
  EXPECT_EQ(freeze.get(), 0u);
}

// Async checkpoints of a state the "optimizer" changes right after each fence, with the fence at every point of the
// write (blocks of 1000 bytes of a 2 MB state: the writer is anywhere from not started to done): every checkpoint
// holds the state as it was at its Save.
TEST(Checkpoint, AsyncCheckpointsHoldTheStateOfTheirSave) {
  SharedTempDir root;
  TestState state({700001, 900007, 400003});
  CheckpointOptions options = Options(root.path(), CheckpointMode::kAsync);
  options.deferred_snapshot = true;
  std::vector<TestState> saved;
  {
    Checkpointer checkpointer(MPI_COMM_WORLD, options, state.Buffers(), state.Copier());
    for (int step = 1; step <= 4; ++step) {
      state.Fill(static_cast<uint32_t>(step));
      saved.push_back(state);
      checkpointer.Save(Meta(step));
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * (step - 1)));  // forward and backward
      checkpointer.BeforeUpdate();
      state.Fill(static_cast<uint32_t>(100 + step));  // the optimizer step
    }
    checkpointer.Drain();
    ASSERT_EQ(checkpointer.events().size(), 4u);
    for (const CheckpointEvent& event : checkpointer.events()) EXPECT_TRUE(event.ok) << event.error;
  }
  for (int step = 1; step <= 4; ++step) {
    state.Clear();
    Load(root / checkpoint::StepDirName(step), state);
    EXPECT_EQ(state.data, saved[step - 1].data) << "checkpoint of step " << step;
  }
}

TEST(Checkpoint, KeepPrunesOlderCheckpointsAndLeftovers) {
  SharedTempDir root;
  TestState state;
  CheckpointOptions options = Options(root.path(), CheckpointMode::kAsync);
  options.keep = 2;
  Checkpointer checkpointer(MPI_COMM_WORLD, options, state.Buffers(), state.Copier());
  if (Rank() == 0) fs::create_directories(root / "step-00000000.partial");  // an interrupted run's leftover
  MPI_Barrier(MPI_COMM_WORLD);
  for (int step = 1; step <= 4; ++step) {
    state.Fill(step);
    checkpointer.Save(Meta(step));
    checkpointer.Poll();
  }
  checkpointer.Drain();
  EXPECT_EQ(Entries(root.path()), (std::vector<std::string>{"step-00000003", "step-00000004"}));
  TestState loaded;
  EXPECT_EQ(Load(root / "step-00000003", loaded).meta.step, 3);
  state.Fill(3);
  EXPECT_EQ(loaded.data, state.data);
}

TEST(Checkpoint, ResumeTakesTheNewestCompleteCheckpoint) {
  SharedTempDir root;
  TestState state;
  Checkpointer checkpointer(MPI_COMM_WORLD, Options(root.path()), state.Buffers(), state.Copier());
  state.Fill(10);
  checkpointer.Save(Meta(10));
  const TestState at_ten = state;
  state.Fill(9);
  checkpointer.Save(Meta(9));  // saved later, but an older step
  if (Rank() == 0) fs::create_directories(root / "step-00000030");  // no manifest: incomplete
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(ResolveCheckpoint(root.path()), root / "step-00000010");
  state.Clear();
  EXPECT_EQ(Load(root.path() + "/", state).meta.step, 10);
  EXPECT_EQ(state.data, at_ten.data);
  ExpectAgreedInputError(InputErrorOf([&] { Load(root / "step-00000030", state); }), "incomplete checkpoint");
}

TEST(Checkpoint, LoadsAtAnotherWorldSize) {
  SharedTempDir root;
  TestState state;
  state.Fill(7);
  const TestState saved = state;
  {
    Checkpointer checkpointer(MPI_COMM_WORLD, Options(root / "all"), state.Buffers(), state.Copier());
    checkpointer.Save(Meta(1));
  }
  // Saved by every rank, loaded by each prefix of them (fewer ranks read more files each), with a small
  // gather chunk so that the all-gather takes several rounds.
  for (int k = 1; k < Size(); ++k) {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, Rank() < k ? 0 : MPI_UNDEFINED, Rank(), &sub);
    if (sub != MPI_COMM_NULL) {
      TestState loaded;
      const LoadedCheckpoint info = Load(root / "all", loaded, sub, 333);
      EXPECT_EQ(info.saved_world_size, Size());
      EXPECT_EQ(loaded.data, saved.data) << "loaded by " << k << " ranks";
      MPI_Comm_free(&sub);
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // Saved by one rank, loaded by all (most ranks read no file).
  MPI_Comm single = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, Rank() == 0 ? 0 : MPI_UNDEFINED, 0, &single);
  if (single != MPI_COMM_NULL) {
    Checkpointer checkpointer(single, Options(root / "one"), state.Buffers(), state.Copier());
    checkpointer.Save(Meta(2));
    MPI_Comm_free(&single);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  TestState loaded;
  const LoadedCheckpoint info = Load(root / "one", loaded, MPI_COMM_WORLD, 1000);
  EXPECT_EQ(info.saved_world_size, 1);
  EXPECT_EQ(info.read_bytes, Rank() == Size() - 1 ? saved.data[0].size() + 4099 + 777 : 0u);
  EXPECT_EQ(loaded.data, saved.data);
}

// Saves one checkpoint at step 1 under root/ckpt and returns the step directory.
std::string SaveOne(const SharedTempDir& root, TestState& state) {
  state.Fill(3);
  Checkpointer checkpointer(MPI_COMM_WORLD, Options(root / "ckpt"), state.Buffers(), state.Copier());
  checkpointer.Save(Meta(1));
  MPI_Barrier(MPI_COMM_WORLD);
  return root / "ckpt/step-00000001";
}

// Rank 0 changes a file between barriers.
void OnRankZero(const std::function<void()>& change) {
  MPI_Barrier(MPI_COMM_WORLD);
  if (Rank() == 0) change();
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Checkpoint, CorruptSliceIsNamed) {
  SharedTempDir root;
  TestState state;
  const std::string dir = SaveOne(root, state);
  const std::string victim = (fs::path(dir) / checkpoint::RankFileName(Size() - 1)).string();
  OnRankZero([&] {
    std::fstream file(victim, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(10);
    char byte = 0;
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x01);
    file.seekp(10);
    file.write(&byte, 1);
  });
  ExpectAgreedInputError(InputErrorOf([&] { Load(dir, state); }),
                         "checkpoint file " + victim + " is corrupt: CRC-32C");
}

TEST(Checkpoint, TruncatedSliceIsNamed) {
  SharedTempDir root;
  TestState state;
  const std::string dir = SaveOne(root, state);
  const std::string victim = (fs::path(dir) / checkpoint::RankFileName(0)).string();
  OnRankZero([&] { fs::resize_file(victim, fs::file_size(victim) - 3); });
  ExpectAgreedInputError(InputErrorOf([&] { Load(root / "ckpt", state); }),
                         "checkpoint file " + victim + " is truncated");
}

TEST(Checkpoint, BadManifestsAndPathsAreOneLineErrors) {
  SharedTempDir root;
  TestState state;
  const std::string dir = SaveOne(root, state);
  const std::string manifest = (fs::path(dir) / "manifest.txt").string();
  const std::string good = checkpoint::ReadTextFile(manifest, "manifest");
  auto write_manifest = [&](const std::string& text) {
    OnRankZero([&] { std::ofstream(manifest, std::ios::binary | std::ios::trunc) << text; });
  };

  std::string edited = good;
  edited.replace(edited.find("step 1\n"), 7, "step 2\n");
  write_manifest(edited);
  ExpectAgreedInputError(InputErrorOf([&] { Load(dir, state); }), manifest + ": corrupt: checksum");

  write_manifest(good.substr(0, good.size() / 2));
  ExpectAgreedInputError(InputErrorOf([&] { Load(dir, state); }), manifest + ": truncated");

  write_manifest("hello\n");
  ExpectAgreedInputError(InputErrorOf([&] { Load(dir, state); }), "not a trainbench checkpoint manifest");

  write_manifest(good);
  ExpectAgreedInputError(InputErrorOf([&] {
                           LoadCheckpoint(MPI_COMM_WORLD, dir, state.Buffers(), "another-model", state.Copier());
                         }),
                         "was written for model 'test-model d=8 layers=2', this run's model is 'another-model'");
  TestState other({1001, 4099, 778});
  ExpectAgreedInputError(InputErrorOf([&] { Load(dir, other); }), "holds params 1001 B, adam_m 4099 B, adam_v 777 B; "
                                                                  "this run has params 1001 B, adam_m 4099 B, adam_v 778 B");

  OnRankZero([&] { fs::remove(manifest); });
  ExpectAgreedInputError(InputErrorOf([&] { Load(dir, state); }), "holds no manifest.txt: an incomplete checkpoint");
  ExpectAgreedInputError(InputErrorOf([&] { Load(root / "ckpt", state); }), "holds no complete checkpoint");
  ExpectAgreedInputError(InputErrorOf([&] { Load(root / "missing", state); }), root / "missing: no such directory");
}

TEST(Checkpoint, OptionChecksNeedNoMpi) {
  SharedTempDir root;
  EXPECT_EQ(ParseCheckpointMode("async"), CheckpointMode::kAsync);
  EXPECT_EQ(ParseCheckpointErrorPolicy("warn"), CheckpointErrorPolicy::kWarn);
  EXPECT_EQ(InputErrorOf([] { ParseCheckpointMode("later"); }), "--checkpoint-mode 'later': expected sync|async");
  EXPECT_EQ(InputErrorOf([] { ParseCheckpointErrorPolicy("ignore"); }),
            "--on-checkpoint-error 'ignore': expected fail|warn");
  EXPECT_EQ(InputErrorOf([&] { ResolveCheckpoint(root / "nope"); }), "--resume " + (root / "nope") + ": no such directory");
  if (Rank() == 0) std::ofstream(root / "file") << "x";
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(InputErrorOf([&] { ResolveCheckpoint(root / "file"); }), "--resume " + (root / "file") + " is not a directory");
  EXPECT_NE(InputErrorOf([&] { PrepareCheckpointDir(root / "file/sub"); }).find("--checkpoint-dir " + (root / "file/sub")),
            std::string::npos);
  if (Rank() == 0) PrepareCheckpointDir(root / "new/deeper");
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(fs::is_directory(root / "new/deeper"));
}

TEST(Checkpoint, ManifestFormatRoundTrip) {
  checkpoint::Manifest m;
  m.step = 123;
  m.world_size = 2;
  m.model_fingerprint = "gpt2-124m  layers=12";
  m.total_bytes = 30;
  m.parts = {{0, 30, {{"params", 10}, {"adam_m", 20}}, 0, 2}};
  m.values = {{"seed", "1 2 3"}, {"empty", ""}};
  m.files = {{"rank-00000.bin", 0, 15, 0xdeadbeef}, {"rank-00001.bin", 15, 30, 7}};
  // One part is format version 1, byte for byte as trainbench wrote it before checkpoints had parts (the checksum
  // line covers the text before it, so equal text means an equal file).
  const std::string text = checkpoint::FormatManifest(m);
  EXPECT_EQ(text.substr(0, text.find("end\n") + 4),
            "# trainbench checkpoint: complete because this file exists; each file holds the byte range [begin, end)\n"
            "# of the buffers laid end to end; file lines: name begin end bytes crc32c\n"
            "format trainbench-checkpoint 1\nstep 123\nworld_size 2\nmodel_fingerprint gpt2-124m  layers=12\n"
            "total_bytes 30\nbuffer params 10\nbuffer adam_m 20\nmeta empty \nmeta seed 1 2 3\n"
            "file rank-00000.bin 0 15 15 deadbeef\nfile rank-00001.bin 15 30 15 00000007\nend\n");
  const checkpoint::Manifest back = checkpoint::ParseManifest(text, "m");
  EXPECT_EQ(back.step, 123);
  EXPECT_EQ(back.model_fingerprint, m.model_fingerprint);
  ASSERT_EQ(back.parts.size(), 1u);
  EXPECT_EQ(back.parts[0].buffers, m.parts[0].buffers);
  EXPECT_EQ(back.parts[0].bytes, 30u);
  EXPECT_EQ(back.parts[0].file_count, 2u);
  EXPECT_EQ(back.values, m.values);
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files[0].crc32c, 0xdeadbeefu);
  EXPECT_EQ(back.files[1].begin, 15u);
  m.files[1].begin = 16;  // a gap between slices
  EXPECT_NE(InputErrorOf([&] { checkpoint::ParseManifest(checkpoint::FormatManifest(m), "m"); }).find("starting at byte 15"),
            std::string::npos);
}

// A manifest of three parts (pipeline stages x tensor ranks) with 2, 1 and 1 replicas: format version 2, each part's
// bytes and buffers, its slice files laid after the parts before it.
checkpoint::Manifest ThreeParts() {
  checkpoint::Manifest m;
  m.step = 7;
  m.world_size = 4;
  m.model_fingerprint = "tiny";
  m.total_bytes = 60;
  m.parts = {{0, 30, {{"params", 10}, {"adam_m", 20}}, 0, 2},
             {30, 20, {{"params", 5}, {"adam_m", 15}}, 2, 1},
             {50, 10, {{"params", 10}}, 3, 1}};
  m.files = {{"part-00000-slice-00000.bin", 0, 15, 1},
             {"part-00000-slice-00001.bin", 15, 30, 2},
             {"part-00001-slice-00000.bin", 30, 50, 3},
             {"part-00002-slice-00000.bin", 50, 60, 4}};
  return m;
}

TEST(Checkpoint, PartsManifestRoundTrip) {
  checkpoint::Manifest m = ThreeParts();
  const std::string text = checkpoint::FormatManifest(m);
  EXPECT_NE(text.find("format trainbench-checkpoint 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("parts 3\npart 0 30\npart_buffer 0 params 10\npart_buffer 0 adam_m 20\npart 1 20\n"),
            std::string::npos)
      << text;
  const checkpoint::Manifest back = checkpoint::ParseManifest(text, "m");
  ASSERT_EQ(back.parts.size(), 3u);
  for (size_t p = 0; p < 3; ++p) {
    EXPECT_EQ(back.parts[p].begin, m.parts[p].begin) << p;
    EXPECT_EQ(back.parts[p].bytes, m.parts[p].bytes) << p;
    EXPECT_EQ(back.parts[p].buffers, m.parts[p].buffers) << p;
    EXPECT_EQ(back.parts[p].first_file, m.parts[p].first_file) << p;
    EXPECT_EQ(back.parts[p].file_count, m.parts[p].file_count) << p;
  }
  // A part without its slice: the manifest does not describe a whole checkpoint.
  m.files.erase(m.files.begin() + 2);
  m.world_size = 3;
  EXPECT_NE(InputErrorOf([&] { checkpoint::ParseManifest(checkpoint::FormatManifest(m), "m"); })
                .find("file line 2 is not part-00001-slice-00000.bin starting at byte 30"),
            std::string::npos);
  m = ThreeParts();
  m.parts[1].buffers[1].second = 16;  // buffers that do not make up the part
  EXPECT_NE(InputErrorOf([&] { checkpoint::ParseManifest(checkpoint::FormatManifest(m), "m"); })
                .find("part 1's buffer sizes do not add up to its bytes"),
            std::string::npos);
}

TEST(Checkpoint, LayOutSlicesSharesEachPartAmongItsReplicas) {
  // Ranks 0 and 2 hold part 0 (12 bytes), ranks 1 and 3 part 1 (7 bytes): tensor parallel innermost.
  const checkpoint::SliceLayout layout = checkpoint::LayOutSlices({0, 1, 0, 1}, {12, 7, 12, 7}, 2);
  EXPECT_EQ(layout.total_bytes, 19u);
  ASSERT_EQ(layout.files.size(), 4u);
  EXPECT_EQ(layout.files[layout.file_of_rank[2]].name, "part-00000-slice-00001.bin");
  EXPECT_EQ(layout.files[layout.file_of_rank[2]].begin, 6u);
  EXPECT_EQ(layout.files[layout.file_of_rank[1]].name, "part-00001-slice-00000.bin");
  EXPECT_EQ(layout.files[layout.file_of_rank[1]].begin, 12u);
  EXPECT_EQ(layout.files[layout.file_of_rank[3]].end, 19u);
  // One part: the data parallel names, rank by rank.
  EXPECT_EQ(checkpoint::LayOutSlices({0, 0}, {5, 5}, 1).files[1].name, "rank-00001.bin");
  EXPECT_NE(InputErrorOf([] { checkpoint::LayOutSlices({0, 0}, {5, 5}, 2); }).find("no rank holds part 1"),
            std::string::npos);
  EXPECT_NE(InputErrorOf([] { checkpoint::LayOutSlices({0, 0}, {5, 6}, 1); }).find("both hold part 0"),
            std::string::npos);
}

// Part `part`'s state: its own sizes and bytes, the same on each of its replicas.
TestState PartState(int part) {
  TestState state({1001u + 40u * part, 4099u - 7u * part, 777u + 3u * part});
  state.Fill(20 + part);
  return state;
}

// Two parts, rank r holding part r % 2 (tensor parallel innermost): at 4 ranks each part has two replicas.
CheckpointPart HalfPart() { return {Rank() % 2, 2}; }

// Saves `state`, this rank's HalfPart, as step 1 under `dir`.
void SaveHalfPart(const std::string& dir, TestState& state) {
  CheckpointOptions options = Options(dir);
  options.part = HalfPart();
  Checkpointer checkpointer(MPI_COMM_WORLD, options, state.Buffers(), state.Copier());
  checkpointer.Save(Meta(1));
}

TEST(Checkpoint, PartsRoundTripIsBitExact) {
  for (CheckpointMode mode : {CheckpointMode::kSync, CheckpointMode::kAsync}) {
    SharedTempDir root;
    TestState state = PartState(HalfPart().index);
    const TestState saved = state;
    CheckpointOptions options = Options(root.path(), mode);
    options.part = HalfPart();
    options.verify = true;
    {
      Checkpointer checkpointer(MPI_COMM_WORLD, options, state.Buffers(), state.Copier());
      EXPECT_EQ(checkpointer.state_bytes(), 5877u + 5913u);  // both parts
      checkpointer.Save(Meta(3));
      checkpointer.Drain();
      ASSERT_EQ(checkpointer.events().size(), 1u);
      EXPECT_TRUE(checkpointer.events()[0].ok) << checkpointer.events()[0].error;
    }
    const std::string step_dir = root / "step-00000003";
    std::vector<std::string> expected = {"manifest.txt"};
    for (int part = 0; part < 2; ++part) {
      for (int slice = 0; slice < Size() / 2; ++slice) expected.push_back(checkpoint::PartFileName(part, slice));
    }
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(Entries(step_dir), expected);
    const std::string manifest = checkpoint::ReadTextFile(step_dir + "/manifest.txt", "manifest");
    EXPECT_NE(manifest.find("parts 2\npart 0 5877\n"), std::string::npos) << manifest;
    EXPECT_NE(manifest.find("part 1 5913\npart_buffer 1 params 1041\n"), std::string::npos) << manifest;

    state.Clear();
    const LoadedCheckpoint loaded = Load(root.path(), state, MPI_COMM_WORLD, 500, HalfPart());
    EXPECT_EQ(state.data, saved.data) << CheckpointModeName(mode);
    EXPECT_EQ(loaded.bytes, HalfPart().index == 0 ? 5877u : 5913u);
    EXPECT_EQ(loaded.saved_world_size, Size());
  }
}

TEST(Checkpoint, PartsLoadWithAnotherNumberOfReplicas) {
  SharedTempDir root;
  {
    TestState state = PartState(HalfPart().index);
    SaveHalfPart(root.path(), state);
  }
  // The first two ranks: one replica of each part (at 4 ranks, half the replicas that wrote it).
  MPI_Comm pair = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, Rank() < 2 ? 0 : MPI_UNDEFINED, Rank(), &pair);
  if (pair != MPI_COMM_NULL) {
    TestState state = PartState(Rank() % 2);
    const TestState saved = state;
    state.Clear();
    const LoadedCheckpoint info = Load(root.path(), state, pair, 333, {Rank() % 2, 2});
    EXPECT_EQ(state.data, saved.data);
    EXPECT_EQ(info.read_bytes, info.bytes);  // the only replica reads its part's every file
    MPI_Comm_free(&pair);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Checkpoint, AnotherLayoutIsRefused) {
  SharedTempDir root;
  TestState state = PartState(HalfPart().index);
  SaveHalfPart(root / "two", state);
  TestState whole;
  {
    Checkpointer checkpointer(MPI_COMM_WORLD, Options(root / "one"), whole.Buffers(), whole.Copier());
    checkpointer.Save(Meta(1));
  }
  ExpectAgreedInputError(InputErrorOf([&] { Load(root / "two", whole); }),
                         "holds the state in 2 parts, this run in 1 part (one per pipeline stage and tensor "
                         "parallel rank): resume with the same layout");
  ExpectAgreedInputError(InputErrorOf([&] { Load(root / "one", state, MPI_COMM_WORLD, 1000, HalfPart()); }),
                         "holds the state in 1 part, this run in 2 parts");
  // The parts swapped: each rank's part holds the other's buffers.
  TestState swapped = PartState(1 - HalfPart().index);
  ExpectAgreedInputError(InputErrorOf([&] { Load(root / "two", swapped, MPI_COMM_WORLD, 1000, HalfPart()); }),
                         " part 0 of 2 parts holds params 1001 B, adam_m 4099 B, adam_v 777 B; this run has params 1041 B");
}

TEST(Checkpoint, MissingPartSliceIsRefused) {
  SharedTempDir root;
  TestState state = PartState(HalfPart().index);
  SaveHalfPart(root.path(), state);
  const std::string victim = root / "step-00000001/part-00001-slice-00000.bin";
  OnRankZero([&] { fs::remove(victim); });
  ExpectAgreedInputError(InputErrorOf([&] { Load(root.path(), state, MPI_COMM_WORLD, 1000, HalfPart()); }),
                         "checkpoint file " + victim);
}

// A replica of part 1 cannot write its slice: the checkpoint never gets a manifest, so it does not exist.
TEST(Checkpoint, PartSliceThatFailsLeavesNoCheckpoint) {
  SharedTempDir root;
  TestState state = PartState(HalfPart().index);
  DeviceCopier copier = state.Copier();
  copier.to_host = [&](void* host, const void* device, uint64_t bytes) {
    if (Rank() == Size() - 1) throw RuntimeError("emulated device error");
    std::memcpy(host, device, bytes);
  };
  CheckpointOptions options = Options(root.path());
  options.part = HalfPart();
  options.on_error = CheckpointErrorPolicy::kWarn;
  {
    Checkpointer checkpointer(MPI_COMM_WORLD, options, state.Buffers(), copier);
    checkpointer.Save(Meta(1));
    ASSERT_EQ(checkpointer.events().size(), 1u);
    EXPECT_FALSE(checkpointer.events()[0].ok);
    EXPECT_NE(checkpointer.events()[0].error.find("emulated device error"), std::string::npos);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_TRUE(Entries(root.path()).empty());
  EXPECT_NE(InputErrorOf([&] { ResolveCheckpoint(root.path()); }).find("holds no complete checkpoint"),
            std::string::npos);
}

TEST(Checkpoint, PartsWithoutARankOrWithOtherStateAreRefused) {
  SharedTempDir root;
  TestState state = PartState(HalfPart().index);
  CheckpointOptions options = Options(root.path());
  options.part = {Rank(), Size() + 1};
  ExpectAgreedInputError(InputErrorOf([&] { Checkpointer(MPI_COMM_WORLD, options, state.Buffers(), state.Copier()); }),
                         "no rank holds part " + std::to_string(Size()));
  TestState other = PartState(Rank());  // replicas of one part with different sizes
  options.part = {};
  ExpectAgreedInputError(InputErrorOf([&] { Checkpointer(MPI_COMM_WORLD, options, other.Buffers(), other.Copier()); }),
                         "both hold part 0");
}

// A copier whose device-to-host copy fails on one rank: that rank's slice write fails, every rank learns it.
TEST(Checkpoint, OneRanksFailureIsAgreedByAll) {
  SharedTempDir root;
  TestState state;
  state.Fill(4);
  DeviceCopier copier = state.Copier();
  const int failing = Size() - 1;
  copier.to_host = [&](void* host, const void* device, uint64_t bytes) {
    if (Rank() == failing) throw RuntimeError("emulated device error");
    std::memcpy(host, device, bytes);
  };
  // The failing rank's slice must include device bytes: the emulated device buffer is the last one.
  CheckpointOptions options = Options(root.path());
  options.on_error = CheckpointErrorPolicy::kWarn;
  {
    Checkpointer checkpointer(MPI_COMM_WORLD, options, state.Buffers(), copier);
    checkpointer.Save(Meta(1));
    ASSERT_EQ(checkpointer.events().size(), 1u);
    const CheckpointEvent& event = checkpointer.events()[0];
    EXPECT_FALSE(event.ok);
    EXPECT_NE(event.error.find("checkpoint at step 1 failed on rank " + std::to_string(failing) + ": cannot write "),
              std::string::npos)
        << event.error;
    EXPECT_NE(event.error.find("emulated device error"), std::string::npos) << event.error;
  }
  EXPECT_TRUE(Entries(root.path()).empty());  // the partial files are gone
  options.on_error = CheckpointErrorPolicy::kFail;
  Checkpointer checkpointer(MPI_COMM_WORLD, options, state.Buffers(), copier);
  bool threw = false;
  try {
    checkpointer.Save(Meta(2));
  } catch (const RuntimeError& e) {
    threw = std::string(e.what()).find("emulated device error") != std::string::npos;
  }
  EXPECT_TRUE(OnAllRanks(threw));
}

// A tmpfs of `bytes` mounted on a fresh directory by rank 0 (every rank of this node sees it); skipped, with
// the reason, where mounting is not allowed.
class SmallTmpfs {
 public:
  SmallTmpfs(const SharedTempDir& root, uint64_t bytes) : path_(root / "tmpfs") {
    std::string problem;
    if (Rank() == 0) {
      fs::create_directories(path_);
      const std::string data = "size=" + std::to_string(bytes);
      if (::mount("tmpfs", path_.c_str(), "tmpfs", 0, data.c_str()) != 0) {
        problem = "cannot mount a tmpfs on " + path_ + ": " + OsMessage(errno);
      }
    }
    problem_ = BroadcastFromZero(problem);
    mounted_ = problem_.empty();
  }
  ~SmallTmpfs() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (Rank() == 0 && mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  const std::string& problem() const { return problem_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string problem_;
  bool mounted_ = false;
};

TEST(Checkpoint, DiskFullKeepsThePreviousCheckpoint) {
  SharedTempDir root;
  // Room for one checkpoint of about 1 MiB (plus a page per file), not for two.
  TestState state({300001, 400003, 350007});
  const uint64_t checkpoint_bytes = 300001 + 400003 + 350007;
  SmallTmpfs tmpfs(root, checkpoint_bytes * 3 / 2);
  if (!tmpfs.problem().empty()) GTEST_SKIP() << tmpfs.problem();
  const std::string dir = tmpfs.path() + "/ckpt";

  state.Fill(1);
  const TestState first = state;
  CheckpointOptions options = Options(dir);
  options.block_bytes = 64 << 10;
  options.on_error = CheckpointErrorPolicy::kWarn;
  {
    Checkpointer checkpointer(MPI_COMM_WORLD, options, state.Buffers(), state.Copier());
    checkpointer.Save(Meta(1));
    state.Fill(2);
    checkpointer.Save(Meta(2));  // warn: no exception, a failed event
    ASSERT_EQ(checkpointer.events().size(), 2u);
    EXPECT_TRUE(checkpointer.events()[0].ok);
    const CheckpointEvent& failed = checkpointer.events()[1];
    EXPECT_FALSE(failed.ok);
    EXPECT_NE(failed.error.find("checkpoint at step 2 failed on rank "), std::string::npos) << failed.error;
    EXPECT_NE(failed.error.find("cannot write " + dir + "/step-00000002.partial/rank-"), std::string::npos)
        << failed.error;
    EXPECT_NE(failed.error.find("No space left on device"), std::string::npos) << failed.error;
  }
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"step-00000001"});  // the failed one left nothing

  // Async with fail: the write fails in the background; the next Save throws on every rank.
  options.mode = CheckpointMode::kAsync;
  options.on_error = CheckpointErrorPolicy::kFail;
  {
    Checkpointer checkpointer(MPI_COMM_WORLD, options, state.Buffers(), state.Copier());
    checkpointer.Save(Meta(3));
    std::string message;
    try {
      checkpointer.Save(Meta(4));
    } catch (const RuntimeError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("checkpoint at step 3 failed on rank "), std::string::npos) << message;
    EXPECT_TRUE(OnAllRanks(message.find("No space left on device") != std::string::npos));
  }
  // Sync with fail: Save itself throws on every rank.
  options.mode = CheckpointMode::kSync;
  {
    Checkpointer checkpointer(MPI_COMM_WORLD, options, state.Buffers(), state.Copier());
    bool threw = false;
    try {
      checkpointer.Save(Meta(5));
    } catch (const RuntimeError& e) {
      threw = std::string(e.what()).find("No space left on device") != std::string::npos;
    }
    EXPECT_TRUE(OnAllRanks(threw));
  }
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"step-00000001"});
  state.Clear();
  EXPECT_EQ(Load(dir, state).meta.step, 1);
  EXPECT_EQ(state.data, first.data);
}

}  // namespace
}  // namespace tb
