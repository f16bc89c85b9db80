#include "loss/jsd.h"

#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <limits>

#include "core/errors.h"
#include "loss/common.h"
#include "loss/row_kernels.h"

namespace pg {
namespace loss {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void JsdChunk(const at::Tensor& ls_in, const at::Tensor& lt_in, double beta, at::Tensor* per_token, at::Tensor* dz) {
  // Memory-lean: works in place on its inputs (callers pass buffers they no longer need; the
  // public wrapper below clones) and holds at most three more [C, V] buffers. NaNs can only come
  // from 0·(±inf) at entries of zero probability, which contribute 0, so they are zeroed; a
  // genuinely infinite divergence (β ∈ {0, 1} with disjoint supports) stays +inf.
  const double inf = std::numeric_limits<double>::infinity();
  at::Tensor ls = ls_in, lt = lt_in;
  if (beta == 0.0) {
    // KL(T‖S) = Σ T (log T − log S); d/dz_s = S − T.
    at::Tensor d = lt - ls;
    at::Tensor ps = ls.exp_(), pt = lt.exp_();
    d.mul_(pt).nan_to_num_(0.0, inf, -inf);
    *per_token = d.sum(-1);
    if (dz) *dz = ps.sub_(pt);
    return;
  }
  if (beta == 1.0) {
    // KL(S‖T) = Σ S (log S − log T); dz_j = S_j (r_j − KL), r = log S − log T.
    at::Tensor term = ls - lt;
    at::Tensor ps = ls.exp_();
    term.mul_(ps).nan_to_num_(0.0, inf, -inf);
    at::Tensor kl = term.sum(-1, true);
    *per_token = kl.squeeze(-1);
    if (dz) *dz = term.sub_(ps.mul_(kl));
    return;
  }
  // d = log T − log S. With A = log1p(β·expm1(min(d, 0))) and B = log1p((1−β)·expm1(min(−d, 0)))
  // (one of them is 0 for every entry):  log M − log S = A + B + max(d, 0),
  //                                      log M − log T = A + B − min(d, 0).
  // Exact at d = 0 (both 0), so student == teacher gives exactly 0.
  at::Tensor d = lt - ls;
  d.nan_to_num_(0.0, inf, -inf);  // both −inf: contributes nothing
  at::Tensor c = d.clamp_max(0).expm1_().mul_(beta).log1p_();
  at::Tensor t = d.neg().clamp_max_(0).expm1_().mul_(1.0 - beta).log1p_();
  c.add_(t);
  at::Tensor ps = ls.exp_(), pt = lt.exp_();
  // t ← S·(log M − log S); d ← T·(log M − log T)
  t.copy_(d).clamp_min_(0).add_(c).mul_(ps).nan_to_num_(0.0, inf, -inf);
  d.clamp_max_(0).neg_().add_(c).mul_(pt).nan_to_num_(0.0, inf, -inf);
  c.reset();
  *per_token = -((1.0 - beta) * t.sum(-1) + beta * d.sum(-1));
  d.reset();
  if (dz) {
    // JSD = −(1−β) Σ S·a − β Σ T·b (a = log M − log S, b = log M − log T), and
    // g_j = ∂JSD/∂log S_j = −(1−β)·S_j·a_j; through log-softmax: dz = g − S·Σ g.
    t.mul_(-(1.0 - beta));
    at::Tensor sg = t.sum(-1, true);
    *dz = t.sub_(ps.mul_(sg));
  }
}

namespace {

void CheckJsd(const at::Tensor& sh, const at::Tensor& teacher, bool teacher_is_logits, const at::Tensor& w, const at::Tensor& mask, const JsdOptions& o) {
  CheckHiddenWeight(sh, w, "jsdLoss");
  if (teacher_is_logits) {
    if (teacher.dim() != 2 || teacher.size(0) != sh.size(0) || teacher.size(1) != w.size(0)) throw ArgError("jsdLoss: teacherLogits must be [N, V]");
  } else if (teacher.sizes() != sh.sizes()) {
    throw ArgError("jsdLoss: teacherHidden must have the shape of studentHidden [N, H]");
  }
  if (mask.dim() != 1 || mask.size(0) != sh.size(0)) throw ArgError("jsdLoss: mask must be [N]");
  if (!(o.beta >= 0.0 && o.beta <= 1.0)) throw ArgError("jsdLoss: beta must be in [0, 1]");
  if (!(o.temperature > 0.0)) throw ArgError("jsdLoss: temperature must be > 0");
}

at::ScalarType MathDtype(const at::Tensor& h) {
  return h.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

struct JsdFn : public torch::autograd::Function<JsdFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& sh, const at::Tensor& teacher, const at::Tensor& w, const at::Tensor& mask,
                            bool teacher_is_logits, double beta, double temperature, int64_t chunk, double normalizer) {
    const int64_t N = sh.size(0), V = w.size(0);
    auto mt = MathDtype(sh);
    // CUDA float32 logits: the whole per-row JSD in one kernel launch per chunk (row_kernels.h).
    const bool kern = mt == at::kFloat && RowKernelsEnabled(sh);
    chunk = kern ? KernelChunk(chunk, V, int64_t{64} << 20) : ResolveChunk(chunk, V);
    at::Tensor m = mask.to(sh.device(), mt);
    double norm = normalizer > 0 ? normalizer : std::max(1.0, m.sum().item<double>());
    auto pw = PrepareWeight(w, sh);
    const bool need_grad = sh.requires_grad();
    at::Tensor total = at::zeros({}, sh.options().dtype(mt));
    at::Tensor grad = need_grad ? at::zeros_like(sh) : at::Tensor();
    // Only chunks that hold masked-in tokens are computed. Which ones: one device-to-host read for
    // all chunks (a read per chunk synchronised the stream once per chunk, leaving the GPU idle
    // while the host launched the next chunk).
    const int64_t num_chunks = (N + chunk - 1) / chunk;
    at::Tensor live_flags = at::zeros({num_chunks * chunk}, m.options().dtype(at::kBool));
    live_flags.narrow(0, 0, N).copy_(m.ne(0));
    live_flags = live_flags.view({num_chunks, chunk}).any(1).to(at::kCPU);
    const bool* live = live_flags.data_ptr<bool>();
    for (int64_t s = 0; s < N; s += chunk) {
      int64_t e = std::min(N, s + chunk);
      at::Tensor mc = m.slice(0, s, e);
      if (!live[s / chunk]) continue;
      if (kern) {
        at::Tensor zs = ChunkLogits(sh.slice(0, s, e), pw);
        at::Tensor zt = teacher_is_logits ? teacher.slice(0, s, e).to(sh.device(), at::kFloat).contiguous() : ChunkLogits(teacher.slice(0, s, e), pw);
        const at::ScalarType gd = pw.out_dtype_mm ? pw.w.scalar_type() : at::kFloat;
        at::Tensor per = JsdRowsCuda(zs, zt, temperature, beta, mc.contiguous(), 1.0 / (norm * temperature), need_grad, gd);
        total += (per * mc).sum();
        zt.reset();
        if (need_grad) grad.slice(0, s, e).copy_(ChunkGradHidden(GradRowsView(zs, gd), pw, sh.scalar_type()));
        continue;
      }
      at::Tensor zs = ChunkLogits(sh.slice(0, s, e), pw);
      at::Tensor zt = teacher_is_logits ? teacher.slice(0, s, e).to(sh.device(), mt).clone() : ChunkLogits(teacher.slice(0, s, e), pw);
      if (temperature != 1.0) {
        zs.div_(temperature);
        zt.div_(temperature);
      }
      // in-place log-softmax (no extra [C, V] buffers)
      zs.sub_(at::logsumexp(zs, -1, true));
      zt.sub_(at::logsumexp(zt, -1, true));
      at::Tensor ls = zs, lt = zt;
      zs.reset();
      zt.reset();
      at::Tensor per, dz;
      JsdChunk(ls, lt, beta, &per, need_grad ? &dz : nullptr);
      at::Tensor keep = mc.ne(0);
      total += at::where(keep, per * mc, at::zeros({}, per.options())).sum();
      if (need_grad) {
        dz.mul_((mc / (norm * temperature)).unsqueeze(1));
        dz.masked_fill_(keep.logical_not().unsqueeze(1), 0);
        grad.slice(0, s, e).copy_(ChunkGradHidden(dz, pw, sh.scalar_type()));
      }
    }
    if (need_grad) ctx->save_for_backward({grad});
    return total / norm;
  }
  static variable_list backward(AutogradContext* ctx, variable_list go) {
    auto saved = ctx->get_saved_variables();
    at::Tensor g = saved.empty() ? at::Tensor() : saved[0] * go[0].to(saved[0].scalar_type());
    return {g, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor JsdFused(const at::Tensor& sh, const at::Tensor& th, const at::Tensor& w, const at::Tensor& mask, const JsdOptions& o) {
  CheckJsd(sh, th, false, w, mask, o);
  return JsdFn::apply(sh, th.detach(), w.detach(), mask, false, o.beta, o.temperature, o.chunk, o.normalizer);
}

at::Tensor JsdFusedTeacherLogits(const at::Tensor& sh, const at::Tensor& tl, const at::Tensor& w, const at::Tensor& mask, const JsdOptions& o) {
  CheckJsd(sh, tl, true, w, mask, o);
  return JsdFn::apply(sh, tl.detach(), w.detach(), mask, true, o.beta, o.temperature, o.chunk, o.normalizer);
}

at::Tensor JsdReference(const at::Tensor& sh, const at::Tensor& th, const at::Tensor& w, const at::Tensor& mask, const JsdOptions& o) {
  CheckJsd(sh, th, false, w, mask, o);
  auto mt = MathDtype(sh);
  at::Tensor wf = w.detach().to(sh.device(), mt);
  at::Tensor zs = at::matmul(sh.to(mt), wf.t()) / o.temperature;
  at::Tensor zt;
  {
    at::NoGradGuard ng;
    zt = at::matmul(th.detach().to(mt), wf.t()) / o.temperature;
  }
  at::Tensor ls = at::log_softmax(zs, -1), lt = at::log_softmax(zt, -1);
  at::Tensor jsd;
  if (o.beta == 0.0) {
    jsd = (lt.exp() * (lt - ls)).sum(-1);
  } else if (o.beta == 1.0) {
    jsd = (ls.exp() * (ls - lt)).sum(-1);
  } else {
    at::Tensor lm = at::logsumexp(at::stack({ls + std::log1p(-o.beta), lt + std::log(o.beta)}), 0);
    at::Tensor kl_t = (lt.exp() * (lt - lm)).sum(-1);
    at::Tensor kl_s = (ls.exp() * (ls - lm)).sum(-1);
    jsd = o.beta * kl_t + (1.0 - o.beta) * kl_s;
  }
  at::Tensor m = mask.to(sh.device(), mt);
  double norm = o.normalizer > 0 ? o.normalizer : std::max(1.0, m.sum().item<double>());
  return (jsd * m).sum() / norm;
}

}  // namespace loss
}  // namespace pg
