#include "generate/cuda_graph.h"

#include <c10/util/Exception.h>

#ifdef PG_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <c10/cuda/CUDAException.h>

#include <map>
#include <optional>
#endif

namespace pg {

#ifdef PG_WITH_CUDA

bool CudaGraphsCompiled() {
  return true;
}

namespace {
// One stream per (thread, device), made on the thread's first call and kept for the process (so the
// caching allocator's per-stream blocks are reused from call to call). Per thread, not per process:
// a graph capture records whatever any thread launches on the capturing stream, so two calls
// generating at once on one stream (two models, two worker threads) captured each other's kernels
// (the GPU suite's two-model test: index_copy_ out of bounds on replay). Created with
// cudaStreamCreateWithFlags rather than taken from ATen's round-robin pool, whose 32 streams
// would be shared again past 32 threads.
c10::cuda::CUDAStream SideStream(c10::DeviceIndex dev, bool high_priority) {
  thread_local std::map<std::pair<c10::DeviceIndex, bool>, c10::cuda::CUDAStream> streams;
  auto it = streams.find({dev, high_priority});
  if (it == streams.end()) {
    c10::cuda::CUDAGuard g(dev);
    int least = 0, greatest = 0;
    C10_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t raw = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithPriority(&raw, cudaStreamNonBlocking, high_priority ? greatest : least));
    it = streams.emplace(std::make_pair(dev, high_priority), c10::cuda::getStreamFromExternal(raw, dev)).first;
  }
  return it->second;
}
}  // namespace

struct SideStreamScope::Impl {
  c10::cuda::CUDAStream side;
  std::optional<c10::cuda::CUDAStreamGuard> guard;
};

SideStreamScope::SideStreamScope(at::Device device, bool high_priority) {
  if (!device.is_cuda()) return;
  const c10::DeviceIndex dev = device.has_index() ? device.index() : c10::cuda::current_device();
  c10::cuda::getCurrentCUDAStream(dev).synchronize();  // prefill results are ready for the side stream
  impl_.reset(new Impl{SideStream(dev, high_priority), std::nullopt});
  impl_->guard.emplace(impl_->side);
}

SideStreamScope::~SideStreamScope() {
  if (!impl_) return;
  try {
    impl_->side.synchronize();  // nothing pending on tensors the caller frees or reuses next
  } catch (...) {
  }
  impl_->guard.reset();
}

struct StepGraph::Impl {
  at::cuda::CUDAGraph graph;  // its constructor touches the current CUDA stream: made in Capture
  at::Tensor out;
  bool captured = false;
};

StepGraph::StepGraph() = default;
StepGraph::~StepGraph() = default;

at::Tensor StepGraph::Capture(const std::function<at::Tensor()>& fn) {
  TORCH_CHECK(!impl_, "StepGraph::Capture called twice");
  const auto stream = c10::cuda::getCurrentCUDAStream();
  TORCH_CHECK(stream != c10::cuda::getDefaultCUDAStream(stream.device_index()), "CUDA graph capture needs a non-default stream (use SideStreamScope)");
  impl_.reset(new Impl());
  // On failure: end the capture (so the stream leaves capture mode) and deliberately leak the
  // graph object: the caching allocator may still hold a pool filter that points at it.
  auto abandon = [this] {
    try {
      impl_->graph.capture_end();
    } catch (...) {
    }
    (void)impl_.release();
  };
  at::Tensor out;
  try {
    impl_->graph.capture_begin(c10::MempoolId_t{0, 0}, cudaStreamCaptureModeThreadLocal);
    out = fn();
    impl_->graph.capture_end();  // also instantiates the graph
  } catch (const c10::OutOfMemoryError&) {
    abandon();
    throw;
  } catch (const c10::Error& e) {
    abandon();
    TORCH_CHECK(false,
                "CUDA graph capture of the decode step failed (generate with cudaGraphs: false or set PAPERGYM_NO_CUDA_GRAPHS=1 to decode without graphs): ",
                e.what_without_backtrace());
  } catch (...) {
    abandon();
    throw;
  }
  impl_->out = out;
  impl_->captured = true;
  return out;
}

void StepGraph::Replay() {
  TORCH_CHECK(impl_ && impl_->captured, "StepGraph::Replay before a successful Capture");
  impl_->graph.replay();
}

bool StepGraph::captured() const {
  return impl_ && impl_->captured;
}

#else  // !PG_WITH_CUDA

bool CudaGraphsCompiled() {
  return false;
}

struct SideStreamScope::Impl {};
SideStreamScope::SideStreamScope(at::Device, bool) {}
SideStreamScope::~SideStreamScope() = default;

struct StepGraph::Impl {};
StepGraph::StepGraph() = default;
StepGraph::~StepGraph() = default;
at::Tensor StepGraph::Capture(const std::function<at::Tensor()>&) {
  TORCH_CHECK(false, "this build of papergym-native has no CUDA graphs (no PG_WITH_CUDA)");
}
void StepGraph::Replay() {
  TORCH_CHECK(false, "this build of papergym-native has no CUDA graphs (no PG_WITH_CUDA)");
}
bool StepGraph::captured() const {
  return false;
}

#endif

}  // namespace pg
