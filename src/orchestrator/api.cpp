// The orchestrator's HTTP server (api.h): ApiOptions from the config, the server's construction and
// crash recovery, the route table (routes(): every route in one place) and what guards every
// request before and around its handler. The handlers are in api_<group>.cpp (api_impl.h).
#include "orchestrator/api.h"

#include <httplib.h>

#include <algorithm>
#include <charconv>
#include <csignal>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/exception_message.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/http_limits.h"
#include "common/http_service.h"
#include "common/identity.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/request_signing.h"
#include "orchestrator/api_impl.h"
#include "orchestrator/credentials.h"
#include "orchestrator/signed_url.h"
#include "orchestrator/state.h"
#include "rollout/store.h"

namespace trellis::orchestrator {

namespace api_detail {

std::optional<int64_t> parse_index(std::string_view text) {
  int64_t v = 0;
  if (text.empty() || text.size() > 10) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0 || v > INT32_MAX) {
    return std::nullopt;
  }
  return v;
}

int64_t integer_field(const Json& body, const char* key, int64_t lo, int64_t hi,
                      const std::string& where) {
  if (!body.contains(key))
    refuse(400, "malformed_request", fmt::format("missing field '{}' ({})", key, where));
  const Json& v = body.at(key);
  if (!v.is_number_integer()) {
    refuse(400, "malformed_request",
           fmt::format("field '{}' must be an integer, got {} ({})", key, v.type_name(), where));
  }
  if (!json_integer_in(v, lo, hi)) {
    refuse(
        400, "malformed_request",
        fmt::format("field '{}' = {} is out of range [{}, {}] ({})", key, v.dump(), lo, hi, where));
  }
  return v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
}

std::string string_field(const Json& body, const char* key, const std::string& where) {
  if (!body.contains(key))
    refuse(400, "malformed_request", fmt::format("missing field '{}' ({})", key, where));
  const Json& v = body.at(key);
  if (!v.is_string()) {
    refuse(400, "malformed_request",
           fmt::format("field '{}' must be a string, got {} ({})", key, v.type_name(), where));
  }
  return v.get<std::string>();
}

Json parse_body(const httplib::Request& req, const std::string& where) {
  Json body;
  try {
    body = parse_json(req.body, where);
  } catch (const Error& e) {
    refuse(400, "malformed_request", fmt::format("the request body is not JSON: {}", e.what()));
  }
  if (!body.is_object()) {
    refuse(400, "malformed_request",
           fmt::format("the request body must be a JSON object ({})", where));
  }
  return body;
}

std::string address_field(const Json& body, const char* key, const std::string& where) {
  std::string v = string_field(body, key, where);
  if (!rollout::is_node_address(v)) {
    refuse(400, "malformed_request",
           fmt::format("field '{}' must be 64 lowercase hex digits (an Ed25519 public key) ({})",
                       key, where));
  }
  return v;
}

std::string file_name(const SubmissionKey& key) {
  return rollout::stored_file_name(key.node_address, key.submission, "");
}

std::string describe(const SubmissionKey& key) {
  return fmt::format("step {} submission {} of node {}", key.step, key.submission,
                     key.node_address);
}

}  // namespace api_detail

using namespace api_detail;

ApiOptions api_options(const Config& config, const std::filesystem::path& run_dir) {
  ApiOptions o;
  o.host = config.get<std::string>("orchestrator.host");
  o.port = port_setting(config, "orchestrator.port");
  o.url = config.get<std::string>("orchestrator.url");
  const std::string data_dir = config.get<std::string>("orchestrator.data_dir");
  o.data_dir = data_dir.empty() ? run_dir : std::filesystem::path(data_dir);
  auto name = std::filesystem::absolute(run_dir).lexically_normal();  // "runs/x/." -> ".../x/"
  if (name.filename().empty()) name = name.parent_path();
  o.run_id = name.filename().string() + "-" + random_hex(8);
  o.steps = config.get_at_least<int64_t>("rl.steps", 1);
  o.batch_size = config.get_at_least<int64_t>("rl.batch_size", 1);
  o.group_size = config.get_at_least<int64_t>("rl.group_size", 1);
  o.async_level = config.get_at_least<int64_t>("rl.async_level", 0);
  o.url_ttl_s = config.get_at_least<int64_t>("orchestrator.url_ttl_s", 1);
  o.max_upload_bytes = config.get_at_least<int64_t>("orchestrator.max_upload_mib", 1) << 20;
  o.secrets_dir = secrets_dir(config, run_dir);
  o.key_file = config.get<std::string>("orchestrator.key_file");
  o.signature_window_s = config.get_at_least<int64_t>("orchestrator.signature_window_s", 1);
  o.pool = pool_policy(config);
  o.validation_lease_s = config.get_at_least<int64_t>("orchestrator.validation_lease_s", 1);
  o.work_lease_s = config.get_at_least<int64_t>("orchestrator.work_lease_s", 1);
  o.max_backlog_steps = config.get<double>("orchestrator.max_backlog_steps");
  o.max_concurrent_uploads = config.get_at_least<int64_t>("orchestrator.max_concurrent_uploads", 1);
  o.trusted_proxies = trusted_proxies_setting(config, "orchestrator.trusted_proxies");
  o.sweep = SweepOptions::from_config(config);
  if (!(o.max_backlog_steps * static_cast<double>(o.batch_size) >=
        static_cast<double>(o.group_size))) {
    fail("orchestrator.max_backlog_steps",
         "{} x rl.batch_size ({}) must leave room for one group of rl.group_size ({})",
         o.max_backlog_steps, o.batch_size, o.group_size);
  }
  return o;
}

Server::Impl::Impl(ApiOptions o)
    : opt(with_tokens(std::move(o))),
      state(opt.data_dir / "orchestrator.sqlite", opt.run_id,
            Identity::load_or_create(keeper_key_file(opt.key_file, opt.data_dir)), opt.pool),
      signer(state.url_secret()),
      store(opt.data_dir / "rollouts"),
      validating(opt.data_dir / "validating"),
      rejected(opt.data_dir / "rejected"),
      nonces(opt.signature_window_s, opt.signed_requests_in_window, opt.signed_requests_per_address,
             static_cast<int64_t>(unix_seconds())),
      sweep(opt.sweep, state),
      audit(opt.data_dir / "orchestrator.sqlite", state.ledger().keeper().address()) {
  recover();
  routes();
}

ApiOptions Server::Impl::with_tokens(ApiOptions o) {
  const auto dir = o.secrets_dir.empty() ? o.data_dir / "secrets" : o.secrets_dir;
  for (auto [role, token] :
       {std::pair{Role::kTrainer, &o.trainer_token},
        std::pair{Role::kValidator, &o.validator_token}, std::pair{Role::kRelay, &o.relay_token}}) {
    if (token->empty()) *token = server_token(dir, role);
    if (token->size() < kMinTokenChars) {
      fail("orchestrator", "the {} token has {} characters; at least {} are needed",
           role_name(role), token->size(), kMinTokenChars);
    }
  }
  return o;
}

void Server::Impl::recover() {
  for (const Submission& s : state.submissions("validating")) {
    const std::string name = file_name(s.key);
    if (validating.contains(s.key.step, name)) continue;
    if (store.contains(s.key.step, name)) {
      validating.move_from(store.path(s.key.step, name), s.key.step, name);
    } else {
      log::error("orchestrator: the file of validating {} is missing from {}", describe(s.key),
                 validating.dir().string());
    }
  }
  for (const auto& [step, name] : validating.list()) {
    const rollout::StoredName parsed = rollout::parse_stored_file_name(name, "");
    const auto row = state.latest({step, parsed.node_address, parsed.submission});
    const std::string status = row ? row->status : "";
    if (status == "validating") continue;
    if (status == "rejected") {
      validating.move_to(step, name, rejected.path(step, name));
    } else if (status == "accepted" && !store.contains(step, name)) {
      validating.move_to(step, name, store.path(step, name));
    } else {
      validating.remove(step, name);
    }
  }
}

httplib::Server::Handler Server::Impl::guarded(Handler fn) {
  return [this, fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
    try {
      fn(req, res);
    } catch (const Refusal& e) {
      count_refusal(e.code);
      if (e.status != 422) {  // rejections were logged as decisions
        log::info("orchestrator: refused {} {}: {}", req.method, req.path, e.what());
      }
      reply_json(res, {{"error", e.what()}, {"code", e.code}}, e.status);
    } catch (const Error& e) {
      count_refusal("malformed_request");
      reply_json(res, {{"error", e.what()}}, 400);
    } catch (const std::exception& e) {
      log::error("orchestrator: {} {}: {}", req.method, req.path, message_of(e));
      reply_json(res, {{"error", std::string("internal error: ") + message_of(e)}}, 500);
    }
  };
}

void Server::Impl::count_refusal(const std::string& kind) {
  std::lock_guard lock(metrics_mu);
  ++refused[kind];
}

void Server::Impl::routes() {
  svr.new_task_queue = [n = opt.http_threads] {
    return new httplib::ThreadPool(static_cast<size_t>(std::max(n, 2)));
  };
  svr.set_payload_max_length(static_cast<size_t>(opt.max_upload_bytes));
  // Before a body is read: its size bounded for the route, the caller's token checked.
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool upload = req.method == "PUT" && req.path.starts_with("/upload/");
    const auto limit = static_cast<size_t>(upload ? opt.max_upload_bytes : opt.max_request_bytes);
    if (const auto refusal = unbounded_body(req, limit)) {
      count_refusal(refusal->code);
      refuse_and_close(res, refusal->status, refusal->code, refusal->message);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (upload) {  // only a URL this server signed gets its (large) body read
      const UrlCheck check =
          signer.check("PUT", req.path, req.get_param_value("expires"), req.get_param_value("sig"),
                       static_cast<int64_t>(unix_seconds()));
      if (check != UrlCheck::kOk) {
        const std::string code = check == UrlCheck::kExpired ? "url_expired" : "url_invalid";
        count_refusal(code);
        refuse_and_close(res, 403, code, describe(check));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    const bool dashboard = is_dashboard_path(req.path);
    if (dashboard) set_dashboard_headers(res);
    if (const auto role = privileged(req); role && !authorized(req, *role)) {
      count_refusal("unauthorized");
      // A browser asks its user for the credential (the token as the password).
      if (dashboard) res.set_header("WWW-Authenticate", R"(Basic realm="Trellis dashboard")");
      log::info("orchestrator: refused {} {} from {}: no valid {} token", req.method, req.path,
                req.remote_addr, role_name(*role));
      refuse_and_close(res, 401, "unauthorized",
                       fmt::format("{} {} needs the {}'s bearer token (the file {}.token the "
                                   "orchestrator created under orchestrator.secrets_dir, or {})",
                                   req.method, req.path, role_name(*role), role_name(*role),
                                   token_env_name(*role)));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_socket_options([](socket_t sock) {  // no SO_REUSEPORT: a port in use is an error
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  svr.Get("/healthz", guarded([](const auto&, auto& res) { res.set_content("ok", "text/plain"); }));
  svr.Get("/metrics", guarded([this](const auto&, auto& res) {
            res.set_content(metrics(), "text/plain; version=0.0.4");
          }));
  svr.Get("/status", guarded([this](const auto&, auto& res) { reply_json(res, status()); }));
  svr.Post("/work", guarded([this](const auto& req, auto& res) { work(req, res); }));
  svr.Post("/submissions", guarded([this](const auto& req, auto& res) { submissions(req, res); }));
  // The upload's body is read by receive_upload itself, once it has a slot.
  svr.Put(R"(/upload/([^/]+)/([^/]+))", [this](const httplib::Request& req, httplib::Response& res,
                                               const httplib::ContentReader& read) {
    guarded([&](const auto& r, auto& s) { receive_upload(r, s, read); })(req, res);
  });
  svr.Get(R"(/steps/([^/]+)/accepted)",
          guarded([this](const auto& req, auto& res) { accepted(req, res); }));
  svr.Get(R"(/rollouts/([^/]+)/([^/]+))",
          guarded([this](const auto& req, auto& res) { download(req, res); }));
  svr.Get("/submissions", guarded([this](const auto& req, auto& res) { list(req, res); }));
  svr.Post("/validation/claim", guarded([this](const auto& req, auto& res) { claim(req, res); }));
  svr.Get(R"(/validation/files/([^/]+)/([^/]+))",
          guarded([this](const auto& req, auto& res) { validation_file(req, res); }));
  svr.Post("/validation/verdict",
           guarded([this](const auto& req, auto& res) { verdict(req, res); }));
  svr.Post("/trainer/version",
           guarded([this](const auto& req, auto& res) { trainer_version(req, res); }));
  svr.Post("/trainer/metrics",
           guarded([this](const auto& req, auto& res) { trainer_metrics(req, res); }));
  svr.Post("/relays", guarded([this](const auto& req, auto& res) { relay_report(req, res); }));
  svr.Get(R"(/dashboard(/|/app\.js|/style\.css)?)",
          guarded([this](const auto& req, auto& res) { serve_dashboard_file(req, res); }));
  svr.Get("/dashboard/api/summary",
          guarded([this](const auto& req, auto& res) { dashboard_summary(req, res); }));
  svr.Get("/dashboard/api/submissions",
          guarded([this](const auto& req, auto& res) { dashboard_submissions(req, res); }));
  svr.Get(R"(/dashboard/api/submissions/([^/]+))",
          guarded([this](const auto& req, auto& res) { dashboard_submission(req, res); }));
  svr.Get("/dashboard/api/ledger",
          guarded([this](const auto& req, auto& res) { dashboard_ledger(req, res); }));
  svr.Get(R"(/dashboard/api/nodes/([^/]+)/logs)",
          guarded([this](const auto& req, auto& res) { node_logs(req, res); }));
  svr.Post("/nodes", guarded([this](const auto& req, auto& res) { register_node(req, res); }));
  svr.Post("/heartbeat", guarded([this](const auto& req, auto& res) { heartbeat(req, res); }));
  svr.Post("/tasks", guarded([this](const auto& req, auto& res) { create_task(req, res); }));
  svr.Get("/tasks", guarded([this](const auto& req, auto& res) { list_tasks(req, res); }));
  svr.Get("/nodes", guarded([this](const auto& req, auto& res) {  // node IPs: operators only
            list_nodes(req, res);
          }));
  svr.Get(R"(/nodes/([^/]+)/logs)",
          guarded([this](const auto& req, auto& res) { node_logs(req, res); }));
  svr.Post(R"(/nodes/([^/]+)/evict)",
           guarded([this](const auto& req, auto& res) { evict(req, res); }));
  svr.Post(R"(/nodes/([^/]+)/stake)",
           guarded([this](const auto& req, auto& res) { deposit_stake(req, res); }));
  svr.Post(R"(/nodes/([^/]+)/approve)",
           guarded([this](const auto& req, auto& res) { approve(req, res); }));
  svr.Get("/ledger/head", guarded([this](const auto& req, auto& res) {  // public: pin it anywhere
            ledger_head(req, res);
          }));
  svr.Get("/allowlist", guarded([this](const auto& req, auto& res) { allowlist(req, res); }));

  // What httplib answers itself (unknown route, oversized body) gets the same JSON shape.
  svr.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message = fmt::format("HTTP {} for {} {}", res.status, req.method, req.path);
        if (res.status == 404) {
          message = fmt::format("there is no route {} {}", req.method, req.path);
        } else if (res.status == 413) {
          count_refusal("too_large");
          message =
              fmt::format("the request body is larger than orchestrator.max_upload_mib ({} bytes)",
                          opt.max_upload_bytes);
        }
        reply_json(res, {{"error", message}}, res.status);
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        reply_json(res, {{"error", "internal error"}}, 500);
      });
}

std::optional<Role> Server::Impl::privileged(const httplib::Request& req) {
  const std::string& p = req.path;
  if (p.starts_with("/validation/")) return Role::kValidator;
  if (p.starts_with("/trainer/")) return Role::kTrainer;
  // The dashboard shows what only the operator may see (node IPs, logs, every submission).
  if (is_dashboard_path(p)) return Role::kTrainer;
  if (p == "/relays") return Role::kRelay;
  if (req.method == "GET" && (p == "/submissions" || p == "/nodes")) return Role::kTrainer;
  // Accepted rollouts are the trainer's: nobody else may list or copy them (a replay needs
  // another node's file).
  if (p.starts_with("/steps/") || p.starts_with("/rollouts/")) return Role::kTrainer;
  if (p == "/allowlist") return Role::kRelay;  // the pool's node IPs
  if (p == "/tasks") return Role::kTrainer;    // the pool owner's
  if (p.starts_with("/nodes/") && (p.ends_with("/evict") || p.ends_with("/stake") ||
                                   p.ends_with("/approve") || p.ends_with("/logs"))) {
    return Role::kTrainer;  // the pool owner's
  }
  return std::nullopt;
}

bool Server::Impl::authorized(const httplib::Request& req, Role role) const {
  const std::string sent = req.get_header_value("Authorization");
  // The dashboard's browser sends the token as a Basic password (any user name).
  const std::string password = is_dashboard_path(req.path) ? basic_password(sent) : "";
  const auto is = [&](const std::string& token) {
    return constant_time_equal(sent, "Bearer " + token) ||
           (!password.empty() && constant_time_equal(password, token));
  };
  switch (role) {
    case Role::kTrainer:
      return is(opt.trainer_token);
    case Role::kValidator:
      return is(opt.validator_token);
    case Role::kRelay:
      return is(opt.relay_token) || is(opt.trainer_token);
  }
  return false;
}

int64_t Server::Impl::require_signed_by(const httplib::Request& req, const std::string& claimed,
                                        const std::string& body_sha256, const std::string& where) {
  const SignedHeaders h = require_signed_request(req, client_ip(req, opt.trusted_proxies),
                                                 state.run_id(), body_sha256, nonces, where);
  if (h.signer != claimed) {
    refuse(
        403, "wrong_signer",
        fmt::format("{}: the request names node {} but is signed by {}", where, claimed, h.signer));
  }
  return std::stoll(h.timestamp);  // well formed: checked above
}

std::pair<SubmissionKey, std::string> Server::Impl::file_of(const httplib::Request& req) {
  const std::string dir = req.matches[1].str(), name = req.matches[2].str();
  std::optional<int64_t> step;
  if (dir.starts_with("step_")) step = parse_index(std::string_view(dir).substr(5));
  if (!step) {
    refuse(400, "malformed_request", fmt::format("'{}' is not step_<number> ({})", dir, req.path));
  }
  rollout::StoredName parsed;
  try {
    parsed = rollout::parse_stored_file_name(name, req.path);
  } catch (const Error& e) {
    refuse(400, "malformed_request", e.what());
  }
  return {{*step, parsed.node_address, parsed.submission}, name};
}

Server::Server(ApiOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() { stop(); }

int Server::start() {
  auto& m = *impl_;
  const std::string where = fmt::format("{}:{}", m.opt.host, m.opt.port);
  if (m.thread.joinable()) throw Error("the orchestrator is already running", where);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not end the process
  const auto url_file = m.opt.data_dir / "orchestrator.url";
  std::error_code ec;
  std::filesystem::remove(url_file, ec);  // a stale one would send launchers to a dead server
  if (m.opt.port == 0) {
    m.port = m.svr.bind_to_any_port(m.opt.host);
  } else {
    m.port = m.svr.bind_to_port(m.opt.host, m.opt.port) ? m.opt.port : -1;
  }
  if (m.port <= 0) {
    throw Error("cannot listen on this address (in use, or not an address of this machine?)",
                where);
  }
  m.thread = std::thread([&m] { m.svr.listen_after_bind(); });
  m.url = m.opt.url.empty() ? fmt::format("http://{}:{}", m.opt.host, m.port) : m.opt.url;
  write_file_atomic(url_file, m.url + "\n");
  m.sweep.start(m.url);
  log::info(
      "orchestrator: run {} listening on {} (data in {}; ledger kept by {}; dashboard at "
      "{}/dashboard, the trainer token as its password)",
      m.state.run_id(), m.url, m.opt.data_dir.string(), m.state.ledger().keeper().address(), m.url);
  return m.port;
}

void Server::stop() {
  auto& m = *impl_;
  if (!m.thread.joinable()) return;
  m.sweep.stop();
  m.svr.stop();
  m.thread.join();
  std::error_code ec;
  std::filesystem::remove(m.opt.data_dir / "orchestrator.url", ec);
}

int Server::port() const { return impl_->port; }

std::string Server::url() const { return impl_->url; }

const std::string& Server::run_id() const { return impl_->state.run_id(); }

}  // namespace trellis::orchestrator
