// c10d process groups (see dist.h). Compiled only with the gloo headers (PG_WITH_DIST).
#include "parallel/dist.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <cstring>

#ifdef PG_WITH_DIST
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef PG_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#endif

#include <cstdlib>
#include <sstream>

namespace pg {
namespace dist {

#ifdef PG_WITH_DIST
bool HasGloo() {
  return true;
}
#else
bool HasGloo() {
  return false;
}
#endif
#ifdef PG_WITH_NCCL
bool HasNccl() {
  return true;
}
#else
bool HasNccl() {
  return false;
}
#endif

#ifndef PG_WITH_DIST
std::shared_ptr<Group> Group::Init(const InitOptions&) {
  throw DistError(
      "distributed training is not in this build: the gloo headers were not found when the addon was compiled (install libgloo-dev, e.g. scripts/setup.sh as "
      "root, and rebuild)");
}
Group::~Group() = default;
int64_t Group::AllReduce(std::vector<at::Tensor>&, const std::string&, double, int64_t) {
  throw DistError("no distributed support in this build");
}
void Group::Broadcast(std::vector<at::Tensor>&, int) {
  throw DistError("no distributed support in this build");
}
std::vector<std::string> Group::AllGatherObject(const std::string&) {
  throw DistError("no distributed support in this build");
}
void Group::Barrier() {
  throw DistError("no distributed support in this build");
}
void Group::Destroy() {}
#else

namespace {
using namespace std::chrono_literals;

std::string Where(const InitOptions& o) {
  return o.master_addr + ":" + std::to_string(o.master_port);
}
// The cause without libtorch's C++ backtrace.
std::string Cause(const std::exception& e) {
  const auto* ce = dynamic_cast<const c10::Error*>(&e);
  std::string m = ce ? ce->what_without_backtrace() : e.what();
  auto nl = m.find("\nException raised from");
  return nl == std::string::npos ? m : m.substr(0, nl);
}
std::string Secs(std::chrono::milliseconds ms) {
  std::ostringstream os;
  os << static_cast<double>(ms.count()) / 1000.0 << " s";
  return os.str();
}

c10::intrusive_ptr<c10d::Store> Connect(const InitOptions& o, bool server, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(o.master_port);
  so.isServer = server;
  so.waitWorkers = false;
  so.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
}

int64_t ReadCounter(c10d::Store& s, const std::string& key) {
  return s.add(key, 0);
}

std::string Str(const std::vector<uint8_t>& v) {
  return std::string(v.begin(), v.end());
}
std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

bool IsLoopback(const std::string& a) {
  return a == "localhost" || a.rfind("127.", 0) == 0 || a == "::1";
}
}  // namespace

Group::~Group() {
  try {
    Destroy();
  } catch (...) {
  }
}

at::Device Group::device() const {
  return o_.device_index >= 0 ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(o_.device_index)) : at::Device(at::kCPU);
}

std::shared_ptr<Group> Group::Init(const InitOptions& o) {
  const std::string me = "rank " + std::to_string(o.rank) + ": init";
  if (o.world_size < 1) throw DistError(me + ": WORLD_SIZE must be >= 1 (got " + std::to_string(o.world_size) + ")");
  if (o.rank < 0 || o.rank >= o.world_size)
    throw DistError(me + ": RANK " + std::to_string(o.rank) + " is outside [0, WORLD_SIZE=" + std::to_string(o.world_size) + ")");
  if (o.master_port < 1 || o.master_port > 65535) throw DistError(me + ": MASTER_PORT " + std::to_string(o.master_port) + " is not a TCP port");
  if (o.backend != "gloo" && o.backend != "nccl") throw DistError(me + ": backend must be 'gloo' or 'nccl' (got '" + o.backend + "')");
  if (o.backend == "nccl" && !HasNccl())
    throw DistError(me + ": backend nccl is not in this build (needs a CUDA build of the addon with nccl.h; the pip nvidia-nccl wheel ships it)");
  if (o.backend == "nccl" && o.device_index < 0) throw DistError(me + ": backend nccl needs a CUDA device");
  std::shared_ptr<Group> g(new Group());
  g->o_ = o;
  // ---- rendezvous: rank 0 hosts the TCPStore (port in use -> error here, before any compute) ----
  try {
    g->store_ = Connect(o, o.rank == 0, o.init_timeout);
  } catch (const std::exception& e) {
    if (o.rank == 0)
      throw DistError(me + ": cannot host the rendezvous store on " + Where(o) +
                      " (MASTER_PORT in use or MASTER_ADDR not an address of this machine): " + Cause(e));
    throw DistError(me + ": master " + Where(o) + " unreachable within " + Secs(o.init_timeout) +
                    " (is rank 0 running, MASTER_ADDR/MASTER_PORT right, the port open?): " + Cause(e));
  }
  auto& s = *g->store_;
  // ---- every rank must agree on the world size with rank 0 ----
  const std::string ws = std::to_string(o.world_size);
  try {
    s.set("pg/world/" + std::to_string(o.rank), Bytes(ws));
    if (o.rank != 0) {
      s.wait({"pg/world/0"}, o.init_timeout);
      std::string ws0 = Str(s.get("pg/world/0"));
      if (ws0 != ws) {
        std::string msg = "rank " + std::to_string(o.rank) + " has WORLD_SIZE " + ws + " but rank 0 has " + ws0;
        s.set("pg/mismatch", Bytes(msg));
        throw DistError(me + ": mismatched world sizes: " + msg);
      }
    }
    int64_t joined = s.add("pg/joined", 1);
    const auto deadline = std::chrono::steady_clock::now() + o.init_timeout;
    while (joined < o.world_size) {
      if (s.check({"pg/mismatch"})) throw DistError(me + ": mismatched world sizes: " + Str(s.get("pg/mismatch")));
      if (joined > o.world_size)
        throw DistError(me + ": more ranks joined than WORLD_SIZE " + ws + " (two ranks with the same RANK, or mismatched world sizes)");
      if (std::chrono::steady_clock::now() > deadline)
        throw DistError(me + ": only " + std::to_string(joined) + " of " + ws + " ranks joined " + Where(o) + " within " + Secs(o.init_timeout));
      std::this_thread::sleep_for(20ms);
      joined = ReadCounter(s, "pg/joined");
    }
    if (s.check({"pg/mismatch"})) throw DistError(me + ": mismatched world sizes: " + Str(s.get("pg/mismatch")));
  } catch (const DistError&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError(me + ": rendezvous on " + Where(o) + " failed: " + Cause(e));
  }
  // ---- the process group ----
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(o.backend + "/", g->store_);
    if (o.backend == "gloo") {
      auto opts = c10d::ProcessGroupGloo::Options::create(o.timeout);
      const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
      if (ifname && *ifname)
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      else if (IsLoopback(o.master_addr))
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      else
        opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      g->pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, o.rank, o.world_size, opts);
    } else {
#ifdef PG_WITH_NCCL
      auto opts = c10d::ProcessGroupNCCL::Options::create();
      opts->timeout = o.timeout;
      g->pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, o.rank, o.world_size, opts);
#endif
    }
  } catch (const std::exception& e) {
    throw DistError(me + ": creating the " + o.backend + " process group failed: " + Cause(e));
  }
  // ---- heartbeat (for naming a dead rank after a failed collective) ----
  g->beat_ = std::thread([gp = g.get()]() {
    c10::intrusive_ptr<c10d::Store> hs;
    try {
      hs = Connect(gp->o_, false, 10000ms);
    } catch (...) {
      return;
    }
    const std::string key = "pg/hb/" + std::to_string(gp->o_.rank);
    while (!gp->stop_beat_) {
      try {
        hs->add(key, 1);
      } catch (...) {
        return;  // the store (rank 0) is gone
      }
      for (int i = 0; i < 5 && !gp->stop_beat_; ++i) std::this_thread::sleep_for(100ms);
    }
  });
  return g;
}

std::string Group::Diagnose(int64_t seq) {
  // Which ranks did not enter collective #seq, and which stopped beating (exited or killed).
  try {
    auto s = Connect(o_, false, 5000ms);
    std::vector<int64_t> hb0(o_.world_size), hb1(o_.world_size), sq(o_.world_size);
    for (int r = 0; r < o_.world_size; ++r) hb0[r] = ReadCounter(*s, "pg/hb/" + std::to_string(r));
    std::this_thread::sleep_for(1500ms);
    std::ostringstream os;
    bool any = false;
    for (int r = 0; r < o_.world_size; ++r) {
      if (r == o_.rank) continue;
      hb1[r] = ReadCounter(*s, "pg/hb/" + std::to_string(r));
      sq[r] = ReadCounter(*s, "pg/seq/" + std::to_string(r));
      if (hb1[r] == hb0[r]) {
        os << (any ? "; " : "") << "rank " << r << " is gone (no heartbeat for 1.5 s: exited or killed)";
        any = true;
      } else if (sq[r] < seq) {
        os << (any ? "; " : "") << "rank " << r << " has not entered it (it is at collective #" << sq[r] << ", hung or slow)";
        any = true;
      }
    }
    return any ? os.str() : "all ranks alive and arrived (a transport error)";
  } catch (const std::exception& e) {
    return "rank 0 is gone (its store at " + Where(o_) + " is unreachable)";
  }
}

template <typename F>
auto Group::Run(const char* op, F&& f) -> decltype(f()) {
  std::lock_guard<std::mutex> lk(mu_);
  if (destroyed_) throw DistError("rank " + std::to_string(o_.rank) + ": " + op + ": the process group was destroyed");
  int64_t seq = 0;
  try {
    seq = store_->add("pg/seq/" + std::to_string(o_.rank), 1);
  } catch (const std::exception& e) {
    throw DistError("rank " + std::to_string(o_.rank) + ": " + op + ": rank 0 is gone (its store at " + Where(o_) + " is unreachable): " + Cause(e));
  }
  seq_ = seq;
  try {
    return f();
  } catch (const std::exception& e) {
    failed_ = true;
    std::string cause = Cause(e);
    throw DistError("rank " + std::to_string(o_.rank) + ": " + op + " (collective #" + std::to_string(seq) + ", timeout " + Secs(o_.timeout) +
                    ") failed: " + Diagnose(seq) + ". Cause: " + cause);
  }
}

namespace {
void WaitWork(const c10::intrusive_ptr<c10d::Work>& w, std::chrono::milliseconds timeout) {
  if (!w->wait(timeout)) throw std::runtime_error("timed out after " + std::to_string(timeout.count()) + " ms");
}
c10d::ReduceOp ParseOp(const std::string& op) {
  if (op == "sum") return c10d::ReduceOp::SUM;
  if (op == "max") return c10d::ReduceOp::MAX;
  if (op == "min") return c10d::ReduceOp::MIN;
  throw std::invalid_argument("allReduce op must be 'sum', 'max' or 'min' (got '" + op + "')");
}
}  // namespace

int64_t Group::AllReduce(std::vector<at::Tensor>& tensors, const std::string& op, double scale, int64_t bucket_bytes) {
  c10d::AllreduceOptions ao;
  ao.reduceOp = ParseOp(op);
  ao.timeout = o_.timeout;
  return Run("allReduce", [&]() -> int64_t {
    // Buckets: consecutive tensors of one dtype, at most bucket_bytes each (a larger tensor alone).
    std::vector<std::vector<size_t>> buckets;
    size_t cur = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      size_t b = t.numel() * t.element_size();
      if (buckets.empty() || tensors[buckets.back().front()].scalar_type() != t.scalar_type() || (cur + b > static_cast<size_t>(bucket_bytes) && cur > 0)) {
        buckets.push_back({});
        cur = 0;
      }
      buckets.back().push_back(i);
      cur += b;
    }
    std::vector<at::Tensor> flats;
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (auto& bk : buckets) {
      std::vector<at::Tensor> parts;
      for (size_t i : bk) parts.push_back(tensors[i].to(device()).reshape({-1}));
      std::vector<at::Tensor> one{at::cat(parts)};
      flats.push_back(one[0]);
      works.push_back(pg_->allreduce(one, ao));  // launched before any wait: buckets overlap
    }
    for (size_t k = 0; k < buckets.size(); ++k) {
      WaitWork(works[k], o_.timeout);
      at::Tensor flat = flats[k];
      if (scale != 1.0) flat.mul_(scale);
      int64_t off = 0;
      for (size_t i : buckets[k]) {
        auto& t = tensors[i];
        t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
    }
    return static_cast<int64_t>(buckets.size());
  });
}

void Group::Broadcast(std::vector<at::Tensor>& tensors, int root) {
  if (root < 0 || root >= o_.world_size) throw std::invalid_argument("broadcast root " + std::to_string(root) + " outside the world");
  Run("broadcast", [&]() {
    for (auto& t : tensors) {
      std::vector<at::Tensor> one{t.to(device()).contiguous()};
      c10d::BroadcastOptions bo;
      bo.rootRank = root;
      bo.timeout = o_.timeout;
      WaitWork(pg_->broadcast(one, bo), o_.timeout);
      t.copy_(one[0]);
    }
  });
}

std::vector<std::string> Group::AllGatherObject(const std::string& payload) {
  return Run("allGatherObject", [&]() {
    auto dev = device();
    const int W = o_.world_size;
    c10d::AllgatherOptions go;
    go.timeout = o_.timeout;
    std::vector<at::Tensor> in{at::full({1}, static_cast<int64_t>(payload.size()), at::TensorOptions().dtype(at::kLong).device(dev))};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < W; ++r) out[0].push_back(at::empty({1}, in[0].options()));
    WaitWork(pg_->allgather(out, in, go), o_.timeout);
    int64_t mx = 1;
    std::vector<int64_t> sizes(W);
    for (int r = 0; r < W; ++r) {
      sizes[r] = out[0][r].cpu().item<int64_t>();
      mx = std::max(mx, sizes[r]);
    }
    at::Tensor buf = at::zeros({mx}, at::kByte);
    if (!payload.empty()) std::memcpy(buf.data_ptr<uint8_t>(), payload.data(), payload.size());
    std::vector<at::Tensor> in2{buf.to(dev)};
    std::vector<std::vector<at::Tensor>> out2(1);
    for (int r = 0; r < W; ++r) out2[0].push_back(at::empty({mx}, in2[0].options()));
    WaitWork(pg_->allgather(out2, in2, go), o_.timeout);
    std::vector<std::string> res;
    for (int r = 0; r < W; ++r) {
      at::Tensor c = out2[0][r].cpu();
      res.emplace_back(reinterpret_cast<const char*>(c.data_ptr<uint8_t>()), static_cast<size_t>(sizes[r]));
    }
    return res;
  });
}

void Group::Barrier() {
  Run("barrier", [&]() {
    // One-element all-reduce: same semantics on Gloo and NCCL (NCCL's barrier needs device ids).
    c10d::AllreduceOptions ao;
    ao.timeout = o_.timeout;
    std::vector<at::Tensor> one{at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device()))};
    WaitWork(pg_->allreduce(one, ao), o_.timeout);
    (void)one[0].cpu();
  });
}

void Group::Destroy() {
  if (destroyed_.exchange(true)) return;
  stop_beat_ = true;
  if (beat_.joinable()) beat_.join();
  std::lock_guard<std::mutex> lk(mu_);
  // NCCL: release the communicators explicitly (its destructor warns otherwise): shutdown after
  // clean work, abort after a failed collective (a shutdown could wait on a dead peer).
  try {
    if (pg_) {
      if (failed_)
        pg_->abort();
      else
        pg_->shutdown();
    }
  } catch (...) {
  }
  pg_.reset();
  store_.reset();
}
#endif  // PG_WITH_DIST

}  // namespace dist
}  // namespace pg
