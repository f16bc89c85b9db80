/**
 * The kind of a GPU activity in a kernel profile (native().profileStop(), the trainer's
 * --profile-step, scripts/bench/generate.mjs --profile), from its kernel name: cuBLAS / CUTLASS
 * GEMMs, attention (the own split-K decode kernels, flash / cuDNN SDPA), the own norm / RoPE /
 * SwiGLU kernels, the loss row kernels, ATen's sampler and reduction kernels, copies; the rest is
 * "other".
 */
export function kernelKind(name: string): string {
  if (/gemm|gemv|xmma|cutlass|nvjet|splitKreduce|cublas/i.test(name)) return 'gemm';
  if (/PartialKernel|CombineKernel|flash|attention|sdpa/i.test(name)) return 'attention';
  if (/RmsNorm|rms_norm|QkNormRope|Rope|rope|SwiGlu|swiglu|swiglu_kernels|::Fwd<|::Bwd<|FwdVec|BwdVec/i.test(name)) return 'norm/rope/swiglu';
  if (/Jsd|Grpo|CrossEntropy|Logprob|loss_kernels|RowKernel/i.test(name)) return 'loss';
  if (/topk|sort|Sort|radix|gatherTopK|cumsum|scan|Scan|softmax|Softmax|multinomial|argmax|reduce_kernel|Reduce/i.test(name)) return 'sampler/reductions';
  if (/Memcpy|Memset/i.test(name)) return 'copies';
  if (/multi_tensor_apply|foreach|Adam/i.test(name)) return 'optimizer';
  return 'other';
}

/**
 * Total GPU µs per kind ({@link kernelKind}) of profiled kernels (`ProfileResult.kernels`:
 * name and totalUs in µs, summed over their calls).
 */
export function kernelUsByKind(kernels: readonly { name: string; totalUs: number }[]): Record<string, number> {
  const kinds: Record<string, number> = {};
  for (const k of kernels) {
    const kind = kernelKind(k.name);
    kinds[kind] = (kinds[kind] ?? 0) + k.totalUs;
  }
  return kinds;
}
