// Check macros for CUDA runtime and NCCL calls. A failed call throws RuntimeError carrying the expression,
// file:line, the library's own message and a hint; the top-level handler adds rank and host.
// Only for .cc/.cu files of the CUDA backend: public headers stay free of CUDA includes.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "error.h"

namespace tb::cuda_detail {

// What to look at first for the CUDA errors users actually meet on clusters; "" when there is nothing to add.
inline const char* CudaHint(cudaError_t error) {
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
      return "is CUDA_VISIBLE_DEVICES right, and does the number of ranks per node match the number of GPUs?";
    case cudaErrorInsufficientDriver:
    case cudaErrorCallRequiresNewerDriver:
      return "the NVIDIA driver is missing or older than the CUDA runtime this trainbench was built with "
             "(compare `nvidia-smi` with `trainbench info`)";
    case cudaErrorStubLibrary:
      return "the CUDA stub driver library was loaded instead of the real one: is LD_LIBRARY_PATH pointing at "
             "the toolkit's lib64/stubs?";
    case cudaErrorSystemDriverMismatch:
      return "the NVIDIA kernel module and user-space driver versions differ: reboot or reload the driver";
    case cudaErrorDevicesUnavailable:
      return "the GPU is busy or in exclusive-process mode (nvidia-smi -q | grep 'Compute Mode')";
    case cudaErrorMemoryAllocation:
      return "out of GPU memory: use a smaller batch or fewer layers, or look for other processes in nvidia-smi";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "this binary has no code for this GPU: reconfigure with -DCMAKE_CUDA_ARCHITECTURES=<this GPU's sm>";
    case cudaErrorECCUncorrectable:
      return "the GPU reported an uncorrectable ECC error: drain this node and check nvidia-smi -q -d ECC";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
      return "a kernel faulted; rerun under compute-sanitizer to find it (the CUDA context is unusable now)";
    default:
      return "";
  }
}

[[noreturn]] inline void ThrowCudaError(cudaError_t error, const char* what, const char* file, int line) {
  throw RuntimeError(FormatFailure(what, file, line,
                                   std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error),
                                   CudaHint(error)));
}

inline const char* NcclHint(ncclResult_t result) {
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      return "a rank may have died or the network failed; set NCCL_DEBUG=WARN to see NCCL's log";
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return "set NCCL_DEBUG=WARN to see which argument NCCL rejected";
    default:
      return "set NCCL_DEBUG=WARN to see NCCL's log";
  }
}

// The text of a failed NCCL call. `comm` may be null: NCCL keeps its last error per process, and the argument is
// there for future NCCL versions.
inline std::string NcclFailure(ncclResult_t result, ncclComm_t comm, const char* what, const char* file, int line) {
  std::string message = ncclGetErrorString(result);
  const char* last_error = ncclGetLastError(comm);
  if (last_error != nullptr && last_error[0] != '\0') message += " (last NCCL error: " + std::string(last_error) + ")";
  return FormatFailure(what, file, line, message, NcclHint(result));
}

[[noreturn]] inline void ThrowNcclError(ncclResult_t result, ncclComm_t comm, const char* what, const char* file,
                                        int line) {
  throw RuntimeError(NcclFailure(result, comm, what, file, line));
}

}  // namespace tb::cuda_detail

#define TB_CHECK_CUDA(expr)                                                                   \
  do {                                                                                        \
    const cudaError_t tb_cuda_error_ = (expr);                                                \
    if (tb_cuda_error_ != cudaSuccess)                                                        \
      ::tb::cuda_detail::ThrowCudaError(tb_cuda_error_, #expr, __FILE__, __LINE__);           \
  } while (0)

// After a kernel launch: launch errors (bad configuration, missing kernel image) surface here, not at the launch.
#define TB_CHECK_CUDA_LAUNCH()                                                                        \
  do {                                                                                                \
    const cudaError_t tb_cuda_error_ = cudaGetLastError();                                            \
    if (tb_cuda_error_ != cudaSuccess)                                                                \
      ::tb::cuda_detail::ThrowCudaError(tb_cuda_error_, "kernel launch (cudaGetLastError)", __FILE__, __LINE__); \
  } while (0)

// For NCCL calls that return at once (blocking communicators, group start, version); operations on a
// non-blocking communicator may also return ncclInProgress, which NcclCommunicator settles itself.
#define TB_CHECK_NCCL(expr)                                                                    \
  do {                                                                                         \
    const ncclResult_t tb_nccl_result_ = (expr);                                               \
    if (tb_nccl_result_ != ncclSuccess)                                                        \
      ::tb::cuda_detail::ThrowNcclError(tb_nccl_result_, nullptr, #expr, __FILE__, __LINE__);  \
  } while (0)
