// SwiGLU forward / backward (declarations and formulas: swiglu_kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/convert.cuh"
#include <math.h>
#include <stdint.h>

#include "cuda/swiglu_kernels.h"

namespace pg {
namespace cuda_kernels {
namespace {

__device__ __forceinline__ float Sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

template <typename T>
__global__ void Fwd(const T* __restrict__ gu, T* __restrict__ act, int64_t rows, int64_t I) {
  const int64_t n = rows * I;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / I, c = i % I;
    const float g = F(gu[r * 2 * I + c]), u = F(gu[r * 2 * I + I + c]);
    act[i] = To<T>(g * Sigmoid(g) * u);
  }
}

template <typename T>
__global__ void Bwd(const T* __restrict__ gu, const T* __restrict__ dact, T* __restrict__ dgu, int64_t rows, int64_t I) {
  const int64_t n = rows * I;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / I, c = i % I;
    const float g = F(gu[r * 2 * I + c]), u = F(gu[r * 2 * I + I + c]), d = F(dact[i]);
    const float s = Sigmoid(g);
    dgu[r * 2 * I + c] = To<T>(d * u * s * (1.f + g * (1.f - s)));
    dgu[r * 2 * I + I + c] = To<T>(d * g * s);
  }
}

unsigned Blocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

}  // namespace

const char* SwigluForward(const void* gu, void* act, int64_t rows, int64_t I, SwigluType t, void* stream) {
  if (rows * I == 0) return nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  switch (t) {
    case SwigluType::kFloat32: Fwd<float><<<Blocks(rows * I), 256, 0, s>>>(static_cast<const float*>(gu), static_cast<float*>(act), rows, I); break;
    case SwigluType::kBFloat16: Fwd<__nv_bfloat16><<<Blocks(rows * I), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(gu), static_cast<__nv_bfloat16*>(act), rows, I); break;
    case SwigluType::kFloat16: Fwd<__half><<<Blocks(rows * I), 256, 0, s>>>(static_cast<const __half*>(gu), static_cast<__half*>(act), rows, I); break;
  }
  return LaunchStatus();
}

const char* SwigluBackward(const void* gu, const void* dact, void* dgu, int64_t rows, int64_t I, SwigluType t, void* stream) {
  if (rows * I == 0) return nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  switch (t) {
    case SwigluType::kFloat32: Bwd<float><<<Blocks(rows * I), 256, 0, s>>>(static_cast<const float*>(gu), static_cast<const float*>(dact), static_cast<float*>(dgu), rows, I); break;
    case SwigluType::kBFloat16: Bwd<__nv_bfloat16><<<Blocks(rows * I), 256, 0, s>>>(static_cast<const __nv_bfloat16*>(gu), static_cast<const __nv_bfloat16*>(dact), static_cast<__nv_bfloat16*>(dgu), rows, I); break;
    case SwigluType::kFloat16: Bwd<__half><<<Blocks(rows * I), 256, 0, s>>>(static_cast<const __half*>(gu), static_cast<const __half*>(dact), static_cast<__half*>(dgu), rows, I); break;
  }
  return LaunchStatus();
}

}  // namespace cuda_kernels
}  // namespace pg
