// Residual add + RMSNorm and q / k RMSNorm + RoPE + KV write (declarations and formulas:
// norm_kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/convert.cuh"
#include "cuda/norm_kernels.h"
#include "cuda/reduce.cuh"

namespace pg {
namespace cuda_kernels {
namespace {

template <typename T>
__global__ void AddRmsNormKernel(const T* __restrict__ h, const T* __restrict__ d, const T* __restrict__ w, T* __restrict__ s, T* __restrict__ y, int64_t H,
                                 float eps) {
  const int64_t row = blockIdx.x;
  const T* hr = h + row * H;
  const T* dr = d + row * H;
  T* sr = s + row * H;
  T* yr = y + row * H;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    const T v = To<T>(F(hr[i]) + F(dr[i]));
    sr[i] = v;
    const float f = F(v);
    ss += f * f;
  }
  const float rstd = rsqrtf(BlockSum(ss) / static_cast<float>(H) + eps);
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) yr[i] = To<T>(F(w[i]) * (rstd * F(sr[i])));  // own writes: no sync needed
}

// The same, one 16-byte vector of h, d and w per thread (blockDim = H / kVec16<T>, a multiple of
// 32): every load issued before the reduction, s kept in registers for the output (no re-read).
// Same per-element operations as AddRmsNormKernel; only the order of the sum of squares differs.
template <typename T>
__global__ void AddRmsNormVecKernel(const T* __restrict__ h, const T* __restrict__ d, const T* __restrict__ w, T* __restrict__ s, T* __restrict__ y, int64_t H,
                                    float eps) {
  constexpr int V = kVec16<T>;
  const int64_t off = blockIdx.x * H + threadIdx.x * V;
  float hv[V], dv[V], wv[V], sv[V];
  Load16(h + off, hv);
  Load16(d + off, dv);
  Load16(w + threadIdx.x * V, wv);
  float ss = 0.f;
#pragma unroll
  for (int e = 0; e < V; ++e) {
    sv[e] = F(To<T>(hv[e] + dv[e]));  // the residual stream, rounded to T as stored
    ss += sv[e] * sv[e];
  }
  Store16(s + off, sv);
  const float rstd = rsqrtf(BlockSum(ss) / static_cast<float>(H) + eps);
#pragma unroll
  for (int e = 0; e < V; ++e) sv[e] = wv[e] * (rstd * sv[e]);
  Store16(y + off, sv);
}

constexpr int kMaxPairs = static_cast<int>(kQkNormRopeMaxHeadDim / 64);  // pairs per lane: D / 2 / 32

template <typename T>
__global__ void QkNormRopeKernel(const T* __restrict__ qkv, const T* __restrict__ qw, const T* __restrict__ kw, const T* __restrict__ cs,
                                 const T* __restrict__ sn, T* __restrict__ qo, T* __restrict__ ko, T* __restrict__ vo, const int64_t* __restrict__ slot,
                                 int64_t R, int64_t nq, int64_t nk, int64_t D, int64_t C, float eps) {
  const int64_t heads = nq + 2 * nk;
  const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (wid >= R * heads) return;  // whole warps exit together (blockDim is a multiple of 32)
  const int lane = threadIdx.x & 31;
  const int64_t r = wid / heads, hh = wid % heads;
  const T* x = qkv + r * heads * D + hh * D;
  // Destination of this head: q rows, or k / v rows, or the caches' slot.
  auto dst = [&](T* base, int64_t j) -> T* {
    if (slot) return base + ((r * nk + j) * C + slot[0]) * D;  // T = 1: row r is batch row r
    return base + (r * nk + j) * D;
  };
  if (hh >= nq + nk) {  // v head: copy
    T* o = dst(vo, hh - nq - nk);
    for (int64_t i = lane; i < D; i += 32) o[i] = x[i];
    return;
  }
  const bool is_q = hh < nq;
  const T* w = is_q ? qw : kw;
  T* o = is_q ? qo + (r * nq + hh) * D : dst(ko, hh - nq);
  const int64_t half = D / 2;
  float a[kMaxPairs], b[kMaxPairs];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    const int64_t p = lane + 32 * i;
    a[i] = 0.f;
    b[i] = 0.f;
    if (p < half) {
      a[i] = F(x[p]);
      b[i] = F(x[p + half]);
      ss += a[i] * a[i] + b[i] * b[i];
    }
  }
  if (w) {
    const float rstd = rsqrtf(WarpSum(ss) / static_cast<float>(D) + eps);
#pragma unroll
    for (int i = 0; i < kMaxPairs; ++i) {
      const int64_t p = lane + 32 * i;
      if (p < half) {
        a[i] = F(To<T>(F(w[p]) * (rstd * a[i])));
        b[i] = F(To<T>(F(w[p + half]) * (rstd * b[i])));
      }
    }
  }
  const T* c = cs + r * D;
  const T* s = sn + r * D;
#pragma unroll
  for (int i = 0; i < kMaxPairs; ++i) {
    const int64_t p = lane + 32 * i;
    if (p < half) {
      float lo = a[i] * F(c[p]);
      lo += -b[i] * F(s[p]);
      float hi = b[i] * F(c[p + half]);
      hi += a[i] * F(s[p + half]);
      o[p] = To<T>(lo);
      o[p + half] = To<T>(hi);
    }
  }
}

template <typename T>
const char* LaunchAddRmsNorm(const void* h, const void* d, const void* w, void* s, void* y, int64_t rows, int64_t H, float eps, cudaStream_t st) {
  if (rows == 0 || H == 0) return nullptr;
  if (rows <= 0x7fffffffLL && H % (32 * kVec16<T>) == 0 && H / kVec16<T> <= 1024 && Aligned16({h, d, w, s, y})) {
    AddRmsNormVecKernel<T><<<static_cast<unsigned>(rows), static_cast<unsigned>(H / kVec16<T>), 0, st>>>(
        static_cast<const T*>(h), static_cast<const T*>(d), static_cast<const T*>(w), static_cast<T*>(s), static_cast<T*>(y), H, eps);
    return LaunchStatus();
  }
  int threads = 32;
  while (threads < 1024 && threads * 8 < H) threads *= 2;  // about 8 elements per thread
  AddRmsNormKernel<T><<<static_cast<unsigned>(rows), threads, 0, st>>>(static_cast<const T*>(h), static_cast<const T*>(d), static_cast<const T*>(w),
                                                                       static_cast<T*>(s), static_cast<T*>(y), H, eps);
  return LaunchStatus();
}

template <typename T>
const char* LaunchQkNormRope(const void* qkv, const void* qw, const void* kw, const void* c, const void* s, void* qo, void* ko, void* vo, const int64_t* slot,
                             int64_t R, int64_t nq, int64_t nk, int64_t D, int64_t C, float eps, cudaStream_t st) {
  if (D % 2 != 0 || D > kQkNormRopeMaxHeadDim) return "QkNormRope: head_dim must be even and at most 256";
  const int64_t warps = R * (nq + 2 * nk);
  if (warps == 0) return nullptr;
  const int threads = 128;
  const int64_t blocks = (warps * 32 + threads - 1) / threads;
  if (blocks > 0x7fffffffLL) return "QkNormRope: too many rows for one launch";
  QkNormRopeKernel<T><<<static_cast<unsigned>(blocks), threads, 0, st>>>(static_cast<const T*>(qkv), static_cast<const T*>(qw), static_cast<const T*>(kw),
                                                                         static_cast<const T*>(c), static_cast<const T*>(s), static_cast<T*>(qo),
                                                                         static_cast<T*>(ko), static_cast<T*>(vo), slot, R, nq, nk, D, C, eps);
  return LaunchStatus();
}

}  // namespace

const char* AddRmsNorm(const void* h, const void* d, const void* w, void* s, void* y, int64_t rows, int64_t H, float eps, NormType type, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  switch (type) {
    case NormType::kFloat32:
      return LaunchAddRmsNorm<float>(h, d, w, s, y, rows, H, eps, st);
    case NormType::kBFloat16:
      return LaunchAddRmsNorm<__nv_bfloat16>(h, d, w, s, y, rows, H, eps, st);
    case NormType::kFloat16:
      return LaunchAddRmsNorm<__half>(h, d, w, s, y, rows, H, eps, st);
  }
  return "unsupported AddRmsNorm dtype";
}

const char* QkNormRope(const void* qkv, const void* q_w, const void* k_w, const void* cos, const void* sin, void* q_out, void* k_out, void* v_out,
                       const int64_t* slot, int64_t R, int64_t nq, int64_t nk, int64_t D, int64_t C, float eps, NormType type, void* stream) {
  auto st = static_cast<cudaStream_t>(stream);
  switch (type) {
    case NormType::kFloat32:
      return LaunchQkNormRope<float>(qkv, q_w, k_w, cos, sin, q_out, k_out, v_out, slot, R, nq, nk, D, C, eps, st);
    case NormType::kBFloat16:
      return LaunchQkNormRope<__nv_bfloat16>(qkv, q_w, k_w, cos, sin, q_out, k_out, v_out, slot, R, nq, nk, D, C, eps, st);
    case NormType::kFloat16:
      return LaunchQkNormRope<__half>(qkv, q_w, k_w, cos, sin, q_out, k_out, v_out, slot, R, nq, nk, D, C, eps, st);
  }
  return "unsupported QkNormRope dtype";
}

}  // namespace cuda_kernels
}  // namespace pg
