// `trellis serve` as a user runs it: the real binary on a free port (--port 0, the port read from
// its start line), talked to over HTTP like any OpenAI client. Its greedy completions match
// `trellis generate` (and `generate --chat` for chat), bad requests get JSON errors, streams end
// with [DONE], and SIGTERM ends the request in flight and exits 0.
#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "cli/trellis_process.h"
#include "common/json.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A `trellis serve` child process that also reads its port from the start line.
class ServeProcess : public TrellisProcess {
 public:
  using TrellisProcess::TrellisProcess;

  // The port from "serving NAME on http://HOST:PORT", or -1 if it never came.
  int wait_for_port(std::chrono::seconds timeout) {
    static const std::regex line(R"(serving (\S+) on http://127\.0\.0\.1:(\d+) )");
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, line)) {
        name_ = m[1];
        return std::stoi(m[2]);
      }
      if (exited()) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

TEST(Serve, AnOpenAIClientSessionEndToEnd) {
  const auto dir = fresh_dir("serve_model");
  auto init = run_trellis("model init --arch qwen3 --preset tiny --seed 2 --out " + dir.string());
  ASSERT_EQ(init.status, 0) << init.output;

  ServeProcess serve({"serve", "--model", dir.string(), "--port", "0", "--max-num-seqs", "8",
                      "--kv-cache-mib", "64", "--dtype", "fp32"});
  const int port = serve.wait_for_port(std::chrono::seconds(120));
  ASSERT_GT(port, 0) << serve.log();
  EXPECT_EQ(serve.name(), dir.filename().string());
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);

  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models) << serve.log();
  EXPECT_EQ(Json::parse(models->body)["data"][0]["id"], serve.name());

  // Greedy completions equal what `trellis generate` prints for the same prompt.
  auto generated = run_trellis("generate --model " + dir.string() +
                                   " --prompt hello --max-tokens 6 --temperature 0 --dtype fp32",
                               /*with_stderr=*/false);
  ASSERT_EQ(generated.status, 0) << generated.output;
  ASSERT_TRUE(generated.output.starts_with("hello")) << generated.output;
  const std::string expected = generated.output.substr(5, generated.output.size() - 6);
  auto completion = cli.Post(
      "/v1/completions",
      Json{{"model", serve.name()}, {"prompt", "hello"}, {"max_tokens", 6}, {"temperature", 0}}
          .dump(),
      "application/json");
  ASSERT_TRUE(completion);
  ASSERT_EQ(completion->status, 200) << completion->body;
  const Json c = Json::parse(completion->body);
  EXPECT_EQ(c["choices"][0]["text"], json_safe_text(expected));
  EXPECT_EQ(c["usage"]["prompt_tokens"], 5);

  // Chat equals `trellis generate --chat`: the prompt is one user message in the ChatML template.
  auto chat_generated = run_trellis("generate --model " + dir.string() +
                                        " --chat --prompt hi --max-tokens 6 --temperature 0 "
                                        "--dtype fp32",
                                    /*with_stderr=*/false);
  ASSERT_EQ(chat_generated.status, 0) << chat_generated.output;
  auto chat = cli.Post("/v1/chat/completions",
                       Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                            {"max_tokens", 6},
                            {"temperature", 0},
                            {"stream", true}}
                           .dump(),
                       "application/json");
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  std::string streamed;
  for (size_t at = 0, end; (end = chat->body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string data = chat->body.substr(at + 6, end - at - 6);
    if (data == "[DONE]") break;
    const Json chunk = Json::parse(data);
    const Json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("content")) streamed += delta["content"].get<std::string>();
  }
  EXPECT_TRUE(chat->body.ends_with("data: [DONE]\n\n")) << chat->body;
  const std::string chat_expected =
      chat_generated.output.substr(0, chat_generated.output.size() - 1);
  EXPECT_EQ(streamed, json_safe_text(chat_expected));

  // A bad request gets a JSON error, and the server goes on.
  auto bad = cli.Post("/v1/completions", "{\"prompt\": ", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_TRUE(Json::parse(bad->body)["error"]["message"].is_string()) << bad->body;
  auto health = cli.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  // SIGTERM while a long request runs: the request ends with an error and the server exits 0.
  // Greedy, so that it runs all 2000 tokens (a sampled reply of this random model soon hits EOS
  // and would finish before the signal).
  std::optional<int> in_flight_status;
  std::thread client([&] {
    httplib::Client long_cli("127.0.0.1", port);
    long_cli.set_read_timeout(120, 0);
    auto r = long_cli.Post(
        "/v1/completions",
        Json{{"prompt", "a long one"}, {"max_tokens", 2000}, {"temperature", 0}}.dump(),
        "application/json");
    in_flight_status = r ? r->status : -1;
  });
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    auto m = cli.Get("/metrics");
    if (m && m->body.find("trellis_requests_in_flight 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(serve.stop(SIGTERM, std::chrono::seconds(60)), 0) << serve.log();
  client.join();
  ASSERT_TRUE(in_flight_status.has_value());
  // 503 if the answer went out before the socket closed; -1 (no answer) also means it ended.
  EXPECT_TRUE(*in_flight_status == 503 || *in_flight_status == -1) << *in_flight_status;
  EXPECT_NE(serve.log().find("shutting down"), std::string::npos) << serve.log();
  fs::remove_all(dir);
}

TEST(Serve, RefusesAPortInUse) {
  const auto dir = fresh_dir("serve_busy");
  ASSERT_EQ(run_trellis("model init --arch llama --preset tiny --out " + dir.string()).status, 0);
  ServeProcess first({"serve", "--model", dir.string(), "--port", "0", "--kv-cache-mib", "16"});
  const int port = first.wait_for_port(std::chrono::seconds(120));
  ASSERT_GT(port, 0) << first.log();
  auto second = run_trellis("serve --model " + dir.string() + " --kv-cache-mib 16 --port " +
                            std::to_string(port));
  EXPECT_EQ(second.status, 1) << second.output;
  EXPECT_NE(second.output.find("error: cannot listen"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find(std::to_string(port)), std::string::npos) << second.output;
  EXPECT_EQ(first.stop(SIGINT, std::chrono::seconds(60)), 0) << first.log();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trellis::test
