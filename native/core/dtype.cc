#include "core/dtype.h"

#include "core/errors.h"

namespace pg {

c10::ScalarType ParseDtype(const std::string& s) {
  if (s == "float32" || s == "fp32") return c10::kFloat;
  if (s == "bfloat16" || s == "bf16") return c10::kBFloat16;
  if (s == "float16" || s == "fp16") return c10::kHalf;
  throw ArgError("dtype must be 'float32', 'bfloat16' or 'float16', got '" + s + "'");
}

std::string DtypeName(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat:
      return "float32";
    case c10::kBFloat16:
      return "bfloat16";
    case c10::kHalf:
      return "float16";
    case c10::kDouble:
      return "float64";
    case c10::kInt:
      return "int32";
    case c10::kLong:
      return "int64";
    case c10::kBool:
      return "bool";
    case c10::kByte:
      return "uint8";
    default:
      return c10::toString(t);
  }
}

}  // namespace pg
