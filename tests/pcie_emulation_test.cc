// --emulate-pcie's environment (src/core/pcie_emulation.h): what it sets, which values already set conflict (one
// InputError line naming the variable), and that setting it reaches this process's environment.
#include "pcie_emulation.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "error.h"

namespace tb {
namespace {

// An environment holding exactly `vars`.
EnvLookup EnvironmentOf(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// The message of the InputError EmulatedPcieEnvironment throws in `vars` ("" when it throws none).
std::string ConflictIn(std::map<std::string, std::string> vars) {
  try {
    EmulatedPcieEnvironment(EnvironmentOf(std::move(vars)));
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(PcieEmulation, SetsPeerToPeerAndNvlinkSharpOff) {
  const std::vector<EnvSetting> settings = EmulatedPcieEnvironment(EnvironmentOf({}));
  ASSERT_EQ(settings.size(), 2u);
  EXPECT_EQ(settings[0].name, "NCCL_P2P_DISABLE");
  EXPECT_EQ(settings[0].value, "1");
  EXPECT_EQ(settings[1].name, "NCCL_NVLS_ENABLE");
  EXPECT_EQ(settings[1].value, "0");
  EXPECT_EQ(DescribeEnvironment(settings), "NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0");
  EXPECT_EQ(DescribeEnvironment({}), "");
}

TEST(PcieEmulation, TheSameValueAlreadySetIsFine) {
  const std::vector<EnvSetting> settings = EmulatedPcieEnvironment(
      EnvironmentOf({{"NCCL_P2P_DISABLE", "1"}, {"NCCL_NVLS_ENABLE", "0"}, {"NCCL_SHM_DISABLE", "0"}}));
  EXPECT_EQ(DescribeEnvironment(settings), "NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0");
}

TEST(PcieEmulation, OtherVariablesAreLeftAlone) {
  // NCCL_P2P_DISABLE=1 wins over NCCL_P2P_LEVEL (NCCL does not read the level then): no conflict.
  const std::vector<EnvSetting> settings = EmulatedPcieEnvironment(
      EnvironmentOf({{"NCCL_P2P_LEVEL", "NVL"}, {"NCCL_DEBUG", "INFO"}, {"NCCL_IB_DISABLE", "1"}}));
  EXPECT_EQ(DescribeEnvironment(settings), "NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0");
}

TEST(PcieEmulation, AConflictingValueIsOneLineNamingTheVariable) {
  EXPECT_EQ(ConflictIn({{"NCCL_P2P_DISABLE", "0"}}),
            "--emulate-pcie: NCCL_P2P_DISABLE=0 is set in the environment; it would re-enable NVLink peer-to-peer "
            "(unset it, or leave out --emulate-pcie)");
  EXPECT_EQ(ConflictIn({{"NCCL_NVLS_ENABLE", "1"}}),
            "--emulate-pcie: NCCL_NVLS_ENABLE=1 is set in the environment; it would re-enable NVLink SHARP (unset it, "
            "or leave out --emulate-pcie)");
  EXPECT_EQ(ConflictIn({{"NCCL_SHM_DISABLE", "1"}}),
            "--emulate-pcie: NCCL_SHM_DISABLE=1 is set in the environment; it would send intra-node traffic through "
            "the network instead of host memory (unset it, or leave out --emulate-pcie)");
  // NCCL reads an empty NCCL_P2P_DISABLE as 0, NVLS_ENABLE=2 as "when the GPUs support it".
  EXPECT_NE(ConflictIn({{"NCCL_P2P_DISABLE", ""}}).find("NCCL_P2P_DISABLE= is set"), std::string::npos);
  EXPECT_NE(ConflictIn({{"NCCL_NVLS_ENABLE", "2"}}).find("NCCL_NVLS_ENABLE=2 is set"), std::string::npos);
  // The first conflict in the order the variables are listed is the one named.
  EXPECT_NE(ConflictIn({{"NCCL_NVLS_ENABLE", "1"}, {"NCCL_P2P_DISABLE", "0"}}).find("NCCL_P2P_DISABLE=0"),
            std::string::npos);
}

TEST(PcieEmulation, SettingReachesTheProcessEnvironment) {
  const char* names[] = {"NCCL_P2P_DISABLE", "NCCL_NVLS_ENABLE", "NCCL_SHM_DISABLE"};
  for (const char* name : names) unsetenv(name);
  EXPECT_EQ(ProcessEnvironment("NCCL_P2P_DISABLE"), std::nullopt);
  SetEnvironment(EmulatedPcieEnvironment(ProcessEnvironment));
  EXPECT_EQ(ProcessEnvironment("NCCL_P2P_DISABLE"), "1");
  EXPECT_EQ(ProcessEnvironment("NCCL_NVLS_ENABLE"), "0");
  EXPECT_EQ(ProcessEnvironment("NCCL_SHM_DISABLE"), std::nullopt);
  // Once set, a second --emulate-pcie in the same process finds its own values: no conflict.
  EXPECT_NO_THROW(EmulatedPcieEnvironment(ProcessEnvironment));
  for (const char* name : names) unsetenv(name);
}

}  // namespace
}  // namespace tb
