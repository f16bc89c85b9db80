#include "cuda/kernels.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#ifdef PG_WITH_CUDA_KERNELS
#include <c10/cuda/CUDAGuard.h>

#include "cuda/loss_kernels.h"
#endif

namespace pg {

namespace {
// -1 = not yet decided (PAPERGYM_NO_FUSED_KERNELS is read once, on first use), 0 = off, 1 = on.
std::atomic<int> g_switch{-1};
std::once_flag g_env_once;

bool SwitchOn() {
  std::call_once(g_env_once, [] {
    const char* e = std::getenv("PAPERGYM_NO_FUSED_KERNELS");
    int expected = -1;
    g_switch.compare_exchange_strong(expected, (e && *e && std::strcmp(e, "0") != 0) ? 0 : 1);
  });
  return g_switch.load() == 1;
}

#ifdef PG_WITH_CUDA_KERNELS
// Per device: -1 unknown, 0 no kernel image for it (e.g. older than the build's architectures), 1 ok.
std::array<std::atomic<int>, 64> g_image{};
std::once_flag g_image_init;

bool ImageFor(const at::Tensor& t) {
  std::call_once(g_image_init, [] {
    for (auto& a : g_image) a.store(-1);
  });
  const int dev = t.device().has_index() ? t.device().index() : 0;
  if (dev < 0 || dev >= static_cast<int>(g_image.size())) return false;
  int v = g_image[static_cast<size_t>(dev)].load();
  if (v < 0) {
    c10::cuda::CUDAGuard guard(t.device());
    v = cuda_kernels::KernelImageAvailable() ? 1 : 0;
    g_image[static_cast<size_t>(dev)].store(v);
  }
  return v == 1;
}
#endif
}  // namespace

bool CudaKernelsCompiled() {
#ifdef PG_WITH_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

bool CudaKernelsEnabled(const at::Tensor& t) {
  if (!CudaKernelsCompiled() || !t.defined() || !t.is_cuda() || !SwitchOn()) return false;
#ifdef PG_WITH_CUDA_KERNELS
  return ImageFor(t);
#else
  return false;
#endif
}

void SetCudaKernelsEnabled(bool on) {
  SwitchOn();  // consume the environment first, so it cannot override this call later
  g_switch.store(on ? 1 : 0);
}

bool CudaKernelsSwitchedOn() {
  return SwitchOn();
}

}  // namespace pg
