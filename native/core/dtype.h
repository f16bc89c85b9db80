// Floating-point dtype names shared by the core (safetensors headers, model loading) and the
// bindings (`dtype` options): one spelling table.
#pragma once
#include <c10/core/ScalarType.h>

#include <string>

namespace pg {
/// Parses "float32"|"fp32"|"bfloat16"|"bf16"|"float16"|"fp16"; ArgError on anything else.
c10::ScalarType ParseDtype(const std::string& s);
/// "float32", "bfloat16", "float16", "float64", "int32", "int64", "bool", "uint8", else c10's name.
std::string DtypeName(c10::ScalarType t);
}  // namespace pg
