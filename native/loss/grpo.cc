#include "loss/grpo.h"

#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "core/errors.h"
#include "loss/common.h"
#include "loss/row_kernels.h"

namespace pg {
namespace loss {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor K3(const at::Tensor& logp, const at::Tensor& ref_logp) {
  at::Tensor x = (ref_logp - logp).clamp(-kKlClamp, kKlClamp);
  return x.exp() - x - 1;
}

namespace {

at::ScalarType MathDtype(const at::Tensor& h) {
  return h.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

struct Flat {
  at::Tensor h, tok, old, ref, adv, w, mask;
};

Flat Prepare(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& tokens, const at::Tensor& old_logp, const at::Tensor& ref_logp,
             const at::Tensor& advantages, const at::Tensor& mask, const GrpoOptions& o) {
  if (hidden.dim() != 3) throw ArgError("grpoLoss: hidden must be [B, T, H]");
  const int64_t B = hidden.size(0), T = hidden.size(1), H = hidden.size(2);
  if (weight.dim() != 2 || weight.size(1) != H) throw ArgError("grpoLoss: weight must be [V, H]");
  auto need_bt = [&](const at::Tensor& t, const char* name) {
    if (!t.defined() || t.dim() != 2 || t.size(0) != B || t.size(1) != T)
      throw ArgError(std::string("grpoLoss: ") + name + " must be [B, T] = [" + std::to_string(B) + ", " + std::to_string(T) + "]");
  };
  need_bt(tokens, "tokens");
  need_bt(old_logp, "oldLogprobs");
  need_bt(mask, "mask");
  if (o.kl_coef != 0.0) need_bt(ref_logp, "refLogprobs");
  if (!(o.temperature > 0)) throw ArgError("grpoLoss: temperature must be > 0");
  if (!(o.eps_low >= 0 && o.eps_low < 1 && o.eps_high >= 0)) throw ArgError("grpoLoss: need 0 <= epsLow < 1 and epsHigh >= 0");
  if (o.kl_coef < 0) throw ArgError("GRPO loss: klCoef must be >= 0");
  auto mt = MathDtype(hidden);
  auto dev = hidden.device();
  Flat f;
  f.h = hidden.reshape({B * T, H});
  f.tok = tokens.to(dev, at::kLong).reshape({-1});
  f.old = old_logp.to(dev, mt).reshape({-1});
  f.ref = o.kl_coef != 0.0 ? ref_logp.to(dev, mt).reshape({-1}) : at::Tensor();
  at::Tensor adv = advantages.to(dev, mt);
  if (adv.dim() == 1 && adv.size(0) == B)
    adv = adv.unsqueeze(1).expand({B, T});
  else if (!(adv.dim() == 2 && adv.size(0) == B && adv.size(1) == T))
    throw ArgError("grpoLoss: advantages must be [B] or [B, T]");
  f.adv = adv.reshape({-1}).contiguous();
  at::Tensor m = mask.to(dev, mt);
  f.w = GrpoTokenWeights(m, o).reshape({-1});
  f.mask = m.reshape({-1});
  const int64_t V = weight.size(0);
  if (f.tok.numel() > 0) {
    at::Tensor live = f.tok.masked_select(f.mask.ne(0));
    if (live.numel() > 0 && (live.min().item<int64_t>() < 0 || live.max().item<int64_t>() >= V))
      throw ArgError("grpoLoss: token id out of range [0, V) at a masked-in position");
    f.tok = f.tok.clamp(0, V - 1);  // padding positions may hold anything
  }
  return f;
}

void FillMetrics(GrpoMetrics* mt, const Flat& f, const at::Tensor& logp, const GrpoOptions& o) {
  if (!mt) return;
  at::NoGradGuard ng;
  at::Tensor lp = logp.detach();
  at::Tensor m = f.mask.ne(0);
  at::Tensor md = m.to(lp.scalar_type());
  at::Tensor ratio = (lp - f.old).exp();
  at::Tensor low = (ratio < 1 - o.eps_low) & (f.adv < 0) & m;
  at::Tensor high = (ratio > 1 + o.eps_high) & (f.adv > 0) & m;
  mt->mask_count = md.sum().item<double>();
  mt->clip_low_sum = low.sum().item<double>();
  mt->clip_high_sum = high.sum().item<double>();
  mt->clip_region_sum = (low | high).sum().item<double>();
  mt->kl_sum = o.kl_coef != 0.0 ? at::where(m, K3(lp, f.ref), at::zeros({}, lp.options())).sum().item<double>() : 0.0;
  mt->logp = lp;
}

struct GrpoFn : public torch::autograd::Function<GrpoFn> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& h, const at::Tensor& weight, const at::Tensor& tok, const at::Tensor& old,
                               const at::Tensor& ref, const at::Tensor& adv, const at::Tensor& w, double eps_low, double eps_high, double kl_coef,
                               double temperature, int64_t chunk) {
    const int64_t N = h.size(0), V = weight.size(0);
    auto mt = MathDtype(h);
    const bool kern = mt == at::kFloat && RowKernelsEnabled(h);
    chunk = kern ? KernelChunk(chunk, V, kGrpoKernelLogits) : ResolveChunk(chunk, V);
    auto pw = PrepareWeight(weight, h);
    const bool need_grad = h.requires_grad();
    at::Tensor logp_all = at::empty({N}, h.options().dtype(mt));
    at::Tensor grad = need_grad ? at::zeros_like(h) : at::Tensor();
    if (kern) {
      // CUDA float32 logits: logprob, loss and the logits gradient of each row in one kernel launch
      // per chunk, the gradient written over the chunk's own logits (one [C, V] buffer in all).
      const at::ScalarType gd = pw.out_dtype_mm ? pw.w.scalar_type() : at::kFloat;
      at::Tensor row_loss = at::empty({N}, h.options().dtype(at::kFloat));
      at::Tensor tk = tok.contiguous(), o = old.contiguous(), a = adv.contiguous(), wt = w.contiguous();
      at::Tensor rf = kl_coef != 0.0 ? ref.contiguous() : at::Tensor();
      for (int64_t s = 0; s < N; s += chunk) {
        const int64_t e = std::min(N, s + chunk);
        at::Tensor z = ChunkLogits(h.slice(0, s, e), pw);
        GrpoRowsCuda(z, temperature, tk.slice(0, s, e), o.slice(0, s, e), rf.defined() ? rf.slice(0, s, e) : rf, a.slice(0, s, e), wt.slice(0, s, e), eps_low,
                     eps_high, kl_coef, kKlClamp, need_grad, gd, logp_all.slice(0, s, e), row_loss.slice(0, s, e));
        if (need_grad) grad.slice(0, s, e).copy_(ChunkGradHidden(GradRowsView(z, gd), pw, h.scalar_type()));
      }
      if (need_grad) ctx->save_for_backward({grad});
      ctx->mark_non_differentiable({logp_all});
      return {row_loss.sum(), logp_all};
    }
    at::Tensor total = at::zeros({}, h.options().dtype(mt));
    at::Tensor zero = at::zeros({}, h.options().dtype(mt));
    for (int64_t s = 0; s < N; s += chunk) {
      const int64_t e = std::min(N, s + chunk);
      at::Tensor tk = tok.slice(0, s, e);
      // Same ops as SelectedLogprobs: bit-identical logprobs for identical inputs.
      at::Tensor z = ChunkLogits(h.slice(0, s, e), pw);
      if (temperature != 1.0) z.div_(temperature);
      at::Tensor lse = at::logsumexp(z, -1);
      at::Tensor logp = z.gather(1, tk.unsqueeze(1)).squeeze(1) - lse;
      logp_all.slice(0, s, e).copy_(logp);
      at::Tensor wc = w.slice(0, s, e), A = adv.slice(0, s, e);
      at::Tensor keep = wc.ne(0);
      at::Tensor ratio = (logp - old.slice(0, s, e)).exp();
      at::Tensor coef2 = ratio.clamp(1 - eps_low, 1 + eps_high);
      at::Tensor l1 = ratio * A, l2 = coef2 * A;
      at::Tensor per = -at::min(l1, l2);
      at::Tensor x;
      if (kl_coef != 0.0) {
        at::Tensor raw = ref.slice(0, s, e) - logp;
        x = raw.clamp(-kKlClamp, kKlClamp);
        per = per + kl_coef * (x.exp() - x - 1);
      }
      total += at::where(keep, per * wc, zero).sum();
      if (!need_grad) continue;
      // d per / d logp (torch autograd semantics of the expression above).
      at::Tensor w1 = at::where(l1 < l2, at::ones({}, l1.options()), at::where(l1 == l2, at::full({}, 0.5, l1.options()), zero));
      at::Tensor inr = ((ratio >= 1 - eps_low) & (ratio <= 1 + eps_high)).to(mt);
      at::Tensor dl = -A * (w1 + (1 - w1) * inr) * ratio;
      if (kl_coef != 0.0) {
        at::Tensor raw = ref.slice(0, s, e) - logp;
        at::Tensor in_clamp = ((raw >= -kKlClamp) & (raw <= kKlClamp)).to(mt);
        dl = dl - kl_coef * (x.exp() - 1) * in_clamp;
      }
      dl = at::where(keep, dl * wc, zero) / temperature;
      // dlogits = dl · (onehot − softmax) / T, computed in place in z.
      z.sub_(lse.unsqueeze(1)).exp_().mul_(-dl.unsqueeze(1));
      z.scatter_add_(1, tk.unsqueeze(1), dl.unsqueeze(1));
      grad.slice(0, s, e).copy_(ChunkGradHidden(z, pw, h.scalar_type()));
    }
    if (need_grad) ctx->save_for_backward({grad});
    ctx->mark_non_differentiable({logp_all});
    return {total, logp_all};
  }
  static variable_list backward(AutogradContext* ctx, variable_list go) {
    auto saved = ctx->get_saved_variables();
    at::Tensor g;
    if (!saved.empty() && go[0].defined()) g = saved[0] * go[0].to(saved[0].scalar_type());
    variable_list out(12);
    out[0] = g;
    return out;
  }
};

}  // namespace

at::Tensor GrpoTokenWeights(const at::Tensor& mask, const GrpoOptions& o) {
  const int64_t B = mask.size(0), T = mask.size(1);
  at::Tensor m = mask.to(mask.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  if (o.aggregation == "grpo") {
    double S = o.num_sequences > 0 ? o.num_sequences : static_cast<double>(B);
    return m / (m.sum(-1, true).clamp_min(1.0) * S);
  }
  if (o.aggregation == "dapo" || o.aggregation == "token_mean") {
    double n = o.num_tokens > 0 ? o.num_tokens : std::max(1.0, m.sum().item<double>());
    return m / n;
  }
  if (o.aggregation == "dr_grpo") {
    double S = o.num_sequences > 0 ? o.num_sequences : static_cast<double>(B);
    double L = o.max_completion_length > 0 ? o.max_completion_length : static_cast<double>(T);
    return m / (S * L);
  }
  throw ArgError("aggregation must be 'grpo', 'dapo' or 'dr_grpo', got '" + o.aggregation + "'");
}

at::Tensor GrpoFused(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& tokens, const at::Tensor& old_logp, const at::Tensor& ref_logp,
                     const at::Tensor& advantages, const at::Tensor& mask, const GrpoOptions& o, GrpoMetrics* metrics) {
  Flat f = Prepare(hidden, weight, tokens, old_logp, ref_logp, advantages, mask, o);
  at::Tensor ref = f.ref.defined() ? f.ref : at::zeros_like(f.old);
  // Only masked-in positions are projected (same selection and order as sequence logprobs, so the
  // chunks — and the logprobs — are bit-identical to SelectedLogprobs on the same rows).
  at::Tensor idx = f.mask.ne(0).nonzero().squeeze(1);
  // Every position live (e.g. packed completions): the rows as they are, no [N, H] gathered copy.
  const bool all = idx.numel() == f.mask.numel();
  auto sel = [&](const at::Tensor& t) { return all ? t : t.index_select(0, idx); };
  auto outs = GrpoFn::apply(sel(f.h), weight.detach(), sel(f.tok), sel(f.old), sel(ref), sel(f.adv), sel(f.w), o.eps_low, o.eps_high, o.kl_coef, o.temperature,
                            o.chunk);
  at::Tensor logp = all ? outs[1].reshape(f.old.sizes()) : at::zeros_like(f.old).index_copy(0, idx, outs[1]);
  FillMetrics(metrics, f, logp, o);
  return outs[0];
}

at::Tensor GrpoReference(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& tokens, const at::Tensor& old_logp, const at::Tensor& ref_logp,
                         const at::Tensor& advantages, const at::Tensor& mask, const GrpoOptions& o, GrpoMetrics* metrics) {
  Flat f = Prepare(hidden, weight, tokens, old_logp, ref_logp, advantages, mask, o);
  auto mt = MathDtype(hidden);
  at::Tensor logits = at::matmul(f.h.to(mt), weight.detach().to(hidden.device(), mt).t()) / o.temperature;
  at::Tensor logp = at::log_softmax(logits, -1).gather(1, f.tok.unsqueeze(1)).squeeze(1);
  at::Tensor coef1 = (logp - f.old).exp();
  at::Tensor coef2 = coef1.clamp(1 - o.eps_low, 1 + o.eps_high);
  at::Tensor per = -at::min(coef1 * f.adv, coef2 * f.adv);
  if (o.kl_coef != 0.0) per = per + o.kl_coef * K3(logp, f.ref);
  at::Tensor loss = (per * f.w).sum();
  FillMetrics(metrics, f, logp, o);
  return loss;
}

}  // namespace loss
}  // namespace pg
