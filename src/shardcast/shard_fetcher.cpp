#include "shardcast/shard_fetcher.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/logging.h"

namespace trellis::shardcast {
namespace fs = std::filesystem;
namespace {

enum class ShardState { Pending, InFlight, Done };

// A byte range [begin, end) of one shard, fetched by one download thread from one relay. The
// part at offset 0 (the head) streams into the shard's file and hash; the parts the end game
// splits off it are held in memory until every part has landed. The end game lowers `end` while
// bytes arrive, so `pos` and `end` are guarded by the part's own mutex, which is taken inside
// the transfer's write callback and, by the end game, after Fetch::mu (never the other way).
struct Part {
  enum Status { Waiting, Running, Landed };
  int64_t begin = 0;
  Status status = Waiting;  // guarded by Fetch::mu
  int relay = -1;           // while running
  std::mutex mu;
  int64_t pos = 0;  // the next byte wanted
  int64_t end = 0;
  std::string bytes;    // a split-off part's bytes
  int64_t fetched = 0;  // once landed: bytes of its last transfer, and its time
  double seconds = 0;
  std::atomic<bool> abandon{false};  // the shard was reset (or the fetch is over): stop
};

struct Shard {
  ShardState state = ShardState::Pending;
  double not_before = 0;
  int failures = 0;
  // Relays whose download of this shard failed or sent wrong bytes: it goes to another relay
  // while one lists it, so that one bad relay cannot spend every attempt of a shard.
  std::vector<int> failed_relays;
  bool may_split = true;  // false once a split download of it failed verification
  // The current download's parts in offset order, covering [0, size) (empty while Pending).
  std::vector<std::shared_ptr<Part>> parts;
  // The head's file and hash, parked here when the head lands before the parts after it.
  std::unique_ptr<AtomicFileWriter> head_out;
  Sha256Stream head_hash;
};

// The shared state of one fetch; every field is guarded by `mu`.
struct Fetch {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Shard> shards;
  std::vector<Holding> holdings;
  size_t done = 0;
  std::string give_up;
  FetchStats stats;
};

// What the next download thread does: fetch `part` of `shard` from `relay`.
struct Job {
  size_t shard = 0;
  std::shared_ptr<Part> part;
  int relay = -1;
};

// How a part's transfer ended.
enum class Outcome {
  Landed,     // every byte of the part arrived
  Corrupt,    // the relay sent more bytes than the range holds
  Failed,     // no complete answer: a connection error, a stall, an HTTP error
  Abandoned,  // the shard was reset meanwhile (another part failed), or the fetch is over
  LocalError  // writing the shard here failed (a full disk): no relay's fault
};

// Part sizes the end game does not split further: a transfer with less than this fraction of
// its shard left lands before a new request to another relay would get far.
constexpr int64_t kMinSplitFraction = 8;

}  // namespace

std::vector<Holding> holdings_of(const std::vector<std::optional<Manifest>>& manifests,
                                 const VersionEntry& entry, FileKind kind) {
  std::vector<Holding> out(manifests.size(), Holding::None);
  const std::string trusted = entry.signing_message();
  for (size_t r = 0; r < manifests.size(); ++r) {
    const VersionEntry* e = manifests[r] ? manifests[r]->find(entry.version) : nullptr;
    if (!e || e->signing_message() != trusted) continue;
    const bool complete = kind == FileKind::Delta ? e->delta_complete : e->complete;
    out[r] = complete ? Holding::Complete : Holding::Partial;
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

FetchStats fetch_shards(const ShardedFile& entry, const fs::path& dir, RelaySelector& selector,
                        std::vector<Holding> initial,
                        const std::function<std::vector<Holding>(const HttpOptions&)>& holdings,
                        const FetchOptions& options, const std::function<void(size_t)>& on_shard,
                        const std::atomic<bool>* stop) {
  const double t0 = monotonic_seconds();
  const size_t n = entry.shards.size();
  fs::create_directories(dir);
  Fetch f;
  // Once the fetch is over (complete, given up or stopped), transfers still running are
  // cancelled: a manifest refresh stuck on a stalled server must not hold the result back.
  std::atomic<bool> over{false};
  HttpOptions http = options.http;
  http.cancelled = [&] { return over.load() || (stop && stop->load()); };
  f.shards.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (shard_file_matches(dir / shard_file_name(i, entry.kind), entry.shards[i])) {
      f.shards[i].state = ShardState::Done;
      ++f.done;
      ++f.stats.shards_reused;
      if (on_shard) on_shard(i);
    }
  }
  f.holdings = std::move(initial);

  const auto eligible_relays = [&](int except) {
    std::vector<bool> eligible(selector.size());
    for (size_t r = 0; r < eligible.size(); ++r)
      eligible[r] =
          r < f.holdings.size() && f.holdings[r] != Holding::None && static_cast<int>(r) != except;
    return eligible;
  };
  // The relays listing the version, less `except` and those that already failed shard i.
  const auto fresh_for = [&](size_t i, int except) {
    auto fresh = eligible_relays(except);
    for (const int r : f.shards[i].failed_relays) fresh[static_cast<size_t>(r)] = false;
    return fresh;
  };
  // The relays for shard i: fresh_for(i, except), or while none is left, every relay listing it
  // but `except` (a shard must be fetched from somewhere).
  const auto eligible_for = [&](size_t i, int except) {
    auto fresh = fresh_for(i, except);
    return std::find(fresh.begin(), fresh.end(), true) != fresh.end() ? fresh
                                                                      : eligible_relays(except);
  };

  // End game: once every missing byte is being fetched, an idle thread takes the second half
  // of the running part with the most bytes still to come, from another relay. Without it the
  // link that drains first goes quiet while the last shards committed to the other one trickle
  // in; racing whole copies instead would throw away the bytes of every race's loser. A part
  // split again and again shrinks to what its relay can deliver in time.
  const auto split_job = [&](Job& job) {
    const auto eligible = eligible_relays(-1);
    const auto listing = std::count(eligible.begin(), eligible.end(), true);
    std::shared_ptr<Part> best;
    size_t best_shard = 0;
    int64_t best_left = 0;
    for (size_t i = 0; i < n; ++i) {
      const Shard& sh = f.shards[i];
      if (sh.state != ShardState::InFlight || !sh.may_split) continue;
      for (const auto& p : sh.parts) {
        if (p->status != Part::Running) continue;
        const bool another = listing > (eligible[static_cast<size_t>(p->relay)] ? 1 : 0);
        std::lock_guard part_lock(p->mu);
        const int64_t left = p->end - p->pos;
        if (another && left > best_left &&
            left >= std::max<int64_t>(2, entry.shards[i].size / kMinSplitFraction)) {
          best = p;
          best_shard = i;
          best_left = left;
        }
      }
    }
    if (!best) return false;
    // Only to a relay that has not failed this shard: a split is a race for speed, and a part
    // from a relay that sent wrong bytes before would spoil the whole shard again.
    const int relay = selector.choose(fresh_for(best_shard, best->relay));
    if (relay < 0) return false;
    auto tail = std::make_shared<Part>();
    {
      std::lock_guard part_lock(best->mu);  // bytes may have arrived since the scan
      const int64_t left = best->end - best->pos;
      if (left < 2) return false;
      tail->begin = tail->pos = best->pos + left / 2;
      tail->end = best->end;
      best->end = tail->begin;
    }
    auto& parts = f.shards[best_shard].parts;
    parts.insert(std::find(parts.begin(), parts.end(), best) + 1, tail);
    job = {best_shard, tail, relay};
    ++f.stats.splits;
    return true;
  };

  // The next job, or false when the fetch is over: a pending shard's head, else a part whose
  // transfer failed, else (when nothing is waiting) an end-game split.
  const auto next = [&](std::unique_lock<std::mutex>& lock, Job& job) {
    while (true) {
      if (!f.give_up.empty() || f.done == n || (stop && *stop)) {
        over = true;
        f.cv.notify_all();
        return false;
      }
      const double now = monotonic_seconds();
      if (now - t0 > options.version_timeout_s) {
        f.give_up = fmt::format("not complete after {:.0f} s", options.version_timeout_s);
        over = true;
        f.cv.notify_all();
        return false;
      }
      double wake = now + options.manifest_refresh_s;
      bool waiting = false;
      std::optional<size_t> ready;
      std::shared_ptr<Part> ready_part;
      for (size_t i = 0; i < n && !ready; ++i) {
        Shard& sh = f.shards[i];
        if (sh.state == ShardState::Done) continue;
        for (const auto& p : sh.parts)
          if (p->status == Part::Waiting) ready_part = p;
        if (sh.state == ShardState::InFlight && !ready_part) continue;
        waiting = true;
        if (sh.not_before > now) {
          wake = std::min(wake, sh.not_before);
          ready_part.reset();
        } else {
          ready = i;
        }
      }
      if (ready) {
        const int relay = selector.choose(eligible_for(*ready, -1));
        if (relay >= 0) {
          Shard& sh = f.shards[*ready];
          if (!ready_part) {  // a fresh download of the whole shard
            ready_part = std::make_shared<Part>();
            ready_part->end = entry.shards[*ready].size;
            sh.parts = {ready_part};
            sh.state = ShardState::InFlight;
          }
          job = {*ready, ready_part, relay};
          return true;
        }
        wake = now + options.retry_delay_s;  // no server lists the version (yet)
      } else if (!waiting && options.endgame && split_job(job)) {
        return true;
      }
      f.cv.wait_for(lock, std::chrono::duration<double>(std::max(0.001, wake - now)));
    }
  };

  // Fetches the job's part. The head writes `out` and `hash`; a split-off part its own bytes.
  const auto transfer = [&](const std::string& url, Part& part, AtomicFileWriter* out,
                            Sha256Stream& hash, HttpResult& r, std::string& local_error) {
    HttpOptions h = http;
    h.cancelled = [&] { return part.abandon.load() || http.cancelled(); };
    int64_t requested_end = 0;
    {
      std::lock_guard part_lock(part.mu);
      requested_end = part.end;
      if (part.begin > 0) {  // a split-off part, or what a failed one had left
        h.range_begin = part.pos;
        h.range_end = part.end;
      }
    }
    bool overflow = false;
    r = http_get(url, h, [&](std::string_view piece) {
      std::lock_guard part_lock(part.mu);
      const auto take = std::min<int64_t>(static_cast<int64_t>(piece.size()),
                                          std::max<int64_t>(0, part.end - part.pos));
      if (take < static_cast<int64_t>(piece.size()) && part.end == requested_end) {
        overflow = true;  // more than the range holds
        return false;
      }
      const std::string_view kept = piece.substr(0, static_cast<size_t>(take));
      if (out) {
        hash.update(kept);
        try {
          out->write(kept.data(), kept.size());
        } catch (const Error& e) {
          local_error = e.what();
          return false;
        }
      } else {
        part.bytes.append(kept);
      }
      part.pos += take;
      return part.pos < part.end;  // false: the end game took the rest
    });
    if (!local_error.empty()) return Outcome::LocalError;
    if (part.abandon) return Outcome::Abandoned;
    if (overflow) return Outcome::Corrupt;
    std::lock_guard part_lock(part.mu);
    return part.pos == part.end ? Outcome::Landed : Outcome::Failed;
  };

  // Drops the shard's current download: its running parts stop, and it starts over.
  const auto reset = [&](Shard& sh) {
    for (const auto& p : sh.parts) p->abandon = true;
    sh.parts.clear();
    sh.head_out.reset();
    sh.state = ShardState::Pending;
  };

  // Once every part of shard i has landed: appends the split-off parts to the head's file,
  // checks the whole shard's hash and renames it into place, then tells the relays' estimates.
  // The file work runs without the lock (no one else touches a shard whose parts have all
  // landed). Returns Landed (the shard is done), Corrupt or LocalError.
  const auto finish_shard = [&](size_t i, std::unique_lock<std::mutex>& lock,
                                std::string& local_error) {
    Shard& sh = f.shards[i];
    const auto parts = sh.parts;
    auto out = std::move(sh.head_out);
    Sha256Stream hash = sh.head_hash;
    lock.unlock();
    bool verified = false;
    try {
      for (size_t k = 1; k < parts.size(); ++k) {
        hash.update(parts[k]->bytes);
        out->write(parts[k]->bytes.data(), parts[k]->bytes.size());
      }
      verified = hash.hex() == entry.shards[i].sha256;
      if (verified) out->commit();
    } catch (const Error& e) {
      local_error = e.what();
    }
    lock.lock();
    if (!local_error.empty()) return Outcome::LocalError;
    if (!verified) {
      // Wrong bytes. When several relays sent parts, any of them may be at fault: each is
      // penalised, and the shard is fetched again whole, so that the next check names one.
      for (const auto& p : parts) {
        selector.record(static_cast<size_t>(p->relay), false, 0, p->seconds);
        sh.failed_relays.push_back(p->relay);
      }
      sh.may_split = false;
      return Outcome::Corrupt;
    }
    for (const auto& p : parts)
      selector.record(static_cast<size_t>(p->relay), true, p->fetched, p->seconds);
    sh.state = ShardState::Done;
    sh.parts.clear();
    ++f.done;
    ++f.stats.shards_downloaded;
    f.stats.bytes_downloaded += entry.shards[i].size;
    if (on_shard) {
      lock.unlock();
      on_shard(i);
      lock.lock();
    }
    return Outcome::Landed;
  };

  const auto download = [&] {
    std::unique_lock lock(f.mu);
    Job job;
    while (next(lock, job)) {
      const size_t i = job.shard;
      Part& part = *job.part;
      part.status = Part::Running;
      part.relay = job.relay;
      const bool head = part.begin == 0;
      int64_t from = 0;
      {
        std::lock_guard part_lock(part.mu);
        from = part.pos;
      }
      const Holding held = f.holdings[static_cast<size_t>(job.relay)];
      lock.unlock();
      const std::string url = selector.url(static_cast<size_t>(job.relay)) +
                              shard_url_path(entry.version, i, entry.kind);

      std::unique_ptr<AtomicFileWriter> out;
      Sha256Stream hash;
      HttpResult r;
      std::string local_error;
      Outcome outcome = Outcome::LocalError;
      try {
        if (head) out = std::make_unique<AtomicFileWriter>(dir / shard_file_name(i, entry.kind));
        outcome = transfer(url, part, out.get(), hash, r, local_error);
      } catch (const Error& e) {
        local_error = e.what();
      }

      lock.lock();
      Shard& sh = f.shards[i];
      if (part.abandon) outcome = Outcome::Abandoned;
      const bool not_yet = outcome == Outcome::Failed &&
                           ((r.status == 404 && held == Holding::Partial) || r.status == 429);
      if (outcome == Outcome::Landed) {
        // The relays' estimates learn of it once the whole shard is verified.
        part.status = Part::Landed;
        part.fetched = part.end - from;
        part.seconds = r.seconds;
        if (head) {  // parked until the parts after it land
          sh.head_out = std::move(out);
          sh.head_hash = hash;
        }
        if (std::all_of(sh.parts.begin(), sh.parts.end(),
                        [](const auto& p) { return p->status == Part::Landed; }))
          outcome = finish_shard(i, lock, local_error);
      } else if (not_yet) {
        // Not a fault of the shard: the relay is still pulling it, or asks us to slow down.
        if (r.status == 429) selector.record(static_cast<size_t>(job.relay), false, 0, r.seconds);
        ++f.stats.not_yet;
        sh.not_before = monotonic_seconds() + std::max(options.retry_delay_s, r.retry_after_s);
      } else if (outcome == Outcome::Failed || outcome == Outcome::Corrupt) {
        selector.record(static_cast<size_t>(job.relay), false, 0, r.seconds);
      }

      if (outcome == Outcome::Corrupt || (outcome == Outcome::Failed && !not_yet)) {
        const bool corrupt = outcome == Outcome::Corrupt;
        const std::string why = corrupt ? "its SHA-256 does not match the manifest" : r.error;
        log::debug("shardcast: {}: {}", url, why);
        ++f.stats.failed_attempts;
        f.stats.corrupt_shards += corrupt;
        sh.failed_relays.push_back(job.relay);
        if (++sh.failures >= options.attempts_per_shard && f.give_up.empty())
          f.give_up = fmt::format("shard {} failed {} times, last from {}: {}", i + 1, sh.failures,
                                  url, why);
      }
      if (outcome == Outcome::LocalError && f.give_up.empty())
        f.give_up = fmt::format("cannot store shard {}: {}", i + 1, local_error);
      // A failed head (or a shard that failed verification) starts over; a failed split-off
      // part is fetched again on its own, from the byte it had reached.
      if (outcome == Outcome::Corrupt ||
          (outcome != Outcome::Landed && head && outcome != Outcome::Abandoned)) {
        if (sh.state == ShardState::InFlight) reset(sh);
      } else if (outcome == Outcome::Failed) {
        part.status = Part::Waiting;
      }
      if (!f.give_up.empty()) over = true;
      f.cv.notify_all();
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
  f.stats.seconds = monotonic_seconds() - t0;
  return f.stats;
}

}  // namespace trellis::shardcast
