// Split-K decode attention over the live KV (declarations and formula: decode_attention_kernels.h).
//
// Pass 1 (grid: splits × nkv × B, 4 warps): CTA (split, j, b) reads keys [max(start, split·kChunk),
// min(slot + 1, (split + 1)·kChunk)) of KV head j of row b — nothing before start[b] or after
// slot, so the cost follows the live length, not the capacity — for all rep query heads of j at
// once (each K/V row is read once per KV head). A warp takes every 4th key: the D elements of a
// row are spread over the 32 lanes (E = ceil(D / 32) each), the dot product is a shuffle reduction,
// and each warp keeps an online softmax (running max m, denominator l, weighted V sum) per query
// head. The 4 warps are merged in shared memory into one partial (m, l, acc[D]) per (row, head,
// split). Pass 2 (grid: B · nh): merges the splits, o = acc / l, rounded once to the output dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cmath>

#include "cuda/convert.cuh"
#include "cuda/decode_attention_kernels.h"

namespace pg {
namespace cuda_kernels {
namespace {

constexpr int kWarps = 4;
constexpr int64_t kChunk = 128;  // keys per split

int64_t Splits(int64_t C) { return (C + kChunk - 1) / kChunk; }

template <typename T, int E, int R>
__global__ void __launch_bounds__(kWarps * 32) PartialKernel(const T* __restrict__ q, const T* __restrict__ k,
                                                             const T* __restrict__ v, const int32_t* __restrict__ start,
                                                             const int64_t* __restrict__ slot, float* __restrict__ part_acc,
                                                             float* __restrict__ part_ml, int64_t nkv, int64_t C, int64_t D,
                                                             int64_t splits, float scale_log2) {
  const int64_t split = blockIdx.x, j = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t nh = nkv * R;
  const int64_t lo = max(static_cast<int64_t>(start[b]), split * kChunk);
  const int64_t hi = min(slot[0] + 1, (split + 1) * kChunk);

  float qr[R][E], acc[R][E], m[R], l[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int64_t d = lane * E + e;
      qr[r][e] = d < D ? F(q[(b * nh + j * R + r) * D + d]) * scale_log2 : 0.f;
      acc[r][e] = 0.f;
    }
  }
  const T* kb = k + (b * nkv + j) * C * D;
  const T* vb = v + (b * nkv + j) * C * D;
  for (int64_t s = lo + warp; s < hi; s += kWarps) {
    float kk[E], vv[E];
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int64_t d = lane * E + e;
      kk[e] = d < D ? F(kb[s * D + d]) : 0.f;
      vv[e] = d < D ? F(vb[s * D + d]) : 0.f;
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float dot = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) dot += qr[r][e] * kk[e];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      const float mn = fmaxf(m[r], dot);
      const float corr = exp2f(m[r] - mn);  // 0 while m is -inf
      const float p = exp2f(dot - mn);
      l[r] = l[r] * corr + p;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[r][e] = acc[r][e] * corr + p * vv[e];
      m[r] = mn;
    }
  }

  __shared__ float sm_m[kWarps][R], sm_l[kWarps][R];
  __shared__ float sm_acc[kWarps][R][E * 32];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (lane == 0) {
      sm_m[warp][r] = m[r];
      sm_l[warp][r] = l[r];
    }
#pragma unroll
    for (int e = 0; e < E; ++e) sm_acc[warp][r][lane * E + e] = acc[r][e];
  }
  __syncthreads();
  for (int64_t idx = threadIdx.x; idx < R * D; idx += blockDim.x) {
    const int r = static_cast<int>(idx / D);
    const int64_t d = idx % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm_m[w][r]);
    float L = 0.f, A = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float c = exp2f(sm_m[w][r] - M);
        L += sm_l[w][r] * c;
        A += sm_acc[w][r][d] * c;
      }
    }
    const int64_t h = j * R + r;
    const int64_t row = (b * nh + h) * splits + split;
    part_acc[row * D + d] = A;
    if (d == 0) {
      part_ml[row * 2] = M;
      part_ml[row * 2 + 1] = L;
    }
  }
}

template <typename T>
__global__ void CombineKernel(const float* __restrict__ part_acc, const float* __restrict__ part_ml, T* __restrict__ o,
                              int64_t splits, int64_t D) {
  const int64_t bh = blockIdx.x;
  const float* ml = part_ml + bh * splits * 2;
  float M = -INFINITY;
  for (int64_t s = 0; s < splits; ++s) M = fmaxf(M, ml[s * 2]);
  float L = 0.f;
  for (int64_t s = 0; s < splits; ++s)
    if (ml[s * 2] != -INFINITY) L += ml[s * 2 + 1] * exp2f(ml[s * 2] - M);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float A = 0.f;
    for (int64_t s = 0; s < splits; ++s)
      if (ml[s * 2] != -INFINITY) A += part_acc[(bh * splits + s) * D + d] * exp2f(ml[s * 2] - M);
    o[bh * D + d] = To<T>(L > 0.f ? A / L : 0.f);
  }
}

template <typename T, int E, int R>
const char* LaunchER(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work,
                     int64_t B, int64_t nkv, int64_t C, int64_t D, double scale, cudaStream_t st) {
  const int64_t splits = Splits(C), nh = nkv * R;
  float* part_acc = work;
  float* part_ml = work + B * nh * splits * D;
  const float scale_log2 = static_cast<float>(scale * 1.4426950408889634);  // log2(e)
  PartialKernel<T, E, R><<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(nkv), static_cast<unsigned>(B)), kWarps * 32, 0, st>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), start, slot, part_acc, part_ml, nkv, C, D, splits,
      scale_log2);
  if (const char* err = LaunchStatus()) return err;
  const int threads = D <= 32 ? 32 : D <= 64 ? 64 : D <= 128 ? 128 : 256;
  CombineKernel<T><<<static_cast<unsigned>(B * nh), threads, 0, st>>>(part_acc, part_ml, static_cast<T*>(o), splits, D);
  return LaunchStatus();
}

template <typename T, int E>
const char* LaunchE(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work,
                    int64_t B, int64_t nkv, int64_t rep, int64_t C, int64_t D, double scale, cudaStream_t st) {
  switch (rep) {
    case 1: return LaunchER<T, E, 1>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, st);
    case 2: return LaunchER<T, E, 2>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, st);
    case 4: return LaunchER<T, E, 4>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, st);
    case 8: return LaunchER<T, E, 8>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, st);
  }
  return "decode attention: unsupported GQA ratio";
}

template <typename T>
const char* LaunchT(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work,
                    int64_t B, int64_t nkv, int64_t rep, int64_t C, int64_t D, double scale, cudaStream_t st) {
  if (D <= 32) return LaunchE<T, 1>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
  if (D <= 64) return LaunchE<T, 2>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
  if (D <= 128) return LaunchE<T, 4>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
  if (D <= 256) return LaunchE<T, 8>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
  return "decode attention: head_dim above 256";
}

}  // namespace

bool DecodeAttentionSupported(int64_t rep, int64_t D) { return D >= 1 && D <= 256 && (rep == 1 || rep == 2 || rep == 4 || rep == 8); }

int64_t DecodeAttentionWorkFloats(int64_t B, int64_t nh, int64_t C, int64_t D) { return B * nh * Splits(C) * (D + 2); }

const char* DecodeAttention(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o,
                            float* work, int64_t B, int64_t nkv, int64_t rep, int64_t C, int64_t D, double scale,
                            DecodeAttnType type, void* stream) {
  if (B == 0) return nullptr;
  auto st = static_cast<cudaStream_t>(stream);
  switch (type) {
    case DecodeAttnType::kFloat32: return LaunchT<float>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
    case DecodeAttnType::kBFloat16: return LaunchT<__nv_bfloat16>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
    case DecodeAttnType::kFloat16: return LaunchT<__half>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
  }
  return "decode attention: unsupported dtype";
}

}  // namespace cuda_kernels
}  // namespace pg
