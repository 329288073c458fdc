#include "protocol_abuse.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>

#include "common/hashing.h"
#include "common/identity.h"
#include "common/request_signing.h"

namespace trellis::test {
namespace {

struct Endpoint {
  std::string host;
  int port = 0;
};

Endpoint endpoint_of(const std::string& url) {
  const size_t host_at = url.find("://") + 3;
  const size_t colon = url.rfind(':');
  return {url.substr(host_at, colon - host_at), std::stoi(url.substr(colon + 1))};
}

// One exchange on a fresh connection: `head` (request line and headers, ending in a blank line),
// then up to `body_bytes` of body in 64 KiB pieces ('x' or chunked-encoded pieces when
// `chunked`), stopping once the server answers or hangs up. The status of the answer (0 if
// none came within 20 s) and the body bytes the server took.
AbuseOutcome exchange(const std::string& name, int expected, const Endpoint& to,
                      const std::string& head, int64_t body_bytes = 0, bool chunked = false,
                      const std::string& body = "") {
  AbuseOutcome out{name, expected};
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return out;
  timeval tv{20, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(to.port));
  ::inet_pton(AF_INET, to.host.c_str(), &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return out;
  }
  const auto send_all = [&](const std::string& bytes) {
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  };
  // Whether an answer is waiting (the server answered before the whole body came).
  const auto answered = [&] {
    char c;
    return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) != -1 || errno != EAGAIN;
  };
  bool ok = send_all(head + body);
  const std::string piece(64 << 10, 'x');
  std::ostringstream size_line;
  size_line << std::hex << piece.size() << "\r\n";
  const std::string chunk = size_line.str() + piece + "\r\n";
  while (ok && out.body_sent < body_bytes && !answered()) {
    ok = send_all(chunked ? chunk : piece);
    if (ok) out.body_sent += static_cast<int64_t>(piece.size());
  }
  std::string reply;
  char buf[4096];
  for (ssize_t n;
       reply.find("\r\n") == std::string::npos && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    reply.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (reply.starts_with("HTTP/1.1 ") && reply.size() >= 12)
    out.status = std::stoi(reply.substr(9, 3));
  out.answer = reply.substr(0, 300);
  return out;
}

std::string post_head(const std::string& target, const std::string& extra_headers,
                      size_t content_length) {
  return "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(content_length) + "\r\n" + extra_headers +
         "Connection: close\r\n\r\n";
}

std::string header_lines(const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string out;
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  return out;
}

}  // namespace

std::vector<AbuseOutcome> play_protocol_abuses(const std::string& orchestrator_url,
                                               const std::string& relay_url,
                                               const std::string& run_id,
                                               const std::string& registered_node) {
  const Endpoint orch = endpoint_of(orchestrator_url), relay = endpoint_of(relay_url);
  std::vector<AbuseOutcome> out;
  const auto now = static_cast<int64_t>(std::time(nullptr));

  // Privileged routes without the token, or with a wrong one.
  const std::string version = R"({"version": 2147483647})";
  out.push_back(exchange("publish version INT32_MAX without a token", 401, orch,
                         post_head("/trainer/version", "", version.size()), 0, false, version));
  out.push_back(
      exchange("publish version INT32_MAX with a wrong token", 401, orch,
               post_head("/trainer/version",
                         "Authorization: Bearer " + std::string(64, 'a') + "\r\n", version.size()),
               0, false, version));
  const std::string verdict =
      R"({"step": 0, "node_address": ")" + registered_node +
      R"(", "submission": 0, "accept": false, "reason": "x", "validator": "v"})";
  out.push_back(exchange("post a verdict without a token", 401, orch,
                         post_head("/validation/verdict", "", verdict.size()), 0, false, verdict));
  out.push_back(exchange("evict the honest worker without a token", 401, orch,
                         post_head("/nodes/" + registered_node + "/evict", "", 2), 0, false, "{}"));
  for (const std::string target :
       {"/nodes", "/allowlist", "/steps/0/accepted", "/rollouts/step_0/x-0.parquet"}) {
    out.push_back(exchange("GET " + target + " without a token", 401, orch,
                           "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  }

  // Node requests in another's name, unsigned, stale, replayed, or signed for another run.
  const Identity stranger = Identity::generate();
  const std::string ask =
      R"({"node_address": ")" + registered_node + R"(", "policy_version": 0, "groups": 1})";
  const auto signed_by = [&](const Identity& who, const std::string& run, int64_t ts,
                             const std::string& body) {
    return header_lines(sign_request(who, run, "POST", "/work", sha256_hex(body), ts));
  };
  out.push_back(exchange("ask for the honest worker's work unsigned", 401, orch,
                         post_head("/work", "", ask.size()), 0, false, ask));
  out.push_back(exchange("ask for the honest worker's work signed by another key", 403, orch,
                         post_head("/work", signed_by(stranger, run_id, now, ask), ask.size()), 0,
                         false, ask));
  const std::string own =
      R"({"node_address": ")" + stranger.address() + R"(", "policy_version": 0, "groups": 1})";
  out.push_back(exchange(
      "a request signed an hour ago", 401, orch,
      post_head("/work", signed_by(stranger, run_id, now - 3600, own), own.size()), 0, false, own));
  out.push_back(exchange(
      "a request signed for another run", 401, orch,
      post_head("/work", signed_by(stranger, "another-run", now, own), own.size()), 0, false, own));
  const std::string once = post_head("/work", signed_by(stranger, run_id, now, own), own.size());
  out.push_back(exchange("an unregistered node asks for work", 403, orch, once, 0, false, own));
  out.push_back(exchange("the same signed request replayed", 401, orch, once, 0, false, own));

  // Bodies that never end, are compressed, or claim more than a route takes.
  out.push_back(exchange(
      "a chunked body of 256 MiB", 411, orch,
      "POST /nodes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
      256 << 20, true));
  out.push_back(exchange(
      "a gzip body", 415, orch,
      "POST /nodes HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 1048576\r\n"
      "Connection: close\r\n\r\n",
      1 << 20));
  out.push_back(exchange("a body that claims a terabyte", 413, orch,
                         post_head("/nodes", "", size_t{1} << 40), 64 << 20));
  out.push_back(exchange("a 1 MiB registration (64 KiB is the limit)", 413, orch,
                         post_head("/nodes", "", 1 << 20), 1 << 20));
  out.push_back(
      exchange("an upload to a forged URL", 403, orch,
               "PUT /upload/step_0/" + stranger.address() +
                   "-0.parquet?expires=9999999999&sig=" + std::string(64, '0') +
                   " HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\nConnection: close\r\n\r\n",
               64 << 20));
  // cpp-httplib hangs up on a request line it cannot parse, without an answer.
  out.push_back(exchange("garbage instead of a request", 0, orch,
                         std::string("\x16\x03\x01\x02\x00 not http at all\r\n\r\n")));

  // The relay takes no bodies at all.
  out.push_back(exchange("a chunked body to the relay", 411, relay,
                         "GET /manifest.json HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                         "Connection: close\r\n\r\n",
                         64 << 20, true));
  out.push_back(exchange("a 1 GiB body to the relay", 413, relay,
                         "POST /manifest.json HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n"
                         "Connection: close\r\n\r\n",
                         64 << 20));
  return out;
}

int64_t flood_status(const std::string& orchestrator_url, int threads, int requests) {
  const Endpoint orch = endpoint_of(orchestrator_url);
  std::atomic<int64_t> ok{0};
  std::vector<std::future<void>> runs;
  for (int t = 0; t < threads; ++t) {
    runs.push_back(std::async(std::launch::async, [&] {
      for (int i = 0; i < requests; ++i) {
        ok += exchange("flood", 200, orch,
                       "GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                  .status == 200;
      }
    }));
  }
  for (auto& r : runs) r.get();
  return ok;
}

int64_t peak_memory_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("VmHWM:")) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

pid_t child_with_role(pid_t parent, const std::string& role) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string s((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close = s.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(s.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream cmd(entry.path() / "cmdline");
    std::string argv0, argv1;
    std::getline(cmd, argv0, '\0');
    std::getline(cmd, argv1, '\0');
    if (argv1 == role) return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

}  // namespace trellis::test
