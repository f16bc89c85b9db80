// Split-K decode attention over the live KV (declarations and formula: decode_attention_kernels.h).
//
// Pass 1 (grid: splits × nkv × B, 4 warps): CTA (split, j, b) reads keys
// [max(start, split·chunk), min(slot + 1, (split + 1)·chunk)) of KV head j of row b (chunk: 128 or
// 256 keys, see Chunk) — nothing before start[b] or after slot, so the cost
// follows the live length, not the capacity — for all rep query heads of j at once (each K/V row
// is read once per KV head). The warps take the keys U at a time, round robin (U consecutive keys
// per warp and iteration, all U rows loaded before the first is used): the D elements of a row
// are spread over the 32 lanes (E = ceil(D / 32) each, one vector load), the dot products are
// shuffle reductions, and each warp keeps an online softmax (running max m, denominator l,
// weighted V sum) per query head, updated once per U keys. The 4 warps are merged in shared
// memory into one partial (m, l, acc[D]) per (row, head, split). Pass 2 (grid: B · nh): merges
// the splits, o = Σ_s 2^(m_s − M) · acc_s / L, rounded once to the output dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "cuda/convert.cuh"
#include "cuda/decode_attention_kernels.h"
#include "cuda/reduce.cuh"

namespace pg {
namespace cuda_kernels {
namespace {

constexpr int kWarps = 4;

// Keys per split, by the query rows the batch gives (B · nh): 256 from 1024 rows on (64 rows of
// 16 query heads), else 128. Measured on the H200 at 1.7B shapes, 1024 new tokens, tokens/s: at
// batch 1 / 8 / 32, 32 keys per split was 3–16% slower than 128 and 64 no faster (more splits cost
// more in the combine than they gain in parallelism); 256 against 128 was −1% at batch 32, +2% at
// 64 and +4.6% at 256. Wider when the capacity would need more than 4096 splits (the combine keeps
// one weight per split in shared memory). PAPERGYM_DECODE_ATTN_CHUNK=32|64|128|256 fixes it (A/B).
int64_t Chunk(int64_t B, int64_t nh, int64_t C) {
  static const int64_t forced = [] {
    const char* e = std::getenv("PAPERGYM_DECODE_ATTN_CHUNK");
    const int64_t v = e ? std::atoll(e) : 0;
    return v == 32 || v == 64 || v == 128 || v == 256 ? v : 0;
  }();
  int64_t chunk = forced ? forced : B * nh >= 1024 ? 256 : 128;
  while ((C + chunk - 1) / chunk > 4096) chunk *= 2;
  return chunk;
}

int64_t Splits(int64_t B, int64_t nh, int64_t C) {
  const int64_t chunk = Chunk(B, nh, C);
  return (C + chunk - 1) / chunk;
}

// Loads the E elements of lane `lane` of one D-element row (elements lane·E … lane·E + E - 1) as
// floats: one vector load when the row is whole (D == 32·E; rows start 2·D-byte aligned, so the
// lane's E elements are E·sizeof(T)-byte aligned), element by element (zeros past D) otherwise.
template <typename T, int E>
__device__ __forceinline__ void LoadLane(const T* __restrict__ row, int lane, int64_t D, float (&out)[E]) {
  constexpr int kBytes = E * static_cast<int>(sizeof(T));
  if (D == 32 * E) {
    alignas(16) T tmp[E];
    const T* p = row + lane * E;
    if constexpr (kBytes % 16 == 0) {
#pragma unroll
      for (int i = 0; i < kBytes / 16; ++i) reinterpret_cast<uint4*>(tmp)[i] = reinterpret_cast<const uint4*>(p)[i];
    } else if constexpr (kBytes == 8) {
      *reinterpret_cast<uint2*>(tmp) = *reinterpret_cast<const uint2*>(p);
    } else if constexpr (kBytes == 4) {
      *reinterpret_cast<uint32_t*>(tmp) = *reinterpret_cast<const uint32_t*>(p);
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) tmp[e] = p[e];
    }
#pragma unroll
    for (int e = 0; e < E; ++e) out[e] = F(tmp[e]);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const int64_t d = lane * E + e;
      out[e] = d < D ? F(row[d]) : 0.f;
    }
  }
}

// U = keys a warp takes per iteration: their K and V rows are loaded before any is used (U times
// the bytes in flight of one key at a time), their U·R dot products reduced side by side, and the
// online softmax updated once per iteration.
template <typename T, int E, int R, int U>
__global__ void __launch_bounds__(kWarps * 32)
    PartialKernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const int32_t* __restrict__ start,
                  const int64_t* __restrict__ slot, float* __restrict__ part_acc, float* __restrict__ part_ml, int64_t nkv, int64_t C, int64_t D,
                  int64_t splits, int64_t chunk, float scale_log2) {
  const int64_t split = blockIdx.x, j = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t nh = nkv * R;
  const int64_t lo = max(static_cast<int64_t>(start[b]), split * chunk);
  const int64_t hi = min(slot[0] + 1, (split + 1) * chunk);

  float qr[R][E], acc[R][E], m[R], l[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
    LoadLane<T, E>(q + (b * nh + j * R + r) * D, lane, D, qr[r]);
#pragma unroll
    for (int e = 0; e < E; ++e) {
      qr[r][e] *= scale_log2;
      acc[r][e] = 0.f;
    }
  }
  const T* kb = k + (b * nkv + j) * C * D;
  const T* vb = v + (b * nkv + j) * C * D;
  for (int64_t s0 = lo + warp * U; s0 < hi; s0 += kWarps * U) {
    float kk[U][E], vv[U][E];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (s0 + u < hi) {
        LoadLane<T, E>(kb + (s0 + u) * D, lane, D, kk[u]);
        LoadLane<T, E>(vb + (s0 + u) * D, lane, D, vv[u]);
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) kk[u][e] = vv[u][e] = 0.f;
      }
    }
    float dot[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float t = 0.f;
#pragma unroll
        for (int e = 0; e < E; ++e) t += qr[r][e] * kk[u][e];
        dot[u][r] = t;
      }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) dot[u][r] += __shfl_xor_sync(0xffffffffu, dot[u][r], off);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float mx = m[r];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (s0 + u < hi) mx = fmaxf(mx, dot[u][r]);
      const float corr = exp2f(m[r] - mx);  // 0 while m is -inf
      float p[U], ps = 0.f;
#pragma unroll
      for (int u = 0; u < U; ++u) {
        p[u] = s0 + u < hi ? exp2f(dot[u][r] - mx) : 0.f;
        ps += p[u];
      }
      l[r] = l[r] * corr + ps;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        float a = acc[r][e] * corr;
#pragma unroll
        for (int u = 0; u < U; ++u) a += p[u] * vv[u][e];
        acc[r][e] = a;
      }
      m[r] = mx;
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

// One CTA per (row, head): the splits' maxima and denominators are read once into shared memory,
// turned into one weight per split, w_s = 2^(m_s - M) / L (0 for an empty split), and every output
// element is Σ_s w_s · acc_s — independent loads, no dependent chain per split.
template <typename T>
__global__ void CombineKernel(const float* __restrict__ part_acc, const float* __restrict__ part_ml, T* __restrict__ o, int64_t splits, int64_t D) {
  extern __shared__ float wsplit[];  // [splits]
  __shared__ float ML[2];
  const int64_t bh = blockIdx.x;
  const float* ml = part_ml + bh * splits * 2;
  for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) wsplit[s] = ml[s * 2];
  __syncthreads();
  if (threadIdx.x < 32) {
    float M = -INFINITY;
    for (int64_t s = threadIdx.x; s < splits; s += 32) M = fmaxf(M, wsplit[s]);
    M = WarpMax(M);
    float L = 0.f;
    for (int64_t s = threadIdx.x; s < splits; s += 32)
      if (wsplit[s] != -INFINITY) L += ml[s * 2 + 1] * exp2f(wsplit[s] - M);
    L = WarpSum(L);
    if (threadIdx.x == 0) {
      ML[0] = M;
      ML[1] = L;
    }
  }
  __syncthreads();
  const float M = ML[0], L = ML[1];
  for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) {
    const float m = wsplit[s];
    wsplit[s] = m != -INFINITY && L > 0.f ? exp2f(m - M) / L : 0.f;
  }
  __syncthreads();
  const float* acc = part_acc + bh * splits * D;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float A = 0.f;
#pragma unroll 4
    for (int64_t s = 0; s < splits; ++s) A += acc[s * D + d] * wsplit[s];
    o[bh * D + d] = To<T>(A);
  }
}

// Keys per warp per iteration: 4 where the registers allow (q, acc and the U rows of K and V are
// E·R + E·R + 2·U·E floats per lane); PAPERGYM_DECODE_ATTN_KEYS=1 takes one key at a time (the
// kernel before the loads were batched, kept for an A/B).
int KeysPerWarp() {
  static const int keys = [] {
    const char* e = std::getenv("PAPERGYM_DECODE_ATTN_KEYS");
    return e && std::string(e) == "1" ? 1 : 4;
  }();
  return keys;
}

template <typename T, int E, int R>
const char* LaunchER(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work, int64_t B, int64_t nkv,
                     int64_t C, int64_t D, double scale, cudaStream_t st) {
  const int64_t nh = nkv * R, chunk = Chunk(B, nh, C), splits = (C + chunk - 1) / chunk;
  float* part_acc = work;
  float* part_ml = work + B * nh * splits * D;
  const float scale_log2 = static_cast<float>(scale * 1.4426950408889634);  // log2(e)
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(nkv), static_cast<unsigned>(B));
  constexpr int kU = E * R <= 16 ? 4 : E * R <= 32 ? 2 : 1;
  if (kU > 1 && KeysPerWarp() > 1)
    PartialKernel<T, E, R, kU><<<grid, kWarps * 32, 0, st>>>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), start, slot,
                                                             part_acc, part_ml, nkv, C, D, splits, chunk, scale_log2);
  else
    PartialKernel<T, E, R, 1><<<grid, kWarps * 32, 0, st>>>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), start, slot, part_acc,
                                                            part_ml, nkv, C, D, splits, chunk, scale_log2);
  if (const char* err = LaunchStatus()) return err;
  const int threads = D <= 32 ? 32 : D <= 64 ? 64 : D <= 128 ? 128 : 256;
  CombineKernel<T><<<static_cast<unsigned>(B * nh), threads, splits * sizeof(float), st>>>(part_acc, part_ml, static_cast<T*>(o), splits, D);
  return LaunchStatus();
}

template <typename T, int E>
const char* LaunchE(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work, int64_t B, int64_t nkv,
                    int64_t rep, int64_t C, int64_t D, double scale, cudaStream_t st) {
  switch (rep) {
    case 1:
      return LaunchER<T, E, 1>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, st);
    case 2:
      return LaunchER<T, E, 2>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, st);
    case 4:
      return LaunchER<T, E, 4>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, st);
    case 8:
      return LaunchER<T, E, 8>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, st);
  }
  return "decode attention: unsupported GQA ratio";
}

template <typename T>
const char* LaunchT(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work, int64_t B, int64_t nkv,
                    int64_t rep, int64_t C, int64_t D, double scale, cudaStream_t st) {
  if (D <= 32) return LaunchE<T, 1>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
  if (D <= 64) return LaunchE<T, 2>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
  if (D <= 128) return LaunchE<T, 4>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
  if (D <= 256) return LaunchE<T, 8>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
  return "decode attention: head_dim above 256";
}

}  // namespace

bool DecodeAttentionSupported(int64_t rep, int64_t D) {
  return D >= 1 && D <= 256 && (rep == 1 || rep == 2 || rep == 4 || rep == 8);
}

int64_t DecodeAttentionWorkFloats(int64_t B, int64_t nh, int64_t C, int64_t D) {
  return B * nh * Splits(B, nh, C) * (D + 2);
}

const char* DecodeAttention(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work, int64_t B,
                            int64_t nkv, int64_t rep, int64_t C, int64_t D, double scale, DecodeAttnType type, void* stream) {
  if (B == 0) return nullptr;
  auto st = static_cast<cudaStream_t>(stream);
  switch (type) {
    case DecodeAttnType::kFloat32:
      return LaunchT<float>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
    case DecodeAttnType::kBFloat16:
      return LaunchT<__nv_bfloat16>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
    case DecodeAttnType::kFloat16:
      return LaunchT<__half>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, st);
  }
  return "decode attention: unsupported dtype";
}

}  // namespace cuda_kernels
}  // namespace pg
