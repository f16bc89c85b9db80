// Split-K decode attention over the live KV (declarations and formula: decode_attention_kernels.h).
//
// Pass 0 (only with groups of rows sharing a prompt, PlanDecodeSplits): GroupPromptKernel writes
// the partials of splits [0, shared), 64 keys each, for whole groups (see there).
// Pass 1 (grid: (splits − shared) × nkv × B, 4 warps): CTA (i, j, b) writes split shared + i and
// reads keys [max(start, base + i·chunk), min(slot + 1, base + (i + 1)·chunk)), base = 64·shared,
// of KV head j of row b (chunk: 128 or 256 keys, see Chunk) — nothing before start[b] or after slot, so the cost
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

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>

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
                  int64_t splits, int64_t chunk, float scale_log2, int64_t key_base, int64_t split_base) {
  const int64_t split = split_base + blockIdx.x, j = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t nh = nkv * R;
  const int64_t lo = max(static_cast<int64_t>(start[b]), key_base + blockIdx.x * chunk);
  const int64_t hi = min(slot[0] + 1, key_base + (blockIdx.x + 1) * chunk);

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

// ---- The group kernel: a group's shared prompt on tensor cores (GroupPromptKernel) ----
//
// The G rows of one group (the n completions of one GRPO prompt) hold copies of one prefill's K/V
// in their prompt slots. CTA (split, j, group) loads keys [split·64, split·64 + 64) of KV head j
// of the group's first row into shared memory once, and all G·rep query vectors of the group
// (query m = w·rep + r: row g·G + w, head j·rep + r) attend to them with mma.sync m16n8k16
// (float32 accumulation): S = Q·Kᵀ for 16 keys at a time, the online softmax per query in
// float32 (base 2), P rounded to the element type (as FlashAttention-2 does), O += P·V. The 4
// warps split the m16 query tiles and the keys; their (m, l, O) are merged in shared memory into
// one partial per (row, head, split), the same partials PartialKernel writes, so CombineKernel
// merges them with the rest of each row's keys. Keys before a row's start are masked per row.

constexpr int kGroupKeys = 64;        // keys per shared split (one tile in shared memory)
constexpr int kGroupPad = 8;          // elements of padding per shared row: conflict-free ldmatrix
constexpr int kGroupMaxQueries = 64;  // G · rep: up to 4 m16 tiles

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // the mma helpers (sm 80+; GroupKernelImageOk gates the launch)
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(SmemAddr(p)));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(SmemAddr(p)));
}

// 16 bytes global -> shared without a register round trip (sm 80 cp.async); `valid` false fills
// zeros (source size 0: nothing is read). All of a thread's copies are in flight until CpAsyncWait.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SmemAddr(dst)), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <typename T>
__device__ __forceinline__ void Mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void Mma16816<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
template <>
__device__ __forceinline__ void Mma16816<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Two floats rounded to T and packed into one 32-bit register (lo in the low half).
template <typename T>
__device__ __forceinline__ uint32_t Pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t Pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
template <>
__device__ __forceinline__ uint32_t Pack2<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

#endif

// Shared memory of one CTA: the K and V tiles, then (after the keys) the warps' states for the
// merge in the same bytes; Q passes through the V tile (loaded with K, read into registers before V).
template <typename T, int D>
struct GroupSmem {
  static constexpr int kRow = D + kGroupPad;  // elements per shared row
  static constexpr int kTileBytes = kGroupKeys * kRow * static_cast<int>(sizeof(T));
  static constexpr int kMergeBytes = kWarps * 16 * (D + 2) * static_cast<int>(sizeof(float));
  static constexpr int kBytes = 2 * kTileBytes > kMergeBytes ? 2 * kTileBytes : kMergeBytes;
  static_assert(kGroupMaxQueries <= kGroupKeys, "Q passes through the V tile");
};

// MT: m16 tiles of queries per CTA (1, 2 or 4); each tile is taken by 4 / MT warps, each with
// 64 · MT / 4 keys. G: rows per group, R: query heads per KV head (G · R <= 16 · MT).
template <typename T, int D, int MT>
__global__ void __launch_bounds__(kWarps * 32) GroupPromptKernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                                                 const int32_t* __restrict__ start, float* __restrict__ part_acc, float* __restrict__ part_ml,
                                                                 int64_t B, int64_t nkv, int64_t R, int64_t G, int64_t C, int64_t splits, float scale_log2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using S = GroupSmem<T, D>;
  constexpr int kRow = S::kRow;
  constexpr int kWarpsPerTile = kWarps / MT;
  constexpr int kKeysPerWarp = kGroupKeys / kWarpsPerTile;
  __shared__ __align__(16) unsigned char smem[S::kBytes];
  __shared__ int32_t row_start[kGroupMaxQueries];
  T* tk = reinterpret_cast<T*>(smem);
  T* tv = tk + kGroupKeys * kRow;
  const int64_t split = blockIdx.x, j = blockIdx.y, grp = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t nh = nkv * R, M = G * R, b0 = grp * G;
  const int64_t key0 = split * kGroupKeys;

  // The rows' starts (a row past B, or a retired one, starts after every key).
  for (int64_t w = threadIdx.x; w < G; w += blockDim.x) row_start[w] = b0 + w < B ? start[b0 + w] : INT32_MAX;
  __syncthreads();  // row_start visible
  int32_t lo32 = INT32_MAX;
  for (int64_t w = 0; w < G; ++w) lo32 = min(lo32, row_start[w]);
  const int64_t lo = max(static_cast<int64_t>(lo32), key0), hi = key0 + kGroupKeys;
  const bool any = lo < hi;  // CTA-uniform: some row attends to a key of this split
  const T* kb = k + (b0 * nkv + j) * C * D;
  const T* vb = v + (b0 * nkv + j) * C * D;
  // In flight together (cp.async, two groups): Q of the group (query m -> row b0 + m / R, head
  // j·R + m % R; zeros past M or B) into the V tile and the K tile of the group's first row
  // (zeros outside [lo, hi): never attended, never NaN); then V once Q is in registers.
  for (int64_t i = threadIdx.x; i < 16 * MT * (D / 8); i += blockDim.x) {
    const int64_t m = i / (D / 8), c = (i % (D / 8)) * 8;
    const bool ok = m < M && b0 + m / R < B;
    CpAsync16(tv + m * kRow + c, ok ? q + ((b0 + m / R) * nh + j * R + m % R) * D + c : q, ok);
  }
  if (any)
    for (int64_t i = threadIdx.x; i < kGroupKeys * (D / 8); i += blockDim.x) {
      const int64_t s = i / (D / 8), c = (i % (D / 8)) * 8, key = key0 + s;
      const bool ok = key >= lo && key < hi;
      CpAsync16(tk + s * kRow + c, ok ? kb + key * D + c : kb, ok);
    }
  CpAsyncCommit();
  CpAsyncWait<0>();
  __syncthreads();
  const int mi = warp % MT;                // this warp's m16 tile
  const int gq = lane / 4, tq = lane % 4;  // mma fragment coordinates: row group, thread in group
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kc = 0; kc < D / 16; ++kc) {
    const int mat = lane / 8, rr = lane % 8;
    LdMatrixX4(qf[kc], tv + (mi * 16 + rr + (mat & 1) * 8) * kRow + kc * 16 + (mat >> 1) * 8);
  }
  __syncthreads();  // Q is in registers: the V tile may be overwritten
  if (any)
    for (int64_t i = threadIdx.x; i < kGroupKeys * (D / 8); i += blockDim.x) {
      const int64_t s = i / (D / 8), c = (i % (D / 8)) * 8, key = key0 + s;
      const bool ok = key >= lo && key < hi;
      CpAsync16(tv + s * kRow + c, ok ? vb + key * D + c : vb, ok);
    }
  CpAsyncCommit();

  // This thread's two query rows of the tile (gq and gq + 8) and their rows' starts.
  int64_t qrow[2];
  int32_t qstart[2];
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    qrow[h2] = mi * 16 + gq + h2 * 8;
    qstart[h2] = qrow[h2] < M ? row_start[qrow[h2] / R] : INT32_MAX;
  }
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
  const int kw0 = (warp / MT) * kKeysPerWarp;  // this warp's first key in the tile
  if (any) {
#pragma unroll
    for (int ks = 0; ks < kKeysPerWarp; ks += 16) {
      const int kt = kw0 + ks;  // first of the 16 keys, in the tile
      // S = Q Kᵀ: keys kt..kt+7 (sc[0]) and kt+8..kt+15 (sc[1]).
      float sc[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        uint32_t kf[4];
        const int mat = lane / 8, rr = lane % 8;
        LdMatrixX4(kf, tk + (kt + rr + (mat >> 1) * 8) * kRow + kc * 16 + (mat & 1) * 8);
        Mma16816<T>(sc[0], qf[kc], kf[0], kf[1]);
        Mma16816<T>(sc[1], qf[kc], kf[2], kf[3]);
      }
      // Scale, mask (keys before the row's start), and the online softmax of both rows.
      float corr[2];
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        float mx = mrow[h2];
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int64_t key = key0 + kt + t * 8 + tq * 2 + e;
            float& x = sc[t][h2 * 2 + e];
            x = key >= qstart[h2] ? x * scale_log2 : -INFINITY;
            mx = fmaxf(mx, x);
          }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        corr[h2] = mx == -INFINITY ? 1.f : exp2f(mrow[h2] - mx);  // 0 while the old max is -inf
        float ps = 0.f;
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = sc[t][h2 * 2 + e];
            x = mx == -INFINITY ? 0.f : exp2f(x - mx);
            ps += x;
          }
        lrow[h2] = lrow[h2] * corr[h2] + ps;
        mrow[h2] = mx;
      }
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][0] *= corr[0];
        o[dt][1] *= corr[0];
        o[dt][2] *= corr[1];
        o[dt][3] *= corr[1];
      }
      if (ks == 0) {  // the V tile, loaded while Q·Kᵀ ran (uniform: every warp gets here)
        CpAsyncWait<0>();
        __syncthreads();
      }
      // O += P V: P's accumulator layout is the A fragment of the next mma (rounded to T).
      const uint32_t pa[4] = {Pack2<T>(sc[0][0], sc[0][1]), Pack2<T>(sc[0][2], sc[0][3]), Pack2<T>(sc[1][0], sc[1][1]), Pack2<T>(sc[1][2], sc[1][3])};
#pragma unroll
      for (int dt = 0; dt < D / 8; dt += 2) {
        uint32_t vf[4];
        const int mat = lane / 8, rr = lane % 8;
        LdMatrixX4Trans(vf, tv + (kt + rr + (mat & 1) * 8) * kRow + dt * 8 + (mat >> 1) * 8);
        Mma16816<T>(o[dt], pa, vf[0], vf[1]);
        Mma16816<T>(o[dt + 1], pa, vf[2], vf[3]);
      }
    }
  }
  // Row sums over the quad (each thread held 4 of every 16 keys' weights).
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    lrow[h2] += __shfl_xor_sync(0xffffffffu, lrow[h2], 1);
    lrow[h2] += __shfl_xor_sync(0xffffffffu, lrow[h2], 2);
  }
  __syncthreads();                             // every warp is done with the tiles: their bytes hold the merge states now
  float* st = reinterpret_cast<float*>(smem);  // [warp][16 rows][D + 2]: acc[D], m, l
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    float* row = st + (warp * 16 + gq + h2 * 8) * (D + 2);
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      row[dt * 8 + tq * 2] = o[dt][h2 * 2];
      row[dt * 8 + tq * 2 + 1] = o[dt][h2 * 2 + 1];
    }
    if (tq == 0) {
      row[D] = mrow[h2];
      row[D + 1] = lrow[h2];
    }
  }
  __syncthreads();
  // One partial per (query, split): the warps of each tile merged (acc unnormalized, as in
  // PartialKernel: A = Σ_w 2^(m_w − M) acc_w, L = Σ_w 2^(m_w − M) l_w).
  for (int64_t idx = threadIdx.x; idx < 16 * MT * D; idx += blockDim.x) {
    const int64_t m = idx / D, d = idx % D;
    if (m >= M || b0 + m / R >= B) continue;
    const int tile = static_cast<int>(m / 16), rr = static_cast<int>(m % 16);
    float Mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarpsPerTile; ++w) Mx = fmaxf(Mx, st[((w * MT + tile) * 16 + rr) * (D + 2) + D]);
    float L = 0.f, A = 0.f;
    if (Mx != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarpsPerTile; ++w) {
        const float* row = st + ((w * MT + tile) * 16 + rr) * (D + 2);
        const float c = exp2f(row[D] - Mx);
        L += row[D + 1] * c;
        A += row[d] * c;
      }
    }
    const int64_t out = ((b0 + m / R) * nh + j * R + m % R) * splits + split;
    part_acc[out * D + d] = A;
    if (d == 0) {
      part_ml[out * 2] = Mx;
      part_ml[out * 2 + 1] = L;
    }
  }
#else
  __trap();  // an image compiled below sm 80 (GroupKernelImageOk refuses it; never a silent no-op)
#endif
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

// The group kernel's launch for one head_dim / tile count (bf16 / fp16 only: mma operands).
template <typename T, int D>
const char* LaunchGroup(const void* q, const void* k, const void* v, const int32_t* start, float* part_acc, float* part_ml, int64_t B, int64_t nkv, int64_t rep,
                        int64_t G, int64_t C, int64_t splits, int64_t splits_sh, float scale_log2, cudaStream_t st) {
  const dim3 grid(static_cast<unsigned>(splits_sh), static_cast<unsigned>(nkv), static_cast<unsigned>((B + G - 1) / G));
  const int64_t M = G * rep;
  auto go = [&](auto kernel) {
    kernel<<<grid, kWarps * 32, 0, st>>>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), start, part_acc, part_ml, B, nkv, rep, G,
                                         C, splits, scale_log2);
    return LaunchStatus();
  };
  if (M <= 16) return go(GroupPromptKernel<T, D, 1>);
  if (M <= 32) return go(GroupPromptKernel<T, D, 2>);
  return go(GroupPromptKernel<T, D, 4>);
}

template <typename T>
const char* LaunchGroupT(const void* q, const void* k, const void* v, const int32_t* start, float* part_acc, float* part_ml, int64_t B, int64_t nkv,
                         int64_t rep, int64_t G, int64_t C, int64_t D, int64_t splits, int64_t splits_sh, float scale_log2, cudaStream_t st) {
  switch (D) {
    case 16:
      return LaunchGroup<T, 16>(q, k, v, start, part_acc, part_ml, B, nkv, rep, G, C, splits, splits_sh, scale_log2, st);
    case 32:
      return LaunchGroup<T, 32>(q, k, v, start, part_acc, part_ml, B, nkv, rep, G, C, splits, splits_sh, scale_log2, st);
    case 64:
      return LaunchGroup<T, 64>(q, k, v, start, part_acc, part_ml, B, nkv, rep, G, C, splits, splits_sh, scale_log2, st);
    case 128:
      return LaunchGroup<T, 128>(q, k, v, start, part_acc, part_ml, B, nkv, rep, G, C, splits, splits_sh, scale_log2, st);
  }
  return "decode attention: the group kernel takes head_dim 16, 32, 64 or 128";
}

// Whether the loaded image of the group kernel holds its mma body: the PTX it came from targets
// sm 80 or newer (a build for older architectures JIT-compiled for a newer GPU compiles the body
// out). Read once per device (atomics: planning may run on several threads).
bool GroupKernelImageOk() {
  static std::atomic<int> ok[64];  // 0 unknown, 1 yes, 2 no
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  int v = ok[dev].load();
  if (v == 0) {
    cudaFuncAttributes attr{};
    const bool yes = cudaFuncGetAttributes(&attr, GroupPromptKernel<__nv_bfloat16, 128, 1>) == cudaSuccess && attr.ptxVersion >= 80;
    if (!yes) cudaGetLastError();  // clear a failed query's error
    v = yes ? 1 : 2;
    ok[dev].store(v);
  }
  return v == 1;
}

// PAPERGYM_DECODE_GROUP_PROMPT=0 turns the group kernel off (every row reads its own prompt copy,
// the kernel before; A/B). Read per call, so one process can compare both.
bool GroupPromptSwitchedOn() {
  const char* e = std::getenv("PAPERGYM_DECODE_GROUP_PROMPT");
  return !(e && e[0] == '0' && e[1] == '\0');
}

template <typename T, int E, int R>
const char* LaunchER(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work, int64_t B, int64_t nkv,
                     int64_t C, int64_t D, double scale, const DecodeSplits& sp, cudaStream_t st) {
  const int64_t nh = nkv * R;
  float* part_acc = work;
  float* part_ml = work + B * nh * sp.total * D;
  const float scale_log2 = static_cast<float>(scale * 1.4426950408889634);  // log2(e)
  if constexpr (!std::is_same<T, float>::value) {                           // mma operands are 16-bit (PlanDecodeSplits plans no shared split for float32)
    if (sp.shared > 0) {
      if (const char* err = LaunchGroupT<T>(q, k, v, start, part_acc, part_ml, B, nkv, R, sp.group, C, D, sp.total, sp.shared, scale_log2, st)) return err;
    }
  }
  const int64_t key_base = sp.shared * kGroupKeys, row_splits = sp.total - sp.shared;
  const dim3 grid(static_cast<unsigned>(row_splits), static_cast<unsigned>(nkv), static_cast<unsigned>(B));
  constexpr int kU = E * R <= 16 ? 4 : E * R <= 32 ? 2 : 1;
  if (kU > 1 && KeysPerWarp() > 1)
    PartialKernel<T, E, R, kU><<<grid, kWarps * 32, 0, st>>>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), start, slot,
                                                             part_acc, part_ml, nkv, C, D, sp.total, sp.chunk, scale_log2, key_base, sp.shared);
  else
    PartialKernel<T, E, R, 1><<<grid, kWarps * 32, 0, st>>>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), start, slot, part_acc,
                                                            part_ml, nkv, C, D, sp.total, sp.chunk, scale_log2, key_base, sp.shared);
  if (const char* err = LaunchStatus()) return err;
  const int threads = D <= 32 ? 32 : D <= 64 ? 64 : D <= 128 ? 128 : 256;
  CombineKernel<T><<<static_cast<unsigned>(B * nh), threads, sp.total * sizeof(float), st>>>(part_acc, part_ml, static_cast<T*>(o), sp.total, D);
  return LaunchStatus();
}

template <typename T, int E>
const char* LaunchE(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work, int64_t B, int64_t nkv,
                    int64_t rep, int64_t C, int64_t D, double scale, const DecodeSplits& sp, cudaStream_t st) {
  switch (rep) {
    case 1:
      return LaunchER<T, E, 1>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, sp, st);
    case 2:
      return LaunchER<T, E, 2>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, sp, st);
    case 4:
      return LaunchER<T, E, 4>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, sp, st);
    case 8:
      return LaunchER<T, E, 8>(q, k, v, start, slot, o, work, B, nkv, C, D, scale, sp, st);
  }
  return "decode attention: unsupported GQA ratio";
}

template <typename T>
const char* LaunchT(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work, int64_t B, int64_t nkv,
                    int64_t rep, int64_t C, int64_t D, double scale, const DecodeSplits& sp, cudaStream_t st) {
  if (D <= 32) return LaunchE<T, 1>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, sp, st);
  if (D <= 64) return LaunchE<T, 2>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, sp, st);
  if (D <= 128) return LaunchE<T, 4>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, sp, st);
  if (D <= 256) return LaunchE<T, 8>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, sp, st);
  return "decode attention: head_dim above 256";
}

}  // namespace

bool DecodeAttentionSupported(int64_t rep, int64_t D) {
  return D >= 1 && D <= 256 && (rep == 1 || rep == 2 || rep == 4 || rep == 8);
}

DecodeSplits PlanDecodeSplits(int64_t B, int64_t nh, int64_t rep, int64_t C, int64_t D, const DecodeGroups& groups, DecodeAttnType type) {
  DecodeSplits sp;
  sp.chunk = Chunk(B, nh, C);
  sp.total = (C + sp.chunk - 1) / sp.chunk;
  // Rows per group: the largest divisor of the caller's group that keeps G · rep <= 64 queries.
  int64_t G = 0;
  if (groups.rows >= 2 && rep >= 1)
    for (int64_t g = groups.rows; g >= 2; --g)
      if (groups.rows % g == 0 && g * rep <= kGroupMaxQueries) {
        G = g;
        break;
      }
  const int64_t shared = groups.prefix_end / kGroupKeys;
  if (G < 2 || shared < 1 || groups.prefix_end > C || type == DecodeAttnType::kFloat32 || !(D == 16 || D == 32 || D == 64 || D == 128) ||
      !GroupPromptSwitchedOn() || !GroupKernelImageOk())
    return sp;
  const int64_t rest = (C - shared * kGroupKeys + sp.chunk - 1) / sp.chunk;
  // At least one per-row split (the slots from 64·shared on hold the decoded tokens), and the
  // combine keeps one weight per split in shared memory.
  if (rest < 1 || shared + rest > 4096) return sp;
  sp.shared = shared;
  sp.total = shared + rest;
  sp.group = G;
  return sp;
}

int64_t DecodeAttentionWorkFloats(int64_t B, int64_t nh, int64_t D, const DecodeSplits& splits) {
  return B * nh * splits.total * (D + 2);
}

const char* DecodeAttention(const void* q, const void* k, const void* v, const int32_t* start, const int64_t* slot, void* o, float* work, int64_t B,
                            int64_t nkv, int64_t rep, int64_t C, int64_t D, double scale, DecodeAttnType type, const DecodeSplits& sp, void* stream) {
  if (B == 0) return nullptr;
  auto st = static_cast<cudaStream_t>(stream);
  switch (type) {
    case DecodeAttnType::kFloat32:
      return LaunchT<float>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, sp, st);
    case DecodeAttnType::kBFloat16:
      return LaunchT<__nv_bfloat16>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, sp, st);
    case DecodeAttnType::kFloat16:
      return LaunchT<__half>(q, k, v, start, slot, o, work, B, nkv, rep, C, D, scale, sp, st);
  }
  return "decode attention: unsupported dtype";
}

}  // namespace cuda_kernels
}  // namespace pg
