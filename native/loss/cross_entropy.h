// Causal-LM cross-entropy (the SFT loss) over the decoder's final hidden states, with backward.
#pragma once
#include <ATen/ATen.h>

namespace pg {
namespace loss {

/// Mean next-token cross-entropy over the positions whose shifted label is not -100, as
/// transformers' causal-LM loss (ForCausalLMLoss: logits[:, t] predict labels[:, t + 1]):
///   L = (1 / n) Σ_{t : labels[t+1] != -100} −log softmax(h_t Wᵀ)[labels[t+1]],  n = number of such t.
/// Runs backward: dL/dh is accumulated over token chunks and back-propagated through h's graph
/// once (so the gradient lands in whatever h was computed from, e.g. the LoRA tensors).
///   hidden  [B, T, H] in the model dtype, requires grad (the decoder output);
///   weight  [V, H] lm_head, frozen, the model dtype;
///   labels  [B, T] int64 (-100 = ignored) on hidden's device, T >= 2.
/// Logits are float32: on CUDA (own kernels, cuda/kernels.h) loss and logits gradient of each row
/// come from one kernel over [chunk, V] fp32 logits with fp32 accumulation (loss/row_kernels.h);
/// elsewhere at::linear in the model dtype cast to float32, 1024 tokens at a time. The [chunk, V]
/// logits are the only vocabulary-sized buffer. Returns L. InputError when no label is selected.
double CausalLmCrossEntropyBackward(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels);

}  // namespace loss
}  // namespace pg
