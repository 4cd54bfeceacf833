#include "fault.h"

#include <cstdlib>
#include <string>

#include "error.h"
#include "inject.h"

namespace tb {

void MaybeInjectFault(int world_rank) {
  const char* spec = std::getenv("TRAINBENCH_TEST_FAULT");
  if (!spec) return;
  std::string text(spec);
  size_t at = text.find("@rank=");
  if (at == std::string::npos) throw InputError("TRAINBENCH_TEST_FAULT='" + text + "' is not '<fail|hang>@rank=<r>'");
  std::string kind = text.substr(0, at);
  if (std::atoi(text.c_str() + at + 6) != world_rank) return;
  if (kind == "fail") throw RuntimeError("injected fault (TRAINBENCH_TEST_FAULT=" + text + ")");
  if (kind == "hang") BlockForever();
  throw InputError("TRAINBENCH_TEST_FAULT kind '" + kind + "' is not fail or hang");
}

std::function<void()> TestFaultHook(int world_rank) {
  if (!std::getenv("TRAINBENCH_TEST_FAULT")) return {};
  return [world_rank] { MaybeInjectFault(world_rank); };
}

}  // namespace tb
