// fp32 in registers, fp32 or bf16 in memory: device code that reads or writes either goes through these (a bf16
// store rounds to nearest even). Shared by kernels.cu and moe_kernels.cu; device code only.
#pragma once

#include <cuda_bf16.h>

#include "cuda/kernels.h"  // Bf16

namespace tb::gpu {

__device__ inline float LoadFloat(const float* p) { return *p; }
__device__ inline float LoadFloat(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ inline float LoadFloat(const Bf16* p) { return LoadFloat(reinterpret_cast<const __nv_bfloat16*>(p)); }
__device__ inline void StoreFloat(float* p, float value) { *p = value; }
__device__ inline void StoreFloat(Bf16* p, float value) {
  *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(value);
}

}  // namespace tb::gpu
