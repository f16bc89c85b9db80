#include "generate/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/errors.h"

#ifdef PG_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace pg {

namespace {
using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

DecodeEngine::DecodeEngine(std::shared_ptr<DecoderModel> model, int64_t max_rows, int64_t capacity, int64_t pad_id, AdapterSel adapter,
                           int64_t max_prefill_tokens, bool cuda_graphs, int static_decode)
    : model_(std::move(model)),
      max_rows_(max_rows),
      capacity_(capacity),
      pad_id_(pad_id),
      max_prefill_tokens_(max_prefill_tokens),
      adapter_(std::move(adapter)) {
  const DecoderConfig& c = model_->config();
  if (max_rows_ < 1) throw ArgError("maxRows must be an integer >= 1, got " + std::to_string(max_rows_));
  if (capacity_ < 2) throw ArgError("capacity must be an integer >= 2, got " + std::to_string(capacity_));
  if (c.max_position_embeddings > 0 && capacity_ > c.max_position_embeddings)
    throw ArgError("capacity " + std::to_string(capacity_) +
                   " exceeds the model context (max_position_embeddings = " + std::to_string(c.max_position_embeddings) + ")");
  if (pad_id_ < 0 || pad_id_ >= c.vocab_size) throw ArgError("padId is outside [0, vocab_size)");
  if (max_prefill_tokens_ < 1) throw ArgError("maxPrefillTokens must be an integer >= 1");
  static const bool env_no_graphs = [] {
    const char* e = std::getenv("PAPERGYM_NO_CUDA_GRAPHS");
    return e != nullptr && *e != '\0' && std::string(e) != "0";
  }();
  graphs_ = cuda_graphs && !env_no_graphs && CudaGraphsCompiled() && model_->device().is_cuda();
  static_ = static_decode < 0 ? graphs_ : static_decode == 1;
  if (!static_) graphs_ = false;
}

void DecodeEngine::Validate(const EngineRowSpec& s, const std::string& what) const {
  const DecoderConfig& c = model_->config();
  if (s.prompt.empty()) throw ArgError(what + ".prompt is empty (a prompt needs at least one token)");
  for (size_t j = 0; j < s.prompt.size(); ++j)
    if (s.prompt[j] < 0 || s.prompt[j] >= c.vocab_size)
      throw ArgError(what + ".prompt[" + std::to_string(j) + "] = " + std::to_string(s.prompt[j]) + " is outside [0, vocab_size)");
  if (s.max_new_tokens < 1) throw ArgError(what + ".maxNewTokens must be an integer >= 1");
  const int64_t len = static_cast<int64_t>(s.prompt.size());
  if (len + s.max_new_tokens > capacity_)
    throw ArgError(what + ": prompt of " + std::to_string(len) + " tokens + maxNewTokens " + std::to_string(s.max_new_tokens) +
                   " exceeds the engine capacity of " + std::to_string(capacity_) + " tokens");
  ValidateSampling(s.sampling, what);
  for (size_t j = 0; j < s.stop_ids.size(); ++j)
    if (s.stop_ids[j] < 0 || s.stop_ids[j] >= c.vocab_size) throw ArgError(what + ".stopIds[" + std::to_string(j) + "] is outside [0, vocab_size)");
  if (s.top_logprobs < -1 || s.top_logprobs > 20) throw ArgError(what + ".topLogprobs must be an integer in [0, 20] (or -1 = off)");
}

void DecodeEngine::Add(EngineRowSpec s) {
  std::lock_guard<std::mutex> lk(mu_);
  if (ids_.count(s.id)) throw ArgError("row.id " + std::to_string(s.id) + " is already queued or decoding (ids must be unique among live rows)");
  ids_.insert(s.id);
  pending_.push_back(std::move(s));
}

void DecodeEngine::Cancel(int64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!ids_.erase(id)) return;  // unknown, finished or already cancelled: nothing to do
  const auto q = std::find_if(pending_.begin(), pending_.end(), [&](const EngineRowSpec& r) { return r.id == id; });
  if (q != pending_.end())
    pending_.erase(q);  // queued: gone now
  else
    cancelled_.push_back(id);  // live: leaves at the start of the next step
}

int64_t DecodeEngine::Waiting() {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<int64_t>(pending_.size());
}

void DecodeEngine::Release() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.clear();
    cancelled_.clear();
    ids_.clear();
  }
  rows_.clear();
  graph_.clear();
  graph_out_.clear();
  eager_runs_.clear();
  cache_ = KVCache();
  mask_ = at::Tensor();
  ids_buf_ = pos_buf_ = slot_buf_ = at::Tensor();
  L_ = 0;
}

void DecodeEngine::MoveRow(int64_t from, int64_t to) {
  const int64_t s = rows_[from].start, span = L_ - s;
  if (span > 0) {
    for (auto& t : cache_.k) t.select(0, to).narrow(1, s, span).copy_(t.select(0, from).narrow(1, s, span));
    for (auto& t : cache_.v) t.select(0, to).narrow(1, s, span).copy_(t.select(0, from).narrow(1, s, span));
  }
  mask_.select(0, to).copy_(mask_.select(0, from));
}

void DecodeEngine::Shift(int64_t delta) {
  const int64_t A = static_cast<int64_t>(rows_.size());
  if (A == 0 || delta == 0) return;
  int64_t s_min = L_;
  for (const Row& r : rows_) s_min = std::min(s_min, r.start);
  const int64_t span = L_ - s_min;
  auto move = [&](at::Tensor& t) {
    at::Tensor live = t.narrow(0, 0, A);
    at::Tensor tmp = live.narrow(2, s_min, span).clone();
    live.narrow(2, s_min + delta, span).copy_(tmp);
  };
  for (auto& t : cache_.k) move(t);
  for (auto& t : cache_.v) move(t);
  at::Tensor m = mask_.narrow(0, 0, A);
  at::Tensor tmp = m.narrow(1, s_min, span).clone();
  m.zero_();
  m.narrow(1, s_min + delta, span).copy_(tmp);
  for (Row& r : rows_) r.start += delta;
  L_ += delta;
}

EngineStepResult DecodeEngine::Step() {
  try {
    return StepImpl();
  } catch (...) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      pending_.clear();
      cancelled_.clear();
      ids_.clear();
    }
    rows_.clear();
    L_ = 0;
    graph_.clear();  // a failed capture / replay: recapture from scratch next time
    graph_out_.clear();
    eager_runs_.clear();
#ifdef PG_WITH_CUDA
    if (model_->device().is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
    throw;
  }
}

void DecodeEngine::RemoveRow(int64_t b) {
  const int64_t last = static_cast<int64_t>(rows_.size()) - 1;
  if (b != last) {
    MoveRow(last, b);
    rows_[b] = std::move(rows_[last]);
  }
  rows_.pop_back();
}

EngineStepResult DecodeEngine::StepImpl() {
  at::NoGradGuard ng;
  EngineStepResult res;
  // 1. Cancellations of live rows (Cancel drops queued rows itself): they leave now.
  DropCancelled();
  EnsureBuffers();
  // Graph capture and replay need a non-default stream: the whole step runs on the side stream.
  SideStreamScope side(graphs_ ? model_->device() : at::Device(at::kCPU));
  // 2. Admission.
  const int64_t A = static_cast<int64_t>(rows_.size());
  const bool decode = A > 0;
  int64_t pmax = 0, delta = 0;
  std::vector<EngineRowSpec> join = Admit(A, &pmax, &delta, res);
  const int64_t J = static_cast<int64_t>(join.size());
  if (A == 0 && J == 0) return res;
  if (delta != 0) {
    Shift(delta);
    ++res.shifts;
  }
  // 3. Decode forward of the live rows (their last sampled tokens) at slot L.
  const auto t0 = Clock::now();
  at::Tensor logits_old = decode ? DecodeLive(A, res) : at::Tensor();
  const auto t1 = Clock::now();
  // 4. Prefill of the joining rows (left-padded to their longest prompt).
  at::Tensor logits_new = J > 0 ? PrefillJoining(join, pmax, A, decode, res) : at::Tensor();
  const auto t2 = Clock::now();
  // 5. One token per row: per-row sampling settings and generators, one sampler call.
  at::Tensor logits = !logits_old.defined() ? logits_new : !logits_new.defined() ? logits_old : at::cat({logits_old, logits_new}, 0);
  Sampled s = SampleRows(logits);
  const auto t3 = Clock::now();
  // 6. Bookkeeping: record, finish, and remove finished rows (their slots are reused at once).
  Record(s, res);
  res.decode_ms = Ms(t0, t1);
  res.prefill_ms = Ms(t1, t2);
  res.sample_ms = Ms(t2, t3);
  return res;
}

void DecodeEngine::DropCancelled() {
  std::vector<int64_t> canc;
  {
    std::lock_guard<std::mutex> lk(mu_);
    canc.swap(cancelled_);
  }
  if (!canc.empty())
    for (int64_t b = static_cast<int64_t>(rows_.size()) - 1; b >= 0; --b)
      if (std::find(canc.begin(), canc.end(), rows_[b].spec.id) != canc.end()) RemoveRow(b);
  if (rows_.empty()) L_ = 0;
}

void DecodeEngine::EnsureBuffers() {
  if (!cache_.k.empty()) return;
  const at::Device dev = model_->device();
  auto lopt = at::TensorOptions().dtype(at::kLong);
  cache_ = model_->NewCache(max_rows_, capacity_);
  mask_ = at::zeros({max_rows_, capacity_}, at::TensorOptions().dtype(at::kBool).device(dev));
  if (static_) {
    ids_buf_ = at::full({max_rows_, 1}, pad_id_, lopt.device(dev));
    pos_buf_ = at::zeros({max_rows_}, lopt.device(dev));
    slot_buf_ = at::zeros({1}, lopt.device(dev));
  }
}

// Admission (FIFO): rows join while the batch has room, the prefill stays within its token budget
// and the KV slots fit (possibly after moving the live history, see the class doc).
std::vector<EngineRowSpec> DecodeEngine::Admit(int64_t A, int64_t* pmax_out, int64_t* delta_out, EngineStepResult& res) {
  const bool decode = A > 0;
  std::vector<EngineRowSpec> join;
  int64_t pmax = 0, delta = 0;
  std::lock_guard<std::mutex> lk(mu_);
  int64_t s_min = L_, rem_max = 0;
  for (const Row& r : rows_) {
    s_min = std::min(s_min, r.start);
    rem_max = std::max(rem_max, r.spec.max_new_tokens - r.generated - 1);
  }
  size_t take = 0;
  int64_t need = rem_max;  // largest number of decode writes after this step
  while (take < pending_.size() && A + static_cast<int64_t>(take) < max_rows_) {
    const EngineRowSpec& s = pending_[take];
    const int64_t pm = std::max<int64_t>(pmax, static_cast<int64_t>(s.prompt.size()));
    if (take > 0 && pm * static_cast<int64_t>(take + 1) > max_prefill_tokens_) break;
    const int64_t nd = std::max(need, s.max_new_tokens - 1);
    int64_t d = 0;
    if (!decode && pm + nd > capacity_) break;
    if (decode) {
      const int64_t lo = std::max(-s_min, pm - L_ - 1), hi = capacity_ - 1 - L_ - nd;
      if (lo > hi) break;
      d = lo > 0 ? lo : (hi < 0 ? hi : 0);
    }
    pmax = pm;
    need = nd;
    delta = d;
    ++take;
  }
  join.assign(std::make_move_iterator(pending_.begin()), std::make_move_iterator(pending_.begin() + static_cast<std::ptrdiff_t>(take)));
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(take));
  res.waiting = static_cast<int64_t>(pending_.size());
  *pmax_out = pmax;
  *delta_out = delta;
  return join;
}

at::Tensor DecodeEngine::DecodeLive(int64_t A, EngineStepResult& res) {
  const at::Device dev = model_->device();
  auto lopt = at::TensorOptions().dtype(at::kLong);
  at::Tensor logits_old;
  std::vector<int64_t> ids(A), pos(A);
  for (int64_t b = 0; b < A; ++b) {
    ids[b] = rows_[b].last;
    pos[b] = rows_[b].next_pos;
  }
  if (static_) {
    // DecodeStatic over a bucket of B >= A rows (rows A..B-1 decode pad_id and are ignored).
    int64_t B = 1;
    while (B < A) B <<= 1;
    B = std::min(B, max_rows_);
    ids_buf_.narrow(0, 0, A).copy_(at::tensor(ids, lopt).view({A, 1}));
    if (B > A) ids_buf_.narrow(0, A, B - A).fill_(pad_id_);
    pos_buf_.narrow(0, 0, A).copy_(at::tensor(pos, lopt));
    if (B > A) pos_buf_.narrow(0, A, B - A).zero_();
    slot_buf_.fill_(L_);
    auto step_fn = [this, B]() {
      KVCache vb;
      vb.len = 0;
      vb.capacity = capacity_;
      for (auto& t : cache_.k) vb.k.push_back(t.narrow(0, 0, B));
      for (auto& t : cache_.v) vb.v.push_back(t.narrow(0, 0, B));
      return model_->DecodeStatic(ids_buf_.narrow(0, 0, B), pos_buf_.narrow(0, 0, B), slot_buf_, mask_.narrow(0, 0, B), adapter_, vb);
    };
    at::Tensor out;
    constexpr int64_t kWarmup = 2;  // eager runs of a bucket before its capture (lazy inits)
    if (graphs_ && eager_runs_[B] >= kWarmup) {
      auto& g = graph_[B];
      if (!g) {
        g = std::make_unique<StepGraph>();
        graph_out_[B] = g->Capture(step_fn);
        ++res.graph_captures;
      }
      g->Replay();
      out = graph_out_[B];
    } else {
      out = step_fn();
      ++eager_runs_[B];
    }
    logits_old = out.narrow(0, 0, A);
    res.batch_rows = B;
  } else {
    mask_.narrow(0, 0, A).select(1, L_).fill_(true);
    KVCache view;
    view.len = L_;
    view.capacity = capacity_;
    for (auto& t : cache_.k) view.k.push_back(t.narrow(0, 0, A));
    for (auto& t : cache_.v) view.v.push_back(t.narrow(0, 0, A));
    at::Tensor h = model_->Forward(at::tensor(ids, lopt).view({A, 1}).to(dev), mask_.narrow(0, 0, A).narrow(1, 0, L_ + 1),
                                   at::tensor(pos, lopt).view({A, 1}).to(dev), adapter_, &view);
    logits_old = model_->Logits(h.select(1, 0));  // [A, V]
    res.batch_rows = A;
  }
  ++L_;
  for (Row& r : rows_) ++r.next_pos;
  return logits_old;
}

at::Tensor DecodeEngine::PrefillJoining(std::vector<EngineRowSpec>& join, int64_t pmax, int64_t A, bool decode, EngineStepResult& res) {
  const at::Device dev = model_->device();
  auto lopt = at::TensorOptions().dtype(at::kLong);
  const int64_t J = static_cast<int64_t>(join.size());
  if (!decode) L_ = pmax;
  const int64_t E = L_;
  at::Tensor ids = at::full({J, pmax}, pad_id_, lopt);
  at::Tensor mask = at::zeros({J, pmax}, lopt);
  {
    auto ia = ids.accessor<int64_t, 2>();
    auto ma = mask.accessor<int64_t, 2>();
    for (int64_t j = 0; j < J; ++j) {
      const auto& p = join[j].prompt;
      const int64_t off = pmax - static_cast<int64_t>(p.size());
      for (size_t i = 0; i < p.size(); ++i) {
        ia[j][off + static_cast<int64_t>(i)] = p[i];
        ma[j][off + static_cast<int64_t>(i)] = 1;
      }
    }
  }
  at::Tensor pos = (mask.cumsum(1) - 1).clamp_min(0);
  KVCache pre = model_->NewCache(J, pmax);
  at::Tensor h = model_->Forward(ids.to(dev), mask.to(dev), pos.to(dev), adapter_, &pre);
  at::Tensor logits_new = model_->Logits(h.select(1, pmax - 1));  // [J, V]
  h = at::Tensor();
  for (size_t l = 0; l < cache_.k.size(); ++l) {
    cache_.k[l].narrow(0, A, J).narrow(2, E - pmax, pmax).copy_(pre.k[l]);
    cache_.v[l].narrow(0, A, J).narrow(2, E - pmax, pmax).copy_(pre.v[l]);
  }
  at::Tensor m = mask_.narrow(0, A, J);
  m.zero_();
  m.narrow(1, E - pmax, pmax).copy_(mask.to(dev));
  for (int64_t j = 0; j < J; ++j) {
    Row r;
    const int64_t len = static_cast<int64_t>(join[j].prompt.size());
    r.gen = at::make_generator<at::CPUGeneratorImpl>(join[j].seed);
    r.next_pos = len;
    r.start = E - len;
    r.spec = std::move(join[j]);
    rows_.push_back(std::move(r));
    res.prefill_tokens += pmax;
  }
  res.joined = J;
  return logits_new;
}

DecodeEngine::Sampled DecodeEngine::SampleRows(const at::Tensor& logits) {
  const at::Device dev = model_->device();
  const int64_t V = model_->config().vocab_size;
  auto lopt = at::TensorOptions().dtype(at::kLong);
  const int64_t R = static_cast<int64_t>(rows_.size());
  Sampled out;
  std::vector<SamplingOptions> so(R);
  at::Tensor u = at::empty({R}, at::TensorOptions().dtype(at::kFloat));
  float* up = u.data_ptr<float>();
  int64_t kmax = 0;
  for (int64_t b = 0; b < R; ++b) {
    so[b] = rows_[b].spec.sampling;
    up[b] = at::rand({1}, rows_[b].gen, at::TensorOptions().dtype(at::kFloat)).item<float>();
    if (rows_[b].spec.top_logprobs >= 0) {
      out.lp_rows.push_back(b);
      kmax = std::max(kmax, rows_[b].spec.top_logprobs);
    }
  }
  RowSampling rs = RowSampling::Make(so, V, dev);
  auto [tok, lp] = SampleTokensRows(logits, rs, u.to(dev));
  out.tok = tok.to(at::kCPU).contiguous();
  out.lp = lp.to(at::kFloat).to(at::kCPU).contiguous();
  if (!out.lp_rows.empty()) {
    at::Tensor sel = at::tensor(out.lp_rows, lopt).to(dev);
    at::Tensor lr = logits.index_select(0, sel).to(at::kFloat).log_softmax(-1);  // raw model distribution
    out.raw = lr.gather(1, tok.index_select(0, sel).unsqueeze(1)).squeeze(1).to(at::kCPU).contiguous();
    if (kmax > 0) {
      auto tk = at::topk(lr, std::min<int64_t>(kmax, V), -1, true, true);
      out.top_v = std::get<0>(tk).to(at::kCPU).contiguous();
      out.top_i = std::get<1>(tk).to(at::kCPU).contiguous();
    }
  }
  return out;
}

void DecodeEngine::Record(const Sampled& s, EngineStepResult& res) {
  const int64_t R = static_cast<int64_t>(rows_.size());
  const std::vector<int64_t>& lp_rows = s.lp_rows;
  const at::Tensor &raw_h = s.raw, &top_v = s.top_v, &top_i = s.top_i;
  const int64_t* tp = s.tok.data_ptr<int64_t>();
  const float* lpp = s.lp.data_ptr<float>();
  res.tokens.resize(R);
  size_t li = 0;
  for (int64_t b = 0; b < R; ++b) {
    Row& r = rows_[b];
    EngineToken& et = res.tokens[b];
    et.id = r.spec.id;
    et.token = tp[b];
    et.logprob = lpp[b];
    r.last = tp[b];
    ++r.generated;
    if (r.generated == 1) et.prompt_tokens = static_cast<int64_t>(r.spec.prompt.size());
    if (li < lp_rows.size() && lp_rows[li] == b) {
      et.raw_logprob = raw_h.data_ptr<float>()[li];
      const int64_t k = r.spec.top_logprobs;
      if (k > 0) {
        const float* tv = top_v.data_ptr<float>() + li * top_v.size(1);
        const int64_t* ti = top_i.data_ptr<int64_t>() + li * top_i.size(1);
        et.top_ids.assign(ti, ti + std::min<int64_t>(k, top_i.size(1)));
        et.top_logprobs.assign(tv, tv + std::min<int64_t>(k, top_v.size(1)));
      }
      ++li;
    }
    if (std::find(r.spec.stop_ids.begin(), r.spec.stop_ids.end(), et.token) != r.spec.stop_ids.end())
      et.finish = 1;
    else if (r.generated >= r.spec.max_new_tokens)
      et.finish = 2;
    r.done = et.finish != 0;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (int64_t b = R - 1; b >= 0; --b)
      if (rows_[b].done) {
        ids_.erase(rows_[b].spec.id);  // its id may be used again
        RemoveRow(b);
      }
  }
  if (rows_.empty()) L_ = 0;
  res.active = static_cast<int64_t>(rows_.size());
}

}  // namespace pg
