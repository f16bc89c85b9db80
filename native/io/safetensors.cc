#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "core/dtype.h"
#include "core/errors.h"
#include "io/json.h"

namespace pg {
namespace st {

namespace {
constexpr uint64_t kMaxHeader = 100ull * 1000 * 1000;

bool ParseDtype(const std::string& d, at::ScalarType* t, int* size) {
  if (d == "F32") {
    *t = at::kFloat;
    *size = 4;
    return true;
  }
  if (d == "BF16") {
    *t = at::kBFloat16;
    *size = 2;
    return true;
  }
  if (d == "F16") {
    *t = at::kHalf;
    *size = 2;
    return true;
  }
  return false;
}

const char* DtypeTag(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "F32";
    case at::kBFloat16:
      return "BF16";
    case at::kHalf:
      return "F16";
    default:
      return nullptr;
  }
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

void PreadAll(int fd, void* dst, uint64_t n, uint64_t off, const std::string& path, const std::string& what) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n > (1u << 30) ? (1u << 30) : n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) throw InputError(path + ": read of " + what + " failed (" + (r == 0 ? "unexpected end of file" : std::strerror(errno)) + ")");
    p += r;
    n -= static_cast<uint64_t>(r);
    off += static_cast<uint64_t>(r);
  }
}

std::string Dirname(const std::string& p) {
  auto s = p.find_last_of('/');
  return s == std::string::npos ? "." : (s == 0 ? "/" : p.substr(0, s));
}
}  // namespace

std::string ReadTextFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw InputError(path + ": read failed");
  return ss.str();
}

void WriteFileAtomic(const std::string& path, const std::vector<std::pair<const char*, size_t>>& chunks) {
  std::random_device rd;
  std::string tmp = Dirname(path) + "/." + path.substr(path.find_last_of('/') + 1) + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(path + ": cannot create temp file (" + std::strerror(errno) + ")");
  for (const auto& [data, size] : chunks) {
    const char* p = data;
    size_t n = size;
    while (n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int e = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        throw InputError(path + ": write failed (" + std::strerror(e) + ")");
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  // A failed fsync loses the data's durability, which the checkpoint's atomicity rests on; file
  // systems without fsync (EINVAL / ENOTSUP) are accepted as before.
  if (::fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw InputError(path + ": fsync failed (" + std::strerror(e) + ")");
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw InputError(path + ": rename failed (" + std::strerror(e) + ")");
  }
}

void WriteFileAtomic(const std::string& path, const std::string& data) {
  WriteFileAtomic(path, {{data.data(), data.size()}});
}

File File::Open(const std::string& path) {
  File f;
  f.path_ = path;
  Fd fd;
  fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd.fd < 0) throw InputError(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat sb;
  if (::fstat(fd.fd, &sb) != 0) throw InputError(path + ": cannot stat");
  const uint64_t fsize = static_cast<uint64_t>(sb.st_size);
  if (fsize < 8) throw InputError(path + ": truncated safetensors file (" + std::to_string(fsize) + " bytes, need at least 8)");
  unsigned char lenb[8];
  PreadAll(fd.fd, lenb, 8, 0, path, "header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | lenb[i];
  if (n > kMaxHeader) throw InputError(path + ": safetensors header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > fsize - 8)
    throw InputError(path + ": safetensors header length " + std::to_string(n) + " exceeds the file size " + std::to_string(fsize) +
                     " (truncated or corrupt file)");
  if (n < 2) throw InputError(path + ": safetensors header too short");
  std::string hdr(n, '\0');
  PreadAll(fd.fd, hdr.data(), n, 8, path, "header");
  json::Value root = json::Parse(hdr, path + " (safetensors header)");
  if (!root.IsObject()) throw InputError(path + ": safetensors header is not a JSON object");
  f.data_start_ = 8 + n;
  const uint64_t dsize = fsize - 8 - n;
  std::vector<const Entry*> order;
  for (const auto& kv : root.obj) {
    const std::string& name = kv.first;
    const json::Value& v = kv.second;
    if (name == "__metadata__") {
      if (!v.IsObject()) throw InputError(path + ": __metadata__ must be an object of strings");
      for (const auto& m : v.obj) {
        if (!m.second.IsString()) throw InputError(path + ": __metadata__." + m.first + " must be a string");
        f.metadata_[m.first] = m.second.str;
      }
      continue;
    }
    const std::string where = path + ": tensor '" + name + "'";
    if (!v.IsObject()) throw InputError(where + ": entry is not an object");
    const json::Value* dt = v.Find("dtype");
    const json::Value* sh = v.Find("shape");
    const json::Value* off = v.Find("data_offsets");
    if (!dt || !dt->IsString()) throw InputError(where + ": missing or non-string dtype");
    if (!sh || !sh->IsArray()) throw InputError(where + ": missing or non-array shape");
    if (!off || !off->IsArray() || off->arr.size() != 2) throw InputError(where + ": data_offsets must be [begin, end]");
    Entry e;
    e.name = name;
    e.dtype = dt->str;
    int esize = 0;
    if (!ParseDtype(e.dtype, &e.scalar_type, &esize)) throw InputError(where + ": unsupported dtype '" + e.dtype + "' (supported: BF16, F16, F32)");
    uint64_t numel = 1;
    for (const auto& d : sh->arr) {
      if (!d.IsNumber() || !d.is_int || d.i < 0) throw InputError(where + ": shape must hold non-negative integers");
      e.shape.push_back(d.i);
      if (d.i != 0 && numel > (UINT64_MAX / 8) / static_cast<uint64_t>(d.i)) throw InputError(where + ": shape too large");
      numel *= static_cast<uint64_t>(d.i);
    }
    for (int k = 0; k < 2; ++k)
      if (!off->arr[k].IsNumber() || !off->arr[k].is_int || off->arr[k].i < 0) throw InputError(where + ": data_offsets must be non-negative integers");
    e.begin = static_cast<uint64_t>(off->arr[0].i);
    e.end = static_cast<uint64_t>(off->arr[1].i);
    if (e.begin > e.end) throw InputError(where + ": data_offsets begin > end");
    if (e.end > dsize)
      throw InputError(where + ": data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") out of range (data buffer is " +
                       std::to_string(dsize) + " bytes; truncated file?)");
    if (e.end - e.begin != numel * static_cast<uint64_t>(esize))
      throw InputError(where + ": shape and dtype need " + std::to_string(numel * esize) + " bytes but data_offsets span " + std::to_string(e.end - e.begin));
    f.entries_[name] = std::move(e);
  }
  for (const auto& kv : f.entries_) order.push_back(&kv.second);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  uint64_t pos = 0;
  for (const Entry* e : order) {
    if (e->begin < pos)
      throw InputError(path + ": tensor '" + e->name + "' overlaps the previous tensor (data_offsets begin " + std::to_string(e->begin) + " < " +
                       std::to_string(pos) + ")");
    if (e->begin > pos)
      throw InputError(path + ": hole in the data buffer before tensor '" + e->name + "' (bytes " + std::to_string(pos) + ".." + std::to_string(e->begin) +
                       ")");
    pos = e->end;
  }
  if (pos != dsize)
    throw InputError(path + ": data buffer is " + std::to_string(dsize) + " bytes but tensors cover " + std::to_string(pos) +
                     " (trailing bytes or wrong offsets)");
  return f;
}

at::Tensor File::Read(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw InputError(path_ + ": no tensor '" + name + "'");
  const Entry& e = it->second;
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.scalar_type));
  if (e.end > e.begin) {
    Fd fd;
    fd.fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd.fd < 0) throw InputError(path_ + ": cannot open (" + std::strerror(errno) + ")");
    PreadAll(fd.fd, t.data_ptr(), e.end - e.begin, data_start_ + e.begin, path_, "tensor '" + name + "'");
  }
  return t;
}

Checkpoint Checkpoint::Open(const std::string& dir) {
  Checkpoint c;
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  struct stat sb;
  if (::stat(index.c_str(), &sb) == 0) {
    c.source_ = index;
    json::Value root = json::Parse(ReadTextFile(index), index);
    const json::Value* wm = root.Find("weight_map");
    if (!wm || !wm->IsObject()) throw InputError(index + ": missing \"weight_map\" object");
    std::map<std::string, size_t> file_idx;
    std::map<std::string, std::string> listed;
    for (const auto& kv : wm->obj) {
      if (!kv.second.IsString()) throw InputError(index + ": weight_map['" + kv.first + "'] must be a file name");
      const std::string& fn = kv.second.str;
      if (fn.empty() || fn.find('/') != std::string::npos || fn.find('\\') != std::string::npos || fn == "." || fn == "..")
        throw InputError(index + ": weight_map['" + kv.first + "'] = '" + fn + "' is not a plain file name inside the checkpoint directory");
      listed[kv.first] = fn;
      if (!file_idx.count(fn)) {
        file_idx[fn] = c.files_.size();
        c.files_.push_back(File::Open(dir + "/" + fn));
      }
    }
    for (const auto& kv : listed) {
      const File& f = c.files_[file_idx[kv.second]];
      auto it = f.entries().find(kv.first);
      if (it == f.entries().end()) throw InputError(index + ": tensor '" + kv.first + "' is listed in weight_map but missing from " + f.path());
      c.where_[kv.first] = file_idx[kv.second];
      c.entries_[kv.first] = it->second;
    }
    for (const File& f : c.files_)
      for (const auto& kv : f.entries())
        if (!listed.count(kv.first) || c.files_[c.where_[kv.first]].path() != f.path())
          throw InputError(f.path() + ": tensor '" + kv.first + "' is not listed for this shard in " + index);
  } else if (::stat(single.c_str(), &sb) == 0) {
    c.source_ = single;
    c.files_.push_back(File::Open(single));
    for (const auto& kv : c.files_[0].entries()) {
      c.where_[kv.first] = 0;
      c.entries_[kv.first] = kv.second;
    }
  } else {
    throw InputError(dir + ": no model.safetensors or model.safetensors.index.json");
  }
  return c;
}

const File& Checkpoint::FileOf(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw InputError(source_ + ": no tensor '" + name + "'");
  return files_[it->second];
}

void Save(const std::string& path, const std::map<std::string, at::Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<std::string, json::Value>> hdr;
  if (!metadata.empty()) {
    std::vector<std::pair<std::string, json::Value>> m;
    for (const auto& kv : metadata) m.emplace_back(kv.first, json::MakeString(kv.second));
    hdr.emplace_back("__metadata__", json::MakeObject(std::move(m)));
  }
  std::vector<at::Tensor> cpu;
  uint64_t off = 0;
  for (const auto& kv : tensors) {
    const char* tag = DtypeTag(kv.second.scalar_type());
    if (!tag) throw InputError(path + ": cannot save tensor '" + kv.first + "' of dtype " + DtypeName(kv.second.scalar_type()));
    at::Tensor t = kv.second.detach().to(at::kCPU).contiguous();
    uint64_t nb = static_cast<uint64_t>(t.numel()) * t.element_size();
    std::vector<json::Value> shape;
    for (int64_t d : t.sizes()) shape.push_back(json::MakeInt(d));
    hdr.emplace_back(
        kv.first,
        json::MakeObject({{"dtype", json::MakeString(tag)},
                          {"shape", json::MakeArray(std::move(shape))},
                          {"data_offsets", json::MakeArray({json::MakeInt(static_cast<int64_t>(off)), json::MakeInt(static_cast<int64_t>(off + nb))})}}));
    off += nb;
    cpu.push_back(t);
  }
  std::string h = json::Dump(json::MakeObject(std::move(hdr)));
  while (h.size() % 8) h += ' ';
  // The 8-byte little-endian header length, the header, then each tensor's bytes written from
  // where they are (no copy of the whole file in memory).
  std::string prefix;
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) prefix += static_cast<char>((n >> (8 * i)) & 0xFF);
  prefix += h;
  std::vector<std::pair<const char*, size_t>> chunks{{prefix.data(), prefix.size()}};
  for (const auto& t : cpu) chunks.emplace_back(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()) * t.element_size());
  WriteFileAtomic(path, chunks);
}

}  // namespace st
}  // namespace pg
