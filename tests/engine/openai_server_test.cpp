// End-to-end tests of the OpenAI-compatible server over real HTTP on loopback: an in-process
// OpenAIServer on a free port over a tiny fp32 model, talked to with httplib::Client. Results are
// compared with the engine run directly on an identical model: completions from text and token-id
// prompts, chat, n > 1, logprobs (also against the model's full forward), streaming, stop strings,
// concurrent clients, a client that hangs up mid-stream, and every kind of bad request.
#include "engine/openai_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <thread>

#include "common/json.h"
#include "engine/engine.h"
#include "engine/engine_loop.h"
#include "engine/openai_protocol.h"
#include "model/chat_template.h"
#include "model/presets.h"

namespace trellis::engine {
namespace {

namespace fs = std::filesystem;
using model::Transformer;

constexpr size_t kMaxBody = 64 << 10;

std::unique_ptr<Transformer> tiny_model() {
  auto m = std::make_unique<Transformer>(model::preset_config(model::Arch::Qwen3, "tiny"),
                                         model::Compute{torch::kCPU, torch::kFloat32});
  m->init_random(1);
  return m;
}

struct Reply {
  int status = 0;
  Json json;
  std::string body, content_type;
};

// One server for the suite, plus an identical model for reference runs.
class OpenAIServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::temp_directory_path() / "trellis_openai_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    model::write_byte_level_tokenizer(dir_, "chatml");
    tok_ = new model::Tokenizer(model::Tokenizer::load(dir_));
    model_ = tiny_model().release();
    reference_model_ = tiny_model().release();
    EngineOptions options;
    options.max_num_seqs = 32;
    options.vocab_limit = tok_->vocab_size();
    engine_ = new Engine(*model_, options);
    loop_ = new EngineLoop(*engine_);
    prompting_ = new model::Prompting(*tok_, model_->config(), dir_.string());
    ServedModel served{"tiny", model_->config().max_position_embeddings};
    server_ = new OpenAIServer(*loop_, *prompting_, served,
                               {.host = "127.0.0.1", .port = 0, .max_body_bytes = kMaxBody});
    port_ = server_->start();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete loop_;
    delete engine_;
    delete model_;
    delete reference_model_;
    delete prompting_;
    delete tok_;
    fs::remove_all(dir_);
  }

  static httplib::Client client() {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(120, 0);
    return cli;
  }

  // The reply to `what` (a failure, and an empty Reply, when there was none).
  static Reply reply_of(const httplib::Result& res, const std::string& what) {
    Reply r;
    if (!res) {
      ADD_FAILURE() << "no response from " << what << ": " << httplib::to_string(res.error());
      return r;
    }
    r.status = res->status;
    r.body = res->body;
    r.content_type = res->get_header_value("Content-Type");
    if (r.content_type.starts_with("application/json")) r.json = Json::parse(res->body);
    return r;
  }
  static Reply post(const std::string& path, const std::string& body) {
    return reply_of(client().Post(path.c_str(), body, "application/json"), "POST " + path);
  }
  static Reply post(const std::string& path, const Json& body) { return post(path, body.dump()); }
  static Reply get(const std::string& path) {
    return reply_of(client().Get(path.c_str()), "GET " + path);
  }

  // The server-sent events of a stream: each `data:` payload parsed, and whether [DONE] ended it.
  static std::vector<Json> events(const std::string& body, bool* done) {
    std::vector<Json> out;
    *done = false;
    size_t at = 0;
    while (at < body.size()) {
      size_t end = body.find("\n\n", at);
      EXPECT_NE(end, std::string::npos) << "unterminated event in: " << body;
      if (end == std::string::npos) break;
      const std::string event = body.substr(at, end - at);
      at = end + 2;
      EXPECT_TRUE(event.starts_with("data: ")) << event;
      const std::string data = event.substr(6);
      EXPECT_FALSE(*done) << "data after [DONE]";
      if (data == "[DONE]") {
        *done = true;
      } else {
        out.push_back(Json::parse(data));
      }
    }
    return out;
  }

  // The engine run directly on the reference model.
  static std::vector<Completion> reference(std::vector<int32_t> prompt, uint64_t seed, int64_t n,
                                           int64_t max_tokens, double temperature,
                                           int64_t top_logprobs = 0) {
    EngineOptions options;
    options.max_num_seqs = 32;
    options.vocab_limit = tok_->vocab_size();
    Engine engine(*reference_model_, options);
    Request r;
    r.id = "ref";
    r.prompt = std::move(prompt);
    r.n = n;
    r.max_tokens = max_tokens;
    r.stop_ids = prompting_->stop_ids;  // what the server stops at
    r.sampling.temperature = temperature;
    r.seed = seed;
    r.top_logprobs = top_logprobs;
    std::vector<Completion> out(n);
    engine.add(r, {.on_finish = [&](Completion c) { out[c.index] = std::move(c); }});
    while (engine.has_work()) engine.step();
    return out;
  }

  static std::vector<int32_t> ids(const Json& j) { return j.get<std::vector<int32_t>>(); }

  static void expect_error(const Reply& r, int status, const std::string& needle,
                           const std::string& param = "") {
    EXPECT_EQ(r.status, status) << r.body;
    ASSERT_TRUE(r.json.is_object() && r.json.contains("error")) << r.body;
    const Json& e = r.json["error"];
    ASSERT_TRUE(e["message"].is_string()) << r.body;
    EXPECT_NE(e["message"].get<std::string>().find(needle), std::string::npos) << r.body;
    EXPECT_TRUE(e["type"].is_string()) << r.body;
    EXPECT_TRUE(e.contains("param") && e.contains("code")) << r.body;
    if (!param.empty()) EXPECT_EQ(e["param"], param) << r.body;
    EXPECT_EQ(get("/healthz").status, 200) << "the server stopped answering after: " << r.body;
  }

  static fs::path dir_;
  static model::Tokenizer* tok_;
  static Transformer *model_, *reference_model_;
  static Engine* engine_;
  static EngineLoop* loop_;
  static model::Prompting* prompting_;
  static OpenAIServer* server_;
  static int port_;
};
fs::path OpenAIServerTest::dir_;
model::Tokenizer* OpenAIServerTest::tok_ = nullptr;
Transformer* OpenAIServerTest::model_ = nullptr;
Transformer* OpenAIServerTest::reference_model_ = nullptr;
Engine* OpenAIServerTest::engine_ = nullptr;
EngineLoop* OpenAIServerTest::loop_ = nullptr;
model::Prompting* OpenAIServerTest::prompting_ = nullptr;
OpenAIServer* OpenAIServerTest::server_ = nullptr;
int OpenAIServerTest::port_ = 0;

TEST_F(OpenAIServerTest, ModelsHealthAndMetrics) {
  auto models = get("/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  EXPECT_EQ(models.json["object"], "list");
  ASSERT_EQ(models.json["data"].size(), 1u);
  EXPECT_EQ(models.json["data"][0]["id"], "tiny");
  EXPECT_EQ(models.json["data"][0]["max_model_len"], 2048);
  EXPECT_EQ(get("/v1/models/tiny").status, 200);
  EXPECT_EQ(get("/v1/models/other").status, 404);

  auto health = get("/healthz");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json, Json({{"status", "ok"}}));

  ASSERT_EQ(post("/v1/completions", Json{{"prompt", "hi"}, {"max_tokens", 3}}).status, 200);
  // A request is counted once its response is out, so the count may trail the client a little.
  const std::string counted = "trellis_http_requests_total{route=\"/v1/completions\",code=\"200\"}";
  Reply metrics;
  for (int i = 0; i < 200; ++i) {
    metrics = get("/metrics");
    if (metrics.body.find(counted) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(metrics.status, 200);
  EXPECT_TRUE(metrics.content_type.starts_with("text/plain")) << metrics.content_type;
  for (const char* line : {"# TYPE trellis_http_requests_total counter",
                           "trellis_http_requests_total{route=\"/v1/completions\",code=\"200\"}",
                           "trellis_generation_tokens_total ", "trellis_prompt_tokens_total ",
                           "trellis_requests_running ", "trellis_requests_waiting ",
                           "trellis_kv_cache_blocks_used ", "trellis_kv_cache_blocks_total "}) {
    EXPECT_NE(metrics.body.find(line), std::string::npos) << line << " missing in\n"
                                                          << metrics.body;
  }
}

TEST_F(OpenAIServerTest, CompletionEqualsTheEngineRunDirectly) {
  const Json body = {{"model", "tiny"},         {"prompt", "hello"}, {"max_tokens", 12},
                     {"temperature", 0.8},      {"seed", 11},        {"logprobs", 2},
                     {"return_token_ids", true}};
  auto r = post("/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const auto ref = reference(tok_->encode("hello"), 11, 1, 12, 0.8, 2)[0];
  const Json& j = r.json;
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("cmpl-"));
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_TRUE(j["created"].is_number_integer());
  ASSERT_EQ(j["choices"].size(), 1u);
  const Json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(ids(c["token_ids"]), ref.tokens);
  EXPECT_EQ(ids(c["prompt_token_ids"]), tok_->encode("hello"));
  EXPECT_EQ(c["text"], json_safe_text(tok_->decode(ref.tokens, /*skip_special=*/true)));
  EXPECT_EQ(c["finish_reason"], finish_name(ref.finish));
  const int64_t generated = static_cast<int64_t>(ref.tokens.size());
  EXPECT_EQ(j["usage"], Json({{"prompt_tokens", 5},
                              {"completion_tokens", generated},
                              {"total_tokens", 5 + generated}}));
  const Json& lp = c["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), ref.tokens.size());
  ASSERT_EQ(lp["tokens"].size(), ref.tokens.size());
  ASSERT_EQ(lp["top_logprobs"].size(), ref.tokens.size());
  ASSERT_EQ(lp["text_offset"].size(), ref.tokens.size());
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (size_t i = 0; i < ref.tokens.size(); ++i) {
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), ref.logprobs[i], 1e-5) << i;
    EXPECT_EQ(lp["tokens"][i], json_safe_text(tok_->token_bytes(ref.tokens[i])));
    EXPECT_LE(lp["top_logprobs"][i].size(), 2u);
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
  }

  // The same prompt as token ids gives the same completion.
  Json by_ids = body;
  by_ids["prompt"] = std::vector<int32_t>{104, 101, 108, 108, 111};
  auto r2 = post("/v1/completions", by_ids);
  ASSERT_EQ(r2.status, 200) << r2.body;
  EXPECT_EQ(r2.json["choices"][0]["token_ids"], c["token_ids"]);
  EXPECT_EQ(r2.json["choices"][0]["text"], c["text"]);
  EXPECT_EQ(r2.json["choices"][0]["logprobs"], c["logprobs"]);
}

TEST_F(OpenAIServerTest, GreedyLogprobsMatchTheFullForward) {
  auto r = post("/v1/completions", Json{{"prompt", "The sky is"},
                                        {"max_tokens", 8},
                                        {"temperature", 0},
                                        {"logprobs", 1},
                                        {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& c = r.json["choices"][0];
  const auto tokens = ids(c["token_ids"]);
  auto prompt = tok_->encode("The sky is");
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  seq.insert(seq.end(), tokens.begin(), tokens.end());
  torch::NoGradGuard no_grad;
  auto logits = reference_model_->forward(torch::tensor(seq)).logits.to(torch::kFloat64);
  // Greedy samples only ids the tokenizer knows (the engine's vocab limit).
  auto lp = torch::log_softmax(logits.narrow(1, 0, tok_->vocab_size()), -1);
  const int64_t P = static_cast<int64_t>(prompt.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto row = lp[P - 1 + static_cast<int64_t>(i)];
    EXPECT_EQ(row.argmax().item<int64_t>(), tokens[i]) << "token " << i << " is not greedy";
    const double served = c["logprobs"]["token_logprobs"][i].get<double>();
    EXPECT_NEAR(served, row[tokens[i]].item<double>(), 1e-4) << i;
    // The top alternative of a greedy token is the token itself.
    ASSERT_EQ(c["logprobs"]["top_logprobs"][i].size(), 1u);
    EXPECT_NEAR(c["logprobs"]["top_logprobs"][i].begin().value().get<double>(), served, 1e-6);
  }
}

TEST_F(OpenAIServerTest, NCompletionsUseConsecutiveSeeds) {
  auto r = post("/v1/completions", Json{{"prompt", "abc"},
                                        {"n", 3},
                                        {"max_tokens", 10},
                                        {"seed", 7},
                                        {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  const auto ref = reference(tok_->encode("abc"), 7, 3, 10, 1.0);
  ASSERT_EQ(r.json["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const Json& c = r.json["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(ids(c["token_ids"]), ref[i].tokens) << "choice " << i;
  }
  EXPECT_NE(r.json["choices"][0]["token_ids"], r.json["choices"][1]["token_ids"]);
  EXPECT_EQ(r.json["usage"]["prompt_tokens"], 3);  // the prompt counts once

  auto greedy = post("/v1/completions",
                     Json{{"prompt", "abc"}, {"n", 3}, {"max_tokens", 10}, {"temperature", 0}});
  ASSERT_EQ(greedy.status, 200) << greedy.body;
  for (int i = 1; i < 3; ++i)
    EXPECT_EQ(greedy.json["choices"][i]["text"], greedy.json["choices"][0]["text"]);

  // A batch of prompts: prompt k's choices are k*n .. k*n + n-1.
  auto batch = post("/v1/completions", Json{{"prompt", {"ab", "cd"}},
                                            {"n", 2},
                                            {"max_tokens", 4},
                                            {"seed", 3},
                                            {"return_token_ids", true}});
  ASSERT_EQ(batch.status, 200) << batch.body;
  ASSERT_EQ(batch.json["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const Json& c = batch.json["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(ids(c["prompt_token_ids"]), tok_->encode(i < 2 ? "ab" : "cd"));
    EXPECT_EQ(ids(c["token_ids"]),
              reference(tok_->encode(i < 2 ? "ab" : "cd"), 3, 2, 4, 1.0)[i % 2].tokens);
  }
  EXPECT_EQ(batch.json["usage"]["prompt_tokens"], 4);
}

TEST_F(OpenAIServerTest, ChatRendersTheTemplateAndReturnsLogprobs) {
  const Json messages = {{{"role", "system"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", "hi"}}};
  auto r = post("/v1/chat/completions", Json{{"model", "tiny"},
                                             {"messages", messages},
                                             {"max_tokens", 10},
                                             {"seed", 5},
                                             {"logprobs", true},
                                             {"top_logprobs", 2},
                                             {"return_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto chat = model::ChatTemplate::for_tokenizer(*tok_, "test");
  const std::vector<model::ChatMessage> conversation = {{"system", "Be brief."}, {"user", "hi"}};
  const auto prompt = chat.encode(*tok_, conversation);
  const auto ref = reference(prompt, 5, 1, 10, 1.0, 2)[0];
  const Json& j = r.json;
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["id"].get<std::string>().starts_with("chatcmpl-"));
  EXPECT_EQ(ids(j["prompt_token_ids"]), prompt);
  const Json& c = j["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(ids(c["token_ids"]), ref.tokens);
  EXPECT_EQ(c["message"]["content"], json_safe_text(tok_->decode(ref.tokens, true)));
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt.size());
  const Json& content = c["logprobs"]["content"];
  ASSERT_EQ(content.size(), ref.tokens.size());
  for (size_t i = 0; i < ref.tokens.size(); ++i) {
    EXPECT_NEAR(content[i]["logprob"].get<double>(), ref.logprobs[i], 1e-5);
    const std::string bytes = tok_->token_bytes(ref.tokens[i]);
    EXPECT_EQ(content[i]["bytes"].size(), bytes.size());
    EXPECT_EQ(content[i]["top_logprobs"].size(), 2u);
  }
}

TEST_F(OpenAIServerTest, StreamedDeltasAddUpToTheResponse) {
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const bool is_chat = std::string(path) == "/v1/chat/completions";
    Json body = {
        {"max_tokens", 14}, {"seed", 21}, {"n", 2}, {"logprobs", is_chat ? Json(true) : Json(1)}};
    if (is_chat) {
      body["messages"] = {{{"role", "user"}, {"content", "stream me"}}};
    } else {
      body["prompt"] = "stream me";
    }
    auto whole = post(path, body);
    ASSERT_EQ(whole.status, 200) << whole.body;
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    auto streamed = post(path, body);
    ASSERT_EQ(streamed.status, 200) << streamed.body;
    EXPECT_TRUE(streamed.content_type.starts_with("text/event-stream")) << streamed.content_type;
    bool done = false;
    auto chunks = events(streamed.body, &done);
    EXPECT_TRUE(done) << path;
    std::map<int, std::string> text;
    std::map<int, std::string> finish;
    std::map<int, size_t> logprob_tokens;
    Json usage;
    for (const auto& chunk : chunks) {
      EXPECT_EQ(chunk["id"], chunks.front()["id"]);
      EXPECT_EQ(chunk["object"], is_chat ? "chat.completion.chunk" : "text_completion");
      if (chunk.contains("usage")) {
        EXPECT_TRUE(chunk["choices"].empty());
        usage = chunk["usage"];
        continue;
      }
      ASSERT_EQ(chunk["choices"].size(), 1u);
      const Json& c = chunk["choices"][0];
      const int index = c["index"];
      EXPECT_TRUE(finish[index].empty()) << "a chunk after the finish of choice " << index;
      if (is_chat) {
        if (c["delta"].contains("content")) text[index] += c["delta"]["content"].get<std::string>();
      } else {
        text[index] += c["text"].get<std::string>();
      }
      if (!c["logprobs"].is_null()) {
        logprob_tokens[index] +=
            is_chat ? c["logprobs"]["content"].size() : c["logprobs"]["tokens"].size();
      }
      if (!c["finish_reason"].is_null()) finish[index] = c["finish_reason"];
    }
    ASSERT_EQ(text.size(), 2u) << path;
    for (int i = 0; i < 2; ++i) {
      const Json& c = whole.json["choices"][i];
      const Json& whole_text = is_chat ? c["message"]["content"] : c["text"];
      EXPECT_EQ(text[i], whole_text.get<std::string>()) << path << " choice " << i;
      EXPECT_EQ(finish[i], c["finish_reason"].get<std::string>()) << path;
      EXPECT_EQ(logprob_tokens[i],
                is_chat ? c["logprobs"]["content"].size() : c["logprobs"]["tokens"].size());
    }
    EXPECT_EQ(usage, whole.json["usage"]) << path;
  }
}

TEST_F(OpenAIServerTest, StopStringsCutTheText) {
  const Json base = {
      {"prompt", "stop here"}, {"max_tokens", 40}, {"seed", 9}, {"return_token_ids", true}};
  auto full = post("/v1/completions", base);
  ASSERT_EQ(full.status, 200) << full.body;
  const auto tokens = ids(full.json["choices"][0]["token_ids"]);
  const std::string raw = tok_->decode(tokens, true);
  // A printable character a few tokens in makes the stop string.
  size_t at = std::string::npos;
  for (size_t i = 3; i < raw.size() && at == std::string::npos; ++i) {
    if (raw[i] >= 'a' && raw[i] <= 'z') at = i;
  }
  ASSERT_NE(at, std::string::npos) << "no letter in the completion; pick another seed";
  const std::string stop(1, raw[at]);
  const std::string expected = raw.substr(0, raw.find(stop));

  Json body = base;
  body["stop"] = {stop, "never-appears"};
  auto cut = post("/v1/completions", body);
  ASSERT_EQ(cut.status, 200) << cut.body;
  const Json& c = cut.json["choices"][0];
  EXPECT_EQ(c["text"], json_safe_text(expected));
  EXPECT_EQ(c["finish_reason"], "stop");
  // Tokens end with the one that completed the stop string.
  const auto kept = ids(c["token_ids"]);
  ASSERT_FALSE(kept.empty());
  EXPECT_TRUE(std::equal(kept.begin(), kept.end(), tokens.begin()));
  EXPECT_NE(tok_->decode(kept, true).find(stop), std::string::npos);
  EXPECT_EQ(cut.json["usage"]["completion_tokens"], kept.size());

  body["stream"] = true;
  auto streamed = post("/v1/completions", body);
  bool done = false;
  std::string text;
  std::string finish;
  for (const auto& chunk : events(streamed.body, &done)) {
    text += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null())
      finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(text, c["text"].get<std::string>());
  EXPECT_EQ(finish, "stop");
}

TEST_F(OpenAIServerTest, ConcurrentClientsGetWhatTheyGetAlone) {
  constexpr int kClients = 8;
  auto body_of = [](int i) {
    Json body = {{"max_tokens", 12 + i}, {"seed", 100 + i}, {"return_token_ids", true}};
    if (i % 2 == 0) {
      body["prompt"] = "client " + std::to_string(i) + std::string(i, '.');
    } else {
      body["messages"] = {{{"role", "user"}, {"content", "client " + std::to_string(i)}}};
    }
    return body;
  };
  auto path_of = [](int i) { return i % 2 == 0 ? "/v1/completions" : "/v1/chat/completions"; };
  std::vector<Reply> together(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] { together[i] = post(path_of(i), body_of(i)); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_EQ(together[i].status, 200) << together[i].body;
    auto alone = post(path_of(i), body_of(i));
    ASSERT_EQ(alone.status, 200) << alone.body;
    EXPECT_EQ(together[i].json["choices"], alone.json["choices"]) << "client " << i;
  }
  EXPECT_GT(loop_->stats().steps, 0);
}

TEST_F(OpenAIServerTest, ClientThatHangsUpMidStreamIsAborted) {
  const int64_t before = loop_->stats().tokens_generated;
  const int64_t max_tokens = 1900;
  const std::string body =
      Json{{"prompt", "a long one"}, {"max_tokens", max_tokens}, {"stream", true}}.dump();
  {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string request =
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    std::string got;
    char buf[4096];
    while (got.find("data: ") == std::string::npos) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      ASSERT_GT(n, 0) << got;
      got.append(buf, static_cast<size_t>(n));
    }
    EXPECT_NE(got.find("200"), std::string::npos) << got;
    ::close(fd);
  }
  // The server notices at its next write and aborts the request long before max_tokens.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto metrics = get("/metrics").body;
    if (metrics.find("trellis_requests_in_flight 0") != std::string::npos &&
        loop_->stats().running == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(loop_->stats().running, 0);
  EXPECT_LT(loop_->stats().tokens_generated - before, max_tokens);
  EXPECT_EQ(get("/healthz").status, 200);
}

TEST_F(OpenAIServerTest, BadRequestsGetJsonErrorsAndTheServerKeepsServing) {
  const std::string c = "/v1/completions", chat = "/v1/chat/completions";
  expect_error(post(c, std::string("{\"prompt\": \"hi\", ")), 400, "invalid JSON");
  // A number beyond a double, and nesting without end, are refused as malformed (found by
  // fuzz/requests_fuzz.cpp: the first was a 500 and an error in the log).
  expect_error(post(c, std::string("{\"prompt\": \"hi\", \"max_tokens\": 8e8848}")), 400,
               "too large for a double");
  expect_error(post(c, "{\"prompt\": " + std::string(20000, '[') + std::string(20000, ']') + "}"),
               400, "nested deeper");
  expect_error(post(c, std::string("[1, 2]")), 400, "must be a JSON object");
  auto unknown = post(c, Json{{"model", "gpt-9"}, {"prompt", "hi"}});
  expect_error(unknown, 404, "gpt-9", "model");
  EXPECT_EQ(unknown.json["error"]["code"], "model_not_found");
  expect_error(post(c, Json{{"prompt", "hi"}, {"max_tokens", -5}}), 400, "max_tokens",
               "max_tokens");
  expect_error(post(c, Json{{"prompt", "hi"}, {"max_tokens", 0}}), 400, "at least 1", "max_tokens");
  expect_error(post(c, Json{{"prompt", std::vector<int32_t>(2100, 97)}, {"max_tokens", 4}}), 400,
               "maximum context length is 2048", "prompt");
  expect_error(post(c, Json{{"prompt", std::string(2040, 'x')}, {"max_tokens", 100}}), 400,
               "maximum context length", "prompt");
  expect_error(
      post(chat, Json{{"messages", {{{"role", "user"}, {"content", std::string(2100, 'x')}}}}}),
      400, "maximum context length", "messages");
  auto big = post(c, Json{{"prompt", std::string(kMaxBody + 10, 'x')}});
  expect_error(big, 413, "more than this route takes");
  expect_error(post(c, Json{{"prompt", "hi"}, {"n", "two"}}), 400, "integer", "n");
  expect_error(post(c, Json{{"prompt", "hi"}, {"n", 0}}), 400, "at least 1", "n");
  // Refused before anything is sized by it (a billion choices would allocate a billion slots).
  expect_error(post(c, Json{{"prompt", "hi"}, {"n", 1000000000}}), 400, "at most 128", "n");
  expect_error(post(c, Json{{"prompt", "hi"}, {"temperature", -1}}), 400, "temperature",
               "temperature");
  expect_error(post(c, Json{{"prompt", "hi"}, {"top_p", 0}}), 400, "top_p", "top_p");
  expect_error(post(c, Json{{"prompt", "hi"}, {"logprobs", 50}}), 400, "logprobs", "logprobs");
  expect_error(post(c, Json{{"prompt", "hi"}, {"stop", 5}}), 400, "stop", "stop");
  expect_error(post(c, Json{{"prompt", {1, -2}}}), 400, "token id", "prompt");
  expect_error(post(c, Json{{"prompt", {1, 100000}}}), 400, "outside the vocabulary", "prompt");
  expect_error(post(c, Json{{"max_tokens", 3}}), 400, "prompt", "prompt");
  expect_error(post(chat, Json{{"max_tokens", 3}}), 400, "messages", "messages");
  expect_error(post(chat, Json{{"messages", {{{"role", "tool"}, {"content", "x"}}}}}), 400, "role",
               "messages[0].role");
  expect_error(post(chat, Json{{"messages", Json::array()}}), 400, "non-empty", "messages");
  expect_error(post(c, Json{{"prompt", "hi"}, {"presence_penalty", 0.5}}), 400, "not supported",
               "presence_penalty");
  expect_error(get("/v1/nothing"), 404, "no route");
  expect_error(get(c), 405, "use POST");
  expect_error(post("/healthz", Json::object()), 405, "use GET");
  // And it still serves.
  auto ok = post(c, Json{{"prompt", "still there?"}, {"max_tokens", 2}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

}  // namespace
}  // namespace trellis::engine
