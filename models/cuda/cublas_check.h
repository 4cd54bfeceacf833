// TB_CHECK_CUBLAS for cuBLAS and cuBLASLt calls (both return cublasStatus_t): a failed call throws RuntimeError
// carrying the expression, file:line, cuBLAS's status name and text, and a hint. For the CUDA backend's .cu/.cc
// files only; public headers stay free of CUDA includes.
#pragma once

#include <cublas_api.h>

#include <string>

#include "error.h"

namespace tb::cuda_detail {

// What to look at first for the statuses a training run meets; "" when there is nothing to add.
inline const char* CublasHint(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "cuBLAS could not start: is a GPU visible (nvidia-smi, CUDA_VISIBLE_DEVICES) and the driver loaded?";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "out of GPU memory: use a smaller batch or fewer layers, or look for other processes in nvidia-smi";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "cuBLAS rejected a size, leading dimension, pointer alignment or epilogue setting of this call";
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "this GPU or cuBLAS version does not support this combination of types, layouts and epilogue";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "a cuBLAS kernel failed to run; rerun under compute-sanitizer (the CUDA context may be unusable now)";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "cuBLAS failed internally, often after an earlier CUDA error: look for an earlier failure";
    default:
      return "";
  }
}

[[noreturn]] inline void ThrowCublasError(cublasStatus_t status, const char* what, const char* file, int line) {
  throw RuntimeError(FormatFailure(what, file, line,
                                   std::string(cublasGetStatusName(status)) + ": " + cublasGetStatusString(status),
                                   CublasHint(status)));
}

}  // namespace tb::cuda_detail

#define TB_CHECK_CUBLAS(expr)                                                                 \
  do {                                                                                        \
    const cublasStatus_t tb_cublas_status_ = (expr);                                          \
    if (tb_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                           \
      ::tb::cuda_detail::ThrowCublasError(tb_cublas_status_, #expr, __FILE__, __LINE__);      \
  } while (0)
