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

}  // namespace

std::string VersionEntry::signing_message() const {
  std::string m = fmt::format("{}\nversion {}\nstep {}\nsize {}\nsha256 {}\nshard_size {}\n",
                              kFormat, version, step, size, sha256, shard_size);
  for (const auto& s : shards) m += fmt::format("shard {} {}\n", s.size, s.sha256);
  return m;
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
    versions.push_back({{"version", v.version},
                        {"step", v.step},
                        {"size", v.size},
                        {"hash", "sha256"},
                        {"sha256", v.sha256},
                        {"shard_size", v.shard_size},
                        {"shards", std::move(shards)},
                        {"signer", v.signer},
                        {"signature", v.signature},
                        {"complete", v.complete}});
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
    if (!j.contains("shards") || !j.at("shards").is_array())
      fail(at, "missing array field 'shards'");
    if (j.at("shards").size() > kMaxManifestShards) {
      fail(at, "{} shards, more than the limit of {}", j.at("shards").size(), kMaxManifestShards);
    }
    int64_t total = 0;
    for (size_t k = 0; k < j.at("shards").size(); ++k) {
      const std::string sat = fmt::format("{}.shards[{}]", at, k);
      ShardInfo s{json_required<int64_t>(j.at("shards")[k], "size", sat),
                  json_required<std::string>(j.at("shards")[k], "sha256", sat)};
      if (!is_sha256_hex(s.sha256)) fail(sat, "sha256 must be 64 lowercase hex digits");
      const bool last = k + 1 == j.at("shards").size();
      if (s.size <= 0 || s.size > v.shard_size || (!last && s.size != v.shard_size))
        fail(sat, "shard size {} does not fit shard_size {}", s.size, v.shard_size);
      if (s.size > v.size - total)  // total <= v.size: no overflow
        fail(sat, "the shard sizes add up to more than the file's {} bytes", v.size);
      total += s.size;
      v.shards.push_back(std::move(s));
    }
    if (total != v.size)
      fail(at, "the shard sizes add up to {} bytes, not the file's {}", total, v.size);
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

std::string shard_file_name(size_t index) { return fmt::format("shard_{:05d}.bin", index + 1); }

std::string shard_url_path(int64_t version, size_t index) {
  return "/" + version_dir_name(version) + "/" + shard_file_name(index);
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
