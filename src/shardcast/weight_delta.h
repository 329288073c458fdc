// Weight deltas (issue 26): after one RL step at RL learning rates most bf16 (or FP8) weights are
// bit-identical to the version before, so a version can travel as the elements that changed.
//
// A delta is computed over a weights file's regions (weight_regions: the safetensors header,
// then each tensor with its dtype's element size). Each region is cut into blocks of at most
// kDeltaBlockElements elements; a block with changes is one zstd frame of
//
//   the changed elements' gaps (index - previous index - 1, LEB128), then
//   the changes' values, byte plane by byte plane: byte 0 of every value, then byte 1, ...
//
// where a value is the zigzag of (new - old) taken as an unsigned integer of the element's width.
// A change of a few ulps is a small number, whose high planes are zeros and compress to nothing,
// so a delta costs about a byte per changed element for its position plus a fraction of one for
// its value: less than the changed elements' own bytes.
//
// File layout (all integers little-endian):
//
//   "TRLDELTA"  the blocks' zstd frames, in file order  footer JSON  u64 footer size  "TRLDELTA"
//
// where the footer is {"format": "trellis-delta/1", "size": bytes of the file it makes,
// "blocks": [[offset, elements, element size, changed, raw bytes, compressed bytes], ...]}, the
// blocks covering [0, size) in order (a block without changes has no frame).
//
// Applying never writes in place: the result goes to a new file and is accepted only when every
// tensor matches the trainer's signed hash. So a delta applied to the wrong base, a corrupt one,
// or one applied twice never yields wrong weights: a tensor that does not match after the delta
// but already matched in the base (the delta was applied before) is taken from the base, and any
// other mismatch is an Error, after which the caller fetches the full version.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/files.h"
#include "shardcast/manifest.h"

namespace trellis::shardcast {

inline constexpr int64_t kDeltaBlockElements = int64_t{1} << 20;
inline constexpr size_t kMaxDeltaFooterBytes = size_t{64} << 20;
// A safetensors header longer than this is not parsed for tensors (the file is then one region of
// bytes): the limit of model/safetensors.h, which shardcast cannot link (it stays torch-free).
inline constexpr uint64_t kMaxWeightsHeaderBytes = 100'000'000;

// Random-access bytes of a weights file: one file, or a version's shards on a server.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual int64_t size() const = 0;
  // Copies [offset, offset + out.size()) into `out`; the range must lie inside size().
  virtual void read(int64_t offset, std::span<char> out) const = 0;
};

class FileWeights : public WeightSource {
 public:
  explicit FileWeights(const std::filesystem::path& path);
  int64_t size() const override;
  void read(int64_t offset, std::span<char> out) const override;

 private:
  MappedFile map_;
};

// Version `entry`'s full file as the shards in `dir` (which must be complete and verified).
class ShardWeights : public WeightSource {
 public:
  ShardWeights(const std::filesystem::path& dir, const VersionEntry& entry);
  int64_t size() const override { return size_; }
  void read(int64_t offset, std::span<char> out) const override;

 private:
  std::vector<MappedFile> shards_;
  int64_t shard_size_ = 0, size_ = 0;
};

// A byte range of a weights file and the width of its elements.
struct WeightRegion {
  std::string name;
  int64_t offset = 0, size = 0;
  int element_size = 1;
};

// A safetensors file's regions: "__header__" (its length and JSON header), then every tensor in
// file order with its dtype's width; bytes no tensor claims are single-byte regions. A file that
// is not safetensors is one single-byte region, "__file__". Together they cover the file.
std::vector<WeightRegion> weight_regions(const WeightSource& file);

// The SHA-256 of every region: the per-tensor hashes of a signed manifest.
std::vector<TensorHash> hash_regions(const WeightSource& file,
                                     const std::vector<WeightRegion>& regions);

struct DeltaStats {
  int64_t bytes = 0;             // of the delta file
  int64_t elements = 0;          // in all regions
  int64_t changed_elements = 0;  // that differ from the base
  int64_t changed_bytes = 0;     // those elements' bytes
};

// Writes to `out` (atomically) the delta that turns `base` into `target`, over `target`'s
// regions. nullopt when the two differ in size (no element-wise delta exists).
std::optional<DeltaStats> make_delta(const WeightSource& base, const WeightSource& target,
                                     const std::vector<WeightRegion>& regions,
                                     const std::filesystem::path& out);

// Where apply_delta writes its result: bytes at offsets (every byte at least once), then
// commit(). Destroyed without commit(), it leaves nothing behind.
class WeightSink {
 public:
  virtual ~WeightSink() = default;
  virtual void write_at(int64_t offset, const char* data, size_t n) = 0;
  virtual void commit() = 0;
};

// One file, written as PATH.partial and renamed to PATH by commit().
class FileSink : public WeightSink {
 public:
  explicit FileSink(const std::filesystem::path& path);
  ~FileSink() override;
  void write_at(int64_t offset, const char* data, size_t n) override;
  void commit() override;

 private:
  std::filesystem::path path_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// The shard files of a `size`-byte file cut every `shard_size` bytes (shard_file_name(i, kind) in
// `dir`): a relay makes a version's shards straight from its delta, without writing the whole
// file first. Each is written as NAME.partial, opened per write (a large model has thousands of
// shards), and renamed by commit().
class ShardSink : public WeightSink {
 public:
  ShardSink(const std::filesystem::path& dir, int64_t size, int64_t shard_size, FileKind kind);
  ~ShardSink() override;
  void write_at(int64_t offset, const char* data, size_t n) override;
  void commit() override;

 private:
  std::filesystem::path partial(size_t index) const;

  std::filesystem::path dir_;
  int64_t shard_size_;
  size_t shard_count_;
  FileKind kind_;
  bool committed_ = false;
};

// Applies `delta` (its bytes) to `base` and writes the result to `out`, committing it only when
// every tensor matches `tensors` (contiguous, covering the result): then the result is the signed
// file, byte for byte. Error naming `where` and the tensor or the delta's field when the delta is
// malformed, made for a base of another size, or a tensor of the result does not match.
void apply_delta(const WeightSource& base, std::string_view delta,
                 const std::vector<TensorHash>& tensors, WeightSink& out, const std::string& where);
// The same from a delta file, into the file `out`.
void apply_delta(const WeightSource& base, const std::filesystem::path& delta,
                 const std::vector<TensorHash>& tensors, const std::filesystem::path& out,
                 const std::string& where);

}  // namespace trellis::shardcast
