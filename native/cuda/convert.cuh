// Shared device helpers of the own CUDA kernels: float32 <-> element type (bf16 / fp16 / fp32,
// round-to-nearest-even on the way out) and the launch status.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace pg {
namespace cuda_kernels {

template <typename T>
__device__ __forceinline__ float F(T v);
template <>
__device__ __forceinline__ float F<float>(float v) { return v; }
template <>
__device__ __forceinline__ float F<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float F<__half>(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T To(float v);
template <>
__device__ __forceinline__ float To<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 To<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half To<__half>(float v) { return __float2half_rn(v); }

/// nullptr, or the error string of the last launch on this thread.
inline const char* LaunchStatus() {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace cuda_kernels
}  // namespace pg
