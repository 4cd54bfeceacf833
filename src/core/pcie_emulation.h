// --emulate-pcie (collectives, p2p, train): a node's NVLink GPUs measured as if they were joined by PCIe only. NCCL is
// told, through its environment, to leave NVLink alone: no GPU peer-to-peer (so intra-node traffic goes through host
// memory, NCCL's SHM transport, or its network transport where NCCL finds that faster) and no NVLink SHARP. The
// variables and why each (NCCL 2.28, src/graph/paths.cc and src/transport/nvls.cc):
//   NCCL_P2P_DISABLE=1   no P2P transport (CUDA peer access over NVLink or PCIe); it wins over NCCL_P2P_LEVEL, which
//                        NCCL then does not read, so that one is neither set nor checked
//   NCCL_NVLS_ENABLE=0   no NVLink SHARP (NVSwitch multicast), which P2P_DISABLE does not turn off
// and one that must not be set: NCCL_SHM_DISABLE (other than 0), which would send the traffic through the network
// instead of host memory. A variable the user already set to the value wanted is fine; to another, a conflict.
// NCCL reads its parameters once, when its first communicator is made: the variables are set on every rank before.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tb {

// The root attribute emulated_fabric of an emulated run.
inline constexpr const char* kEmulatedPcie = "pcie";

struct EnvSetting {
  std::string name;
  std::string value;
};

// A variable's value in an environment; nullopt when it is not set.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// What --emulate-pcie sets, given the environment `env` (pure: `env` is all it reads). Throws InputError, one line
// naming the first variable `env` already holds at a conflicting value: "--emulate-pcie: NCCL_P2P_DISABLE=0 is set in
// the environment; it would re-enable NVLink peer-to-peer (unset it, or leave out --emulate-pcie)".
std::vector<EnvSetting> EmulatedPcieEnvironment(const EnvLookup& env);

// "NCCL_P2P_DISABLE=1, NCCL_NVLS_ENABLE=0": the settings as the report and the console say them.
std::string DescribeEnvironment(const std::vector<EnvSetting>& settings);

// This process's environment (getenv), as an EnvLookup reads it.
std::optional<std::string> ProcessEnvironment(const std::string& name);

// Sets each variable in this process's environment (setenv, replacing a value); RuntimeError naming the variable when
// setenv fails.
void SetEnvironment(const std::vector<EnvSetting>& settings);

}  // namespace tb
