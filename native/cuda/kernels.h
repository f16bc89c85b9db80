// Switch for the project's own CUDA kernels (native/cuda/*.cu: fused loss rows, RoPE). They exist
// only in builds with a CUDA compiler (PG_WITH_CUDA_KERNELS, the cmake-js build); every caller has
// an ATen path that is used otherwise and that the GPU tests compare the kernels against.
#pragma once
#include <ATen/ATen.h>

namespace pg {

/// True when this build contains the own CUDA kernels.
bool CudaKernelsCompiled();

/// True when the own kernels are used for tensors like `t`: compiled in, `t` on CUDA, and
/// PAPERGYM_NO_FUSED_KERNELS unset or "0" (read on every call, so one process can A/B both paths).
bool CudaKernelsEnabled(const at::Tensor& t);

}  // namespace pg
