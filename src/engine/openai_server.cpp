#include "engine/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "common/error.h"
#include "common/exception_message.h"
#include "common/http_limits.h"
#include "common/logging.h"
#include "engine/openai_protocol.h"
#include "engine/text_stream.h"

namespace trellis::engine {
namespace {

using Clock = std::chrono::steady_clock;

enum class Api { kCompletions, kChat };

// One choice of a request: its text as it streams and its tokens with their log-probs.
struct Choice {
  Choice(const model::Tokenizer& tok, std::vector<std::string> stop) : text(tok, std::move(stop)) {}
  TextStream text;
  std::vector<int32_t> tokens;  // up to the one that completed a stop string
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  std::string finish;  // "" while generating, then "stop" | "length" | "abort"
  bool ended = false;  // the engine reported its end
};

// What a stream sends next: a choice's opening (chat's assistant role), text with the tokens it
// came from, or the choice's end.
struct Event {
  int64_t choice = 0;
  std::string text;
  size_t token_begin = 0, token_end = 0;
  bool role = false, finished = false;

  static Event opening(int64_t choice) {
    Event e;
    e.choice = choice;
    e.role = true;
    return e;
  }
  static Event delta(int64_t choice, std::string text, size_t token_begin, size_t token_end) {
    Event e;
    e.choice = choice;
    e.text = std::move(text);
    e.token_begin = token_begin;
    e.token_end = token_end;
    return e;
  }
  static Event end(int64_t choice) {
    Event e;
    e.choice = choice;
    e.finished = true;
    return e;
  }
};

// One HTTP request's generation: an engine request per prompt (n completions each) and what they
// produced. The engine's callbacks fill it on the loop thread; the HTTP thread reads it. Shared by
// both, so it lives as long as either needs it.
struct Job {
  std::shared_ptr<const model::Tokenizer> tok;  // outlives the choices' text streams
  Api api = Api::kCompletions;
  std::string id;
  int64_t created = 0;
  GenerationParams params;
  uint64_t seed = 0;
  bool echo = false;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;         // what echo prepends
  std::vector<std::string> engine_ids;           // one per prompt
  std::vector<std::unique_ptr<Choice>> choices;  // completion i of prompt k at k * n + i

  std::mutex mu;
  std::condition_variable cv;
  int64_t unfinished = 0;  // choices the engine has not ended yet
  bool cancelled = false;  // the server is stopping
  std::deque<Event> events;

  bool per_token_events() const { return params.logprobs >= 0 || params.return_token_ids; }
  int64_t prompt_tokens() const {
    int64_t n = 0;
    for (const auto& p : prompts) n += static_cast<int64_t>(p.size());
    return n;
  }
  int64_t completion_tokens() const {
    int64_t n = 0;
    for (const auto& c : choices) n += static_cast<int64_t>(c->tokens.size());
    return n;
  }
};

TokenRun token_run(const Choice& c, size_t begin, size_t end) {
  const bool top = !c.top.empty();
  return {std::span(c.tokens).subspan(begin, end - begin),
          std::span(c.logprobs).subspan(begin, end - begin),
          top ? std::span(c.top).subspan(begin, end - begin)
              : std::span<const std::vector<std::pair<int32_t, float>>>(),
          std::span(c.text.offsets()).subspan(begin, end - begin)};
}

// The request being answered on this HTTP thread, for its log line.
struct RequestLog {
  Clock::time_point start;
  std::string note;
};
thread_local RequestLog request_log;

void reply_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  res.set_content(json_text(e.to_json()), "application/json");
}

}  // namespace

struct OpenAIServer::Impl {
  EngineLoop& loop;
  std::shared_ptr<const model::Prompting> prompting;
  std::shared_ptr<const model::Tokenizer> tokenizer;  // prompting's, shared with running jobs
  const model::Tokenizer& tok;
  ServedModel model;
  ServerOptions opt;
  int64_t started_at = std::time(nullptr);

  httplib::Server svr;
  std::thread thread;
  int port = -1;

  std::mutex mu;  // guards everything below
  std::set<std::shared_ptr<Job>> active;
  bool stopping = false;
  std::mt19937_64 rng{std::random_device{}()};
  std::map<std::pair<std::string, int>, int64_t> http_counts;
  int64_t prompt_tokens = 0, completion_tokens = 0;

  Impl(EngineLoop& l, const model::Prompting& p, ServedModel m, ServerOptions o)
      : loop(l),
        prompting(std::make_shared<const model::Prompting>(p)),
        tokenizer(prompting, &prompting->tok),
        tok(*tokenizer),
        model(std::move(m)),
        opt(std::move(o)) {
    routes();
  }

  uint64_t random() {
    std::lock_guard lock(mu);
    return rng();
  }

  // ---- routes ------------------------------------------------------------------------------

  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  // Every handler answers errors as JSON; nothing escapes into httplib.
  static httplib::Server::Handler guarded(Handler fn) {
    return [fn = std::move(fn)](const httplib::Request& req, httplib::Response& res) {
      try {
        fn(req, res);
      } catch (const ApiError& e) {
        reply_error(res, e);
      } catch (const Error& e) {
        reply_error(res, ApiError(400, e.what()));
      } catch (const std::exception& e) {
        log::error("http: {} {}: {}", req.method, req.path, message_of(e));
        reply_error(res, ApiError(500, std::string("internal error: ") + message_of(e)));
      }
    };
  }

  void routes() {
    svr.new_task_queue = [n = opt.http_threads] {
      return new httplib::ThreadPool(static_cast<size_t>(std::max(n, 2)));
    };
    svr.set_payload_max_length(opt.max_body_bytes);
    // httplib's default also sets SO_REUSEPORT, which would let a second server share the port
    // silently; a port in use must be an error.
    svr.set_socket_options([](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    svr.set_tcp_nodelay(true);  // stream chunks go out at once
    svr.Get("/healthz", guarded([](const auto&, auto& res) {
              res.set_content(R"({"status":"ok"})", "application/json");
            }));
    svr.Get("/metrics", guarded([this](const auto&, auto& res) {
              res.set_content(metrics(), "text/plain; version=0.0.4");
            }));
    svr.Get("/v1/models", guarded([this](const auto&, auto& res) {
              Json list = {{"object", "list"}, {"data", Json::array({model_json()})}};
              res.set_content(json_text(list), "application/json");
            }));
    svr.Get(R"(/v1/models/(.+))", guarded([this](const auto& req, auto& res) {
              check_model(req.matches[1].str());
              res.set_content(json_text(model_json()), "application/json");
            }));
    svr.Post("/v1/completions",
             guarded([this](const auto& req, auto& res) { completions(req, res); }));
    svr.Post("/v1/chat/completions",
             guarded([this](const auto& req, auto& res) { chat_completions(req, res); }));

    // The right path with the wrong method: 405, naming the method to use.
    auto wrong_method = [](const char* allowed) {
      return guarded([allowed](const auto& req, auto& res) {
        res.set_header("Allow", allowed);
        throw ApiError(405,
                       fmt::format("{} {} is not allowed (use {})", req.method, req.path, allowed),
                       "", "method_not_allowed");
      });
    };
    for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
      svr.Get(path, wrong_method("POST"));
      svr.Put(path, wrong_method("POST"));
      svr.Delete(path, wrong_method("POST"));
      svr.Patch(path, wrong_method("POST"));
    }
    for (const char* path : {"/v1/models", "/healthz", "/metrics"}) {
      svr.Post(path, wrong_method("GET"));
      svr.Put(path, wrong_method("GET"));
      svr.Delete(path, wrong_method("GET"));
      svr.Patch(path, wrong_method("GET"));
    }

    // Errors httplib answers itself (unknown route, oversized body, malformed HTTP) get the same
    // JSON shape; errors from the handlers already carry theirs.
    svr.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          std::string message = fmt::format("HTTP {} for {} {}", res.status, req.method, req.path);
          std::string code;
          if (res.status == 404) {
            message = fmt::format("there is no route {} {}", req.method, req.path);
            code = "not_found";
          } else if (res.status == 413) {
            message = fmt::format("the request body is larger than the limit of {} bytes",
                                  opt.max_body_bytes);
            code = "request_too_large";
          }
          reply_error(res, ApiError(res.status, message, "", code));
          return httplib::Server::HandlerResponse::Handled;
        }));
    svr.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          reply_error(res, ApiError(500, "internal error"));
        });
    svr.set_pre_routing_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& req, httplib::Response& res) {
          request_log = {Clock::now(), ""};
          // Chunked, compressed or oversized bodies are refused before they are read.
          if (const auto refusal = unbounded_body(req, opt.max_body_bytes)) {
            reply_error(res, ApiError(refusal->status, refusal->message, "", refusal->code));
            res.set_header("Connection", "close");
            return httplib::Server::HandlerResponse::Handled;
          }
          return httplib::Server::HandlerResponse::Unhandled;
        }));
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      static const std::set<std::string> known = {"/v1/models", "/v1/completions",
                                                  "/v1/chat/completions", "/healthz", "/metrics"};
      const std::string route = known.count(req.path)                 ? req.path
                                : req.path.starts_with("/v1/models/") ? "/v1/models/{model}"
                                                                      : "other";
      {
        std::lock_guard lock(mu);
        ++http_counts[{route, res.status}];
      }
      // Requests httplib refuses before routing (malformed HTTP) have no start time.
      const double ms =
          request_log.start == Clock::time_point{}
              ? 0.0
              : std::chrono::duration<double, std::milli>(Clock::now() - request_log.start).count();
      log::debug("http: {} {} -> {} in {:.1f} ms{}", req.method, req.path, res.status, ms,
                 request_log.note);
      request_log = {};
    });
  }

  Json model_json() const {
    return {{"id", model.name},
            {"object", "model"},
            {"created", started_at},
            {"owned_by", "trellis"},
            {"max_model_len", model.context_length}};
  }

  void check_model(const std::string& name) const {
    if (!name.empty() && name != model.name) {
      throw ApiError(
          404,
          fmt::format("the model '{}' does not exist (this server serves '{}')", name, model.name),
          "model", "model_not_found");
    }
  }

  // ---- the generation endpoints ------------------------------------------------------------

  std::shared_ptr<Job> new_job(Api api, const GenerationParams& params) {
    auto job = std::make_shared<Job>();
    job->tok = tokenizer;
    job->api = api;
    job->id = fmt::format("{}-{:016x}", api == Api::kChat ? "chatcmpl" : "cmpl", random());
    job->created = std::time(nullptr);
    job->params = params;
    job->seed = params.seed ? *params.seed : random();
    return job;
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req.body);  // httplib refused bodies over the limit (413)
    CompletionsRequest r = parse_completions(body);
    check_model(r.params.model);
    auto job = new_job(Api::kCompletions, r.params);
    job->echo = r.echo;
    for (const auto& p : r.prompts) {
      std::vector<int32_t> ids;
      if (p.text) {
        ids = prompting->encode(*p.text);
        job->prompt_texts.push_back(*p.text);
      } else {
        ids = p.ids;
        job->prompt_texts.push_back(r.echo ? tok.decode(ids) : "");
      }
      job->prompts.push_back(std::move(ids));
    }
    run(job, prompting->stop_ids, res);
  }

  void chat_completions(const httplib::Request& req, httplib::Response& res) {
    const Json body = parse_body(req.body);  // httplib refused bodies over the limit (413)
    ChatRequest r = parse_chat(body);
    check_model(r.params.model);
    auto job = new_job(Api::kChat, r.params);
    try {
      job->prompts.push_back(prompting->encode_chat(r.messages, r.options));
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "messages");
    }
    job->prompt_texts.push_back("");
    run(job, prompting->chat_stop_ids(), res);
  }

  // Submits the job's requests, then answers: at once with a stream, or when all are done.
  void run(const std::shared_ptr<Job>& job, const std::vector<int32_t>& stop_ids,
           httplib::Response& res) {
    const int64_t n = job->params.n;
    for (size_t k = 0; k < job->prompts.size(); ++k) {
      job->engine_ids.push_back(fmt::format("{}-{}", job->id, k));
      for (int64_t i = 0; i < n; ++i) {
        job->choices.push_back(std::make_unique<Choice>(tok, job->params.stop));
        if (job->params.stream && job->api == Api::kChat) {
          job->events.push_back(Event::opening(static_cast<int64_t>(job->choices.size()) - 1));
        } else if (job->params.stream && job->echo) {
          job->events.push_back(Event::delta(static_cast<int64_t>(job->choices.size()) - 1,
                                             job->prompt_texts[k], 0, 0));
        }
      }
    }
    job->unfinished = static_cast<int64_t>(job->choices.size());
    {
      std::lock_guard lock(mu);
      if (stopping) throw ApiError(503, "the server is shutting down");
      active.insert(job);
    }
    try {
      submit(job, stop_ids);
    } catch (...) {
      release(job);
      throw;
    }
    if (job->params.stream) return stream(job, res);

    bool cancelled, aborted = false;
    {
      std::unique_lock lock(job->mu);
      job->cv.wait(lock, [&] { return job->unfinished == 0 || job->cancelled; });
      for (const auto& c : job->choices) aborted |= c->finish == "abort";
      // Shutdown aborts the engine's requests too: their aborts may arrive before this wakes.
      cancelled = job->cancelled && (job->unfinished > 0 || aborted);
    }
    release(job);
    request_log.note = log_note(*job);
    if (cancelled) throw ApiError(503, "the server is shutting down");
    if (aborted) throw ApiError(500, "the engine ended the request early (see the server log)");
    res.set_content(json_text(response_json(*job)), "application/json");
  }

  void submit(const std::shared_ptr<Job>& job, const std::vector<int32_t>& stop_ids) {
    const auto& p = job->params;
    for (size_t k = 0; k < job->prompts.size(); ++k) {
      Request r;
      r.id = job->engine_ids[k];
      r.prompt = job->prompts[k];
      r.n = p.n;
      const int64_t room = model.context_length - static_cast<int64_t>(r.prompt.size());
      r.max_tokens =
          p.max_tokens.value_or(std::max<int64_t>(1, std::min(opt.default_max_tokens, room)));
      r.stop_ids = stop_ids;
      r.stop_ids.insert(r.stop_ids.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
      r.sampling = p.sampling;
      r.seed = job->seed;
      r.top_logprobs = std::max<int64_t>(p.logprobs, 0);
      try {
        loop.submit(std::move(r), callbacks(job, static_cast<int64_t>(k)));
      } catch (const Error& e) {
        for (size_t j = 0; j < k; ++j) loop.abort(job->engine_ids[j]);
        const std::string what = e.what();
        throw ApiError(400, what,
                       what.starts_with("n must") ? "n"
                       : job->api == Api::kChat   ? "messages"
                                                  : "prompt");
      }
    }
  }

  Callbacks callbacks(const std::shared_ptr<Job>& job, int64_t k) {
    Callbacks cb;
    EngineLoop* engine_loop = &loop;
    cb.on_token = [job, k, engine_loop](const TokenEvent& e) {
      const int64_t index = k * job->params.n + e.completion.index;
      bool stopped = false;
      {
        std::lock_guard lock(job->mu);
        Choice& c = *job->choices.at(index);
        if (!c.finish.empty()) return;  // ended by a stop string; the engine has not heard yet
        std::string text = c.text.push(e.token);
        c.tokens.push_back(e.token);
        c.logprobs.push_back(e.logprob);
        if (!e.completion.top_logprobs.empty()) c.top.push_back(e.completion.top_logprobs.back());
        stopped = c.text.stopped();
        if (stopped) c.finish = "stop";
        if (job->params.stream && (!text.empty() || job->per_token_events())) {
          job->events.push_back(
              Event::delta(index, std::move(text), c.tokens.size() - 1, c.tokens.size()));
        }
        if (stopped && job->params.stream) {
          job->events.push_back(Event::end(index));
        }
      }
      job->cv.notify_all();
      if (stopped) engine_loop->stop(job->engine_ids[k], e.completion.index);
    };
    cb.on_finish = [job, k](Completion done) {
      {
        std::lock_guard lock(job->mu);
        if (done.index < 0 || done.index >= job->params.n) return;
        const int64_t index = k * job->params.n + done.index;
        Choice& c = *job->choices[index];
        if (c.ended) return;
        c.ended = true;
        --job->unfinished;
        if (c.finish.empty()) {
          c.finish = finish_name(done.finish);
          std::string rest = c.text.finish();
          if (job->params.stream) {
            if (!rest.empty()) {
              job->events.push_back(
                  Event::delta(index, std::move(rest), c.tokens.size(), c.tokens.size()));
            }
            job->events.push_back(Event::end(index));
          }
        }
      }
      job->cv.notify_all();
    };
    return cb;
  }

  // The job is answered (or its client is gone): end whatever still runs and count its tokens.
  void release(const std::shared_ptr<Job>& job) {
    bool running;
    int64_t prompt, completion;
    {
      std::lock_guard lock(job->mu);
      running = job->unfinished > 0;
      prompt = job->prompt_tokens();
      completion = job->completion_tokens();
    }
    if (running) {
      for (const auto& id : job->engine_ids) loop.abort(id);
    }
    std::lock_guard lock(mu);
    if (active.erase(job) == 0) return;
    prompt_tokens += prompt;
    completion_tokens += completion;
  }

  // ---- responses ---------------------------------------------------------------------------

  // What the request's log line says about it (once the engine is done with the job).
  static std::string log_note(const Job& job) {
    return fmt::format(" ({}: {} prompt(s), n={}, {} prompt + {} completion tokens{})", job.id,
                       job.prompts.size(), job.params.n, job.prompt_tokens(),
                       job.completion_tokens(), job.params.stream ? ", streamed" : "");
  }

  Json choice_json(const Job& job, int64_t index) const {
    const Choice& c = *job.choices[index];
    const int64_t k = index / job.params.n;
    const auto& p = job.params;
    const TokenRun run = token_run(c, 0, c.tokens.size());
    Json choice = {{"index", index}};
    if (job.api == Api::kChat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text.text()}};
      choice["logprobs"] = p.logprobs >= 0 ? chat_logprobs(tok, run) : Json(nullptr);
    } else {
      const std::string& echoed = job.echo ? job.prompt_texts[k] : std::string();
      choice["text"] = echoed + c.text.text();
      choice["logprobs"] =
          p.logprobs >= 0 ? completion_logprobs(tok, run, p.logprobs > 0, utf8_characters(echoed))
                          : Json(nullptr);
    }
    choice["finish_reason"] = c.finish;
    if (p.return_token_ids) {
      if (job.api == Api::kCompletions) choice["prompt_token_ids"] = job.prompts[k];
      choice["token_ids"] = c.tokens;
    }
    return choice;
  }

  Json response_json(const Job& job) const {
    Json choices = Json::array();
    for (size_t i = 0; i < job.choices.size(); ++i) {
      choices.push_back(choice_json(job, static_cast<int64_t>(i)));
    }
    Json out = {{"id", job.id},
                {"object", job.api == Api::kChat ? "chat.completion" : "text_completion"},
                {"created", job.created},
                {"model", model.name},
                {"choices", std::move(choices)},
                {"usage", usage_json(job.prompt_tokens(), job.completion_tokens())}};
    if (job.api == Api::kChat && job.params.return_token_ids) {
      out["prompt_token_ids"] = job.prompts[0];
    }
    return out;
  }

  Json chunk_json(const Job& job, Json choices) const {
    return {{"id", job.id},
            {"object", job.api == Api::kChat ? "chat.completion.chunk" : "text_completion"},
            {"created", job.created},
            {"model", model.name},
            {"choices", std::move(choices)}};
  }

  Json event_json(const Job& job, const Event& e, bool first) const {
    const Choice& c = *job.choices[e.choice];
    const auto& p = job.params;
    const bool tokens = e.token_end > e.token_begin;
    Json choice = {{"index", e.choice}};
    if (job.api == Api::kChat) {
      Json delta = Json::object();
      if (e.role) {
        delta = {{"role", "assistant"}, {"content", ""}};
      } else if (!e.finished) {
        delta["content"] = e.text;
      }
      choice["delta"] = std::move(delta);
    } else {
      choice["text"] = e.text;
    }
    choice["logprobs"] = nullptr;
    if (p.logprobs >= 0 && tokens) {
      const TokenRun run = token_run(c, e.token_begin, e.token_end);
      const int64_t base = job.echo ? utf8_characters(job.prompt_texts[e.choice / p.n]) : 0;
      choice["logprobs"] = job.api == Api::kChat
                               ? chat_logprobs(tok, run)
                               : completion_logprobs(tok, run, p.logprobs > 0, base);
    }
    choice["finish_reason"] = e.finished ? Json(c.finish) : Json(nullptr);
    if (p.return_token_ids) {
      if (first) choice["prompt_token_ids"] = job.prompts[e.choice / p.n];
      if (!e.finished) {
        choice["token_ids"] =
            std::vector<int32_t>(c.tokens.begin() + e.token_begin, c.tokens.begin() + e.token_end);
      }
    }
    return chunk_json(job, Json::array({std::move(choice)}));
  }

  // Server-sent events: a chunk per event, then usage if asked for, then [DONE].
  void stream(const std::shared_ptr<Job>& job, httplib::Response& res) {
    auto started = std::make_shared<std::vector<bool>>(job->choices.size(), false);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, started](size_t, httplib::DataSink& sink) {
          std::string out, note;
          bool finished, cancelled;
          {
            std::unique_lock lock(job->mu);
            job->cv.wait_for(lock, std::chrono::milliseconds(200), [&] {
              return !job->events.empty() || job->unfinished == 0 || job->cancelled;
            });
            for (const Event& e : job->events) {
              const bool first = !(*started)[e.choice];
              (*started)[e.choice] = true;
              out += "data: " + json_text(event_json(*job, e, first)) + "\n\n";
            }
            job->events.clear();
            finished = job->unfinished == 0;
            cancelled = job->cancelled && !finished;
            if (finished || cancelled) note = log_note(*job);
            if (finished && job->params.include_usage) {
              Json usage = chunk_json(*job, Json::array());
              usage["usage"] = usage_json(job->prompt_tokens(), job->completion_tokens());
              out += "data: " + json_text(usage) + "\n\n";
            }
          }
          if (cancelled) {
            out += "data: " + json_text(ApiError(503, "the server is shutting down").to_json()) +
                   "\n\n";
          }
          if (finished || cancelled) out += "data: [DONE]\n\n";
          if (!out.empty() && !sink.write(out.data(), out.size())) return false;  // client gone
          if (finished || cancelled) {
            request_log.note = note;
            sink.done();
          }
          return true;
        },
        [this, job](bool) { release(job); });
  }

  // ---- metrics -----------------------------------------------------------------------------

  std::string metrics() {
    const EngineStats s = loop.stats();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, int64_t value) {
      out +=
          fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
    };
    std::lock_guard lock(mu);
    out +=
        "# HELP trellis_http_requests_total HTTP requests answered, by route and status code.\n"
        "# TYPE trellis_http_requests_total counter\n";
    for (const auto& [key, count] : http_counts) {
      out += fmt::format("trellis_http_requests_total{{route=\"{}\",code=\"{}\"}} {}\n", key.first,
                         key.second, count);
    }
    metric("trellis_prompt_tokens_total", "counter", "Prompt tokens of answered API requests.",
           prompt_tokens);
    metric("trellis_completion_tokens_total", "counter",
           "Completion tokens of answered API requests.", completion_tokens);
    metric("trellis_requests_in_flight", "gauge", "API requests being generated.",
           static_cast<int64_t>(active.size()));
    metric("trellis_engine_requests_total", "counter", "Requests the engine accepted.", s.requests);
    metric("trellis_generation_tokens_total", "counter", "Tokens the engine sampled.",
           s.tokens_generated);
    metric("trellis_prefill_tokens_total", "counter",
           "Prompt and prefix tokens the engine fed (re-prefills included).", s.prompt_tokens);
    metric("trellis_engine_steps_total", "counter", "Engine steps (forwards).", s.steps);
    metric("trellis_preemptions_total", "counter", "Completions preempted for KV cache room.",
           s.preemptions);
    metric("trellis_requests_running", "gauge", "Completions decoding now.", s.running);
    metric("trellis_requests_waiting", "gauge", "Completions waiting for the engine.", s.waiting);
    metric("trellis_kv_cache_blocks_used", "gauge", "KV cache blocks in use.", s.kv_blocks_used);
    metric("trellis_kv_cache_blocks_total", "gauge", "KV cache blocks in all.", s.kv_blocks_total);
    return out;
  }
};

OpenAIServer::OpenAIServer(EngineLoop& loop, const model::Prompting& prompting, ServedModel model,
                           ServerOptions options)
    : impl_(std::make_unique<Impl>(loop, prompting, std::move(model), std::move(options))) {}

OpenAIServer::~OpenAIServer() { stop(); }

int OpenAIServer::start() {
  auto& m = *impl_;
  const std::string where = fmt::format("{}:{}", m.opt.host, m.opt.port);
  if (m.thread.joinable()) throw Error("the server is already running", where);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not end the process
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
  if (m.prompting->chat) {
    log::debug("openai server: chat template {}", m.prompting->chat->format_name());
  } else {
    log::warn("openai server: /v1/chat/completions is unavailable: {}", m.prompting->chat_error);
  }
  return m.port;
}

void OpenAIServer::stop() {
  auto& m = *impl_;
  std::set<std::shared_ptr<Job>> active;
  {
    std::lock_guard lock(m.mu);
    m.stopping = true;
    active = m.active;
  }
  for (const auto& job : active) {
    {
      std::lock_guard lock(job->mu);
      job->cancelled = true;
    }
    job->cv.notify_all();
    for (const auto& id : job->engine_ids) m.loop.abort(id);
  }
  m.svr.stop();
  if (m.thread.joinable()) m.thread.join();
}

int OpenAIServer::port() const { return impl_->port; }

}  // namespace trellis::engine
