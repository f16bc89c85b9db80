#include "io/host_state.h"

#include <torch/cuda.h>

#include "io/adapter_weights.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"

namespace pg {
namespace io {

namespace {
int64_t Bytes(const at::Tensor& t) {
  return static_cast<int64_t>(t.numel()) * static_cast<int64_t>(t.element_size());
}
}  // namespace

at::Tensor HostCopyF32(const at::Tensor& t) {
  if (!t.is_cuda()) return t.detach().to(at::kFloat, /*non_blocking=*/false, /*copy=*/true).contiguous();
  at::Tensor dst = at::empty(t.sizes(), at::TensorOptions().dtype(at::kFloat).device(at::kCPU).pinned_memory(true));
  CopyToHost(t, dst);
  return dst;
}

void CopyToHost(const at::Tensor& src, const at::Tensor& dst) {
  at::Tensor s = src.detach();
  if (s.scalar_type() != at::kFloat) s = s.to(at::kFloat);
  dst.copy_(s, /*non_blocking=*/s.is_cuda());
}

std::vector<at::Tensor> HostCopiesF32(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  bool cuda = false;
  int64_t total = 0;
  auto aligned = [](int64_t numel) { return (numel + 15) / 16 * 16; };  // 64-byte aligned float32 slices
  for (const auto& t : ts) {
    cuda = cuda || t.is_cuda();
    total += aligned(t.numel());
  }
  if (!cuda) {
    for (const auto& t : ts) out.push_back(HostCopyF32(t));
    return out;
  }
  // One pinned block for the whole capture: one allocation (the caching host allocator hands the
  // same block back to the next capture of the same size), each tensor a view of its slice.
  at::Tensor block = at::empty({std::max<int64_t>(total, 1)}, at::TensorOptions().dtype(at::kFloat).device(at::kCPU).pinned_memory(true));
  int64_t off = 0;
  for (const auto& t : ts) {
    at::Tensor dst = block.narrow(0, off, t.numel()).view(t.sizes());
    off += aligned(t.numel());
    CopyToHost(t, dst);
    out.push_back(dst);
  }
  return out;
}

void WaitHostCopies(const at::Device& device) {
  // The copies were queued on the current stream of this thread; a device-wide wait covers them
  // (nothing else runs on the model's device while the trainer captures a checkpoint).
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

HostState CaptureAdapter(const LoraAdapter& a) {
  HostState s;
  s.kind = HostState::Kind::kAdapter;
  s.adapter.config = a.config;
  s.adapter.scaling = a.scaling;
  s.adapter.num_layers = a.num_layers;
  at::NoGradGuard ng;
  std::vector<at::Tensor> src;
  for (const auto& kv : a.weights) {
    src.push_back(kv.second.first);
    src.push_back(kv.second.second);
  }
  auto host = HostCopiesF32(src);
  size_t i = 0;
  for (const auto& kv : a.weights) {
    s.adapter.weights[kv.first] = {host[i], host[i + 1]};
    s.bytes += Bytes(host[i]) + Bytes(host[i + 1]);
    i += 2;
  }
  return s;
}

HostState CaptureWeights(const lora::ModuleWeights& w, std::map<std::string, std::string> metadata) {
  HostState s;
  s.kind = HostState::Kind::kWeights;
  s.metadata = std::move(metadata);
  at::NoGradGuard ng;
  std::vector<at::Tensor> src;
  for (const auto& kv : w) {
    src.push_back(kv.second.first);
    src.push_back(kv.second.second);
  }
  auto host = HostCopiesF32(src);
  size_t i = 0;
  for (const auto& kv : w) {
    s.weights[kv.first] = {host[i], host[i + 1]};
    s.bytes += Bytes(host[i]) + Bytes(host[i + 1]);
    i += 2;
  }
  return s;
}

HostState CaptureTensors(const std::map<std::string, at::Tensor>& ts, std::map<std::string, std::string> metadata) {
  HostState s;
  s.kind = HostState::Kind::kTensors;
  s.metadata = std::move(metadata);
  at::NoGradGuard ng;
  std::vector<at::Tensor> src;
  for (const auto& kv : ts) src.push_back(kv.second);
  auto host = HostCopiesF32(src);
  size_t i = 0;
  for (const auto& kv : ts) {
    s.tensors[kv.first] = host[i];
    s.bytes += Bytes(host[i]);
    ++i;
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
