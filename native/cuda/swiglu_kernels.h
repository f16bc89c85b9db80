// SwiGLU of the Qwen3 MLP (Shazeer 2020, Eq. 6 with Swish_1 = SiLU): act = silu(gate) · up, with
// gate and up the two halves of one fused [.., 2I] projection output. Plain C++ declarations,
// defined only with PG_WITH_CUDA_KERNELS (swiglu_kernels.cu); model/layer.cc falls back to
// at::silu(gate) * up elsewhere.
#pragma once
#include <cstdint>

namespace pg {
namespace cuda_kernels {

enum class SwigluType { kFloat32, kBFloat16, kFloat16 };

/// gu [rows, 2I] (contiguous: gate = columns [0, I), up = [I, 2I)) → act [rows, I] = silu(gate)·up.
const char* SwigluForward(const void* gu, void* act, int64_t rows, int64_t I, SwigluType t, void* stream);

/// Backward: dact [rows, I] → dgu [rows, 2I]: d gate = dact·up·σ(g)·(1 + g·(1 − σ(g))),
/// d up = dact·silu(g). Float32 math, one rounding per output.
const char* SwigluBackward(const void* gu, const void* dact, void* dgu, int64_t rows, int64_t I, SwigluType t, void* stream);

}  // namespace cuda_kernels
}  // namespace pg
