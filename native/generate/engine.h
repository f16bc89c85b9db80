// Step-wise decode engine for continuous batching (serve): the dynamic decode path of generate.cc
// (DecoderModel::Forward over a live KV cache, one token per row per step, SampleTokensRows with
// per-row settings, per-row generators) driven one step at a time, with rows joining and leaving
// between steps.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "generate/cuda_graph.h"
#include "generate/sampler.h"
#include "model/decoder.h"

namespace pg {

/// One row (one completion) to decode.
struct EngineRowSpec {
  int64_t id = 0;               // caller's id, unique among live rows
  std::vector<int64_t> prompt;  // token ids, non-empty
  SamplingOptions sampling;
  uint64_t seed = 0;              // the row's own CPU generator
  int64_t max_new_tokens = 256;   // >= 1
  std::vector<int64_t> stop_ids;  // any of them ends the row (finish "stop"; the id is reported)
  int64_t top_logprobs = -1;      // -1: no raw logprobs; 0..20: raw logprob + this many alternatives
};

/// One sampled token of a row.
struct EngineToken {
  int64_t id = 0, token = 0;
  float logprob = 0;                // log_softmax(logits / T)[token] (as generate(); greedy: T = 1)
  float raw_logprob = 0;            // log_softmax(logits)[token] (top_logprobs >= 0 only)
  std::vector<int64_t> top_ids;     // the top_logprobs most likely ids under log_softmax(logits)
  std::vector<float> top_logprobs;  // and their raw logprobs, descending
  int finish = 0;                   // 0 running, 1 stop (stop id sampled), 2 length
  int64_t prompt_tokens = -1;       // prompt length on the row's first token, else -1
};

struct EngineStepResult {
  std::vector<EngineToken> tokens;  // one per row that ran this step
  int64_t active = 0;               // rows in the batch after this step
  int64_t waiting = 0;              // rows added but not yet admitted
  int64_t joined = 0;               // rows prefilled this step
  int64_t prefill_tokens = 0;       // padded prompt tokens of that prefill
  int64_t batch_rows = 0;           // rows of this step's decode forward (0 = none)
  int64_t shifts = 0;               // KV rebases this step (cache content moved)
  int64_t graph_captures = 0;       // CUDA graphs captured this step (static decode with graphs)
  double prefill_ms = 0, decode_ms = 0, sample_ms = 0;
};

/// Continuous-batching decode over one model.
///
/// KV layout: one cache of max_rows rows and `capacity` slots; live rows are rows 0..A-1 of it,
/// all written at the same next slot L (left-aligned history, per-row start slot and RoPE
/// position, attention mask per row over the slots). A row that joins is prefilled alone with the
/// others joining this step (left-padded to their longest prompt) and its KV copied to slots
/// [E - len, E), where E is the batch's next slot after this step's decode; when the slots do not
/// fit (E < len, or E + the row's remaining tokens > capacity) the history of all live rows is
/// moved left to start at slot 0 (and right when a prompt is longer than it), else the row waits.
/// A row that finishes (stop id, max_new_tokens, or Cancel) leaves at the end of its step: the
/// last live row is moved into its cache row (its slots are reused at once).
///
/// Threads: Add / Cancel / Waiting may be called from any thread; Step and Release must not run
/// concurrently with each other (the JS binding serialises them) and Step needs the model's mutex
/// held, grad mode off and the device set.
class DecodeEngine {
 public:
  /// static_decode: -1 = auto (on exactly when CUDA graphs are used: CUDA model, graphs compiled,
  /// PAPERGYM_NO_CUDA_GRAPHS unset, cuda_graphs true), 0 = Forward over the live rows (dynamic),
  /// 1 = DecoderModel::DecodeStatic over a power-of-two bucket of rows (eager without graphs; with
  /// graphs one captured graph per bucket after two eager warm-up steps of that bucket). The
  /// static decode attends over all `capacity` slots (masked), so its cost follows the capacity.
  DecodeEngine(std::shared_ptr<DecoderModel> model, int64_t max_rows, int64_t capacity, int64_t pad_id, AdapterSel adapter, int64_t max_prefill_tokens,
               bool cuda_graphs = true, int static_decode = -1);

  /// ArgError naming `what` when the spec does not fit the model / engine (empty prompt, ids out
  /// of range, len + max_new_tokens > capacity, bad sampling, duplicate id).
  void Validate(const EngineRowSpec& s, const std::string& what) const;
  /// Queues a validated row; it joins at the next Step that has room. ArgError when a queued or
  /// live row has the same id (an id is free again once its row finished or was cancelled).
  void Add(EngineRowSpec s);
  /// Cancels a row: a queued row is dropped at once (so `Cancel(id); Add(id)` queues the new row),
  /// a live row leaves at the next Step without producing a token. No-op for unknown or finished ids.
  void Cancel(int64_t id);
  /// Rows queued and not yet admitted.
  int64_t Waiting();
  /// Runs one step (see the class doc). On an error every live and queued row is dropped (the
  /// caller fails their requests) and the engine stays usable.
  EngineStepResult Step();
  /// Frees the KV cache and drops all rows.
  void Release();

  int64_t max_rows() const { return max_rows_; }
  bool graphs() const { return graphs_; }
  bool static_decode() const { return static_; }
  int64_t capacity() const { return capacity_; }

 private:
  struct Row {
    EngineRowSpec spec;
    at::Generator gen;
    int64_t generated = 0;  // tokens sampled so far
    int64_t last = 0;       // last sampled token (next decode input)
    int64_t next_pos = 0;   // RoPE position of that input
    int64_t start = 0;      // first cache slot of the row's history
    bool done = false;
  };
  void Shift(int64_t delta);  // moves slots [min start, L) of live rows by delta
  void MoveRow(int64_t from, int64_t to);
  void RemoveRow(int64_t b);  // the last row takes row b's place
  /// One Step as its named parts, in order (see the class doc).
  EngineStepResult StepImpl();
  void DropCancelled();  // cancelled live rows leave
  void EnsureBuffers();  // the KV cache, keep mask and static-decode inputs, on first use
  /// Rows that join this step (FIFO) within the batch, the prefill token budget and the KV slots;
  /// sets `pmax` (their longest prompt) and `delta` (the shift of the live history that makes room).
  std::vector<EngineRowSpec> Admit(int64_t A, int64_t* pmax, int64_t* delta, EngineStepResult& res);
  at::Tensor DecodeLive(int64_t A, EngineStepResult& res);  // logits [A, V] of the live rows at slot L
  /// Prefill of the joining rows into slots [E - pmax, E); they become live rows. Logits [J, V].
  at::Tensor PrefillJoining(std::vector<EngineRowSpec>& join, int64_t pmax, int64_t A, bool decode, EngineStepResult& res);
  /// The sampled token of every row (host tensors) and the logprobs its options ask for.
  struct Sampled {
    at::Tensor tok, lp;            // [R] int64, [R] float32
    std::vector<int64_t> lp_rows;  // rows with top_logprobs >= 0
    at::Tensor raw, top_v, top_i;  // over lp_rows: raw logprob, top-k values / ids
  };
  Sampled SampleRows(const at::Tensor& logits);
  void Record(const Sampled& s, EngineStepResult& res);  // tokens into res; finished rows leave

  std::shared_ptr<DecoderModel> model_;
  const int64_t max_rows_, capacity_, pad_id_, max_prefill_tokens_;
  AdapterSel adapter_;

  std::mutex mu_;  // guards pending_ / cancelled_ / ids_
  std::vector<EngineRowSpec> pending_;
  std::vector<int64_t> cancelled_;   // live rows to drop at the next step
  std::unordered_set<int64_t> ids_;  // ids of queued and live rows (unique)

  std::vector<Row> rows_;  // live rows, batch order = cache row
  KVCache cache_;          // [max_rows, n_kv, capacity, head_dim] per layer, allocated lazily
  at::Tensor mask_;        // [max_rows, capacity] bool on the device (DecodeStatic's keep)
  // Static decode: input buffers (views of their first B rows feed a bucket of B rows) and one
  // captured graph per bucket with its output and the number of eager runs of that bucket.
  bool graphs_ = false, static_ = false;
  at::Tensor ids_buf_, pos_buf_, slot_buf_;
  std::map<int64_t, std::unique_ptr<StepGraph>> graph_;
  std::map<int64_t, at::Tensor> graph_out_;
  std::map<int64_t, int64_t> eager_runs_;
  int64_t L_ = 0;  // next slot
};

}  // namespace pg
