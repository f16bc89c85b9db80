#include <ATen/ATen.h>

#include "core/errors.h"
#include "loss/cross_entropy.h"
#include "steps/steps.h"

namespace pg {
namespace steps {

double SftBackward(DecoderModel& m, const at::Tensor& ids, const at::Tensor& mask, const at::Tensor& labels, const AdapterSel& sel) {
  if (!m.HasLora()) throw InputError("crossEntropyBackward needs a LoRA adapter (call addLora or loadAdapter first)");
  {
    at::Tensor lc = labels.to(at::kLong);
    if ((lc.ne(-100) & (lc.lt(0) | lc.ge(m.config().vocab_size))).any().item<bool>())
      throw ArgError("crossEntropyBackward: labels must be -100 (ignored) or a token id in [0, vocab_size)");
  }
  at::Tensor h = m.Forward(ids, mask, std::nullopt, sel);
  if (!h.requires_grad()) throw InputError("crossEntropyBackward: the selected adapter has no trainable parameters (adapter disabled or 'none')");
  return loss::CausalLmCrossEntropyBackward(h, m.LmHeadWeight(), labels.to(m.device()));
}

double OpsdBackward(DecoderModel& m, const at::Tensor& sid, const at::Tensor& sm, const at::Tensor& tid, const at::Tensor& tm, const at::Tensor& si,
                    const at::Tensor& ti, const AdapterSel& tsel, const loss::JsdOptions& jo) {
  if (!m.HasLora()) throw InputError("opsdBackward needs a LoRA adapter");
  auto dev = m.device();
  at::Tensor th;
  {
    at::NoGradGuard ng;
    at::Tensor h = m.Forward(tid.to(dev), tm.to(dev), std::nullopt, tsel);
    th = h.reshape({-1, h.size(-1)}).index_select(0, ti.to(dev));
  }
  at::Tensor h = m.Forward(sid.to(dev), sm.to(dev), std::nullopt, AdapterSel{});
  if (!h.requires_grad()) throw InputError("opsdBackward: the active adapter is disabled (no trainable parameters)");
  at::Tensor hs = h.reshape({-1, h.size(-1)}).index_select(0, si.to(dev));
  at::Tensor l = loss::JsdFused(hs, th, m.LmHeadWeight(), at::ones({hs.size(0)}, at::TensorOptions().device(dev)), jo);
  l.backward();
  return l.item<double>();
}

GrpoStepResult GrpoBackward(DecoderModel& m, const at::Tensor& ids, const at::Tensor& am, const at::Tensor& cm, const at::Tensor& old, const at::Tensor& ref,
                            const at::Tensor& adv, const loss::GrpoOptions& go) {
  if (!m.HasLora()) throw InputError("grpoBackward needs a LoRA adapter");
  GrpoStepResult res;
  auto dev = m.device();
  const int64_t B = ids.size(0), L = ids.size(1);
  at::Tensor id = ids.to(dev);
  at::Tensor h = m.Forward(id, am.to(dev), std::nullopt, AdapterSel{});
  if (!h.requires_grad()) throw InputError("grpoBackward: the active adapter is disabled (no trainable parameters)");
  auto sh = [&](const at::Tensor& t) { return t.defined() ? t.to(dev).narrow(1, 1, L - 1) : t; };
  at::Tensor a = adv.dim() == 2 ? sh(adv) : adv.to(dev);
  at::Tensor l = loss::GrpoFused(h.narrow(1, 0, L - 1), m.LmHeadWeight(), sh(id), sh(old), sh(ref), a, sh(cm), go, &res.metrics);
  l.backward();
  res.loss = l.item<double>();
  at::Tensor lp = at::zeros({B, L}, at::kFloat);
  lp.narrow(1, 1, L - 1).copy_(res.metrics.logp.reshape({B, L - 1}).to(at::kCPU, at::kFloat));
  res.logprobs = lp;
  res.metrics.logp = at::Tensor();
  return res;
}

}  // namespace steps
}  // namespace pg
