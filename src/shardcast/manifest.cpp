#include "shardcast/manifest.h"

#include <algorithm>
#include <fstream>

#include <sodium.h>

#include "common/files.h"

namespace trellis::shardcast {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFormat = "trellis-shardcast/1";

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// `j`.shards: sizes of `shard_size` but the last, adding up to `size`.
std::vector<ShardInfo> parse_shards(const Json& j, const std::string& at, int64_t shard_size,
                                    int64_t size) {
  if (!j.contains("shards") || !j.at("shards").is_array()) fail(at, "missing array field 'shards'");
  const Json& list = j.at("shards");
  if (list.size() > kMaxManifestShards)
    fail(at, "{} shards, more than the limit of {}", list.size(), kMaxManifestShards);
  std::vector<ShardInfo> shards;
  int64_t total = 0;
  for (size_t k = 0; k < list.size(); ++k) {
    const std::string sat = fmt::format("{}.shards[{}]", at, k);
    ShardInfo s{json_required<int64_t>(list[k], "size", sat),
                json_required<std::string>(list[k], "sha256", sat)};
    if (!is_sha256_hex(s.sha256)) fail(sat, "sha256 must be 64 lowercase hex digits");
    const bool last = k + 1 == list.size();
    if (s.size <= 0 || s.size > shard_size || (!last && s.size != shard_size))
      fail(sat, "shard size {} does not fit shard_size {}", s.size, shard_size);
    if (s.size > size - total)  // total <= size: no overflow
      fail(sat, "the shard sizes add up to more than the file's {} bytes", size);
    total += s.size;
    shards.push_back(std::move(s));
  }
  if (total != size) fail(at, "the shard sizes add up to {} bytes, not the file's {}", total, size);
  return shards;
}

// A version's tensor hashes: contiguous ranges from 0 to `size`.
std::vector<TensorHash> parse_tensors(const Json& list, const std::string& at, int64_t size) {
  if (!list.is_array()) fail(at, "must be an array");
  if (list.size() > kMaxManifestTensors)
    fail(at, "{} tensors, more than the limit of {}", list.size(), kMaxManifestTensors);
  std::vector<TensorHash> tensors;
  int64_t end = 0;
  for (size_t k = 0; k < list.size(); ++k) {
    const std::string tat = fmt::format("{}[{}]", at, k);
    TensorHash t{json_required<std::string>(list[k], "name", tat),
                 json_required<int64_t>(list[k], "offset", tat),
                 json_required<int64_t>(list[k], "size", tat),
                 json_required<std::string>(list[k], "sha256", tat)};
    if (t.name.empty() || t.name.size() > 1024 || t.name.find('\n') != std::string::npos)
      fail(tat, "a tensor name must be 1 to 1024 characters without a newline");
    if (!is_sha256_hex(t.sha256)) fail(tat, "sha256 must be 64 lowercase hex digits");
    if (t.offset != end || t.size <= 0 || t.size > size - end)
      fail(tat, "tensor '{}' at {} ({} bytes) does not follow the one before it at {} within {}",
           t.name, t.offset, t.size, end, size);
    end += t.size;
    tensors.push_back(std::move(t));
  }
  if (!tensors.empty() && end != size)
    fail(at, "the tensors cover {} bytes, not the file's {}", end, size);
  return tensors;
}

}  // namespace

std::string VersionEntry::signing_message() const {
  std::string m = fmt::format("{}\nversion {}\nstep {}\nsize {}\nsha256 {}\nshard_size {}\n",
                              kFormat, version, step, size, sha256, shard_size);
  for (const auto& s : shards) m += fmt::format("shard {} {}\n", s.size, s.sha256);
  for (const auto& t : tensors)
    m += fmt::format("tensor {} {} {} {}\n", t.offset, t.size, t.sha256, t.name);
  if (delta) {
    m += fmt::format("delta base {} size {} sha256 {} changed {} of {} ({} bytes)\n", delta->base,
                     delta->size, delta->sha256, delta->changed_elements, delta->elements,
                     delta->changed_bytes);
    for (const auto& s : delta->shards) m += fmt::format("delta_shard {} {}\n", s.size, s.sha256);
  }
  return m;
}

ShardedFile::ShardedFile(const VersionEntry& entry)
    : version(entry.version), size(entry.size), sha256(entry.sha256), shards(entry.shards) {}

ShardedFile ShardedFile::delta_of(const VersionEntry& entry) {
  ShardedFile f(entry);
  f.kind = FileKind::Delta;
  f.size = entry.delta.value().size;
  f.sha256 = entry.delta->sha256;
  f.shards = entry.delta->shards;
  return f;
}

void VersionEntry::sign(const Identity& trainer) {
  signer = trainer.address();
  signature = trainer.sign_hex(signing_message());
}

bool VersionEntry::signed_by(const std::string& trainer_public_key) const {
  return verify_signature(trainer_public_key, signing_message(), signature);
}

const VersionEntry* Manifest::find(int64_t version) const {
  for (const auto& v : versions)
    if (v.version == version) return &v;
  return nullptr;
}

VersionEntry* Manifest::find(int64_t version) {
  for (auto& v : versions)
    if (v.version == version) return &v;
  return nullptr;
}

const VersionEntry* Manifest::newest() const {
  return versions.empty() ? nullptr : &versions.back();
}

void Manifest::put(VersionEntry entry) {
  erase(entry.version);
  auto at =
      std::lower_bound(versions.begin(), versions.end(), entry.version,
                       [](const VersionEntry& v, int64_t version) { return v.version < version; });
  versions.insert(at, std::move(entry));
}

void Manifest::erase(int64_t version) {
  std::erase_if(versions, [&](const VersionEntry& v) { return v.version == version; });
}

Json to_json(const Manifest& manifest) {
  Json versions = Json::array();
  for (const auto& v : manifest.versions) {
    Json shards = Json::array();
    for (const auto& s : v.shards) shards.push_back({{"size", s.size}, {"sha256", s.sha256}});
    Json entry = {{"version", v.version},
                  {"step", v.step},
                  {"size", v.size},
                  {"hash", "sha256"},
                  {"sha256", v.sha256},
                  {"shard_size", v.shard_size},
                  {"shards", std::move(shards)},
                  {"signer", v.signer},
                  {"signature", v.signature},
                  {"complete", v.complete}};
    if (!v.tensors.empty()) {
      Json tensors = Json::array();
      for (const auto& t : v.tensors)
        tensors.push_back(
            {{"name", t.name}, {"offset", t.offset}, {"size", t.size}, {"sha256", t.sha256}});
      entry["tensors"] = std::move(tensors);
    }
    if (v.delta) {
      Json delta_shards = Json::array();
      for (const auto& s : v.delta->shards)
        delta_shards.push_back({{"size", s.size}, {"sha256", s.sha256}});
      entry["delta"] = {{"base", v.delta->base},
                        {"size", v.delta->size},
                        {"sha256", v.delta->sha256},
                        {"shards", std::move(delta_shards)},
                        {"changed_elements", v.delta->changed_elements},
                        {"elements", v.delta->elements},
                        {"changed_bytes", v.delta->changed_bytes}};
      entry["delta_complete"] = v.delta_complete;
    }
    versions.push_back(std::move(entry));
  }
  return {{"format", kFormat}, {"versions", std::move(versions)}};
}

Manifest manifest_from_json(const Json& json, const std::string& where) {
  if (json_required<std::string>(json, "format", where) != kFormat)
    fail(where, "unknown manifest format '{}' (expected {})", json.at("format").get<std::string>(),
         kFormat);
  if (!json.contains("versions") || !json.at("versions").is_array())
    fail(where, "missing array field 'versions'");
  if (json.at("versions").size() > kMaxManifestVersions) {
    fail(where, "{} versions, more than the limit of {}", json.at("versions").size(),
         kMaxManifestVersions);
  }
  Manifest m;
  for (size_t i = 0; i < json.at("versions").size(); ++i) {
    const Json& j = json.at("versions")[i];
    VersionEntry v;
    const std::string at = fmt::format("{}: versions[{}]", where, i);
    v.version = json_required<int64_t>(j, "version", at);
    v.step = json_required<int64_t>(j, "step", at);
    v.size = json_required<int64_t>(j, "size", at);
    v.sha256 = json_required<std::string>(j, "sha256", at);
    v.shard_size = json_required<int64_t>(j, "shard_size", at);
    v.signer = json_optional<std::string>(j, "signer", "", at);
    v.signature = json_optional<std::string>(j, "signature", "", at);
    v.complete = json_optional<bool>(j, "complete", true, at);
    if (json_optional<std::string>(j, "hash", "sha256", at) != "sha256")
      fail(at, "unsupported hash '{}' (expected sha256)", j.at("hash").get<std::string>());
    if (v.version < 0 || v.step < 0 || v.size < 0 || v.shard_size <= 0)
      fail(at, "version, step and size must be >= 0 and shard_size > 0");
    if (!is_sha256_hex(v.sha256)) fail(at, "sha256 must be 64 lowercase hex digits");
    if (!m.versions.empty() && v.version <= m.versions.back().version)
      fail(at, "versions must be listed in ascending order without repeats");
    v.shards = parse_shards(j, at, v.shard_size, v.size);
    if (j.contains("tensors")) v.tensors = parse_tensors(j.at("tensors"), at + ".tensors", v.size);
    if (j.contains("delta")) {
      const Json& d = j.at("delta");
      const std::string dat = at + ".delta";
      DeltaInfo delta;
      delta.base = json_required<int64_t>(d, "base", dat);
      delta.size = json_required<int64_t>(d, "size", dat);
      delta.sha256 = json_required<std::string>(d, "sha256", dat);
      delta.changed_elements = json_required<int64_t>(d, "changed_elements", dat);
      delta.elements = json_required<int64_t>(d, "elements", dat);
      delta.changed_bytes = json_required<int64_t>(d, "changed_bytes", dat);
      if (delta.base < 0 || delta.base >= v.version)
        fail(dat, "base {} is not an earlier version than {}", delta.base, v.version);
      if (delta.size <= 0 || !is_sha256_hex(delta.sha256))
        fail(dat, "size must be > 0 and sha256 64 lowercase hex digits");
      if (delta.elements < 0 || delta.changed_elements < 0 ||
          delta.changed_elements > delta.elements || delta.changed_bytes < 0)
        fail(dat, "changed_elements must lie in [0, elements]");
      if (v.tensors.empty()) fail(dat, "a delta needs the tensors' hashes to be checked");
      delta.shards = parse_shards(d, dat, v.shard_size, delta.size);
      v.delta = std::move(delta);
      v.delta_complete = json_optional<bool>(j, "delta_complete", true, at);
    }
    m.versions.push_back(std::move(v));
  }
  return m;
}

Manifest parse_manifest(std::string_view text, const std::string& where) {
  if (text.size() > kMaxManifestBytes) {
    fail(where, "manifest is {} bytes, more than the limit of {}", text.size(), kMaxManifestBytes);
  }
  return manifest_from_json(parse_json(text, where), where);
}

Manifest read_manifest(const fs::path& data_dir) {
  const fs::path path = data_dir / kManifestFile;
  if (!fs::exists(path)) return {};
  return parse_manifest(read_file(path), path.string());
}

void write_manifest(const fs::path& data_dir, const Manifest& manifest) {
  write_file_atomic(data_dir / kManifestFile, to_json(manifest).dump(1));
}

std::string version_dir_name(int64_t version) { return "v" + std::to_string(version); }

std::string shard_file_name(size_t index, FileKind kind) {
  return fmt::format("{}_{:05d}.bin", kind == FileKind::Delta ? "delta" : "shard", index + 1);
}

std::string shard_url_path(int64_t version, size_t index, FileKind kind) {
  return "/" + version_dir_name(version) + "/" + shard_file_name(index, kind);
}

void ensure_probe_file(const fs::path& data_dir, int64_t bytes) {
  const fs::path path = data_dir / kProbeFile;
  std::error_code ec;
  if (fs::exists(path, ec) && static_cast<int64_t>(fs::file_size(path, ec)) == bytes) return;
  if (sodium_init() < 0) fail(path.string(), "libsodium failed to initialize");
  std::string data(static_cast<size_t>(bytes), '\0');
  randombytes_buf(data.data(), data.size());  // incompressible, so no proxy can shrink it
  write_file_atomic(path, data);
}

}  // namespace trellis::shardcast
