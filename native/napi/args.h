// One reader per boundary concept, shared by every binding: which adapter a call uses, token ids
// and masks as tensors, token-id lists, sampling options and seeds. Each names the argument in its
// errors (`what` is the argument path, e.g. "args" or "sequenceLogprobs") and throws ArgError
// (a JS TypeError, code ERR_PG_ARG).
#pragma once
#include <napi.h>
#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "generate/sampler.h"
#include "lora/lora.h"

namespace pg {

/// The adapter argument o[key] (key "adapter", or "teacher" for opsdBackward). One rule for every
/// call: absent / undefined / null = `dflt`; otherwise a non-empty string: 'active' (the trainable
/// adapter, unless disabled), 'none' (the frozen base model) or the name of a snapshot
/// (snapshotAdapter). Anything else (an empty string, a number, an object) is an ArgError
/// "<what>.<key> must be 'active', 'none' or a snapshot name (a non-empty string)". An unknown
/// snapshot name is reported by the model when the call runs (InputError).
AdapterSel ReadAdapter(const Napi::Object& o, const char* key, const std::string& what, AdapterSel::Kind dflt = AdapterSel::Active);

/// Token ids o[key]: a tensor [B, T] with B, T >= 1 of Int32Array or BigInt64Array data. Returns int64.
at::Tensor ReadIds(const Napi::Object& o, const char* key, const std::string& what);

/// A 0/1 mask o[key] shaped like `ids` (o[ids_key]): Float32Array, Float64Array, Int32Array,
/// BigInt64Array or Uint8Array data holding only 0 and 1. Absent: all ones when `optional`, else an
/// ArgError. Returns int64 (callers cast to what their math uses). The same rule for attention
/// masks (forward, sequenceLogprobs, the backward steps) and completion masks.
at::Tensor ReadMask(const Napi::Object& o, const char* key, const at::Tensor& ids, const char* ids_key, const std::string& what, bool optional = false);

/// Per-token values o[key] (e.g. old / reference logprobs) shaped like `ids` (o[ids_key]); any
/// numeric data. Returns float32.
at::Tensor ReadPerToken(const Napi::Object& o, const char* key, const at::Tensor& ids, const char* ids_key, const std::string& what);

/// A token-id list (one prompt): an array of integers, an Int32Array or a Uint32Array.
std::vector<int64_t> ReadTokenList(const Napi::Value& v, const std::string& what);

/// Sampling options {temperature, topK, topP, minP} of `o`, each defaulting to `dflt`'s value;
/// validated (ValidateSampling: temperature >= 0, topK >= 0, topP in (0, 1], minP in [0, 1]).
SamplingOptions ReadSampling(const Napi::Object& o, const std::string& what, const SamplingOptions& dflt = SamplingOptions());

/// o.seed: an integer >= 0; absent = a random 48-bit seed (from std::random_device).
uint64_t ReadSeed(const Napi::Object& o, const std::string& what);

}  // namespace pg
