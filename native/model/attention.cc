#include "model/attention.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cuda/kernels.h"
#include "model/fused_ops.h"

#ifdef PG_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAStream.h>

#include "cuda/attention_merge_kernels.h"
#endif

namespace pg {

namespace {

/// Set once ATen's CUDA flash op refused the inputs of a call (e.g. a GPU below sm 80): later
/// calls take the copy path (DecoderModel::SharedPrefixFlash).
std::atomic<bool>& CudaFlashRefused() {
  static std::atomic<bool> refused{false};
  return refused;
}

/// Set once the CUDA flash op refused K/V with fewer heads than q (a libtorch whose flash op
/// takes no GQA): later calls repeat the K/V heads before the call.
std::atomic<bool>& CudaFlashGqaRefused() {
  static std::atomic<bool> refused{false};
  return refused;
}

/// K/V heads repeated for the query heads (transformers' repeat_kv: query head h reads KV head
/// h / rep).
at::Tensor RepeatHeads(const at::Tensor& t, int64_t rep) {
  return rep > 1 ? t.repeat_interleave(rep, 1) : t;
}

/// One softmax side of SharedPrefixAttention through the flash kernel, which returns the
/// softmax's log-sum-exp beside its output: q [Bq, nh, N, hd], k / v [Bq, nkv, K, hd] with
/// nh = nkv · rep -> (o [Bq, nh, N, hd] in q's dtype, lse [Bq, nh, N] float32, natural log).
/// CUDA: ATen's FlashAttention-2 op with the K/V heads as they are (the kernel maps query head h
/// to KV head h / rep; repeated first only where the op refuses that); CPU: ATen's CPU flash op
/// on repeated K/V heads. DecoderModel::SharedPrefixFlash says where they apply. Returns false
/// where neither applies or the CUDA op refuses the inputs (its argument / architecture checks
/// run before any launch; then CudaFlashRefused is set), and the caller takes the math path. Out
/// of memory and CUDA errors are rethrown, not a refusal.
bool FlashSide(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal, double sm_scale, at::Tensor* o, at::Tensor* lse) {
  if (!DecoderModel::SharedPrefixFlash(q.device(), q.scalar_type(), q.size(3))) return false;
  const int64_t rep = q.size(1) / k.size(1);
  const at::Tensor kq = k.to(q.scalar_type()), vq = v.to(q.scalar_type());
  if (q.is_cuda()) {
    // One flash call: true when it ran, false when the op refused its inputs; out of memory and
    // CUDA errors are rethrown.
    auto ran = [&](const at::Tensor& kk, const at::Tensor& vv) {
      try {
        auto r = at::_scaled_dot_product_flash_attention(q, kk, vv, 0.0, causal, false, sm_scale);
        *o = std::get<0>(r);
        *lse = std::get<1>(r).narrow(2, 0, q.size(2));
        return true;
      } catch (const c10::OutOfMemoryError&) {
        throw;
      } catch (const c10::AcceleratorError&) {
        throw;
      } catch (const c10::Error&) {
        return false;
      }
    };
    if (rep > 1 && !CudaFlashGqaRefused().load()) {
      if (ran(kq, vq)) return true;
      CudaFlashGqaRefused().store(true);
    }
    if (ran(RepeatHeads(kq, rep), RepeatHeads(vq, rep))) return true;
    CudaFlashRefused().store(true);
    return false;
  }
  auto r = at::_scaled_dot_product_flash_attention_for_cpu(q, RepeatHeads(kq, rep), RepeatHeads(vq, rep), 0.0, causal, std::nullopt, sm_scale);
  *o = std::get<0>(r);
  *lse = std::get<1>(r);
  return true;
}

/// The fused merge (cuda/attention_merge_kernels.h) of the two sides, or an undefined tensor
/// where it does not apply: not compiled in, the own kernels off for q, PAPERGYM_FUSED_PREFIX_MERGE
/// = "0" (read per call: the GPU test's A/B against the ATen merge), or an unsupported layout.
/// op [B, nh, T, hd] / lp [B, nh, T] the prefix side, os / ls the own side, at any strides.
at::Tensor FusedMerge(const at::Tensor& q, const at::Tensor& op, const at::Tensor& lp, const at::Tensor& os, const at::Tensor& ls) {
#ifdef PG_WITH_CUDA_KERNELS
  namespace ck = pg::cuda_kernels;
  const char* e = std::getenv("PAPERGYM_FUSED_PREFIX_MERGE");
  if ((e && std::strcmp(e, "0") == 0) || !CudaKernelsEnabled(q)) return at::Tensor();
  const auto dt = op.scalar_type();
  if (os.scalar_type() != dt || lp.scalar_type() != at::kFloat || ls.scalar_type() != at::kFloat || op.stride(3) != 1 || os.stride(3) != 1 ||
      !(dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf))
    return at::Tensor();
  const int64_t B = op.size(0), nh = op.size(1), T = op.size(2), hd = op.size(3);
  const ck::MergeType t = dt == at::kFloat ? ck::MergeType::kFloat32 : dt == at::kBFloat16 ? ck::MergeType::kBFloat16 : ck::MergeType::kFloat16;
  auto side = [](const at::Tensor& o, const at::Tensor& l) {
    return ck::MergeSide{o.data_ptr(), l.data_ptr<float>(), o.stride(0), o.stride(1), o.stride(2), l.stride(0), l.stride(1), l.stride(2)};
  };
  const ck::MergeSide p = side(op, lp), s = side(os, ls);
  at::Tensor out = at::empty({B, T, nh * hd}, op.options());
  if (!ck::MergeSupported(p, s, out.data_ptr(), hd, t)) return at::Tensor();
  const char* err = ck::MergeAttentionStates(p, s, out.data_ptr(), B, T, nh, hd, t, c10::cuda::getCurrentCUDAStream(q.device().index()).stream());
  TORCH_CHECK(err == nullptr, "attention merge kernel launch failed: ", err ? err : "");
  return out;  // op is the flash output, in q's dtype
#else
  (void)q, (void)op, (void)lp, (void)os, (void)ls;
  return at::Tensor();
#endif
}

/// Attention of T queries per row over a shared prefix and the row's own keys (the two-level
/// softmax of "cascade" / shared-prefix attention, e.g. FlashInfer's; exact, not an approximation):
///   o = (e^{lse_p} o_p + e^{lse_s} o_s) / (e^{lse_p} + e^{lse_s})
/// where o_p, lse_p are the softmax-weighted values and log-sum-exp of the scores over the
/// prefix's real keys, and o_s, lse_s the same over the row's own keys (causal).
/// q [B, nh, T, hd]; k / v [B, nkv, T, hd]; the prefix's K/V [1, nkv, P0, hd] read in place.
/// Flash path (FlashSide): the prefix side is ONE flash call of all B·T queries (rows folded into
/// the query length; a view of the layer's q, no copy) against the prefix's keys, the own side one
/// causal call; on CUDA the K/V heads are not repeated for GQA (the CPU op repeats them: one prefix
/// row, and the suffixes' own few tokens), never the prefix per row. The two sides are merged by one
/// kernel where it applies (FusedMerge; the same float32 operations in the same order as the ATen
/// merge below, rounded once). Math path (only where a flash call was refused at run time;
/// PrefixLogprobs takes the copy path wherever SharedPrefixFlash is false): float32 matmuls with
/// the query heads of one KV head grouped. The ATen merge is in float32, with m = max(lse_p, lse_s)
/// subtracted first. Returns o [B, T, nh * hd] in q's dtype.
at::Tensor SharedPrefixAttention(const KvAttention& a, int64_t l, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double sm_scale) {
  const int64_t B = q.size(0), nh = q.size(1), T = q.size(2), hd = q.size(3), nkv = k.size(1), rep = nh / nkv;
  const int64_t P0 = a.prefix->len - a.prefix_pad;
  const auto f32 = at::kFloat;
  at::Tensor kp = a.prefix->k[static_cast<size_t>(l)].narrow(2, a.prefix_pad, P0);  // [1, nkv, P0, hd]
  at::Tensor vp = a.prefix->v[static_cast<size_t>(l)].narrow(2, a.prefix_pad, P0);
  at::Tensor op, lp, os, ls;  // per side: o [B, nh, T, hd], lse [B, nh, T]
  {
    at::Tensor q1 = q.transpose(0, 1).reshape({1, nh, B * T, hd});  // every row's queries as one
    at::Tensor o1, l1, o2, l2;
    if (FlashSide(q1, kp, vp, false, sm_scale, &o1, &l1) && FlashSide(q, k, v, true, sm_scale, &o2, &l2)) {
      op = o1.reshape({nh, B, T, hd}).transpose(0, 1);
      lp = l1.reshape({nh, B, T}).transpose(0, 1);
      at::Tensor fused = FusedMerge(q, op, lp, o2, l2);
      if (fused.defined()) return fused;
      op = op.to(f32);
      lp = lp.to(f32);
      os = o2.to(f32);
      ls = l2.to(f32);
    }
  }
  if (!op.defined()) {
    // One softmax side: scores [.., N, K] (masked ones -inf) -> (Σ softmax · V, lse); a row with
    // every key masked gives (0, -inf).
    auto side = [](const at::Tensor& scores, const at::Tensor& values) {
      at::Tensor lse = at::logsumexp(scores, -1, /*keepdim=*/true);
      at::Tensor none = at::isinf(lse) & lse.lt(0);
      at::Tensor p = at::exp(scores - at::where(none, at::zeros_like(lse), lse));
      return std::make_pair(at::matmul(p, values), lse.squeeze(-1));
    };
    // Prefix side: the queries of KV head j from every row and head of its group as one batch entry.
    at::Tensor qg = q.reshape({B, nkv, rep, T, hd}).permute({1, 0, 2, 3, 4}).reshape({nkv, B * rep * T, hd}).to(f32);
    auto [o1, l1] = side(at::bmm(qg, kp.select(0, 0).to(f32).transpose(1, 2)).mul_(sm_scale), vp.select(0, 0).to(f32));
    op = o1.view({nkv, B, rep, T, hd}).permute({1, 0, 2, 3, 4}).reshape({B, nh, T, hd});
    lp = l1.view({nkv, B, rep, T}).permute({1, 0, 2, 3}).reshape({B, nh, T});
    // Own side: each row's queries against its own keys.
    at::Tensor qs = q.reshape({B, nkv, rep * T, hd}).to(f32);
    at::Tensor ss = at::matmul(qs, k.to(f32).transpose(2, 3)).mul_(sm_scale);
    ss = ss.view({B, nkv, rep, T, T}).masked_fill(a.allowed.logical_not().unsqueeze(2), -INFINITY).view({B, nkv, rep * T, T});
    auto [o2, l2] = side(ss, v.to(f32));
    os = o2.reshape({B, nh, T, hd});
    ls = l2.reshape({B, nh, T});
  }
  at::Tensor m = at::maximum(lp, ls);
  m = at::where(at::isinf(m) & m.lt(0), at::zeros_like(m), m).unsqueeze(-1);
  at::Tensor wp = at::exp(lp.unsqueeze(-1) - m), ws = at::exp(ls.unsqueeze(-1) - m);
  at::Tensor o = (op * wp + os * ws) / (wp + ws).clamp_min(1e-30);  // [B, nh, T, hd]
  return o.transpose(1, 2).reshape({B, T, nh * hd}).to(q.scalar_type());
}

}  // namespace

at::Tensor Attend(const KvAttention& a, int64_t l, const at::Tensor& q, at::Tensor k, at::Tensor v, double sm_scale) {
  TORCH_CHECK(k.defined() || (a.kind == KvAttention::Slot && a.cache), "Attend: k / v may be left out only for the slot decode");
  const int64_t nkv = k.defined() ? k.size(1) : a.cache->k[static_cast<size_t>(l)].size(1);
  const int64_t B = q.size(0), nh = q.size(1), T = q.size(2), hd = q.size(3), rep = nh / nkv;
  if (a.kind == KvAttention::SharedPrefix) return SharedPrefixAttention(a, l, q, k, v, sm_scale);
  if (a.kind == KvAttention::Causal)
    return at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true, sm_scale, /*enable_gqa=*/rep > 1)
        .transpose(1, 2)
        .reshape({B, T, nh * hd});
  if (a.cache) {
    at::Tensor& kc = a.cache->k[static_cast<size_t>(l)];
    at::Tensor& vc = a.cache->v[static_cast<size_t>(l)];
    if (a.kind == KvAttention::Slot) {
      if (k.defined()) {
        kc.index_copy_(2, a.slot, k.to(kc.scalar_type()));
        vc.index_copy_(2, a.slot, v.to(vc.scalar_type()));
      }
      if (a.live_start.defined() && T == 1) {
        at::Tensor o =
            LiveKvDecodeAttention(q.reshape({B, nh, hd}).to(kc.scalar_type()), kc, vc, a.live_start, a.slot, sm_scale, a.live_prompt_group, a.live_prompt_end);
        if (o.defined()) return o.to(q.scalar_type()).reshape({B, 1, nh * hd});
      }
      k = kc;
      v = vc;
    } else {
      kc.narrow(2, a.P, T).copy_(k);
      vc.narrow(2, a.P, T).copy_(v);
      k = kc.narrow(2, 0, a.P + T);
      v = vc.narrow(2, 0, a.P + T);
    }
  }
  if (T == 1)
    return at::scaled_dot_product_attention(q.reshape({B, nkv, rep, hd}), k, v, a.allowed, 0.0, /*is_causal=*/false, sm_scale).reshape({B, 1, nh * hd});
  const int64_t L = k.size(2);
  if (rep > 1) {
    k = k.unsqueeze(2).expand({B, nkv, rep, L, hd}).reshape({B, nh, L, hd});
    v = v.unsqueeze(2).expand({B, nkv, rep, L, hd}).reshape({B, nh, L, hd});
  }
  return at::scaled_dot_product_attention(q, k, v, a.allowed, 0.0, /*is_causal=*/false, sm_scale).transpose(1, 2).reshape({B, T, nh * hd});
}

bool DecoderModel::SharedPrefixFlash(const at::Device& dev, at::ScalarType dtype, int64_t head_dim) {
  if (head_dim % 8 != 0 || head_dim > 256) return false;
  if (dev.is_cuda()) return (dtype == at::kBFloat16 || dtype == at::kHalf) && !CudaFlashRefused().load();
  return dev.is_cpu() && (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf);
}

}  // namespace pg
