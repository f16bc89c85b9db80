// The safetensors file of one adapter's LoRA tensors (a snapshot such as the EMA teacher or the
// stage-start reference policy): PEFT keys (lora::ParameterKey), F32.
#pragma once
#include <ATen/ATen.h>

#include <map>
#include <string>

#include "lora/snapshots.h"

namespace pg {
namespace io {

using lora::ModuleWeights;

/// Writes `w` to `path` as safetensors (F32, keys ParameterKey, `__metadata__` = metadata),
/// atomically (temp file + rename). Tensors may live on any device. InputError naming the path on
/// I/O errors.
void SaveWeights(const std::string& path, const ModuleWeights& w, const std::map<std::string, std::string>& metadata);

/// Reads a file written by SaveWeights (or any safetensors file with the same keys) into CPU
/// float32 tensors with the modules and shapes of `like`. InputError naming the file and the key
/// when a key is missing, unexpected, or of another shape. F32 files load bit for bit.
ModuleWeights ReadWeightsLike(const std::string& path, const ModuleWeights& like);

}  // namespace io
}  // namespace pg
