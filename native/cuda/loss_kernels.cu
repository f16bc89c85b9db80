// Row kernels of the fused lm_head losses (native/loss/jsd.cc, grpo.cc, common.cc): one thread
// block per token row of a float32 logits chunk [C, V], all the row's softmax math in one launch.
// Built only by the cmake-js build when a CUDA compiler is found (PG_WITH_CUDA_KERNELS); the ATen
// path in native/loss is the fallback and the reference these kernels are tested against
// (test/gpu/cuda.test.ts). No ATen headers here: plain pointers and the caller's stream.
//
// Formulas (the same as the ATen path, see the headers for the sources):
//   JSD  (native/loss/jsd.h; GKD, Agarwal et al. 2024 Eq. 1): per row, with ls = log softmax(z_s/τ),
//        lt = log softmax(z_t/τ), d = lt − ls, c = log1p(β·expm1(min(d,0))) + log1p((1−β)·expm1(min(−d,0))):
//        a = c + max(d,0) (= log M − log S), b = c − min(d,0) (= log M − log T),
//        JSD = −(1−β)·Σ S·a − β·Σ T·b,  g_j = −(1−β)·S_j·a_j,  dJSD/dz_s,j = (g_j − S_j·Σg)/τ.
//        β = 0: KL(T‖S), dz = (S − T)/τ;  β = 1: KL(S‖T), dz = S_j·(ls_j − lt_j − KL)/τ.
//   GRPO (native/loss/grpo.h; DAPO Eq. 8 / TRL's clipped surrogate with k3 KL): logp = z_tok/τ − lse,
//        per-token loss and dloss/dlogp as in GrpoFn, dz_j = dl·(1[j = tok] − p_j)/τ.
//   CE   (the same kernel, `ce`): per-token loss −logp, dl = −1, i.e. dz_j = w·(p_j − 1[j = tok])/τ
//        (torch.nn.functional.cross_entropy's gradient).
// Gradients are written in place over the row's own float32 logits, converted to the output dtype
// (bf16 / fp16 rows are packed at the start of the row's bytes: row stride 2V elements); every
// block iteration reads its elements, synchronises, then writes, so a write never lands on an
// element that a later iteration still has to read.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda/convert.cuh"
#include "cuda/loss_kernels.h"
#include "cuda/reduce.cuh"

namespace pg {
namespace cuda_kernels {
namespace {

constexpr int kThreads = 1024;

__device__ __forceinline__ float Scaled(float z, float temp) {
  return temp == 1.f ? z : z / temp;
}

__device__ float RowLse(const float* z, int64_t V, float temp) {
  MaxSum s{-INFINITY, 0.f};
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) Push(s, Scaled(z[j], temp));
  return Lse(BlockMerge(s));
}

// mode: 0 = general β, 1 = β = 0 (KL(T‖S)), 2 = β = 1 (KL(S‖T)).
template <typename OutT>
__global__ void __launch_bounds__(kThreads) JsdRowsKernel(float* zs, const float* zt, int64_t V, int64_t ld, float temp, float beta, float om, int mode,
                                                          const float* row_w, float gfac, int need_grad, float* row_loss) {
  const int64_t r = blockIdx.x;
  float* s_row = zs + r * ld;
  const float* t_row = zt + r * ld;
  OutT* out = reinterpret_cast<OutT*>(s_row);
  const float w = row_w[r];
  if (w == 0.f) {  // masked-out row: no loss, zero gradient
    if (threadIdx.x == 0) row_loss[r] = 0.f;
    if (need_grad)
      for (int64_t base = 0; base < V; base += blockDim.x) {
        __syncthreads();
        const int64_t j = base + threadIdx.x;
        if (j < V) out[j] = To<OutT>(0.f);
      }
    return;
  }
  MaxSum ss{-INFINITY, 0.f}, st{-INFINITY, 0.f};
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    Push(ss, Scaled(s_row[j], temp));
    Push(st, Scaled(t_row[j], temp));
  }
  const float lse_s = Lse(BlockMerge(ss)), lse_t = Lse(BlockMerge(st));
  if (isnan(lse_s) || isnan(lse_t)) {  // NaN logits: NaN loss and gradient, as the ATen path
    if (threadIdx.x == 0) row_loss[r] = NAN;
    if (need_grad)
      for (int64_t base = 0; base < V; base += blockDim.x) {
        __syncthreads();
        const int64_t j = base + threadIdx.x;
        if (j < V) out[j] = To<OutT>(NAN);
      }
    return;
  }
  // Pass 2: the row's divergence and Σ g.
  float loss = 0.f, gsum = 0.f;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    const float ls = Scaled(s_row[j], temp) - lse_s, lt = Scaled(t_row[j], temp) - lse_t;
    const float S = expf(ls), T = expf(lt);
    if (mode == 1) {
      loss += T > 0.f ? T * (lt - ls) : 0.f;
    } else if (mode == 2) {
      loss += S > 0.f ? S * (ls - lt) : 0.f;
    } else {
      const float d = lt - ls;
      const float c = d < 0.f ? log1pf(beta * expm1f(d)) : log1pf(om * expm1f(-d));
      const float tS = S > 0.f ? S * (c + fmaxf(d, 0.f)) : 0.f;
      const float tT = T > 0.f ? T * (c - fminf(d, 0.f)) : 0.f;
      loss += -om * tS - beta * tT;
      gsum += -om * tS;
    }
  }
  loss = BlockSum(loss);
  if (mode == 0) gsum = BlockSum(gsum);
  if (threadIdx.x == 0) row_loss[r] = loss;
  if (!need_grad) return;
  const float scale = w * gfac;
  for (int64_t base = 0; base < V; base += blockDim.x) {
    const int64_t j = base + threadIdx.x;
    float g = 0.f;
    if (j < V) {
      const float ls = Scaled(s_row[j], temp) - lse_s, lt = Scaled(t_row[j], temp) - lse_t;
      const float S = expf(ls), T = expf(lt);
      if (mode == 1) {
        g = S - T;
      } else if (mode == 2) {
        g = (S > 0.f ? S * (ls - lt) : 0.f) - S * loss;
      } else {
        const float d = lt - ls;
        const float c = d < 0.f ? log1pf(beta * expm1f(d)) : log1pf(om * expm1f(-d));
        const float tS = S > 0.f ? S * (c + fmaxf(d, 0.f)) : 0.f;
        g = -om * tS - S * gsum;
      }
      g *= scale;
    }
    __syncthreads();
    if (j < V) out[j] = To<OutT>(g);
  }
}

template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    GrpoRowsKernel(float* z, int64_t V, int64_t ld, float temp, const int64_t* tok, const float* old, const float* ref, const float* adv, const float* w,
                   float eps_low, float eps_high, float kl_coef, float kl_clamp, int need_grad, float* logp_out, float* row_loss, int ce) {
  __shared__ float dl_shared;
  const int64_t r = blockIdx.x;
  float* row = z + r * ld;
  OutT* out = reinterpret_cast<OutT*>(row);
  const float lse = RowLse(row, V, temp);
  const int64_t t = tok[r];
  if (threadIdx.x == 0 && ce) {
    const float logp = Scaled(row[t], temp) - lse, wr = w[r];
    logp_out[r] = logp;
    row_loss[r] = wr != 0.f ? -logp * wr : 0.f;
    dl_shared = wr != 0.f ? -wr / temp : 0.f;
  } else if (threadIdx.x == 0) {
    const float logp = Scaled(row[t], temp) - lse;
    const float A = adv[r], wr = w[r];
    const float ratio = expf(logp - old[r]);
    const float coef2 = fminf(fmaxf(ratio, 1.f - eps_low), 1.f + eps_high);
    const float l1 = ratio * A, l2 = coef2 * A;
    float per = -fminf(l1, l2);
    const float w1 = l1 < l2 ? 1.f : (l1 == l2 ? 0.5f : 0.f);
    const float inr = (ratio >= 1.f - eps_low && ratio <= 1.f + eps_high) ? 1.f : 0.f;
    float dl = -A * (w1 + (1.f - w1) * inr) * ratio;
    if (kl_coef != 0.f) {
      const float raw = ref[r] - logp;
      const float x = fminf(fmaxf(raw, -kl_clamp), kl_clamp);
      per += kl_coef * (expf(x) - x - 1.f);
      const float in_clamp = (raw >= -kl_clamp && raw <= kl_clamp) ? 1.f : 0.f;
      dl -= kl_coef * (expf(x) - 1.f) * in_clamp;
    }
    logp_out[r] = logp;
    row_loss[r] = wr != 0.f ? per * wr : 0.f;
    dl_shared = wr != 0.f ? dl * wr / temp : 0.f;
  }
  __syncthreads();
  if (!need_grad) return;
  const float dl = dl_shared;
  for (int64_t base = 0; base < V; base += blockDim.x) {
    const int64_t j = base + threadIdx.x;
    float g = 0.f;
    if (j < V) {
      const float x = Scaled(row[j], temp);
      g = -dl * expf(x - lse) + (j == t ? dl : 0.f);
    }
    __syncthreads();
    if (j < V) out[j] = To<OutT>(g);
  }
}

__global__ void __launch_bounds__(kThreads) RowLogprobsKernel(const float* z, int64_t V, int64_t ld, float temp, const int64_t* tok, float* logp_out) {
  const int64_t r = blockIdx.x;
  const float* row = z + r * ld;
  const float lse = RowLse(row, V, temp);
  if (threadIdx.x == 0) logp_out[r] = Scaled(row[tok[r]], temp) - lse;
}

int Threads(int64_t V) {
  int t = 32;
  while (t < kThreads && t < V) t <<= 1;
  return t;
}

}  // namespace

const char* JsdRows(float* zs, const float* zt, int64_t rows, int64_t V, int64_t ld, float temperature, double beta, const float* row_w, float grad_factor,
                    bool need_grad, OutType out, float* row_loss, void* stream) {
  if (rows == 0) return nullptr;
  // The special cases are chosen from the double β (as the ATen path does), and 1 − β is formed in
  // double: β = 1 − 1e-9 stays the general JSD even though it rounds to 1.0f.
  const int mode = beta == 0.0 ? 1 : (beta == 1.0 ? 2 : 0);
  const float b = static_cast<float>(beta), om = static_cast<float>(1.0 - beta);
  auto s = static_cast<cudaStream_t>(stream);
  const int th = Threads(V);
  switch (out) {
    case OutType::kFloat32:
      JsdRowsKernel<float><<<rows, th, 0, s>>>(zs, zt, V, ld, temperature, b, om, mode, row_w, grad_factor, need_grad, row_loss);
      break;
    case OutType::kBFloat16:
      JsdRowsKernel<__nv_bfloat16><<<rows, th, 0, s>>>(zs, zt, V, ld, temperature, b, om, mode, row_w, grad_factor, need_grad, row_loss);
      break;
    case OutType::kFloat16:
      JsdRowsKernel<__half><<<rows, th, 0, s>>>(zs, zt, V, ld, temperature, b, om, mode, row_w, grad_factor, need_grad, row_loss);
      break;
  }
  return LaunchStatus();
}

const char* GrpoRows(float* z, int64_t rows, int64_t V, int64_t ld, float temperature, const int64_t* tok, const float* old_logp, const float* ref_logp,
                     const float* adv, const float* w, float eps_low, float eps_high, float kl_coef, float kl_clamp, bool need_grad, OutType out, float* logp,
                     float* row_loss, void* stream) {
  if (rows == 0) return nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  const int th = Threads(V);
  switch (out) {
    case OutType::kFloat32:
      GrpoRowsKernel<float>
          <<<rows, th, 0, s>>>(z, V, ld, temperature, tok, old_logp, ref_logp, adv, w, eps_low, eps_high, kl_coef, kl_clamp, need_grad, logp, row_loss, 0);
      break;
    case OutType::kBFloat16:
      GrpoRowsKernel<__nv_bfloat16>
          <<<rows, th, 0, s>>>(z, V, ld, temperature, tok, old_logp, ref_logp, adv, w, eps_low, eps_high, kl_coef, kl_clamp, need_grad, logp, row_loss, 0);
      break;
    case OutType::kFloat16:
      GrpoRowsKernel<__half>
          <<<rows, th, 0, s>>>(z, V, ld, temperature, tok, old_logp, ref_logp, adv, w, eps_low, eps_high, kl_coef, kl_clamp, need_grad, logp, row_loss, 0);
      break;
  }
  return LaunchStatus();
}

const char* CeRows(float* z, int64_t rows, int64_t V, int64_t ld, float temperature, const int64_t* tok, const float* w, bool need_grad, OutType out,
                   float* logp, float* row_loss, void* stream) {
  if (rows == 0) return nullptr;
  auto s = static_cast<cudaStream_t>(stream);
  const int th = Threads(V);
  switch (out) {
    case OutType::kFloat32:
      GrpoRowsKernel<float><<<rows, th, 0, s>>>(z, V, ld, temperature, tok, nullptr, nullptr, nullptr, w, 0.f, 0.f, 0.f, 0.f, need_grad, logp, row_loss, 1);
      break;
    case OutType::kBFloat16:
      GrpoRowsKernel<__nv_bfloat16>
          <<<rows, th, 0, s>>>(z, V, ld, temperature, tok, nullptr, nullptr, nullptr, w, 0.f, 0.f, 0.f, 0.f, need_grad, logp, row_loss, 1);
      break;
    case OutType::kFloat16:
      GrpoRowsKernel<__half><<<rows, th, 0, s>>>(z, V, ld, temperature, tok, nullptr, nullptr, nullptr, w, 0.f, 0.f, 0.f, 0.f, need_grad, logp, row_loss, 1);
      break;
  }
  return LaunchStatus();
}

const char* RowLogprobs(const float* z, int64_t rows, int64_t V, int64_t ld, float temperature, const int64_t* tok, float* logp, void* stream) {
  if (rows == 0) return nullptr;
  RowLogprobsKernel<<<rows, Threads(V), 0, static_cast<cudaStream_t>(stream)>>>(z, V, ld, temperature, tok, logp);
  return LaunchStatus();
}

bool KernelImageAvailable() {
  cudaFuncAttributes a;
  const cudaError_t e = cudaFuncGetAttributes(&a, RowLogprobsKernel);
  (void)cudaGetLastError();  // clear the sticky-free launch error state of a failed probe
  return e == cudaSuccess;
}

}  // namespace cuda_kernels
}  // namespace pg
