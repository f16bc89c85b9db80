// Switch for the project's own CUDA kernels (native/cuda/*.cu: fused loss rows, RoPE). They exist
// only in builds with a CUDA compiler (PG_WITH_CUDA_KERNELS, the cmake-js build); every caller has
// an ATen path that is used otherwise and that the GPU tests compare the kernels against.
#pragma once
#include <ATen/ATen.h>

namespace pg {

/// True when this build contains the own CUDA kernels.
bool CudaKernelsCompiled();

/// True when the own kernels are used for tensors like `t`: compiled in, `t` on CUDA, the build
/// holds a kernel image for that GPU (probed once per device; older GPUs use the ATen paths), and
/// the switch is on. The switch starts from PAPERGYM_NO_FUSED_KERNELS (unset or "0" = on), read
/// once on first use; SetCudaKernelsEnabled changes it at run time (A/B in one process).
bool CudaKernelsEnabled(const at::Tensor& t);

/// Turns the own kernels on or off for later calls (JS: native().setFusedKernels(on)).
void SetCudaKernelsEnabled(bool on);

/// The switch's current value (not whether a device can run the kernels).
bool CudaKernelsSwitchedOn();

}  // namespace pg
