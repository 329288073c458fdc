#include "orchestrator/endpoint_request.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include <curl/curl.h>
#include <fmt/format.h>

#include "common/error.h"
#include "common/ip_address.h"
#include "common/source_address.h"

namespace trellis::orchestrator {
namespace {

// One request's exchange: what the callbacks learn of the answer, and the answer.
struct Exchange {
  struct EasyDeleter {
    void operator()(CURL* c) const { curl_easy_cleanup(c); }
  };
  struct HeadersDeleter {
    void operator()(curl_slist* l) const { curl_slist_free_all(l); }
  };
  std::unique_ptr<CURL, EasyDeleter> curl{curl_easy_init()};
  std::unique_ptr<curl_slist, HeadersDeleter> headers;
  EndpointAnswer answer;
  EndpointReach reach = EndpointReach::kPublic;
  int64_t max_body_bytes = 0;
  int64_t header_bytes = 0;
  bool headers_too_large = false;
  bool body_too_large = false;
  bool body_started = false;  // the headers are complete: the status stands
  char message[CURL_ERROR_SIZE] = {0};
};

size_t on_header(char*, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  x->header_bytes += static_cast<int64_t>(size * n);
  if (x->header_bytes > kMaxEndpointHeaderBytes) {
    x->headers_too_large = true;
    return 0;  // any count but the one given ends the transfer
  }
  return size * n;
}

size_t on_body(char* data, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  x->body_started = true;
  if (x->max_body_bytes == 0) return 0;  // ends the transfer (CURLE_WRITE_ERROR): none is read
  if (static_cast<int64_t>(x->answer.body.size() + size * n) > x->max_body_bytes) {
    x->body_too_large = true;
    return 0;
  }
  x->answer.body.append(data, size * n);
  return size * n;
}

// The numeric form of a socket address libcurl is about to connect to ("" for a family other
// than IPv4 and IPv6).
std::string address_text(const curl_sockaddr& a) {
  char text[INET6_ADDRSTRLEN] = {0};
  const void* ip = nullptr;
  if (a.family == AF_INET) ip = &reinterpret_cast<const sockaddr_in*>(&a.addr)->sin_addr;
  if (a.family == AF_INET6) ip = &reinterpret_cast<const sockaddr_in6*>(&a.addr)->sin6_addr;
  if (!ip || !inet_ntop(a.family, ip, text, sizeof text)) return "";
  return text;
}

// Opens each socket libcurl connects with, once the name is resolved: the one place that sees
// the address actually used, whatever name, DNS answer or list of addresses led to it.
curl_socket_t open_socket(void* user, curlsocktype, curl_sockaddr* address) {
  auto* x = static_cast<Exchange*>(user);
  if (x->reach == EndpointReach::kPublic) {
    const std::string ip = address_text(*address);
    if (!is_public_address(ip)) {
      x->answer.refused_address = ip.empty() ? "an address that is no IP" : ip;
      return CURL_SOCKET_BAD;  // libcurl tries the name's next address, if it has one
    }
  }
  return ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

// <scheme>://<host>[:<port>]<target> for `endpoint`, or "" when it is no URL. Whatever path,
// query, fragment or credentials a stranger put in the endpoint are dropped: the orchestrator
// asks for its own targets only, and cannot be made to ask for another on a host it can reach.
std::string request_url(const std::string& endpoint, const std::string& target) {
  struct UrlDeleter {
    void operator()(CURLU* u) const { curl_url_cleanup(u); }
  };
  std::unique_ptr<CURLU, UrlDeleter> url{curl_url()};
  if (!url || curl_url_set(url.get(), CURLUPART_URL, endpoint.c_str(), 0) != CURLUE_OK) return "";
  for (const CURLUPart part : {CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_OPTIONS,
                               CURLUPART_QUERY, CURLUPART_FRAGMENT}) {
    curl_url_set(url.get(), part, nullptr, 0);
  }
  char* text = nullptr;
  if (curl_url_set(url.get(), CURLUPART_PATH, "/", 0) != CURLUE_OK ||
      curl_url_get(url.get(), CURLUPART_URL, &text, 0) != CURLUE_OK) {
    return "";
  }
  std::string origin = text;  // "<scheme>://<host>[:<port>]/"
  curl_free(text);
  origin.pop_back();
  return origin + target;
}

void global_init() {
  static const CURLcode code = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (code != CURLE_OK) fail("libcurl", "{}", curl_easy_strerror(code));
}

// Sets up `x`'s transfer of `r` (false, with the answer's error, when `r` cannot be sent).
bool prepare(Exchange& x, const EndpointRequest& r, const std::string& interface,
             long deadline_ms) {
  CURL* c = x.curl.get();
  if (!c) fail("libcurl", "cannot start a transfer");
  const std::string url = request_url(r.endpoint, r.target);
  if (url.empty()) {
    x.answer.error = "the endpoint is not a URL";
    return false;
  }
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());  // libcurl keeps a copy
  // Discovery admits only http(s) endpoints; libcurl, which speaks many more, must hold to that
  // whatever it is given (and follows no redirect: the default).
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  // Straight to the node: an http_proxy in the environment would make the proxy's address the
  // one checked, and the proxy the one that reaches wherever the stranger's name points.
  curl_easy_setopt(c, CURLOPT_PROXY, "");
  curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &x);
  if (r.method == "GET") {
    curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
  } else {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, r.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    if (r.method != "POST") curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  // "Expect:" unset: no wait for a 100 Continue that a stranger's endpoint may never send.
  std::vector<std::string> lines = {"Expect:"};
  for (const auto& [name, value] : r.headers) lines.push_back(name + ": " + value);
  for (const std::string& line : lines) {
    curl_slist* more = curl_slist_append(x.headers.get(), line.c_str());
    if (!more) fail("libcurl", "cannot hold a request's headers");
    if (!x.headers) x.headers.reset(more);  // the list's head; later appends keep it
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, x.headers.get());
  if (!interface.empty()) curl_easy_setopt(c, CURLOPT_INTERFACE, interface.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, deadline_ms);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, x.message);
  curl_easy_setopt(c, CURLOPT_PRIVATE, static_cast<void*>(&x));
  return true;
}

// Fills in the answer of an exchange libcurl ended with `code`.
void finish(Exchange& x, CURLcode code) {
  EndpointAnswer& a = x.answer;
  long status = 0;
  curl_easy_getinfo(x.curl.get(), CURLINFO_RESPONSE_CODE, &status);
  const bool body_skipped = code == CURLE_WRITE_ERROR && x.max_body_bytes == 0 && x.body_started;
  if (code == CURLE_OK || body_skipped) {
    a.status = static_cast<int>(status);
  } else if (!a.refused_address.empty()) {
    a.error = fmt::format(
        "it is at {}, which the public internet does not reach: the orchestrator connects to "
        "such addresses only with orchestrator.invite_private_addresses = true (a pool on a "
        "private network)",
        a.refused_address);
  } else if (x.headers_too_large) {
    a.error = fmt::format("answered with more than {} bytes of headers", kMaxEndpointHeaderBytes);
  } else if (x.body_too_large) {
    a.error = fmt::format("answered with more than {} bytes", x.max_body_bytes);
  } else {
    a.error = x.message[0] ? x.message : curl_easy_strerror(code);
  }
  if (!a.error.empty()) a.body.clear();
}

}  // namespace

std::vector<EndpointAnswer> send_to_endpoints(const std::vector<EndpointRequest>& requests,
                                              double deadline_s, EndpointReach reach) {
  global_init();
  const std::string from = source_address();
  const std::string interface = from.empty() ? "" : "host!" + from;  // never an interface name
  const long deadline_ms = std::max(1L, static_cast<long>(deadline_s * 1000));

  std::vector<Exchange> exchanges(requests.size());
  // Declared last, so cleaned up first: it lets go of the transfers before they are freed.
  struct MultiDeleter {
    void operator()(CURLM* m) const { curl_multi_cleanup(m); }
  };
  std::unique_ptr<CURLM, MultiDeleter> multi{curl_multi_init()};
  if (!multi) fail("libcurl", "cannot start a multi handle");
  for (size_t i = 0; i < requests.size(); ++i) {
    Exchange& x = exchanges[i];
    x.reach = reach;
    x.max_body_bytes = std::max<int64_t>(0, requests[i].max_body_bytes);
    if (!prepare(x, requests[i], interface, deadline_ms)) continue;
    if (const CURLMcode m = curl_multi_add_handle(multi.get(), x.curl.get()); m != CURLM_OK) {
      x.answer.error = curl_multi_strerror(m);
    }
  }

  // Every transfer ends by its own deadline, so this loop does too.
  int running = 0;
  do {
    if (const CURLMcode m = curl_multi_perform(multi.get(), &running); m != CURLM_OK) {
      fail("libcurl", "{}", curl_multi_strerror(m));
    }
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi.get(), &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      void* exchange = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &exchange);
      finish(*static_cast<Exchange*>(exchange), msg->data.result);
      curl_multi_remove_handle(multi.get(), msg->easy_handle);
    }
    if (running) curl_multi_poll(multi.get(), nullptr, 0, 100, nullptr);
  } while (running);
  std::vector<EndpointAnswer> answers;
  for (Exchange& x : exchanges) answers.push_back(std::move(x.answer));
  return answers;
}

}  // namespace trellis::orchestrator
