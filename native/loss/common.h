// Shared pieces of the fused losses: fp32 logits from (possibly low-precision) hidden states and a
// frozen lm_head weight, computed one token chunk at a time. Every path that produces logprobs for
// training (old / reference / current policy) goes through ChunkLogits so that the same tokens give
// bit-identical logprobs (ratio exactly 1 at step 0).
#pragma once
#include <ATen/ATen.h>
#include <torch/types.h>

#include <cstdint>
#include <string>

namespace pg {
namespace loss {

/// The lm_head weight prepared once per call: fp32 weights are used as they are; bf16/fp16 weights
/// are kept in their dtype on CUDA (mm with out_dtype=float32 accumulates and writes fp32) and
/// converted to fp32 once on CPU (CPU has no low-precision mm with fp32 output).
struct PreparedWeight {
  at::Tensor w;       // [V, H]
  bool out_dtype_mm;  // use at::mm(h, w^T, kFloat)
};
PreparedWeight PrepareWeight(const at::Tensor& weight, const at::Tensor& hidden_like);

/// logits [C, V] float32 = h [C, H] @ w^T with fp32 accumulation. No autograd graph is recorded by
/// callers (they run under NoGradGuard).
at::Tensor ChunkLogits(const at::Tensor& h, const PreparedWeight& pw);

/// dHidden [C, H] (dtype of h) = dlogits [C, V] float32 @ w [V, H], accumulated in fp32.
at::Tensor ChunkGradHidden(const at::Tensor& dlogits, const PreparedWeight& pw, at::ScalarType hidden_dtype);

/// Per-token log-probability of `tokens` under softmax(logits / temperature) — chunked, no grad.
/// hidden [N, H], weight [V, H], tokens [N] int64 -> [N] float32.
at::Tensor SelectedLogprobs(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& tokens, double temperature, int64_t chunk);

/// Checks common loss arguments; throws pg::ArgError.
void CheckHiddenWeight(const at::Tensor& hidden, const at::Tensor& weight, const char* what);
int64_t ResolveChunk(int64_t chunk, int64_t vocab);

/// Automatic chunk of the GRPO / logprob kernel path: about 16 M float32 logits (64 MiB; 110 rows
/// at V = 151,936) per chunk, the only [C, V] buffer that path holds (row_kernels.h).
constexpr int64_t kGrpoKernelLogits = int64_t{16} << 20;

}  // namespace loss
}  // namespace pg
