#include "shardcast/weight_delta.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <type_traits>

#include <zstd.h>

#include "common/error.h"
#include "common/hashing.h"
#include "common/json.h"

namespace trellis::shardcast {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kMagic = "TRLDELTA";
constexpr const char* kFormat = "trellis-delta/1";
constexpr int kZstdLevel = 3;
constexpr int64_t kReadChunk = int64_t{16} << 20;  // bytes hashed or copied at once

// Bytes per element of a safetensors dtype; 1 for one we do not know (compared byte by byte).
int dtype_width(const std::string& dtype) {
  static const std::map<std::string, int> widths = {
      {"F64", 8},     {"I64", 8},     {"U64", 8},  {"F32", 4}, {"I32", 4},
      {"U32", 4},     {"F16", 2},     {"BF16", 2}, {"I16", 2}, {"U16", 2},
      {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I8", 1},   {"U8", 1},  {"BOOL", 1}};
  const auto it = widths.find(dtype);
  return it == widths.end() ? 1 : it->second;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Reads a LEB128 value at `pos`; nullopt when it runs past `end` or over 64 bits.
std::optional<uint64_t> get_varint(const std::string& in, size_t& pos, size_t end) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && pos < end; shift += 7) {
    const auto byte = static_cast<uint8_t>(in[pos++]);
    v |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return v;
  }
  return std::nullopt;
}

template <typename T>
T zigzag(T d) {
  using S = std::make_signed_t<T>;
  return static_cast<T>(static_cast<T>(d << 1) ^
                        static_cast<T>(static_cast<S>(d) >> (sizeof(T) * 8 - 1)));
}

template <typename T>
T unzigzag(T z) {
  return static_cast<T>((z >> 1) ^ static_cast<T>(0 - (z & 1)));
}

// Appends the raw (uncompressed) block of the elements of `target` that differ from `base`:
// gaps, then value planes. Returns how many differ.
template <typename T>
int64_t encode_block(const char* base, const char* target, int64_t count, std::string& raw) {
  constexpr int64_t kRun = 64 / sizeof(T);  // elements compared at once before looking closer
  std::vector<T> values;
  int64_t prev = -1;
  for (int64_t run = 0; run < count; run += kRun) {
    const int64_t n = std::min(kRun, count - run);
    if (std::memcmp(base + run * sizeof(T), target + run * sizeof(T), n * sizeof(T)) == 0) continue;
    for (int64_t i = run; i < run + n; ++i) {
      T a, b;
      std::memcpy(&a, base + i * sizeof(T), sizeof(T));
      std::memcpy(&b, target + i * sizeof(T), sizeof(T));
      if (a == b) continue;
      put_varint(raw, static_cast<uint64_t>(i - prev - 1));
      prev = i;
      values.push_back(zigzag(static_cast<T>(b - a)));
    }
  }
  for (size_t plane = 0; plane < sizeof(T); ++plane)
    for (const T v : values) raw.push_back(static_cast<char>(v >> (8 * plane)));
  return static_cast<int64_t>(values.size());
}

// Applies a decoded block to `block` (the base's elements, changed in place). Error when the
// gaps run past the block or the planes do not fill the rest of `raw` exactly.
template <typename T>
void decode_block(const std::string& raw, int64_t changed, char* block, int64_t count,
                  const std::string& where) {
  size_t pos = 0;
  std::vector<int64_t> index(static_cast<size_t>(changed));
  int64_t prev = -1;
  for (auto& at : index) {
    const auto gap = get_varint(raw, pos, raw.size());
    if (!gap || *gap >= static_cast<uint64_t>(count - prev - 1))
      fail(where, "a changed element's position lies outside its block");
    at = prev + 1 + static_cast<int64_t>(*gap);
    prev = at;
  }
  if (raw.size() - pos != static_cast<size_t>(changed) * sizeof(T))
    fail(where, "the values do not fill the block's {} raw bytes", raw.size());
  const char* planes = raw.data() + pos;
  for (int64_t k = 0; k < changed; ++k) {
    T z = 0;
    for (size_t plane = 0; plane < sizeof(T); ++plane)
      z |= static_cast<T>(static_cast<T>(static_cast<uint8_t>(planes[plane * changed + k]))
                          << (8 * plane));
    T v;
    std::memcpy(&v, block + index[k] * sizeof(T), sizeof(T));
    v = static_cast<T>(v + unzigzag(z));
    std::memcpy(block + index[k] * sizeof(T), &v, sizeof(T));
  }
}

int64_t encode(int width, const char* base, const char* target, int64_t count, std::string& raw) {
  switch (width) {
    case 1:
      return encode_block<uint8_t>(base, target, count, raw);
    case 2:
      return encode_block<uint16_t>(base, target, count, raw);
    case 4:
      return encode_block<uint32_t>(base, target, count, raw);
    default:
      return encode_block<uint64_t>(base, target, count, raw);
  }
}

void decode(int width, const std::string& raw, int64_t changed, char* block, int64_t count,
            const std::string& where) {
  switch (width) {
    case 1:
      return decode_block<uint8_t>(raw, changed, block, count, where);
    case 2:
      return decode_block<uint16_t>(raw, changed, block, count, where);
    case 4:
      return decode_block<uint32_t>(raw, changed, block, count, where);
    default:
      return decode_block<uint64_t>(raw, changed, block, count, where);
  }
}

std::string region_hash(const WeightSource& file, int64_t offset, int64_t size) {
  Sha256Stream h;
  std::string buf;
  for (int64_t at = 0; at < size; at += kReadChunk) {
    buf.resize(static_cast<size_t>(std::min(kReadChunk, size - at)));
    file.read(offset + at, buf);
    h.update(buf);
  }
  return h.hex();
}

struct Block {
  int64_t offset, count, width, changed, raw, packed;
};

// The footer's blocks, checked against the delta's size and the file it makes, before anything
// is allocated for them.
std::vector<Block> read_footer(std::string_view delta, int64_t target_size,
                               const std::string& where) {
  const size_t m = kMagic.size();
  if (delta.size() < 2 * m + 8 || delta.substr(0, m) != kMagic ||
      delta.substr(delta.size() - m) != kMagic)
    fail(where, "not a trellis delta (no TRLDELTA marks at both ends)");
  uint64_t footer_size = 0;
  std::memcpy(&footer_size, delta.data() + delta.size() - m - 8, 8);
  if (footer_size > kMaxDeltaFooterBytes || footer_size > delta.size() - 2 * m - 8)
    fail(where, "footer of {} bytes does not fit the delta's {}", footer_size, delta.size());
  const size_t payload_end = delta.size() - m - 8 - footer_size;
  const Json footer = parse_json(delta.substr(payload_end, footer_size), where);
  if (json_required<std::string>(footer, "format", where) != kFormat)
    fail(where, "unknown delta format (expected {})", kFormat);
  if (json_required<int64_t>(footer, "size", where) != target_size)
    fail(where, "the delta makes a file of {} bytes, the base has {}",
         footer.at("size").get<int64_t>(), target_size);
  if (!footer.contains("blocks") || !footer.at("blocks").is_array())
    fail(where, "missing array field 'blocks'");
  std::vector<Block> blocks;
  int64_t end = 0;
  size_t payload = m;
  for (size_t i = 0; i < footer.at("blocks").size(); ++i) {
    const std::string at = fmt::format("{}: blocks[{}]", where, i);
    // Each element checked before conversion: nlohmann's is undefined for a float out of range.
    const Json& entry = footer.at("blocks")[i];
    if (!entry.is_array() || entry.size() != 6) fail(at, "a block is a list of 6 integers");
    std::vector<int64_t> f;
    for (const Json& x : entry) {
      if (!json_fits_integer<int64_t>(x)) fail(at, "a block is a list of 6 integers");
      f.push_back(x.get<int64_t>());
    }
    const Block b{f[0], f[1], f[2], f[3], f[4], f[5]};
    if (b.width != 1 && b.width != 2 && b.width != 4 && b.width != 8)
      fail(at, "element size {} is not 1, 2, 4 or 8", b.width);
    if (b.offset != end || b.count <= 0 || b.count > kDeltaBlockElements ||
        b.count > (target_size - end) / b.width)
      fail(at, "{} elements at {} do not follow the block before it within {} bytes", b.count,
           b.offset, target_size);
    if (b.changed < 0 || b.changed > b.count || b.raw < 0 || b.packed < 0 ||
        b.raw > b.changed * (10 + b.width) || (b.changed == 0) != (b.packed == 0) ||
        static_cast<uint64_t>(b.packed) > payload_end - payload)
      fail(at, "{} changed, {} raw and {} compressed bytes do not fit", b.changed, b.raw, b.packed);
    end += b.count * b.width;
    payload += static_cast<size_t>(b.packed);
    blocks.push_back(b);
  }
  if (end != target_size) fail(where, "the blocks cover {} of {} bytes", end, target_size);
  if (payload != payload_end)
    fail(where, "{} bytes between the blocks and the footer", payload_end - payload);
  return blocks;
}

}  // namespace

FileWeights::FileWeights(const fs::path& path) : map_(path) {}

int64_t FileWeights::size() const { return static_cast<int64_t>(map_.bytes().size()); }

void FileWeights::read(int64_t offset, std::span<char> out) const {
  std::memcpy(out.data(), map_.bytes().data() + offset, out.size());
}

ShardWeights::ShardWeights(const fs::path& dir, const VersionEntry& entry)
    : shard_size_(entry.shard_size), size_(entry.size) {
  for (size_t i = 0; i < entry.shards.size(); ++i) {
    const fs::path path = dir / shard_file_name(i);
    shards_.emplace_back(path);
    if (static_cast<int64_t>(shards_.back().bytes().size()) != entry.shards[i].size)
      fail(path.string(), "holds {} bytes, the manifest says {}", shards_.back().bytes().size(),
           entry.shards[i].size);
  }
}

void ShardWeights::read(int64_t offset, std::span<char> out) const {
  size_t done = 0;
  while (done < out.size()) {
    const int64_t at = offset + static_cast<int64_t>(done);
    const auto& shard = shards_.at(static_cast<size_t>(at / shard_size_)).bytes();
    const auto within = static_cast<size_t>(at % shard_size_);
    const size_t n = std::min(out.size() - done, shard.size() - within);
    std::memcpy(out.data() + done, shard.data() + within, n);
    done += n;
  }
}

std::vector<WeightRegion> weight_regions(const WeightSource& file) {
  const int64_t size = file.size();
  const std::vector<WeightRegion> whole = {{"__file__", 0, size, 1}};
  if (size < 8) return whole;
  uint64_t header_size = 0;
  file.read(0, {reinterpret_cast<char*>(&header_size), 8});
  if (header_size > static_cast<uint64_t>(size - 8) || header_size > kMaxWeightsHeaderBytes)
    return whole;
  const int64_t data_start = 8 + static_cast<int64_t>(header_size);
  std::string header(header_size, '\0');
  file.read(8, header);
  std::vector<WeightRegion> tensors;
  try {
    const Json j = parse_json(header, "safetensors header");
    if (!j.is_object()) return whole;
    for (const auto& [name, t] : j.items()) {
      if (name == "__metadata__") continue;
      const auto offsets = t.at("data_offsets").get<std::vector<int64_t>>();
      if (offsets.size() != 2 || offsets[0] < 0 || offsets[1] < offsets[0] ||
          offsets[1] > size - data_start)
        return whole;
      const int width = dtype_width(t.at("dtype").get<std::string>());
      const int64_t bytes = offsets[1] - offsets[0];
      tensors.push_back({name, data_start + offsets[0], bytes, bytes % width ? 1 : width});
    }
  } catch (const std::exception&) {
    return whole;  // not safetensors: compared byte by byte
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const auto& a, const auto& b) { return a.offset < b.offset; });
  std::vector<WeightRegion> regions = {{"__header__", 0, data_start, 1}};
  int64_t end = data_start;
  for (auto& t : tensors) {
    if (t.size == 0) continue;
    if (t.offset < end) return whole;  // overlapping tensors
    if (t.offset > end)
      regions.push_back({fmt::format("__bytes_{}__", end), end, t.offset - end, 1});
    end = t.offset + t.size;
    regions.push_back(std::move(t));
  }
  if (end < size) regions.push_back({fmt::format("__bytes_{}__", end), end, size - end, 1});
  return regions;
}

std::vector<TensorHash> hash_regions(const WeightSource& file,
                                     const std::vector<WeightRegion>& regions) {
  std::vector<TensorHash> out;
  for (const auto& r : regions)
    out.push_back({r.name, r.offset, r.size, region_hash(file, r.offset, r.size)});
  return out;
}

std::optional<DeltaStats> make_delta(const WeightSource& base, const WeightSource& target,
                                     const std::vector<WeightRegion>& regions,
                                     const fs::path& out) {
  if (base.size() != target.size()) return std::nullopt;
  AtomicFileWriter file(out);
  file.write(kMagic.data(), kMagic.size());
  DeltaStats stats;
  stats.bytes = static_cast<int64_t>(kMagic.size());
  Json blocks = Json::array();
  std::string a, b, raw, packed;
  for (const auto& r : regions) {
    for (int64_t at = 0; at < r.size;) {
      const int64_t count = std::min(kDeltaBlockElements, (r.size - at) / r.element_size);
      const int64_t bytes = count * r.element_size;
      a.resize(static_cast<size_t>(bytes));
      b.resize(static_cast<size_t>(bytes));
      base.read(r.offset + at, a);
      target.read(r.offset + at, b);
      raw.clear();
      const int64_t changed = encode(r.element_size, a.data(), b.data(), count, raw);
      packed.clear();
      if (changed > 0) {
        packed.resize(ZSTD_compressBound(raw.size()));
        const size_t n =
            ZSTD_compress(packed.data(), packed.size(), raw.data(), raw.size(), kZstdLevel);
        if (ZSTD_isError(n)) fail(out.string(), "zstd: {}", ZSTD_getErrorName(n));
        packed.resize(n);
        file.write(packed.data(), packed.size());
      }
      blocks.push_back(
          Json::array({r.offset + at, count, r.element_size, changed,
                       static_cast<int64_t>(raw.size()), static_cast<int64_t>(packed.size())}));
      stats.elements += count;
      stats.changed_elements += changed;
      stats.changed_bytes += changed * r.element_size;
      stats.bytes += static_cast<int64_t>(packed.size());
      at += bytes;
    }
  }
  const std::string footer =
      Json{{"format", kFormat}, {"size", target.size()}, {"blocks", std::move(blocks)}}.dump();
  const uint64_t footer_size = footer.size();
  file.write(footer.data(), footer.size());
  file.write(&footer_size, 8);
  file.write(kMagic.data(), kMagic.size());
  file.commit();
  stats.bytes += static_cast<int64_t>(footer.size() + 8 + kMagic.size());
  return stats;
}

namespace {

void pwrite_all(int fd, const std::string& path, int64_t offset, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, data, n, offset);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(path, "write failed: {}", std::strerror(errno));
    data += w;
    n -= static_cast<size_t>(w);
    offset += w;
  }
}

int open_for_writing(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);
  if (fd < 0) fail(path, "cannot create the file: {}", std::strerror(errno));
  return fd;
}

void fsync_or_fail(int fd, const std::string& path) {
  if (::fsync(fd) != 0) fail(path, "fsync failed: {}", std::strerror(errno));
}

}  // namespace

FileSink::FileSink(const fs::path& path) : path_(path), tmp_(path.string() + ".partial") {
  if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
  fd_ = open_for_writing(tmp_, O_TRUNC);
}

FileSink::~FileSink() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void FileSink::write_at(int64_t offset, const char* data, size_t n) {
  pwrite_all(fd_, tmp_, offset, data, n);
}

void FileSink::commit() {
  fsync_or_fail(fd_, tmp_);
  ::close(fd_);
  fd_ = -1;
  fs::rename(tmp_, path_);
  committed_ = true;
}

ShardSink::ShardSink(const fs::path& dir, int64_t size, int64_t shard_size, FileKind kind)
    : dir_(dir), shard_size_(shard_size), kind_(kind) {
  if (shard_size <= 0 || size <= 0) fail(dir.string(), "no shards to write");
  shard_count_ = static_cast<size_t>((size + shard_size - 1) / shard_size);
  fs::create_directories(dir);
  for (size_t i = 0; i < shard_count_; ++i) {
    std::error_code ec;  // a crashed earlier attempt's leftovers
    fs::remove(partial(i), ec);
  }
}

ShardSink::~ShardSink() {
  if (committed_) return;
  for (size_t i = 0; i < shard_count_; ++i) {
    std::error_code ec;
    fs::remove(partial(i), ec);
  }
}

fs::path ShardSink::partial(size_t index) const {
  return dir_ / (shard_file_name(index, kind_) + ".partial");
}

void ShardSink::write_at(int64_t offset, const char* data, size_t n) {
  while (n > 0) {
    const auto index = static_cast<size_t>(offset / shard_size_);
    const int64_t within = offset % shard_size_;
    const size_t part =
        static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(n), shard_size_ - within));
    const std::string path = partial(index).string();
    const int fd = open_for_writing(path, 0);
    try {
      pwrite_all(fd, path, within, data, part);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    offset += static_cast<int64_t>(part);
    data += part;
    n -= part;
  }
}

void ShardSink::commit() {
  for (size_t i = 0; i < shard_count_; ++i) {
    const std::string path = partial(i).string();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail(path, "cannot open the shard: {}", std::strerror(errno));
    const bool synced = ::fsync(fd) == 0;
    ::close(fd);
    if (!synced) fail(path, "fsync failed: {}", std::strerror(errno));
  }
  for (size_t i = 0; i < shard_count_; ++i)
    fs::rename(partial(i), dir_ / shard_file_name(i, kind_));
  committed_ = true;
}

void apply_delta(const WeightSource& base, const fs::path& delta_path,
                 const std::vector<TensorHash>& tensors, const fs::path& out,
                 const std::string& where) {
  const MappedFile map(delta_path);
  FileSink file(out);
  apply_delta(
      base, std::string_view(reinterpret_cast<const char*>(map.bytes().data()), map.bytes().size()),
      tensors, file, where);
}

void apply_delta(const WeightSource& base, std::string_view delta,
                 const std::vector<TensorHash>& tensors, WeightSink& file,
                 const std::string& where) {
  const std::vector<Block> blocks = read_footer(delta, base.size(), where);
  int64_t covered = 0;
  for (const auto& t : tensors) covered = t.offset == covered ? covered + t.size : -1;
  if (tensors.empty() || covered != base.size())
    fail(where, "the tensor hashes do not cover the {} bytes of the file", base.size());

  size_t tensor = 0;
  Sha256Stream hash;
  // Feeds [offset, offset + bytes.size()) of the result to the tensors' hashes, checking each
  // tensor as its last byte goes in.
  auto check = [&](int64_t offset, std::string_view bytes) {
    while (!bytes.empty()) {
      const TensorHash& t = tensors[tensor];
      const auto n = static_cast<size_t>(
          std::min<int64_t>(static_cast<int64_t>(bytes.size()), t.offset + t.size - offset));
      hash.update(bytes.substr(0, n));
      bytes.remove_prefix(n);
      offset += static_cast<int64_t>(n);
      if (offset < t.offset + t.size) continue;
      if (hash.hex() != t.sha256) {
        // Applied twice (the base already is this version), this tensor is the base's.
        if (region_hash(base, t.offset, t.size) != t.sha256)
          fail(where, "tensor '{}' does not match the trainer's signed hash", t.name);
        std::string buf;
        for (int64_t at = 0; at < t.size; at += kReadChunk) {
          buf.resize(static_cast<size_t>(std::min(kReadChunk, t.size - at)));
          base.read(t.offset + at, buf);
          file.write_at(t.offset + at, buf.data(), buf.size());
        }
      }
      hash = Sha256Stream();
      ++tensor;
    }
  };

  size_t payload = kMagic.size();
  std::string block, raw;
  for (const auto& b : blocks) {
    const int64_t bytes = b.count * b.width;
    block.resize(static_cast<size_t>(bytes));
    base.read(b.offset, block);
    if (b.changed > 0) {
      raw.resize(static_cast<size_t>(b.raw));
      const size_t n = ZSTD_decompress(raw.data(), raw.size(), delta.data() + payload,
                                       static_cast<size_t>(b.packed));
      const std::string at = fmt::format("{}: block at byte {}", where, b.offset);
      if (ZSTD_isError(n) || n != raw.size())
        fail(at, "does not decompress to its {} raw bytes", raw.size());
      decode(static_cast<int>(b.width), raw, b.changed, block.data(), b.count, at);
      payload += static_cast<size_t>(b.packed);
    }
    file.write_at(b.offset, block.data(), block.size());
    check(b.offset, block);
  }
  file.commit();
}

}  // namespace trellis::shardcast
