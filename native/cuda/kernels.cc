#include "cuda/kernels.h"

#include <cstdlib>
#include <cstring>

namespace pg {

bool CudaKernelsCompiled() {
#ifdef PG_WITH_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

bool CudaKernelsEnabled(const at::Tensor& t) {
  if (!CudaKernelsCompiled() || !t.defined() || !t.is_cuda()) return false;
  const char* e = std::getenv("PAPERGYM_NO_FUSED_KERNELS");
  return !(e && *e && std::strcmp(e, "0") != 0);
}

}  // namespace pg
