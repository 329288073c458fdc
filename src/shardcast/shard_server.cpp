#include "shardcast/shard_server.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>

#include <httplib.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/http_limits.h"
#include "common/json.h"
#include "common/logging.h"

namespace trellis::shardcast {
namespace {

void reply_error(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(Json{{"error", message}}.dump(), "application/json");
}

constexpr size_t kChunk = 64 << 10;  // bytes per write: the granularity of bandwidth pacing

}  // namespace

ShardServer::ShardServer(ServerOptions options)
    : options_(std::move(options)),
      access_(options_.limits),
      server_(std::make_unique<httplib::Server>()) {
  access_.set_static(options_.allow);
  routes();
}

ShardServer::~ShardServer() { stop(); }

void ShardServer::routes() {
  auto& svr = *server_;
  svr.new_task_queue = [n = options_.threads] {
    return new httplib::ThreadPool(static_cast<size_t>(std::max(n, 2)));
  };
  svr.set_socket_options([](socket_t sock) {  // no SO_REUSEPORT: a port in use is an error
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    // Every route is a GET: no body is ever read.
    if (const auto refusal = unbounded_body(req, 0)) {
      refuse_and_close(res, refusal->status, refusal->code, refusal->message);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.path == "/healthz" || req.path == "/metrics")
      return httplib::Server::HandlerResponse::Unhandled;
    if (!access_.allowed(req.remote_addr)) {
      ++forbidden_;
      reply_error(res, 403,
                  fmt::format("{} is not on this server's allowlist (only active pool members "
                              "may download)",
                              req.remote_addr));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!access_.admit_request(req.remote_addr, monotonic_seconds())) {
      ++limited_;
      res.set_header("Retry-After", "1");
      reply_error(res, 429,
                  fmt::format("{} is over this server's request rate ({} per second)",
                              req.remote_addr, access_.limits().requests_per_s));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.Get("/healthz", [](const auto&, auto& res) { res.set_content("ok", "text/plain"); });
  svr.Get("/metrics", [this](const auto&, auto& res) {
    res.set_content(metrics(), "text/plain; version=0.0.4");
  });
  // The regex admits exactly the layout's names, so no request can reach outside data_dir.
  svr.Get(R"(/(manifest\.json|probe\.bin|v[0-9]{1,18}/(shard|delta)_[0-9]{5,9}\.bin))",
          [this](const httplib::Request& req, httplib::Response& res) {
            const auto path = options_.data_dir / req.matches[1].str();
            const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
            struct stat st {};
            if (fd < 0 || ::fstat(fd, &st) != 0) {
              if (fd >= 0) ::close(fd);
              ++not_found_;
              reply_error(res, 404, fmt::format("{} is not here (yet)", req.path));
              return;
            }
            ++served_;
            // The descriptor lives as long as the provider: httplib destroys it after the reply.
            auto file = std::shared_ptr<int>(new int(fd), [](int* p) {
              ::close(*p);
              delete p;
            });
            const std::string ip = req.remote_addr;
            res.set_content_provider(
                static_cast<size_t>(st.st_size), "application/octet-stream",
                [this, file, ip](size_t offset, size_t length, httplib::DataSink& sink) {
                  std::string buf(std::min(length, kChunk), '\0');
                  const ssize_t got =
                      ::pread(*file, buf.data(), buf.size(), static_cast<off_t>(offset));
                  if (got <= 0) return false;  // truncated under us: abort the reply
                  const double wait =
                      access_.reserve_bytes(ip, static_cast<int64_t>(got), monotonic_seconds());
                  if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
                  if (!sink.write(buf.data(), static_cast<size_t>(got))) return false;
                  bytes_sent_ += got;
                  return true;
                });
          });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.body.empty()) reply_error(res, res.status, fmt::format("no such path {}", req.path));
  });
}

int ShardServer::start() {
  const std::string where = fmt::format("{}:{}", options_.host, options_.port);
  if (thread_.joinable()) throw Error("the server is already running", where);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not end the process
  port_ = options_.port == 0
              ? server_->bind_to_any_port(options_.host)
              : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0)
    throw Error("cannot listen on this address (in use, or not an address of this machine?)",
                where);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return port_;
}

void ShardServer::stop() {
  if (!thread_.joinable()) return;
  server_->stop();
  thread_.join();
}

std::string ShardServer::url() const { return fmt::format("http://{}:{}", options_.host, port_); }

std::string ShardServer::metrics() const {
  std::string out =
      "# HELP trellis_shardcast_requests_total requests for manifest, probe and shards, by "
      "answer\n# TYPE trellis_shardcast_requests_total counter\n";
  const std::pair<const char*, int64_t> answers[] = {
      {"200", served_}, {"403", forbidden_}, {"404", not_found_}, {"429", limited_}};
  for (const auto& [code, n] : answers)
    out += fmt::format("trellis_shardcast_requests_total{{server=\"{}\",code=\"{}\"}} {}\n",
                       options_.name, code, n);
  out += fmt::format(
      "# HELP trellis_shardcast_bytes_sent_total bytes of files sent\n"
      "# TYPE trellis_shardcast_bytes_sent_total counter\n"
      "trellis_shardcast_bytes_sent_total{{server=\"{}\"}} {}\n",
      options_.name, bytes_sent_.load());
  return extra_ ? out + extra_() : out;
}

}  // namespace trellis::shardcast
