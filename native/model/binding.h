// The JS `Model` object (ObjectWrap around a shared Qwen3Model), for other bindings
// (generate/, loss/, optim/) that take a model argument.
#pragma once
#include <napi.h>

#include <memory>

#include "model/qwen3.h"

namespace pg {
/// Returns the model behind a JS `Model` instance; ArgError naming `what` if `v` is not one,
/// InputError if it was disposed.
std::shared_ptr<Qwen3Model> UnwrapModel(const Napi::Value& v, const char* what);
}  // namespace pg
