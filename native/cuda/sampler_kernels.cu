// Fused top-k + log-sum-exp over the vocabulary (declarations and contract: sampler_kernels.h).
//
// One CTA (16 warps) per row. Phase 1: warp w scans its contiguous slice of the row, lanes on
// consecutive ids; every lane keeps an online (max, Σ exp) of the scaled logits, and the warp keeps
// its k best (value, id) pairs in shared memory with the current worst of them in registers. A
// lane whose value beats that worst is inserted warp-synchronously (ballot, then one candidate at
// a time: overwrite the worst slot, find the new worst with a warp reduction); after the first
// few hundred ids a candidate is rare (about k·ln(n/k) insertions for values in random order).
// Phase 2: the warps' (max, Σ exp) merge into the row's log-sum-exp, and warp 0 takes the k best
// of the 16·k kept pairs, best first, by the order (value descending, id ascending).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <cmath>

#include "cuda/convert.cuh"
#include "cuda/reduce.cuh"
#include "cuda/sampler_kernels.h"

namespace pg {
namespace cuda_kernels {
namespace {

constexpr int kWarps = 16;
constexpr int kK = static_cast<int>(kFusedTopKMax);
constexpr int kNoId = 0x7fffffff;

// (a, ia) ranks before (b, ib): larger value, then smaller id.
__device__ __forceinline__ bool Before(float a, int ia, float b, int ib) {
  return a > b || (a == b && ia < ib);
}

// A (value, id) pair and where it is kept (`at` < 0: none).
struct Pick {
  float v;
  int id, at;
};

// Whether `cand` replaces `cur` when looking for the pair that ranks first (kLast false) or last.
template <bool kLast>
__device__ __forceinline__ bool Prefer(const Pick& cand, const Pick& cur) {
  if (cand.at < 0) return false;
  if (cur.at < 0) return true;
  return kLast ? Before(cur.v, cur.id, cand.v, cand.id) : Before(cand.v, cand.id, cur.v, cur.id);
}

// The lanes' picks reduced over the warp: every lane gets the first (or last) ranked one.
template <bool kLast>
__device__ __forceinline__ Pick WarpPick(Pick p) {
  for (int off = 16; off > 0; off >>= 1) {
    const Pick o{__shfl_xor_sync(0xffffffffu, p.v, off), __shfl_xor_sync(0xffffffffu, p.id, off), __shfl_xor_sync(0xffffffffu, p.at, off)};
    if (Prefer<kLast>(o, p)) p = o;
  }
  return p;
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) TopKLseKernel(const T* __restrict__ logits, float inv_temperature, float* __restrict__ vals,
                                                             int64_t* __restrict__ ids, float* __restrict__ lse, int64_t V, int k) {
  __shared__ float bv[kWarps][kK];
  __shared__ int bi[kWarps][kK];
  __shared__ float wm[kWarps], ws[kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* row = logits + static_cast<int64_t>(blockIdx.x) * V;
  for (int j = lane; j < k; j += 32) {
    bv[warp][j] = -INFINITY;
    bi[warp][j] = kNoId;
  }
  __syncwarp();
  // The worst kept pair and its slot (every slot starts as (-inf, kNoId): any id ranks before it).
  float worst = -INFINITY;
  int worst_id = kNoId, worst_slot = 0;
  MaxSum acc{-INFINITY, 0.f};  // this lane's online log-sum-exp (a NaN logit makes it NaN, as ATen's)
  const int64_t per = ((V + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int64_t lo = warp * per, hi = min(V, lo + per);
  for (int64_t base = lo; base < hi; base += 32) {
    const int64_t i = base + lane;
    float x = -INFINITY;
    if (i < hi) {
      // x · (1/T) rounded as ATen's CUDA division by a host scalar computes it (a * reciprocal(b)).
      x = F(row[i]) * inv_temperature;
      Push(acc, x);
      if (x != x) x = -INFINITY;  // NaN: never selected (ranked as -inf)
    }
    const int id = static_cast<int>(i);
    unsigned want = __ballot_sync(0xffffffffu, i < hi && Before(x, id, worst, worst_id));
    while (want) {
      const int src = __ffs(want) - 1;
      want &= want - 1;
      const float cx = __shfl_sync(0xffffffffu, x, src);
      const int cid = __shfl_sync(0xffffffffu, id, src);
      if (!Before(cx, cid, worst, worst_id)) continue;  // the worst rose since the ballot
      if (lane == 0) {
        bv[warp][worst_slot] = cx;
        bi[warp][worst_slot] = cid;
      }
      __syncwarp();
      // New worst: the pair that ranks last among the k kept.
      Pick w{INFINITY, -1, -1};
      for (int j = lane; j < k; j += 32) {
        const Pick c{bv[warp][j], bi[warp][j], j};
        if (Prefer<true>(c, w)) w = c;
      }
      w = WarpPick<true>(w);
      worst = w.v;
      worst_id = w.id;
      worst_slot = w.at;
      __syncwarp();
    }
  }
  // Row log-sum-exp: lanes, then warps.
  acc = WarpMerge(acc);
  if (lane == 0) {
    wm[warp] = acc.m;
    ws[warp] = acc.l;
  }
  __syncthreads();
  if (warp != 0) return;
  {
    const MaxSum row_acc = WarpMerge(lane < kWarps ? MaxSum{wm[lane], ws[lane]} : MaxSum{-INFINITY, 0.f});
    if (lane == 0) lse[blockIdx.x] = Lse(row_acc);
  }
  // The k best of the kWarps · k kept pairs, best first; a taken pair is marked with id -1.
  float* cv = &bv[0][0];
  int* ci = &bi[0][0];
  const int n = kWarps * kK;
  for (int j = 0; j < k; ++j) {
    Pick best{-INFINITY, -1, -1};
    for (int c = lane; c < n; c += 32) {
      if ((c % kK) >= k || ci[c] < 0) continue;
      const Pick cand{cv[c], ci[c], c};
      if (Prefer<false>(cand, best)) best = cand;
    }
    best = WarpPick<false>(best);
    if (lane == 0) {
      const int64_t o = static_cast<int64_t>(blockIdx.x) * k + j;
      vals[o] = best.v;
      // A row with fewer than k non-NaN logits keeps unfilled slots (kNoId): clamp into the vocabulary.
      ids[o] = best.id < 0 || best.id >= V ? V - 1 : best.id;
      if (best.at >= 0) ci[best.at] = -1;
    }
    __syncwarp();
  }
}

}  // namespace

const char* FusedTopKLse(const void* logits, float inv_temperature, float* vals, int64_t* ids, float* lse, int64_t R, int64_t V, int64_t k, TopKInType type,
                         void* stream) {
  if (R == 0) return nullptr;
  if (k < 1 || k > kFusedTopKMax || k > V) return "fused top-k: k must be in [1, min(V, 64)]";
  if (V >= kNoId || R > 0x7fffffffLL) return "fused top-k: too many rows or ids";
  auto st = static_cast<cudaStream_t>(stream);
  const unsigned grid = static_cast<unsigned>(R);
  const int kk = static_cast<int>(k);
  switch (type) {
    case TopKInType::kFloat32:
      TopKLseKernel<float><<<grid, kWarps * 32, 0, st>>>(static_cast<const float*>(logits), inv_temperature, vals, ids, lse, V, kk);
      break;
    case TopKInType::kBFloat16:
      TopKLseKernel<__nv_bfloat16><<<grid, kWarps * 32, 0, st>>>(static_cast<const __nv_bfloat16*>(logits), inv_temperature, vals, ids, lse, V, kk);
      break;
    case TopKInType::kFloat16:
      TopKLseKernel<__half><<<grid, kWarps * 32, 0, st>>>(static_cast<const __half*>(logits), inv_temperature, vals, ids, lse, V, kk);
      break;
  }
  return LaunchStatus();
}

}  // namespace cuda_kernels
}  // namespace pg
