// HTTP GET for SHARDCAST clients and relays (libcurl): bounded connect time, a stall detector
// (a transfer slower than `stall_bytes_per_s` for `stall_s` is abandoned, so a relay that hangs
// costs seconds, not the download), an overall time limit, an optional source address (a client
// behind a specific interface; tests use 127.0.0.x), byte ranges (the end game splits a transfer
// between relays), and connection reuse per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace trellis::shardcast {

struct HttpOptions {
  // At most stall_s too: a server that is frozen but whose kernel still queues connections
  // fills its backlog, and then a connect waits for nothing.
  double connect_timeout_s = 5;
  double timeout_s = 300;  // the whole transfer
  double stall_s = 10;
  int64_t stall_bytes_per_s = 1024;
  // "" = the process's (network.source_address); set: a fresh connection, never reused.
  std::string source_ip;
  std::string bearer_token;  // sent as Authorization: Bearer ...; "" = none
  // Bytes [range_begin, range_end) only, when range_end > 0: the answer must be 206.
  int64_t range_begin = 0, range_end = 0;
  // Polled while the transfer runs (also while connecting); true aborts it.
  std::function<bool()> cancelled;
};

struct HttpResult {
  int status = 0;     // HTTP status; 0 when no answer came (connection refused, timeout, stall)
  std::string error;  // why the transfer failed ("" when it completed)
  int64_t bytes = 0;  // body bytes received
  double seconds = 0;
  double retry_after_s = 0;  // from a 429's Retry-After
  bool ok() const { return error.empty() && (status == 200 || status == 206); }
};

// GETs `url`, passing each piece of a 200 body (206 for a range) to `sink` (a false return aborts
// the transfer). Bodies of other statuses go nowhere; a 200 to a range request is an error. Never
// throws for network failures; they are in the result.
HttpResult http_get(const std::string& url, const HttpOptions& options,
                    const std::function<bool(std::string_view)>& sink);
// GETs `url` into `body` (whatever the status).
HttpResult http_get_string(const std::string& url, const HttpOptions& options, std::string& body);

}  // namespace trellis::shardcast
