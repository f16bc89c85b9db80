// Shared device helpers of the own CUDA kernels: float32 <-> element type (bf16 / fp16 / fp32,
// round-to-nearest-even on the way out) and the launch status.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <initializer_list>

namespace pg {
namespace cuda_kernels {

template <typename T>
__device__ __forceinline__ float F(T v);
template <>
__device__ __forceinline__ float F<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float F<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ __forceinline__ float F<__half>(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T To(float v);
template <>
__device__ __forceinline__ float To<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 To<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half To<__half>(float v) {
  return __float2half_rn(v);
}

/// Elements of T in one 16-byte vector (8 bf16 / fp16, 4 fp32).
template <typename T>
constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

/// Loads kVec16<T> elements from a 16-byte aligned address, as floats.
template <typename T>
__device__ __forceinline__ void Load16(const T* __restrict__ p, float (&out)[kVec16<T>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* t = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec16<T>; ++i) out[i] = F(t[i]);
}

/// Stores kVec16<T> floats, each rounded to T, at a 16-byte aligned address.
template <typename T>
__device__ __forceinline__ void Store16(T* __restrict__ p, const float (&v)[kVec16<T>]) {
  uint4 raw;
  T* t = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec16<T>; ++i) t[i] = To<T>(v[i]);
  *reinterpret_cast<uint4*>(p) = raw;
}

/// Whether every pointer is 16-byte aligned (the vector paths' precondition).
inline bool Aligned16(std::initializer_list<const void*> ps) {
  for (const void* p : ps)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

/// nullptr, or the error string of the last launch on this thread.
inline const char* LaunchStatus() {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace cuda_kernels
}  // namespace pg
