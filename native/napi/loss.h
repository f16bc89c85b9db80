// Pieces of the loss bindings (napi/loss.cc) that the model-step bindings (napi/model_steps.cc)
// share: the GRPO options reader and the metrics conversion.
#pragma once
#include <napi.h>

#include "loss/grpo.h"

namespace pg {
/// {epsilon, epsLow, epsHigh, klCoef (former name betaKl), temperature, chunkSize, aggregation, numSequences, numTokens,
/// maxCompletionLength} of `o`; ArgError naming `W` on a bad aggregation.
loss::GrpoOptions ReadGrpoOptions(const Napi::Object& o, const char* W);
/// {meanKl, clipFraction: {low, high, region}, maskCount, logprobs?} of a GRPO loss call.
Napi::Object GrpoMetricsToJs(Napi::Env env, const loss::GrpoMetrics& m);
}  // namespace pg
