// Batched autoregressive generation with a KV cache over the DecoderModel contract (model/decoder.h).
#pragma once
#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "generate/sampler.h"
#include "model/decoder.h"

namespace pg {

struct Completion;

/// One generation call. Prompts are token ids (already chat-rendered and tokenized).
struct GenerateRequest {
  std::vector<std::vector<int64_t>> prompts;  // P prompts, each non-empty, ids in [0, vocab_size)
  int64_t n = 1;                              // completions per prompt (prompt prefilled once)
  int64_t max_new_tokens = 256;               // >= 1
  SamplingOptions sampling;
  uint64_t seed = 0;              // per-call RNG seed (own CPU generator)
  std::vector<int64_t> stop_ids;  // any of them ends a completion (finish "stop")
  /// Per-prompt settings (each empty or one entry per prompt; the n rows of a prompt share them):
  /// sampling options, seed (-1 = none), max new tokens, stop ids. Rows with different settings
  /// decode in one batch (one forward per step; SampleTokensRows). When row_seeds is non-empty
  /// every row draws its uniforms from its own CPU generator (RowSeed), so a seeded row samples
  /// the same ids alone as inside any batch; otherwise all rows draw from the call's generator
  /// (`seed`), one uniform per row per step, as before per-row settings existed.
  std::vector<SamplingOptions> row_sampling;
  std::vector<int64_t> row_seeds;
  std::vector<int64_t> row_max_new_tokens;
  std::vector<std::vector<int64_t>> row_stop_ids;
  int64_t pad_id = 0;                        // id written into left padding (masked, never attended)
  AdapterSel adapter;                        // which adapter the forwards use
  std::shared_ptr<std::atomic<bool>> abort;  // set from JS: AbortedError before the next step
  /// Compact finished rows out of the batch once they are at least this fraction of it (0..1].
  double compact_fraction = 0.125;
  int64_t simulate_oom_at_step = -1;  // test hook: throw c10::OutOfMemoryError at this decode step
  /// Capture the decode step as CUDA graphs (one per batch bucket) when the build has CUDA graphs
  /// (PG_WITH_CUDA), the model is on CUDA and PAPERGYM_NO_CUDA_GRAPHS is not set; false = never.
  bool cuda_graphs = true;
  /// Static-KV-cache decode (DecoderModel::DecodeStatic): -1 = auto (on exactly when CUDA graphs are
  /// used), 0 = off (the dynamic path: cache grown by Forward, finished rows compacted), 1 = on
  /// (with or without graphs; finished rows stay in the batch, masked, and are ignored).
  int static_cache = -1;
  /// Static path only: pad the batch to a power-of-two bucket (1, 2, 4, ... rows; padded rows are
  /// masked and ignored): -1 = auto (on exactly when CUDA graphs are used), 0 = off, 1 = on.
  int pad_to_bucket = -1;
  /// Static path only: attend over each row's filled slots with the live-KV kernel where it
  /// applies (CUDA, own kernels; DecoderModel::DecodeStatic live_start); false = the masked
  /// attention over every slot (A/B and the reference).
  bool live_kv = true;
  /// Run the call from the adapter merged into the base weights (LoraMergeScope: no LoRA branch
  /// in the forwards; one copy of the targeted weights held during the call). False = the LoRA
  /// branch as in training (ids then match the teacher-forced forward's rounding).
  bool merge_adapter = false;
  /// Static path only: read the sampled tokens back to the host (one D2H copy of the history, the
  /// only host synchronisation of the loop when sampling is sync-free) every this many decode steps,
  /// >= 1. The stop-id bookkeeping runs then, for those steps in order, so results do not depend on
  /// it; the cost is up to sync_every - 1 wasted decode steps after the last row stopped (their
  /// tokens are discarded). 1 = check after every token (the loop then runs exactly the forwards the
  /// dynamic path runs). The dynamic path always checks after every token.
  int64_t sync_every = 8;
  /// Called on the decode thread, at the host read-back (every sync_every tokens) where the last
  /// of a prompt's n rows finished, with that prompt's index and its n completions (final: the
  /// rows are done). Once per prompt at most; prompts that finish at the last read-back may be
  /// reported or not (the result has every completion). Must not throw. Empty = none.
  std::function<void(int64_t, const std::vector<Completion>&)> on_group_done;
};

/// One completion (row r = prompt_index * n + sample_index).
struct Completion {
  int64_t prompt_index = 0, sample_index = 0;
  std::vector<int32_t> tokens;  // sampled ids; includes the stop id when finish == stop
  std::vector<float> logprobs;  // per token: log_softmax(logits / T)[token], full vocabulary
  bool stopped = false;         // true: "stop" (a stop id was sampled); false: "length"
};

struct GenerateResult {
  std::vector<Completion> completions;  // P * n, ordered by (prompt_index, sample_index)
  uint64_t seed = 0;
  int64_t prompt_tokens = 0;  // sum of prompt lengths (without padding)
  int64_t new_tokens = 0;     // sum of completion lengths
  int64_t steps = 0;          // decode forwards run (after the prefill)
  int64_t compactions = 0;    // times finished rows were removed from the batch
  double prefill_ms = 0, decode_ms = 0;
  /// "dynamic" (Forward with a growing cache), "static" (DecodeStatic, eager) or "cuda-graphs"
  /// (DecodeStatic replayed from a captured graph).
  std::string decode_path = "dynamic";
  /// Decode attention: "live-kv" (static path with the live-KV kernel: each row reads only its
  /// filled slots; LiveKvDecodeAttention) or "masked" (all filled slots of the dynamic cache, or
  /// every slot of the static one under a mask).
  std::string decode_attention = "masked";
  /// Rows per group whose prompt K/V the live-KV attention read once for the group (the n
  /// completions of one prompt; LiveKvPromptGroup), or 0 where every row read its own copy.
  int64_t decode_prompt_group = 0;
  /// The forwards ran from the merged weights (merge_adapter and an adapter was selected).
  bool adapter_merged = false;
  int64_t graph_captures = 0;  // CUDA graphs captured by this call
  int64_t batch_rows = 0;      // decode batch rows (static path: the bucket, padded rows included)
  /// Static path: the sampler ran inside the decode step (so inside the CUDA graph on the graph
  /// path): true unless the sampling options need a host check (SamplingIsSyncFree: top-p without
  /// top-k), in which case each step samples eagerly after the step. False on the dynamic path.
  bool sampling_in_step = false;
};

/// Seed of the generator of sample `sample_index` of a prompt seeded with `seed`: the seed itself
/// for sample 0, a splitmix64 mix of (seed, sample_index) for the others.
uint64_t RowSeed(uint64_t seed, int64_t sample_index);

/// Checks the request against the model (ArgError naming the JS option: prompts[i], n,
/// maxNewTokens, temperature, topK, topP, stopIds[i], padId). Context: every prompt must satisfy
/// len + maxNewTokens <= max_position_embeddings.
void ValidateRequest(const DecoderModel& m, const GenerateRequest& r);

/// Runs the generation on the calling thread. The caller holds m.mutex() and has set grad mode
/// off and the CUDA device. Steps: left-pad prompts to the longest, prefill once into a KV cache
/// of P rows, expand the cache rows n times, then decode one token per row per step; rows that
/// sampled a stop id stop recording and are compacted out of the batch (see compact_fraction).
/// Static path (static_cache / cuda_graphs): prefill as above, then the rows (padded to a bucket)
/// decode through DecoderModel::DecodeStatic over a preallocated cache of lmax + max_new_tokens slots,
/// on CUDA replaying one captured graph per bucket after two eager warm-up steps; finished rows stay
/// in the batch (masked) and keep decoding tokens that are ignored. All uniforms are drawn up front
/// from the seeded CPU generator (the same numbers, in the same order, as one draw of N per step on
/// the dynamic path) and copied to the device once. One step (the function that is captured) is:
/// DecodeStatic of the last sampled tokens, advance positions and cache slot, then, when the
/// sampling is sync-free (SamplingIsSyncFree: greedy, full vocabulary, top-k), SampleTokens on the
/// new logits with the uniforms of a device step counter, writing the tokens into the decode input
/// and into device token / logprob histories at that counter (no host values that change between
/// replays). With top-p without top-k the sampler (which checks a value on the host) runs eagerly
/// after each step instead. The host reads the histories back every sync_every steps (and at the
/// end), records the tokens in order up to each row's stop id, and ends the loop once every row
/// stopped: at most sync_every - 1 extra decode steps. Tokens, logprobs, finish reasons and
/// new_tokens equal the dynamic path's up to float rounding for every sync_every; steps counts the
/// decode forwards actually run (with sync_every = 1 the same as the dynamic path's).
/// Throws AbortedError when r.abort is set (checked before the prefill and every decode step);
/// out-of-memory propagates as c10::OutOfMemoryError after the cache is released (the model stays
/// usable).
GenerateResult Generate(DecoderModel& m, const GenerateRequest& r);

}  // namespace pg
