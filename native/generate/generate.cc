#include "generate/generate.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "core/errors.h"
#include "generate/cuda_graph.h"

#ifdef PG_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace pg {

void ValidateRequest(const Qwen3Model& m, const GenerateRequest& r) {
  const Qwen3Config& c = m.config();
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
      throw ArgError(name + " has " + std::to_string(len) + " tokens; with maxNewTokens = " + std::to_string(r.max_new_tokens) +
                     " it needs " + std::to_string(len + r.max_new_tokens) + " positions, more than the model context (" + std::to_string(ctx) + ")");
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
double Ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

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
  std::vector<SamplingOptions> sampling;                 // [N]
  std::vector<int64_t> max_new;                          // [N]
  std::vector<const std::vector<int64_t>*> stops;        // [N]
  std::vector<at::Generator> gens;                       // [N] own generators, or empty (call's)
  int64_t T = 0;                                         // largest max_new
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

// The static path of Generate (see generate.h): prefill into a P-row cache of lmax slots, copy its
// rows (each repeated n times) into a static cache of Bp >= N rows and lmax + max_new_tokens
// slots, then decode with Qwen3Model::DecodeStatic on fixed buffers (ids_s, pos_s, slot_s, keep),
// eagerly or, with `graphs`, from one CUDA graph captured after kWarmup eager steps. Rows that
// finished stay in the batch (masked and ignored); padded rows N..Bp-1 decode pad_id at their own
// cache rows and are never read or sampled.
//
// Token t of every row (t = 0 .. T-1, T = max_new_tokens) is sampled from the logits after t decode
// forwards with the uniforms u_all[t] (all drawn up front from the seeded CPU generator) by
// sample_fn, which indexes everything with the device counter step_s: it writes the tokens into
// ids_s (the next decode input) and row t of tok_hist / lp_hist, then advances step_s. Token 0 is
// sampled from the prefill logits; every later token by one step_fn = DecodeStatic + advance
// pos_s / slot_s + (sync-free sampling) sample_fn, which is the function the graph captures. With
// a sampler that syncs (top-p without top-k) step_fn is the decode alone and sample_fn runs
// eagerly after it. Per token: one replay (plus the eager sampler when it syncs); per sync_every
// tokens: two D2H copies of the new history rows (the only host syncs of a sync-free loop) and the
// stop-id bookkeeping for those tokens in order.
GenerateResult GenerateStatic(Qwen3Model& m, const GenerateRequest& r, const at::Tensor& ids, const at::Tensor& mask,
                              const at::Tensor& pos, const std::vector<int64_t>& plen, int64_t lmax, bool graphs,
                              const RowPlan& plan, GenerateResult res) {
  auto check_abort = [&] {
    if (r.abort && r.abort->load(std::memory_order_relaxed)) throw AbortedError("generation aborted");
  };
  const at::Device dev = m.device();
  const int64_t P = ids.size(0), n = r.n, N = P * n, T = plan.T, cap = lmax + T;
  const int64_t K = r.sync_every;
  const bool pad = r.pad_to_bucket < 0 ? graphs : r.pad_to_bucket == 1;
  const int64_t Bp = pad ? Bucket(N) : N;
  auto lopt = at::TensorOptions().dtype(at::kLong);
  auto dopt = lopt.device(dev);
  auto fopt = at::TensorOptions().dtype(at::kFloat);

  const auto t0 = Clock::now();
  // Static buffers, allocated once on the current stream; they outlive the graph and the side
  // stream scope below (declared after them, so destroyed first, after a stream sync).
  KVCache cache = m.NewCache(Bp, cap);
  at::Tensor keep = at::zeros({Bp, cap}, at::TensorOptions().dtype(at::kBool).device(dev));
  at::Tensor ids_s = at::full({Bp, 1}, r.pad_id, dopt);
  at::Tensor pos_s = at::zeros({Bp}, dopt);
  at::Tensor slot_s = at::full({1}, lmax, dopt);
  at::Tensor logits;  // [N, V] float32: next-token logits of the real rows
  {
    KVCache pre = m.NewCache(P, lmax);
    at::Tensor h = m.Forward(ids, mask.narrow(1, 0, lmax), pos, r.adapter, &pre);
    logits = m.Logits(h.select(1, lmax - 1));  // [P, V]
    h = at::Tensor();
    std::vector<int64_t> rows_h(N), next_pos_h(N);
    for (int64_t g = 0; g < N; ++g) {
      rows_h[g] = g / n;
      next_pos_h[g] = plen[g / n];
    }
    at::Tensor rows = at::tensor(rows_h, lopt).to(dev);
    for (size_t l = 0; l < cache.k.size(); ++l) {
      cache.k[l].narrow(0, 0, N).narrow(2, 0, lmax).copy_(pre.k[l].index_select(0, rows));
      cache.v[l].narrow(0, 0, N).narrow(2, 0, lmax).copy_(pre.v[l].index_select(0, rows));
    }
    keep.narrow(0, 0, N).narrow(1, 0, lmax).copy_(mask.narrow(1, 0, lmax).index_select(0, rows).ne(0));
    pos_s.narrow(0, 0, N).copy_(at::tensor(next_pos_h, lopt).to(dev));
    if (n > 1) logits = logits.index_select(0, rows);
  }
  (void)logits.select(0, 0).select(0, 0).item<float>();  // sync: honest prefill time
  const auto t1 = Clock::now();
  res.prefill_ms = Ms(t0, t1);
  res.batch_rows = Bp;
  res.decode_path = graphs ? "cuda-graphs" : "static";
  const RowSampling rs = RowSampling::Make(plan.sampling, logits.size(1), dev);
  const bool fused = RowSamplingIsSyncFree(rs, logits.size(1));  // sampler inside step_fn
  res.sampling_in_step = fused;

  // One uniform per global row per step, as on the dynamic path (same seed -> same samples): row t
  // of one [T, N] draw is exactly what the t-th draw of N returns (the CPU generator fills a
  // contiguous tensor element by element in order); with per-row generators column g is row g's
  // T draws in order.
  at::Tensor u_all;
  if (plan.gens.empty()) {
    at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(r.seed);
    u_all = at::rand({T, N}, gen, fopt);
  } else {
    u_all = at::empty({T, N}, fopt);
    for (int64_t g = 0; g < N; ++g) u_all.select(1, g).copy_(at::rand({T}, plan.gens[g], fopt));
  }
  u_all = u_all.to(dev);
  at::Tensor tok_hist = at::zeros({T, N}, dopt);            // token t of row g at [t, g]
  at::Tensor lp_hist = at::zeros({T, N}, fopt.device(dev));  // its logprob
  at::Tensor step_s = at::zeros({1}, dopt);                  // next token index t (device counter)

  res.completions.resize(N);
  for (int64_t g = 0; g < N; ++g) {
    res.completions[g].prompt_index = g / n;
    res.completions[g].sample_index = g % n;
    res.completions[g].tokens.reserve(std::min<int64_t>(T, 4096));
    res.completions[g].logprobs.reserve(std::min<int64_t>(T, 4096));
  }
  std::vector<char> done(N, 0);
  int64_t n_done = 0;

  // Samples token step_s of every real row from `lg` [>= N, V] and records it (device-side only).
  auto sample_fn = [&](const at::Tensor& lg) {
    at::Tensor u = u_all.index_select(0, step_s).squeeze(0);  // [N]
    auto [tok, lp] = SampleTokensRows(lg.narrow(0, 0, N), rs, u);
    tok_hist.index_copy_(0, step_s, tok.unsqueeze(0));
    lp_hist.index_copy_(0, step_s, lp.to(at::kFloat).unsqueeze(0));
    ids_s.narrow(0, 0, N).copy_(tok.unsqueeze(1));
    step_s.add_(1);
  };
  // The step (captured on the graph path): logits of the current inputs, advance position and
  // cache slot, and (sync-free sampler) sample the next token from them.
  auto step_fn = [&]() {
    at::Tensor lg = m.DecodeStatic(ids_s, pos_s, slot_s, keep, r.adapter, cache);
    pos_s.add_(1);
    slot_s.add_(1);
    if (fused) sample_fn(lg);
    return lg;
  };
  // Host bookkeeping of tokens [read, produced): in step order, each row up to its stop id.
  int64_t produced = 0, read = 0;
  auto drain = [&]() {
    const int64_t cnt = produced - read;
    at::Tensor tok_h = tok_hist.narrow(0, read, cnt).to(at::kCPU).contiguous();
    at::Tensor lp_h = lp_hist.narrow(0, read, cnt).to(at::kCPU).contiguous();
    const int64_t* tp = tok_h.data_ptr<int64_t>();
    const float* lpp = lp_h.data_ptr<float>();
    for (int64_t s = 0; s < cnt && n_done < N; ++s) {
      for (int64_t g = 0; g < N; ++g) {
        if (done[g]) continue;
        const int64_t tk = tp[s * N + g];
        Completion& c = res.completions[g];
        c.tokens.push_back(static_cast<int32_t>(tk));
        c.logprobs.push_back(lpp[s * N + g]);
        ++res.new_tokens;
        if (plan.Stop(g, tk)) {
          c.stopped = true;
          done[g] = 1;
          ++n_done;
        } else if (static_cast<int64_t>(c.tokens.size()) >= plan.max_new[g]) {
          done[g] = 1;
          ++n_done;
        }
      }
    }
    read = produced;
  };
  constexpr int64_t kWarmup = 2;  // eager steps on the side stream before capture (lazy inits)
  StepGraph graph;                 // one bucket: the batch never shrinks on this path
  at::Tensor graph_out;
  SideStreamScope side(graphs ? dev : at::Device(at::kCPU));

  for (int64_t t = 0; t < T; ++t) {
    check_abort();
    if (t == r.simulate_oom_at_step) TORCH_CHECK_WITH(OutOfMemoryError, false, "simulated out of memory at decode step ", t);
    if (t == 0) {
      sample_fn(logits);  // from the prefill
    } else {
      at::Tensor out;
      if (graphs && res.steps >= kWarmup) {
        if (!graph.captured()) {
          graph_out = graph.Capture(step_fn);  // records only; the replay below runs it
          ++res.graph_captures;
        }
        graph.Replay();
        out = graph_out;
      } else {
        out = step_fn();
      }
      if (!fused) sample_fn(out);
      ++res.steps;
    }
    ++produced;
    if (produced - read >= K || produced == T) {
      drain();
      if (n_done == N) break;
    }
  }
  res.decode_ms = Ms(t1, Clock::now());
  return res;
}

GenerateResult GenerateImpl(Qwen3Model& m, const GenerateRequest& r) {
  ValidateRequest(m, r);
  at::NoGradGuard ng;
  auto check_abort = [&] {
    if (r.abort && r.abort->load(std::memory_order_relaxed)) throw AbortedError("generation aborted");
  };
  check_abort();
  const at::Device dev = m.device();
  const int64_t P = static_cast<int64_t>(r.prompts.size()), n = r.n, N = P * n;
  int64_t lmax = 0;
  GenerateResult res;
  res.seed = r.seed;
  for (const auto& p : r.prompts) {
    lmax = std::max<int64_t>(lmax, static_cast<int64_t>(p.size()));
    res.prompt_tokens += static_cast<int64_t>(p.size());
  }
  const RowPlan plan = MakePlan(r, n);
  const int64_t cap = lmax + plan.T;

  // Left-padded prompt batch [P, lmax] and the attention mask over the whole cache [P, cap].
  auto lopt = at::TensorOptions().dtype(at::kLong);
  at::Tensor ids = at::full({P, lmax}, r.pad_id, lopt);
  at::Tensor mask = at::zeros({P, cap}, lopt);
  std::vector<int64_t> plen(P);
  {
    auto ia = ids.accessor<int64_t, 2>();
    auto ma = mask.accessor<int64_t, 2>();
    for (int64_t i = 0; i < P; ++i) {
      const auto& p = r.prompts[i];
      plen[i] = static_cast<int64_t>(p.size());
      const int64_t off = lmax - plen[i];
      for (int64_t j = 0; j < plen[i]; ++j) {
        ia[i][off + j] = p[j];
        ma[i][off + j] = 1;
      }
    }
  }
  at::Tensor pos = (mask.narrow(1, 0, lmax).cumsum(1) - 1).clamp_min(0);
  ids = ids.to(dev);
  mask = mask.to(dev);
  pos = pos.to(dev);

  // Decode path (GenerateRequest::cuda_graphs / static_cache).
  static const bool env_no_graphs = [] {
    const char* e = std::getenv("PAPERGYM_NO_CUDA_GRAPHS");
    return e != nullptr && *e != '\0' && std::string(e) != "0";
  }();
  const bool graphs_ok = r.cuda_graphs && !env_no_graphs && CudaGraphsCompiled() && dev.is_cuda();
  const bool use_static = r.static_cache < 0 ? graphs_ok : r.static_cache == 1;
  if (use_static) return GenerateStatic(m, r, ids, mask, pos, plen, lmax, graphs_ok, plan, std::move(res));
  res.batch_rows = N;

  const auto t0 = Clock::now();
  KVCache cache = m.NewCache(P, cap);
  at::Tensor h = m.Forward(ids, mask.narrow(1, 0, lmax), pos, r.adapter, &cache);
  at::Tensor logits = m.Logits(h.select(1, lmax - 1));  // [P, V] fp32
  h = at::Tensor();
  if (n > 1) {
    ExpandCache(cache, n);
    mask = mask.repeat_interleave(n, 0);
    logits = logits.repeat_interleave(n, 0);
  }
  std::vector<int64_t> next_pos_host(N);
  for (int64_t g = 0; g < N; ++g) next_pos_host[g] = plen[g / n];
  at::Tensor next_pos = at::tensor(next_pos_host, lopt).to(dev);  // [A] position of the next input token
  (void)logits.select(0, 0).select(0, 0).item<float>();          // sync: honest prefill time
  const auto t1 = Clock::now();
  res.prefill_ms = Ms(t0, t1);

  res.completions.resize(N);
  for (int64_t g = 0; g < N; ++g) {
    res.completions[g].prompt_index = g / n;
    res.completions[g].sample_index = g % n;
    res.completions[g].tokens.reserve(std::min<int64_t>(plan.max_new[g], 4096));
    res.completions[g].logprobs.reserve(std::min<int64_t>(plan.max_new[g], 4096));
  }
  std::vector<char> done(N, 0);
  std::vector<int64_t> active(N);  // global row of each batch row
  for (int64_t g = 0; g < N; ++g) active[g] = g;
  RowSampling rs = RowSampling::Make(plan.sampling, logits.size(1), dev);  // of the active rows

  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(r.seed);
  auto fopt = at::TensorOptions().dtype(at::kFloat);
  for (int64_t step = 0; step < plan.T; ++step) {
    check_abort();
    if (step == r.simulate_oom_at_step) TORCH_CHECK_WITH(OutOfMemoryError, false, "simulated out of memory at decode step ", step);
    const int64_t A = static_cast<int64_t>(active.size());
    at::Tensor u;
    if (plan.gens.empty()) {
      // One uniform per global row per step, drawn whether or not the row is still running: a
      // row's samples depend only on the seed and its own logits, not on batch composition.
      at::Tensor u_all = at::rand({N}, gen, fopt);
      at::Tensor bidx = at::tensor(active, lopt);
      u = (A == N ? u_all : u_all.index_select(0, bidx)).to(dev);
    } else {
      // Per-row generators: one draw per running row per step.
      u = at::empty({A}, fopt);
      for (int64_t b = 0; b < A; ++b) u.select(0, b).copy_(at::rand({1}, plan.gens[active[b]], fopt).squeeze(0));
      u = u.to(dev);
    }
    auto [tok, lp] = SampleTokensRows(logits, rs, u);
    at::Tensor tok_h = tok.to(at::kCPU), lp_h = lp.to(at::kCPU);
    const int64_t* tp = tok_h.data_ptr<int64_t>();
    const float* lpp = lp_h.data_ptr<float>();
    int64_t finished_in_batch = 0;
    for (int64_t b = 0; b < A; ++b) {
      const int64_t g = active[b];
      if (done[g]) {
        ++finished_in_batch;
        continue;
      }
      Completion& c = res.completions[g];
      c.tokens.push_back(static_cast<int32_t>(tp[b]));
      c.logprobs.push_back(lpp[b]);
      ++res.new_tokens;
      if (plan.Stop(g, tp[b])) {
        c.stopped = true;
        done[g] = 1;
        ++finished_in_batch;
      } else if (static_cast<int64_t>(c.tokens.size()) >= plan.max_new[g]) {
        done[g] = 1;
        ++finished_in_batch;
      }
    }
    if (step + 1 == plan.T || finished_in_batch == A) break;
    if (finished_in_batch > 0 && finished_in_batch >= std::max<int64_t>(1, static_cast<int64_t>(std::ceil(r.compact_fraction * A)))) {
      std::vector<int64_t> keep_b, keep_g;
      for (int64_t b = 0; b < A; ++b)
        if (!done[active[b]]) {
          keep_b.push_back(b);
          keep_g.push_back(active[b]);
        }
      at::Tensor keep = at::tensor(keep_b, lopt).to(dev);
      CompactCache(cache, keep);
      mask = mask.index_select(0, keep);
      next_pos = next_pos.index_select(0, keep);
      tok = tok.index_select(0, keep);
      rs = rs.Select(keep_b, logits.size(1), dev);
      active = std::move(keep_g);
      ++res.compactions;
    }
    const int64_t L = cache.len;
    mask.narrow(1, L, 1).fill_(1);
    at::Tensor hh = m.Forward(tok.unsqueeze(1), mask.narrow(1, 0, L + 1), next_pos.unsqueeze(1), r.adapter, &cache);
    next_pos.add_(1);
    logits = m.Logits(hh.select(1, 0));
    ++res.steps;
  }
  res.decode_ms = Ms(t1, Clock::now());
  return res;
}

}  // namespace

GenerateResult Generate(Qwen3Model& m, const GenerateRequest& r) {
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
