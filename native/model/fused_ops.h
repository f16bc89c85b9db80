// Decoder-layer ops with a fused CUDA kernel (native/cuda/*.cu) and an ATen fallback:
//   RopeQK  — rotary position embedding of q and k (Qwen3 / transformers' apply_rotary_pos_emb with
//             rotate_half; RoFormer, Su et al. 2021, Eq. 34): x·cos + rotate_half(x)·sin;
//   SwiGLU  — silu(gate)·up of the MLP (Shazeer 2020, Eq. 6).
// The kernels are used on CUDA when compiled in (cuda/kernels.h); the GPU tests compare them with
// the ATen path (PAPERGYM_NO_FUSED_KERNELS=1).
#pragma once
#include <ATen/ATen.h>

#include <utility>

namespace pg {

/// q [B, T, nq, D], k [B, T, nk, D] (model dtype), cos / sin [B, T, D] (model dtype) → rotated
/// (q, k), same shapes, differentiable w.r.t. q and k. On CUDA with the own kernels
/// (cuda/kernels.h): one launch forward and one backward for q and k together, computed in
/// float32 and rounded once (the ATen expression rounds after each product and the sum, so bf16
/// results can differ by an ulp). Elsewhere: the ATen expression.
std::pair<at::Tensor, at::Tensor> RopeQK(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin);

/// gu [..., 2I] (gate = first I columns, up = last I; the fused gate/up projection output) →
/// silu(gate)·up [..., I], differentiable w.r.t. gu. CUDA kernel: one launch forward and one
/// backward, float32 math rounded once (ATen rounds silu(gate) before the product).
at::Tensor SwiGLU(const at::Tensor& gu);

/// Decode attention (one query per row) over each row's live KV only — split-K flash decoding,
/// cuda/decode_attention_kernels.h:
///   o[b, h] = softmax_{s in [start[b], slot]}(scale · q[b, h] · k[b, h / rep, s]) · v[b, h / rep, s].
/// q [B, nh, D], k / v the static cache [B, nkv, C, D] (same dtype, contiguous), start int32 [B]
/// and slot int64 [1] on q's device (read there: CUDA-graph capturable) → o [B, nh, D] in q's
/// dtype. Returns an undefined tensor when the kernel does not apply (CPU, not compiled in, the own
/// kernels switched off, PAPERGYM_LIVE_KV=0, an unsupported dtype or head shape); the caller then
/// runs the masked SDPA over all slots, which the GPU tests compare this with.
/// group_rows >= 2 with prefix_end: rows [g·group_rows, (g + 1)·group_rows) hold the same K/V in
/// every live slot before prefix_end (the n completions of one prompt: copies of one prefill);
/// the kernel then reads the group's first row once for all of them there, on tensor cores in
/// bf16 / fp16 (cuda/decode_attention_kernels.h: DecodeGroups, PlanDecodeSplits); a prefix_end
/// outside [0, C] plans no groups (DecoderModel::DecodeStatic rejects it with an ArgError).
at::Tensor LiveKvDecodeAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& start, const at::Tensor& slot, double scale,
                                 int64_t group_rows = 0, int64_t prefix_end = 0);

/// Rows per group that LiveKvDecodeAttention reads one prompt copy for at these shapes (B rows,
/// capacity C; `like` the cache's dtype / device), or 0 where it does not (the plan of
/// PlanDecodeSplits; GenerateResult::decode_prompt_group).
int64_t LiveKvPromptGroup(const at::Tensor& like, int64_t B, int64_t nh, int64_t nkv, int64_t C, int64_t D, int64_t group_rows, int64_t prefix_end);

/// Whether LiveKvDecodeAttention runs for a model whose activations are like `like` (dtype,
/// device) with nh query heads, nkv KV heads and head_dim D.
bool LiveKvDecodeAttentionApplies(const at::Tensor& like, int64_t nh, int64_t nkv, int64_t D);

// Inference-only fusions of the decoder layer's small ops (cuda/norm_kernels.h; no autograd):
// the caller (the model's forward loop) uses them only outside autograd and outside activation
// recomputation, so training and its recomputed forward keep the ATen ops. They cut the decode
// step's launches per layer from about 16 to 9 (the step was thought launch-bound then; the later
// profile found it GPU-bound: docs/changelog-performance.md §4).

/// Whether the inference fusions run for activations like `like`: the own kernels are enabled
/// for it (cuda/kernels.h), its dtype is float32 / bfloat16 / float16, and PAPERGYM_FUSED_NORM_ROPE
/// (read once; unset or not "0" = on) is on.
bool InferenceFusionsApply(const at::Tensor& like);

/// Residual add + RMSNorm in one kernel: h, d [..., H] (same dtype and shape), w [H] → (s, y) with
/// s = h + d and y = RMSNorm(s)·w (rms over H in float32, eps; rounding as ATen's add then its
/// fused rms_norm). Both undefined when the kernel does not apply (InferenceFusionsApply off,
/// mismatched dtypes / shapes); the caller then runs the ATen ops.
std::pair<at::Tensor, at::Tensor> AddRmsNormFused(const at::Tensor& h, const at::Tensor& d, const at::Tensor& w, double eps);

/// q / k / v of one attention layer from the fused projection output in one kernel: qkv
/// [B, T, (nq + 2·nk)·D] → q [B, T, nq, D] after the optional per-head RMSNorm (q_w / k_w [D];
/// undefined = none) and RoPE (cos / sin [B, T, D]), and k [B, T, nk, D] likewise, v [B, T, nk, D]
/// unchanged. With `kc` / `vc` (the layer's caches [B, nk, C, D], T = 1, `slot` int64 [1] on the
/// device): k and v are written at cache index slot of each row instead and come back undefined
/// (the decode step's index_copy_). Returns an undefined q when the kernel does not apply.
struct QkvPrepared {
  at::Tensor q, k, v;
};
QkvPrepared QkNormRopeFused(const at::Tensor& qkv, const at::Tensor& q_w, const at::Tensor& k_w, const at::Tensor& cos, const at::Tensor& sin, double eps,
                            int64_t nq, int64_t nk, int64_t D, const at::Tensor& kc, const at::Tensor& vc, const at::Tensor& slot);

}  // namespace pg
