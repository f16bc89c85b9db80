// RoPE for q and k in one kernel (declarations and formulas: rope_kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/convert.cuh"
#include <stdint.h>

#include "cuda/rope_kernels.h"

namespace pg {
namespace cuda_kernels {
namespace {

// Input and output rows of head h (q's nq heads, then k's nk) of token bt, each [D] contiguous.
template <typename T>
__device__ __forceinline__ void HeadRow(const T* q, const T* k, T* qo, T* ko, int64_t bt, int64_t h, int64_t nq, int64_t nk, int64_t D, const T*& x, T*& o) {
  const int64_t off = h < nq ? (bt * nq + h) * D : (bt * nk + (h - nq)) * D;
  x = (h < nq ? q : k) + off;
  o = (h < nq ? qo : ko) + off;
}

template <typename T>
__global__ void RopeKernel(const T* __restrict__ q, const T* __restrict__ k, T* __restrict__ qo, T* __restrict__ ko, const T* __restrict__ cs,
                           const T* __restrict__ sn, int64_t BT, int64_t nq, int64_t nk, int64_t D, bool transpose) {
  const int64_t heads = nq + nk, half = D / 2;
  const int64_t total = BT * heads * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = i % D, h = (i / D) % heads, bt = i / (D * heads);
    const T* x;
    T* o;
    HeadRow(q, k, qo, ko, bt, h, nq, nk, D, x, o);
    const T* c = cs + bt * D;
    const T* s = sn + bt * D;
    float v = F(x[d]) * F(c[d]);
    if (!transpose)
      v += (d < half ? -F(x[d + half]) : F(x[d - half])) * F(s[d]);
    else
      v += d < half ? F(x[d + half]) * F(s[d + half]) : -F(x[d - half]) * F(s[d - half]);
    o[d] = To<T>(v);
  }
}

// The same map, V pairs of elements (d, d + D/2) per thread as two 16-byte vectors each of x,
// cos and sin: one 64-bit division per 2·V elements, the rest of the index in 32 bits. The element kernel above spent most
// of its time in the 64-bit divisions of its per-element index (≈ 8× its bandwidth time at 8B
// training shapes, docs/changelog-performance.md §10); this one needs D/2 a multiple of V and every pointer
// 16-byte aligned (Launch checks, else the element kernel runs).
template <typename T, int V>
__global__ void RopePairsKernel(const T* __restrict__ q, const T* __restrict__ k, T* __restrict__ qo, T* __restrict__ ko, const T* __restrict__ cs,
                                const T* __restrict__ sn, int64_t BT, int nq, int nk, int D, bool transpose) {
  const int half = D / 2, per_head = half / V, heads = nq + nk, per_token = heads * per_head;
  const int64_t total = BT * per_token;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = i / per_token;
    const int rem = static_cast<int>(i - bt * per_token);
    const int h = rem / per_head, d0 = (rem - h * per_head) * V;
    const T* x;
    T* o;
    HeadRow(q, k, qo, ko, bt, h, nq, nk, D, x, o);
    const T* c = cs + bt * D;
    const T* s = sn + bt * D;
    alignas(16) T x1[V], x2[V], c1[V], c2[V], s1[V], s2[V], o1[V], o2[V];
    *reinterpret_cast<uint4*>(x1) = *reinterpret_cast<const uint4*>(x + d0);
    *reinterpret_cast<uint4*>(x2) = *reinterpret_cast<const uint4*>(x + d0 + half);
    *reinterpret_cast<uint4*>(c1) = *reinterpret_cast<const uint4*>(c + d0);
    *reinterpret_cast<uint4*>(c2) = *reinterpret_cast<const uint4*>(c + d0 + half);
    *reinterpret_cast<uint4*>(s1) = *reinterpret_cast<const uint4*>(s + d0);
    *reinterpret_cast<uint4*>(s2) = *reinterpret_cast<const uint4*>(s + d0 + half);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const float a = F(x1[e]), b = F(x2[e]);
      // forward: (a·c1 − b·s1, b·c2 + a·s2); adjoint: (a·c1 + b·s2, b·c2 − a·s1)
      const float lo = transpose ? a * F(c1[e]) + b * F(s2[e]) : a * F(c1[e]) - b * F(s1[e]);
      const float hi = transpose ? b * F(c2[e]) - a * F(s1[e]) : b * F(c2[e]) + a * F(s2[e]);
      o1[e] = To<T>(lo);
      o2[e] = To<T>(hi);
    }
    *reinterpret_cast<uint4*>(o + d0) = *reinterpret_cast<const uint4*>(o1);
    *reinterpret_cast<uint4*>(o + d0 + half) = *reinterpret_cast<const uint4*>(o2);
  }
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <typename T>
const char* Launch(const void* q, const void* k, void* qo, void* ko, const void* c, const void* s, int64_t BT, int64_t nq, int64_t nk, int64_t D,
                   bool transpose, cudaStream_t st) {
  const int64_t total = BT * (nq + nk) * D;
  if (total == 0) return nullptr;
  const int threads = 256;
  constexpr int kV = 16 / static_cast<int>(sizeof(T));
  if ((D / 2) % kV == 0 && (nq + nk) * D < (int64_t{1} << 31) && Aligned16(q) && Aligned16(k) && Aligned16(qo) && Aligned16(ko) && Aligned16(c) &&
      Aligned16(s)) {
    const int64_t work = total / (2 * kV);
    const int64_t blocks = (work + threads - 1) / threads;
    RopePairsKernel<T, kV><<<static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16), threads, 0, st>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<T*>(qo), static_cast<T*>(ko), static_cast<const T*>(c), static_cast<const T*>(s), BT,
        static_cast<int>(nq), static_cast<int>(nk), static_cast<int>(D), transpose);
    return LaunchStatus();
  }
  const int64_t blocks = (total + threads - 1) / threads;
  RopeKernel<T><<<static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16), threads, 0, st>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<T*>(qo), static_cast<T*>(ko), static_cast<const T*>(c), static_cast<const T*>(s), BT, nq,
      nk, D, transpose);
  return LaunchStatus();
}

}  // namespace

const char* Rope(const void* q, const void* k, void* q_out, void* k_out, const void* cos, const void* sin, int64_t B, int64_t T, int64_t nq, int64_t nk,
                 int64_t D, bool transpose, RopeType type, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  switch (type) {
    case RopeType::kFloat32:
      return Launch<float>(q, k, q_out, k_out, cos, sin, B * T, nq, nk, D, transpose, st);
    case RopeType::kBFloat16:
      return Launch<__nv_bfloat16>(q, k, q_out, k_out, cos, sin, B * T, nq, nk, D, transpose, st);
    case RopeType::kFloat16:
      return Launch<__half>(q, k, q_out, k_out, cos, sin, B * T, nq, nk, D, transpose, st);
  }
  return "unsupported RoPE dtype";
}

}  // namespace cuda_kernels
}  // namespace pg
