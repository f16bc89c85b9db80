// Warp and block reductions shared by the own CUDA kernels (loss, norm, sampler, decode
// attention): sums, maxima, and the online log-sum-exp — a running (max m, Σ exp(x − m)) per
// thread, merged pairwise (the streaming softmax of Milakov & Gimelshein 2018, "Online normalizer
// calculation for softmax", Alg. 3). Every lane of a warp gets the same result (xor butterfly:
// a + b and b + a round alike). A NaN input makes the log-sum-exp NaN, as ATen's logsumexp.
#pragma once
#include <cuda_runtime.h>
#include <math.h>

namespace pg {
namespace cuda_kernels {

struct MaxSum {
  float m, l;  // running max and Σ exp(x − m)
};

__device__ __forceinline__ MaxSum Merge(MaxSum a, MaxSum b) {
  if (isnan(a.l) || isnan(b.l)) return {a.m, NAN};  // a NaN logit makes the row's lse NaN, as in ATen
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.l * expf(a.m - m) + b.l * expf(b.m - m)};
}

__device__ __forceinline__ void Push(MaxSum& s, float x) {
  if (isnan(x)) {
    s.l = NAN;
    return;
  }
  if (x == -INFINITY) return;  // probability 0 contributes nothing
  if (x > s.m) {
    s.l = s.l * expf(s.m - x) + 1.f;
    s.m = x;
  } else {
    s.l += expf(x - s.m);
  }
}

__device__ __forceinline__ MaxSum WarpMerge(MaxSum v) {
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum w{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.l, o)};
    v = Merge(v, w);
  }
  return v;
}

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide reductions (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
__device__ __forceinline__ MaxSum BlockMerge(MaxSum v) {
  __shared__ float sm[32], sl[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = WarpMerge(v);
  if (lane == 0) {
    sm[warp] = v.m;
    sl[warp] = v.l;
  }
  __syncthreads();
  MaxSum r = lane < nw ? MaxSum{sm[lane], sl[lane]} : MaxSum{-INFINITY, 0.f};
  r = WarpMerge(r);
  __syncthreads();
  return r;
}

__device__ __forceinline__ float BlockSum(float v) {
  __shared__ float s[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = WarpSum(v);
  if (lane == 0) s[warp] = v;
  __syncthreads();
  float r = lane < nw ? s[lane] : 0.f;
  r = WarpSum(r);
  __syncthreads();
  return r;
}

__device__ __forceinline__ float Lse(MaxSum s) {
  if (isnan(s.l)) return NAN;
  return s.m == -INFINITY ? -INFINITY : s.m + logf(s.l);
}

}  // namespace cuda_kernels
}  // namespace pg
