// The JS class `HostState` (napi/host_state.cc): a captured copy of training state in host memory
// (io/host_state.h), made by Model.captureAdapter() / Model.captureSnapshot(name) /
// AdamW.captureState():
//   .save(target, {baseModelName?}) -> Promise<void>  writes it on a worker thread without the
//       model lock (kAdapter: a PEFT dir; else a safetensors file); may be called more than once
//   .bytes -> number                                  host bytes held (pinned when from CUDA)
//   .release() -> void                                frees the host memory now (a save in flight
//       keeps it until it ends); later saves reject
#pragma once
#include <napi.h>

#include <memory>

#include "io/host_state.h"

namespace pg {
/// A new JS HostState holding `s` (on the JS thread).
Napi::Value NewHostState(Napi::Env env, std::shared_ptr<io::HostState> s);
void RegisterHostState(Napi::Env env, Napi::Object exports);
}  // namespace pg
