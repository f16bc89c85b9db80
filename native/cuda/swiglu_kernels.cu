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

__device__ __forceinline__ float Sigmoid(float x) {
  return 1.f / (1.f + expf(-x));
}

// act = silu(g)·u, and its gradients dg = d·u·s·(1 + g·(1 − s)), du = d·silu(g) with s = σ(g)
// (swiglu_kernels.h); one definition for the element and the vector kernels.
__device__ __forceinline__ float SwigluValue(float g, float u) {
  return g * Sigmoid(g) * u;
}
__device__ __forceinline__ void SwigluGrads(float g, float u, float d, float& dg, float& du) {
  const float s = Sigmoid(g);
  dg = d * u * s * (1.f + g * (1.f - s));
  du = d * g * s;
}

template <typename T>
__global__ void Fwd(const T* __restrict__ gu, T* __restrict__ act, int64_t rows, int64_t I) {
  const int64_t n = rows * I;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / I, c = i % I;
    const float g = F(gu[r * 2 * I + c]), u = F(gu[r * 2 * I + I + c]);
    act[i] = To<T>(SwigluValue(g, u));
  }
}

template <typename T>
__global__ void Bwd(const T* __restrict__ gu, const T* __restrict__ dact, T* __restrict__ dgu, int64_t rows, int64_t I) {
  const int64_t n = rows * I;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / I, c = i % I;
    const float g = F(gu[r * 2 * I + c]), u = F(gu[r * 2 * I + I + c]), d = F(dact[i]);
    float dg, du;
    SwigluGrads(g, u, d, dg, du);
    dgu[r * 2 * I + c] = To<T>(dg);
    dgu[r * 2 * I + I + c] = To<T>(du);
  }
}

unsigned Blocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

// The same two kernels kVec16<T> elements at a time (16-byte loads and stores; one index division
// per vector): when I is a multiple of kVec16<T> and every pointer is 16-byte aligned.
template <typename T>
__global__ void FwdVec(const T* __restrict__ gu, T* __restrict__ act, int64_t rows, int64_t I) {
  constexpr int V = kVec16<T>;
  const int64_t iv = I / V, n = rows * iv;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / iv, c = (i - r * iv) * V;
    float g[V], u[V], a[V];
    Load16(gu + r * 2 * I + c, g);
    Load16(gu + r * 2 * I + I + c, u);
#pragma unroll
    for (int e = 0; e < V; ++e) a[e] = SwigluValue(g[e], u[e]);
    Store16(act + r * I + c, a);
  }
}

template <typename T>
__global__ void BwdVec(const T* __restrict__ gu, const T* __restrict__ dact, T* __restrict__ dgu, int64_t rows, int64_t I) {
  constexpr int V = kVec16<T>;
  const int64_t iv = I / V, n = rows * iv;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / iv, c = (i - r * iv) * V;
    float g[V], u[V], d[V], dg[V], du[V];
    Load16(gu + r * 2 * I + c, g);
    Load16(gu + r * 2 * I + I + c, u);
    Load16(dact + r * I + c, d);
#pragma unroll
    for (int e = 0; e < V; ++e) SwigluGrads(g[e], u[e], d[e], dg[e], du[e]);
    Store16(dgu + r * 2 * I + c, dg);
    Store16(dgu + r * 2 * I + I + c, du);
  }
}

template <typename T>
void LaunchFwd(const void* gu, void* act, int64_t rows, int64_t I, cudaStream_t s) {
  if (I % kVec16<T> == 0 && Aligned16({gu, act}))
    FwdVec<T><<<Blocks(rows * I / kVec16<T>), 256, 0, s>>>(static_cast<const T*>(gu), static_cast<T*>(act), rows, I);
  else
    Fwd<T><<<Blocks(rows * I), 256, 0, s>>>(static_cast<const T*>(gu), static_cast<T*>(act), rows, I);
}

template <typename T>
void LaunchBwd(const void* gu, const void* dact, void* dgu, int64_t rows, int64_t I, cudaStream_t s) {
  if (I % kVec16<T> == 0 && Aligned16({gu, dact, dgu}))
    BwdVec<T><<<Blocks(rows * I / kVec16<T>), 256, 0, s>>>(static_cast<const T*>(gu), static_cast<const T*>(dact), static_cast<T*>(dgu), rows, I);
  else
    Bwd<T><<<Blocks(rows * I), 256, 0, s>>>(static_cast<const T*>(gu), static_cast<const T*>(dact), static_cast<T*>(dgu), rows, I);
}

}  // namespace

const char* SwigluForward(const void* gu, void* act, int64_t rows, int64_t I, SwigluType t, void* stream) {
  if (rows * I == 0) return nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  switch (t) {
    case SwigluType::kFloat32:
      LaunchFwd<float>(gu, act, rows, I, s);
      break;
    case SwigluType::kBFloat16:
      LaunchFwd<__nv_bfloat16>(gu, act, rows, I, s);
      break;
    case SwigluType::kFloat16:
      LaunchFwd<__half>(gu, act, rows, I, s);
      break;
  }
  return LaunchStatus();
}

const char* SwigluBackward(const void* gu, const void* dact, void* dgu, int64_t rows, int64_t I, SwigluType t, void* stream) {
  if (rows * I == 0) return nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  switch (t) {
    case SwigluType::kFloat32:
      LaunchBwd<float>(gu, dact, dgu, rows, I, s);
      break;
    case SwigluType::kBFloat16:
      LaunchBwd<__nv_bfloat16>(gu, dact, dgu, rows, I, s);
      break;
    case SwigluType::kFloat16:
      LaunchBwd<__half>(gu, dact, dgu, rows, I, s);
      break;
  }
  return LaunchStatus();
}

}  // namespace cuda_kernels
}  // namespace pg
