#include "shardcast/shard_fetcher.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/files.h"
#include "common/hashing.h"
#include "common/logging.h"

namespace trellis::shardcast {
namespace fs = std::filesystem;
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

enum class ShardState { Pending, InFlight, Done };

// The shared state of one fetch; every field is guarded by `mu`.
struct Fetch {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ShardState> state;
  std::vector<double> not_before;
  std::vector<int> failures;
  std::vector<Holding> holdings;
  size_t done = 0;
  std::string give_up;
  FetchStats stats;
};

}  // namespace

std::vector<Holding> holdings_of(const std::vector<std::optional<Manifest>>& manifests,
                                 const VersionEntry& entry) {
  std::vector<Holding> out(manifests.size(), Holding::None);
  const std::string trusted = entry.signing_message();
  for (size_t r = 0; r < manifests.size(); ++r) {
    const VersionEntry* e = manifests[r] ? manifests[r]->find(entry.version) : nullptr;
    if (e && e->signing_message() == trusted)
      out[r] = e->complete ? Holding::Complete : Holding::Partial;
  }
  return out;
}

bool shard_file_matches(const fs::path& path, const ShardInfo& shard) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || static_cast<int64_t>(fs::file_size(path, ec)) != shard.size)
    return false;
  std::ifstream in(path, std::ios::binary);
  Sha256Stream h;
  std::string buf(1 << 20, '\0');
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0)
    h.update({buf.data(), static_cast<size_t>(in.gcount())});
  return !in.bad() && h.hex() == shard.sha256;
}

FetchStats fetch_shards(const VersionEntry& entry, const fs::path& dir, RelaySelector& selector,
                        std::vector<Holding> initial,
                        const std::function<std::vector<Holding>(const HttpOptions&)>& holdings,
                        const FetchOptions& options, const std::function<void(size_t)>& on_shard,
                        const std::atomic<bool>* stop) {
  const double t0 = now_s();
  const size_t n = entry.shards.size();
  fs::create_directories(dir);
  Fetch f;
  // Once the fetch is over (complete, given up or stopped), transfers still running are
  // cancelled: a manifest refresh stuck on a stalled server must not hold the result back.
  std::atomic<bool> over{false};
  HttpOptions http = options.http;
  http.cancelled = [&] { return over.load() || (stop && stop->load()); };
  f.state.assign(n, ShardState::Pending);
  f.not_before.assign(n, 0);
  f.failures.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (shard_file_matches(dir / shard_file_name(i), entry.shards[i])) {
      f.state[i] = ShardState::Done;
      ++f.done;
      ++f.stats.shards_reused;
    }
  }
  f.holdings = std::move(initial);

  // Picks the next shard and its relay, or returns false when the fetch is over.
  const auto next = [&](std::unique_lock<std::mutex>& lock, size_t& shard, int& relay) {
    while (true) {
      if (!f.give_up.empty() || f.done == n || (stop && *stop)) {
        over = true;
        f.cv.notify_all();
        return false;
      }
      const double now = now_s();
      if (now - t0 > options.version_timeout_s) {
        f.give_up = fmt::format("not complete after {:.0f} s", options.version_timeout_s);
        over = true;
        f.cv.notify_all();
        return false;
      }
      double wake = now + options.manifest_refresh_s;
      bool found = false;
      for (size_t i = 0; i < n && !found; ++i) {
        if (f.state[i] != ShardState::Pending) continue;
        if (f.not_before[i] > now) {
          wake = std::min(wake, f.not_before[i]);
          continue;
        }
        shard = i;
        found = true;
      }
      if (found) {
        std::vector<bool> eligible(selector.size());
        for (size_t r = 0; r < eligible.size(); ++r)
          eligible[r] = r < f.holdings.size() && f.holdings[r] != Holding::None;
        relay = selector.choose(eligible);
        if (relay >= 0) {
          f.state[shard] = ShardState::InFlight;
          return true;
        }
        wake = now + options.retry_delay_s;  // no server lists the version (yet)
      }
      f.cv.wait_for(lock, std::chrono::duration<double>(std::max(0.001, wake - now)));
    }
  };

  const auto download = [&] {
    std::unique_lock lock(f.mu);
    size_t i = 0;
    int relay = -1;
    while (next(lock, i, relay)) {
      const Holding held = f.holdings[static_cast<size_t>(relay)];
      lock.unlock();
      const ShardInfo& want = entry.shards[i];
      const std::string url =
          selector.url(static_cast<size_t>(relay)) + shard_url_path(entry.version, i);
      bool written = false, corrupt = false;
      HttpResult r;
      {
        AtomicFileWriter out(dir / shard_file_name(i));
        Sha256Stream hash;
        int64_t got = 0;
        r = http_get(url, http, [&](std::string_view piece) {
          got += static_cast<int64_t>(piece.size());
          if (got > want.size) return false;
          hash.update(piece);
          out.write(piece.data(), piece.size());
          return true;
        });
        if (r.status == 200 && (got != want.size || hash.hex() != want.sha256)) {
          corrupt = true;  // wrong bytes (or cut short): never renamed into place
        } else if (r.ok()) {
          out.commit();
          written = true;
        }
      }
      lock.lock();
      if (written) {
        selector.record(static_cast<size_t>(relay), true, want.size, r.seconds);
        f.state[i] = ShardState::Done;
        ++f.done;
        ++f.stats.shards_downloaded;
        f.stats.bytes_downloaded += want.size;
      } else if ((r.status == 404 && held == Holding::Partial) || r.status == 429) {
        // Not a fault of the shard: the relay is still pulling it, or asks us to slow down.
        if (r.status == 429) selector.record(static_cast<size_t>(relay), false, 0, r.seconds);
        ++f.stats.not_yet;
        f.state[i] = ShardState::Pending;
        f.not_before[i] = now_s() + std::max(options.retry_delay_s, r.retry_after_s);
      } else {
        log::debug("shardcast: {}: {}", url,
                   corrupt ? "SHA-256 does not match the manifest" : r.error);
        selector.record(static_cast<size_t>(relay), false, 0, r.seconds);
        ++f.stats.failed_attempts;
        f.stats.corrupt_shards += corrupt;
        f.state[i] = ShardState::Pending;
        if (++f.failures[i] >= options.attempts_per_shard && f.give_up.empty()) {
          f.give_up =
              fmt::format("shard {} failed {} times, last from {}: {}", i + 1, f.failures[i], url,
                          corrupt ? "its SHA-256 does not match the manifest" : r.error);
          over = true;
        }
      }
      f.cv.notify_all();
      if (written && on_shard) {
        lock.unlock();
        on_shard(i);
        lock.lock();
      }
    }
  };

  // What the servers hold is refreshed on a thread of its own, so that a server that stalls
  // delays no download; its request is cancelled when the fetch is over.
  std::thread refresher([&] {
    std::unique_lock lock(f.mu);
    while (!over) {
      f.cv.wait_for(lock, std::chrono::duration<double>(options.manifest_refresh_s));
      if (over) break;
      lock.unlock();
      auto fresh = holdings(http);
      lock.lock();
      f.holdings = std::move(fresh);
      f.cv.notify_all();
    }
  });
  std::vector<std::thread> threads;
  const size_t missing = n - f.done;
  for (size_t t = 0;
       t < std::min<size_t>(static_cast<size_t>(std::max(1, options.parallel)), missing); ++t)
    threads.emplace_back(download);
  for (auto& t : threads) t.join();
  {
    std::lock_guard lock(f.mu);
    over = true;  // also when nothing was missing
  }
  f.cv.notify_all();
  refresher.join();

  f.stats.complete = f.done == n;
  f.stats.error = f.stats.complete ? "" : (f.give_up.empty() ? "stopped" : f.give_up);
  f.stats.seconds = now_s() - t0;
  return f.stats;
}

}  // namespace trellis::shardcast
