// MeasureDeviceGemmFlops for a build without CUDA.
#include "error.h"
#include "peaks.h"

namespace tb {

double MeasureDeviceGemmFlops(double) {
  throw RuntimeError("MeasureDeviceGemmFlops is part of the CUDA backend, and this trainbench was built without CUDA "
                     "(reconfigure with -DTRAINBENCH_WITH_CUDA=ON on a machine with the CUDA toolkit)");
}

double MeasureDeviceCopyBytesPerSecond(double) {
  throw RuntimeError("MeasureDeviceCopyBytesPerSecond is part of the CUDA backend, and this trainbench was built "
                     "without CUDA (reconfigure with -DTRAINBENCH_WITH_CUDA=ON on a machine with the CUDA toolkit)");
}

}  // namespace tb
