// Model-integrated steps: one decoder forward with the chosen adapter followed by a loss from
// loss/ (and its backward into the LoRA grads) or a logprob read-out. The compute behind the
// bindings' sequenceLogprobs, prefixLogprobs, opsdBackward, grpoBackward and
// Model.crossEntropyBackward (napi/model_steps.cc, napi/model.cc). Callers hold the model's lock
// and check arguments; these functions take tensors on any device (moved to the model's) and run
// with the grad mode the caller set (the backward steps need grad mode on).
#pragma once
#include <ATen/ATen.h>

#include "lora/lora.h"
#include "loss/grpo.h"
#include "loss/jsd.h"
#include "model/decoder.h"

namespace pg {
namespace steps {

/// Logprob of each token given its prefix: out[b, t] = log softmax(h[b, t-1] Wᵀ / temperature)[ids[b, t]]
/// (loss::SelectedLogprobs: fp32 logits, chunked), 0 at t = 0 and where completion_mask is 0.
/// ids [B, L] int64 (L >= 2); attention_mask, completion_mask [B, L] (0/1, any dtype). No grad.
/// Returns [B, L] float32 on the CPU.
at::Tensor SequenceLogprobs(DecoderModel& m, const at::Tensor& ids, const at::Tensor& attention_mask, const at::Tensor& completion_mask, double temperature,
                            const AdapterSel& sel, int64_t chunk);

/// The local judge's prefix scoring: log p(candidate | prefix + suffix_i[:len_i]) at each row's last
/// real position (log-softmax over the full vocabulary, fp32 logits with fp32 accumulation as
/// SequenceLogprobs computes them). The prefix is prefilled once into a KV cache whose keys and
/// values every suffix row then attends to (the shared question + plan of a rubric): read in place
/// by the shared-prefix attention (DecoderModel::ForwardSharedPrefix: the suffixes' queries against
/// the prefix in one flash call, their own tokens in a causal one, merged by log-sum-exp) on the
/// CPU and for bf16 / fp16 CUDA models, copied into a row per suffix otherwise (float32 CUDA
/// models, the fused paths switched off, PAPERGYM_JUDGE_ATTENTION=copy).
/// prefix [1, P] int64 (P >= 1); suffix [n, S] int64, right-padded; suffix_lengths [n] int64 in
/// [1, S]; candidates [K] int64 token ids. No grad. Returns [n, K] float32 on the CPU.
/// Shapes are bucketed (P padded on the left to a multiple of 64, masked; S on the right to a
/// multiple of 16): every plan of a GRPO step has its own P, and on an H200 at 1.7B shapes a
/// forward of shapes not seen before cost ≈ 29 ms more per plan (judge_host.mjs --fresh-plans:
/// 6.87 s per 64-plan reward call against 4.90 s on repeated shapes). Masked keys take no part in
/// the softmax, and the positions count real tokens only, so results are those of the unpadded
/// call up to the kernels' summation order.
at::Tensor PrefixLogprobs(DecoderModel& m, const at::Tensor& prefix, const at::Tensor& suffix, const at::Tensor& suffix_lengths, const at::Tensor& candidates,
                          const AdapterSel& sel);

/// SFT step: forward with `sel` (grad), then loss::CausalLmCrossEntropyBackward (mean next-token
/// cross-entropy over labels != -100; grads accumulate into the LoRA tensors). ids, mask, labels
/// [B, T] int64. InputError without a LoRA adapter or when `sel` has no trainable parameters;
/// ArgError when a label is neither -100 nor a token id in [0, vocab_size). Returns the loss.
double SftBackward(DecoderModel& m, const at::Tensor& ids, const at::Tensor& mask, const at::Tensor& labels, const AdapterSel& sel);

/// OPSD step (on-policy self-distillation): teacher forward (no grad, adapter `teacher`) over
/// teacher_ids, student forward (grad, active adapter) over student_ids, loss::JsdFused between the
/// rows student_rows / teacher_rows of the flattened hidden states ([B·L] indices of the hidden
/// state that predicts each completion token), backward into the LoRA grads. ids [B, L] int64,
/// masks [B, L]. InputError without a LoRA adapter or with it disabled. Returns the loss.
double OpsdBackward(DecoderModel& m, const at::Tensor& student_ids, const at::Tensor& student_mask, const at::Tensor& teacher_ids,
                    const at::Tensor& teacher_mask, const at::Tensor& student_rows, const at::Tensor& teacher_rows, const AdapterSel& teacher,
                    const loss::JsdOptions& jo);

/// GRPO step: forward (grad, active adapter), loss::GrpoFused over the shifted sequence, backward.
/// ids, attention_mask, completion_mask, old_logprobs, ref_logprobs (may be undefined) [B, L];
/// advantages [B] or [B, L]. logprobs of the result: [B, L] float32 on the CPU, 0 at t = 0.
struct GrpoStepResult {
  double loss = 0;
  loss::GrpoMetrics metrics;  // metrics.logp is moved into `logprobs`
  at::Tensor logprobs;
};
GrpoStepResult GrpoBackward(DecoderModel& m, const at::Tensor& ids, const at::Tensor& attention_mask, const at::Tensor& completion_mask,
                            const at::Tensor& old_logprobs, const at::Tensor& ref_logprobs, const at::Tensor& advantages, const loss::GrpoOptions& go);

}  // namespace steps
}  // namespace pg
