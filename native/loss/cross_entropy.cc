#include "loss/cross_entropy.h"

#include <algorithm>

#include "core/errors.h"
#include "cuda/kernels.h"
#include "loss/common.h"
#include "loss/row_kernels.h"

namespace pg {
namespace loss {

double CausalLmCrossEntropyBackward(const at::Tensor& h, const at::Tensor& weight, const at::Tensor& labels) {
  const int64_t T = h.size(1), Hd = h.size(-1), V = weight.size(0);
  at::Tensor tgt = labels.narrow(1, 1, T - 1).reshape({-1});
  at::Tensor hs = h.narrow(1, 0, T - 1).reshape({-1, Hd});
  at::Tensor sel_idx = tgt.ne(-100).nonzero().squeeze(1);
  const int64_t n = sel_idx.numel();
  if (n == 0) throw InputError("crossEntropyBackward: labels hold no position != -100 after the shift");
  at::Tensor td = tgt.index_select(0, sel_idx);
  if (CudaKernelsEnabled(hs) && hs.scalar_type() != at::kDouble) {
    // CUDA: loss and logits gradient of each row in one kernel (loss/row_kernels.h), the
    // gradient written over the chunk's fp32 logits; one host read of the loss at the end.
    at::Tensor gh_sel;
    at::Tensor row_loss;
    {
      at::NoGradGuard ng;
      at::Tensor hd = hs.detach().index_select(0, sel_idx);
      auto pw = PrepareWeight(weight, hd);
      const at::ScalarType gd = pw.out_dtype_mm ? pw.w.scalar_type() : at::kFloat;
      const int64_t chunk = KernelChunk(0, V, int64_t{64} << 20);
      at::Tensor w = at::full({n}, 1.0 / static_cast<double>(n), hd.options().dtype(at::kFloat));
      row_loss = at::empty({n}, w.options());
      gh_sel = at::empty({n, Hd}, hs.options());
      for (int64_t s = 0; s < n; s += chunk) {
        const int64_t e = std::min(n, s + chunk);
        at::Tensor z = ChunkLogits(hd.slice(0, s, e), pw);
        CeRowsCuda(z, 1.0, td.slice(0, s, e), w.slice(0, s, e), true, gd, row_loss.slice(0, s, e));
        gh_sel.slice(0, s, e).copy_(ChunkGradHidden(GradRowsView(z, gd), pw, hs.scalar_type()));
      }
    }
    const double total = row_loss.sum().item<double>();
    hs.backward(at::zeros_like(hs).index_copy(0, sel_idx, gh_sel));
    return total;
  }
  at::Tensor hd = hs.detach().index_select(0, sel_idx).requires_grad_(true);
  double total = 0;
  const int64_t chunk = 1024;
  for (int64_t s = 0; s < n; s += chunk) {
    int64_t len = std::min(chunk, n - s);
    at::Tensor lg = at::linear(hd.narrow(0, s, len).to(weight.scalar_type()), weight).to(at::kFloat);  // [len, V] fp32
    at::Tensor l = at::cross_entropy_loss(lg, td.narrow(0, s, len), {}, at::Reduction::Sum) / static_cast<double>(n);
    total += l.item<double>();
    l.backward();
  }
  at::Tensor gh = at::zeros_like(hs).index_copy(0, sel_idx, hd.grad().to(hs.scalar_type()));
  hs.backward(gh);
  return total;
}

}  // namespace loss
}  // namespace pg
