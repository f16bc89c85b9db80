// Host copies of training state for checkpoints written off the critical path (issue 36): the
// adapter, a snapshot or the optimizer moments are copied from the device into host memory (pinned
// when the source is on CUDA: the copies are asynchronous on the current stream, one wait at the
// end), then written to disk by a worker thread while the next training step runs on the device.
// The files are byte for byte those the direct writers produce (SavePeftAdapter, SaveWeights,
// st::Save): the same tensors, converted to the same dtype (float32) on the device first.
#pragma once
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

#include "lora/lora.h"
#include "lora/snapshots.h"

namespace pg {
namespace io {

/// One captured piece of state. `kind` says which file Save writes: kAdapter a PEFT adapter dir
/// (adapter_model.safetensors + adapter_config.json), kWeights a snapshot file (SaveWeights),
/// kTensors a safetensors file of `tensors` with `metadata` (the optimizer state).
struct HostState {
  enum class Kind { kAdapter, kWeights, kTensors };
  Kind kind = Kind::kTensors;
  LoraAdapter adapter;                          // kAdapter: config, scaling, host float32 weights
  lora::ModuleWeights weights;                  // kWeights: host float32 A/B per module
  std::map<std::string, at::Tensor> tensors;    // kTensors: host float32 tensors
  std::map<std::string, std::string> metadata;  // kWeights / kTensors: safetensors __metadata__
  int64_t bytes = 0;                            // host bytes held
};

/// A host float32 copy of `t` (any device; converted on its device first). On CUDA the copy goes to
/// pinned memory and is asynchronous on the current stream: call WaitHostCopies before reading it.
/// A CPU source is cloned (the copy must not alias state that the next step updates in place).
at::Tensor HostCopyF32(const at::Tensor& t);

/// Copies `src` (any device, converted to float32 on it) into the host tensor `dst` of the same
/// shape: asynchronous when `src` is on CUDA (`dst` pinned).
void CopyToHost(const at::Tensor& src, const at::Tensor& dst);

/// Host float32 copies of `ts`, in order. From CUDA: views of one pinned block (one allocation per
/// capture, reused by the next one of the same size), the copies asynchronous; wait with WaitHostCopies.
std::vector<at::Tensor> HostCopiesF32(const std::vector<at::Tensor>& ts);

/// Waits for the asynchronous copies of HostCopyF32 issued on this thread's current stream of
/// `device` (a no-op for CPU).
void WaitHostCopies(const at::Device& device);

/// Captures of the three kinds (copies issued; the caller waits with WaitHostCopies).
HostState CaptureAdapter(const LoraAdapter& a);
HostState CaptureWeights(const lora::ModuleWeights& w, std::map<std::string, std::string> metadata);
HostState CaptureTensors(const std::map<std::string, at::Tensor>& ts, std::map<std::string, std::string> metadata);

/// Writes `s` to `target` (kAdapter: a dir, created if missing, `base_model_name` into
/// adapter_config.json; else a file path), atomically per file (temp + fsync + rename). Touches
/// host memory only (no device, no model lock). InputError naming the path on I/O errors.
void SaveHostState(const HostState& s, const std::string& target, const std::string& base_model_name);

}  // namespace io
}  // namespace pg
