#include "shardcast/assembler.h"

#include "common/error.h"

namespace trellis::shardcast {
namespace fs = std::filesystem;

ShardAssembler::ShardAssembler(ShardedFile entry, fs::path shard_dir, const fs::path& out)
    : entry_(std::move(entry)),
      shard_dir_(std::move(shard_dir)),
      where_(fmt::format("version {}{} -> {}", entry_.version,
                         entry_.kind == FileKind::Delta ? "'s delta" : "", out.string())),
      ready_(entry_.shards.size(), false),
      file_(out) {}

void ShardAssembler::shard_ready(size_t i) {
  std::unique_lock lock(mu_);
  ready_.at(i) = true;
  if (appending_) return;  // that thread appends this one too when its turn comes
  appending_ = true;
  while (error_.empty() && next_ < ready_.size() && ready_[next_]) {
    const size_t shard = next_;
    lock.unlock();
    std::string error;
    try {
      append(shard);
    } catch (const Error& e) {
      error = e.what();
    }
    lock.lock();
    error_ = error;
    ++next_;
  }
  appending_ = false;
}

void ShardAssembler::append(size_t i) {
  const MappedFile shard(shard_dir_ / shard_file_name(i, entry_.kind));
  const std::string_view bytes(reinterpret_cast<const char*>(shard.bytes().data()),
                               shard.bytes().size());
  whole_.update(bytes);
  file_.write(bytes.data(), bytes.size());
  size_ += static_cast<int64_t>(bytes.size());
}

void ShardAssembler::finish() {
  std::lock_guard lock(mu_);
  if (!error_.empty()) throw Error(error_);
  for (; next_ < ready_.size(); ++next_) append(next_);
  if (size_ != entry_.size || whole_.hex() != entry_.sha256)
    fail(where_, "the assembled file does not match the signed whole-file SHA-256");
  file_.commit();
}

}  // namespace trellis::shardcast
