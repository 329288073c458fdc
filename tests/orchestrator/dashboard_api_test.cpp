// The dashboard's server side (api_dashboard.cpp), in-process on a free port: nothing without the
// operator's token (as a bearer token or a Basic password), strict headers on every answer, the
// summary built from what the trainer, relays, heartbeats, validators and the ledger reported,
// a rejection split into the checks that decided it, bounded pages, bounded reports; and the
// ledger audit that finds an entry edited in place. The page itself is checked in a browser by
// tests/dashboard.
#include <httplib.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/base64.h"
#include "common/json.h"
#include "common/sqlite.h"
#include "orchestrator/api_fixture.h"
#include "orchestrator/client.h"
#include "orchestrator/ledger_audit.h"
#include "orchestrator/reject_reason.h"
#include "orchestrator/state.h"
#include "rollout_fixtures.h"

namespace trellis::orchestrator {
namespace {

class Dashboard : public ApiFixture {
 protected:
  void start() {
    ApiOptions o = options();
    o.pool.validation = true;
    const int port = start_server(o);
    trainer_ = std::make_unique<Client>(server_->url(), kTrainerToken, 10);
    validator_ = std::make_unique<Client>(server_->url(), kValidatorToken, 10);
    http_ = std::make_unique<httplib::Client>("127.0.0.1", port);
  }

  // `node`'s file for new work, uploaded; it waits for a verdict.
  SubmissionKey upload(const Identity& node) {
    const Assignment w = work(*trainer_, node, 1);
    const std::string bytes =
        test::signed_file({"run-test", node.address(), static_cast<int32_t>(w.step),
                           static_cast<int32_t>(w.submission), 0},
                          {{0, 1, 0, 1}}, node);
    EXPECT_EQ(trainer_->submit(node, w.step, w.submission, bytes), "validating");
    return {w.step, node.address(), w.submission};
  }

  httplib::Result get(const std::string& path, const std::string& authorization) {
    httplib::Headers h;
    if (!authorization.empty()) h.emplace("Authorization", authorization);
    return http_->Get(path, h);
  }
  static std::string bearer(const std::string& token) { return "Bearer " + token; }
  static std::string basic(const std::string& user, const std::string& password) {
    return "Basic " + base64_encode(user + ":" + password);
  }
  Json get_json(const std::string& path) {
    const auto res = get(path, bearer(kTrainerToken));
    EXPECT_TRUE(res && res->status == 200) << path << ": " << error_text(res);
    return res ? Json::parse(res->body, nullptr, false) : Json();
  }
  httplib::Result post(const std::string& path, const Json& body, const std::string& token) {
    return http_->Post(path, {{"Authorization", bearer(token)}}, body.dump(), "application/json");
  }

  std::unique_ptr<Client> trainer_, validator_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(Dashboard, EveryRouteNeedsTheOperatorsTokenAndAnswersWithStrictHeaders) {
  start();
  for (const char* path :
       {"/dashboard", "/dashboard/", "/dashboard/app.js", "/dashboard/api/summary",
        "/dashboard/api/submissions", "/dashboard/api/submissions/1", "/dashboard/api/ledger",
        "/dashboard/api/nodes/00/logs"}) {
    for (const std::string& auth :
         {std::string(), basic("operator", "wrong-" + kTrainerToken), basic("x", kValidatorToken),
          bearer(kRelayToken), std::string("Basic not-base64!"), basic(kTrainerToken, ""),
          std::string("Basic ") + base64_encode(kTrainerToken)}) {  // no colon: no password
      const auto res = get(path, auth);
      ASSERT_TRUE(res) << path;
      EXPECT_EQ(res->status, 401) << path << " with '" << auth << "'";
      // A browser asks its user for the token, and even a refusal runs no script of ours.
      EXPECT_EQ(res->get_header_value("WWW-Authenticate"), R"(Basic realm="Trellis dashboard")");
      EXPECT_NE(res->get_header_value("Content-Security-Policy").find("script-src 'self'"),
                std::string::npos);
    }
  }
  const auto page = get("/dashboard", basic("operator", kTrainerToken));
  ASSERT_TRUE(page && page->status == 200) << error_text(page);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->body.find("/dashboard/app.js"), std::string::npos);
  EXPECT_EQ(page->get_header_value("Content-Security-Policy"),
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
  EXPECT_EQ(page->get_header_value("X-Frame-Options"), "DENY");
  EXPECT_EQ(page->get_header_value("Cache-Control"), "no-store");
  const auto script = get("/dashboard/app.js", bearer(kTrainerToken));
  ASSERT_TRUE(script && script->status == 200);
  EXPECT_EQ(script->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(get("/dashboard/other.js", bearer(kTrainerToken))->status, 404);
  // The Basic form is the dashboard's only: other operator routes take the bearer token.
  EXPECT_EQ(get("/nodes", basic("operator", kTrainerToken))->status, 401);
}

TEST_F(Dashboard, TheSummaryShowsWhatEachRoleReported) {
  start();
  const Identity worker = Identity::generate(), bystander = Identity::generate();
  // The trainer's step metrics, a relay's holdings, a heartbeat's agent state.
  trainer_->report_metrics(0, {{"reward/mean", 0.25}, {"seq_len/mean", 20.5}});
  trainer_->report_metrics(1, {{"reward/mean", 0.5}, {"mismatch/k3", nullptr}});
  ASSERT_EQ(post("/relays",
                 {{"name", "relay-0"},
                  {"url", "http://127.0.0.1:9"},
                  {"versions", {1, 2}},
                  {"shards_pulled", 7}},
                 kRelayToken)
                ->status,
            200);
  Client(server_->url()).register_node(bystander);
  ASSERT_EQ(Client(server_->url()).heartbeat(bystander, "running worker").refused, "");
  // A file a validator rejects, and one it accepts.
  const SubmissionKey bad = upload(worker);
  ASSERT_TRUE(validator_->claim_validation("v1").claim);
  ASSERT_EQ(validator_->post_verdict(bad, false, "toploc: chunk 2 is off", "v1", 4), "rejected");
  const SubmissionKey good = upload(bystander);
  ASSERT_TRUE(validator_->claim_validation("v1").claim);
  ASSERT_EQ(validator_->post_verdict(good, true, "", "v1", 4), "accepted");

  const Json s = get_json("/dashboard/api/summary");
  EXPECT_EQ(s.at("status").at("rejected"), 1);
  ASSERT_EQ(s.at("training").size(), 2u);
  EXPECT_EQ(s.at("training")[0].at("step"), 0);
  EXPECT_EQ(s.at("training")[1].at("metrics").at("reward/mean"), 0.5);
  EXPECT_TRUE(s.at("training")[1].at("metrics").at("mismatch/k3").is_null());
  ASSERT_EQ(s.at("relays").size(), 1u);
  EXPECT_EQ(s.at("relays")[0].at("versions"), Json({1, 2}));
  EXPECT_EQ(s.at("relays")[0].at("shards_pulled"), 7);
  EXPECT_EQ(s.at("relays")[0].at("pull_failures"), 0);
  std::map<std::string, Json> nodes;
  for (const Json& n : s.at("nodes")) nodes[n.at("address").get<std::string>()] = n;
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[bystander.address()].at("state"), "healthy");
  EXPECT_EQ(nodes[bystander.address()].at("agent_state"), "running worker");
  EXPECT_EQ(nodes[bystander.address()].at("accepted"), 1);  // from the verified ledger
  EXPECT_GT(nodes[bystander.address()].at("work_units").get<int64_t>(), 0);
  EXPECT_EQ(nodes[worker.address()].at("state"), "evicted");
  EXPECT_EQ(nodes[worker.address()].at("rejected"), 1);
  EXPECT_EQ(nodes[worker.address()].at("rejections"), 1);
  EXPECT_FALSE(nodes[worker.address()].at("has_logs"));  // it never joined by invite
  const Json& v = s.at("validation");
  ASSERT_EQ(v.at("validators").size(), 1u);
  EXPECT_EQ(v.at("validators")[0].at("name"), "v1");
  EXPECT_EQ(v.at("validators")[0].at("accepted"), 1);
  EXPECT_EQ(v.at("validators")[0].at("rejected"), 1);
  EXPECT_EQ(v.at("validators")[0].at("samples_last_minute"), 8);
  const Json& ledger = s.at("ledger");
  EXPECT_TRUE(ledger.at("ok")) << ledger.dump();
  EXPECT_EQ(ledger.at("verified"), ledger.at("checked_seq"));
  EXPECT_GE(ledger.at("seq").get<int64_t>(), ledger.at("verified").get<int64_t>());
}

TEST_F(Dashboard, ARejectionOpensWithTheChecksThatDecidedItAndItsLedgerEntries) {
  start();
  const Identity worker = Identity::generate();
  const SubmissionKey key = upload(worker);
  ASSERT_TRUE(validator_->claim_validation("v1").claim);
  ASSERT_EQ(
      validator_->post_verdict(
          key, false, "toploc: chunk 2 exceeds 8 mismatches; sampling: token 5; p < 1e-6", "v1", 4),
      "rejected");
  const Json page = get_json("/dashboard/api/submissions?status=rejected");
  ASSERT_EQ(page.at("submissions").size(), 1u);
  const int64_t id = page.at("submissions")[0].at("id");
  const Json d = get_json("/dashboard/api/submissions/" + std::to_string(id));
  EXPECT_EQ(d.at("node"), worker.address());
  EXPECT_EQ(d.at("status"), "rejected");
  EXPECT_EQ(d.at("checks"),
            Json::parse(R"([{"check": "toploc", "finding": "chunk 2 exceeds 8 mismatches"},
                            {"check": "sampling", "finding": "token 5; p < 1e-6"}])"));
  std::vector<std::string> kinds;
  for (const Json& e : d.at("ledger")) {
    kinds.push_back(e.at("kind"));
    EXPECT_TRUE(e.at("verified")) << e.dump();
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"submission", "verdict"}));
  EXPECT_EQ(get("/dashboard/api/submissions/999", bearer(kTrainerToken))->status, 404);
  EXPECT_EQ(get("/dashboard/api/submissions/x1", bearer(kTrainerToken))->status, 400);
}

TEST_F(Dashboard, PagesAreBoundedAndMalformedQueriesAreRefused) {
  start();
  for (int i = 0; i < 3; ++i) upload(Identity::generate());
  const Json first = get_json("/dashboard/api/submissions?limit=2");
  ASSERT_EQ(first.at("submissions").size(), 2u);
  EXPECT_GT(first.at("submissions")[0].at("id"), first.at("submissions")[1].at("id"));
  const int64_t next = first.at("next_before_id");
  const Json second =
      get_json("/dashboard/api/submissions?limit=2&before_id=" + std::to_string(next));
  ASSERT_EQ(second.at("submissions").size(), 1u);
  EXPECT_TRUE(second.at("next_before_id").is_null());
  const Json ledger = get_json("/dashboard/api/ledger?limit=2");
  ASSERT_EQ(ledger.at("entries").size(), 2u);
  EXPECT_EQ(ledger.at("entries")[0].at("seq").get<int64_t>(),
            ledger.at("verification").at("seq").get<int64_t>());
  EXPECT_EQ(ledger.at("entries")[1].at("seq").get<int64_t>(),
            ledger.at("next_before_seq").get<int64_t>());
  for (const char* path :
       {"/dashboard/api/submissions?limit=0", "/dashboard/api/submissions?limit=201",
        "/dashboard/api/submissions?status=all", "/dashboard/api/submissions?before_id=-1",
        "/dashboard/api/ledger?limit=1000000", "/dashboard/api/ledger?before_seq=x"}) {
    const auto res = get(path, bearer(kTrainerToken));
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << path;
  }
}

TEST_F(Dashboard, ReportsAreCheckedAndBounded) {
  start();
  // Step metrics: the trainer's token, an object of named numbers.
  EXPECT_EQ(post("/trainer/metrics", {{"step", 0}, {"metrics", {{"a", 1}}}}, kRelayToken)->status,
            401);
  Json many = Json::object();
  for (int i = 0; i < 257; ++i) many["m" + std::to_string(i)] = i;
  for (const Json& bad :
       {Json{{"step", 0}, {"metrics", {{"a", "text"}}}}, Json{{"step", 0}, {"metrics", many}},
        Json{{"step", 0}, {"metrics", {{std::string(65, 'x'), 1}}}},
        Json{{"step", -1}, {"metrics", Json::object()}}, Json{{"step", 0}, {"metrics", {1, 2}}}}) {
    const auto res = post("/trainer/metrics", bad, kTrainerToken);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << bad.dump().substr(0, 200);
  }
  // Relay reports: the relays' token, bounded names and versions, and at most 64 relays kept.
  const Json report = {{"name", "r"}, {"url", "http://127.0.0.1:9"}, {"versions", {1}}};
  EXPECT_EQ(post("/relays", report, kValidatorToken)->status, 401);
  for (const Json& bad : {Json{{"name", ""}, {"url", "u"}, {"versions", Json::array()}},
                          Json{{"name", "a\nb"}, {"url", "u"}, {"versions", Json::array()}},
                          Json{{"name", "r"}, {"url", "u"}, {"versions", {-1}}},
                          Json{{"name", "r"}, {"url", "u"}, {"versions", std::vector<int>(65, 1)}},
                          Json{{"name", "r"}, {"url", std::string(300, 'u')}, {"versions", {1}}},
                          Json{{"name", "r"}, {"url", "u"}}}) {
    const auto res = post("/relays", bad, kRelayToken);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << bad.dump().substr(0, 200);
  }
  for (int i = 0; i < 70; ++i) {
    Json r = report;
    r["name"] = "relay-" + std::to_string(i);
    ASSERT_EQ(post("/relays", r, kRelayToken)->status, 200);
  }
  const Json relays = get_json("/dashboard/api/summary").at("relays");
  ASSERT_EQ(relays.size(), 64u);
  for (const Json& r : relays) EXPECT_NE(r.at("name"), "relay-0");  // the oldest went first
}

TEST(RejectReason, SplitsAtEachCheckNameOnly) {
  const auto f = reason_findings("schema: row 3; column 2 bad; data sampling: group 7 not drawn");
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].check, "schema");
  EXPECT_EQ(f[0].message, "row 3; column 2 bad");
  EXPECT_EQ(f[1].check, "data sampling");
  EXPECT_EQ(f[1].message, "group 7 not drawn");
  const auto plain = reason_findings("node 0af3 was evicted: rejected");
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].check, "");
  EXPECT_EQ(plain[0].message, "node 0af3 was evicted: rejected");
  EXPECT_TRUE(reason_findings("").empty());
}

TEST(LedgerAudit, AnEntryEditedInPlaceIsFoundOnceTheVerificationIsDue) {
  const auto dir = std::filesystem::temp_directory_path() / "trellis_ledger_audit_test";
  std::filesystem::remove_all(dir);
  const Identity keeper = Identity::generate();
  {
    State state(dir / "orchestrator.sqlite", "run-test", keeper);
    state.register_node(Identity::generate().address(), "10.0.0.1", 1, 1.0);
  }
  LedgerAudit audit(dir / "orchestrator.sqlite", keeper.address(), /*min_interval_s=*/5,
                    /*max_age_s=*/60);
  const auto before = audit.current(100);
  ASSERT_TRUE(before->verification.ok) << before->verification.problem;
  ASSERT_GE(before->verification.verified, 2);
  {
    const sqlite::Database db(dir / "orchestrator.sqlite", sqlite::Database::kReadWrite);
    db.exec("UPDATE ledger SET body = replace(body, '10.0.0.1', '10.6.6.6') WHERE seq = 2");
  }
  EXPECT_TRUE(audit.current(130)->verification.ok);  // the same head: the last check stands
  const auto after = audit.current(161);             // until it is a minute old
  EXPECT_FALSE(after->verification.ok);
  EXPECT_EQ(after->verification.broken_seq, 2);
  EXPECT_EQ(after->verification.verified, 1);
  const Json page = audit.page(INT64_MAX, 10, after->verification.verified);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_FALSE(page[0].at("verified"));
  EXPECT_TRUE(page[1].at("verified"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace trellis::orchestrator
