// SHARDCAST manifests (specs/shardcast.md §1): what a server (origin or relay) holds. Every server
// has the same layout:
//
//   <data_dir>/manifest.json           all versions served, oldest first; written atomically
//   <data_dir>/v<N>/shard_00001.bin    fixed-size shards of version N, the last one shorter
//   <data_dir>/v<N>/delta_00001.bin    shards of its delta against an earlier version, if any
//   <data_dir>/probe.bin               a small file clients download to estimate bandwidth
//
// Each version entry carries the whole file's size and SHA-256 and every shard's size and SHA-256,
// signed by the trainer (Ed25519): a client checks each shard as it lands, so one bad shard costs
// one shard, and the assembled file against the signed hash. `complete` is per server: a relay
// lists a version as soon as it starts pulling it (pipelining) and serves the shards it has.
//
// Weight deltas (weight_delta.h): a version may also list a delta, the changed elements of every
// tensor against an earlier version, sharded and hashed like the file itself, plus the SHA-256 of
// every tensor of the full result. Whoever holds the base applies the delta and accepts the
// result only when every tensor hash matches; anyone else takes the full file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/identity.h"
#include "common/json.h"

namespace trellis::shardcast {

struct ShardInfo {
  int64_t size = 0;
  std::string sha256;  // 64 lowercase hex digits
};

// One contiguous byte range of the full file (a tensor, or the safetensors header) and its
// SHA-256. A version's list covers the file from 0 to its size without gaps.
struct TensorHash {
  std::string name;
  int64_t offset = 0, size = 0;
  std::string sha256;
};

// A delta that turns version `base` into this one (weight_delta.h has the file's format).
struct DeltaInfo {
  int64_t base = 0;
  int64_t size = 0;  // bytes of the delta file
  std::string sha256;
  std::vector<ShardInfo> shards;  // of the same shard size as the full file
  // What changed: elements that differ from the base out of all, and the bytes they occupy.
  int64_t changed_elements = 0, elements = 0, changed_bytes = 0;
};

// Which file of a version: the full weights, or the delta against the base.
enum class FileKind { Full, Delta };

struct VersionEntry {
  int64_t version = 0;
  int64_t step = 0;  // the training step this policy came out of
  int64_t size = 0;  // bytes of the whole file
  std::string sha256;
  int64_t shard_size = 0;
  std::vector<ShardInfo> shards;
  std::vector<TensorHash> tensors;  // empty for a version published without them
  std::optional<DeltaInfo> delta;
  std::string signer;          // the trainer's public key (hex), as the origin claims it
  std::string signature;       // Ed25519 over signing_message()
  bool complete = true;        // this server holds every shard of the full file
  bool delta_complete = true;  // this server holds every shard of the delta

  // What the trainer signs: every field but `complete`, `signer` and `signature`, in a fixed text
  // form (so that no JSON serialisation detail can change what is signed).
  std::string signing_message() const;
  void sign(const Identity& trainer);
  // True when `signature` is `trainer_public_key`'s signature of this entry. Clients verify
  // against the key they trust, never the `signer` field.
  bool signed_by(const std::string& trainer_public_key) const;
};

// The shards of one file of a version, what fetch_shards and ShardAssembler work on. Converts
// from a VersionEntry as its full file.
struct ShardedFile {
  int64_t version = 0;
  FileKind kind = FileKind::Full;
  int64_t size = 0;
  std::string sha256;
  std::vector<ShardInfo> shards;

  ShardedFile() = default;
  ShardedFile(const VersionEntry& entry);                  // NOLINT: the full file, implicitly
  static ShardedFile delta_of(const VersionEntry& entry);  // entry.delta must be set
};

struct Manifest {
  std::vector<VersionEntry> versions;  // ascending by version

  const VersionEntry* find(int64_t version) const;
  VersionEntry* find(int64_t version);
  const VersionEntry* newest() const;  // nullptr when empty
  void put(VersionEntry entry);        // replaces the entry with the same version; keeps the order
  void erase(int64_t version);
};

// Budgets for a manifest from a server, checked before anything is allocated for what they bound.
// 2^16 shards of the default 50 MiB are 3.2 TiB; a version of that many is ~6 MB of JSON.
inline constexpr size_t kMaxManifestBytes = size_t{64} << 20;
inline constexpr size_t kMaxManifestVersions = 1024;
inline constexpr size_t kMaxManifestShards = size_t{1} << 16;   // per version
inline constexpr size_t kMaxManifestTensors = size_t{1} << 18;  // per version

Json to_json(const Manifest& manifest);
// Strict: Error naming `where` and the field on anything malformed (sizes that do not add up,
// hashes that are not hex, versions out of order, a shard count that does not match the sizes)
// and on a manifest over the budgets above (parse_manifest checks the text's size first).
Manifest manifest_from_json(const Json& json, const std::string& where);
Manifest parse_manifest(std::string_view text, const std::string& where);

// <data_dir>/manifest.json, or an empty manifest when the file does not exist yet.
Manifest read_manifest(const std::filesystem::path& data_dir);
void write_manifest(const std::filesystem::path& data_dir, const Manifest& manifest);  // atomic

// "v<N>", "shard_00001.bin" (index 0 -> 00001; "delta_00001.bin" for a delta's), and the URL
// paths a server answers.
std::string version_dir_name(int64_t version);
std::string shard_file_name(size_t index, FileKind kind = FileKind::Full);
// "/v<N>/shard_00001.bin"
std::string shard_url_path(int64_t version, size_t index, FileKind kind = FileKind::Full);
inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kProbeFile = "probe.bin";

// Creates <data_dir>/probe.bin of `bytes` random bytes unless it exists with that size.
void ensure_probe_file(const std::filesystem::path& data_dir, int64_t bytes);

}  // namespace trellis::shardcast
