// JS methods of `Model` over adapter snapshots that keep their tensors native (implemented in
// napi/adapter_state.cc; listed in the Model class definition):
//   emaUpdate(name, decay): void                 s ← d·s + (1 − d)·a in place (lora/snapshots.h)
//   saveSnapshot(name, path): Promise<void>      safetensors file of the snapshot (worker thread)
//   captureSnapshot(name): Promise<HostState>    its host copy, written later by HostState.save(path)
//   loadSnapshot(name, path): Promise<void>      reads such a file into snapshot `name` (worker)
#pragma once
#include <napi.h>

#include <functional>
#include <memory>

#include "model/decoder.h"

namespace pg {
Napi::Value ModelEmaUpdate(const Napi::CallbackInfo& info, const std::shared_ptr<DecoderModel>& m);
Napi::Value ModelSaveSnapshot(const Napi::CallbackInfo& info, const std::shared_ptr<DecoderModel>& m);
/// captureSnapshot(name) -> Promise<HostState> (napi/host_state.h): the snapshot copied to host memory.
Napi::Value ModelCaptureSnapshot(const Napi::CallbackInfo& info, const std::shared_ptr<DecoderModel>& m);
/// `after` runs on the JS thread once the snapshot is installed (V8 external-memory accounting).
Napi::Value ModelLoadSnapshot(const Napi::CallbackInfo& info, const std::shared_ptr<DecoderModel>& m, std::function<void(Napi::Env)> after);
}  // namespace pg
