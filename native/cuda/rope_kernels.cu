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

template <typename T>
__global__ void RopeKernel(const T* __restrict__ q, const T* __restrict__ k, T* __restrict__ qo, T* __restrict__ ko, const T* __restrict__ cs,
                           const T* __restrict__ sn, int64_t BT, int64_t nq, int64_t nk, int64_t D, bool transpose) {
  const int64_t heads = nq + nk, half = D / 2;
  const int64_t total = BT * heads * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = i % D, h = (i / D) % heads, bt = i / (D * heads);
    const T* x;
    T* o;
    if (h < nq) {
      x = q + (bt * nq + h) * D;
      o = qo + (bt * nq + h) * D;
    } else {
      x = k + (bt * nk + (h - nq)) * D;
      o = ko + (bt * nk + (h - nq)) * D;
    }
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

template <typename T>
const char* Launch(const void* q, const void* k, void* qo, void* ko, const void* c, const void* s, int64_t BT, int64_t nq, int64_t nk, int64_t D,
                   bool transpose, cudaStream_t st) {
  const int64_t total = BT * (nq + nk) * D;
  if (total == 0) return nullptr;
  const int threads = 256;
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
