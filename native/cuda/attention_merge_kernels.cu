// Merge of two softmax sides of an attention (declarations and formula: attention_merge_kernels.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda/attention_merge_kernels.h"
#include "cuda/convert.cuh"

namespace pg {
namespace cuda_kernels {
namespace {

/// at::maximum's float semantics: NaN if either operand is NaN.
__device__ __forceinline__ float MaxNan(float a, float b) {
  if (isnan(a) || isnan(b)) return NAN;
  return a > b ? a : b;
}

template <typename T>
__global__ void MergeKernel(MergeSide p, MergeSide s, T* __restrict__ out, int64_t T_, int64_t nh, int64_t D, int64_t n_vec) {
  constexpr int V = kVec16<T>;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_vec) return;
  const int64_t per_row = D / V;
  const int64_t dv = (i % per_row) * V;
  const int64_t hi = i / per_row;  // (b, t, h) flat, h fastest (out's layout)
  const int64_t h = hi % nh, bt = hi / nh, t = bt % T_, b = bt / T_;
  const float lp = p.lse[b * p.l_b + h * p.l_h + t * p.l_t];
  const float ls = s.lse[b * s.l_b + h * s.l_h + t * s.l_t];
  float m = MaxNan(lp, ls);
  if (isinf(m) && m < 0.f) m = 0.f;
  // Each operation rounded on its own, in the ATen merge's order (no FMA contraction).
  const float wp = expf(__fsub_rn(lp, m)), ws = expf(__fsub_rn(ls, m));
  float den = __fadd_rn(wp, ws);
  if (den < 1e-30f) den = 1e-30f;  // clamp_min: a NaN stays NaN
  float op[V], os[V];
  Load16(static_cast<const T*>(p.o) + b * p.o_b + h * p.o_h + t * p.o_t + dv, op);
  Load16(static_cast<const T*>(s.o) + b * s.o_b + h * s.o_h + t * s.o_t + dv, os);
#pragma unroll
  for (int e = 0; e < V; ++e) op[e] = __fdiv_rn(__fadd_rn(__fmul_rn(op[e], wp), __fmul_rn(os[e], ws)), den);
  Store16(out + hi * D + dv, op);
}

int64_t VecOf(MergeType type) {
  return type == MergeType::kFloat32 ? 4 : 8;
}

}  // namespace

bool MergeSupported(const MergeSide& p, const MergeSide& s, const void* out, int64_t D, MergeType type) {
  const int64_t v = VecOf(type);
  if (D <= 0 || D % v != 0 || !p.o || !s.o || !p.lse || !s.lse || !out) return false;
  for (const MergeSide* x : {&p, &s})
    if (x->o_b % v != 0 || x->o_h % v != 0 || x->o_t % v != 0) return false;
  return Aligned16({p.o, s.o, out});
}

const char* MergeAttentionStates(const MergeSide& p, const MergeSide& s, void* out, int64_t B, int64_t T, int64_t nh, int64_t D, MergeType type, void* stream) {
  const int64_t n_vec = B * T * nh * (D / VecOf(type));
  if (n_vec == 0) return nullptr;
  constexpr int kThreads = 256;
  const unsigned blocks = static_cast<unsigned>((n_vec + kThreads - 1) / kThreads);
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (type) {
    case MergeType::kFloat32:
      MergeKernel<float><<<blocks, kThreads, 0, st>>>(p, s, static_cast<float*>(out), T, nh, D, n_vec);
      break;
    case MergeType::kBFloat16:
      MergeKernel<__nv_bfloat16><<<blocks, kThreads, 0, st>>>(p, s, static_cast<__nv_bfloat16*>(out), T, nh, D, n_vec);
      break;
    case MergeType::kFloat16:
      MergeKernel<__half><<<blocks, kThreads, 0, st>>>(p, s, static_cast<__half*>(out), T, nh, D, n_vec);
      break;
  }
  return LaunchStatus();
}

}  // namespace cuda_kernels
}  // namespace pg
