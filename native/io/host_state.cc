#include "io/host_state.h"

#include <torch/cuda.h>

#include "io/adapter_weights.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"

namespace pg {
namespace io {

at::Tensor HostCopyF32(const at::Tensor& t) {
  if (!t.is_cuda()) return t.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true).contiguous();
  at::Tensor src = t.detach();
  if (src.scalar_type() != at::kFloat) src = src.to(at::kFloat);
  at::Tensor dst = at::empty(src.sizes(), at::TensorOptions().dtype(at::kFloat).device(at::kCPU).pinned_memory(true));
  dst.copy_(src, /*non_blocking=*/true);
  return dst;
}

void WaitHostCopies(const at::Device& device) {
  // The copies were queued on the current stream of this thread; a device-wide wait covers them
  // (nothing else runs on the model's device while the trainer captures a checkpoint).
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

namespace {
int64_t Bytes(const at::Tensor& t) {
  return static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
}
}  // namespace

HostState CaptureAdapter(const LoraAdapter& a) {
  HostState s;
  s.kind = HostState::Kind::kAdapter;
  s.adapter.config = a.config;
  s.adapter.scaling = a.scaling;
  s.adapter.num_layers = a.num_layers;
  at::NoGradGuard ng;
  for (const auto& kv : a.weights) {
    auto A = HostCopyF32(kv.second.first), B = HostCopyF32(kv.second.second);
    s.bytes += Bytes(A) + Bytes(B);
    s.adapter.weights[kv.first] = {A, B};
  }
  return s;
}

HostState CaptureWeights(const lora::ModuleWeights& w, std::map<std::string, std::string> metadata) {
  HostState s;
  s.kind = HostState::Kind::kWeights;
  s.metadata = std::move(metadata);
  at::NoGradGuard ng;
  for (const auto& kv : w) {
    auto A = HostCopyF32(kv.second.first), B = HostCopyF32(kv.second.second);
    s.bytes += Bytes(A) + Bytes(B);
    s.weights[kv.first] = {A, B};
  }
  return s;
}

HostState CaptureTensors(const std::map<std::string, at::Tensor>& ts, std::map<std::string, std::string> metadata) {
  HostState s;
  s.kind = HostState::Kind::kTensors;
  s.metadata = std::move(metadata);
  at::NoGradGuard ng;
  for (const auto& kv : ts) {
    auto t = HostCopyF32(kv.second);
    s.bytes += Bytes(t);
    s.tensors[kv.first] = t;
  }
  return s;
}

void SaveHostState(const HostState& s, const std::string& target, const std::string& base_model_name) {
  switch (s.kind) {
    case HostState::Kind::kAdapter:
      SavePeftAdapter(target, s.adapter, base_model_name);
      return;
    case HostState::Kind::kWeights:
      SaveWeights(target, s.weights, s.metadata);
      return;
    case HostState::Kind::kTensors:
      st::Save(target, s.tensors, s.metadata);
      return;
  }
}

}  // namespace io
}  // namespace pg
