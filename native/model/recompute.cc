// Activation recomputation of a decoder layer (a custom autograd Function) and the one-kernel cast
// of an adapter's A / B for the low-precision LoRA branch.
#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>

#include "model/decoder_impl.h"

namespace pg {

namespace {

/// Activation recomputation of one decoder layer (docs/references.md "libtorch pitfalls": no
/// checkpointing in the C++ API, so a custom autograd Function). forward runs the layer under
/// no-grad and keeps only its input (+ the shared RoPE tables / mask and the LoRA leaves);
/// backward re-runs the layer with grad from the saved input and back-propagates `grad_out`
/// through it. With LoRA dropout > 0 the RNG state of the input's device is captured before the
/// first run and restored around the recomputation, so both draw the same masks.
/// Arguments after ctx: h, cos, sin, allowed (nullopt on the causal path), model pointer (the
/// caller keeps the model alive until backward), layer index, bitmask of the projections with
/// LoRA (bit k = module k), scaling, dropout, causal, and the LoRA tensors of the set bits in
/// order (A, B per module). backward returns one gradient per argument (undefined for the
/// non-differentiable ones), as CppNode requires.
struct RecomputedLayer : public torch::autograd::Function<RecomputedLayer> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin,
                            const std::optional<at::Tensor>& allowed, int64_t model_ptr, int64_t layer, int64_t lora_bits, std::vector<double> scaling,
                            double dropout, bool causal, at::TensorList lora) {
    ctx->save_for_backward({h});
    ctx->saved_data["cos"] = cos;
    ctx->saved_data["sin"] = sin;
    ctx->saved_data["allowed"] = allowed ? c10::IValue(*allowed) : c10::IValue();
    ctx->saved_data["model"] = model_ptr;
    ctx->saved_data["layer"] = layer;
    ctx->saved_data["bits"] = lora_bits;
    ctx->saved_data["scaling"] = scaling;
    ctx->saved_data["dropout"] = dropout;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["lora"] = lora.vec();
    std::optional<LoraForceDropoutScope> force;
    if (dropout > 0) {
      at::Generator gen = at::globalContext().defaultGenerator(h.device());
      std::lock_guard<std::mutex> lk(gen.mutex());
      ctx->saved_data["rng"] = gen.get_state();
    }
    if (dropout > 0) force.emplace();
    return Run(ctx, h, allowed);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grad_out) {
    at::Tensor h = ctx->get_saved_variables()[0];
    auto lora = ctx->saved_data["lora"].toTensorVector();
    const double dropout = ctx->saved_data["dropout"].toDouble();
    const bool need_h = ctx->needs_input_grad(0);
    at::Tensor cur_rng;
    at::Generator gen;
    if (dropout > 0) {
      gen = at::globalContext().defaultGenerator(h.device());
      std::lock_guard<std::mutex> lk(gen.mutex());
      cur_rng = gen.get_state();
      gen.set_state(ctx->saved_data["rng"].toTensor());
    }
    at::Tensor hd = h.detach().requires_grad_(need_h);
    at::Tensor out;
    {
      at::AutoGradMode on(true);
      std::optional<at::Tensor> allowed;
      if (!ctx->saved_data["allowed"].isNone()) allowed = ctx->saved_data["allowed"].toTensor();
      out = Run(ctx, hd, allowed);
    }
    if (dropout > 0) {
      std::lock_guard<std::mutex> lk(gen.mutex());
      gen.set_state(cur_rng);
    }
    torch::autograd::variable_list inputs;
    if (need_h) inputs.push_back(hd);
    for (const auto& t : lora) inputs.push_back(t);
    torch::autograd::variable_list g;
    if (!inputs.empty()) g = torch::autograd::grad({out}, inputs, {grad_out[0]}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
    // One entry per forward argument: h, cos, sin, allowed, model, layer, bits, scaling, dropout,
    // causal, then each LoRA tensor.
    torch::autograd::variable_list res(10 + lora.size());
    size_t gi = 0;
    if (need_h) res[0] = g[gi++];
    for (size_t i = 0; i < lora.size(); ++i) res[10 + i] = g[gi++];
    return res;
  }

  static at::Tensor Run(torch::autograd::AutogradContext* ctx, const at::Tensor& h, const std::optional<at::Tensor>& allowed) {
    const auto* m = reinterpret_cast<const DecoderModel*>(ctx->saved_data["model"].toInt());
    const int64_t bits = ctx->saved_data["bits"].toInt();
    auto lora = ctx->saved_data["lora"].toTensorVector();
    DecoderImpl::LayerLora lo;
    DecoderImpl::LayerScale sc;
    const auto sv = ctx->saved_data["scaling"].toDoubleVector();
    for (size_t k = 0; k < kNumProjections; ++k) sc[k] = sv[k];
    size_t j = 0;
    for (int k = 0; k < kNumProjections; ++k)
      if (bits & (int64_t{1} << k)) {
        lo[static_cast<size_t>(k)] = {lora[j], lora[j + 1]};
        j += 2;
      }
    DecoderImpl::KvAttention att;
    att.kind = ctx->saved_data["causal"].toBool() ? DecoderImpl::KvAttention::Causal : DecoderImpl::KvAttention::Masked;
    if (allowed) att.allowed = *allowed;
    return DecoderImpl::Layer(*m, ctx->saved_data["layer"].toInt(), h, ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor(), lo, sc,
                              ctx->saved_data["dropout"].toDouble(), att);
  }
};

/// Casts a list of tensors (the adapter's float32 A / B) to `dtype` with one concatenation and one
/// cast kernel, returning per-tensor views; backward concatenates the incoming gradients, casts
/// them back with one kernel and splits them (zeros for outputs without a gradient). Replaces two
/// casts per LoRA tensor per forward (and two in backward) on the low-precision LoRA branch.
struct CastAllFn : public torch::autograd::Function<CastAllFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList in, int64_t dtype) {
    std::vector<at::Tensor> flat;
    std::vector<int64_t> numels, dims, sizes;
    for (const auto& t : in) {
      flat.push_back(t.reshape({-1}));
      numels.push_back(t.numel());
      dims.push_back(t.dim());
      for (int64_t s : t.sizes()) sizes.push_back(s);
    }
    ctx->saved_data["numels"] = numels;
    ctx->saved_data["dims"] = dims;
    ctx->saved_data["sizes"] = sizes;
    ctx->saved_data["in_dtype"] = static_cast<int64_t>(in[0].scalar_type());
    at::Tensor all = at::cat(flat).to(static_cast<at::ScalarType>(dtype));
    auto parts = all.split_with_sizes(numels);
    torch::autograd::variable_list out;
    for (size_t i = 0; i < in.size(); ++i) out.push_back(parts[i].view(in[i].sizes()));
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    auto numels = ctx->saved_data["numels"].toIntVector();
    auto dims = ctx->saved_data["dims"].toIntVector();
    auto sizes = ctx->saved_data["sizes"].toIntVector();
    const auto in_dtype = static_cast<at::ScalarType>(ctx->saved_data["in_dtype"].toInt());
    at::Tensor like;
    for (const auto& t : g)
      if (t.defined()) like = t;
    torch::autograd::variable_list res(g.size() + 1);
    if (!like.defined()) return res;
    std::vector<at::Tensor> flat;
    for (size_t i = 0; i < g.size(); ++i) flat.push_back(g[i].defined() ? g[i].reshape({-1}) : at::zeros({numels[i]}, like.options()));
    auto parts = at::cat(flat).to(in_dtype).split_with_sizes(numels);
    size_t off = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      std::vector<int64_t> shape(sizes.begin() + static_cast<int64_t>(off), sizes.begin() + static_cast<int64_t>(off + dims[i]));
      off += static_cast<size_t>(dims[i]);
      res[i] = parts[i].view(shape);
    }
    return res;
  }
};

}  // namespace

at::Tensor RecomputeLayer(const at::Tensor& h, const at::Tensor& cos, const at::Tensor& sin, const std::optional<at::Tensor>& allowed, const DecoderModel& m,
                          int64_t layer, int64_t bits, std::vector<double> scaling, double dropout, bool causal, at::TensorList lora) {
  return RecomputedLayer::apply(h, cos, sin, allowed, reinterpret_cast<int64_t>(&m), layer, bits, std::move(scaling), dropout, causal, lora);
}

/// The adapter with every A / B cast to `dtype` by one CastAllFn (differentiable when grad mode
/// is on and the tensors require grad).
LoraAdapter CastAdapter(const LoraAdapter& ad, at::ScalarType dtype) {
  LoraAdapter out;
  out.config = ad.config;
  out.scaling = ad.scaling;
  std::vector<at::Tensor> in;
  for (const auto& kv : ad.weights) {
    in.push_back(kv.second.first);
    in.push_back(kv.second.second);
  }
  if (in.empty()) return out;
  auto cast = CastAllFn::apply(at::TensorList(in), static_cast<int64_t>(dtype));
  size_t i = 0;
  for (const auto& kv : ad.weights) {
    out.weights[kv.first] = {cast[i], cast[i + 1]};
    i += 2;
  }
  return out;
}

}  // namespace pg
