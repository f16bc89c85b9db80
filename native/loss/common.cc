#include "loss/common.h"

#include <algorithm>
#include <atomic>

#include "core/errors.h"
#include "loss/row_kernels.h"

namespace pg {
namespace loss {

PreparedWeight PrepareWeight(const at::Tensor& weight, const at::Tensor& hidden_like) {
  PreparedWeight pw;
  at::Tensor w = weight.detach();
  if (w.device() != hidden_like.device()) w = w.to(hidden_like.device());
  if (w.scalar_type() == at::kFloat || w.scalar_type() == at::kDouble) {
    pw.w = w.scalar_type() == hidden_like.scalar_type() ? w : w.to(hidden_like.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
    pw.out_dtype_mm = false;
  } else if (w.is_cuda()) {
    pw.w = w;
    pw.out_dtype_mm = true;
  } else {
    pw.w = w.to(at::kFloat);
    pw.out_dtype_mm = false;
  }
  return pw;
}

namespace {
// at::mm(a, b, out_dtype) (fp32 output from bf16/fp16 inputs) is a CUDA kernel of recent torch;
// where it is missing, fall back once and for all to a low-precision mm followed by a cast.
std::atomic<bool> g_no_out_dtype_mm{false};
at::Tensor MmF32(const at::Tensor& a, const at::Tensor& b) {
  if (!g_no_out_dtype_mm.load()) {
    try {
      return at::mm(a, b, at::kFloat);
    } catch (const c10::Error&) {
      g_no_out_dtype_mm.store(true);
    }
  }
  return at::mm(a, b).to(at::kFloat);
}
}  // namespace

at::Tensor ChunkLogits(const at::Tensor& h, const PreparedWeight& pw) {
  if (pw.out_dtype_mm) {
    at::Tensor hc = h.scalar_type() == pw.w.scalar_type() ? h : h.to(pw.w.scalar_type());
    return MmF32(hc, pw.w.t());
  }
  at::Tensor hc = h.scalar_type() == pw.w.scalar_type() ? h : h.to(pw.w.scalar_type());
  return at::mm(hc, pw.w.t());
}

at::Tensor ChunkGradHidden(const at::Tensor& dlogits, const PreparedWeight& pw, at::ScalarType hidden_dtype) {
  at::Tensor g;
  if (pw.out_dtype_mm) {
    // Low-precision weight on CUDA: dlogits is rounded to the weight dtype (the precision a bf16
    // backward through an lm_head has) and multiplied with fp32 accumulation and output; this
    // avoids an fp32 copy of the [V, H] weight.
    g = MmF32(dlogits.to(pw.w.scalar_type()), pw.w);
  } else {
    g = at::mm(dlogits.scalar_type() == pw.w.scalar_type() ? dlogits : dlogits.to(pw.w.scalar_type()), pw.w);
  }
  return g.scalar_type() == hidden_dtype ? g : g.to(hidden_dtype);
}

void CheckHiddenWeight(const at::Tensor& hidden, const at::Tensor& weight, const char* what) {
  if (hidden.dim() != 2) throw ArgError(std::string(what) + ": hidden must be [N, H]");
  if (weight.dim() != 2) throw ArgError(std::string(what) + ": weight must be [V, H]");
  if (hidden.size(1) != weight.size(1))
    throw ArgError(std::string(what) + ": hidden size " + std::to_string(hidden.size(1)) + " != weight size " + std::to_string(weight.size(1)));
  if (!at::isFloatingType(hidden.scalar_type()) || !at::isFloatingType(weight.scalar_type()))
    throw ArgError(std::string(what) + ": hidden and weight must be floating point");
}

int64_t ResolveChunk(int64_t chunk, int64_t vocab) {
  if (chunk < 0) throw ArgError("chunkSize must be >= 0 (0 = automatic)");
  if (chunk > 0) return chunk;
  // Automatic: about 256 MB of fp32 logits per [C, V] buffer.
  int64_t c = (int64_t{64} << 20) / std::max<int64_t>(vocab, 1);
  return std::clamp<int64_t>(c, 16, 4096);
}

at::Tensor SelectedLogprobs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& tokens, double temperature, int64_t chunk) {
  CheckHiddenWeight(hidden, weight, "selectedLogprobs");
  if (!(temperature > 0)) throw ArgError("temperature must be > 0");
  if (tokens.dim() != 1 || tokens.size(0) != hidden.size(0)) throw ArgError("selectedLogprobs: tokens must be [N]");
  at::NoGradGuard ng;
  const int64_t N = hidden.size(0), V = weight.size(0);
  // The kernel path uses GrpoFn's chunking and row reduction: identical logprobs for the same rows.
  const bool kern = hidden.scalar_type() != at::kDouble && RowKernelsEnabled(hidden);
  chunk = kern ? KernelChunk(chunk, V, kGrpoKernelLogits) : ResolveChunk(chunk, V);
  auto pw = PrepareWeight(weight, hidden);
  at::Tensor tok = tokens.to(hidden.device(), at::kLong);
  if (N > 0 && (tok.min().item<int64_t>() < 0 || tok.max().item<int64_t>() >= V)) throw ArgError("selectedLogprobs: token id out of range [0, V)");
  auto out_dtype = hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  at::Tensor out = at::empty({N}, hidden.options().dtype(out_dtype));
  for (int64_t s = 0; s < N; s += chunk) {
    int64_t e = std::min(N, s + chunk);
    at::Tensor z = ChunkLogits(hidden.slice(0, s, e), pw);
    if (kern) {
      out.slice(0, s, e).copy_(RowLogprobsCuda(z, temperature, tok.slice(0, s, e).contiguous()));
      continue;
    }
    if (temperature != 1.0) z.div_(temperature);
    at::Tensor lse = at::logsumexp(z, -1);
    out.slice(0, s, e).copy_(z.gather(1, tok.slice(0, s, e).unsqueeze(1)).squeeze(1) - lse);
  }
  return out;
}

}  // namespace loss
}  // namespace pg
