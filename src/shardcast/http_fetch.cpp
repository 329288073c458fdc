#include "shardcast/http_fetch.h"

#include <chrono>
#include <mutex>

#include <curl/curl.h>
#include <fmt/format.h>

#include "common/source_address.h"

namespace trellis::shardcast {
namespace {

struct Transfer {
  long body_status = 200;  // the status whose body goes to the sink
  const std::function<bool(std::string_view)>* sink = nullptr;
  const std::function<bool()>* cancelled = nullptr;
  std::string* error_body = nullptr;
  CURL* curl = nullptr;
  int64_t bytes = 0;
  bool aborted = false;
};

size_t on_data(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  t->bytes += static_cast<int64_t>(len);
  if (status == t->body_status && t->sink) {
    if (!(*t->sink)({data, len})) {
      t->aborted = true;
      return 0;  // libcurl ends the transfer with CURLE_WRITE_ERROR
    }
  } else if (t->error_body && t->error_body->size() < 4096) {
    t->error_body->append(data, std::min<size_t>(len, 4096));
  }
  return len;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  const auto* t = static_cast<Transfer*>(user);
  return *t->cancelled && (*t->cancelled)() ? 1 : 0;  // non-zero aborts the transfer
}

// One easy handle per thread: libcurl keeps its connections open between transfers.
CURL* thread_handle() {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  struct Handle {
    CURL* curl = curl_easy_init();
    ~Handle() { curl_easy_cleanup(curl); }
  };
  thread_local Handle handle;
  curl_easy_reset(handle.curl);
  return handle.curl;
}

}  // namespace

HttpResult http_get(const std::string& url, const HttpOptions& options,
                    const std::function<bool(std::string_view)>& sink) {
  std::string error_body;
  HttpResult r;
  CURL* curl = thread_handle();
  const bool ranged = options.range_end > 0;
  Transfer t{ranged ? 206L : 200L, &sink, &options.cancelled, &error_body, curl};
  const std::string from = options.source_ip.empty() ? source_address() : options.source_ip;
  const std::string interface = "host!" + from;  // an address, never an interface name
  if (!from.empty()) curl_easy_setopt(curl, CURLOPT_INTERFACE, interface.c_str());
  if (!options.source_ip.empty()) {
    // libcurl would hand a connection bound to this address to the next request that names no
    // address, which a server then takes for another client: use it once, on its own.
    curl_easy_setopt(curl, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(curl, CURLOPT_FORBID_REUSE, 1L);
  }
  if (ranged) {  // libcurl copies the string
    const std::string range = fmt::format("{}-{}", options.range_begin, options.range_end - 1);
    curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
  }
  char message[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, message);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::min(options.connect_timeout_s, options.stall_s) * 1000));
  if (options.cancelled) {
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  }
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(options.timeout_s * 1000));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, static_cast<long>(options.stall_bytes_per_s));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>(options.stall_s + 0.5)));
  struct Headers {
    curl_slist* list = nullptr;
    ~Headers() { curl_slist_free_all(list); }
  } headers;
  if (!options.bearer_token.empty()) {
    headers.list =
        curl_slist_append(nullptr, ("Authorization: Bearer " + options.bearer_token).c_str());
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.list);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const CURLcode code = curl_easy_perform(curl);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.bytes = t.bytes;
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  r.status = static_cast<int>(status);
  if (code != CURLE_OK) {
    r.error = t.aborted ? "aborted by the receiver"
              : code == CURLE_ABORTED_BY_CALLBACK
                  ? "cancelled"
                  : fmt::format("{}", message[0] ? message : curl_easy_strerror(code));
    if (code == CURLE_OPERATION_TIMEDOUT) r.status = 0;
  } else if (ranged && r.status == 200) {
    r.error = "the server ignored the byte range";
  } else if (!r.ok()) {
    r.error = fmt::format("HTTP {}{}", r.status, error_body.empty() ? "" : ": " + error_body);
    curl_off_t retry = 0;
    if (curl_easy_getinfo(curl, CURLINFO_RETRY_AFTER, &retry) == CURLE_OK)
      r.retry_after_s = static_cast<double>(retry);
  }
  return r;
}

HttpResult http_get_string(const std::string& url, const HttpOptions& options, std::string& body) {
  body.clear();
  HttpResult r = http_get(url, options, [&](std::string_view piece) {
    body.append(piece);
    return true;
  });
  return r;
}

}  // namespace trellis::shardcast
