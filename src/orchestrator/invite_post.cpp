#include "orchestrator/invite_post.h"

#include <algorithm>
#include <initializer_list>
#include <memory>

#include <arpa/inet.h>
#include <sys/socket.h>

#include <curl/curl.h>
#include <fmt/format.h>

#include "common/error.h"
#include "common/ip_address.h"
#include "common/source_address.h"

namespace trellis::orchestrator {
namespace {

// One invite's exchange: what the callbacks learn of the answer, and the answer.
struct Exchange {
  struct EasyDeleter {
    void operator()(CURL* c) const { curl_easy_cleanup(c); }
  };
  std::unique_ptr<CURL, EasyDeleter> curl{curl_easy_init()};
  InviteAnswer answer;
  int64_t header_bytes = 0;
  bool headers_too_large = false;
  bool body_started = false;  // the headers are complete: the status stands
  InviteReach reach = InviteReach::kPublic;
  char message[CURL_ERROR_SIZE] = {0};
};

size_t on_header(char*, size_t size, size_t n, void* user) {
  auto* x = static_cast<Exchange*>(user);
  x->header_bytes += static_cast<int64_t>(size * n);
  if (x->header_bytes > kMaxInviteHeaderBytes) {
    x->headers_too_large = true;
    return 0;  // any count but the one given ends the transfer
  }
  return size * n;
}

size_t on_body(char*, size_t, size_t, void* user) {
  static_cast<Exchange*>(user)->body_started = true;
  return 0;  // ends the transfer (CURLE_WRITE_ERROR): the body is not read
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
  if (x->reach == InviteReach::kPublic) {
    const std::string ip = address_text(*address);
    if (!is_public_address(ip)) {
      x->answer.refused_address = ip.empty() ? "an address that is no IP" : ip;
      return CURL_SOCKET_BAD;  // libcurl tries the name's next address, if it has one
    }
  }
  return ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

// <scheme>://<host>[:<port>]/invite for `endpoint`, or "" when it is no URL. Whatever path,
// query, fragment or credentials a stranger put in the endpoint are dropped: the orchestrator
// posts to one path only, and cannot be made to post to another on a host it can reach.
std::string invite_url(const std::string& endpoint) {
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
  if (curl_url_set(url.get(), CURLUPART_PATH, "/invite", 0) != CURLUE_OK ||
      curl_url_get(url.get(), CURLUPART_URL, &text, 0) != CURLUE_OK) {
    return "";
  }
  std::string out = text;
  curl_free(text);
  return out;
}

void global_init() {
  static const CURLcode code = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (code != CURLE_OK) fail("libcurl", "{}", curl_easy_strerror(code));
}

// The answer of an exchange libcurl ended with `code`.
InviteAnswer answer_of(const Exchange& x, CURLcode code) {
  InviteAnswer a;
  a.refused_address = x.answer.refused_address;
  long status = 0;
  curl_easy_getinfo(x.curl.get(), CURLINFO_RESPONSE_CODE, &status);
  if (code == CURLE_OK || (code == CURLE_WRITE_ERROR && x.body_started)) {
    a.status = static_cast<int>(status);
  } else if (!a.refused_address.empty()) {
    a.error = fmt::format(
        "it is at {}, which the public internet does not reach: no invite goes there unless "
        "orchestrator.invite_private_addresses = true (a pool on a private network)",
        a.refused_address);
  } else if (x.headers_too_large) {
    a.error = fmt::format("answered with more than {} bytes of headers", kMaxInviteHeaderBytes);
  } else {
    a.error = x.message[0] ? x.message : curl_easy_strerror(code);
  }
  return a;
}

}  // namespace

std::vector<InviteAnswer> post_invites(const std::vector<InvitePost>& posts, double deadline_s,
                                       InviteReach reach) {
  global_init();
  struct Headers {
    curl_slist* list = nullptr;
    ~Headers() { curl_slist_free_all(list); }
  } headers;
  // "Expect:" unset: no wait for a 100 Continue that a stranger's endpoint may never send.
  headers.list = curl_slist_append(headers.list, "Content-Type: application/json");
  headers.list = curl_slist_append(headers.list, "Expect:");
  const std::string from = source_address();
  const std::string interface = "host!" + from;  // an address, never an interface name
  const long deadline_ms = std::max(1L, static_cast<long>(deadline_s * 1000));

  std::vector<Exchange> exchanges(posts.size());
  // Declared last, so cleaned up first: it lets go of the transfers before they are freed.
  struct MultiDeleter {
    void operator()(CURLM* m) const { curl_multi_cleanup(m); }
  };
  std::unique_ptr<CURLM, MultiDeleter> multi{curl_multi_init()};
  if (!multi) fail("libcurl", "cannot start a multi handle");
  for (size_t i = 0; i < posts.size(); ++i) {
    Exchange& x = exchanges[i];
    x.reach = reach;
    CURL* c = x.curl.get();
    if (!c) fail("libcurl", "cannot start a transfer");
    const std::string url = invite_url(posts[i].endpoint);
    if (url.empty()) {
      x.answer.error = "the endpoint is not a URL";
      continue;
    }
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());  // libcurl keeps a copy
    // Discovery admits only http(s) endpoints; libcurl, which speaks many more, must hold to
    // that whatever it is given (and follows no redirect: the default).
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    // Straight to the node: an http_proxy in the environment would make the proxy's address the
    // one checked, and the proxy the one that reaches wherever the stranger's name points.
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &x);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, posts[i].body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(posts[i].body.size()));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.list);
    if (!from.empty()) curl_easy_setopt(c, CURLOPT_INTERFACE, interface.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, deadline_ms);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, x.message);
    curl_easy_setopt(c, CURLOPT_PRIVATE, static_cast<void*>(&x));
    if (const CURLMcode m = curl_multi_add_handle(multi.get(), c); m != CURLM_OK) {
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
      auto* x = static_cast<Exchange*>(exchange);
      x->answer = answer_of(*x, msg->data.result);
      curl_multi_remove_handle(multi.get(), msg->easy_handle);
    }
    if (running) curl_multi_poll(multi.get(), nullptr, 0, 100, nullptr);
  } while (running);
  std::vector<InviteAnswer> answers;
  for (Exchange& x : exchanges) answers.push_back(std::move(x.answer));
  return answers;
}

}  // namespace trellis::orchestrator
