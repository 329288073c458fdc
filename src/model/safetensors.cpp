#include "model/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <system_error>

#include <fmt/ranges.h>

#include "common/error.h"
#include "common/json.h"

namespace trellis::model {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts are not supported");

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::F64, "F64", 8},   {DType::F32, "F32", 4},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8},         {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},   {DType::I8, "I8", 1},           {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1}, {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};

const DTypeEntry& dtype_entry(DType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  throw Error(fmt::format("invalid DType value {}", static_cast<int>(dtype)));
}

uint64_t read_u64_le(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

std::string u64_le(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

// numel * dtype_size of a shape, or an Error naming `where` on a negative dim or an overflow.
uint64_t shape_nbytes(const std::vector<int64_t>& shape, DType dtype, const std::string& where) {
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) fail(where, "negative dimension {} in shape {}", d, shape);
    if (__builtin_mul_overflow(numel, d, &numel)) fail(where, "shape {} overflows", shape);
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(dtype), &nbytes)) {
    fail(where, "shape {} overflows", shape);
  }
  return nbytes;
}

std::string tensor_where(const std::string& file, std::string_view name) {
  return fmt::format("{}, tensor '{}'", file, name);
}

// Parses the header JSON, additionally rejecting duplicate keys in any object (nlohmann keeps the
// last one silently; a duplicated tensor name would make the file ambiguous).
Json parse_header_json(std::string_view text, const std::string& where) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  bool duplicate_at_top = false;
  size_t tensors = 0;  // top-level keys but __metadata__
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::array_start:
      case Json::parse_event_t::object_start:
        if (depth >= kMaxJsonDepth) {
          fail(where, "header is nested deeper than {} levels", kMaxJsonDepth);
        }
        if (event == Json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        // Counted as they come, so that a header of millions of entries stops before its tree
        // is built.
        if (open_objects.size() == 1 && parsed != "__metadata__" &&
            ++tensors > kMaxSafetensorsTensors) {
          fail(where, "header has more than {} tensors, the limit per file",
               kMaxSafetensorsTensors);
        }
        if (!open_objects.empty() && parsed.is_string() &&
            !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
          duplicate = parsed.get<std::string>();
          duplicate_at_top = open_objects.size() == 1;
        }
        break;
      default:
        break;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::parse_error& e) {
    fail(where, "header is not valid JSON (error at byte {} of the header)", e.byte);
  } catch (const Json::out_of_range&) {  // a number such as 1e400
    fail(where, "header is not valid JSON (a number is too large for a double)");
  }
  if (!duplicate.empty()) {
    if (duplicate_at_top) fail(where, "duplicate tensor name '{}' in header", duplicate);
    fail(where, "duplicate key '{}' in header", duplicate);
  }
  return j;
}

std::vector<int64_t> parse_shape(const Json& v, const std::string& where) {
  if (!v.contains("shape")) fail(where, "missing field 'shape'");
  const Json& s = v.at("shape");
  if (!s.is_array()) fail(where, "field 'shape' must be a list of integers, not {}", s.type_name());
  std::vector<int64_t> shape;
  for (const Json& d : s) {
    if (d.is_number_unsigned()) {
      uint64_t u = d.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail(where, "dimension {} in field 'shape' is too large", u);
      }
      shape.push_back(static_cast<int64_t>(u));
    } else if (d.is_number_integer()) {
      fail(where, "negative dimension {} in field 'shape'", d.get<int64_t>());
    } else {
      fail(where, "field 'shape' must be a list of integers, found {}", d.type_name());
    }
  }
  return shape;
}

std::pair<uint64_t, uint64_t> parse_offsets(const Json& v, const std::string& where) {
  if (!v.contains("data_offsets")) fail(where, "missing field 'data_offsets'");
  const Json& o = v.at("data_offsets");
  if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() || !o[1].is_number_unsigned()) {
    fail(where, "field 'data_offsets' must be [begin, end] with non-negative integers, not {}",
         o.dump());
  }
  uint64_t begin = o[0].get<uint64_t>(), end = o[1].get<uint64_t>();
  if (begin > end) fail(where, "data_offsets [{}, {}] have begin > end", begin, end);
  return {begin, end};
}

// Checks names, shapes and byte counts of tensors about to be written; returns the byte sizes.
std::vector<uint64_t> validate_for_write(const std::vector<TensorData>& tensors,
                                         const std::string& where) {
  std::set<std::string_view> seen;
  std::vector<uint64_t> sizes;
  sizes.reserve(tensors.size());
  for (const TensorData& t : tensors) {
    if (t.name.empty()) fail(where, "cannot write a tensor with an empty name");
    if (t.name == "__metadata__") fail(where, "'__metadata__' is reserved, not a tensor name");
    std::string tw = tensor_where(where, t.name);
    if (!seen.insert(t.name).second) fail(tw, "duplicate tensor name '{}'", t.name);
    uint64_t nbytes = shape_nbytes(t.shape, t.dtype, tw);
    if (t.bytes.size() != nbytes) {
      fail(tw, "tensor '{}' has {} bytes, but dtype {} and shape {} need {}", t.name,
           t.bytes.size(), dtype_name(t.dtype), t.shape, nbytes);
    }
    sizes.push_back(nbytes);
  }
  return sizes;
}

// Writes already validated tensors as one file.
void write_file(const std::filesystem::path& path, std::vector<const TensorData*> tensors,
                const std::map<std::string, std::string>& metadata) {
  // Largest element size first keeps every tensor aligned to its element size.
  std::stable_sort(tensors.begin(), tensors.end(), [](const TensorData* a, const TensorData* b) {
    return dtype_size(a->dtype) > dtype_size(b->dtype);
  });
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorData* t : tensors) {
    uint64_t end = offset + t->bytes.size();
    header[t->name] = {
        {"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';

  AtomicFileWriter out(path);
  std::string prefix = u64_le(text.size()) + text;
  out.write(prefix.data(), prefix.size());
  for (const TensorData* t : tensors) out.write(t->bytes.data(), t->bytes.size());
  out.commit();
}

// Whether `name` is a file a previous write_safetensors_dir may have left: model.safetensors,
// the index, or model-<digits>-of-<digits>.safetensors.
bool is_model_file(const std::string& name) {
  if (name == kSingleFile || name == kIndexFile) return true;
  const std::string_view prefix = "model-", suffix = ".safetensors", mid = "-of-";
  std::string_view s = name;
  if (!s.starts_with(prefix) || !s.ends_with(suffix)) return false;
  s = s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
  size_t m = s.find(mid);
  if (m == std::string_view::npos) return false;
  auto digits = [](std::string_view d) {
    return !d.empty() &&
           std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(s.substr(0, m)) && digits(s.substr(m + mid.size()));
}

}  // namespace

size_t dtype_size(DType dtype) { return dtype_entry(dtype).size; }

std::string_view dtype_name(DType dtype) { return dtype_entry(dtype).name; }

DType parse_dtype(std::string_view name, const std::string& where) {
  for (const auto& e : kDTypes) {
    if (e.name == name) return e.dtype;
  }
  fail(where, "unknown dtype '{}'", name);
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- header ----

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> bytes,
                                           const std::string& where) {
  if (bytes.size() < 8) {
    fail(where, "not a safetensors file: {} bytes, too short for the 8-byte header length",
         bytes.size());
  }
  const uint64_t header_len = read_u64_le(bytes.data());
  if (header_len > bytes.size() - 8) {
    fail(where, "truncated file: header length {} exceeds the {} bytes after the length field",
         header_len, bytes.size() - 8);
  }
  if (header_len > kMaxSafetensorsHeaderBytes) {
    fail(where, "header length {} is larger than the limit of {} bytes", header_len,
         kMaxSafetensorsHeaderBytes);
  }
  SafetensorsHeader h;
  h.data_start = 8 + header_len;
  const uint64_t data_size = bytes.size() - h.data_start;

  std::string_view text(reinterpret_cast<const char*>(bytes.data()) + 8, header_len);
  Json header = parse_header_json(text, where);
  if (!header.is_object()) fail(where, "header is a JSON {}, not an object", header.type_name());

  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(where, "'__metadata__' must be an object of strings");
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string()) {
          fail(where, "'__metadata__' value of '{}' must be a string, not {}", k, v.type_name());
        }
        h.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string tw = tensor_where(where, name);
    if (!value.is_object()) fail(tw, "header entry must be an object, not {}", value.type_name());
    TensorInfo t;
    t.name = name;
    t.dtype = parse_dtype(json_required<std::string>(value, "dtype", tw), tw);
    t.shape = parse_shape(value, tw);
    std::tie(t.begin, t.end) = parse_offsets(value, tw);
    if (t.end > data_size) {
      fail(tw,
           "tensor data out of range: data_offsets [{}, {}] end beyond the data region of {} "
           "bytes (truncated file or bad offsets)",
           t.begin, t.end, data_size);
    }
    uint64_t nbytes = shape_nbytes(t.shape, t.dtype, tw);
    if (t.end - t.begin != nbytes) {
      fail(
          tw,
          "length mismatch: data_offsets [{}, {}] span {} bytes, but dtype {} and shape {} need {}",
          t.begin, t.end, t.end - t.begin, dtype_name(t.dtype), t.shape, nbytes);
    }
    h.tensors.push_back(std::move(t));
  }

  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Empty tensors occupy no bytes and overlap nothing.
  const TensorInfo* last = nullptr;  // the non-empty tensor reaching furthest so far
  for (const TensorInfo& t : h.tensors) {
    if (t.begin == t.end) continue;
    if (last != nullptr && t.begin < last->end) {
      fail(where, "overlapping tensors '{}' [{}, {}) and '{}' [{}, {})", last->name, last->begin,
           last->end, t.name, t.begin, t.end);
    }
    if (last == nullptr || t.end > last->end) last = &t;
  }
  return h;
}

// ---- SafetensorsFile ----

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f{MappedFile(path)};
  SafetensorsHeader h = parse_safetensors_header(f.file_.bytes(), path.string());
  f.data_start_ = h.data_start;
  f.tensors_ = std::move(h.tensors);
  f.metadata_ = std::move(h.metadata);
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> SafetensorsFile::data(const TensorInfo& t) const {
  std::span<const std::byte> bytes = file_.bytes();
  if (t.begin > t.end || t.end > bytes.size() - data_start_) {
    fail(tensor_where(path().string(), t.name), "tensor is not part of this file");
  }
  return bytes.subspan(data_start_ + t.begin, t.end - t.begin);
}

// ---- SafetensorsModel ----

SafetensorsModel SafetensorsModel::open_dir(const std::filesystem::path& dir) {
  SafetensorsModel m;
  m.dir_ = dir;
  std::error_code ec;
  std::filesystem::path single;
  if (std::filesystem::is_regular_file(dir, ec)) {
    single = dir;
  } else if (!std::filesystem::is_directory(dir, ec)) {
    fail(dir.string(), "model directory not found");
  } else if (std::filesystem::exists(dir / kSingleFile, ec)) {
    single = dir / kSingleFile;
  }

  if (!single.empty()) {
    m.files_.push_back(SafetensorsFile::open(single));
    const auto& tensors = m.files_[0].tensors();
    for (size_t i = 0; i < tensors.size(); ++i) m.entries_.emplace(tensors[i].name, Entry{0, i});
    return m;
  }

  const std::filesystem::path index_path = dir / kIndexFile;
  const std::string iw = index_path.string();
  if (!std::filesystem::exists(index_path, ec)) {
    fail(dir.string(), "no {} or {} in the model directory", kSingleFile, kIndexFile);
  }
  Json index = read_json_file(iw);
  if (!index.is_object()) fail(iw, "index must be a JSON object, not {}", index.type_name());
  if (!index.contains("weight_map")) fail(iw, "missing field 'weight_map'");
  const Json& weight_map = index.at("weight_map");
  if (!weight_map.is_object()) fail(iw, "field 'weight_map' must be an object");

  std::map<std::string, size_t> shard_index;
  for (const auto& [name, value] : weight_map.items()) {
    if (!value.is_string()) {
      fail(iw, "weight_map entry for tensor '{}' must be a file name, not {}", name,
           value.type_name());
    }
    const std::string shard = value.get<std::string>();
    if (shard.empty() || shard == "." || shard == ".." ||
        shard.find_first_of("/\\") != std::string::npos) {
      fail(iw, "weight_map names shard '{}' for tensor '{}': not a plain file name", shard, name);
    }
    auto it = shard_index.find(shard);
    if (it == shard_index.end()) {
      const std::filesystem::path shard_path = dir / shard;
      if (!std::filesystem::is_regular_file(shard_path, ec)) {
        fail(iw, "missing shard: weight_map names '{}' for tensor '{}', but {} does not exist",
             shard, name, shard_path.string());
      }
      m.files_.push_back(SafetensorsFile::open(shard_path));
      it = shard_index.emplace(shard, m.files_.size() - 1).first;
    }
    const SafetensorsFile& file = m.files_[it->second];
    const TensorInfo* info = file.find(name);
    if (info == nullptr) {
      fail(file.path().string(), "tensor '{}' is listed in {} but missing from this shard", name,
           kIndexFile);
    }
    m.entries_.emplace(name, Entry{it->second, static_cast<size_t>(info - file.tensors().data())});
  }
  return m;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

const TensorInfo* SafetensorsModel::find(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return nullptr;
  return &files_[it->second.file].tensors()[it->second.tensor];
}

const SafetensorsModel::Entry& SafetensorsModel::entry(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(dir_.string(), "tensor '{}' not found in the model", name);
  return it->second;
}

std::span<const std::byte> SafetensorsModel::data(std::string_view name) const {
  const Entry& e = entry(name);
  const SafetensorsFile& f = files_[e.file];
  return f.data(f.tensors()[e.tensor]);
}

std::string SafetensorsModel::file_of(std::string_view name) const {
  return files_[entry(name).file].path().string();
}

// ---- writing ----

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorData>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  validate_for_write(tensors, path.string());
  std::vector<const TensorData*> all;
  for (const TensorData& t : tensors) all.push_back(&t);
  std::filesystem::path parent = path.parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) fail(parent.string(), "cannot create directory: {}", ec.message());
  }
  write_file(path, std::move(all), metadata);
}

void write_safetensors_dir(const std::filesystem::path& dir, const std::vector<TensorData>& tensors,
                           uint64_t max_shard_bytes,
                           const std::map<std::string, std::string>& metadata) {
  const std::vector<uint64_t> sizes = validate_for_write(tensors, dir.string());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(dir.string(), "cannot create directory: {}", ec.message());

  // Split in the given order; a shard closes when the next tensor would push it over the limit.
  std::vector<std::vector<const TensorData*>> shards;
  uint64_t total = 0, current = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (shards.empty() || (!shards.back().empty() && current + sizes[i] > max_shard_bytes)) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(&tensors[i]);
    current += sizes[i];
    total += sizes[i];
  }

  std::set<std::string> written;
  if (shards.size() <= 1) {
    std::vector<const TensorData*> all;
    for (const TensorData& t : tensors) all.push_back(&t);
    write_file(dir / kSingleFile, std::move(all), metadata);
    written.insert(kSingleFile);
  } else {
    Json weight_map = Json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      for (const TensorData* t : shards[s]) weight_map[t->name] = name;
      write_file(dir / name, shards[s], metadata);
      written.insert(name);
    }
    Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_atomic(dir / kIndexFile, index.dump(2) + "\n");
    written.insert(kIndexFile);
  }

  // Only now remove what a previous save left behind.
  std::vector<std::filesystem::path> stale;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (is_model_file(name) && !written.count(name)) stale.push_back(entry.path());
  }
  if (ec) fail(dir.string(), "cannot list directory: {}", ec.message());
  for (const auto& p : stale) {
    if (!std::filesystem::remove(p, ec) && ec) {
      fail(p.string(), "cannot remove stale file: {}", ec.message());
    }
  }
}

}  // namespace trellis::model
