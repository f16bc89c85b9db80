#include "io/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/errors.h"

namespace pg {
namespace json {

const Value* Value::Find(const std::string& key) const {
  if (type != Object) return nullptr;
  for (const auto& kv : obj)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

namespace {
struct Parser {
  const std::string& s;
  const std::string& where;
  size_t p = 0;
  int depth = 0;

  [[noreturn]] void Fail(const std::string& why) const { throw InputError(where + ": invalid JSON at byte " + std::to_string(p) + ": " + why); }
  void Ws() {
    while (p < s.size() && (s[p] == ' ' || s[p] == '\t' || s[p] == '\n' || s[p] == '\r')) ++p;
  }
  void Expect(const char* lit) {
    size_t n = std::strlen(lit);
    if (s.compare(p, n, lit) != 0) Fail(std::string("expected '") + lit + "'");
    p += n;
  }
  static void AppendUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  uint32_t Hex4() {
    if (p + 4 > s.size()) Fail("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s[p++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        Fail("bad \\u escape");
    }
    return v;
  }
  std::string Str() {
    if (p >= s.size() || s[p] != '"') Fail("expected string");
    ++p;
    std::string out;
    while (true) {
      if (p >= s.size()) Fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(s[p++]);
      if (c == '"') break;
      if (c < 0x20) Fail("control character in string");
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (p >= s.size()) Fail("unterminated escape");
      char e = s[p++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = Hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (p + 2 <= s.size() && s[p] == '\\' && s[p + 1] == 'u') {
              p += 2;
              uint32_t lo = Hex4();
              if (lo < 0xDC00 || lo > 0xDFFF) Fail("bad surrogate pair");
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              Fail("lone surrogate");
            }
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            Fail("lone surrogate");
          }
          AppendUtf8(out, cp);
          break;
        }
        default:
          Fail("bad escape");
      }
    }
    return out;
  }
  Value Num() {
    size_t b = p;
    bool integral = true;
    if (p < s.size() && s[p] == '-') ++p;
    if (p >= s.size()) Fail("truncated number");
    if (s[p] == '0') {
      ++p;
    } else if (s[p] >= '1' && s[p] <= '9') {
      while (p < s.size() && isdigit(static_cast<unsigned char>(s[p]))) ++p;
    } else {
      Fail("bad number");
    }
    if (p < s.size() && s[p] == '.') {
      integral = false;
      ++p;
      if (p >= s.size() || !isdigit(static_cast<unsigned char>(s[p]))) Fail("bad fraction");
      while (p < s.size() && isdigit(static_cast<unsigned char>(s[p]))) ++p;
    }
    if (p < s.size() && (s[p] == 'e' || s[p] == 'E')) {
      integral = false;
      ++p;
      if (p < s.size() && (s[p] == '+' || s[p] == '-')) ++p;
      if (p >= s.size() || !isdigit(static_cast<unsigned char>(s[p]))) Fail("bad exponent");
      while (p < s.size() && isdigit(static_cast<unsigned char>(s[p]))) ++p;
    }
    std::string t = s.substr(b, p - b);
    Value v;
    v.type = Value::Number;
    v.num = std::strtod(t.c_str(), nullptr);
    if (integral) {
      errno = 0;
      char* end = nullptr;
      long long ll = std::strtoll(t.c_str(), &end, 10);
      if (errno == 0 && end && *end == 0) {
        v.is_int = true;
        v.i = ll;
      }
    }
    return v;
  }
  Value Any() {
    Ws();
    if (p >= s.size()) Fail("unexpected end");
    char c = s[p];
    Value v;
    if (c == '{') {
      if (++depth > 64) Fail("nesting too deep");
      ++p;
      v.type = Value::Object;
      Ws();
      if (p < s.size() && s[p] == '}') {
        ++p;
      } else {
        while (true) {
          Ws();
          std::string k = Str();
          for (const auto& kv : v.obj)
            if (kv.first == k) Fail("duplicate key '" + k + "'");
          Ws();
          if (p >= s.size() || s[p] != ':') Fail("expected ':'");
          ++p;
          v.obj.emplace_back(std::move(k), Any());
          Ws();
          if (p < s.size() && s[p] == ',') {
            ++p;
            continue;
          }
          if (p < s.size() && s[p] == '}') {
            ++p;
            break;
          }
          Fail("expected ',' or '}'");
        }
      }
      --depth;
    } else if (c == '[') {
      if (++depth > 64) Fail("nesting too deep");
      ++p;
      v.type = Value::Array;
      Ws();
      if (p < s.size() && s[p] == ']') {
        ++p;
      } else {
        while (true) {
          v.arr.push_back(Any());
          Ws();
          if (p < s.size() && s[p] == ',') {
            ++p;
            continue;
          }
          if (p < s.size() && s[p] == ']') {
            ++p;
            break;
          }
          Fail("expected ',' or ']'");
        }
      }
      --depth;
    } else if (c == '"') {
      v.type = Value::String;
      v.str = Str();
    } else if (c == 't') {
      Expect("true");
      v.type = Value::Bool;
      v.b = true;
    } else if (c == 'f') {
      Expect("false");
      v.type = Value::Bool;
    } else if (c == 'n') {
      Expect("null");
    } else {
      v = Num();
    }
    return v;
  }
};

void DumpTo(const Value& v, int indent, int level, std::string& out) {
  auto nl = [&](int lv) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * lv), ' ');
  };
  switch (v.type) {
    case Value::Null:
      out += "null";
      break;
    case Value::Bool:
      out += v.b ? "true" : "false";
      break;
    case Value::Number: {
      if (v.is_int) {
        out += std::to_string(v.i);
      } else if (!std::isfinite(v.num)) {
        out += "null";
      } else {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", v.num);
        // prefer the shortest representation that round-trips
        for (int prec = 1; prec <= 17; ++prec) {
          char b2[64];
          std::snprintf(b2, sizeof b2, "%.*g", prec, v.num);
          if (std::strtod(b2, nullptr) == v.num) {
            std::strcpy(buf, b2);
            break;
          }
        }
        out += buf;
      }
      break;
    }
    case Value::String:
      out += Quote(v.str);
      break;
    case Value::Array:
      out += '[';
      for (size_t k = 0; k < v.arr.size(); ++k) {
        if (k) out += indent < 0 ? "," : ",";
        nl(level + 1);
        DumpTo(v.arr[k], indent, level + 1, out);
      }
      if (!v.arr.empty()) nl(level);
      out += ']';
      break;
    case Value::Object:
      out += '{';
      for (size_t k = 0; k < v.obj.size(); ++k) {
        if (k) out += ",";
        nl(level + 1);
        out += Quote(v.obj[k].first);
        out += indent < 0 ? ":" : ": ";
        DumpTo(v.obj[k].second, indent, level + 1, out);
      }
      if (!v.obj.empty()) nl(level);
      out += '}';
      break;
  }
}
}  // namespace

Value Parse(const std::string& text, const std::string& where) {
  Parser ps{text, where};
  Value v = ps.Any();
  ps.Ws();
  if (ps.p != text.size()) ps.Fail("trailing characters");
  return v;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string Dump(const Value& v, int indent) {
  std::string out;
  DumpTo(v, indent, 0, out);
  return out;
}

Value MakeString(const std::string& s) {
  Value v;
  v.type = Value::String;
  v.str = s;
  return v;
}
Value MakeNumber(double d) {
  Value v;
  v.type = Value::Number;
  v.num = d;
  return v;
}
Value MakeInt(int64_t i) {
  Value v;
  v.type = Value::Number;
  v.num = static_cast<double>(i);
  v.is_int = true;
  v.i = i;
  return v;
}
Value MakeBool(bool b) {
  Value v;
  v.type = Value::Bool;
  v.b = b;
  return v;
}
Value MakeNull() {
  return Value();
}
Value MakeArray(std::vector<Value> a) {
  Value v;
  v.type = Value::Array;
  v.arr = std::move(a);
  return v;
}
Value MakeObject(std::vector<std::pair<std::string, Value>> o) {
  Value v;
  v.type = Value::Object;
  v.obj = std::move(o);
  return v;
}

}  // namespace json
}  // namespace pg
