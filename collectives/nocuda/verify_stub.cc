// verify.h's device functions in a build without CUDA: device buffers exist only with the NCCL backend, so a call
// here says why it cannot run rather than reading host memory as if it were a device's.
#include <string>

#include "error.h"
#include "verify.h"

namespace tb {
namespace {

[[noreturn]] void ThrowBuiltWithoutCuda(const char* function) {
  throw RuntimeError(std::string("tb::") + function +
                     " (the collectives' check on the device) is part of the CUDA backend, and this trainbench was "
                     "built without CUDA (reconfigure with -DTRAINBENCH_WITH_CUDA=ON, or use --backend cpu)");
}

}  // namespace

void FillInputOnDevice(DataType, void*, uint64_t, int) { ThrowBuiltWithoutCuda("FillInputOnDevice"); }
void FillSentinelOnDevice(DataType, void*, uint64_t) { ThrowBuiltWithoutCuda("FillSentinelOnDevice"); }
WrongElements CountWrongOnDevice(DataType, const void*, uint64_t, const ExpectedLayout&) {
  ThrowBuiltWithoutCuda("CountWrongOnDevice");
}

}  // namespace tb
