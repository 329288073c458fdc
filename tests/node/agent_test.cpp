// The node agent's endpoint against a stranger (a real `trellis node` on loopback): an invite
// that is malformed, for another node, from a pool the node does not serve, forged, expired or
// replayed is refused with the reason; bodies over the bound, chunked or compressed are refused
// before they are read; a task's log goes only to a request signed by one of the node's pools.
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "cli/trellis_process.h"
#include "common/files.h"
#include "common/hashing.h"
#include "common/identity.h"
#include "common/request_signing.h"
#include "orchestrator/invite.h"

namespace trellis::node {
namespace {

namespace fs = std::filesystem;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class Agent : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::fresh_dir("node_agent");
    // Discovery and the orchestrator are unreachable: the agent keeps trying, and serves.
    agent_ = std::make_unique<test::TrellisProcess>(std::vector<std::string>{
        "node", "--run-dir", dir_.string(), "--set", "node.discovery_url=http://127.0.0.1:9",
        "--set", "node.pools=[\"" + pool_.address() + "\"]"});
    const fs::path url_file = dir_ / "nodes" / "node" / "node.url";
    for (int i = 0; i < 600 && !fs::exists(url_file); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(fs::exists(url_file)) << agent_->log();
    url_ = read_file(url_file);
    url_.pop_back();
    http_ = std::make_unique<httplib::Client>(url_);
    const auto status = http_->Get("/status");
    ASSERT_TRUE(status && status->status == 200);
    address_ = Json::parse(status->body)["address"];
  }
  void TearDown() override {
    agent_.reset();
    fs::remove_all(dir_);
  }

  orchestrator::Invite invite(const Identity& issuer, int64_t ttl_s = 60) {
    return orchestrator::make_invite(issuer, "run-1", "math", address_, "http://127.0.0.1:9",
                                     unix_now(), ttl_s);
  }
  // The answer to POSTing `invite`: status and error.
  std::pair<int, std::string> offer(const orchestrator::Invite& i) {
    return post(to_json(i).dump());
  }
  std::pair<int, std::string> post(const std::string& body) {
    const auto res = http_->Post("/invite", body, "application/json");
    if (!res) return {0, "no answer"};
    return {res->status, res->body};
  }

  Identity pool_ = Identity::generate();
  fs::path dir_;
  std::string url_, address_;
  std::unique_ptr<test::TrellisProcess> agent_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(Agent, RefusesEveryInviteItMustNotTake) {
  EXPECT_EQ(post("{").first, 400);
  EXPECT_EQ(post(R"({"pool": "x"})").first, 400);
  orchestrator::Invite other = invite(pool_);
  other.node = std::string(64, 'a');
  other.signature = pool_.sign_hex(orchestrator::invite_message(other));
  auto [status, body] = offer(other);
  EXPECT_EQ(status, 403);
  EXPECT_CONTAINS(body, "the invite is for node " + std::string(64, 'a'));
  std::tie(status, body) = offer(invite(Identity::generate()));
  EXPECT_EQ(status, 403);
  EXPECT_CONTAINS(body, "which is not a pool this node serves");
  orchestrator::Invite forged = invite(pool_);
  forged.orchestrator_url = "http://attacker.example:80";  // where the node would register
  std::tie(status, body) = offer(forged);
  EXPECT_EQ(status, 403);
  EXPECT_CONTAINS(body, "signature is not");
  std::tie(status, body) = offer(invite(pool_, -10));
  EXPECT_EQ(status, 403);
  EXPECT_CONTAINS(body, "expired");
  const orchestrator::Invite good = invite(pool_);
  std::tie(status, body) = offer(good);
  EXPECT_EQ(status, 200) << body;
  std::tie(status, body) = offer(good);
  EXPECT_EQ(status, 403);
  EXPECT_CONTAINS(body, "accepted before (a replay)");
  // It tried to register at the invite's (unreachable) orchestrator and said so.
  for (int i = 0; i < 100 && agent_->log().find("joining pool run-1") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_CONTAINS(agent_->log(), "joining pool run-1 at http://127.0.0.1:9 failed");
}

TEST_F(Agent, RefusesBodiesBeforeReadingThem) {
  EXPECT_EQ(post(std::string(17 << 10, ' ')).first, 413);
  httplib::Headers chunked = {{"Transfer-Encoding", "chunked"}};
  const auto res = http_->Post("/invite", chunked, "5\r\nhello\r\n0\r\n\r\n", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 411);
  const auto gz = http_->Post("/invite", {{"Content-Encoding", "gzip"}}, "x", "application/json");
  ASSERT_TRUE(gz);
  EXPECT_EQ(gz->status, 415);
}

TEST_F(Agent, GivesItsLogsOnlyToItsPools) {
  const auto signed_get = [&](const Identity& who) {
    httplib::Headers h;
    for (auto& [k, v] :
         sign_request(who, address_, "GET", "/logs?lines=5", sha256_hex(""), unix_now()))
      h.emplace(k, v);
    return http_->Get("/logs?lines=5", h);
  };
  auto res = http_->Get("/logs");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = signed_get(Identity::generate());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  res = signed_get(pool_);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;  // no task yet: an empty log
}

}  // namespace
}  // namespace trellis::node
