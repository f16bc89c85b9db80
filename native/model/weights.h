// Reading a decoder checkpoint's weights (config.json's architecture row and switches say which
// tensors; model/architecture.h) into the layout the decoder runs on: fused [q; k; v] and
// [gate; up] projections, per-layer views, the LoRA module stems.
#pragma once
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "io/finite.h"
#include "lora/lora.h"
#include "model/config.h"

namespace pg {

/// Per-layer weights for the forward: fused [q; k; v] and [gate; up] projections (one matmul
/// each; the per-module tensors of DecoderWeights::by_name are views into them, so no extra
/// memory) and the LoRA module stems of the seven projections (lora/lora.h kProjections order).
struct DecoderLayerWeights {
  at::Tensor in_norm, post_norm, qkv, o, q_norm, k_norm, gate_up, down;
  /// Biases (undefined when the architecture's switches say none): fused [q; k; v], o, fused
  /// [gate; up], down. q_norm / k_norm are undefined without q/k norm (Qwen2, Llama).
  at::Tensor qkv_b, o_b, gate_up_b, down_b;
  std::string stem[kNumProjections];  // "model.layers.{i}.self_attn.q_proj", ...
};

/// A checkpoint's weights as the decoder holds them.
struct DecoderWeights {
  /// Hugging Face names -> tensors, no grad (q/k/v and gate/up are row views of the fused tensors).
  std::map<std::string, at::Tensor> by_name;
  std::vector<DecoderLayerWeights> layers;
};

/// Reads `dir`'s model.safetensors (or its sharded index) for config `c` (parsed from
/// `cfg_path`) onto `device` in `dtype`. The tensors expected are those of c's architecture row
/// and switches (q/k norms, biases, an lm_head unless tied); an unexpected tensor names the switch
/// that leaves it out, a missing one the architecture, a shape mismatch the config.json fields
/// behind each differing dimension (and whether they took the config class default); all
/// InputErrors naming the file. A tied checkpoint's lm_head.weight, when present, must have the
/// embedding's shape and is not read; rotary_emb.inv_freq buffers are ignored. Weights holding NaN
/// or Inf in `dtype` on `device` are refused unless non_finite.allow (io/finite.h).
DecoderWeights LoadDecoderWeights(const std::string& dir, const std::string& cfg_path, const DecoderConfig& c, at::Device device, at::ScalarType dtype,
                                  NonFiniteWeights& non_finite);

}  // namespace pg
