#include "shardcast/origin.h"

#include <fstream>

#include "common/error.h"
#include "common/exception_message.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/logging.h"
#include "shardcast/weight_delta.h"

namespace trellis::shardcast {
namespace fs = std::filesystem;
namespace {

// Removes v<N>.tmp leftovers of an interrupted publish.
void remove_partial_publishes(const fs::path& data_dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(data_dir, ec))
    if (e.path().extension() == ".tmp" && e.is_directory()) fs::remove_all(e.path(), ec);
}

// Drops the oldest versions beyond `keep`: from the manifest first, so no client is sent to a
// directory about to disappear, then from disk.
void apply_retention(const fs::path& data_dir, Manifest& manifest, int64_t keep) {
  std::vector<int64_t> dropped;
  while (keep > 0 && static_cast<int64_t>(manifest.versions.size()) > keep) {
    dropped.push_back(manifest.versions.front().version);
    manifest.versions.erase(manifest.versions.begin());
  }
  if (dropped.empty()) return;
  write_manifest(data_dir, manifest);
  for (int64_t v : dropped) fs::remove_all(data_dir / version_dir_name(v));
}

// Cuts `file` into shards of `shard_size` in `dir` (shard_file_name(i, kind)), each written
// atomically, and returns their sizes and hashes with the whole file's (version unset).
ShardedFile write_shards(const fs::path& file, const fs::path& dir, int64_t shard_size,
                         FileKind kind) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file.string(), "cannot open the file to publish");
  ShardedFile out;
  out.kind = kind;
  Sha256Stream whole;
  std::string buffer(static_cast<size_t>(shard_size), '\0');
  while (true) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    const std::string_view shard(buffer.data(), got);
    whole.update(shard);
    AtomicFileWriter shard_out(dir / shard_file_name(out.shards.size(), kind));
    shard_out.write(shard.data(), shard.size());
    shard_out.commit();
    out.shards.push_back({static_cast<int64_t>(got), sha256_hex(shard)});
    out.size += static_cast<int64_t>(got);
    if (got < buffer.size()) break;
  }
  if (in.bad()) fail(file.string(), "read error while sharding");
  if (out.shards.empty()) fail(file.string(), "refusing to publish an empty file");
  out.sha256 = whole.hex();
  return out;
}

}  // namespace

VersionEntry publish_version(const fs::path& data_dir, int64_t version, int64_t step,
                             const fs::path& file, const Identity& signer,
                             const PublishOptions& options) {
  if (options.shard_size <= 0) fail("shardcast.shard_size_mib", "the shard size must be > 0");
  fs::create_directories(data_dir);
  remove_partial_publishes(data_dir);
  ensure_probe_file(data_dir, options.probe_size);

  const fs::path final_dir = data_dir / version_dir_name(version);
  const fs::path tmp_dir = data_dir / (version_dir_name(version) + ".tmp");
  VersionEntry entry;
  entry.version = version;
  entry.step = step;
  entry.shard_size = options.shard_size;
  const ShardedFile full = write_shards(file, tmp_dir, options.shard_size, FileKind::Full);
  entry.size = full.size;
  entry.sha256 = full.sha256;
  entry.shards = full.shards;

  Manifest manifest = read_manifest(data_dir);
  if (options.deltas) {
    const FileWeights target(file);
    const std::vector<WeightRegion> regions = weight_regions(target);
    entry.tensors = hash_regions(target, regions);
    const VersionEntry* base = nullptr;
    for (const auto& v : manifest.versions)
      if (v.version < version) base = &v;
    const fs::path delta_file = tmp_dir / "delta.bin";
    const auto stats =
        base ? make_delta(ShardWeights(data_dir / version_dir_name(base->version), *base), target,
                          regions, delta_file)
             : std::nullopt;
    // A delta nearly as large as the file saves little and costs every relay a second download.
    if (stats && static_cast<double>(stats->bytes) <=
                     options.max_delta_fraction * static_cast<double>(entry.size)) {
      const ShardedFile d = write_shards(delta_file, tmp_dir, options.shard_size, FileKind::Delta);
      entry.delta = DeltaInfo{
          base->version,       d.size, d.sha256, d.shards, stats->changed_elements, stats->elements,
          stats->changed_bytes};
    }
    fs::remove(delta_file);
  }
  entry.sign(signer);

  // Replace an earlier publish of the same number: unlist it, then swap the directory in.
  if (manifest.find(version)) {
    manifest.erase(version);
    write_manifest(data_dir, manifest);
  }
  fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
  manifest.put(entry);
  write_manifest(data_dir, manifest);
  apply_retention(data_dir, manifest, options.keep);
  return entry;
}

void remove_versions_after(const fs::path& data_dir, int64_t version) {
  if (!fs::exists(data_dir)) return;
  remove_partial_publishes(data_dir);
  Manifest manifest = read_manifest(data_dir);
  std::vector<int64_t> later;
  for (const auto& v : manifest.versions)
    if (v.version > version) later.push_back(v.version);
  for (int64_t v : later) manifest.erase(v);
  if (!later.empty()) write_manifest(data_dir, manifest);
  for (int64_t v : later) fs::remove_all(data_dir / version_dir_name(v));
}

Origin::Origin(fs::path data_dir, Identity signer, PublishOptions options)
    : data_dir_(std::move(data_dir)), signer_(std::move(signer)), options_(options) {
  fs::create_directories(data_dir_);
  remove_partial_publishes(data_dir_);
  ensure_probe_file(data_dir_, options_.probe_size);
  thread_ = std::thread([this] { loop(); });
}

Origin::~Origin() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Origin::publish(int64_t version, int64_t step, fs::path file,
                     std::function<void(const VersionEntry&)> published) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back({version, step, std::move(file), std::move(published)});
  }
  cv_.notify_all();
}

void Origin::wait_idle() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void Origin::loop() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued is done
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    try {
      const VersionEntry entry =
          publish_version(data_dir_, job.version, job.step, job.file, signer_, options_);
      log::info("shardcast: published version {} ({} bytes, {} shards)", entry.version, entry.size,
                entry.shards.size());
      if (job.published) job.published(entry);
    } catch (const std::exception& e) {
      log::error("shardcast: publishing version {} failed: {}", job.version, message_of(e));
    }
    std::error_code ec;
    fs::remove(job.file, ec);
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace trellis::shardcast
