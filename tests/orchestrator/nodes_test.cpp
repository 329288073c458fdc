// The node registry through the orchestrator's HTTP API, in-process on a free port: a node that
// signs its registration joins the relays' IP allowlist with the IP the orchestrator saw (second
// nodes connect from 127.0.0.2, so the IPs differ); forged, stale, replayed and malformed
// registrations are refused and change nothing; an eviction needs the trainer's token, takes the
// node's IP off the allowlist at once and bumps its revision, and the evicted node can neither
// register again nor upload; all of it, and the trainer's public key, survives a restart.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "common/hashing.h"
#include "common/json.h"
#include "common/request_signing.h"
#include "error_of.h"
#include "orchestrator/api.h"
#include "orchestrator/api_fixture.h"
#include "orchestrator/client.h"
#include "orchestrator/credentials.h"
#include "orchestrator/registration_keeper.h"
#include "orchestrator/state.h"
#include "rollout_fixtures.h"

namespace trellis::orchestrator {
namespace {

namespace fs = std::filesystem;
using Strings = std::vector<std::string>;

#define EXPECT_CONTAINS(haystack, needle)                                                       \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "missing '" << (needle) << "' in:\n" \
                                                        << (haystack)

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A request body with the headers that sign it.
struct Signed {
  std::string body;
  httplib::Headers headers;
};

// `signer`'s signed request to `method` `path` with `body` at `timestamp` (run "run-test").
Signed sign(const Identity& signer, const std::string& method, const std::string& path,
            const std::string& body, int64_t timestamp) {
  return {body, signed_headers(signer, method, path, body, timestamp)};
}

// A registration of `node` signed by `signer` at `timestamp`.
Signed registration(const Identity& node, int64_t timestamp, const Identity& signer) {
  return sign(signer, "POST", "/nodes", Json{{"address", node.address()}}.dump(), timestamp);
}
Signed registration(const Identity& node, int64_t timestamp) {
  return registration(node, timestamp, node);
}

class NodeRegistry : public ApiFixture {
 protected:
  Client& start(const ApiOptions& o) {
    port_ = start_server(o);
    trainer_ = std::make_unique<Client>(server_->url(), o.trainer_token, 10);
    return *trainer_;
  }
  Client& start() { return start(options()); }

  // Raw HTTP from `source_ip` (a loopback address: 127.0.0.1, 127.0.0.2, ...).
  httplib::Client http_from(const std::string& source_ip) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_socket_options([source_ip](socket_t sock) {
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = 0;
      ::inet_pton(AF_INET, source_ip.c_str(), &addr.sin_addr);
      ::bind(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    });
    return c;
  }
  httplib::Result post(const std::string& path, const std::string& body,
                       const std::string& source_ip = "127.0.0.1",
                       const httplib::Headers& headers = {}) const {
    auto c = http_from(source_ip);
    return c.Post(path.c_str(), headers, body, "application/json");
  }
  httplib::Result post(const std::string& path, const Signed& request,
                       const std::string& source_ip = "127.0.0.1",
                       httplib::Headers headers = {}) const {
    headers.insert(request.headers.begin(), request.headers.end());
    return post(path, request.body, source_ip, headers);
  }

  // The state GET /nodes gives `who` (the trainer's view).
  std::string state_name(const Identity& who) const {
    auto res = http_from("127.0.0.1").Get("/nodes", {{"Authorization", "Bearer " + kTrainerToken}});
    EXPECT_TRUE(res && res->status == 200) << (res ? res->body : "no answer");
    if (!res) return "no answer";
    const Json listed = parse_json(res->body, "nodes");
    for (const Json& n : listed["nodes"])
      if (n["address"] == who.address()) return n["state"].get<std::string>();
    return "absent from " + res->body;
  }

  std::string metrics() const {
    auto res = http_from("127.0.0.1").Get("/metrics");
    return res ? res->body : "";
  }

  // POST /submissions for a one-group file of `node`; the answer.
  httplib::Result ask_upload(const Identity& node, int32_t submission) const {
    const std::string bytes =
        test::signed_file({"run-test", node.address(), 0, submission, 0}, {{0, 1}}, node);
    const Json req{{"node_address", node.address()},
                   {"step", 0},
                   {"submission", submission},
                   {"sha256", sha256_hex(bytes)},
                   {"size", bytes.size()}};
    return post("/submissions", sign(node, "POST", "/submissions", req.dump(), unix_now()));
  }

  int port_ = 0;
  Identity worker_ = Identity::generate();
  std::unique_ptr<Client> trainer_;
};

TEST_F(NodeRegistry, ARegisteredNodeJoinsTheAllowlistWithTheIpTheOrchestratorSaw) {
  Client& client = start();
  EXPECT_EQ(client.allowlist().revision, 0);
  EXPECT_TRUE(client.allowlist().ips.empty());

  client.register_node(worker_);
  Allowlist list = client.allowlist();
  EXPECT_EQ(list.revision, 1);
  EXPECT_EQ(list.ips, Strings{"127.0.0.1"});
  auto nodes = client.nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].address, worker_.address());
  EXPECT_EQ(nodes[0].ip, "127.0.0.1");
  EXPECT_GT(nodes[0].registered_at, 0);
  EXPECT_FALSE(nodes[0].evicted);
  // Node IPs are for operators: listing them needs the trainer's token.
  EXPECT_CONTAINS(test::error_of([&] { Client(server_->url(), "", 10).nodes(); }),
                  "GET /nodes needs the trainer's bearer token");

  // Registering again is idempotent: the same set, the same revision.
  client.register_node(worker_);
  EXPECT_EQ(client.allowlist().revision, 1);
  EXPECT_EQ(client.nodes().size(), 1u);

  // A second node from another address; a forwarded-for header is not believed.
  const Identity other = Identity::generate();
  auto res = post("/nodes", registration(other, unix_now()), "127.0.0.2",
                  {{"X-Forwarded-For", "10.9.9.9"}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const Json answer = Json::parse(res->body);
  EXPECT_EQ(answer.at("address"), other.address());
  EXPECT_EQ(answer.at("ip"), "127.0.0.2");
  list = client.allowlist();
  EXPECT_EQ(list.revision, 2);
  EXPECT_EQ(list.ips, (Strings{"127.0.0.1", "127.0.0.2"}));

  // The first node's IP changes: it moves (a later timestamp, signed afresh).
  res = post("/nodes", registration(worker_, unix_now() + 1), "127.0.0.2");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  list = client.allowlist();
  EXPECT_EQ(list.revision, 3);
  EXPECT_EQ(list.ips, Strings{"127.0.0.2"});

  // The raw answer, as a relay polling it reads it.
  auto raw = http_from("127.0.0.1").Get("/allowlist", {{"Authorization", "Bearer " + kRelayToken}});
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->status, 200);
  EXPECT_EQ(Json::parse(raw->body), (Json{{"revision", 3}, {"ips", {"127.0.0.2"}}}));
  const std::string m = metrics();
  EXPECT_CONTAINS(m, "trellis_orchestrator_nodes{state=\"registered\"} 2\n");
  EXPECT_CONTAINS(m, "trellis_orchestrator_nodes{state=\"evicted\"} 0\n");
  EXPECT_CONTAINS(m, "trellis_orchestrator_allowlist_revision 3\n");
}

TEST_F(NodeRegistry, ForgedStaleReplayedAndMalformedRegistrationsAreRefused) {
  Client& client = start();
  const Identity impostor = Identity::generate();
  const int64_t now = unix_now();
  std::string up = worker_.address();
  for (char& ch : up) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  Signed altered = registration(worker_, now);
  altered.body.insert(altered.body.size() - 1, " ");  // a byte added after signing
  Signed short_sig = registration(worker_, now);
  short_sig.headers.find(kSignatureHeader)->second = "abcd";
  const auto body_of = [](const Identity& node) {
    return Json{{"address", node.address()}}.dump();
  };
  for (const auto& [request, status, message] : std::vector<std::tuple<Signed, int, std::string>>{
           {registration(worker_, now, impostor), 403, "is signed by " + impostor.address()},
           {altered, 401, "the signature is not"},
           {sign(worker_, "POST", "/work", body_of(worker_), now), 401, "the signature is not"},
           {registration(worker_, now - 61), 401, "more than 60 s from the server's clock"},
           {registration(worker_, now + 61), 401, "more than 60 s from the server's clock"},
           {Signed{body_of(worker_), {}}, 401, "the request is not signed"},
           {short_sig, 401, "malformed signature headers"},
           {sign(worker_, "POST", "/nodes", Json{{"address", up}}.dump(), now), 400,
            "field 'address' must be 64 lowercase hex digits"},
           {sign(worker_, "POST", "/nodes", R"({"address": "abc"})", now), 400,
            "field 'address' must be 64 lowercase hex digits"},
           {sign(worker_, "POST", "/nodes", "{not json", now), 400, "not JSON"}}) {
    auto res = post("/nodes", request);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, status) << request.body;
    EXPECT_CONTAINS(error_text(res), message);
  }
  EXPECT_TRUE(client.nodes().empty());
  EXPECT_EQ(client.allowlist().revision, 0);

  // A captured registration cannot be replayed, from anywhere, nor an older one sent later (both
  // signed after the server started: one signed before is refused for that).
  const Signed good = registration(worker_, now + 2);
  auto res = post("/nodes", good);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  for (const std::string from : {"127.0.0.1", "127.0.0.2"}) {
    res = post("/nodes", good, from);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
    EXPECT_CONTAINS(error_text(res), "a replayed request");
  }
  res = post("/nodes", registration(worker_, now + 1), "127.0.0.2");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_CONTAINS(error_text(res), "replayed or reordered");
  EXPECT_EQ(client.allowlist().ips, Strings{"127.0.0.1"});
  EXPECT_EQ(client.allowlist().revision, 1);
  EXPECT_CONTAINS(metrics(),
                  "trellis_orchestrator_uploads_refused_total{reason=\"bad_signature\"} 8\n");
  EXPECT_CONTAINS(metrics(),
                  "trellis_orchestrator_uploads_refused_total{reason=\"wrong_signer\"} 1\n");
}

TEST_F(NodeRegistry, EvictionNeedsTheTokenAndCutsTheNodeOffAtOnce) {
  Client& trainer = start();
  trainer.register_node(worker_);
  const Identity bystander = Identity::generate();
  auto res = post("/nodes", registration(bystander, unix_now()), "127.0.0.2");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(trainer.allowlist().revision, 2);
  // Work and an upload URL handed out before the eviction.
  EXPECT_EQ(work(trainer, worker_).step, 0);
  const std::string bytes =
      test::signed_file({"run-test", worker_.address(), 0, 0, 0}, {{0, 1}}, worker_);
  res = ask_upload(worker_, 0);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const std::string url = Json::parse(res->body).at("upload_url").get<std::string>();

  // Without the token (or with a wrong one) nothing happens.
  Client anonymous(server_->url(), "", 10), wrong(server_->url(), kValidatorToken, 10);
  EXPECT_CONTAINS(test::error_of([&] { anonymous.evict(worker_.address(), "x"); }),
                  "POST /nodes/" + worker_.address() + "/evict needs the trainer's bearer token");
  EXPECT_CONTAINS(test::error_of([&] { wrong.evict(worker_.address(), "x"); }), "bearer token");
  res = post("/nodes/" + worker_.address() + "/evict", "");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(trainer.allowlist().revision, 2);
  EXPECT_FALSE(trainer.nodes()[0].evicted || trainer.nodes()[1].evicted);
  // The pool's IPs are for relays (and the operator) only.
  EXPECT_CONTAINS(test::error_of([&] { anonymous.allowlist(); }),
                  "GET /allowlist needs the relay's bearer token");
  EXPECT_CONTAINS(test::error_of([&] { wrong.allowlist(); }), "bearer token");
  EXPECT_EQ(Client(server_->url(), kRelayToken, 10).allowlist().revision, 2);

  trainer.evict(worker_.address(), "forged rollouts");
  Allowlist list = trainer.allowlist();
  EXPECT_EQ(list.revision, 3);
  EXPECT_EQ(list.ips, Strings{"127.0.0.2"});
  const std::string evicted = "node " + worker_.address() + " was evicted: forged rollouts";

  // It cannot come back, ask for work or to upload, or use the URL it already holds.
  EXPECT_CONTAINS(test::error_of([&] { trainer.request_work(worker_, 0, 2); }), evicted);
  EXPECT_CONTAINS(test::error_of([&] { trainer.register_node(worker_); }), evicted);
  res = post("/nodes", registration(worker_, unix_now() + 2), "127.0.0.1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_EQ(error_text(res), evicted);
  res = ask_upload(worker_, 1);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_EQ(error_text(res), evicted);
  EXPECT_CONTAINS(test::error_of([&] { trainer.submit(worker_, 0, 1, bytes); }), evicted);
  const Signed upload = sign(worker_, "PUT", url, bytes, unix_now());
  auto put = http_from("127.0.0.1")
                 .Put(url.c_str(), upload.headers, bytes, "application/vnd.apache.parquet");
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 403);
  EXPECT_EQ(error_text(put), evicted);
  EXPECT_TRUE(trainer.accepted(0).empty());
  EXPECT_EQ(trainer.allowlist().revision, 3);
  // Others carry on, with the evicted node's share of step 0.
  EXPECT_EQ(work(trainer, bystander).step, 0);
  const std::string theirs =
      test::signed_file({"run-test", bystander.address(), 0, 0, 0}, {{0, 1}}, bystander);
  EXPECT_EQ(trainer.submit(bystander, 0, 0, theirs), "accepted");

  // The node's record; a second eviction keeps the first reason.
  res = post("/nodes/" + worker_.address() + "/evict", "", "127.0.0.1",
             {{"Authorization", "Bearer " + kTrainerToken}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body).at("evicted_reason"), "forged rollouts");
  const auto nodes = trainer.nodes();
  const auto it = std::find_if(nodes.begin(), nodes.end(),
                               [&](const Node& n) { return n.address == worker_.address(); });
  ASSERT_NE(it, nodes.end());
  EXPECT_TRUE(it->evicted);
  EXPECT_EQ(it->evicted_reason, "forged rollouts");
  EXPECT_EQ(it->ip, "127.0.0.1");
  EXPECT_GT(it->evicted_at, 0);

  // A node never seen can be evicted ahead of time (no reason: one is filled in).
  const Identity stranger = Identity::generate();
  res = post("/nodes/" + stranger.address() + "/evict", "", "127.0.0.1",
             {{"Authorization", "Bearer " + kTrainerToken}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body).at("evicted_reason"), "no reason given");
  EXPECT_EQ(trainer.allowlist().revision, 3);  // its IP was never allowed
  res = post("/nodes", registration(stranger, unix_now()), "127.0.0.2");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_CONTAINS(error_text(res), "was evicted: no reason given");
  EXPECT_EQ(trainer.allowlist().ips, Strings{"127.0.0.2"});

  // Malformed evictions.
  const httplib::Headers auth{{"Authorization", "Bearer " + kTrainerToken}};
  for (const auto& [path, body, message] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"/nodes/xyz/evict", "", "'xyz' is not a node address"},
           {"/nodes/" + std::string(64, 'A') + "/evict", "", "is not a node address"},
           {"/nodes/" + bystander.address() + "/evict", "{oops", "not JSON"},
           {"/nodes/" + bystander.address() + "/evict", R"({"reason": 3})",
            "field 'reason' must be a string"},
           {"/nodes/" + bystander.address() + "/evict",
            Json{{"reason", std::string(1001, 'x')}}.dump(), "longer than 1000 bytes"}}) {
    res = post(path, body, "127.0.0.1", auth);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << path << " " << body;
    EXPECT_CONTAINS(error_text(res), message);
  }
  EXPECT_EQ(trainer.allowlist().ips, Strings{"127.0.0.2"});

  const std::string m = metrics();
  EXPECT_CONTAINS(m, "trellis_orchestrator_nodes{state=\"registered\"} 1\n");
  EXPECT_CONTAINS(m, "trellis_orchestrator_nodes{state=\"evicted\"} 2\n");
  EXPECT_CONTAINS(m, "trellis_orchestrator_uploads_refused_total{reason=\"evicted\"} ");
}

// Liveness (specs/protocol.md §4): a node that sends heartbeats is Healthy, Unhealthy after
// unhealthy_after missed intervals, Dead after dead_after: off the allowlist at once (its revision
// moves), refused work and heartbeats, and not brought back by a plain registration. A node that
// never sent one (a worker without an agent) is only "registered" and stays on the list.
TEST_F(NodeRegistry, HeartbeatsKeepANodeAliveAndASilentOneDies) {
  ApiOptions o = options();
  o.pool.heartbeat_s = 0.2;
  o.pool.unhealthy_after = 3;
  o.pool.dead_after = 6;  // 1.2 s
  Client& trainer = start(o);
  Client node(server_->url(), "", 10);
  const Identity legacy = Identity::generate();
  EXPECT_EQ(node.heartbeat(worker_).refused, "not_registered");
  node.register_node(worker_);
  node.register_node(legacy);
  const auto state_of = [&](const Identity& who) {
    for (const Node& n : trainer.nodes())
      if (n.address == who.address()) return n;
    return Node{};
  };
  EXPECT_EQ(node.heartbeat(worker_, "running").interval_s, 0.2);
  EXPECT_EQ(state_name(worker_), "healthy");
  EXPECT_EQ(state_name(legacy), "registered");
  const int64_t revision = trainer.allowlist().revision;
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // 3.5 intervals missed
  EXPECT_EQ(state_name(worker_), "unhealthy");
  EXPECT_EQ(trainer.allowlist().revision, revision);            // still on it
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // 7 missed
  EXPECT_EQ(state_name(worker_), "dead");
  EXPECT_EQ(state_name(legacy), "registered");
  // Both nodes share 127.0.0.1, so the dead one's IP stays through the other; what moved is its
  // own standing: no heartbeat, no work.
  const auto refused = node.heartbeat(worker_);
  EXPECT_EQ(refused.refused, "not_registered");
  EXPECT_CONTAINS(refused.why, "it is Dead");
  EXPECT_CONTAINS(test::error_of([&] { node.request_work(worker_, 0, 1); }),
                  "is not registered: no heartbeat");
  // It returns only through a new invite (State.ADeadNodeReturnsOnlyWithAnInvite): a plain
  // registration, such as its worker's, does not bring it back.
  EXPECT_CONTAINS(test::error_of([&] { node.register_node(worker_); }),
                  "returns only with a new invite");
  EXPECT_EQ(state_name(worker_), "dead");
  EXPECT_GT(state_of(worker_).heartbeat_at, 0);
}

// One client, one address: behind a trusted proxy (named here in another spelling than the
// socket's) a node is registered, and put on the relays' allowlist, under the canonical text of
// the X-Real-IP the proxy sent, so that an IPv4 client of a dual-stack proxy or an IPv6 address in
// capitals is the address relays see. A header from anyone else is still ignored.
TEST_F(NodeRegistry, BehindATrustedProxyANodeIsKnownByOneSpellingOfItsAddress) {
  ApiOptions o = options();
  o.trusted_proxies = {"::FFFF:127.0.0.1"};
  Client& trainer = start(o);
  const Identity second = Identity::generate(), third = Identity::generate();
  auto res = post("/nodes", registration(worker_, unix_now()), "127.0.0.1",
                  {{"X-Real-IP", "::ffff:10.9.8.7"}});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body).at("ip"), "10.9.8.7");
  res = post("/nodes", registration(second, unix_now()), "127.0.0.1",
             {{"X-Real-IP", "2001:DB8:0::7"}});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body).at("ip"), "2001:db8::7");
  res = post("/nodes", registration(third, unix_now()), "127.0.0.2", {{"X-Real-IP", "10.9.8.8"}});
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body).at("ip"), "127.0.0.2");
  EXPECT_EQ(trainer.allowlist().ips, (Strings{"10.9.8.7", "127.0.0.2", "2001:db8::7"}));
}

// A worker started without a node agent sends no heartbeats: its registrations are its signs of
// life. Once the newest is older than orchestrator.registration_ttl_s it is Stale: off the
// allowlist and refused work, with a message that says why and what to do; registering again
// (what a live worker does every minute) brings it back.
TEST_F(NodeRegistry, ANodeWithoutAnAgentThatStopsRegisteringGoesStale) {
  ApiOptions o = options();
  o.pool.registration_ttl_s = 0.5;
  Client& trainer = start(o);
  Client node(server_->url(), "", 10);
  node.register_node(worker_);
  EXPECT_EQ(trainer.allowlist().ips, Strings{"127.0.0.1"});
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  EXPECT_EQ(trainer.allowlist().ips, Strings{});
  EXPECT_EQ(state_name(worker_), "stale");
  const std::string refused = test::error_of([&] { node.request_work(worker_, 0, 1); });
  EXPECT_CONTAINS(refused, "it is Stale");
  EXPECT_CONTAINS(refused, "orchestrator.registration_ttl_s");
  EXPECT_CONTAINS(refused, "register again with POST /nodes");
  node.register_node(worker_);
  EXPECT_EQ(state_name(worker_), "registered");
  EXPECT_EQ(trainer.allowlist().ips, Strings{"127.0.0.1"});
  EXPECT_NO_THROW(node.request_work(worker_, 0, 1));
}

// A node without an agent stays live through work longer than its registration lifetime (a
// checkpoint download over a slow link, a long judgement) while a RegistrationKeeper registers
// it from a thread of its own; once the keeper stops, the node goes stale. (A worker used to
// register between downloads only, and went stale in the middle of a long one.)
TEST_F(NodeRegistry, ARegistrationKeeperKeepsANodeLiveThroughWorkLongerThanTheLifetime) {
  ApiOptions o = options();
  o.pool.registration_ttl_s = 1.0;
  Client& trainer = start(o);
  const std::atomic<bool> stop{false};
  {
    RegistrationKeeper keeper(server_->url(), "", worker_, stop, 0.1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!keeper.registered() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(keeper.registered());
    // The work: 2.5 s, two and a half lifetimes, with no registration of its own.
    for (int i = 0; i < 10; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      EXPECT_EQ(state_name(worker_), "registered") << "after " << (i + 1) * 250 << " ms";
    }
    EXPECT_EQ(trainer.allowlist().ips, Strings{"127.0.0.1"});
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(state_name(worker_), "stale");
  EXPECT_EQ(trainer.allowlist().ips, Strings{});
}

// A flood of signed requests from one machine (each signed with a fresh key, so that no replay
// check stops it) fills only that address's share of the nonce window: it gets 503 busy, and a
// node elsewhere is still served. Without the share, the flood took the whole window and the
// honest node's registration got the 503.
TEST_F(NodeRegistry, AFloodOfSignedRequestsFromOneAddressBusiesOnlyThatAddress) {
  ApiOptions o = options();
  o.signed_requests_in_window = 12;
  o.signed_requests_per_address = 6;
  start(o);
  int served = 0, busy = 0;
  for (int i = 0; i < 20; ++i) {
    const Identity fresh = Identity::generate();
    const auto res = post("/nodes", registration(fresh, unix_now()), "127.0.0.2");
    ASSERT_TRUE(res);
    if (res->status == 200) ++served;
    if (res->status == 503) {
      ++busy;
      EXPECT_EQ(Json::parse(res->body).value("code", ""), "busy");
      EXPECT_CONTAINS(error_text(res), "from this address or in all; retry shortly");
      EXPECT_CONTAINS(error_text(res),
                      "came from 127.0.0.2: behind a reverse proxy on this "
                      "machine, list it in trusted_proxies");
    }
  }
  EXPECT_EQ(served, 6);
  EXPECT_EQ(busy, 14);
  const auto honest = post("/nodes", registration(worker_, unix_now()), "127.0.0.3");
  ASSERT_TRUE(honest);
  EXPECT_EQ(honest->status, 200) << honest->body;
}

// Sybil keys from one address (orchestrator.max_nodes_per_ip): the third key registering from
// 127.0.0.3 is refused with ip_full and kept off the allowlist, while another address still
// registers.
TEST_F(NodeRegistry, OneAddressRegistersAtMostMaxNodesPerIpNodes) {
  ApiOptions o = options();
  o.pool.max_nodes_per_ip = 2;
  Client& trainer = start(o);
  const Identity second = Identity::generate(), third = Identity::generate();
  ASSERT_EQ(post("/nodes", registration(worker_, unix_now()), "127.0.0.3")->status, 200);
  ASSERT_EQ(post("/nodes", registration(second, unix_now()), "127.0.0.3")->status, 200);
  const auto res = post("/nodes", registration(third, unix_now()), "127.0.0.3");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_EQ(Json::parse(res->body).value("code", ""), "ip_full");
  EXPECT_CONTAINS(error_text(res), "orchestrator.max_nodes_per_ip = 2");
  EXPECT_CONTAINS(error_text(res), "orchestrator.trusted_proxies");  // a loopback address
  EXPECT_EQ(post("/nodes", registration(third, unix_now()), "127.0.0.4")->status, 200);
  EXPECT_EQ(trainer.allowlist().ips, (Strings{"127.0.0.3", "127.0.0.4"}));
}

// A dead node's IP leaves the allowlist at once when no live node shares it.
TEST_F(NodeRegistry, ADeadNodesIpLeavesTheAllowlist) {
  ApiOptions o = options();
  o.pool.heartbeat_s = 0.1;
  o.pool.dead_after = 4;
  o.pool.unhealthy_after = 2;
  Client& trainer = start(o);
  ASSERT_EQ(post("/nodes", registration(worker_, unix_now()), "127.0.0.2")->status, 200);
  Client node(server_->url(), "", 10);
  node.heartbeat(worker_);
  Allowlist before = trainer.allowlist();
  EXPECT_EQ(before.ips, Strings{"127.0.0.2"});
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  const Allowlist after = trainer.allowlist();
  EXPECT_TRUE(after.ips.empty());
  EXPECT_EQ(after.revision, before.revision + 1);
  EXPECT_CONTAINS(metrics(),
                  "trellis_orchestrator_allowlist_revision " + std::to_string(after.revision));
}

// Tasks (specs/protocol.md §4): the owner creates them (its token; a config Trellis reads), and
// live nodes pull them with their heartbeats: one named for a node goes to it, an open one to the
// first node that asks without a task, and a dead node's task to the next live one.
TEST_F(NodeRegistry, TasksArePulledWithHeartbeatsAndADeadNodesTaskMovesOn) {
  ApiOptions o = options();
  o.pool.heartbeat_s = 0.1;
  o.pool.unhealthy_after = 2;
  o.pool.dead_after = 4;
  Client& owner = start(o);
  Client node(server_->url(), "", 10);
  const Identity second = Identity::generate(), third = Identity::generate();
  for (const Identity* n : {static_cast<const Identity*>(&worker_), &second, &third})
    node.register_node(*n);
  EXPECT_CONTAINS(test::error_of([&] { node.create_task("worker", "[infer]\n"); }),
                  "needs the trainer's bearer token");
  EXPECT_CONTAINS(test::error_of([&] { owner.create_task("miner", ""); }), "field 'role'");
  EXPECT_CONTAINS(test::error_of([&] { owner.create_task("worker", "[infer]\nnope = 1\n"); }),
                  "unknown config key 'infer.nope'");
  const int64_t open = owner.create_task("worker", "[infer]\ngroups_per_submission = 2\n");
  const int64_t named = owner.create_task("validator", "", third.address());
  auto beat = node.heartbeat(worker_);
  ASSERT_TRUE(beat.task);
  EXPECT_EQ(beat.task->id, open);
  EXPECT_EQ(beat.task->role, "worker");
  EXPECT_EQ(beat.task->config, "[infer]\ngroups_per_submission = 2\n");
  EXPECT_EQ(node.heartbeat(worker_).task->id, open);  // it keeps it
  EXPECT_FALSE(node.heartbeat(second).task);          // nothing left for it
  EXPECT_EQ(node.heartbeat(third).task->id, named);
  // The worker goes silent and dies: its task goes to the next live node that asks.
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    node.heartbeat(second);
    node.heartbeat(third);
  }
  beat = node.heartbeat(second);
  ASSERT_TRUE(beat.task);
  EXPECT_EQ(beat.task->id, open);
  EXPECT_EQ(beat.task->node, second.address());
}

TEST_F(NodeRegistry, StatusReportsTheTrainerPublicKeyPublishedWithAVersion) {
  Client& trainer = start();
  EXPECT_EQ(trainer.status().trainer_public_key, "");
  const Identity signer = Identity::generate();
  trainer.publish_version(1, signer.address());
  Status s = trainer.status();
  EXPECT_EQ(s.policy_version, 1);
  EXPECT_EQ(s.trainer_public_key, signer.address());
  trainer.publish_version(2);  // no key: the known one stays
  s = trainer.status();
  EXPECT_EQ(s.policy_version, 2);
  EXPECT_EQ(s.trainer_public_key, signer.address());

  // Without the token, or with a malformed key, nothing changes.
  Client anonymous(server_->url(), "", 10);
  const Identity rogue = Identity::generate();
  EXPECT_CONTAINS(test::error_of([&] { anonymous.publish_version(3, rogue.address()); }),
                  "bearer token");
  const httplib::Headers auth{{"Authorization", "Bearer " + kTrainerToken}};
  for (const auto& [key, message] : std::vector<std::pair<Json, std::string>>{
           {"abc", "field 'public_key' must be 64 lowercase hex digits"},
           {std::string(64, 'G'), "field 'public_key' must be 64 lowercase hex digits"},
           {42, "field 'public_key' must be a string"}}) {
    auto res = post("/trainer/version", Json{{"version", 3}, {"public_key", key}}.dump(),
                    "127.0.0.1", auth);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << key;
    EXPECT_CONTAINS(error_text(res), message);
  }
  s = anonymous.status();
  EXPECT_EQ(s.policy_version, 2);
  EXPECT_EQ(s.trainer_public_key, signer.address());
  auto raw = http_from("127.0.0.1").Get("/status");
  ASSERT_TRUE(raw);
  EXPECT_EQ(Json::parse(raw->body).at("trainer_public_key"), signer.address());
}

TEST_F(NodeRegistry, NodesEvictionsAndTheTrainerKeySurviveARestart) {
  Client& trainer = start();
  const Identity kept = Identity::generate(), signer = Identity::generate();
  trainer.register_node(worker_);
  auto res = post("/nodes", registration(kept, unix_now()), "127.0.0.2");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  trainer.evict(worker_.address(), "slashed");
  trainer.publish_version(1, signer.address());
  const Allowlist before = trainer.allowlist();
  EXPECT_EQ(before.revision, 3);
  server_->stop();

  start();
  const Allowlist after = trainer_->allowlist();
  EXPECT_EQ(after.revision, before.revision);
  EXPECT_EQ(after.ips, Strings{"127.0.0.2"});
  EXPECT_EQ(trainer_->status().trainer_public_key, signer.address());
  const auto nodes = trainer_->nodes();
  ASSERT_EQ(nodes.size(), 2u);
  for (const Node& n : nodes) {
    EXPECT_EQ(n.evicted, n.address == worker_.address()) << n.address;
    EXPECT_EQ(n.ip, n.address == worker_.address() ? "127.0.0.1" : "127.0.0.2");
  }
  EXPECT_CONTAINS(test::error_of([&] { trainer_->register_node(worker_); }),
                  "was evicted: slashed");
  res = ask_upload(worker_, 0);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_EQ(trainer_->allowlist().revision, before.revision);
}

// The operator's fetch of a node's logs goes to the endpoint the node joined through, resolved
// again: a node's name may point elsewhere since its invite. It connects only where an invite may
// go: at a loopback address (as a node whose name came to resolve to one, or to a metadata
// service, would be), only with orchestrator.invite_private_addresses = true. Without the check,
// the service at that address got the orchestrator's signed GET.
TEST_F(NodeRegistry, ANodesLogsAreFetchedOnlyFromAnAddressAnInviteMayReach) {
  std::atomic<int> asked{0};
  httplib::Server agent;
  agent.Get("/logs", [&](const httplib::Request& req, httplib::Response& res) {
    ++asked;
    res.set_content("task log, last " + req.get_param_value("lines") + " lines", "text/plain");
  });
  const int agent_port = agent.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { agent.listen_after_bind(); });
  ApiOptions o = options();
  {  // The node joined through an invite to its endpoint, which is now at a loopback address.
    State state(dir_ / "orchestrator.sqlite", o.run_id,
                Identity::load_or_create(keeper_key_file(o.key_file, dir_)), o.pool);
    const double now = static_cast<double>(unix_now());
    state.record_invite(worker_.address(), "nonce-1", now + 60, now,
                        "http://localhost:" + std::to_string(agent_port));
    const Registration r =
        state.register_node(worker_.address(), "203.0.113.7", unix_now(), now, "nonce-1");
    ASSERT_EQ(r.outcome, Registration::kRegistered) << r.why;
  }

  o.sweep.reach = EndpointReach::kPublic;  // the default
  start(o);
  EXPECT_CONTAINS(test::error_of([&] { trainer_->node_logs(worker_.address(), 5); }),
                  "orchestrator.invite_private_addresses = true");
  EXPECT_EQ(asked.load(), 0) << "the service at the loopback address was asked";

  o.sweep.reach = EndpointReach::kAny;  // orchestrator.invite_private_addresses = true
  start(o);
  EXPECT_EQ(trainer_->node_logs(worker_.address(), 5), "task log, last 5 lines");
  EXPECT_EQ(asked.load(), 1);
  agent.stop();
  serving.join();
}

}  // namespace
}  // namespace trellis::orchestrator
