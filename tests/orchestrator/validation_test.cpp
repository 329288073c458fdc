// The orchestrator's side of validation (specs/toploc.md §6), in-process on a free port: an upload
// that passes the orchestrator's checks waits (202 "validating"), unlisted and uncounted, until a
// trusted validator claims it, downloads it and decides. Accepting moves it into the rollout
// store where the trainer finds it; rejecting keeps it under rejected/, counts against the node
// and evicts it, dropping its other files waiting for a verdict. Leases keep two validators off
// one file and expire; the validators' token is enforced; malformed verdicts get 400 naming the
// field; the queue, its files and leases survive a restart, and files caught between a move and
// its commit are put back where their rows say.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "common/files.h"
#include "common/hashing.h"
#include "common/json.h"
#include "error_of.h"
#include "ledger/contributions.h"
#include "ledger/verify.h"
#include "orchestrator/api.h"
#include "orchestrator/api_fixture.h"
#include "orchestrator/client.h"
#include "rollout_fixtures.h"

namespace trellis::orchestrator {
namespace {

namespace fs = std::filesystem;

#define EXPECT_CONTAINS(haystack, needle)                                                       \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "missing '" << (needle) << "' in:\n" \
                                                        << (haystack)

class Validation : public ApiFixture {
 protected:
  ApiOptions options() const {
    ApiOptions o = ApiFixture::options();
    o.pool.validation = true;
    return o;
  }

  void start(const ApiOptions& o) {
    const int port = start_server(o);
    trainer_ = std::make_unique<Client>(server_->url(), kTrainerToken, 10);
    validator_ = std::make_unique<Client>(server_->url(), kValidatorToken, 10);
    http_ = std::make_unique<httplib::Client>("127.0.0.1", port);
  }
  void start() { start(options()); }

  // A signed file of `node` for (step, submission) with `groups` (rewards per completion).
  static std::string file(const Identity& node, int32_t step, int32_t submission,
                          const std::vector<std::vector<float>>& groups = {{0, 1, 0, 1}}) {
    return test::signed_file({"run-test", node.address(), step, submission, 0}, groups, node);
  }
  // Work for `node` (one group per entry of `groups`), then its file for that work uploaded.
  struct Sent {
    Assignment work;
    std::string bytes, status;
  };
  Sent send(const Identity& node, const std::vector<std::vector<float>>& groups = {{0, 1, 0, 1}}) {
    Sent out;
    out.work = work(*trainer_, node, static_cast<int64_t>(groups.size()));
    out.bytes = file(node, static_cast<int32_t>(out.work.step),
                     static_cast<int32_t>(out.work.submission), groups);
    out.status = trainer_->submit(node, out.work.step, out.work.submission, out.bytes);
    return out;
  }
  static std::string name(const Identity& node, int64_t submission) {
    return node.address() + "-" + std::to_string(submission) + ".parquet";
  }

  httplib::Result post(const std::string& path, const Json& body,
                       const std::string& token = kValidatorToken) {
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    return http_->Post(path, headers, body.dump(), "application/json");
  }
  httplib::Result get(const std::string& path, const std::string& token) {
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    return http_->Get(path, headers);
  }

  // The claim of `validator`, which must find one.
  ValidationClaim claim(const std::string& validator) {
    const ClaimResult r = validator_->claim_validation(validator);
    EXPECT_TRUE(r.claim.has_value()) << validator << " found nothing to validate";
    return r.claim.value_or(ValidationClaim{});
  }

  std::optional<Node> node(const Identity& id) {
    for (const Node& n : trainer_->nodes())
      if (n.address == id.address()) return n;
    return std::nullopt;
  }

  std::vector<std::string> files_under(const std::string& area) const {
    std::vector<std::string> out;
    if (!fs::exists(dir_ / area)) return out;
    for (const auto& e : fs::recursive_directory_iterator(dir_ / area))
      if (e.is_regular_file()) out.push_back(fs::relative(e.path(), dir_).string());
    std::sort(out.begin(), out.end());
    return out;
  }

  Identity worker_ = Identity::generate();
  Identity bystander_ = Identity::generate();
  std::unique_ptr<Client> trainer_, validator_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(Validation, AnUploadWaitsForAVerdictThenBecomesVisible) {
  start();
  // 8 signal samples: enough for step 0 once accepted (batch_size 8).
  const Sent sent = send(worker_, {{0, 1, 0, 1}, {1, 0, 1, 0}});
  EXPECT_EQ(sent.status, "validating");
  const std::string& bytes = sent.bytes;

  // Waiting: stored under validating/, not listed, not served, not counted.
  EXPECT_EQ(files_under("validating"),
            std::vector<std::string>{"validating/step_0/" + name(worker_, 0)});
  EXPECT_TRUE(files_under("rollouts").empty());
  EXPECT_TRUE(trainer_->accepted(0).empty());
  Status s = trainer_->status();
  EXPECT_EQ(s.validating, 1);
  EXPECT_EQ(s.pending, 0);
  EXPECT_EQ(s.accepted, 0);
  EXPECT_EQ(s.step, 0);
  auto res = get("/rollouts/step_0/" + name(worker_, 0), kTrainerToken);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = http_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_CONTAINS(res->body, "trellis_orchestrator_submissions{status=\"validating\"} 1\n");
  // The worker cannot ask again for it while it is being validated.
  const std::string again = test::error_of([&] { trainer_->submit(worker_, 0, 0, bytes); });
  EXPECT_CONTAINS(again,
                  "step 0 submission 0 of node " + worker_.address() + " is being validated");

  // A validator claims it and gets the very bytes.
  const ClaimResult r = validator_->claim_validation("v1");
  ASSERT_TRUE(r.claim);
  EXPECT_EQ(r.policy_version, 0);
  EXPECT_EQ(r.async_level, 1);
  const ValidationClaim& c = *r.claim;
  EXPECT_EQ(c.key.step, 0);
  EXPECT_EQ(c.key.node_address, worker_.address());
  EXPECT_EQ(c.key.submission, 0);
  EXPECT_EQ(c.sha256, sha256_hex(bytes));
  EXPECT_EQ(c.size, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(c.samples, 8);
  EXPECT_EQ(c.signal_samples, 8);
  EXPECT_EQ(c.file, "/validation/files/step_0/" + name(worker_, 0));
  EXPECT_GT(c.uploaded_at, 0);
  EXPECT_NEAR(c.lease_expires, c.uploaded_at + 120, 5);
  EXPECT_EQ(validator_->download_for_validation(c), bytes);
  EXPECT_FALSE(validator_->claim_validation("v2").claim) << "leased to v1";

  // Accepted: in the store, listed, served, counted.
  EXPECT_EQ(validator_->post_verdict(c.key, true, "", "v1", 2), "accepted");
  EXPECT_TRUE(files_under("validating").empty());
  const auto files = trainer_->accepted(0);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].name, name(worker_, 0));
  EXPECT_EQ(files[0].signal_samples, 8);
  EXPECT_EQ(trainer_->download(0, files[0]), bytes);
  s = trainer_->status();
  EXPECT_EQ(s.validating, 0);
  EXPECT_EQ(s.accepted, 1);
  EXPECT_EQ(s.step, 1);
  const auto rows = trainer_->submissions("accepted");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].validator, "v1");
  EXPECT_EQ(rows[0].claimed_by, "v1");
  EXPECT_GE(rows[0].decided_at, rows[0].uploaded_at);

  // Decided: no second verdict, no download for validation.
  EXPECT_CONTAINS(test::error_of([&] { validator_->post_verdict(c.key, false, "late", "v2", 1); }),
                  "is not being validated: it is accepted already");
  res = get(c.file, kValidatorToken);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_CONTAINS(error_text(res), "is not waiting for a validator's verdict");
}

TEST_F(Validation, ARawUploadIsAnswered202) {
  start();
  work(*trainer_, worker_, 1);
  const std::string bytes = file(worker_, 0, 0);
  const Json req{{"node_address", worker_.address()},
                 {"step", 0},
                 {"submission", 0},
                 {"sha256", sha256_hex(bytes)},
                 {"size", bytes.size()}};
  auto res =
      http_->Post("/submissions", signed_headers(worker_, "POST", "/submissions", req.dump()),
                  req.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const std::string url = Json::parse(res->body).at("upload_url").get<std::string>();
  res = http_->Put(url.c_str(), signed_headers(worker_, "PUT", url, bytes), bytes,
                   "application/vnd.apache.parquet");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 202) << res->body;
  const Json answer = Json::parse(res->body);
  EXPECT_EQ(answer.at("status"), "validating");
  EXPECT_EQ(answer.at("samples"), 4);
  EXPECT_EQ(answer.at("signal_samples"), 4);
  // The same URL again (signed afresh: the first request's nonce is spent).
  res = http_->Put(url.c_str(), signed_headers(worker_, "PUT", url, bytes), bytes,
                   "application/vnd.apache.parquet");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409);
  EXPECT_CONTAINS(error_text(res), "is being validated");
  // And a new request for it.
  res = http_->Post("/submissions", signed_headers(worker_, "POST", "/submissions", req.dump()),
                    req.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409);
  EXPECT_CONTAINS(error_text(res), "is being validated");
  res = http_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_CONTAINS(res->body,
                  "trellis_orchestrator_uploads_refused_total{reason=\"in_validation\"} 2");
}

TEST_F(Validation, ARejectionCountsEvictsAndDropsTheNodesOtherFiles) {
  start();
  // Two files of the worker fill step 0's quota; the bystander's goes to step 1.
  const std::string first = send(worker_).bytes;
  EXPECT_EQ(send(worker_).work.submission, 1);
  EXPECT_EQ(send(bystander_).work.step, 1);
  EXPECT_EQ(trainer_->status().validating, 3);

  const ValidationClaim c = claim("v1");  // the oldest upload of the lowest step
  EXPECT_EQ(c.key.node_address, worker_.address());
  EXPECT_EQ(c.key.submission, 0);
  EXPECT_EQ(validator_->post_verdict(c.key, false, "proof mismatch at row 3", "v1", 2), "rejected");

  // The rejected file is kept for operators; the node's other one is gone; the bystander's waits.
  EXPECT_EQ(read_file(dir_ / "rejected" / "step_0" / name(worker_, 0)), first);
  EXPECT_EQ(files_under("validating"),
            std::vector<std::string>{"validating/step_1/" + name(bystander_, 0)});
  EXPECT_TRUE(files_under("rollouts").empty());

  const auto rejected = trainer_->submissions("rejected", 0);
  ASSERT_EQ(rejected.size(), 2u);
  EXPECT_EQ(rejected[0].key.submission, 0);
  EXPECT_EQ(rejected[0].reason, "validator v1: proof mismatch at row 3");
  EXPECT_EQ(rejected[0].validator, "v1");
  EXPECT_EQ(rejected[0].counts.samples, 4);
  const std::string eviction = "validator rejected step 0 submission 0: proof mismatch at row 3";
  EXPECT_EQ(rejected[1].key.submission, 1);
  EXPECT_EQ(rejected[1].reason, "node " + worker_.address() + " was evicted: " + eviction);
  EXPECT_EQ(rejected[1].validator, "");

  const auto n = node(worker_);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->rejections, 1);
  EXPECT_EQ(n->last_rejection, "step 0 submission 0: validator v1: proof mismatch at row 3");
  EXPECT_TRUE(n->evicted);
  EXPECT_EQ(n->evicted_reason, eviction);
  auto res = get("/nodes", kTrainerToken);
  ASSERT_TRUE(res);
  const Json listed = Json::parse(res->body).at("nodes");
  EXPECT_TRUE(std::any_of(listed.begin(), listed.end(), [&](const Json& j) {
    return j.at("address") == worker_.address() && j.at("rejections") == 1 &&
           j.at("last_rejection").get<std::string>().starts_with("step 0 submission 0: ");
  })) << listed.dump();

  // The evicted node is refused from now on; a verdict on its dropped file is too late.
  EXPECT_CONTAINS(test::error_of([&] { trainer_->request_work(worker_, 0, 1); }),
                  "was evicted: " + eviction);
  EXPECT_CONTAINS(test::error_of([&] { trainer_->submit(worker_, 1, 0, file(worker_, 1, 0)); }),
                  "was evicted: " + eviction);
  EXPECT_CONTAINS(test::error_of([&] {
                    validator_->post_verdict({0, worker_.address(), 1}, true, "", "v2", 1);
                  }),
                  "is not being validated: it was rejected: node " + worker_.address());

  // The next claim is the bystander's, whose file is accepted.
  const ValidationClaim next = claim("v2");
  EXPECT_EQ(next.key.node_address, bystander_.address());
  EXPECT_EQ(validator_->post_verdict(next.key, true, "", "v2", 4), "accepted");
  EXPECT_FALSE(validator_->claim_validation("v2").claim);
  const Status s = trainer_->status();
  EXPECT_EQ(s.accepted, 1);
  EXPECT_EQ(s.rejected, 2);
  EXPECT_EQ(s.validating, 0);
  res = http_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_CONTAINS(res->body, "trellis_orchestrator_nodes{state=\"evicted\"} 1\n");
}

TEST_F(Validation, WithoutEvictOnRejectTheNodeIsOnlyMarked) {
  ApiOptions o = options();
  o.pool.evict_on_reject = false;
  start(o);
  EXPECT_EQ(send(worker_).status, "validating");
  EXPECT_EQ(send(worker_).status, "validating");
  const ValidationClaim c = claim("v1");
  EXPECT_EQ(validator_->post_verdict(c.key, false, "sampling check failed", "v1", 1), "rejected");

  const auto n = node(worker_);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->rejections, 1);
  EXPECT_FALSE(n->evicted);
  EXPECT_EQ(trainer_->submissions("validating").size(), 1u);
  EXPECT_EQ(files_under("validating"),
            std::vector<std::string>{"validating/step_0/" + name(worker_, 1)});
  // The rejected file's share is handed out again, and the node may take it; a second rejection
  // counts too.
  const Sent retry = send(worker_, {{1, 0}});
  EXPECT_EQ(retry.status, "validating");
  EXPECT_EQ(retry.work.step, 0);
  EXPECT_EQ(retry.work.submission, 2);
  EXPECT_EQ(claim("v1").key.submission, 1);
  const ValidationClaim again = claim("v1");
  EXPECT_EQ(again.key.submission, 2);
  EXPECT_EQ(validator_->post_verdict(again.key, false, "still wrong", "v1", 1), "rejected");
  EXPECT_EQ(node(worker_)->rejections, 2);
  EXPECT_EQ(node(worker_)->last_rejection, "step 0 submission 2: validator v1: still wrong");
  EXPECT_EQ(read_file(dir_ / "rejected" / "step_0" / name(worker_, 2)), retry.bytes);
  EXPECT_FALSE(node(worker_)->evicted);
}

TEST_F(Validation, LeasesKeepValidatorsApartAndExpire) {
  ApiOptions o = options();
  o.validation_lease_s = 1;
  start(o);
  EXPECT_EQ(send(worker_).status, "validating");
  EXPECT_EQ(send(worker_).status, "validating");

  const ValidationClaim a = claim("v1");
  const ValidationClaim b = claim("v2");
  EXPECT_EQ(a.key.submission, 0);
  EXPECT_EQ(b.key.submission, 1);
  EXPECT_FALSE(validator_->claim_validation("v3").claim);

  // v1's lease runs out: the oldest goes to the next validator that asks.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  const ValidationClaim late = claim("v3");
  EXPECT_EQ(late.key.submission, 0);
  EXPECT_GT(late.lease_expires, a.lease_expires);
  // The first verdict wins, whoever holds the lease; the other gets 409.
  EXPECT_EQ(validator_->post_verdict(a.key, true, "", "v1", 4), "accepted");
  EXPECT_CONTAINS(test::error_of([&] { validator_->post_verdict(late.key, true, "", "v3", 4); }),
                  "already");
  EXPECT_EQ(trainer_->submissions("accepted")[0].validator, "v1");
  EXPECT_EQ(trainer_->submissions("accepted")[0].claimed_by, "v1, v3");  // every claimant
  // v2's expired lease hands b out again.
  EXPECT_EQ(claim("v3").key.submission, 1);
}

TEST_F(Validation, AFileThatStoppedTwoValidatorsIsRejected) {
  // A file that crashes or hangs every validator that takes it would otherwise go round them all
  // for good, and validation (then training) would stop.
  ApiOptions o = options();
  o.validation_lease_s = 1;
  start(o);
  EXPECT_EQ(send(worker_).status, "validating");
  EXPECT_EQ(claim("v1").key.submission, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(claim("v2").key.submission, 0);  // a second chance: v1 may have died of its own
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_FALSE(validator_->claim_validation("v3").claim);  // rejected, not offered again
  const auto rejected = trainer_->submissions("rejected");
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_CONTAINS(rejected[0].reason,
                  "the file stopped 2 validators without a verdict (v1, v2): each lease of 1 s");
  EXPECT_EQ(rejected[0].validator, "orchestrator");
  EXPECT_TRUE(node(worker_)->evicted);  // as for any rejection (evict_on_reject)
  EXPECT_TRUE(fs::exists(dir_ / "rejected" / "step_0" / name(worker_, 0)));
}

TEST_F(Validation, TheValidatorsTokenIsEnforced) {
  start();
  EXPECT_EQ(send(worker_).status, "validating");
  const std::string path = "/validation/files/step_0/" + name(worker_, 0);
  const Json verdict{{"step", 0},       {"node_address", worker_.address()},
                     {"submission", 0}, {"accept", true},
                     {"reason", ""},    {"validator", "v1"}};
  for (const std::string token : {std::string(), kTrainerToken, std::string("x"),
                                  kValidatorToken.substr(0, kValidatorToken.size() - 1)}) {
    const std::vector<std::function<httplib::Result()>> requests = {
        [&] {
          return post("/validation/claim", {{"validator", "v1"}}, token);
        },
        [&] { return post("/validation/verdict", verdict, token); },
        [&] { return get(path, token); }};
    for (const auto& request : requests) {
      auto res = request();
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 401) << token;
      EXPECT_CONTAINS(error_text(res), "needs the validator's bearer token");
    }
  }
  EXPECT_CONTAINS(test::error_of([&] { Client(server_->url()).claim_validation("v1"); }),
                  "validator's bearer token");
  // Operators' listing needs the trainer's token, not the validators'.
  for (const std::string token : {std::string(), kValidatorToken}) {
    auto res = get("/submissions", token);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
  }
  EXPECT_EQ(trainer_->status().validating, 1) << "nothing changed";
  // With the token everything works.
  auto res = get(path, kValidatorToken);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/vnd.apache.parquet");
}

TEST_F(Validation, MalformedRequestsGet400NamingTheField) {
  start();
  EXPECT_EQ(send(worker_).status, "validating");
  const auto verdict = [&](const std::string& field, const Json& value) {
    Json j{{"step", 0},
           {"node_address", worker_.address()},
           {"submission", 0},
           {"accept", false},
           {"reason", "bad proof"},
           {"validator", "v1"},
           {"checked_samples", 2}};
    if (value.is_discarded()) {
      j.erase(field);
    } else {
      j[field] = value;
    }
    return j;
  };
  const Json drop(Json::value_t::discarded);
  for (const auto& [body, message] : std::vector<std::pair<Json, std::string>>{
           {verdict("accept", drop), "missing field 'accept'"},
           {verdict("accept", "yes"), "field 'accept' must be true or false"},
           {verdict("reason", drop), "field 'reason' must say why"},
           {verdict("reason", ""), "field 'reason' must say why"},
           {verdict("reason", 7), "field 'reason' must be a string"},
           {verdict("reason", std::string(4001, 'x')), "field 'reason' is longer than 4000 bytes"},
           {verdict("validator", drop), "missing field 'validator'"},
           {verdict("validator", ""), "field 'validator' must name the validator"},
           {verdict("node_address", "abc"), "field 'node_address' must be 64 lowercase hex"},
           {verdict("step", -1), "field 'step' = -1 is out of range"},
           {verdict("submission", drop), "missing field 'submission'"},
           {verdict("checked_samples", -1), "field 'checked_samples' = -1 is out of range"},
           {verdict("checked_samples", "2"), "field 'checked_samples' must be an integer"}}) {
    auto res = post("/validation/verdict", body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body.dump().substr(0, 200);
    EXPECT_CONTAINS(error_text(res), message);
    EXPECT_CONTAINS(error_text(res), "POST /validation/verdict");
  }
  auto res = http_->Post("/validation/verdict", {{"Authorization", "Bearer " + kValidatorToken}},
                         "{not json", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_CONTAINS(error_text(res), "not JSON");
  res = post("/validation/claim", Json::object());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_CONTAINS(error_text(res), "missing field 'validator' (POST /validation/claim)");
  for (const auto& [path, message] : std::vector<std::pair<std::string, std::string>>{
           {"/submissions?status=waiting", "query parameter 'status' must be assigned, pending"},
           {"/submissions?step=x", "query parameter 'step' must be a step number"}}) {
    res = get(path, kTrainerToken);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << path;
    EXPECT_CONTAINS(error_text(res), message);
  }
  res = get("/validation/files/step_x/a.parquet", kValidatorToken);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  res = get("/validation/files/step_0/" + name(bystander_, 0), kValidatorToken);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  // A verdict on a submission nobody asked for.
  res = post("/validation/verdict", verdict("node_address", bystander_.address()));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409);
  EXPECT_CONTAINS(error_text(res), "there is no such submission");
  // Nothing was decided.
  EXPECT_EQ(trainer_->status().validating, 1);
  EXPECT_EQ(node(worker_)->rejections, 0);
}

TEST_F(Validation, SubmissionsAreListedByStatusAndStep) {
  ApiOptions o = options();
  o.max_backlog_steps = 4;  // room for all of the work below
  start(o);
  trainer_->publish_version(1);
  EXPECT_EQ(send(worker_, {{0, 1, 0, 1}, {1, 0, 1, 0}}).status, "validating");  // fills step 0
  EXPECT_EQ(work(*trainer_, worker_, 1, 1).step, 1);
  EXPECT_CONTAINS(test::error_of([&] { trainer_->submit(worker_, 1, 0, "not parquet"); }),
                  "schema: ");
  EXPECT_EQ(work(*trainer_, worker_, 1, 1).submission, 1);
  EXPECT_EQ(trainer_->submit(
                worker_, 1, 1,
                test::signed_file({"run-test", worker_.address(), 1, 1, 1}, {{0, 1}}, worker_)),
            "validating");
  // Work whose file never came, and one never asked for an upload.
  EXPECT_EQ(work(*trainer_, bystander_, 1, 1).step, 1);
  const std::string ask = Json{
      {"node_address", bystander_.address()},
      {"step", 1},
      {"submission", 0},
      {"sha256", std::string(64, 'a')},
      {"size", 10}}.dump();
  auto res = http_->Post("/submissions", signed_headers(bystander_, "POST", "/submissions", ask),
                         ask, "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  const Identity idle = Identity::generate();
  EXPECT_EQ(work(*trainer_, idle, 1, 1).step, 2);  // step 1's open work is expected to cover it

  const auto all = trainer_->submissions();
  ASSERT_EQ(all.size(), 5u);
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LT(all[i - 1].id, all[i].id);
  EXPECT_EQ(all[0].status, "validating");
  EXPECT_EQ(all[0].groups, 2);
  EXPECT_EQ(all[1].status, "rejected");
  EXPECT_CONTAINS(all[1].reason, "schema: not a valid rollout file");
  EXPECT_EQ(all[1].validator, "");
  EXPECT_EQ(all[2].status, "validating");
  EXPECT_EQ(all[3].status, "pending");
  EXPECT_EQ(all[3].uploaded_at, 0);
  EXPECT_EQ(all[3].sha256, std::string(64, 'a'));
  EXPECT_EQ(all[3].counts.samples, 4);  // what its work allows: its file exists
  EXPECT_EQ(all[4].status, "assigned");
  EXPECT_GT(all[4].work_expires, all[4].created_at);
  EXPECT_EQ(trainer_->submissions("validating").size(), 2u);
  EXPECT_EQ(trainer_->submissions("assigned").size(), 1u);
  EXPECT_EQ(trainer_->submissions("", 1).size(), 3u);
  EXPECT_EQ(trainer_->submissions("assigned", 2).size(), 1u);
  const auto one = trainer_->submissions("validating", 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].key.step, 1);
  EXPECT_EQ(one[0].counts.samples, 2);
  EXPECT_TRUE(trainer_->submissions("accepted").empty());
  EXPECT_TRUE(trainer_->submissions("", 3).empty());
}

TEST_F(Validation, AnEvictionRejectsTheNodesFilesWaitingForAVerdict) {
  start();
  EXPECT_EQ(send(worker_).status, "validating");
  const ValidationClaim c = claim("v1");
  trainer_->evict(worker_.address(), "caught by the operator");
  EXPECT_TRUE(files_under("validating").empty());
  const auto rows = trainer_->submissions("rejected");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].reason, "node " + worker_.address() + " was evicted: caught by the operator");
  EXPECT_CONTAINS(test::error_of([&] { validator_->post_verdict(c.key, true, "", "v1", 4); }),
                  "was evicted: caught by the operator");
  EXPECT_TRUE(trainer_->accepted(0).empty());
  EXPECT_EQ(node(worker_)->rejections, 0) << "an eviction is not a validator's rejection";
}

TEST_F(Validation, TheQueueSurvivesARestart) {
  start();
  const std::string bytes = send(worker_).bytes, other = send(worker_).bytes;
  EXPECT_EQ(trainer_->status().validating, 2);
  const ValidationClaim c = claim("v1");
  EXPECT_EQ(c.key.submission, 0);
  server_->stop();

  // Simulate a crash between moving submission 1's file into the store and committing its
  // acceptance, and a file whose upload never committed: the restart puts both in order.
  fs::create_directories(dir_ / "rollouts" / "step_0");
  fs::rename(dir_ / "validating" / "step_0" / name(worker_, 1),
             dir_ / "rollouts" / "step_0" / name(worker_, 1));
  write_file_atomic(dir_ / "validating" / "step_0" / name(bystander_, 0), "stray");
  start();
  EXPECT_EQ(files_under("validating"),
            (std::vector<std::string>{"validating/step_0/" + name(worker_, 0),
                                      "validating/step_0/" + name(worker_, 1)}));
  EXPECT_TRUE(files_under("rollouts").empty());
  EXPECT_EQ(trainer_->status().validating, 2);

  // v1's lease survived: another validator gets the other one; v1 decides its own.
  const ValidationClaim d = claim("v2");
  EXPECT_EQ(d.key.submission, 1);
  EXPECT_EQ(validator_->download_for_validation(d), other);
  EXPECT_EQ(validator_->download_for_validation(c), bytes);
  EXPECT_EQ(validator_->post_verdict(c.key, true, "", "v1", 4), "accepted");
  const auto accepted = trainer_->accepted(0);
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_EQ(accepted[0].name, name(worker_, 0));
  EXPECT_EQ(trainer_->download(0, accepted[0]), bytes);

  // A verdict committed before a restart stays.
  server_->stop();
  start();
  EXPECT_EQ(trainer_->accepted(0).size(), 1u);
  EXPECT_EQ(trainer_->status().validating, 1);
  EXPECT_EQ(validator_->post_verdict(d.key, true, "", "v2", 4), "accepted");
  const auto files = trainer_->accepted(0);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[1].name, name(worker_, 1));  // acceptance order
}

// Admission control with validators: work whose step fills first is dropped unjudged, wherever
// it is (waiting for a verdict, or not yet uploaded), and never held against its node; validators
// judge the lowest step first; and while the validation backlog is full, no new work is handed
// out and the status says that validators are behind.
TEST_F(Validation, SurplusOfAFilledStepIsDroppedUnjudged) {
  ApiOptions o = options();
  o.work_lease_s = 1;
  start(o);
  const Identity late = Identity::generate();
  // Each lease lapses before the next node asks, so three nodes get step 0's whole share.
  const Assignment mine = work(*trainer_, worker_);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const Assignment slow = work(*trainer_, late);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const Assignment theirs = work(*trainer_, bystander_);
  for (const Assignment& w : {mine, slow, theirs}) EXPECT_EQ(w.step, 0);
  EXPECT_EQ(trainer_->submit(worker_, 0, 0, file(worker_, 0, 0, {{0, 1, 0, 1}, {1, 0, 1, 0}})),
            "validating");
  EXPECT_EQ(
      trainer_->submit(bystander_, 0, 0, file(bystander_, 0, 0, {{0, 1, 0, 1}, {1, 0, 1, 0}})),
      "validating");

  // The worker's file fills step 0: the bystander's is surplus, and so is late's work.
  EXPECT_EQ(validator_->post_verdict(claim("v1").key, true, "", "v1", 8), "accepted");
  EXPECT_FALSE(validator_->claim_validation("v1").claim) << "the surplus was claimed";
  EXPECT_TRUE(files_under("validating").empty());
  const auto dropped = trainer_->submissions("dropped");
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_EQ(dropped[0].key.node_address, late.address());
  EXPECT_EQ(dropped[1].key.node_address, bystander_.address());
  EXPECT_CONTAINS(dropped[1].reason, "step 0 closed");
  EXPECT_EQ(dropped[1].validator, "");
  EXPECT_CONTAINS(
      test::error_of([&] { validator_->post_verdict(dropped[1].key, false, "x", "v1", 1); }),
      "is not being validated");
  // late's file comes after all: not needed, so not used, and counted as generated.
  EXPECT_EQ(trainer_->submit(late, 0, 0, file(late, 0, 0, {{0, 1, 0, 1}, {1, 0, 1, 0}})),
            "dropped");
  const Status s = trainer_->status();
  EXPECT_EQ(s.dropped, 2);
  EXPECT_EQ(s.rejected, 0);
  EXPECT_EQ(s.dropped_samples, 16);
  EXPECT_EQ(s.generated_samples, 24);
  EXPECT_EQ(s.accepted_samples, 8);
  EXPECT_EQ(s.step, 1);
  // Never held against the nodes.
  for (const Identity* n : std::vector<const Identity*>{&bystander_, &late}) {
    EXPECT_EQ(node(*n)->rejections, 0);
    EXPECT_FALSE(node(*n)->evicted);
  }
  auto res = http_->Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_CONTAINS(res->body, "trellis_orchestrator_samples{status=\"dropped\"} 16\n");
  EXPECT_CONTAINS(res->body, "trellis_orchestrator_submissions{status=\"dropped\"} 2\n");
}

TEST_F(Validation, ValidatorsJudgeTheLowestStepFirst) {
  start();
  const Assignment first = work(*trainer_, worker_), second = work(*trainer_, bystander_);
  EXPECT_EQ(first.step, 0);
  EXPECT_EQ(second.step, 1);
  // The step-1 file comes first; the trainer needs step 0 first.
  EXPECT_EQ(trainer_->submit(bystander_, 1, 0, file(bystander_, 1, 0)), "validating");
  EXPECT_EQ(trainer_->submit(worker_, 0, 0, file(worker_, 0, 0)), "validating");
  EXPECT_EQ(claim("v1").key.step, 0);
  EXPECT_EQ(claim("v2").key.step, 1);
}

TEST_F(Validation, AFullBacklogHoldsWorkBackAndSaysValidatorsAreBehind) {
  ApiOptions o = options();
  o.max_backlog_steps = 1;  // 8 samples waiting for a verdict or being generated
  start(o);
  EXPECT_FALSE(trainer_->status().validators_behind);
  EXPECT_EQ(send(worker_, {{0, 1, 0, 1}, {1, 0, 1, 0}}).status, "validating");
  EXPECT_CONTAINS(wait_reason(*trainer_, bystander_),
                  "the validation backlog is full: 8 samples wait for a verdict and 0 are being "
                  "generated (at most 8: orchestrator.max_backlog_steps x rl.batch_size)");
  Status s = trainer_->status();
  EXPECT_TRUE(s.validators_behind);
  EXPECT_EQ(s.validating_samples, 8);
  EXPECT_EQ(s.max_backlog_samples, 8);
  EXPECT_EQ(s.judged_samples_per_s, 0);
  // A verdict makes room.
  EXPECT_EQ(validator_->post_verdict(claim("v1").key, true, "", "v1", 8), "accepted");
  const Assignment w = work(*trainer_, bystander_, 4);
  EXPECT_EQ(w.step, 1);
  EXPECT_EQ(w.groups, 2);
  s = trainer_->status();
  EXPECT_GT(s.judged_samples_per_s, 0);
  EXPECT_FALSE(s.validators_behind) << "nothing waits for a verdict any more";
  // Work being generated counts toward the bound too, but is not validators being behind.
  trainer_->publish_version(1);  // step 2 opens
  const std::string reason = wait_reason(*trainer_, worker_, 2, 1);
  EXPECT_CONTAINS(reason, "0 samples wait for a verdict and 8 are being generated");
}

// Under join = "stake" a node registers only with the owner's deposit; a rejected file slashes
// its stake and evicts it, on the ledger, in the validator's own signed words; its key cannot come
// back whatever is deposited for it. A signed verdict that is not this one is refused.
TEST_F(Validation, StakeAdmitsARejectionSlashesAndEvictsOnTheLedger) {
  ApiOptions o = options();
  o.pool.join = "stake";
  o.pool.stake = 100;
  start(o);
  const auto registering = [&] {
    return test::error_of([&] { trainer_->register_node(worker_); });
  };
  EXPECT_CONTAINS(registering(), "trellis orchestrator stake " + worker_.address() + " 100");
  Client stranger(server_->url(), "", 10);  // only the owner deposits
  EXPECT_CONTAINS(test::error_of([&] { stranger.deposit_stake(worker_.address(), 100); }),
                  "needs the trainer's bearer token");
  EXPECT_EQ(trainer_->deposit_stake(worker_.address(), 60), 60);
  EXPECT_CONTAINS(registering(), "holds a stake of 60 work units");
  EXPECT_EQ(trainer_->deposit_stake(worker_.address(), 40), 100);
  EXPECT_EQ(send(worker_).status, "validating");  // registered now

  const ValidationClaim c = claim("v1");
  const Identity key = Identity::generate();  // the validator's own
  const auto statement = [&](bool accepted, const std::string& why) {
    return ledger::make_statement(server_->run_id(), key, "verdict",
                                  ledger::verdict_body(c.key.node_address, c.key.step,
                                                       c.key.submission, c.sha256, accepted, why),
                                  ledger::now_ms());
  };
  EXPECT_CONTAINS(test::error_of([&] {
                    validator_->post_verdict(c.key, false, "forged", "v1", 2, statement(true, ""));
                  }),
                  "is not " + key.address() + "'s signature of this verdict");
  EXPECT_EQ(validator_->post_verdict(c.key, false, "forged", "v1", 2, statement(false, "forged")),
            "rejected");
  EXPECT_CONTAINS(registering(), "was evicted");
  EXPECT_EQ(trainer_->deposit_stake(worker_.address(), 1000), 1000);  // slashed to 0 first
  EXPECT_CONTAINS(registering(), "was evicted");

  std::vector<std::string> kinds;
  ledger::ContributionTally tally;
  const sqlite::Database db(dir_ / "orchestrator.sqlite", sqlite::Database::kReadOnly);
  std::string last_hash;
  const auto v = ledger::verify(db, "", [&](const ledger::Entry& e, const Json& body) {
    kinds.push_back(e.statement.kind);
    last_hash = e.hash;
    if (e.statement.kind == "verdict") EXPECT_EQ(e.statement.author, key.address());
    if (e.statement.kind == "slash") EXPECT_EQ(body["amount"], 100);
    tally.add(e, body);
  });
  ASSERT_TRUE(v.ok) << v.problem;
  EXPECT_EQ(kinds, (std::vector<std::string>{"pool", "stake", "stake", "registration", "submission",
                                             "role", "verdict", "slash", "eviction", "stake"}));
  const auto nodes = tally.nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].staked, 1100);
  EXPECT_EQ(nodes[0].slashed, 100);
  EXPECT_EQ(nodes[0].rejected, 1);
  EXPECT_TRUE(nodes[0].evicted);
  // The head anyone may pin (public): the newest entry, kept by the orchestrator.
  const auto head = http_->Get("/ledger/head");
  ASSERT_TRUE(head);
  ASSERT_EQ(head->status, 200);
  const Json h = parse_json(head->body, "head");
  EXPECT_EQ(h["seq"], 10);
  EXPECT_EQ(h["hash"], last_hash);
  EXPECT_EQ(h["keeper"], v.keeper);
  EXPECT_EQ(h["ledger"], server_->run_id());
}

// Under join = "approval" the owner's approval admits an address; nobody else's does.
TEST_F(Validation, ApprovalAdmitsOnlyWhomTheOwnerApproves) {
  ApiOptions o = options();
  o.pool.join = "approval";
  start(o);
  EXPECT_CONTAINS(test::error_of([&] { trainer_->register_node(worker_); }),
                  "trellis orchestrator approve " + worker_.address());
  Client stranger(server_->url(), kValidatorToken, 10);
  EXPECT_CONTAINS(test::error_of([&] { stranger.approve(worker_.address()); }),
                  "needs the trainer's bearer token");
  trainer_->approve(worker_.address());
  trainer_->approve(worker_.address());  // once on the ledger
  trainer_->register_node(worker_);
  EXPECT_CONTAINS(test::error_of([&] { trainer_->register_node(bystander_); }), "not approved");
}

}  // namespace
}  // namespace trellis::orchestrator
