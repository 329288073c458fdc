#include "discovery/redis_store.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "common/error.h"
#include "common/hashing.h"
#include "common/ip_address.h"

namespace trellis::discovery {
namespace {

// ARGV: prefix, address, metadata, ip, signed_at, now, ttl_s, max per IP, max in all. Sweeps the
// expired nodes, then checks and records one publication (store.h's rules, as SqliteStore's).
constexpr const char* kPublishScript = R"lua(
local p, addr, meta, ip = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local signed_at, now, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local max_ip, max_all = tonumber(ARGV[8]), tonumber(ARGV[9])
for _, a in ipairs(redis.call('ZRANGEBYSCORE', p .. 'live', '-inf', '(' .. (now - ttl))) do
  local old_ip = redis.call('HGET', p .. 'node:' .. a, 'ip')
  if old_ip then redis.call('ZREM', p .. 'ip:' .. old_ip, a) end
  redis.call('DEL', p .. 'node:' .. a)
  redis.call('ZREM', p .. 'live', a)
end
local key = p .. 'node:' .. addr
local prev = redis.call('HMGET', key, 'signed_at', 'ip')
if prev[1] then
  if signed_at < tonumber(prev[1]) then return 'replayed' end
  if prev[2] ~= ip and redis.call('ZCARD', p .. 'ip:' .. ip) >= max_ip then return 'ip_full' end
  if prev[2] ~= ip then redis.call('ZREM', p .. 'ip:' .. prev[2], addr) end
else
  if redis.call('ZCARD', p .. 'ip:' .. ip) >= max_ip then return 'ip_full' end
  if redis.call('ZCARD', p .. 'live') >= max_all then return 'full' end
  redis.call('HSET', key, 'first_seen', ARGV[6])
end
redis.call('HSET', key, 'metadata', meta, 'ip', ip, 'signed_at', ARGV[5], 'last_seen', ARGV[6])
redis.call('ZADD', p .. 'live', now, addr)
redis.call('ZADD', p .. 'ip:' .. ip, now, addr)
return 'published'
)lua";

using Reply = std::unique_ptr<redisReply, void (*)(void*)>;

// One command on `ctx` as it is: its reply, or null when the connection failed.
Reply send(redisContext* ctx, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return Reply(static_cast<redisReply*>(
                   redisCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(), lens.data())),
               freeReplyObject);
}

bool starts_with(const redisReply* r, std::string_view prefix) {
  return std::string_view(r->str, r->len).substr(0, prefix.size()) == prefix;
}

// AUTH on a fresh connection, when there is a password.
void log_in(redisContext* ctx, const std::string& where, const RedisLogin& login) {
  if (login.password.empty()) return;
  std::vector<std::string> args = {"AUTH"};
  if (!login.user.empty()) args.push_back(login.user);
  args.push_back(login.password);
  const Reply r = send(ctx, args);
  if (!r) fail(where, "Redis: {}", ctx->errstr);
  if (r->type != REDIS_REPLY_ERROR) return;
  if (starts_with(r.get(), "ERR AUTH") || starts_with(r.get(), "ERR Client sent AUTH")) {
    fail(where,
         "Redis takes no password, but one was given ({}): unset it there, or set one in "
         "Redis (requirepass)",
         login.source);
  }
  fail(where, "Redis refused the login {}with the password from {}: {}",
       login.user.empty() ? "" : "of user '" + login.user + "' ", login.source,
       std::string(r->str, r->len));
}

// One command on `ctx`, reconnecting (and logging in again) first when the connection failed
// before.
Reply run(redisContext* ctx, const std::string& where, const RedisLogin& login,
          const std::vector<std::string>& args) {
  if (ctx->err) {
    if (redisReconnect(ctx) != REDIS_OK)
      fail(where, "Redis connection lost and not back: {}", ctx->errstr);
    log_in(ctx, where, login);
  }
  Reply r = send(ctx, args);
  if (!r) fail(where, "Redis: {}", ctx->errstr);
  if (r->type == REDIS_REPLY_ERROR && starts_with(r.get(), "NOAUTH")) {
    fail(where,
         "Redis asks for a password: put it in a file of mode 0600 named by "
         "discovery.redis_password_file, or in the environment variable TRELLIS_REDIS_PASSWORD");
  }
  if (r->type == REDIS_REPLY_ERROR) fail(where, "Redis: {}", std::string(r->str, r->len));
  return r;
}

std::string text_of(const redisReply* r) {
  return r && r->type == REDIS_REPLY_STRING ? std::string(r->str, r->len) : std::string();
}

}  // namespace

RedisStore::RedisStore(const std::string& address, const std::string& prefix,
                       const std::string& name, StoreLimits limits, RedisLogin login)
    : address_(address), prefix_(prefix), limits_(limits), login_(std::move(login)) {
  const HostPort server = parse_host_port(address, "discovery.redis");
  const timeval timeout{5, 0};
  ctx_ = redisConnectWithTimeout(server.host.c_str(), server.port, timeout);
  if (ctx_ == nullptr || ctx_->err) {
    const std::string why = ctx_ ? ctx_->errstr : "out of memory";
    redisFree(ctx_);
    ctx_ = nullptr;
    fail("discovery.redis", "cannot connect to Redis at {}: {} (is redis-server running?)", address,
         why);
  }
  redisSetTimeout(ctx_, timeout);
  try {  // the id is set once, by whichever server comes first
    const std::string where = "Redis at " + address_;
    log_in(ctx_, where, login_);
    run(ctx_, where, login_, {"SET", prefix_ + "id", name + "-" + random_hex(8), "NX"});
    const Reply id = run(ctx_, where, login_, {"GET", prefix_ + "id"});
    if (id->type != REDIS_REPLY_STRING) fail(where, "no id under {}id", prefix_);
    id_.assign(id->str, id->len);
  } catch (...) {
    redisFree(ctx_);
    throw;
  }
}

RedisStore::~RedisStore() { redisFree(ctx_); }

Published RedisStore::publish(const NodeMetadata& m, const std::string& ip, int64_t signed_at,
                              double now) {
  std::lock_guard lock(mu_);
  const Reply r = run(
      ctx_, "Redis at " + address_, login_,
      {"EVAL", kPublishScript, "0", prefix_, m.address, to_json(m).dump(), ip,
       std::to_string(signed_at), fmt::format("{:.6f}", now), fmt::format("{:.6f}", limits_.ttl_s),
       std::to_string(limits_.max_nodes_per_ip), std::to_string(limits_.max_nodes)});
  const std::string outcome = r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING
                                  ? std::string(r->str, r->len)
                                  : "";
  if (outcome == "published") return Published::kPublished;
  if (outcome == "replayed") return Published::kReplayed;
  if (outcome == "ip_full") return Published::kIpFull;
  if (outcome == "full") return Published::kServiceFull;
  fail("Redis at " + address_, "unexpected answer '{}' to a publication", outcome);
}

std::vector<DiscoveredNode> RedisStore::nodes(double now) {
  std::lock_guard lock(mu_);
  const std::string where = "Redis at " + address_;
  const Reply live =
      run(ctx_, where, login_,
          {"ZRANGEBYSCORE", prefix_ + "live", fmt::format("{:.6f}", now - limits_.ttl_s), "+inf"});
  std::vector<DiscoveredNode> out;
  for (size_t i = 0; i < live->elements; ++i) {
    const std::string address = text_of(live->element[i]);
    const Reply h =
        run(ctx_, where, login_,
            {"HMGET", prefix_ + "node:" + address, "metadata", "ip", "first_seen", "last_seen"});
    if (h->type != REDIS_REPLY_ARRAY || h->elements != 4 || text_of(h->element[0]).empty()) {
      continue;  // expired between the two reads
    }
    DiscoveredNode n;
    // Written by publish() from checked metadata: read back with the same checks all the same.
    n.metadata = parse_node_metadata(parse_json(text_of(h->element[0]), where), address, where);
    n.ip = text_of(h->element[1]);
    n.first_seen = std::stod(text_of(h->element[2]).empty() ? "0" : text_of(h->element[2]));
    n.last_seen = std::stod(text_of(h->element[3]).empty() ? "0" : text_of(h->element[3]));
    out.push_back(std::move(n));
  }
  std::sort(out.begin(), out.end(), [](const DiscoveredNode& a, const DiscoveredNode& b) {
    return a.metadata.address < b.metadata.address;
  });
  return out;
}

int64_t RedisStore::live_count(double now) {
  std::lock_guard lock(mu_);
  const Reply r =
      run(ctx_, "Redis at " + address_, login_,
          {"ZCOUNT", prefix_ + "live", fmt::format("{:.6f}", now - limits_.ttl_s), "+inf"});
  return r->integer;
}

}  // namespace trellis::discovery
