// The fixture of the orchestrator API tests: a temporary data directory per test, the options of
// a small run, an in-process server on a free port, and the error text of a refused request.
#pragma once

#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/error.h"
#include "common/hashing.h"
#include "common/identity.h"
#include "common/json.h"
#include "common/request_signing.h"
#include "orchestrator/api.h"
#include "orchestrator/client.h"

namespace trellis::orchestrator {

inline const std::string kTrainerToken = "trainer-token-of-the-tests-0123456789";
inline const std::string kValidatorToken = "validator-token-of-the-tests-0123456789";
inline const std::string kRelayToken = "relay-token-of-the-tests-0123456789-abc";

// The headers that sign `node`'s request in run "run-test" at `timestamp` (raw HTTP, as an
// attacker sends).
inline httplib::Headers signed_headers(const Identity& node, const std::string& method,
                                       const std::string& target, const std::string& body,
                                       int64_t timestamp = std::time(nullptr)) {
  httplib::Headers h;
  for (auto& [k, v] : sign_request(node, "run-test", method, target, sha256_hex(body), timestamp))
    h.emplace(k, v);
  return h;
}

class ApiFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           (std::string("trellis_api_") + info->test_suite_name() + "_" + info->name() + "_" +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Without validators: an upload that passes the orchestrator's checks is accepted at once
  // (validation_test.cpp turns them on).
  ApiOptions options() const {
    ApiOptions o;
    o.port = 0;
    o.data_dir = dir_;
    o.run_id = "run-test";
    o.steps = 4;
    o.batch_size = 8;
    o.group_size = 4;
    o.async_level = 1;
    o.max_upload_bytes = 1 << 20;
    o.pool.validation = false;
    o.trainer_token = kTrainerToken;
    o.validator_token = kValidatorToken;
    o.relay_token = kRelayToken;
    return o;
  }

  // (Re)starts the server with `o`; returns its port.
  int start_server(const ApiOptions& o) {
    server_.reset();
    server_ = std::make_unique<Server>(o);
    const int port = server_->start();
    EXPECT_GT(port, 0);
    return port;
  }

  // POST /work for `node` holding policy version `held`, in files of at most `groups` groups: the
  // work it is given (a test failure when it is told to wait).
  // POST /work for `node`, registering it first when the orchestrator does not know it (work is
  // for registered nodes only).
  static WorkAnswer ask(Client& client, const Identity& node, int64_t groups, int64_t held) {
    try {
      return client.request_work(node, held, groups);
    } catch (const Error& e) {
      if (std::string(e.what()).find("is not registered") == std::string::npos) throw;
    }
    client.register_node(node);
    return client.request_work(node, held, groups);
  }

  static Assignment work(Client& client, const Identity& node, int64_t groups = 2,
                         int64_t held = 0) {
    const WorkAnswer a = ask(client, node, groups, held);
    EXPECT_TRUE(a.work) << "no work for " << node.address() << ": " << a.wait_reason;
    return a.work.value_or(Assignment{});
  }
  // Why `node` is told to wait ("" when it is given work instead: a test failure).
  static std::string wait_reason(Client& client, const Identity& node, int64_t groups = 2,
                                 int64_t held = 0) {
    const WorkAnswer a = ask(client, node, groups, held);
    EXPECT_FALSE(a.work) << "work for " << node.address() << ": step " << a.work->step;
    return a.wait_reason;
  }

  static std::string error_text(const httplib::Result& res) {
    if (!res) return "no response";
    try {
      return Json::parse(res->body).at("error").get<std::string>();
    } catch (...) {
      return "not a JSON error: " + res->body;
    }
  }

  std::filesystem::path dir_;
  std::unique_ptr<Server> server_;
};

}  // namespace trellis::orchestrator
