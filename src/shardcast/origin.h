// The SHARDCAST origin (specs/shardcast.md §2): the trainer's side. Publishing version N cuts the
// file into shards under <data_dir>/v<N>.tmp/, fsyncs them, renames the directory to v<N>/, adds
// the signed entry to manifest.json (temp file + rename), and only then drops versions beyond the
// retention count (from the manifest first, then from disk). With deltas on, the entry also
// carries every tensor's hash and a delta against the newest earlier version the origin holds. A
// crash at any point leaves no partial version listed. `Origin` does this on a background thread so
// training never waits.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "common/identity.h"
#include "shardcast/manifest.h"

namespace trellis::shardcast {

struct PublishOptions {
  int64_t shard_size = int64_t{50} << 20;
  int64_t keep = 5;  // versions kept (the newest)
  int64_t probe_size = int64_t{1} << 20;
  // Publish each version's tensor hashes and a delta against the version before it
  // (weight_delta.h), unless the delta exceeds this fraction of the file.
  bool deltas = true;
  double max_delta_fraction = 0.5;
};

// Publishes `file` as `version` (replacing an existing entry of that number) and returns its
// entry. Error naming the file or directory when reading or writing fails.
VersionEntry publish_version(const std::filesystem::path& data_dir, int64_t version, int64_t step,
                             const std::filesystem::path& file, const Identity& signer,
                             const PublishOptions& options);

// Removes versions newer than `version` from the manifest, then from disk (a trainer resuming
// from an older checkpoint: later versions belong to a timeline it no longer continues), and
// leftovers of an interrupted publish.
void remove_versions_after(const std::filesystem::path& data_dir, int64_t version);

class Origin {
 public:
  Origin(std::filesystem::path data_dir, Identity signer, PublishOptions options);
  ~Origin();  // finishes what is queued
  Origin(const Origin&) = delete;
  Origin& operator=(const Origin&) = delete;

  // Queues `file` for publishing as `version`; the origin removes `file` once published. After
  // the manifest lists the version, `published(entry)` runs on the origin's thread. A publish
  // that fails is logged and skipped (the next version supersedes it).
  void publish(int64_t version, int64_t step, std::filesystem::path file,
               std::function<void(const VersionEntry&)> published = {});
  void wait_idle();  // until every queued version is published or has failed

  const std::filesystem::path& data_dir() const { return data_dir_; }
  const Identity& signer() const { return signer_; }

 private:
  struct Job {
    int64_t version, step;
    std::filesystem::path file;
    std::function<void(const VersionEntry&)> published;
  };
  void loop();

  std::filesystem::path data_dir_;
  Identity signer_;
  PublishOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool busy_ = false, stopping_ = false;
  std::thread thread_;
};

}  // namespace trellis::shardcast
