// CUDA-graph helpers of the static decode loop (generate.cc). The CUDA-only code is isolated in
// cuda_graph.cc under PG_WITH_CUDA; without it every entry point reports graphs unavailable.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <memory>

namespace pg {

/// True when this build can capture CUDA graphs (compiled with PG_WITH_CUDA, i.e. CUDA headers).
bool CudaGraphsCompiled();

/// RAII: on a CUDA device, waits for the work queued on the current stream, then makes this
/// thread's fixed non-default stream of `device` (the same stream on every call from the thread,
/// so the caching allocator's per-stream blocks are reused; another thread's calls, e.g. a second
/// model generating at once, never share it, so one call's graph capture cannot record the
/// other's kernels) current on this thread; on destruction waits for that stream
/// and restores the previous current stream. A no-op for non-CUDA devices and non-CUDA builds.
/// Graph capture (StepGraph::Capture) must run inside one (capture needs a non-default stream).
/// `high_priority`: the thread's high-priority stream of the device instead (the scoring calls
/// beside a decode: their kernels are dispatched ahead of the decode's when both wait).
class SideStreamScope {
 public:
  explicit SideStreamScope(at::Device device, bool high_priority = false);
  ~SideStreamScope();
  SideStreamScope(const SideStreamScope&) = delete;
  SideStreamScope& operator=(const SideStreamScope&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One captured CUDA graph of a step function over static tensors.
class StepGraph {
 public:
  StepGraph();
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  /// Captures `fn` on the current stream (a non-default CUDA stream, after at least one eager
  /// warm-up run of `fn` on that stream) with capture mode thread-local and a private memory
  /// pool. `fn` must not sync with the host and must only read / write tensors that outlive this
  /// graph. Nothing executes during capture. Returns fn's output tensor: its memory belongs to the
  /// graph and is rewritten by every Replay(). Throws c10::Error when capture fails (the capture
  /// is ended first, so the stream is usable again) or when the build has no CUDA graphs.
  at::Tensor Capture(const std::function<at::Tensor()>& fn);
  /// Launches the captured graph on the current stream (asynchronous).
  void Replay();
  bool captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pg
