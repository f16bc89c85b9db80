#include "generate/generate.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/errors.h"
#include "generate/cuda_graph.h"
#include "lora/lora.h"
#include "model/fused_ops.h"

#ifdef PG_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace pg {

void ValidateRequest(const DecoderModel& m, const GenerateRequest& r) {
  const DecoderConfig& c = m.config();
  if (r.prompts.empty()) throw ArgError("prompts must be a non-empty array of token-id arrays");
  if (r.n < 1) throw ArgError("n must be an integer >= 1, got " + std::to_string(r.n));
  if (r.n > (int64_t{1} << 40) / static_cast<int64_t>(r.prompts.size()))
    throw ArgError("n × prompts.length must be at most 2^40 (got n = " + std::to_string(r.n) + ")");
  if (r.max_new_tokens < 1) throw ArgError("maxNewTokens must be an integer >= 1, got " + std::to_string(r.max_new_tokens));
  ValidateSampling(r.sampling, "options");
  if (!(r.compact_fraction > 0 && r.compact_fraction <= 1)) throw ArgError("compactFraction must be in (0, 1]");
  if (r.sync_every < 1) throw ArgError("syncEvery must be an integer >= 1, got " + std::to_string(r.sync_every));
  const int64_t ctx = c.max_position_embeddings;
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    const auto& p = r.prompts[i];
    const std::string name = "prompts[" + std::to_string(i) + "]";
    if (p.empty()) throw ArgError(name + " is empty (a prompt needs at least one token)");
    const int64_t len = static_cast<int64_t>(p.size());
    if (ctx > 0 && len > ctx)
      throw ArgError(name + " has " + std::to_string(len) + " tokens, longer than the model context (max_position_embeddings = " + std::to_string(ctx) + ")");
    if (ctx > 0 && r.row_max_new_tokens.empty() && len + r.max_new_tokens > ctx)
      throw ArgError(name + " has " + std::to_string(len) + " tokens; with maxNewTokens = " + std::to_string(r.max_new_tokens) + " it needs " +
                     std::to_string(len + r.max_new_tokens) + " positions, more than the model context (" + std::to_string(ctx) + ")");
    for (size_t j = 0; j < p.size(); ++j)
      if (p[j] < 0 || p[j] >= c.vocab_size)
        throw ArgError(name + "[" + std::to_string(j) + "] = " + std::to_string(p[j]) + " is outside [0, vocab_size = " + std::to_string(c.vocab_size) + ")");
  }
  for (size_t i = 0; i < r.stop_ids.size(); ++i)
    if (r.stop_ids[i] < 0 || r.stop_ids[i] >= c.vocab_size)
      throw ArgError("stopIds[" + std::to_string(i) + "] = " + std::to_string(r.stop_ids[i]) + " is outside [0, vocab_size)");
  if (r.pad_id < 0 || r.pad_id >= c.vocab_size) throw ArgError("padId is outside [0, vocab_size)");
  const size_t P = r.prompts.size();
  auto sized = [&](size_t n, const char* what) {
    if (n != 0 && n != P)
      throw ArgError(std::string("promptOptions: ") + what + " must be given for every prompt (" + std::to_string(P) + "), got " + std::to_string(n));
  };
  sized(r.row_sampling.size(), "sampling");
  sized(r.row_seeds.size(), "seed");
  sized(r.row_max_new_tokens.size(), "maxNewTokens");
  sized(r.row_stop_ids.size(), "stopIds");
  for (size_t i = 0; i < P; ++i) {
    const std::string name = "promptOptions[" + std::to_string(i) + "]";
    if (!r.row_sampling.empty()) ValidateSampling(r.row_sampling[i], name);
    if (!r.row_seeds.empty() && r.row_seeds[i] < -1) throw ArgError(name + ".seed must be an integer >= 0");
    if (!r.row_max_new_tokens.empty()) {
      const int64_t t = r.row_max_new_tokens[i];
      if (t < 1) throw ArgError(name + ".maxNewTokens must be an integer >= 1, got " + std::to_string(t));
      const int64_t len = static_cast<int64_t>(r.prompts[i].size());
      if (ctx > 0 && len + t > ctx)
        throw ArgError("prompts[" + std::to_string(i) + "] has " + std::to_string(len) + " tokens; with " + name + ".maxNewTokens = " + std::to_string(t) +
                       " it needs " + std::to_string(len + t) + " positions, more than the model context (" + std::to_string(ctx) + ")");
    }
    if (!r.row_stop_ids.empty())
      for (size_t j = 0; j < r.row_stop_ids[i].size(); ++j)
        if (r.row_stop_ids[i][j] < 0 || r.row_stop_ids[i][j] >= c.vocab_size)
          throw ArgError(name + ".stopIds[" + std::to_string(j) + "] is outside [0, vocab_size)");
  }
}

uint64_t RowSeed(uint64_t seed, int64_t sample_index) {
  if (sample_index == 0) return seed;
  uint64_t z = seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(sample_index);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return (z ^ (z >> 31)) & ((1ULL << 63) - 1);
}

namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Keeps only the batch rows `keep` (ascending) of every cache tensor, in place: the kept rows move
// to the front and the tensors are narrowed on dim 0 (no new cache allocation; copies only the
// filled positions).
void CompactCache(KVCache& cache, const at::Tensor& keep) {
  const int64_t k = keep.size(0), len = cache.len;
  auto compact = [&](at::Tensor& t) {
    at::Tensor rows = t.narrow(2, 0, len).index_select(0, keep);
    t = t.narrow(0, 0, k);
    t.narrow(2, 0, len).copy_(rows);
  };
  for (auto& t : cache.k) compact(t);
  for (auto& t : cache.v) compact(t);
}

// Repeats every row `n` times (row i -> rows i*n .. i*n+n-1) into fresh tensors of the same
// capacity; copies only the filled positions.
void ExpandCache(KVCache& cache, int64_t n) {
  if (n == 1) return;
  const int64_t len = cache.len;
  auto expand = [&](at::Tensor& t) {
    auto sz = t.sizes().vec();
    sz[0] *= n;
    at::Tensor out = at::empty(sz, t.options());
    out.narrow(2, 0, len).copy_(t.narrow(2, 0, len).repeat_interleave(n, 0));
    t = out;
  };
  for (auto& t : cache.k) expand(t);
  for (auto& t : cache.v) expand(t);
}

// Per-row settings of one call (GenerateRequest::row_*), expanded to the N = P * n rows.
struct RowPlan {
  std::vector<SamplingOptions> sampling;           // [N]
  std::vector<int64_t> max_new;                    // [N]
  std::vector<const std::vector<int64_t>*> stops;  // [N]
  std::vector<at::Generator> gens;                 // [N] own generators, or empty (call's)
  int64_t T = 0;                                   // largest max_new
  bool Stop(int64_t g, int64_t t) const { return std::find(stops[g]->begin(), stops[g]->end(), t) != stops[g]->end(); }
};

RowPlan MakePlan(const GenerateRequest& r, int64_t n) {
  const int64_t P = static_cast<int64_t>(r.prompts.size()), N = P * n;
  RowPlan p;
  p.sampling.resize(N);
  p.max_new.resize(N);
  p.stops.resize(N);
  for (int64_t g = 0; g < N; ++g) {
    const int64_t i = g / n;
    p.sampling[g] = r.row_sampling.empty() ? r.sampling : r.row_sampling[i];
    p.max_new[g] = r.row_max_new_tokens.empty() ? r.max_new_tokens : r.row_max_new_tokens[i];
    p.stops[g] = r.row_stop_ids.empty() ? &r.stop_ids : &r.row_stop_ids[i];
    p.T = std::max(p.T, p.max_new[g]);
  }
  if (!r.row_seeds.empty()) {
    p.gens.reserve(N);
    for (int64_t g = 0; g < N; ++g) {
      const int64_t s = r.row_seeds[g / n];
      // a prompt without a seed draws from a generator seeded from the call's seed and its row
      const uint64_t base = s >= 0 ? static_cast<uint64_t>(s) : RowSeed(r.seed ^ 0x5bd1e995ULL, g + 1);
      p.gens.push_back(at::make_generator<at::CPUGeneratorImpl>(RowSeed(base, g % n)));
    }
  }
  return p;
}

// Smallest power of two >= n (the batch buckets of the graph path: 1, 2, 4, ..., 64, 128, ...).
int64_t Bucket(int64_t n) {
  int64_t b = 1;
  while (b < n) b <<= 1;
  return b;
}

// The left-padded prompt batch of one call, on the model device: ids [P, lmax], the attention
// mask over the whole cache [P, lmax + T] (int64; prompt slots 1, the rest 0), position ids
// [P, lmax] and the prompt lengths.
struct PromptBatch {
  at::Tensor ids, mask, pos;
  std::vector<int64_t> plen;
  int64_t lmax = 0;
};

// The prefill of both decode paths: one Forward of the left-padded prompts into `cache` (P rows);
// returns the next-token logits [P, V] float32.
at::Tensor PrefillPrompts(DecoderModel& m, const GenerateRequest& r, const PromptBatch& pb, KVCache& cache) {
  at::Tensor h = m.Forward(pb.ids, pb.mask.narrow(1, 0, pb.lmax), pb.pos, r.adapter, &cache);
  return m.Logits(h.select(1, pb.lmax - 1));
}

// The uniforms of the whole call, [T, N] float32 on the host: one per global row per step, drawn
// whether or not the row is still running, so a row's samples depend only on the seed and its own
// logits, not on batch composition. From the call's generator, row t is exactly what the t-th draw
// of N would return (the CPU generator fills a contiguous tensor element by element in order); with
// per-row generators column g is row g's T draws in order.
at::Tensor DrawUniforms(const GenerateRequest& r, const RowPlan& plan, int64_t N) {
  auto fopt = at::TensorOptions().dtype(at::kFloat);
  if (plan.gens.empty()) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(r.seed);
    return at::rand({plan.T, N}, gen, fopt);
  }
  at::Tensor u = at::empty({plan.T, N}, fopt);
  for (int64_t g = 0; g < N; ++g) u.select(1, g).copy_(at::rand({plan.T}, plan.gens[g], fopt));
  return u;
}

// What differs between the two decode paths, behind the one loop of DecodeLoop: how the prefill
// lands in the decode cache, how token t is produced on the device, how sampled tokens come back
// to the host, and what happens to rows that finished.
class DecodePath {
 public:
  DecodePath(DecoderModel& m, const GenerateRequest& r, const PromptBatch& pb, const RowPlan& plan)
      : m_(m), r_(r), pb_(pb), plan_(plan), N_(pb.ids.size(0) * r.n) {}
  virtual ~DecodePath() = default;
  // Prefill of all rows; returns the next-token logits of the N rows [N, V] (the caller syncs on
  // them for an honest prefill time).
  virtual at::Tensor Prefill() = 0;
  // Set-up after the prefill: the uniforms u [T, N] (host) and the result fields of the path.
  virtual void Start(const at::Tensor& u, GenerateResult& res) = 0;
  // Samples token t of every row in the batch on the device: t = 0 from the prefill logits, t > 0
  // after one decode forward of token t - 1 (a step). No host sync on the static path.
  virtual void Produce(int64_t t) = 0;
  // Host copies of tokens [from, from + cnt): ids [cnt, cols] int64 and logprobs [cnt, cols]
  // float32; column j belongs to global row Row(j).
  virtual std::pair<at::Tensor, at::Tensor> Read(int64_t from, int64_t cnt) = 0;
  virtual int64_t Row(int64_t col) const = 0;
  // After the host recorded the tokens read so far; `done` [N] marks finished rows.
  virtual void Retire(const std::vector<char>& done) { (void)done; }

 protected:
  DecoderModel& m_;
  const GenerateRequest& r_;
  const PromptBatch& pb_;
  const RowPlan& plan_;
  const int64_t N_;    // rows: prompts * n
  at::Tensor logits_;  // next-token logits of the batch [rows, V] float32
  RowSampling rs_;     // sampling settings of the batch rows
};

// The dynamic path: Forward of one token per row over a cache grown by one slot per step, the
// sampled tokens read back after every step, finished rows compacted out of the batch once they
// are at least compact_fraction of it.
class DynamicPath final : public DecodePath {
 public:
  using DecodePath::DecodePath;

  at::Tensor Prefill() override {
    const int64_t P = pb_.ids.size(0), n = r_.n;
    auto lopt = at::TensorOptions().dtype(at::kLong);
    cache_ = m_.NewCache(P, pb_.lmax + plan_.T);
    logits_ = PrefillPrompts(m_, r_, pb_, cache_);  // [P, V] fp32
    mask_ = pb_.mask;
    if (n > 1) {
      ExpandCache(cache_, n);
      mask_ = mask_.repeat_interleave(n, 0);
      logits_ = logits_.repeat_interleave(n, 0);
    }
    std::vector<int64_t> next_pos_host(N_);
    for (int64_t g = 0; g < N_; ++g) next_pos_host[g] = pb_.plen[g / n];
    next_pos_ = at::tensor(next_pos_host, lopt).to(m_.device());  // [A] position of the next input token
    return logits_;
  }

  void Start(const at::Tensor& u, GenerateResult& res) override {
    u_ = u;
    active_.resize(N_);
    for (int64_t g = 0; g < N_; ++g) active_[g] = g;
    rs_ = RowSampling::Make(plan_.sampling, logits_.size(1), m_.device());  // of the active rows
    res.batch_rows = N_;
  }

  void Produce(int64_t t) override {
    if (t > 0) {
      const int64_t L = cache_.len;
      mask_.narrow(1, L, 1).fill_(1);
      at::Tensor hh = m_.Forward(tok_.unsqueeze(1), mask_.narrow(1, 0, L + 1), next_pos_.unsqueeze(1), r_.adapter, &cache_);
      next_pos_.add_(1);
      logits_ = m_.Logits(hh.select(1, 0));
    }
    const int64_t A = static_cast<int64_t>(active_.size());
    at::Tensor u = u_.select(0, t);
    if (A != N_) u = u.index_select(0, at::tensor(active_, at::TensorOptions().dtype(at::kLong)));
    std::tie(tok_, lp_) = SampleTokensRows(logits_, rs_, u.to(m_.device()));
  }

  std::pair<at::Tensor, at::Tensor> Read(int64_t /*from*/, int64_t cnt) override {
    TORCH_CHECK(cnt == 1, "internal: the dynamic decode path reads every token");
    return {tok_.to(at::kCPU).view({1, -1}).contiguous(), lp_.to(at::kFloat).to(at::kCPU).view({1, -1}).contiguous()};
  }
  int64_t Row(int64_t col) const override { return active_[col]; }

  void Retire(const std::vector<char>& done) override {
    const int64_t A = static_cast<int64_t>(active_.size());
    int64_t finished = 0;
    for (int64_t b = 0; b < A; ++b) finished += done[active_[b]] ? 1 : 0;
    if (finished == 0 || finished < std::max<int64_t>(1, static_cast<int64_t>(std::ceil(r_.compact_fraction * A)))) return;
    std::vector<int64_t> keep_b, keep_g;
    for (int64_t b = 0; b < A; ++b)
      if (!done[active_[b]]) {
        keep_b.push_back(b);
        keep_g.push_back(active_[b]);
      }
    const at::Device dev = m_.device();
    at::Tensor keep = at::tensor(keep_b, at::TensorOptions().dtype(at::kLong)).to(dev);
    CompactCache(cache_, keep);
    mask_ = mask_.index_select(0, keep);
    next_pos_ = next_pos_.index_select(0, keep);
    tok_ = tok_.index_select(0, keep);
    rs_ = rs_.Select(keep_b, logits_.size(1), dev);
    active_ = std::move(keep_g);
    ++compactions_;
  }
  int64_t compactions() const { return compactions_; }

 private:
  KVCache cache_;
  at::Tensor mask_, next_pos_, u_, tok_, lp_;
  std::vector<int64_t> active_;  // global row of each batch row
  int64_t compactions_ = 0;
};

// The static path (see generate.h): prefill into a P-row cache of lmax slots, copy its rows (each
// repeated n times) into a static cache of Bp >= N rows and lmax + max_new_tokens slots, then
// decode with DecoderModel::DecodeStatic on fixed buffers (ids_s, pos_s, slot_s, keep), eagerly or,
// with `graphs`, from one CUDA graph captured after kWarmup eager steps. Rows that finished stay in
// the batch (masked and ignored); padded rows N..Bp-1 decode pad_id at their own cache rows and
// are never read or sampled.
//
// Token t of every row is sampled from the logits after t decode forwards with the uniforms u[t]
// (on the device) by sample_fn, which indexes everything with the device counter step_s: it writes
// the tokens into ids_s (the next decode input) and row t of tok_hist / lp_hist, then advances
// step_s. Token 0 is sampled from the prefill logits; every later token by one step_fn =
// DecodeStatic + advance pos_s / slot_s + (sync-free sampling) sample_fn, which is the function the
// graph captures. With a sampler that syncs (top-p without top-k) step_fn is the decode alone and
// sample_fn runs eagerly after it. Per token: one replay (plus the eager sampler when it syncs);
// per sync_every tokens: two D2H copies of the new history rows (the only host syncs of a
// sync-free loop).
class StaticPath final : public DecodePath {
 public:
  StaticPath(DecoderModel& m, const GenerateRequest& r, const PromptBatch& pb, const RowPlan& plan, bool graphs)
      : DecodePath(m, r, pb, plan), graphs_(graphs) {}

  at::Tensor Prefill() override {
    const at::Device dev = m_.device();
    const int64_t P = pb_.ids.size(0), n = r_.n, lmax = pb_.lmax, cap = lmax + plan_.T;
    const bool pad = r_.pad_to_bucket < 0 ? graphs_ : r_.pad_to_bucket == 1;
    Bp_ = pad ? Bucket(N_) : N_;
    auto lopt = at::TensorOptions().dtype(at::kLong);
    auto dopt = lopt.device(dev);
    // Static buffers, allocated once on the current stream; they outlive the graph and the side
    // stream scope (members declared after them, so destroyed first, after a stream sync).
    cache_ = m_.NewCache(Bp_, cap);
    keep_ = at::zeros({Bp_, cap}, at::TensorOptions().dtype(at::kBool).device(dev));
    ids_s_ = at::full({Bp_, 1}, r_.pad_id, dopt);
    pos_s_ = at::zeros({Bp_}, dopt);
    slot_s_ = at::full({1}, lmax, dopt);
    KVCache pre = m_.NewCache(P, lmax);
    logits_ = PrefillPrompts(m_, r_, pb_, pre);  // [P, V]
    std::vector<int64_t> rows_h(N_), next_pos_h(N_);
    for (int64_t g = 0; g < N_; ++g) {
      rows_h[g] = g / n;
      next_pos_h[g] = pb_.plen[g / n];
    }
    at::Tensor rows = at::tensor(rows_h, lopt).to(dev);
    for (size_t l = 0; l < cache_.k.size(); ++l) {
      cache_.k[l].narrow(0, 0, N_).narrow(2, 0, lmax).copy_(pre.k[l].index_select(0, rows));
      cache_.v[l].narrow(0, 0, N_).narrow(2, 0, lmax).copy_(pre.v[l].index_select(0, rows));
    }
    keep_.narrow(0, 0, N_).narrow(1, 0, lmax).copy_(pb_.mask.narrow(1, 0, lmax).index_select(0, rows).ne(0));
    pos_s_.narrow(0, 0, N_).copy_(at::tensor(next_pos_h, lopt).to(dev));
    // Each row's kept slots are [lmax - prompt length, slot] (left-padded prompt, then the decoded
    // tokens; padded rows from lmax): the live-KV attention reads only those.
    std::vector<int32_t> start_h(Bp_, static_cast<int32_t>(lmax));
    for (int64_t g = 0; g < N_; ++g) start_h[g] = static_cast<int32_t>(lmax - pb_.plen[g / n]);
    live_start_ = at::tensor(start_h, at::TensorOptions().dtype(at::kInt)).to(dev);
    if (n > 1) logits_ = logits_.index_select(0, rows);
    return logits_;  // [N, V] float32: next-token logits of the real rows
  }

  void Start(const at::Tensor& u, GenerateResult& res) override {
    const at::Device dev = m_.device();
    const int64_t T = plan_.T;
    res.batch_rows = Bp_;
    res.decode_path = graphs_ ? "cuda-graphs" : "static";
    const DecoderConfig& c = m_.config();
    if (!r_.live_kv)
      live_start_ = at::Tensor();
    else if (LiveKvDecodeAttentionApplies(cache_.k[0], c.num_attention_heads, c.num_key_value_heads, c.head_dim)) {
      res.decode_attention = "live-kv";
      // The n rows of one prompt hold copies of one prefill's K/V in slots [start, lmax): the
      // live-KV kernel reads one copy per group there (padded rows N..Bp-1 start at lmax).
      if (r_.n > 1) {
        prompt_group_ = r_.n;
        res.decode_prompt_group =
            LiveKvPromptGroup(cache_.k[0], Bp_, c.num_attention_heads, c.num_key_value_heads, cache_.capacity, c.head_dim, prompt_group_, pb_.lmax);
      }
    }
    rs_ = RowSampling::Make(plan_.sampling, logits_.size(1), dev);
    fused_ = RowSamplingIsSyncFree(rs_, logits_.size(1));  // sampler inside step_fn
    res.sampling_in_step = fused_;
    u_ = u.to(dev);
    tok_hist_ = at::zeros({T, N_}, at::TensorOptions().dtype(at::kLong).device(dev));  // token t of row g at [t, g]
    lp_hist_ = at::zeros({T, N_}, at::TensorOptions().dtype(at::kFloat).device(dev));  // its logprob
    step_s_ = at::zeros({1}, at::TensorOptions().dtype(at::kLong).device(dev));        // next token index t
    side_ = std::make_unique<SideStreamScope>(graphs_ ? dev : at::Device(at::kCPU));
  }

  void Produce(int64_t t) override {
    constexpr int64_t kWarmup = 2;  // eager steps on the side stream before capture (lazy inits)
    if (t == 0) {
      SampleFn(logits_);  // from the prefill
      return;
    }
    at::Tensor out;
    if (graphs_ && steps_ >= kWarmup) {
      if (!graph_.captured()) {
        graph_out_ = graph_.Capture([this] { return StepFn(); });  // records only; the replay below runs it
        ++captures_;
      }
      graph_.Replay();
      out = graph_out_;
    } else {
      out = StepFn();
    }
    if (!fused_) SampleFn(out);
    ++steps_;
  }

  std::pair<at::Tensor, at::Tensor> Read(int64_t from, int64_t cnt) override {
    return {tok_hist_.narrow(0, from, cnt).to(at::kCPU).contiguous(), lp_hist_.narrow(0, from, cnt).to(at::kCPU).contiguous()};
  }
  int64_t Row(int64_t col) const override { return col; }
  int64_t captures() const { return captures_; }

  // Rows that finished stay in the batch (the graph's shapes are fixed) but stop reading KV: their
  // live range becomes empty (start past every slot), so the live-KV attention skips them.
  void Retire(const std::vector<char>& done) override {
    std::vector<int64_t> newly;
    retired_.resize(N_, 0);
    for (int64_t g = 0; g < N_; ++g)
      if (done[g] && !retired_[g]) {
        retired_[g] = 1;
        newly.push_back(g);
      }
    if (!newly.empty() && live_start_.defined())
      live_start_.index_fill_(0, at::tensor(newly, at::TensorOptions().dtype(at::kLong)).to(live_start_.device()), std::numeric_limits<int32_t>::max());
  }

 private:
  // Samples token step_s of every real row from `lg` [>= N, V] and records it (device-side only).
  void SampleFn(const at::Tensor& lg) {
    at::Tensor u = u_.index_select(0, step_s_).squeeze(0);  // [N]
    auto [tok, lp] = SampleTokensRows(lg.narrow(0, 0, N_), rs_, u);
    tok_hist_.index_copy_(0, step_s_, tok.unsqueeze(0));
    lp_hist_.index_copy_(0, step_s_, lp.to(at::kFloat).unsqueeze(0));
    ids_s_.narrow(0, 0, N_).copy_(tok.unsqueeze(1));
    step_s_.add_(1);
  }
  // The step (captured on the graph path): logits of the current inputs, advance position and
  // cache slot, and (sync-free sampler) sample the next token from them.
  at::Tensor StepFn() {
    at::Tensor lg = m_.DecodeStatic(ids_s_, pos_s_, slot_s_, keep_, r_.adapter, cache_, live_start_, prompt_group_, pb_.lmax);
    pos_s_.add_(1);
    slot_s_.add_(1);
    if (fused_) SampleFn(lg);
    return lg;
  }

  const bool graphs_;
  int64_t Bp_ = 0, steps_ = 0, captures_ = 0;
  int64_t prompt_group_ = 0;  // rows per prompt whose prompt K/V the live-KV kernel may share (0: none; set only with live_start_)
  bool fused_ = false;
  std::vector<char> retired_;  // [N] rows whose live range was emptied
  KVCache cache_;
  at::Tensor keep_, ids_s_, pos_s_, slot_s_, live_start_, u_, tok_hist_, lp_hist_, step_s_;
  StepGraph graph_;  // one bucket: the batch never shrinks on this path
  at::Tensor graph_out_;
  std::unique_ptr<SideStreamScope> side_;  // last: destroyed first (waits for the side stream)
};

// The one decode loop of both paths: token t = 0 .. T-1 of every row produced by `path`, the
// host reading the tokens back every `sync_every` tokens (and at the end) and recording them in
// step order, each row up to its stop id or its max_new_tokens; ends once every row finished.
// Abort and the out-of-memory test hook are checked before every token.
void DecodeLoop(const GenerateRequest& r, const RowPlan& plan, DecodePath& path, int64_t sync_every, GenerateResult& res) {
  const int64_t N = static_cast<int64_t>(plan.max_new.size()), T = plan.T;
  res.completions.resize(N);
  for (int64_t g = 0; g < N; ++g) {
    res.completions[g].prompt_index = g / r.n;
    res.completions[g].sample_index = g % r.n;
    res.completions[g].tokens.reserve(std::min<int64_t>(plan.max_new[g], 4096));
    res.completions[g].logprobs.reserve(std::min<int64_t>(plan.max_new[g], 4096));
  }
  std::vector<char> done(N, 0);
  int64_t n_done = 0, produced = 0, read = 0;
  // Rows left per prompt (its group of n), for on_group_done.
  std::vector<int64_t> group_left(static_cast<size_t>(N / std::max<int64_t>(1, r.n)), r.n);
  std::vector<int64_t> finished_groups;
  for (int64_t t = 0; t < T; ++t) {
    if (r.abort && r.abort->load(std::memory_order_relaxed)) throw AbortedError("generation aborted");
    if (t == r.simulate_oom_at_step) TORCH_CHECK_WITH(OutOfMemoryError, false, "simulated out of memory at decode step ", t);
    path.Produce(t);
    if (t > 0) ++res.steps;
    ++produced;
    if (produced - read < sync_every && produced < T) continue;
    const int64_t cnt = produced - read;
    auto [tok_h, lp_h] = path.Read(read, cnt);
    const int64_t cols = tok_h.size(1);
    const int64_t* tp = tok_h.data_ptr<int64_t>();
    const float* lpp = lp_h.data_ptr<float>();
    for (int64_t s = 0; s < cnt && n_done < N; ++s)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t g = path.Row(j);
        if (done[g]) continue;
        const int64_t tk = tp[s * cols + j];
        Completion& c = res.completions[g];
        c.tokens.push_back(static_cast<int32_t>(tk));
        c.logprobs.push_back(lpp[s * cols + j]);
        ++res.new_tokens;
        if (plan.Stop(g, tk)) c.stopped = true;
        if (c.stopped || static_cast<int64_t>(c.tokens.size()) >= plan.max_new[g]) {
          done[g] = 1;
          ++n_done;
          if (r.on_group_done && --group_left[static_cast<size_t>(g / r.n)] == 0) finished_groups.push_back(g / r.n);
        }
      }
    // Groups whose last row finished in this read-back: handed over while the others decode.
    for (int64_t p : finished_groups) r.on_group_done(p, std::vector<Completion>(res.completions.begin() + p * r.n, res.completions.begin() + (p + 1) * r.n));
    finished_groups.clear();
    read = produced;
    if (n_done == N || produced == T) break;
    path.Retire(done);
  }
}

GenerateResult GenerateImpl(DecoderModel& m, const GenerateRequest& r) {
  ValidateRequest(m, r);
  at::NoGradGuard ng;
  LoraInferenceCacheScope lora_cache;          // the adapter is fixed for the call: grouped LoRA from cached A / B
  LoraMergeScope lora_merge(r.merge_adapter);  // or merged into the weights once for the call
  if (r.abort && r.abort->load(std::memory_order_relaxed)) throw AbortedError("generation aborted");
  const at::Device dev = m.device();
  const int64_t P = static_cast<int64_t>(r.prompts.size()), n = r.n, N = P * n;
  GenerateResult res;
  res.seed = r.seed;
  res.adapter_merged = r.merge_adapter && m.SelectsAdapter(r.adapter);
  PromptBatch pb;
  for (const auto& p : r.prompts) {
    pb.lmax = std::max<int64_t>(pb.lmax, static_cast<int64_t>(p.size()));
    res.prompt_tokens += static_cast<int64_t>(p.size());
  }
  const RowPlan plan = MakePlan(r, n);
  const int64_t lmax = pb.lmax, cap = lmax + plan.T;

  // Left-padded prompt batch [P, lmax] and the attention mask over the whole cache [P, cap].
  auto lopt = at::TensorOptions().dtype(at::kLong);
  at::Tensor ids = at::full({P, lmax}, r.pad_id, lopt);
  at::Tensor mask = at::zeros({P, cap}, lopt);
  pb.plen.resize(P);
  {
    auto ia = ids.accessor<int64_t, 2>();
    auto ma = mask.accessor<int64_t, 2>();
    for (int64_t i = 0; i < P; ++i) {
      const auto& p = r.prompts[i];
      pb.plen[i] = static_cast<int64_t>(p.size());
      const int64_t off = lmax - pb.plen[i];
      for (int64_t j = 0; j < pb.plen[i]; ++j) {
        ia[i][off + j] = p[j];
        ma[i][off + j] = 1;
      }
    }
  }
  pb.pos = (mask.narrow(1, 0, lmax).cumsum(1) - 1).clamp_min(0).to(dev);
  pb.ids = ids.to(dev);
  pb.mask = mask.to(dev);

  // Decode path (GenerateRequest::cuda_graphs / static_cache).
  static const bool env_no_graphs = [] {
    const char* e = std::getenv("PAPERGYM_NO_CUDA_GRAPHS");
    return e != nullptr && *e != '\0' && std::string(e) != "0";
  }();
  const bool graphs_ok = r.cuda_graphs && !env_no_graphs && CudaGraphsCompiled() && dev.is_cuda();
  const bool use_static = r.static_cache < 0 ? graphs_ok : r.static_cache == 1;
  std::unique_ptr<DecodePath> path;
  if (use_static)
    path = std::make_unique<StaticPath>(m, r, pb, plan, graphs_ok);
  else
    path = std::make_unique<DynamicPath>(m, r, pb, plan);

  const auto t0 = Clock::now();
  at::Tensor logits = path->Prefill();
  (void)logits.select(0, 0).select(0, 0).item<float>();  // sync: honest prefill time
  const auto t1 = Clock::now();
  res.prefill_ms = Ms(t0, t1);
  logits = at::Tensor();
  path->Start(DrawUniforms(r, plan, N), res);
  // The static path reads the tokens back every sync_every steps; the dynamic one after each.
  DecodeLoop(r, plan, *path, use_static ? r.sync_every : 1, res);
  res.decode_ms = Ms(t1, Clock::now());
  if (use_static)
    res.graph_captures = static_cast<StaticPath&>(*path).captures();
  else
    res.compactions = static_cast<DynamicPath&>(*path).compactions();
  return res;
}

}  // namespace

GenerateResult Generate(DecoderModel& m, const GenerateRequest& r) {
  // The cache and activations of GenerateImpl are already released when a handler runs; hand the
  // cached blocks back so the model stays usable after an out-of-memory.
  auto release = [&] {
#ifdef PG_WITH_CUDA
    if (m.device().is_cuda()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
  };
  try {
    return GenerateImpl(m, r);
  } catch (const c10::OutOfMemoryError&) {
    release();
    throw;
  } catch (const c10::Error& e) {
    release();
    // libtorch's CPU allocator reports a failed host allocation as a plain c10::Error
    // ("DefaultCPUAllocator: can't allocate memory"): surface it as an out-of-memory too.
    const std::string msg = e.what_without_backtrace();
    if (msg.find("can't allocate memory") != std::string::npos || msg.find("not enough memory") != std::string::npos)
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg.substr(0, msg.find('\n')));
    throw;
  } catch (...) {
    release();
    throw;
  }
}

}  // namespace pg
