// Safetensors: read (memory-mapped, zero-copy) and write Hugging Face .safetensors files, single
// or sharded with a model.safetensors.index.json.
//
// File layout: u64 little-endian header length N, then N bytes of JSON header (padded with
// spaces), then the data region. The header maps each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data region) plus an
// optional "__metadata__" object of string to string. Tensors are row-major, little-endian.
//
// This file is torch-free: readers hand out byte spans into the mapping, which the torch model
// loader wraps into tensors. Every file is fully validated when opened, so a truncated or
// corrupt file is an Error naming the file (and tensor), never an out-of-bounds read.
//
// Thread safety: SafetensorsFile and SafetensorsModel are immutable after open; const methods may
// be called from any number of threads. Spans stay valid while the object that returned them
// lives (moving the object keeps them valid; the mapping does not move).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/files.h"

namespace trellis::model {

enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, F8_E4M3, F8_E5M2 };

size_t dtype_size(DType dtype);            // bytes per element
std::string_view dtype_name(DType dtype);  // the safetensors name: "F32", "BF16", ...
// Parses a safetensors dtype name; throws Error("unknown dtype 'X'", where).
DType parse_dtype(std::string_view name, const std::string& where);

// One tensor's entry in a file header. begin/end are byte offsets into the data region.
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // [] is a scalar (numel 1)
  uint64_t begin = 0, end = 0;

  int64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
};

// A tensor to write: `bytes` must be numel * dtype_size long. The caller owns the bytes.
struct TensorData {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};

// Budgets for a file header, which may come from anywhere: checked before anything is allocated
// for what they bound.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;  // the reference's limit
inline constexpr size_t kMaxSafetensorsTensors = size_t{1} << 18;    // per file

// What a file's header says, validated against the file: every tensor's dtype, shape and
// data_offsets agree and lie inside the data region, no two tensors overlap, names are unique.
struct SafetensorsHeader {
  uint64_t data_start = 0;          // offset of the data region in the file
  std::vector<TensorInfo> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;
};

// Parses the header of a whole file held in memory (`file`: the length field, the header and the
// data region). Error naming `where` (and the tensor) on anything malformed, on a header longer
// than kMaxSafetensorsHeaderBytes or with more than kMaxSafetensorsTensors entries.
SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file,
                                           const std::string& where);

// One memory-mapped .safetensors file, fully validated on open. Movable, not copyable.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);

  // In file order (sorted by begin offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  // The bytes of `t`, which must come from this file's tensors() / find().
  std::span<const std::byte> data(const TensorInfo& t) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return file_.path(); }

 private:
  explicit SafetensorsFile(MappedFile file) : file_(std::move(file)) {}

  MappedFile file_;
  uint64_t data_start_ = 0;  // offset of the data region in the file
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// A model directory: DIR/model.safetensors, or DIR/model.safetensors.index.json plus the shards
// its weight_map names. When both exist, model.safetensors wins (as in transformers). open_dir
// also accepts the path of a single .safetensors file.
class SafetensorsModel {
 public:
  static SafetensorsModel open_dir(const std::filesystem::path& dir);

  std::vector<std::string> names() const;               // sorted
  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  // The bytes of tensor `name`; Error naming the tensor and the directory if absent.
  std::span<const std::byte> data(std::string_view name) const;
  // The path of the file holding `name` (for error messages); Error if absent.
  std::string file_of(std::string_view name) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  struct Entry {
    size_t file = 0;    // index into files_
    size_t tensor = 0;  // index into files_[file].tensors()
  };
  const Entry& entry(std::string_view name) const;

  std::filesystem::path dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Entry, std::less<>> entries_;
};

// Writes one file atomically (temp file + fsync + rename), streaming the tensor bytes. Within the
// file, tensors are laid out by element size, largest first (stable otherwise), so that each
// starts aligned to its element size; the data region starts at a multiple of 8.
// Errors (before anything is written) on duplicate or empty names, negative dims, or a byte count
// that is not numel * dtype_size.
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes a model directory: one model.safetensors if all tensor bytes fit in max_shard_bytes, else
// model-0000i-of-0000n.safetensors shards (tensors in the given order, a new shard when the next
// tensor would exceed the limit; a tensor larger than the limit gets its own shard) plus
// model.safetensors.index.json = {"metadata": {"total_size": N}, "weight_map": {name: shard}}.
// Every shard carries `metadata`. model*.safetensors / index files of a previous save that the new
// save does not overwrite are removed only after the new files are in place, so an interrupted
// save leaves a loadable model (old or new) rather than an empty directory.
void write_safetensors_dir(const std::filesystem::path& dir, const std::vector<TensorData>& tensors,
                           uint64_t max_shard_bytes = 5ull << 30,
                           const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace trellis::model
