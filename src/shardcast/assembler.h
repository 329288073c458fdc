// Builds a version's file from its verified shards while the rest are still arriving
// (specs/shardcast.md §4). Each shard is appended as soon as every shard before it is in place
// and hashed on the way, so when the last shard lands only the shards not yet appended remain
// to copy before the whole-file SHA-256 is checked against the signed entry. Hashing and
// copying a large checkpoint after the download would otherwise add seconds to every fetch.
// The file appears at `out` only after that check (atomic rename); until then it is a
// temporary file that is removed if the assembler is destroyed unfinished.
#pragma once

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/hashing.h"
#include "shardcast/manifest.h"

namespace trellis::shardcast {

class ShardAssembler {
 public:
  ShardAssembler(ShardedFile entry, std::filesystem::path shard_dir,
                 const std::filesystem::path& out);

  // Shard i is verified in shard_dir. Thread-safe: the caller that finds the next shards in
  // order appends them; the others return at once.
  void shard_ready(size_t i);
  // Appends whatever is left, checks the size and whole-file SHA-256, renames into place. Error
  // naming the version and file when a shard is missing, a write failed, or the hash differs.
  void finish();

 private:
  void append(size_t i);  // one thread at a time

  const ShardedFile entry_;
  const std::filesystem::path shard_dir_;
  const std::string where_;
  std::mutex mu_;  // guards ready_, next_, appending_, error_
  std::vector<bool> ready_;
  size_t next_ = 0;  // the first shard not yet appended
  bool appending_ = false;
  std::string error_;
  // Used by the appending thread only.
  AtomicFileWriter file_;
  Sha256Stream whole_;
  int64_t size_ = 0;
};

}  // namespace trellis::shardcast
