// orchestrator::Client against a hostile orchestrator: a node may point at any URL, so every
// answer is read as an attacker's input. A real HTTP server on loopback sends what an attacker
// would: numbers no field holds, wrong types and shapes, and answers of any size.
#include <httplib.h>

#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "common/json.h"
#include "error_of.h"
#include "orchestrator/client.h"

namespace trellis::test {
namespace {

using orchestrator::Client;

// A GET /status answer an honest orchestrator could send.
Json honest_status() {
  return Json::parse(R"({
    "run_id": "run-1", "step": 3, "policy_version": 2, "trainer_public_key": "",
    "steps": 10, "async_level": 2, "batch_size": 8, "group_size": 4,
    "assigned": 1, "pending": 0, "validating": 0, "accepted": 5, "rejected": 0, "dropped": 0,
    "samples": {"generated": 20, "validating": 0, "accepted": 20, "rejected": 0, "dropped": 0},
    "max_backlog_samples": 64, "validators_behind": false,
    "judged_samples_per_s": 1.5, "rollout_tokens_per_s": 100.0, "done": false})");
}

// An orchestrator on loopback whose every answer the test sets: `answer(path)` is called for each
// request with the request's path.
class HostileOrchestrator {
 public:
  using Answer = std::function<void(const httplib::Request&, httplib::Response&)>;

  explicit HostileOrchestrator(Answer answer) : answer_(std::move(answer)) {
    const auto handle = [this](const httplib::Request& req, httplib::Response& res) {
      answer_(req, res);
    };
    server_.Get(".*", handle);
    server_.Post(".*", handle);
    server_.set_keep_alive_timeout(1);
    port_ = server_.bind_to_any_port("127.0.0.1");
    serving_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~HostileOrchestrator() {
    server_.stop();
    serving_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  Answer answer_;
  httplib::Server server_;
  int port_ = 0;
  std::thread serving_;
};

// The error of client.status() when /status answers `body`.
std::string status_error(const Json& body) {
  HostileOrchestrator server([&](const httplib::Request&, httplib::Response& res) {
    res.set_content(body.dump(), "application/json");
  });
  Client client(server.url(), "", 10);
  return error_of([&] { client.status(); });
}

TEST(OrchestratorClient, AnHonestStatusReadsBack) {
  HostileOrchestrator server([](const httplib::Request&, httplib::Response& res) {
    res.set_content(honest_status().dump(), "application/json");
  });
  Client client(server.url(), "", 10);
  const orchestrator::Status s = client.status();
  EXPECT_EQ(s.run_id, "run-1");
  EXPECT_EQ(s.step, 3);
  EXPECT_EQ(s.accepted_samples, 20);
  EXPECT_DOUBLE_EQ(s.rollout_tokens_per_s, 100.0);
}

// nlohmann's own conversion of 1e41 to int64_t is undefined behaviour, and 2.5 became 2.
TEST(OrchestratorClient, NumbersNoFieldHoldsAreRefusedByName) {
  for (const Json& bad : {Json(1e41), Json(-1e300), Json(2.5), Json(18446744073709551615ull)}) {
    Json body = honest_status();
    body["step"] = bad;
    const std::string error = status_error(body);
    EXPECT_NE(error.find("field 'step' = " + bad.dump() + " is not an integer in range"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("/status"), std::string::npos) << error;
  }
  Json nested = honest_status();
  nested["samples"]["accepted"] = 1e41;
  EXPECT_NE(status_error(nested).find("field 'accepted' = 1e+41"), std::string::npos);
  // An integral float is the number it names.
  Json integral = honest_status();
  integral["step"] = 4.0;
  EXPECT_EQ(status_error(integral), "");
}

TEST(OrchestratorClient, WrongTypesAndShapesAreRefusedByName) {
  Json text = honest_status();
  text["step"] = "3";
  EXPECT_NE(status_error(text).find("field 'step' has the wrong type (string)"), std::string::npos);
  Json missing = honest_status();
  missing.erase("done");
  EXPECT_NE(status_error(missing).find("missing field 'done'"), std::string::npos);
  Json list = honest_status();
  list["samples"] = Json::array({1, 2});
  EXPECT_NE(status_error(list).find("field 'samples' must be an object, not array"),
            std::string::npos);
  EXPECT_NE(status_error(Json::array()).find("missing field 'run_id'"), std::string::npos);

  // Lists: GET /tasks, GET /steps/<s>/accepted, POST /validation/claim.
  Json answer;
  HostileOrchestrator server([&](const httplib::Request&, httplib::Response& res) {
    res.set_content(answer.dump(), "application/json");
  });
  Client client(server.url(), "", 10);
  answer = {{"tasks", Json{{"id", 1}}}};
  EXPECT_NE(error_of([&] { client.tasks(); }).find("field 'tasks' must be an array, not object"),
            std::string::npos);
  answer = {{"tasks", Json::array({7})}};
  EXPECT_NE(error_of([&] { client.tasks(); }).find("field 'tasks': element 0 is not an object"),
            std::string::npos);
  answer = {{"files", Json::array({Json{{"name", "a.parquet"},
                                        {"node_address", "n"},
                                        {"submission", 0},
                                        {"sha256", "00"},
                                        {"size", 1e41},
                                        {"samples", 4},
                                        {"signal_samples", 4}}})}};
  EXPECT_NE(error_of([&] { client.accepted(0); }).find("field 'size' = 1e+41"), std::string::npos);
  answer = {{"policy_version", 1}, {"async_level", 2}, {"submission", "steal me"}};
  const std::string claim_error = error_of([&] { client.claim_validation("v"); });
  EXPECT_NE(claim_error.find("field 'submission' must be an object, not string"), std::string::npos)
      << claim_error;
  EXPECT_NE(claim_error.find("/validation/claim"), std::string::npos) << claim_error;
}

// Without the bound, the client held the whole answer: a status whose run_id is 70 MiB read back.
TEST(OrchestratorClient, AnAnswerLargerThanItsBoundIsCutOffWhileReading) {
  const size_t kHuge = size_t{70} << 20;
  HostileOrchestrator server([&](const httplib::Request&, httplib::Response& res) {
    Json body = honest_status();
    body["run_id"] = std::string(kHuge, 'x');
    res.set_content(body.dump(), "application/json");
  });
  Client client(server.url(), "", 30);
  const std::string error = error_of([&] { client.status(); });
  EXPECT_NE(error.find("the answer is larger than the 67108864 bytes it may hold"),
            std::string::npos)
      << error.substr(0, 500);
}

// A refusal's reason goes into an error message, and from there into logs: it is cut short.
TEST(OrchestratorClient, ARefusalsReasonIsCutShort) {
  HostileOrchestrator server([](const httplib::Request&, httplib::Response& res) {
    res.status = 403;
    res.set_content(Json{{"error", std::string(1 << 20, 'y')}, {"code", "evicted"}}.dump(),
                    "application/json");
  });
  Client client(server.url(), "", 10);
  const std::string error = error_of([&] { client.tasks(); });
  EXPECT_NE(error.find("request failed: yyy"), std::string::npos) << error.substr(0, 200);
  EXPECT_LT(error.size(), 1000u);
}

// A file's download holds at most the size its claim (or the accepted list) declared.
TEST(OrchestratorClient, ADownloadLargerThanItsDeclaredSizeIsRefused) {
  std::string file(1000, 'f');
  HostileOrchestrator server([&](const httplib::Request&, httplib::Response& res) {
    res.set_content(file, "application/octet-stream");
  });
  Client client(server.url(), "", 10);
  orchestrator::ValidationClaim claim;
  claim.file = "/validation/files/step_0/n-0.parquet";
  claim.size = 1000;
  EXPECT_EQ(client.download_for_validation(claim), file);
  claim.size = 999;
  EXPECT_NE(error_of([&] {
              client.download_for_validation(claim);
            }).find("larger than the 999 bytes it may hold"),
            std::string::npos);
  claim.size = -5;
  EXPECT_NE(error_of([&] {
              client.download_for_validation(claim);
            }).find("larger than the 0 bytes it may hold"),
            std::string::npos);

  orchestrator::AcceptedFile accepted;
  accepted.name = "n-0.parquet";
  accepted.size = 1000;
  EXPECT_EQ(client.download(0, accepted), file);
  accepted.size = 10;
  EXPECT_NE(error_of([&] { client.download(0, accepted); }).find("larger than the 10 bytes"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::test
