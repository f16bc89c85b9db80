// Data-parallel process groups over libtorch's c10d (the engine torch.distributed, torchrun, TRL
// and verl run on): rendezvous through c10d::TCPStore (rank 0 hosts it at MASTER_ADDR:MASTER_PORT,
// torchrun's convention), collectives through c10d::ProcessGroupGloo (CPU tensors) or
// c10d::ProcessGroupNCCL (CUDA tensors; built only with CUDA + nccl.h, PG_WITH_NCCL).
// Built only when the gloo headers are found (PG_WITH_DIST; see CMakeLists.txt): gloo itself is
// inside libtorch_cpu, the headers only describe it.
//
// Every collective runs on the calling (worker) thread, holds the group's mutex (one collective in
// flight per group, in program order as c10d requires), waits at most `timeout`, and throws
// DistError "rank R: OP #N: <cause>" — on a failure or timeout the group's store is asked which
// ranks have not entered collective #N (or stopped beating) so the message names them.
#pragma once
#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace c10d {
class Store;
class Backend;
}  // namespace c10d

namespace pg {
namespace dist {

/// A collective or rendezvous failure; the message names the rank, the operation and the peers.
struct DistError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct InitOptions {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string backend = "gloo";                   // "gloo" | "nccl"
  int device_index = -1;                          // CUDA device of this rank (nccl); -1 = CPU
  std::chrono::milliseconds timeout{600000};      // every collective (torch's default: 10 min)
  std::chrono::milliseconds init_timeout{60000};  // rendezvous: store connect + all ranks joined
};

/// Whether this build has the Gloo / NCCL process groups.
bool HasGloo();
bool HasNccl();

class Group {
 public:
  /// Rendezvous + process group. Errors (DistError, before any collective): port in use on rank 0,
  /// master unreachable within init_timeout, a rank whose world size differs from rank 0's, a rank
  /// outside [0, world), a backend not built, ranks missing after init_timeout.
  static std::shared_ptr<Group> Init(const InitOptions& o);
  ~Group();

  int rank() const { return o_.rank; }
  int world_size() const { return o_.world_size; }
  const std::string& backend() const { return o_.backend; }
  const InitOptions& options() const { return o_; }
  bool destroyed() const { return destroyed_; }

  /// In-place all-reduce of `tensors` (any dtypes, one device): flattened into buckets of at most
  /// bucket_bytes per dtype, all bucket all-reduces launched before the first wait (they overlap
  /// each other and the copies), results copied back and multiplied by `scale` (1/world = mean).
  /// op: "sum" | "max" | "min". Returns the number of buckets.
  int64_t AllReduce(std::vector<at::Tensor>& tensors, const std::string& op, double scale, int64_t bucket_bytes);
  /// Broadcast from `root` of each tensor, in place.
  void Broadcast(std::vector<at::Tensor>& tensors, int root);
  /// Every rank's byte string, in rank order (sizes all-gathered, then the padded payloads).
  std::vector<std::string> AllGatherObject(const std::string& payload);
  void Barrier();
  /// Releases the process group and the store (idempotent). Later calls throw DistError.
  void Destroy();

 private:
  Group() = default;
  template <typename F>
  auto Run(const char* op, F&& f) -> decltype(f());
  std::string Diagnose(int64_t seq);
  at::Device device() const;

  InitOptions o_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Backend> pg_;
  std::mutex mu_;
  int64_t seq_ = 0;
  std::atomic<bool> destroyed_{false};
  std::atomic<bool> failed_{false};  // a collective failed: Destroy aborts instead of shutting down
  std::atomic<bool> stop_beat_{false};
  std::thread beat_;
};

}  // namespace dist
}  // namespace pg
