#include "orchestrator/api.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "common/error.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/http_limits.h"
#include "common/http_service.h"
#include "common/identity.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/request_signing.h"
#include "ledger/entry.h"
#include "orchestrator/admission.h"
#include "orchestrator/credentials.h"
#include "orchestrator/invite_sweep.h"
#include "orchestrator/signed_url.h"
#include "orchestrator/state.h"
#include "orchestrator/step_counter.h"
#include "orchestrator/step_files.h"
#include "rollout/rollout_file.h"
#include "rollout/signing.h"
#include "rollout/store.h"

namespace trellis::orchestrator {
namespace {

constexpr double kTokensWindowS = 60;  // rollout_tokens_per_s averages over this long
// Validators are behind while work was held back for the backlog bound this recently (and a
// step's worth still waits for a verdict).
constexpr double kBehindWindowS = 10;

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A non-negative decimal integer without sign (path segments: steps).
std::optional<int64_t> parse_index(std::string_view text) {
  int64_t v = 0;
  if (text.empty() || text.size() > 10) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0 || v > INT32_MAX) {
    return std::nullopt;
  }
  return v;
}

// An integer field of a request body: 400 naming the field when absent or not an integer in
// [lo, hi].
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

bool bool_field(const Json& body, const char* key, const std::string& where) {
  if (!body.contains(key))
    refuse(400, "malformed_request", fmt::format("missing field '{}' ({})", key, where));
  const Json& v = body.at(key);
  if (!v.is_boolean()) {
    refuse(400, "malformed_request",
           fmt::format("field '{}' must be true or false, got {} ({})", key, v.type_name(), where));
  }
  return v.get<bool>();
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

bool is_sha256_hex(const std::string& s) { return rollout::is_node_address(s); }  // 64 hex digits

// A node address field (an Ed25519 public key): 400 naming the field unless 64 lowercase hex.
std::string address_field(const Json& body, const char* key, const std::string& where) {
  std::string v = string_field(body, key, where);
  if (!rollout::is_node_address(v)) {
    refuse(400, "malformed_request",
           fmt::format("field '{}' must be 64 lowercase hex digits (an Ed25519 public key) ({})",
                       key, where));
  }
  return v;
}

Json node_json(const Node& n, const PoolPolicy& policy) {
  return {{"address", n.address},
          {"state", node_state(n, now_s(), policy)},
          {"heartbeat_at", n.heartbeat_at},
          {"ip", n.ip},
          {"registered_at", n.registered_at},
          {"last_seen", n.last_seen},
          {"signed_at", n.signed_at},
          {"evicted", n.evicted},
          {"evicted_reason", n.evicted_reason},
          {"evicted_at", n.evicted_at},
          {"rejections", n.rejections},
          {"last_rejection", n.last_rejection}};
}

std::string file_name(const SubmissionKey& key) {
  return rollout::stored_file_name(key.node_address, key.submission, "");
}

std::string describe(const SubmissionKey& key) {
  return fmt::format("step {} submission {} of node {}", key.step, key.submission,
                     key.node_address);
}

// The path of GET /validation/files for `key`.
std::string validation_file_path(const SubmissionKey& key) {
  return fmt::format("/validation/files/step_{}/{}", key.step, file_name(key));
}

Json submission_json(const Submission& s) {
  return {{"id", s.id},
          {"step", s.key.step},
          {"node_address", s.key.node_address},
          {"submission", s.key.submission},
          {"status", s.status},
          {"reason", s.reason},
          {"sha256", s.sha256},
          {"size", s.size},
          {"samples", s.counts.samples},
          {"signal_samples", s.counts.signal_samples},
          {"created_at", s.created_at},
          {"uploaded_at", s.uploaded_at},
          {"decided_at", s.decided_at},
          {"validator", s.validator},
          {"claimed_by", s.claimed_by},
          {"lease_expires", s.lease_expires},
          {"groups", s.groups},
          {"work_expires", s.work_expires}};
}

constexpr size_t kMaxReasonBytes = 1000;  // of an eviction's reason
constexpr size_t kMaxNonces = 200'000;    // signed requests remembered within the window
// A submission claimed by this many validators without a verdict (each lease ran out: the file
// stopped them) is rejected rather than offered to the next.
constexpr int kMaxClaims = 2;
constexpr size_t kMaxVerdictReasonBytes = 4000;  // of a validator's reason to reject
constexpr size_t kMaxValidatorNameBytes = 100;

// The `validator` field of a validation request: the validator's name, for logs and records.
std::string validator_field(const Json& body, const std::string& where) {
  std::string v = string_field(body, "validator", where);
  if (v.empty() || v.size() > kMaxValidatorNameBytes) {
    refuse(400, "malformed_request",
           fmt::format("field 'validator' must name the validator in 1 to {} bytes ({})",
                       kMaxValidatorNameBytes, where));
  }
  return v;
}

}  // namespace

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

struct Server::Impl {
  ApiOptions opt;
  State state;
  UrlSigner signer;
  rollout::RolloutStore store;  // accepted files
  StepFiles validating;         // files waiting for a validator's verdict
  StepFiles rejected;           // files validators rejected, kept for operators
  httplib::Server svr;
  std::thread thread;
  int port = -1;
  std::string url;

  std::mutex decide_mu;  // one decision (accept, reject, validating, evict) at a time
  std::mutex admit_mu;   // one assignment at a time, so two workers never fill the same gap
  std::atomic<int64_t> uploads_receiving{0};  // bodies being received and checked now
  std::atomic<double> backlog_full_at{0};     // when work was last held back for the backlog bound
  std::mutex metrics_mu;
  std::map<std::string, int64_t> refused;  // by reason code, since start
  NonceWindow nonces;                      // of the node requests signed within the window
  InviteSweep sweep;                       // invites nodes found in discovery (if any)

  explicit Impl(ApiOptions o)
      : opt(with_tokens(std::move(o))),
        state(opt.data_dir / "orchestrator.sqlite", opt.run_id,
              Identity::load_or_create(
                  opt.key_file.empty() ? opt.data_dir / "keys" / "orchestrator.key" : opt.key_file),
              opt.pool),
        signer(state.url_secret()),
        store(opt.data_dir),
        validating(opt.data_dir / "validating"),
        rejected(opt.data_dir / "rejected"),
        nonces(opt.signature_window_s, kMaxNonces, static_cast<int64_t>(now_s())),
        sweep(opt.sweep, state) {
    recover();
    routes();
  }

  // `o` with its tokens loaded or created where it has none; Error for a short one (privileged
  // requests are never open).
  static ApiOptions with_tokens(ApiOptions o) {
    const auto dir = o.secrets_dir.empty() ? o.data_dir / "secrets" : o.secrets_dir;
    for (auto [role, token] : {std::pair{Role::kTrainer, &o.trainer_token},
                               std::pair{Role::kValidator, &o.validator_token},
                               std::pair{Role::kRelay, &o.relay_token}}) {
      if (token->empty()) *token = server_token(dir, role);
      if (token->size() < kMinTokenChars) {
        fail("orchestrator", "the {} token has {} characters; at least {} are needed",
             role_name(role), token->size(), kMinTokenChars);
      }
    }
    return o;
  }

  // Puts files back in step with their rows after a crash between a file move and its commit:
  // a validating row whose file already moved into the store (an accept that did not commit)
  // gets it back; a file under validating/ whose row is no longer validating (a reject or an
  // eviction committed before its file moved, an upload that never committed) goes where its
  // row says, or away.
  void recover() {
    for (const Submission& s : state.submissions("validating")) {
      const std::string name = file_name(s.key);
      if (validating.contains(s.key.step, name)) continue;
      if (store.contains(s.key.step, name)) {
        validating.move_from(store.path(s.key.step, name), s.key.step, name);
      } else {
        log::error("orchestrator: the file of validating {} is missing from {}", describe(s.key),
                   validating.root().string());
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

  // ---- routes ------------------------------------------------------------------------------

  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  httplib::Server::Handler guarded(Handler fn) {
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
        log::error("orchestrator: {} {}: {}", req.method, req.path, e.what());
        reply_json(res, {{"error", std::string("internal error: ") + e.what()}}, 500);
      }
    };
  }

  void count_refusal(const std::string& kind) {
    std::lock_guard lock(metrics_mu);
    ++refused[kind];
  }

  void routes() {
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
            signer.check("PUT", req.path, req.get_param_value("expires"),
                         req.get_param_value("sig"), static_cast<int64_t>(now_s()));
        if (check != UrlCheck::kOk) {
          const std::string code = check == UrlCheck::kExpired ? "url_expired" : "url_invalid";
          count_refusal(code);
          refuse_and_close(res, 403, code, describe(check));
          return httplib::Server::HandlerResponse::Handled;
        }
      }
      if (const auto role = privileged(req); role && !authorized(req, *role)) {
        count_refusal("unauthorized");
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
    svr.Get("/healthz",
            guarded([](const auto&, auto& res) { res.set_content("ok", "text/plain"); }));
    svr.Get("/metrics", guarded([this](const auto&, auto& res) {
              res.set_content(metrics(), "text/plain; version=0.0.4");
            }));
    svr.Get("/status", guarded([this](const auto&, auto& res) { reply_json(res, status()); }));
    svr.Post("/work", guarded([this](const auto& req, auto& res) { work(req, res); }));
    svr.Post("/submissions",
             guarded([this](const auto& req, auto& res) { submissions(req, res); }));
    // The upload's body is read by receive_upload itself, once it has a slot.
    svr.Put(R"(/upload/([^/]+)/([^/]+))",
            [this](const httplib::Request& req, httplib::Response& res,
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
    svr.Post("/nodes", guarded([this](const auto& req, auto& res) { register_node(req, res); }));
    svr.Post("/heartbeat", guarded([this](const auto& req, auto& res) { heartbeat(req, res); }));
    svr.Post("/tasks", guarded([this](const auto& req, auto& res) { create_task(req, res); }));
    svr.Get("/tasks", guarded([this](const auto&, auto& res) {
              Json tasks = Json::array();
              for (const Task& t : state.tasks()) tasks.push_back(task_json(t));
              reply_json(res, {{"tasks", tasks}});
            }));
    svr.Get("/nodes", guarded([this](const auto&, auto& res) {  // node IPs: operators only
              Json nodes = Json::array();
              for (const Node& n : state.nodes()) nodes.push_back(node_json(n, opt.pool));
              // Nodes found in discovery and sent an invite they have not used yet.
              reply_json(res, {{"nodes", nodes}, {"invited", state.invited(now_s())}});
            }));
    svr.Post(R"(/nodes/([^/]+)/evict)",
             guarded([this](const auto& req, auto& res) { evict(req, res); }));
    svr.Post(R"(/nodes/([^/]+)/stake)",
             guarded([this](const auto& req, auto& res) { deposit_stake(req, res); }));
    svr.Post(R"(/nodes/([^/]+)/approve)",
             guarded([this](const auto& req, auto& res) { approve(req, res); }));
    svr.Get("/ledger/head", guarded([this](const auto&, auto& res) {  // public: pin it anywhere
              const auto [seq, hash] = state.ledger_head();
              reply_json(res, {{"ledger", state.ledger().id()},
                               {"keeper", state.ledger().keeper().address()},
                               {"seq", seq},
                               {"hash", hash}});
            }));
    svr.Get("/allowlist", guarded([this](const auto&, auto& res) {
              const Allowlist a = state.allowlist(now_s());
              reply_json(res, {{"revision", a.revision}, {"ips", a.ips}});
            }));

    // What httplib answers itself (unknown route, oversized body) gets the same JSON shape.
    svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                      httplib::Response& res) {
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

  // ---- reading ----------------------------------------------------------------------------

  int64_t step_counter_now() {
    return step_counter(state.signal_samples_by_step(), opt.steps, opt.batch_size);
  }

  double tokens_per_s() {
    return static_cast<double>(state.completion_tokens_since(now_s() - kTokensWindowS)) /
           kTokensWindowS;
  }

  Json status() {
    const auto counts = state.count_by_status();
    const auto samples = state.samples_by_status();
    const int64_t version = state.policy_version();
    return {{"run_id", state.run_id()},
            {"step", step_counter_now()},
            {"policy_version", version},
            {"trainer_public_key", state.trainer_public_key()},
            {"steps", opt.steps},
            {"async_level", opt.async_level},
            {"batch_size", opt.batch_size},
            {"group_size", opt.group_size},
            {"assigned", counts.at("assigned")},
            {"pending", counts.at("pending")},
            {"validating", counts.at("validating")},
            {"accepted", counts.at("accepted")},
            {"rejected", counts.at("rejected")},
            {"dropped", counts.at("dropped")},
            {"samples",
             {{"generated", generated_samples(samples)},
              {"validating", samples.at("validating")},
              {"accepted", samples.at("accepted")},
              {"rejected", samples.at("rejected")},
              {"dropped", samples.at("dropped")}}},
            {"max_backlog_samples", max_backlog_samples()},
            {"validators_behind", validators_behind(samples.at("validating"))},
            {"judged_samples_per_s", judged_per_s()},
            {"rollout_tokens_per_s", tokens_per_s()},
            {"done", version >= opt.steps}};
  }

  // Work was held back for the backlog bound within the last kBehindWindowS while a step's worth
  // waited for a verdict, and a step's worth still waits.
  bool validators_behind(int64_t validating_samples) const {
    return now_s() - backlog_full_at < kBehindWindowS && validating_samples >= opt.batch_size;
  }

  // Samples of every file a worker made (State::samples_by_status: work not yet uploaded holds
  // none), whatever became of it.
  static int64_t generated_samples(const std::map<std::string, int64_t>& by_status) {
    int64_t n = 0;
    for (const auto& [status, samples] : by_status) n += samples;
    return n;
  }

  int64_t max_backlog_samples() const {
    return static_cast<int64_t>(opt.max_backlog_steps * static_cast<double>(opt.batch_size));
  }

  double judged_per_s() {
    return static_cast<double>(state.samples_judged_since(now_s() - kTokensWindowS)) /
           kTokensWindowS;
  }

  std::string metrics() {
    std::string out;
    const auto gauge = [&](const char* name, const char* help, const std::string& value) {
      out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", name, help, value);
    };
    gauge("trellis_orchestrator_step",
          "the step counter: smallest step lacking batch_size signal samples",
          std::to_string(step_counter_now()));
    gauge("trellis_orchestrator_policy_version", "newest policy version the trainer published",
          std::to_string(state.policy_version()));
    out +=
        "# HELP trellis_orchestrator_submissions submissions by status\n"
        "# TYPE trellis_orchestrator_submissions gauge\n";
    for (const auto& [status, n] : state.count_by_status()) {
      out += fmt::format("trellis_orchestrator_submissions{{status=\"{}\"}} {}\n", status, n);
    }
    const FileCounts totals = state.accepted_totals();
    gauge("trellis_orchestrator_accepted_samples", "completions in accepted files",
          std::to_string(totals.samples));
    gauge("trellis_orchestrator_accepted_signal_samples",
          "completions in accepted files, in groups whose rewards differ",
          std::to_string(totals.signal_samples));
    gauge("trellis_orchestrator_rollout_tokens_per_second",
          "completion tokens accepted per second over the last 60 s",
          fmt::format("{}", tokens_per_s()));
    out +=
        "# HELP trellis_orchestrator_samples samples by the status of their file (generated = "
        "the sum)\n"
        "# TYPE trellis_orchestrator_samples gauge\n";
    const auto samples = state.samples_by_status();
    for (const auto& [status, n] : samples) {
      if (status != "assigned")
        out += fmt::format("trellis_orchestrator_samples{{status=\"{}\"}} {}\n", status, n);
    }
    out += fmt::format("trellis_orchestrator_samples{{status=\"generated\"}} {}\n",
                       generated_samples(samples));
    gauge("trellis_orchestrator_judged_samples_per_second",
          "samples validators accepted or rejected per second over the last 60 s",
          fmt::format("{}", judged_per_s()));
    const NodeCounts nodes = state.node_counts();
    out += fmt::format(
        "# HELP trellis_orchestrator_nodes nodes registered (and not evicted) and evicted\n"
        "# TYPE trellis_orchestrator_nodes gauge\n"
        "trellis_orchestrator_nodes{{state=\"registered\"}} {}\n"
        "trellis_orchestrator_nodes{{state=\"evicted\"}} {}\n",
        nodes.registered, nodes.evicted);
    gauge("trellis_orchestrator_allowlist_revision",
          "revision of the IP allowlist relays poll (GET /allowlist)",
          std::to_string(state.allowlist(now_s()).revision));
    out +=
        "# HELP trellis_orchestrator_uploads_refused_total refused requests and rejected uploads "
        "since start, by reason\n"
        "# TYPE trellis_orchestrator_uploads_refused_total counter\n";
    std::lock_guard lock(metrics_mu);
    for (const auto& [kind, n] : refused) {
      out +=
          fmt::format("trellis_orchestrator_uploads_refused_total{{reason=\"{}\"}} {}\n", kind, n);
    }
    return out;
  }

  void accepted(const httplib::Request& req, httplib::Response& res) {
    const auto step = parse_index(req.matches[1].str());
    if (!step) {
      refuse(400, "malformed_request",
             fmt::format("'{}' is not a step number", req.matches[1].str()));
    }
    Json files = Json::array();
    int64_t signal = 0;
    for (const Submission& s : state.accepted(*step)) {
      files.push_back(
          {{"name", rollout::stored_file_name(s.key.node_address, s.key.submission, "")},
           {"node_address", s.key.node_address},
           {"submission", s.key.submission},
           {"sha256", s.sha256},
           {"samples", s.counts.samples},
           {"signal_samples", s.counts.signal_samples}});
      signal += s.counts.signal_samples;
    }
    reply_json(res, {{"step", *step}, {"files", files}, {"signal_samples", signal}});
  }

  // "step_<s>" and "<node>-<sub>.parquet" of a path; 400 naming what is malformed.
  std::pair<SubmissionKey, std::string> file_of(const httplib::Request& req) {
    const std::string dir = req.matches[1].str(), name = req.matches[2].str();
    std::optional<int64_t> step;
    if (dir.starts_with("step_")) step = parse_index(std::string_view(dir).substr(5));
    if (!step) {
      refuse(400, "malformed_request",
             fmt::format("'{}' is not step_<number> ({})", dir, req.path));
    }
    rollout::StoredName parsed;
    try {
      parsed = rollout::parse_stored_file_name(name, req.path);
    } catch (const Error& e) {
      refuse(400, "malformed_request", e.what());
    }
    return {{*step, parsed.node_address, parsed.submission}, name};
  }

  void download(const httplib::Request& req, httplib::Response& res) {
    const auto [key, name] = file_of(req);
    if (!state.is_accepted(key)) {
      refuse(404, "not_found",
             fmt::format("{} is not an accepted rollout file of step {}", name, key.step));
    }
    std::string bytes;
    try {
      bytes = store.read(key.step, name);
    } catch (const Error& e) {
      refuse(404, "not_found",
             fmt::format("the accepted file is missing from the store: {}", e.what()));
    }
    res.set_content(std::move(bytes), "application/vnd.apache.parquet");
  }

  // GET /submissions?status=&step=: every submission with its status and reason, for operators
  // (why was something rejected?); the trainer's token like GET /nodes.
  void list(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "GET /submissions";
    const std::string status = req.get_param_value("status");
    const auto& statuses = submission_statuses();
    if (!status.empty() && std::find(statuses.begin(), statuses.end(), status) == statuses.end()) {
      refuse(400, "malformed_request",
             fmt::format("query parameter 'status' must be {}, got '{}' ({})",
                         fmt::join(statuses, ", "), status.substr(0, 100), where));
    }
    std::optional<int64_t> step;
    if (req.has_param("step")) {
      step = parse_index(req.get_param_value("step"));
      if (!step) {
        refuse(400, "malformed_request",
               fmt::format("query parameter 'step' must be a step number, got '{}' ({})",
                           req.get_param_value("step").substr(0, 100), where));
      }
    }
    Json out = Json::array();
    for (const Submission& s : state.submissions(status, step)) out.push_back(submission_json(s));
    reply_json(res, {{"submissions", out}});
  }

  // GET /validation/files/step_<s>/<name>: what a validator checks.
  void validation_file(const httplib::Request& req, httplib::Response& res) {
    const auto [key, name] = file_of(req);
    if (!state.is_validating(key)) {
      refuse(404, "not_found",
             fmt::format("{} of step {} is not waiting for a validator's verdict", name, key.step));
    }
    std::string bytes;
    try {
      bytes = validating.read(key.step, name);
    } catch (const Error& e) {
      refuse(404, "not_found", fmt::format("the validating file is missing: {}", e.what()));
    }
    res.set_content(std::move(bytes), "application/vnd.apache.parquet");
  }

  // ---- writing ----------------------------------------------------------------------------

  // The role whose token `req`'s route needs, or nothing for a public or node route.
  static std::optional<Role> privileged(const httplib::Request& req) {
    const std::string& p = req.path;
    if (p.starts_with("/validation/")) return Role::kValidator;
    if (p == "/trainer/version") return Role::kTrainer;
    if (req.method == "GET" && (p == "/submissions" || p == "/nodes")) return Role::kTrainer;
    // Accepted rollouts are the trainer's: nobody else may list or copy them (a replay needs
    // another node's file).
    if (p.starts_with("/steps/") || p.starts_with("/rollouts/")) return Role::kTrainer;
    if (p == "/allowlist") return Role::kRelay;  // the pool's node IPs
    if (p == "/tasks") return Role::kTrainer;    // the pool owner's
    if (p.starts_with("/nodes/") &&
        (p.ends_with("/evict") || p.ends_with("/stake") || p.ends_with("/approve"))) {
      return Role::kTrainer;  // the pool owner's
    }
    return std::nullopt;
  }

  // `req` carries `role`'s bearer token (compared in constant time); what relays may read, the
  // operator (the trainer's token) may read too.
  bool authorized(const httplib::Request& req, Role role) const {
    const std::string sent = req.get_header_value("Authorization");
    const auto is = [&](const std::string& token) {
      return constant_time_equal(sent, "Bearer " + token);
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

  // Checks that `claimed` (the node the request names) signed `req`, whose body hashes to
  // `body_sha256` (common/request_signing.h), and returns the signed timestamp: 401 for an
  // unsigned, forged, stale or replayed request, 403 for a signature by another node.
  int64_t require_signed_by(const httplib::Request& req, const std::string& claimed,
                            const std::string& body_sha256, const std::string& where) {
    const SignedHeaders h = require_signed_request(req, state.run_id(), body_sha256, nonces, where);
    if (h.signer != claimed) {
      refuse(403, "wrong_signer",
             fmt::format("{}: the request names node {} but is signed by {}", where, claimed,
                         h.signer));
    }
    return std::stoll(h.timestamp);  // well formed: checked above
  }

  // 403 unless `address` is a registered node that is not evicted.
  void require_member(const std::string& address) {
    const auto n = state.node(address);
    if (!n) {
      refuse(403, "not_registered",
             fmt::format("node {} is not registered: register with POST /nodes first", address));
    }
    if (n->evicted) refuse(403, "evicted", eviction_message(*n));
    if (node_state(*n, now_s(), opt.pool) == "dead")
      refuse(403, "not_registered", dead_message(*n));
    // Admitted when it registered, but a slash may have left its stake short since.
    if (std::string why = state.admission_problem(address); !why.empty()) {
      refuse(403, "not_admitted", why);
    }
  }

  void trainer_version(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "POST /trainer/version";
    const Json body = parse_body(req, where);
    const int64_t version = integer_field(body, "version", 0, INT32_MAX, where);
    std::string key;
    if (body.contains("public_key")) key = address_field(body, "public_key", where);
    const int64_t before = state.policy_version();
    const std::string key_before = state.trainer_public_key();
    const int64_t newest = state.publish_version(version, key);
    if (newest > before) log::info("orchestrator: policy version {} published", newest);
    if (!key.empty() && key != key_before) log::info("orchestrator: trainer public key {}", key);
    reply_json(res,
               {{"policy_version", newest}, {"trainer_public_key", state.trainer_public_key()}});
  }

  // POST /nodes: a node proves it holds its address's key by signing the request; its IP is the
  // connection's (or a trusted proxy's X-Real-IP), and it joins the allowlist unless evicted.
  void register_node(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "POST /nodes";
    const Json body = parse_body(req, where);
    const std::string address = address_field(body, "address", where);
    const int64_t timestamp = require_signed_by(req, address, sha256_hex(req.body), where);
    std::string invite;  // the nonce of the invite the node accepted, if it was invited
    if (body.contains("invite")) {
      invite = string_field(body, "invite", where);
      if (invite.size() != 32 || invite.find_first_not_of("0123456789abcdef") != std::string::npos)
        refuse(400, "malformed_request",
               fmt::format("field 'invite' must be an invite's nonce: 32 hex digits ({})", where));
    }
    const std::string ip = client_ip(req, opt.trusted_proxies);
    const Registration r = state.register_node(address, ip, timestamp, now_s(), invite);
    if (r.outcome == Registration::kEvicted) refuse(403, "evicted", eviction_message(r.node));
    if (r.outcome == Registration::kNotAdmitted) refuse(403, "not_admitted", r.why);
    if (r.outcome == Registration::kBadInvite) refuse(403, "bad_invite", r.why);
    if (r.outcome == Registration::kInviteRequired) refuse(403, "invite_required", r.why);
    if (r.outcome == Registration::kReplayed) {
      refuse(401, "registration_replayed",
             fmt::format("node {}: a registration signed at {} is already recorded; this one is "
                         "signed at {} (a replayed or reordered request: sign a fresh one)",
                         address, r.node.signed_at, timestamp));
    }
    log::info("orchestrator: node {} registered from {}{}", address, ip,
              invite.empty() ? "" : " with invite " + invite);
    reply_json(res, {{"address", address}, {"ip", ip}});
  }

  // The node address in the path of `req` (400 unless it is one).
  static std::string path_address(const httplib::Request& req, const std::string& where) {
    const std::string address = req.matches[1].str();
    if (!rollout::is_node_address(address)) {
      refuse(400, "malformed_request",
             fmt::format("'{}' is not a node address: 64 lowercase hex digits (an Ed25519 public "
                         "key) ({})",
                         address.substr(0, 200), where));
    }
    return address;
  }

  // POST /nodes/<address>/stake {"amount": N}: the pool owner deposits N work units to the
  // node's stake, on the ledger (what it paid the owner is between the two of them).
  void deposit_stake(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "POST /nodes/<address>/stake";
    const std::string address = path_address(req, where);
    const int64_t amount = integer_field(parse_body(req, where), "amount", 1, INT32_MAX, where);
    const int64_t stake = state.deposit_stake(address, amount);
    log::info("orchestrator: node {} staked {} work units (now {})", address, amount, stake);
    reply_json(res, {{"node", address}, {"stake", stake}});
  }

  // POST /nodes/<address>/approve: the pool owner admits the node (join = "approval").
  void approve(const httplib::Request& req, httplib::Response& res) {
    const std::string address = path_address(req, "POST /nodes/<address>/approve");
    if (state.approve(address)) log::info("orchestrator: node {} approved", address);
    reply_json(res, {{"node", address}, {"approved", true}});
  }

  std::string dead_message(const Node& n) const {
    return fmt::format(
        "node {} is not registered: no heartbeat for {:.0f} s, it is Dead (more than {} missed "
        "at orchestrator.heartbeat_s = {}); register again with POST /nodes",
        n.address, now_s() - n.heartbeat_at, opt.pool.dead_after, opt.pool.heartbeat_s);
  }

  // POST /heartbeat {node_address, state?}, signed by the node: it is alive. The answer says how
  // often to send the next and which task the node runs (State::task_for).
  void heartbeat(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "POST /heartbeat";
    const Json body = parse_body(req, where);
    const std::string address = address_field(body, "node_address", where);
    require_signed_by(req, address, sha256_hex(req.body), where);
    if (body.contains("state") && string_field(body, "state", where).size() > 64) {
      refuse(400, "malformed_request", fmt::format("field 'state' is over 64 bytes ({})", where));
    }
    switch (state.heartbeat(address, now_s())) {
      case State::Beat::kRecorded:
        break;
      case State::Beat::kNotRegistered:
        refuse(403, "not_registered",
               fmt::format("node {} is not registered: register with POST /nodes first", address));
      case State::Beat::kEvicted:
        refuse(403, "evicted", eviction_message(*state.node(address)));
      case State::Beat::kDead:
        refuse(403, "not_registered", dead_message(*state.node(address)));
    }
    const std::optional<Task> task = state.task_for(address, now_s());
    reply_json(res, {{"state", "healthy"},
                     {"interval_s", opt.pool.heartbeat_s},
                     {"task", task ? task_json(*task) : Json()}});
  }

  static Json task_json(const Task& t) {
    return {{"id", t.id},
            {"role", t.role},
            {"config", t.config},
            {"node", t.node},
            {"created_at", t.created_at},
            {"assigned_at", t.assigned_at}};
  }

  // POST /tasks {role, config, node?}: the pool owner asks for a role to be run (by `node`, or by
  // the next live node that sends a heartbeat without a task). The config must be one Trellis
  // reads: it is checked here, not on the node.
  void create_task(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "POST /tasks";
    const Json body = parse_body(req, where);
    const std::string role = string_field(body, "role", where);
    const auto& roles = task_roles();
    if (std::find(roles.begin(), roles.end(), role) == roles.end()) {
      refuse(400, "malformed_request",
             fmt::format("field 'role' must be worker, validator or relay ({})", where));
    }
    const std::string config = string_field(body, "config", where);
    try {
      Config::defaults().merge_toml(config, "the task's config");
    } catch (const Error& e) {
      refuse(400, "malformed_request", fmt::format("{} ({})", e.what(), where));
    }
    std::string node;
    if (body.contains("node")) node = address_field(body, "node", where);
    const int64_t id = state.create_task(role, config, node, now_s());
    log::info("orchestrator: task {} ({}) created{}", id, role,
              node.empty() ? "" : " for node " + node);
    reply_json(res, {{"id", id}});
  }

  // POST /nodes/<address>/evict: the node is refused from now on, and its IP leaves the
  // allowlist (unless another active node shares it).
  void evict(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "POST /nodes/<address>/evict";
    const std::string address = path_address(req, where);
    std::string reason;
    if (!req.body.empty()) {
      const Json body = parse_body(req, where);
      if (body.contains("reason")) reason = string_field(body, "reason", where);
    }
    if (reason.size() > kMaxReasonBytes) {
      refuse(400, "malformed_request",
             fmt::format("field 'reason' is longer than {} bytes ({})", kMaxReasonBytes, where));
    }
    if (reason.empty()) reason = "no reason given";
    Eviction e;
    {
      std::lock_guard lock(decide_mu);  // no upload of the node is accepted after this answer
      e = state.evict(address, reason, now_s());
      drop_files(e.rejected);
    }
    log_eviction(e);
    reply_json(res, node_json(e.node, opt.pool));
  }

  void log_eviction(const Eviction& e) {
    log::warn("orchestrator: node {} ({}) evicted: {}", e.node.address,
              e.node.ip.empty() ? "no IP" : e.node.ip, e.node.evicted_reason);
    for (const SubmissionKey& key : e.rejected) {
      log::warn("orchestrator: rejected {} while it was being validated: {}", describe(key),
                eviction_message(e.node));
    }
  }

  // Removes the validating files of submissions an eviction rejected. The decision is committed
  // already, so a failure is logged, not answered (the next start removes what is left).
  void drop_files(const std::vector<SubmissionKey>& keys) {
    for (const SubmissionKey& key : keys) {
      try {
        validating.remove(key.step, file_name(key));
      } catch (const Error& e) {
        log::error("orchestrator: {}", e.what());
      }
    }
  }

  // 409 for a rejected or dropped submission: it is over, and the node asks for new work.
  [[noreturn]] void refuse_closed(const Submission& row) {
    refuse(409, row.status,
           fmt::format("{} was {}: ask POST /work for new work ({})", describe(row.key), row.status,
                       row.reason.substr(0, 2000)));
  }

  // POST /work: what the node generates next (admission.h), or why it waits. A node has one piece
  // of work at a time: asking again while its lease (orchestrator.work_lease_s from the
  // assignment) runs returns it, so a restarted worker picks it up.
  void work(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "POST /work";
    const Json body = parse_body(req, where);
    const std::string node = address_field(body, "node_address", where);
    WorkRequest ask;
    ask.held_version = integer_field(body, "policy_version", -1, INT32_MAX, where);
    ask.max_groups = integer_field(body, "groups", 1, INT32_MAX, where);
    require_signed_by(req, node, sha256_hex(req.body), where);
    require_member(node);
    std::lock_guard lock(admit_mu);
    const double now = now_s();
    // Asking again returns the open work as it is: no request extends a lease, so a node that
    // never delivers holds its share for one lease at most.
    std::optional<Submission> given = state.open_assignment(node, now);
    if (!given) {
      const AdmissionRules rules{opt.steps, opt.batch_size, opt.group_size, opt.async_level,
                                 opt.pool.validation ? max_backlog_samples() : INT64_MAX};
      const Admission a =
          admit(rules, state.admission_snapshot(opt.steps, opt.batch_size, now), ask);
      if (!a.step) {
        if (a.backlog_full) backlog_full_at = now;
        reply_json(res, {{"work", nullptr}, {"reason", a.wait_reason}});
        return;
      }
      given =
          state.assign(*a.step, node, a.groups, now + static_cast<double>(opt.work_lease_s), now);
      log::debug("orchestrator: assigned {} ({} groups)", describe(given->key), a.groups);
    }
    reply_json(res, {{"work",
                      {{"step", given->key.step},
                       {"submission", given->key.submission},
                       {"groups", given->groups},
                       {"expires", given->work_expires}}},
                     {"reason", ""}});
  }

  void submissions(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "POST /submissions";
    const Json body = parse_body(req, where);
    SubmissionKey key;
    key.node_address = string_field(body, "node_address", where);
    if (!rollout::is_node_address(key.node_address)) {
      refuse(
          400, "malformed_request",
          fmt::format(
              "field 'node_address' must be 64 lowercase hex digits (an Ed25519 public key) ({})",
              where));
    }
    key.step = integer_field(body, "step", 0, INT32_MAX, where);
    key.submission = integer_field(body, "submission", 0, INT32_MAX, where);
    const std::string sha = string_field(body, "sha256", where);
    if (!is_sha256_hex(sha)) {
      refuse(400, "malformed_request",
             fmt::format("field 'sha256' must be 64 lowercase hex digits ({})", where));
    }
    const int64_t size = integer_field(body, "size", 1, INT64_MAX, where);
    const std::string what = describe(key);
    if (size > opt.max_upload_bytes) {
      refuse(400, "too_large",
             fmt::format("{}: {} bytes is more than orchestrator.max_upload_mib ({} bytes)", what,
                         size, opt.max_upload_bytes));
    }
    require_signed_by(req, key.node_address, sha256_hex(req.body), where);
    require_member(key.node_address);
    if (key.step >= opt.steps) {
      refuse(409, "step_out_of_range",
             fmt::format("{}: the run has steps 0 to {} (rl.steps = {})", what, opt.steps - 1,
                         opt.steps));
    }
    // Work is handed out by POST /work within the step's quota and the version window, and a
    // step that fills drops its open work: what is still open here may be uploaded.
    const double now = now_s();
    const std::string open = state.request(key, sha, size, opt.group_size, now);
    if (open.empty()) {
      refuse(409, "not_assigned",
             fmt::format("{} was never assigned to this node: ask for work with POST /work", what));
    }
    if (open == "accepted") refuse(409, "duplicate", fmt::format("{} is already accepted", what));
    if (open == "validating") {
      refuse(409, "in_validation", fmt::format("{} is being validated", what));
    }
    if (open != "pending") refuse_closed(*state.latest(key));  // rejected or dropped
    const int64_t expires = static_cast<int64_t>(now_s()) + opt.url_ttl_s;
    const std::string path =
        fmt::format("/upload/step_{}/{}", key.step,
                    rollout::stored_file_name(key.node_address, key.submission, where));
    reply_json(res, {{"upload_url", signer.sign("PUT", path, expires)}, {"expires", expires}});
  }

  // Records `key` as rejected and answers 422 with the reason.
  [[noreturn]] void reject(const SubmissionKey& key, const std::string& kind,
                           const std::string& reason) {
    {
      std::lock_guard lock(decide_mu);
      state.reject(key, reason, now_s());
    }
    log::warn("orchestrator: rejected step {} submission {} of node {}: {}", key.step,
              key.submission, key.node_address, reason);
    refuse(422, kind, reason);
  }

  // The checks of an uploaded file that need its contents: every row belongs to this run, node,
  // step and submission; every token was sampled by a policy version the step may use; it holds
  // no more than its assignment's `groups` (0 = any); the worker signed the body. Returns the
  // reject reason code and message, or nothing.
  std::optional<std::pair<std::string, std::string>> check_file(const SubmissionKey& key,
                                                                int64_t groups,
                                                                const rollout::RolloutFile& file,
                                                                const std::string& where) {
    if (file.rows.empty()) return {{"empty_file", "schema: the file has no rows"}};
    const int64_t newest = state.policy_version();
    const int64_t oldest = key.step - opt.async_level;
    for (size_t i = 0; i < file.rows.size(); ++i) {
      const auto& r = file.rows[i];
      const auto wrong = [&](const char* column, const std::string& got, const std::string& want) {
        return std::make_pair(
            std::string("wrong_rows"),
            fmt::format("step binding: row {}: {} is '{}', expected '{}'", i, column, got, want));
      };
      if (r.run_id != state.run_id()) return wrong("run_id", r.run_id, state.run_id());
      if (r.node_address != key.node_address)
        return wrong("node_address", r.node_address, key.node_address);
      if (r.step != key.step)
        return wrong("step", std::to_string(r.step), std::to_string(key.step));
      if (r.submission != key.submission) {
        return wrong("submission", std::to_string(r.submission), std::to_string(key.submission));
      }
      for (int32_t v : r.token_versions) {
        if (v < oldest || v > newest) {
          return {{"version_window",
                   fmt::format("version window: row {}: a token was sampled by policy version {}, "
                               "outside [{}, {}] (step {} - async_level {}, newest published "
                               "version)",
                               i, v, oldest, newest, key.step, opt.async_level)}};
        }
      }
    }
    if (groups > 0) {  // the assignment's size: what its step's quota counted on
      std::set<int32_t> indices;
      for (const auto& r : file.rows) indices.insert(r.group_index);
      const auto rows = static_cast<int64_t>(file.rows.size());
      if (static_cast<int64_t>(indices.size()) > groups || rows > groups * opt.group_size) {
        return {{"too_many_rows",
                 fmt::format("upload: the file holds {} rows in {} groups; the assignment allows "
                             "{} groups of {} (rl.group_size)",
                             rows, indices.size(), groups, opt.group_size)}};
      }
    }
    try {
      rollout::verify_file_signature(file, key.node_address, where);
    } catch (const Error& e) {
      return {{"bad_signature", fmt::format("signature: {}", e.what())}};
    }
    return std::nullopt;
  }

  // PUT /upload/...: at most max_concurrent_uploads bodies are received and checked at once (each
  // up to max_upload_bytes, then decoded within its budget): beyond that, 503 busy before the
  // body is read, with Retry-After (Client::submit retries). Its URL and Content-Length were
  // checked before this runs.
  void receive_upload(const httplib::Request& req, httplib::Response& res,
                      const httplib::ContentReader& read) {
    if (uploads_receiving.fetch_add(1) >= opt.max_concurrent_uploads) {
      --uploads_receiving;
      count_refusal("busy");
      res.set_header("Retry-After", "1");
      refuse_and_close(res, 503, "busy",
                       fmt::format("{} uploads are being received (orchestrator."
                                   "max_concurrent_uploads); retry in a second",
                                   opt.max_concurrent_uploads));
      return;
    }
    struct Release {
      std::atomic<int64_t>& n;
      ~Release() { --n; }
    } release{uploads_receiving};
    std::string bytes;
    const auto limit = static_cast<size_t>(opt.max_upload_bytes);
    const bool whole = read([&](const char* data, size_t n) {
      if (bytes.size() + n > limit) return false;
      bytes.append(data, n);
      return true;
    });
    if (!whole) {
      refuse(
          400, "malformed_request",
          fmt::format("the body of {} did not arrive whole (at most {} bytes)", req.path, limit));
    }
    upload(req, bytes, res);
  }

  void upload(const httplib::Request& req, const std::string& bytes, httplib::Response& res) {
    const auto [key, name] = file_of(req);      // its URL was checked before the body was read
    const std::string sha = sha256_hex(bytes);  // for the signature and the declaration alike
    require_signed_by(req, key.node_address, sha, "upload of " + describe(key));
    require_member(key.node_address);  // a URL handed out before the eviction is void
    const std::string what = describe(key);
    const auto latest = state.latest(key);
    if (!latest || latest->status != "pending") {
      if (latest && latest->status == "accepted")
        refuse(409, "duplicate", what + " is already accepted");
      if (latest && latest->status == "validating")
        refuse(409, "in_validation", what + " is being validated");
      if (latest && (latest->status == "dropped" || latest->status == "rejected")) {
        refuse_closed(*latest);
      }
      refuse(409, "not_pending",
             fmt::format("{} has no pending request (ask for an upload URL with POST /submissions)",
                         what));
    }
    const std::string where = "upload of " + what;
    if (static_cast<int64_t>(bytes.size()) != latest->size) {
      reject(key, "size_mismatch",
             fmt::format("upload: the upload has {} bytes, {} were declared", bytes.size(),
                         latest->size));
    }
    if (sha != latest->sha256) {
      reject(key, "sha256_mismatch", "upload: the upload's SHA-256 differs from the one declared");
    }
    rollout::RolloutFile file;
    try {
      file = rollout::decode_rollout_file(bytes, where);
    } catch (const Error& e) {
      reject(key, "bad_file", fmt::format("schema: not a valid rollout file: {}", e.what()));
    }
    if (auto bad = check_file(key, latest->groups, file, where)) {
      reject(key, bad->first, bad->second);
    }

    // The orchestrator's checks passed: with validators the file waits for a verdict, without
    // them it is accepted now.
    const FileCounts counts = count_file(file.rows);
    const StepFiles* waiting = opt.pool.validation ? &validating : nullptr;
    {
      std::lock_guard lock(decide_mu);
      if (state.is_accepted(key)) refuse(409, "duplicate", what + " is already accepted");
      if (state.is_validating(key)) refuse(409, "in_validation", what + " is being validated");
      require_member(key.node_address);  // evicted while the file was being checked
      if (waiting) {
        waiting->write(key.step, name, bytes);
      } else {
        store.write(key.step, name, bytes);
      }
      const double now = now_s();
      // The file's hash is re-checked against the declaration in the commit itself.
      if (!(waiting ? state.start_validation(key, sha, counts, now)
                    : state.accept(key, sha, counts, now))) {
        if (waiting) {
          waiting->remove(key.step, name);
        } else {
          store.remove(key.step, name);
        }
        refuse(409, "not_pending",
               what +
                   " was decided meanwhile (its step may have closed) or its declared SHA-256 "
                   "changed: request an upload URL again");
      }
      if (!waiting) close_full_steps();
    }
    if (waiting) {
      log::info(
          "orchestrator: {} passed the checks: {} samples, {} with signal; waiting for a "
          "validator",
          what, counts.samples, counts.signal_samples);
    } else {
      log::info(
          "orchestrator: accepted step {} submission {} of node {}: {} samples, {} with signal; "
          "step counter {}",
          key.step, key.submission, key.node_address, counts.samples, counts.signal_samples,
          step_counter_now());
    }
    reply_json(res,
               {{"status", waiting ? "validating" : "accepted"},
                {"samples", counts.samples},
                {"signal_samples", counts.signal_samples}},
               waiting ? 202 : 200);
  }

  // ---- validators -------------------------------------------------------------------------

  // POST /validation/claim: the oldest upload waiting for a verdict that no other validator
  // holds, leased to this one for validation_lease_s.
  void claim(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "POST /validation/claim";
    const std::string validator = validator_field(parse_body(req, where), where);
    auto s = state.claim(validator, static_cast<double>(opt.validation_lease_s), now_s());
    while (s && std::count(s->claimed_by.begin(), s->claimed_by.end(), ',') >= kMaxClaims) {
      reject_stalled(*s);  // the file stopped every validator that claimed it
      s = state.claim(validator, static_cast<double>(opt.validation_lease_s), now_s());
    }
    Json submission = nullptr;
    if (s) {
      submission = {{"step", s->key.step},
                    {"node_address", s->key.node_address},
                    {"submission", s->key.submission},
                    {"sha256", s->sha256},
                    {"size", s->size},
                    {"samples", s->counts.samples},
                    {"signal_samples", s->counts.signal_samples},
                    {"uploaded_at", s->uploaded_at},
                    {"file", validation_file_path(s->key)},
                    {"lease_expires", s->lease_expires}};
      log::info("orchestrator: validator {} claimed {} for {} s", validator, describe(s->key),
                opt.validation_lease_s);
    }
    reply_json(res, {{"submission", submission},
                     {"policy_version", state.policy_version()},
                     {"async_level", opt.async_level}});
  }

  // POST /validation/verdict: a validator accepts a validating submission (its file moves into
  // the rollout store and the trainer may use it) or rejects it (its file moves to rejected/,
  // the node is counted and, with evict_on_reject, evicted). The first verdict wins; a lease is
  // not required, validators being trusted.
  void verdict(const httplib::Request& req, httplib::Response& res) {
    const std::string where = "POST /validation/verdict";
    const Json body = parse_body(req, where);
    SubmissionKey key;
    key.step = integer_field(body, "step", 0, INT32_MAX, where);
    key.node_address = address_field(body, "node_address", where);
    key.submission = integer_field(body, "submission", 0, INT32_MAX, where);
    const bool accept = bool_field(body, "accept", where);
    std::string why;
    if (body.contains("reason")) why = string_field(body, "reason", where);
    if (!accept && why.empty()) {
      refuse(400, "malformed_request",
             fmt::format("field 'reason' must say why the submission is rejected ({})", where));
    }
    if (why.size() > kMaxVerdictReasonBytes) {
      refuse(400, "malformed_request",
             fmt::format("field 'reason' is longer than {} bytes ({})", kMaxVerdictReasonBytes,
                         where));
    }
    const std::string validator = validator_field(body, where);
    // The validator's own signed statement of this verdict, for the ledger (optional: without
    // it the orchestrator states the verdict, which the validator token vouched for).
    std::optional<ledger::Statement> statement;
    if (body.contains("ledger_signature")) {
      statement = ledger::Statement{};
      statement->kind = "verdict";
      statement->author = address_field(body, "validator_address", where);
      statement->time_ms = integer_field(body, "ledger_time_ms", 0, INT64_MAX, where);
      statement->signature = string_field(body, "ledger_signature", where);
    }
    int64_t checked = -1;
    if (body.contains("checked_samples")) {
      checked = integer_field(body, "checked_samples", 0, INT32_MAX, where);
    }

    std::lock_guard lock(decide_mu);
    const auto row = state.latest(key);
    if (!row || row->status != "validating") {
      const std::string now_is = !row                        ? "there is no such submission"
                                 : row->status == "accepted" ? "it is accepted already"
                                 : row->status == "rejected" || row->status == "dropped"
                                     ? fmt::format("it was {}: {}", row->status, row->reason)
                                     : "its file has not arrived";
      refuse(409, "not_validating",
             fmt::format("{} is not being validated: {}", describe(key), now_is.substr(0, 2000)));
    }
    const std::string samples_checked =
        checked < 0 ? "" : fmt::format(" ({} of {} samples checked)", checked, row->counts.samples);
    if (statement) {
      statement->body =
          ledger::verdict_body(key.node_address, key.step, key.submission, row->sha256, accept, why)
              .dump();
      if (!verify_signature(statement->author,
                            ledger::statement_message(state.ledger().id(), *statement),
                            statement->signature)) {
        refuse(
            400, "bad_signature",
            fmt::format("field 'ledger_signature' is not {}'s signature of this verdict on "
                        "{} (file {}) in run {} ({})",
                        statement->author, describe(key), row->sha256, state.ledger().id(), where));
      }
    }
    const std::string status =
        accept ? accept_verdict(*row, validator, samples_checked, statement)
               : reject_verdict(*row, validator, why, samples_checked, statement);
    reply_json(res, {{"status", status}});
  }

  // Rejects a validating submission that `kMaxClaims` validators claimed and never decided: its
  // file stopped them (a crash, a hang), and a third would fare no better.
  void reject_stalled(const Submission& s) {
    std::lock_guard lock(decide_mu);
    const auto row = state.latest(s.key);
    if (!row || row->status != "validating") return;  // decided meanwhile
    const std::string before = s.claimed_by.substr(0, s.claimed_by.rfind(','));
    reject_verdict(*row, "orchestrator",
                   fmt::format("validation: the file stopped {} validators without a verdict "
                               "({}): each lease of {} s ran out",
                               kMaxClaims, before, opt.validation_lease_s),
                   "");
  }

  // The accepting half of verdict() (callers hold decide_mu; `row` is validating).
  std::string accept_verdict(const Submission& row, const std::string& validator,
                             const std::string& samples_checked,
                             const std::optional<ledger::Statement>& statement = std::nullopt) {
    const SubmissionKey& key = row.key;
    if (const auto n = state.node(key.node_address); n && n->evicted) {
      // Evictions reject validating submissions as they happen; this is the belt to that brace.
      const Eviction e = state.evict(key.node_address, n->evicted_reason, now_s());
      drop_files(e.rejected);
      log_eviction(e);
      return "rejected";
    }
    const std::string name = file_name(key);
    try {
      validating.move_to(key.step, name, store.path(key.step, name));
    } catch (const Error& e) {
      refuse(500, "storage_error",
             fmt::format("cannot move {} into the rollout store: {}", describe(key), e.what()));
    }
    bool accepted = false;
    try {
      accepted = state.accept_validated(key, validator, now_s(), statement);
    } catch (...) {
      validating.move_from(store.path(key.step, name), key.step, name);
      throw;
    }
    if (!accepted) {  // cannot happen under decide_mu; undone all the same
      validating.move_from(store.path(key.step, name), key.step, name);
      refuse(409, "not_validating", describe(key) + " was decided meanwhile");
    }
    log::info(
        "orchestrator: validator {} accepted {}{}: {} samples, {} with signal; step counter {}",
        validator, describe(key), samples_checked, row.counts.samples, row.counts.signal_samples,
        step_counter_now());
    close_full_steps();
    return "accepted";
  }

  // Drops the open work of steps whose accepted files now hold what they need: surplus, never
  // judged and never held against its node (callers hold decide_mu).
  void close_full_steps() {
    std::map<int64_t, std::pair<int64_t, int64_t>> by_step;  // validating, still in flight
    for (const Submission& s : state.close_full_steps(opt.batch_size, now_s())) {
      if (s.status == "validating") {
        ++by_step[s.key.step].first;
        try {  // committed: a file left behind is removed by the next start
          validating.remove(s.key.step, file_name(s.key));
        } catch (const Error& e) {
          log::error("orchestrator: {}", e.what());
        }
      } else {
        ++by_step[s.key.step].second;
      }
    }
    for (const auto& [step, n] : by_step) {
      log::info(
          "orchestrator: step {} closed; dropped its surplus unjudged: {} file{} waiting for a "
          "validator, {} assignment{} in flight",
          step, n.first, n.first == 1 ? "" : "s", n.second, n.second == 1 ? "" : "s");
    }
  }

  // The rejecting half of verdict() (callers hold decide_mu; `row` is validating).
  std::string reject_verdict(const Submission& row, const std::string& validator,
                             const std::string& why, const std::string& samples_checked,
                             const std::optional<ledger::Statement>& statement = std::nullopt) {
    const SubmissionKey& key = row.key;
    const std::string reason = fmt::format("validator {}: {}", validator, why);
    const std::string evict_reason =
        opt.pool.evict_on_reject ? fmt::format("validator rejected step {} submission {}: {}",
                                               key.step, key.submission, why)
                                 : "";
    const Rejection r =
        state.reject_validated(key, reason, validator, evict_reason, now_s(), statement);
    if (!r.rejected) refuse(409, "not_validating", describe(key) + " was decided meanwhile");
    const std::string name = file_name(key);
    try {  // committed: a failure to keep the file is logged (the next start retries it)
      validating.move_to(key.step, name, rejected.path(key.step, name));
    } catch (const Error& e) {
      log::error("orchestrator: {}", e.what());
    }
    log::warn("orchestrator: validator {} rejected {}{}: {} (node {} has {} rejection{})",
              validator, describe(key), samples_checked, why, key.node_address,
              r.eviction.node.rejections, r.eviction.node.rejections == 1 ? "" : "s");
    if (!evict_reason.empty()) {
      drop_files(r.eviction.rejected);
      log_eviction(r.eviction);
    }
    return "rejected";
  }
};

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
  log::info("orchestrator: run {} listening on {} (data in {}; ledger kept by {})",
            m.state.run_id(), m.url, m.opt.data_dir.string(), m.state.ledger().keeper().address());
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
