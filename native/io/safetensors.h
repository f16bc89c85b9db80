// safetensors reader/writer (format: huggingface/safetensors README; facts in
// docs/references.md). Layout: u64 little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {str: str}}, then the data
// buffer; offsets are relative to byte 8 + N. Every check failure throws pg::InputError naming the
// file and, where there is one, the tensor. Tensors are read with plain file reads into freshly
// allocated (aligned) CPU tensors: no views of unaligned mapped bytes.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace pg {
namespace st {

/// One tensor entry of a header (already validated).
struct Entry {
  std::string name;
  std::string dtype;           // "BF16" | "F16" | "F32"
  at::ScalarType scalar_type;  // matching ATen dtype
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data buffer
};

/// A validated single safetensors file. Open() checks: file size >= 8; header length N <= 100 MB
/// and 8 + N <= file size; the header is a JSON object; each entry has a supported dtype (BF16,
/// F16, F32; anything else -> error naming tensor and file), a shape of non-negative integers and
/// `data_offsets` [begin, end] with begin <= end, end - begin == numel * element size; the
/// ranges, sorted, start at 0, neither overlap nor leave holes, and end exactly at the end of the
/// file; `__metadata__`, when present, maps strings to strings.
class File {
 public:
  static File Open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool Has(const std::string& name) const { return entries_.count(name) != 0; }
  /// Reads tensor `name` into a new contiguous CPU tensor of its stored dtype.
  at::Tensor Read(const std::string& name) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// The tensors of a checkpoint directory: `model.safetensors`, or the shards named by
/// `model.safetensors.index.json` (`{"weight_map": {name: file}}`; file names must be plain names
/// inside the directory; every listed tensor must be in its shard and every shard tensor listed).
class Checkpoint {
 public:
  static Checkpoint Open(const std::string& dir);
  /// name -> entry; `FileOf(name)` gives the shard holding it.
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const File& FileOf(const std::string& name) const;
  at::Tensor Read(const std::string& name) const { return FileOf(name).Read(name); }
  /// Human-readable source for errors ("<dir>/model.safetensors" or the index path).
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::vector<File> files_;
  std::map<std::string, size_t> where_;
  std::map<std::string, Entry> entries_;
};

/// Writes `tensors` (any device; BF16/F16/F32) to `path` atomically (temp file + rename) with
/// `__metadata__` = `metadata` (omitted when empty). Keys are written in sorted order, data
/// contiguous without gaps; the header is padded with spaces to a multiple of 8 bytes.
/// Throws InputError naming the path on I/O errors or unsupported dtypes.
void Save(const std::string& path, const std::map<std::string, at::Tensor>& tensors, const std::map<std::string, std::string>& metadata);

/// Reads a whole small text file (config.json etc.); InputError naming the path if unreadable.
std::string ReadTextFile(const std::string& path);
/// Writes `data` to `path` atomically (temp file in the same directory + fsync + rename).
void WriteFileAtomic(const std::string& path, const std::string& data);
/// The same for a file made of `chunks` (pointer, bytes), written in order without joining them.
void WriteFileAtomic(const std::string& path, const std::vector<std::pair<const char*, size_t>>& chunks);

}  // namespace st
}  // namespace pg
