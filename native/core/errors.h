// The compute core's error types (no N-API here: native/napi/ maps them to JS errors, see
// napi/util.h MakeJsError). Every core function reports a problem by throwing one of these; any
// other exception (c10::Error, std::bad_alloc, ...) is classified by the binding layer as out of
// memory or internal.
#pragma once
#include <stdexcept>

namespace pg {

/// A wrong argument (type, range, shape): a JS TypeError with code ERR_PG_ARG.
struct ArgError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Bad input data (a corrupt file, a mismatched tensor, a state the call cannot run in): a JS Error
/// with code ERR_PG_INPUT.
struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Use of an object after it was disposed (a Model after dispose(), a ProcessGroup after
/// destroy()): a JS Error with code ERR_PG_DISPOSED.
struct DisposedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// Cancelled by an abort flag (a JS AbortSignal): a JS Error named AbortError with code ABORT_ERR.
struct AbortedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace pg
