// Small strict JSON (RFC 8259) reader/writer for safetensors headers, config.json and
// adapter_config.json. libtorch ships no public JSON header, so this is self-contained.
// Parse errors throw pg::InputError with the byte offset and the caller's `where` label.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace pg {
namespace json {

/// A parsed JSON value. Objects keep key order (vector of pairs) and reject duplicate keys.
struct Value {
  enum Type { Null, Bool, Number, String, Array, Object } type = Null;
  bool b = false;
  double num = 0;       // every number
  bool is_int = false;  // written without fraction/exponent and fits in int64
  int64_t i = 0;        // exact value when is_int
  std::string str;
  std::vector<Value> arr;
  std::vector<std::pair<std::string, Value>> obj;

  bool IsNull() const { return type == Null; }
  bool IsBool() const { return type == Bool; }
  bool IsNumber() const { return type == Number; }
  bool IsString() const { return type == String; }
  bool IsArray() const { return type == Array; }
  bool IsObject() const { return type == Object; }
  /// Member lookup in an object; nullptr when absent or when this is not an object.
  const Value* Find(const std::string& key) const;
};

/// Parses `text` (whole document; trailing whitespace allowed). Throws InputError
/// "<where>: invalid JSON at byte N: reason". Nesting depth is limited to 64.
Value Parse(const std::string& text, const std::string& where);

/// Serialises a value compactly (`indent` < 0) or pretty-printed with `indent` spaces.
std::string Dump(const Value& v, int indent = -1);
/// Quotes and escapes a string as a JSON string literal.
std::string Quote(const std::string& s);

// Builders.
Value MakeString(const std::string& s);
Value MakeNumber(double d);
Value MakeInt(int64_t i);
Value MakeBool(bool b);
Value MakeNull();
Value MakeArray(std::vector<Value> a = {});
Value MakeObject(std::vector<std::pair<std::string, Value>> o = {});

}  // namespace json
}  // namespace pg
