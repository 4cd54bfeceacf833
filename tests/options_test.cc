// Validation of `trainbench collectives` flags: every documented bad input is one InputError naming the flag.
#include <gtest/gtest.h>

#include "error.h"
#include "mpi_communicator.h"
#include "sweep_options.h"

namespace tb {
namespace {

std::string ErrorOf(const CollectivesFlags& flags, int n_ranks = 4, const Communicator* comm = nullptr) {
  try {
    ValidateCollectivesFlags(flags, n_ranks, comm);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(CollectivesFlags, DefaultsAreValid) {
  SweepOptions o = ValidateCollectivesFlags(CollectivesFlags{}, 4, nullptr);
  ASSERT_FALSE(o.sizes.empty());
  EXPECT_EQ(o.sizes.front(), 8u);
  EXPECT_EQ(o.sizes.back(), 32u << 20);
  EXPECT_EQ(o.ops.size(), 1u);
  EXPECT_TRUE(o.in_place && o.out_of_place);
}

CollectivesFlags Geometric(std::string min, std::string max, int64_t factor) {
  CollectivesFlags f;
  f.min_bytes = std::move(min);
  f.max_bytes = std::move(max);
  f.step_factor = factor;
  return f;
}

TEST(CollectivesFlags, GeometricSizes) {
  EXPECT_EQ(ValidateCollectivesFlags(Geometric("8", "1K", 4), 2, nullptr).sizes,
            (std::vector<uint64_t>{8, 32, 128, 512}));
  EXPECT_EQ(ValidateCollectivesFlags(Geometric("8", "1G", 2), 2, nullptr).sizes.back(), 1ULL << 30);
}

TEST(CollectivesFlags, ExplicitListAndAllOps) {
  CollectivesFlags f;
  f.sizes = "1K,64K";
  f.ops = "all";
  SweepOptions o = ValidateCollectivesFlags(f, 2, nullptr);
  EXPECT_EQ(o.sizes, (std::vector<uint64_t>{1024, 65536}));
  EXPECT_EQ(o.ops.size(), 7u);
}

TEST(CollectivesFlags, EachBadInputNamesItsFlag) {
  auto with = [](auto change) {
    CollectivesFlags f;
    change(f);
    return f;
  };
  EXPECT_NE(ErrorOf(with([](auto& f) { f.min_bytes = "1Q"; })).find("-b/--minbytes"), std::string::npos);
  EXPECT_NE(ErrorOf(with([](auto& f) { f.max_bytes = "1Q"; })).find("-e/--maxbytes"), std::string::npos);
  EXPECT_NE(ErrorOf(with([](auto& f) { f.min_bytes = "1M"; f.max_bytes = "1K"; })).find("is below -b/--minbytes"), std::string::npos);
  EXPECT_NE(ErrorOf(with([](auto& f) { f.min_bytes = "0"; })).find("-b/--minbytes"), std::string::npos);
  EXPECT_NE(ErrorOf(with([](auto& f) { f.ops = "all_reduce,allreduce"; })).find("unknown operation 'allreduce'"), std::string::npos);
  EXPECT_NE(ErrorOf(with([](auto& f) { f.ops = ","; })).find("--ops ',': empty item"), std::string::npos);
  EXPECT_NE(ErrorOf(with([](auto& f) { f.dtype = "float8"; })).find("unknown data type 'float8'"), std::string::npos);
  EXPECT_NE(ErrorOf(with([](auto& f) { f.redop = "prod"; })).find("--redop"), std::string::npos);
  EXPECT_NE(ErrorOf(with([](auto& f) { f.root = 4; })).find("--root 4"), std::string::npos);
  EXPECT_NE(ErrorOf(with([](auto& f) { f.modes = "sideways"; })).find("--modes"), std::string::npos);
  EXPECT_NE(ErrorOf(with([](auto& f) { f.sizes = "1K,0"; })).find("--sizes"), std::string::npos);
}

TEST(CollectivesSplit, PlansTheCommunicatorsOfEachSplit) {
  const NodeShape two_by_four{8, 2, 4, 4};
  const SplitPlan all = PlanSplit("all", two_by_four);
  EXPECT_EQ(all.communicators, 1);
  EXPECT_EQ(all.ranks, 8);
  EXPECT_EQ(all.nodes, 2);
  const SplitPlan intra = PlanSplit("intra", two_by_four);
  EXPECT_EQ(intra.communicators, 2);
  EXPECT_EQ(intra.ranks, 4);
  EXPECT_EQ(intra.nodes, 1);
  const SplitPlan inter = PlanSplit("inter", two_by_four);
  EXPECT_EQ(inter.communicators, 4);
  EXPECT_EQ(inter.ranks, 2);
  EXPECT_EQ(inter.nodes, 2);
}

TEST(CollectivesSplit, SplitsThatMakeNoSenseAreInputErrors) {
  auto error_of = [](const std::string& split, const NodeShape& shape) -> std::string {
    try {
      PlanSplit(split, shape);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of("inter", {4, 1, 4, 4}).find("--split inter needs ranks on at least 2 nodes"), std::string::npos);
  EXPECT_NE(error_of("intra", {2, 2, 1, 1}).find("--split intra needs at least 2 ranks per node"), std::string::npos);
  EXPECT_NE(error_of("intra", {5, 2, 2, 3}).find("the same number of ranks on every node"), std::string::npos);
  EXPECT_NE(error_of("inter", {5, 2, 2, 3}).find("2 to 3 ranks per node"), std::string::npos);
  EXPECT_NE(error_of("diagonal", {4, 2, 2, 2}).find("accepted: all, intra, inter"), std::string::npos);
  EXPECT_EQ(error_of("all", {5, 2, 2, 3}), "");  // one communicator of everyone needs no particular shape
}

TEST(CollectivesFlags, HalfPrecisionNeedsTheCudaBackend) {
  std::unique_ptr<Communicator> mpi = MakeMpiCommunicator(MPI_COMM_SELF);
  CollectivesFlags f;
  f.dtype = "bf16";
  EXPECT_NE(ErrorOf(f, 1, mpi.get()).find("needs the cuda backend"), std::string::npos);
  f.dtype = "double";
  EXPECT_EQ(ErrorOf(f, 1, mpi.get()), "");
}

}  // namespace
}  // namespace tb
