#include "pcie_emulation.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "error.h"

namespace tb {
namespace {

// A variable --emulate-pcie sets (`value`) or requires unset or 0 (`set` false), and what another value would do.
struct Requirement {
  std::string name;
  std::string value;
  bool set;
  std::string otherwise;  // "it would re-enable NVLink peer-to-peer"
};

const std::vector<Requirement>& Requirements() {
  static const std::vector<Requirement> requirements = {
      {"NCCL_P2P_DISABLE", "1", true, "it would re-enable NVLink peer-to-peer"},
      {"NCCL_NVLS_ENABLE", "0", true, "it would re-enable NVLink SHARP"},
      {"NCCL_SHM_DISABLE", "0", false,
       "it would send intra-node traffic through the network instead of host memory"},
  };
  return requirements;
}

}  // namespace

std::vector<EnvSetting> EmulatedPcieEnvironment(const EnvLookup& env) {
  std::vector<EnvSetting> settings;
  for (const Requirement& r : Requirements()) {
    const std::optional<std::string> current = env(r.name);
    if (current && *current != r.value) {
      throw InputError("--emulate-pcie: " + r.name + "=" + *current + " is set in the environment; " + r.otherwise +
                       " (unset it, or leave out --emulate-pcie)");
    }
    if (r.set) settings.push_back({r.name, r.value});
  }
  return settings;
}

std::string DescribeEnvironment(const std::vector<EnvSetting>& settings) {
  std::string text;
  for (const EnvSetting& s : settings) text += (text.empty() ? "" : ", ") + s.name + "=" + s.value;
  return text;
}

std::optional<std::string> ProcessEnvironment(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

void SetEnvironment(const std::vector<EnvSetting>& settings) {
  for (const EnvSetting& s : settings) {
    if (setenv(s.name.c_str(), s.value.c_str(), 1) != 0) {
      throw RuntimeError("cannot set " + s.name + "=" + s.value + " in the environment: " + std::strerror(errno));
    }
  }
}

}  // namespace tb
