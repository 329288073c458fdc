// The orchestrator's HTTP API in-process on a free port, driven through the same Client the
// trainer and workers use (and raw HTTP for what a well-behaved client never sends): work is
// handed out within each step's quota and the version window, and only work handed out may be
// uploaded; signed files are accepted, listed in order and downloaded intact; the step counter
// moves only with signal samples; the version window, URL signatures, declared hashes, the work's
// size, file signatures and the schema are enforced, and nothing refused is ever listed or
// stored.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <thread>

#include <gtest/gtest.h>

#include "common/files.h"
#include "common/hashing.h"
#include "common/json.h"
#include "error_of.h"
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

class OrchestratorApi : public ApiFixture {
 protected:
  Client& start(const ApiOptions& o) {
    const int port = start_server(o);
    client_ = std::make_unique<Client>(server_->url(), o.trainer_token, 10);
    http_ = std::make_unique<httplib::Client>("127.0.0.1", port);
    http_->set_bearer_token_auth(o.trainer_token);  // as the operator (accepted files are its)
    return *client_;
  }
  Client& start() { return start(options()); }

  test::FileSpec spec(int32_t step, int32_t submission, int32_t version = 0) const {
    return {"run-test", worker_.address(), step, submission, version};
  }

  // POST /submissions for `bytes` as declared by (sha, size); the upload URL, or "" when refused.
  std::string upload_url(int32_t step, int32_t submission, const std::string& sha, size_t size) {
    const Json req{{"node_address", worker_.address()},
                   {"step", step},
                   {"submission", submission},
                   {"sha256", sha},
                   {"size", size}};
    const std::string body = req.dump();
    auto res = http_->Post("/submissions", signed_headers(worker_, "POST", "/submissions", body),
                           body, "application/json");
    if (!res || res->status != 200) return "";
    return Json::parse(res->body).at("upload_url").get<std::string>();
  }

  // PUT `bytes` to `url`, signed by `node` (the worker by default).
  httplib::Result put(const std::string& url, const std::string& bytes) {
    return put(url, bytes, worker_);
  }
  httplib::Result put(const std::string& url, const std::string& bytes, const Identity& node) {
    return http_->Put(url.c_str(), signed_headers(node, "PUT", url, bytes), bytes,
                      "application/vnd.apache.parquet");
  }

  std::vector<fs::path> stored_files() const {
    std::vector<fs::path> out;
    if (!fs::exists(dir_ / "rollouts")) return out;
    for (const auto& e : fs::recursive_directory_iterator(dir_ / "rollouts"))
      if (e.is_regular_file()) out.push_back(e.path());
    return out;
  }

  Identity worker_ = Identity::generate();
  std::unique_ptr<Client> client_;
  std::unique_ptr<httplib::Client> http_;
};

TEST_F(OrchestratorApi, AcceptsListsAndServesASignedFile) {
  Client& client = start();
  EXPECT_EQ(read_file(dir_ / "orchestrator.url"), server_->url() + "\n");
  Status s = client.status();
  EXPECT_EQ(s.run_id, "run-test");
  EXPECT_EQ(s.step, 0);
  EXPECT_EQ(s.policy_version, 0);
  EXPECT_EQ(s.steps, 4);
  EXPECT_EQ(s.batch_size, 8);
  EXPECT_EQ(s.group_size, 4);
  EXPECT_EQ(s.async_level, 1);
  EXPECT_FALSE(s.done);

  const Assignment w = work(client, worker_, 2);
  EXPECT_EQ(w.step, 0);
  EXPECT_EQ(w.submission, 0);
  EXPECT_EQ(w.groups, 2);
  EXPECT_EQ(client.status().assigned, 1);
  // One group with signal (4 rows), one without (4 rows).
  const std::string bytes = test::signed_file(spec(0, 0), {{0, 1, 0, 1}, {1, 1, 1, 1}}, worker_);
  EXPECT_EQ(client.submit(worker_, 0, 0, bytes), "accepted");

  const auto files = client.accepted(0);
  ASSERT_EQ(files.size(), 1u);
  const std::string name = worker_.address() + "-0.parquet";
  EXPECT_EQ(files[0].name, name);
  EXPECT_EQ(files[0].node_address, worker_.address());
  EXPECT_EQ(files[0].submission, 0);
  EXPECT_EQ(files[0].sha256, sha256_hex(bytes));
  EXPECT_EQ(files[0].samples, 8);
  EXPECT_EQ(files[0].signal_samples, 4);
  EXPECT_EQ(files[0].size, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(client.download(0, files[0]), bytes);
  EXPECT_EQ(read_file(dir_ / "rollouts" / "step_0" / name), bytes);
  EXPECT_TRUE(client.accepted(1).empty());

  s = client.status();
  EXPECT_EQ(s.accepted, 1);
  EXPECT_EQ(s.pending, 0);
  EXPECT_EQ(s.assigned, 0);
  EXPECT_EQ(s.step, 0);  // 4 of 8 signal samples
  EXPECT_EQ(s.generated_samples, 8);
  EXPECT_EQ(s.accepted_samples, 8);
  EXPECT_GT(s.rollout_tokens_per_s, 0);

  auto health = http_->Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok");
  auto metrics = http_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_CONTAINS(metrics->body, "trellis_orchestrator_step 0\n");
  EXPECT_CONTAINS(metrics->body, "trellis_orchestrator_submissions{status=\"accepted\"} 1\n");
  EXPECT_CONTAINS(metrics->body, "trellis_orchestrator_accepted_samples 8\n");
  EXPECT_CONTAINS(metrics->body, "trellis_orchestrator_accepted_signal_samples 4\n");
  EXPECT_CONTAINS(metrics->body, "trellis_orchestrator_samples{status=\"generated\"} 8\n");
  EXPECT_CONTAINS(metrics->body, "trellis_orchestrator_rollout_tokens_per_second ");

  // A name that is not accepted is not served, whether or not a file of that name exists.
  auto missing = http_->Get(("/rollouts/step_0/" + worker_.address() + "-1.parquet").c_str());
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_CONTAINS(error_text(missing), "not an accepted rollout file");
}

TEST_F(OrchestratorApi, StepCounterMovesOnlyWithSignalSamples) {
  Client& client = start();
  const Identity other = Identity::generate();
  EXPECT_EQ(work(client, worker_, 1).step, 0);
  client.submit(worker_, 0, 0, test::signed_file(spec(0, 0), {{0, 1, 1, 1}}, worker_));
  EXPECT_EQ(client.status().step, 0);
  // Groups without signal add samples but no signal samples.
  const Assignment second = work(client, worker_, 1);
  EXPECT_EQ(second.step, 0);
  EXPECT_EQ(second.submission, 1);
  client.submit(worker_, 0, 1, test::signed_file(spec(0, 1), {{1, 1, 1, 1}}, worker_));
  EXPECT_EQ(client.status().step, 0);
  EXPECT_EQ(work(client, other, 2).step, 0);
  const test::FileSpec from_other{"run-test", other.address(), 0, 0, 0};
  client.submit(other, 0, 0, test::signed_file(from_other, {{0, 0, 0, 0.5f}}, other));
  EXPECT_EQ(client.status().step, 1);

  const auto files = client.accepted(0);
  ASSERT_EQ(files.size(), 3u);  // in acceptance order
  EXPECT_EQ(files[0].name, worker_.address() + "-0.parquet");
  EXPECT_EQ(files[1].name, worker_.address() + "-1.parquet");
  EXPECT_EQ(files[1].signal_samples, 0);
  EXPECT_EQ(files[1].samples, 4);
  EXPECT_EQ(files[2].node_address, other.address());
  auto raw = http_->Get("/steps/0/accepted");
  ASSERT_TRUE(raw);
  const Json listing = Json::parse(raw->body);
  EXPECT_EQ(listing.at("step"), 0);
  EXPECT_EQ(listing.at("signal_samples"), 8);

  // The full step takes no more work: the next goes to step 1, and a submission number the
  // orchestrator never handed out is refused (a worker cannot grind numbers for easy prompts).
  EXPECT_EQ(work(client, worker_, 2).step, 1);
  const std::string late = test::signed_file(spec(0, 2), {{0, 1}}, worker_);
  const std::string e = test::error_of([&] { client.submit(worker_, 0, 2, late); });
  EXPECT_CONTAINS(e, "was never assigned to this node: ask for work with POST /work");
  EXPECT_EQ(client.accepted(0).size(), 3u);
}

TEST_F(OrchestratorApi, HandsOutWorkWithinTheVersionWindowAndEnforcesIt) {
  Client& client = start();  // async_level 1, policy version 0: steps 0 and 1 are open
  const Identity a = Identity::generate(), b = Identity::generate(), c = Identity::generate();
  EXPECT_EQ(work(client, worker_, 2).step, 0);  // 2 groups cover step 0's 8 signal samples
  EXPECT_EQ(work(client, a, 2).step, 1);
  EXPECT_CONTAINS(wait_reason(client, b),
                  "steps up to 1 have their samples (accepted, validating or being generated); "
                  "step 2 opens when the trainer publishes policy version 1");
  EXPECT_CONTAINS(wait_reason(client, b, 2, -1), "hold a policy version first");
  // Uploads for work never handed out: a step beyond the window, or beyond the run.
  std::string e = test::error_of([&] {
    client.submit(worker_, 2, 0, test::signed_file(spec(2, 0), {{0, 1}}, worker_));
  });
  EXPECT_CONTAINS(e, "never assigned");
  e = test::error_of([&] {
    client.submit(worker_, 4, 0, test::signed_file(spec(4, 0), {{0, 1}}, worker_));
  });
  EXPECT_CONTAINS(e, "rl.steps = 4");

  // Tokens from a version the trainer has not published yet.
  const test::FileSpec a1{"run-test", a.address(), 1, 0, /*version=*/1};
  e = test::error_of([&] { client.submit(a, 1, 0, test::signed_file(a1, {{0, 1}}, a)); });
  EXPECT_CONTAINS(e,
                  "version window: row 0: a token was sampled by policy version 1, outside [0, 0]");
  // The rejected file's share of step 1 is handed out again (to a, as submission 1).
  const Assignment again = work(client, a, 2);
  EXPECT_EQ(again.step, 1);
  EXPECT_EQ(again.submission, 1);

  EXPECT_EQ(client.submit(worker_, 0, 0,
                          test::signed_file(spec(0, 0), {{0, 1, 0, 1}, {1, 0, 1, 0}}, worker_)),
            "accepted");
  const test::FileSpec a2{"run-test", a.address(), 1, 1, 0};
  EXPECT_EQ(client.submit(a, 1, 1, test::signed_file(a2, {{0, 1, 0, 1}, {1, 0, 1, 0}}, a)),
            "accepted");
  EXPECT_EQ(client.status().step, 2);
  client.publish_version(2);
  client.publish_version(1);  // older: ignored
  EXPECT_EQ(client.status().policy_version, 2);
  // A worker still holding version 0 can do nothing for step 2 (it needs version >= 1).
  EXPECT_CONTAINS(wait_reason(client, b, 2, 0), "policy version 0 is too old");
  // Steps 2 and 3 are open now; tokens of version 1 are too old for step 3 (3 - 1 = 2).
  EXPECT_EQ(work(client, b, 2, 2).step, 2);
  const Assignment three = work(client, c, 2, 2);
  EXPECT_EQ(three.step, 3);
  const test::FileSpec stale{"run-test", c.address(), 3, 0, /*version=*/1};
  e = test::error_of([&] { client.submit(c, 3, 0, test::signed_file(stale, {{0, 1}}, c)); });
  EXPECT_CONTAINS(e, "policy version 1, outside [2, 2]");
  EXPECT_EQ(work(client, c, 2, 2).submission, 1);
  const test::FileSpec fresh{"run-test", c.address(), 3, 1, /*version=*/2};
  EXPECT_EQ(client.submit(c, 3, 1, test::signed_file(fresh, {{0, 1}}, c)), "accepted");
  const Status s = client.status();
  EXPECT_EQ(s.rejected, 2);
  EXPECT_EQ(s.accepted, 3);
  EXPECT_TRUE(client.accepted(2).empty());
  EXPECT_EQ(stored_files().size(), 3u);

  client.publish_version(4);
  EXPECT_TRUE(client.status().done);
}

TEST_F(OrchestratorApi, WorkCoversEachStepsShortfallAndNoMore) {
  Client& client = start();  // rl.batch_size 8 signal samples, rl.group_size 4
  const Identity a = Identity::generate(), b = Identity::generate(), c = Identity::generate();
  // a asks for files of 1 group: step 0 is still short of 4 signal samples after it.
  Assignment wa = work(client, a, 1);
  EXPECT_EQ(wa.step, 0);
  EXPECT_EQ(wa.groups, 1);
  // b asks for 4 groups, and gets the 1 that step 0 still needs.
  Assignment wb = work(client, b, 4);
  EXPECT_EQ(wb.step, 0);
  EXPECT_EQ(wb.groups, 1);
  // c gets step 1 (2 groups cover it); then every open step is covered.
  EXPECT_EQ(work(client, c, 4).groups, 2);
  EXPECT_CONTAINS(wait_reason(client, worker_), "steps up to 1 have their samples");
  // Asking again returns the open work (a restarted worker picks it up).
  const Assignment same = work(client, a, 3);
  EXPECT_EQ(same.step, wa.step);
  EXPECT_EQ(same.submission, wa.submission);
  EXPECT_EQ(same.groups, 1);
  EXPECT_EQ(client.status().assigned, 3);

  // A file larger than its work would take more than the step's share: rejected at upload, and
  // the share goes back to the pool.
  const test::FileSpec fa{"run-test", a.address(), 0, 0, 0};
  const std::string e = test::error_of([&] {
    client.submit(a, 0, 0, test::signed_file(fa, {{0, 1}, {1, 0}}, a));
  });
  EXPECT_CONTAINS(e, "upload: the file holds 4 rows in 2 groups; the assignment allows 1 groups");
  const Assignment wd = work(client, worker_, 4);
  EXPECT_EQ(wd.step, 0);
  EXPECT_EQ(wd.groups, 1);

  // b's group has signal, worker_'s has none: step 0 is 4 signal samples short, and at half a
  // signal sample per sample so far it takes two groups to make them up.
  const test::FileSpec fb{"run-test", b.address(), 0, 0, 0};
  EXPECT_EQ(client.submit(b, 0, 0, test::signed_file(fb, {{1, 1, 0, 0}}, b)), "accepted");
  const test::FileSpec fd{"run-test", worker_.address(), 0, static_cast<int32_t>(wd.submission), 0};
  EXPECT_EQ(
      client.submit(worker_, 0, wd.submission, test::signed_file(fd, {{1, 1, 1, 1}}, worker_)),
      "accepted");
  EXPECT_EQ(client.status().step, 0);
  const Assignment more = work(client, a, 4);
  EXPECT_EQ(more.step, 0);
  EXPECT_EQ(more.groups, 2);  // 4 signal samples short at a ratio of 4 / 8
}

TEST_F(OrchestratorApi, AnExpiredAssignmentFreesItsShareButMayStillBeUploaded) {
  ApiOptions o = options();
  o.work_lease_s = 1;
  Client& client = start(o);
  const Identity a = Identity::generate(), b = Identity::generate(), c = Identity::generate();
  EXPECT_EQ(work(client, a).step, 0);
  EXPECT_EQ(work(client, b).step, 1);
  wait_reason(client, c);
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  // a's and b's leases ran out: their shares are handed out again (a node whose lease ended
  // gets new work).
  EXPECT_EQ(work(client, c).step, 0);
  const Assignment again = work(client, a);
  EXPECT_EQ(again.step, 1);
  EXPECT_EQ(again.submission, 0);
  // b's file of its expired work still arrives and is used.
  const test::FileSpec fb{"run-test", b.address(), 1, 0, 0};
  EXPECT_EQ(client.submit(b, 1, 0, test::signed_file(fb, {{0, 1}, {1, 0}}, b)), "accepted");
  EXPECT_EQ(client.accepted(1).size(), 1u);
}

// A node that asks again and again (for its work, for an upload URL) and never delivers holds its
// share for one lease, not for ever: no request extends a lease.
TEST_F(OrchestratorApi, AskingAgainExtendsNoLease) {
  ApiOptions o = options();
  o.work_lease_s = 1;
  Client& client = start(o);
  const Identity b = Identity::generate(), c = Identity::generate();
  const Assignment first = work(client, worker_);
  EXPECT_EQ(work(client, b).step, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const Assignment again = work(client, worker_);
  EXPECT_EQ(again.step, first.step);
  EXPECT_EQ(again.submission, first.submission);
  EXPECT_DOUBLE_EQ(again.expires, first.expires);
  EXPECT_FALSE(upload_url(0, 0, std::string(64, 'a'), 100).empty());
  wait_reason(client, c);
  // Past the first lease, before the end of one renewed at 0.5 s: b's share and worker_'s are
  // both free again, so c gets the older step.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  EXPECT_EQ(work(client, c).step, 0);
}

// At most max_concurrent_uploads bodies are received at once: with one slot held by an upload
// whose body trickles in, another is refused 503 busy before its body is read, and an honest
// Client::submit waits for the slot and gets its file in.
TEST_F(OrchestratorApi, UploadsBeyondTheConcurrencyCapWaitTheirTurn) {
  ApiOptions o = options();
  o.max_concurrent_uploads = 1;
  Client& client = start(o);
  const Identity b = Identity::generate();
  work(client, worker_);
  const Assignment bw = work(client, b);
  ASSERT_EQ(bw.step, 1);  // worker_'s work took step 0's share
  const std::string slow_file = test::signed_file(spec(0, 0), {{0, 1, 1, 1}}, worker_);
  const std::string url = upload_url(0, 0, sha256_hex(slow_file), slow_file.size());
  ASSERT_FALSE(url.empty());

  // The slow upload: headers and half its body, the rest later.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(server_->port()));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  std::string head = "PUT " + url +
                     " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(slow_file.size()) +
                     "\r\nConnection: close\r\n";
  for (const auto& [k, v] : signed_headers(worker_, "PUT", url, slow_file))
    head += k + ": " + v + "\r\n";
  const std::string first = head + "\r\n" + slow_file.substr(0, slow_file.size() / 2);
  ASSERT_EQ(::send(fd, first.data(), first.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(first.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  // Another upload while the slot is held: busy, told when to retry.
  const test::FileSpec fb{"run-test", b.address(), static_cast<int32_t>(bw.step),
                          static_cast<int32_t>(bw.submission), 0};
  const std::string b_file = test::signed_file(fb, {{1, 1, 0, 0}}, b);
  const std::string body = Json{
      {"node_address", b.address()},
      {"step", bw.step},
      {"submission", bw.submission},
      {"sha256", sha256_hex(b_file)},
      {"size", b_file.size()}}.dump();
  auto declared = http_->Post("/submissions", signed_headers(b, "POST", "/submissions", body), body,
                              "application/json");
  ASSERT_TRUE(declared);
  ASSERT_EQ(declared->status, 200) << declared->body;
  const std::string b_url = Json::parse(declared->body).at("upload_url").get<std::string>();
  const auto busy = put(b_url, b_file, b);
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 503);
  EXPECT_CONTAINS(busy->body, "busy");
  EXPECT_EQ(busy->get_header_value("Retry-After"), "1");

  // b's worker keeps trying while the slow upload finishes.
  auto honest = std::async(std::launch::async,
                           [&] { return client.submit(b, bw.step, bw.submission, b_file); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  const std::string rest = slow_file.substr(slow_file.size() / 2);
  ASSERT_EQ(::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL), static_cast<ssize_t>(rest.size()));
  char reply[4096];
  const ssize_t n = ::recv(fd, reply, sizeof reply, 0);
  ::close(fd);
  ASSERT_GT(n, 12);
  EXPECT_EQ(std::string(reply, 12), "HTTP/1.1 200");
  EXPECT_EQ(honest.get(), "accepted");
  EXPECT_EQ(client.accepted(0).size(), 1u);
  EXPECT_EQ(client.accepted(1).size(), 1u);
}

TEST_F(OrchestratorApi, RefusesExpiredAndForgedUrls) {
  ApiOptions o = options();
  o.url_ttl_s = 1;
  start(o);
  work(*client_, worker_);
  const std::string bytes = test::signed_file(spec(0, 0), {{0, 1}}, worker_);
  const std::string url = upload_url(0, 0, sha256_hex(bytes), bytes.size());
  ASSERT_FALSE(url.empty());
  const size_t sig_at = url.find("&sig=") + 5;

  std::string forged = url;
  forged[sig_at] = forged[sig_at] == 'a' ? 'b' : 'a';
  std::string other_expiry = url;
  other_expiry.replace(url.find("expires=") + 8, 1, "9");
  std::string other_file = url;
  other_file.replace(url.find("-0.parquet"), 10, "-1.parquet");
  const std::string unsigned_url = url.substr(0, url.find('?'));
  for (const auto& [bad, message] :
       std::vector<std::pair<std::string, std::string>>{{forged, "signature does not match"},
                                                        {other_expiry, "signature does not match"},
                                                        {other_file, "signature does not match"},
                                                        {unsigned_url, "not signed"}}) {
    auto res = put(bad, bytes);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 403) << bad;
    EXPECT_CONTAINS(error_text(res), message);
  }

  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  auto expired = put(url, bytes);
  ASSERT_TRUE(expired);
  EXPECT_EQ(expired->status, 403);
  EXPECT_CONTAINS(error_text(expired), "expired");
  EXPECT_TRUE(client_->accepted(0).empty());
  EXPECT_TRUE(stored_files().empty());
  EXPECT_EQ(client_->status().pending, 1);  // refused URLs decide nothing

  // A fresh URL for the same submission works.
  EXPECT_EQ(client_->submit(worker_, 0, 0, bytes), "accepted");
  auto metrics = http_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_CONTAINS(metrics->body,
                  "trellis_orchestrator_uploads_refused_total{reason=\"url_expired\"} 1\n");
  EXPECT_CONTAINS(metrics->body,
                  "trellis_orchestrator_uploads_refused_total{reason=\"url_invalid\"} 4\n");
}

TEST_F(OrchestratorApi, RejectsUploadsThatDifferFromTheDeclarationOrTheSigner) {
  start();
  const Identity impostor = Identity::generate();
  // Each rejection ends its work: the next try is new work, the node's next submission number.
  int32_t next = 0;
  const auto fresh_work = [&] {
    const Assignment w = work(*client_, worker_);
    EXPECT_EQ(w.step, 0);
    EXPECT_EQ(w.submission, next);
    return next++;
  };
  std::string good = test::signed_file(spec(0, fresh_work()), {{0, 1}}, worker_);

  // Bytes other than the declared ones.
  std::string url = upload_url(0, 0, sha256_hex("something else"), good.size());
  auto res = put(url, good);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 422);
  EXPECT_CONTAINS(error_text(res), "upload: the upload's SHA-256 differs");
  // After a rejection the same URL is spent.
  res = put(url, good);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409);
  EXPECT_CONTAINS(error_text(res), "was rejected: ask POST /work for new work");

  good = test::signed_file(spec(0, fresh_work()), {{0, 1}}, worker_);
  url = upload_url(0, 1, sha256_hex(good), good.size() + 1);
  res = put(url, good);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 422);
  EXPECT_CONTAINS(error_text(res), "upload: the upload has");
  EXPECT_CONTAINS(error_text(res), "were declared");

  // Rows claiming the worker's address, signed by someone else.
  int32_t k = fresh_work();
  const std::string forged = test::signed_file(spec(0, k), {{0, 1}}, impostor);
  std::string e = test::error_of([&] { client_->submit(worker_, 0, k, forged); });
  EXPECT_CONTAINS(e, "upload rejected: signature: ");
  // Rows of another node or run or step.
  k = fresh_work();
  const test::FileSpec theirs{"run-test", impostor.address(), 0, k, 0};
  e = test::error_of([&] {
    client_->submit(worker_, 0, k, test::signed_file(theirs, {{0, 1}}, worker_));
  });
  EXPECT_CONTAINS(e, "step binding: row 0: node_address is '" + impostor.address());
  k = fresh_work();
  test::FileSpec other_run = spec(0, k);
  other_run.run_id = "another-run";
  e = test::error_of([&] {
    client_->submit(worker_, 0, k, test::signed_file(other_run, {{0, 1}}, worker_));
  });
  EXPECT_CONTAINS(e, "run_id is 'another-run'");
  k = fresh_work();
  e = test::error_of([&] {
    client_->submit(worker_, 0, k, test::signed_file(spec(1, k), {{0, 1}}, worker_));
  });
  EXPECT_CONTAINS(e, "step is '1', expected '0'");

  const Status s = client_->status();
  EXPECT_EQ(s.rejected, 6);
  EXPECT_EQ(s.accepted, 0);
  EXPECT_TRUE(client_->accepted(0).empty());
  EXPECT_TRUE(stored_files().empty());
}

TEST_F(OrchestratorApi, CorruptFilesAreRejectedAndNeverListed) {
  start();
  const std::string good = test::signed_file(spec(0, 0), {{0, 1}, {1, 0}}, worker_);
  // A byte of the signed body changed (the footer is not covered by the signature).
  std::string flipped = good;
  flipped[rollout::decode_rollout_file(good, "good").body.size() / 2] ^= 0x5a;
  const std::string empty = rollout::encode_rollout_file({}, {}, rollout::sign_body_with(worker_));
  for (const auto& [bytes, message] : std::vector<std::pair<std::string, std::string>>{
           {std::string("this is not a parquet file at all"), "schema: not a valid rollout file"},
           {good.substr(0, good.size() / 2), "schema: not a valid rollout file"},
           {flipped, ""},  // caught by the decoder or by the signature, whichever first
           {empty, "schema: the file has no rows"}}) {
    // Each rejection ends the work: each file is new work's (whose number its rows, where they
    // can be read, do not match; the checks below come first or either is fine).
    const Assignment w = work(*client_, worker_);
    const std::string e = test::error_of([&] { client_->submit(worker_, 0, w.submission, bytes); });
    EXPECT_CONTAINS(e, "upload rejected");
    EXPECT_CONTAINS(e, message);
  }
  EXPECT_EQ(client_->status().rejected, 4);
  EXPECT_TRUE(client_->accepted(0).empty());
  EXPECT_TRUE(stored_files().empty());
  auto res = http_->Get(("/rollouts/step_0/" + worker_.address() + "-0.parquet").c_str());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST_F(OrchestratorApi, RefusesADuplicateSubmission) {
  Client& client = start();
  work(client, worker_);
  const std::string bytes = test::signed_file(spec(0, 0), {{0, 1}}, worker_);
  const std::string url = upload_url(0, 0, sha256_hex(bytes), bytes.size());
  ASSERT_FALSE(url.empty());
  auto first = put(url, bytes);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200) << first->body;
  const Json answer = Json::parse(first->body);
  EXPECT_EQ(answer.at("status"), "accepted");
  EXPECT_EQ(answer.at("signal_samples"), 2);
  // The same URL again, and a new request for the same (node, step, submission).
  auto again = put(url, bytes);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 409);
  EXPECT_CONTAINS(error_text(again), "already accepted");
  const std::string e = test::error_of([&] { client.submit(worker_, 0, 0, bytes); });
  EXPECT_CONTAINS(e, "already accepted");
  EXPECT_EQ(client.accepted(0).size(), 1u);
  EXPECT_EQ(client.status().accepted, 1);
}

TEST_F(OrchestratorApi, MalformedRequestsGet400NamingTheProblem) {
  start();
  const auto post = [&](const char* path, const std::string& body) {
    // With the trainer's token, so that /trainer/version gets as far as the body.
    auto res =
        http_->Post(path, {{"Authorization", "Bearer " + kTrainerToken}}, body, "application/json");
    EXPECT_TRUE(res);
    return std::make_pair(res ? res->status : 0, error_text(res));
  };
  const std::string node = worker_.address(), sha = std::string(64, 'a');
  // `body` without `field`, or with `replace` in it.
  const auto edited = [](Json body, const std::string& field, const Json& replace) {
    if (replace.is_null()) {
      body.erase(field);
    } else {
      body[field] = replace;
    }
    return body.dump();
  };
  const auto request = [&](const std::string& field, const Json& replace = nullptr) {
    return edited(
        {{"node_address", node}, {"step", 0}, {"submission", 0}, {"sha256", sha}, {"size", 10}},
        field, replace);
  };
  for (const auto& [body, message] : std::vector<std::pair<std::string, std::string>>{
           {"{not json", "not JSON"},
           {"[1, 2]", "must be a JSON object"},
           {request("step"), "missing field 'step'"},
           {request("step", "0"), "field 'step' must be an integer"},
           {request("step", 1.5), "field 'step' must be an integer"},
           {request("step", -1), "field 'step' = -1 is out of range"},
           {request("submission"), "missing field 'submission'"},
           {request("node_address", "../../etc"), "node_address' must be 64 lowercase hex"},
           {request("node_address", 7), "field 'node_address' must be a string"},
           {request("sha256", "abc"), "field 'sha256' must be 64 lowercase hex"},
           {request("size", 0), "field 'size' = 0 is out of range"},
           {request("size", 2 << 20), "max_upload_mib"}}) {
    const auto [status, error] = post("/submissions", body);
    EXPECT_EQ(status, 400) << body;
    EXPECT_CONTAINS(error, message);
  }
  const auto ask = [&](const std::string& field, const Json& replace = nullptr) {
    return edited({{"node_address", node}, {"policy_version", 0}, {"groups", 2}}, field, replace);
  };
  for (const auto& [body, message] : std::vector<std::pair<std::string, std::string>>{
           {"{}", "missing field 'node_address'"},
           {ask("node_address", "x"), "node_address' must be 64 lowercase hex"},
           {ask("policy_version"), "missing field 'policy_version'"},
           {ask("policy_version", -2), "field 'policy_version' = -2 is out of range"},
           {ask("groups", 0), "field 'groups' = 0 is out of range"},
           {ask("groups", "many"), "field 'groups' must be an integer"}}) {
    const auto [status, error] = post("/work", body);
    EXPECT_EQ(status, 400) << body;
    EXPECT_CONTAINS(error, message);
  }
  EXPECT_EQ(client_->status().assigned, 0);
  EXPECT_EQ(post("/trainer/version", "{}").second,
            "missing field 'version' (POST /trainer/version)");
  EXPECT_EQ(post("/trainer/version", R"({"version": "3"})").first, 400);

  for (const auto& [path, status] :
       std::vector<std::pair<std::string, int>>{{"/steps/abc/accepted", 400},
                                                {"/rollouts/step_x/a.parquet", 400},
                                                {"/rollouts/step_0/" + node + "-0.parquet", 404},
                                                {"/no/such/route", 404}}) {
    auto res = http_->Get(path.c_str());
    ASSERT_TRUE(res) << path;
    EXPECT_EQ(res->status, status) << path;
    EXPECT_NE(error_text(res).find_first_not_of(' '), std::string::npos);
    EXPECT_EQ(error_text(res).rfind("not a JSON error", 0), std::string::npos) << path;
  }
  // Encoded slashes never reach the store: the route does not match, or the name is refused.
  auto escape = http_->Get("/rollouts/step_0/..%2F..%2Forchestrator.sqlite");
  ASSERT_TRUE(escape);
  EXPECT_TRUE(escape->status == 400 || escape->status == 404) << escape->status;
  auto upload = put("/upload/step_0/..%2Fx.parquet?expires=1&sig=" + std::string(64, 'a'), "x");
  ASSERT_TRUE(upload);
  EXPECT_TRUE(upload->status == 400 || upload->status == 403 || upload->status == 404)
      << upload->status;
  // Still serving.
  EXPECT_EQ(client_->status().step, 0);
}

TEST_F(OrchestratorApi, PublishingAVersionNeedsTheTrainerToken) {
  ApiOptions o = options();
  start(o);
  Client anonymous(server_->url(), "", 10), wrong(server_->url(), kValidatorToken, 10);
  EXPECT_CONTAINS(test::error_of([&] { anonymous.publish_version(1); }), "bearer token");
  EXPECT_CONTAINS(test::error_of([&] { wrong.publish_version(1); }), "bearer token");
  EXPECT_EQ(client_->status().policy_version, 0);
  client_->publish_version(1);  // the client that knows the token
  EXPECT_EQ(anonymous.status().policy_version, 1);
}

TEST_F(OrchestratorApi, NodeRequestsAreSignedByTheNodeTheyNameAndBodiesAreBounded) {
  start();
  const Identity impostor = Identity::generate();
  // Work is for registered nodes.
  EXPECT_CONTAINS(test::error_of([&] { client_->request_work(worker_, 0, 2); }),
                  "is not registered: register with POST /nodes first");
  work(*client_, worker_);
  const std::string bytes = test::signed_file(spec(0, 0), {{0, 1}}, worker_);
  // Nobody else may declare the worker's hash (and so make its upload fail) ...
  const std::string declare = Json{
      {"node_address", worker_.address()},
      {"step", 0},
      {"submission", 0},
      {"sha256", std::string(64, 'f')},
      {"size", 10}}.dump();
  auto res = http_->Post("/submissions", signed_headers(impostor, "POST", "/submissions", declare),
                         declare, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_CONTAINS(error_text(res), "but is signed by " + impostor.address());
  // ... nor upload on its URL.
  const std::string url = upload_url(0, 0, sha256_hex(bytes), bytes.size());
  ASSERT_FALSE(url.empty());
  res = put(url, bytes, impostor);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  EXPECT_TRUE(client_->accepted(0).empty());
  EXPECT_EQ(client_->status().pending, 1);
  // A body beyond the route's limit, chunked or compressed is refused before it is read.
  res = http_->Post("/work", std::string(65 << 10, ' '), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  res = http_->Post("/submissions", {{"Content-Encoding", "gzip"}}, declare, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 415);
  // An upload whose URL this server did not sign never has its body read.
  res = put(url.substr(0, url.find("&sig=")) + "&sig=" + std::string(64, '0'), bytes);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 403);
  // The worker's own upload still goes through.
  res = put(url, bytes);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

TEST_F(OrchestratorApi, ARestartedServerCarriesOn) {
  start();
  const Identity other = Identity::generate();
  work(*client_, worker_);
  const std::string bytes = test::signed_file(spec(0, 0), {{0, 1, 0, 1}, {1, 0, 1, 0}}, worker_);
  client_->submit(worker_, 0, 0, bytes);
  client_->publish_version(1);
  EXPECT_EQ(work(*client_, worker_, 2, 1).step, 1);
  const std::string pending = test::signed_file(spec(1, 0, 1), {{0, 1}}, worker_);
  const std::string url = upload_url(1, 0, sha256_hex(pending), pending.size());
  const Assignment open = work(*client_, other, 2, 1);  // step 2, not started before the restart
  // A signed request captured before the restart (the nonces it was checked against are gone).
  const std::string ask =
      Json{{"node_address", other.address()}, {"policy_version", 1}, {"groups", 2}}.dump();
  const auto captured = signed_headers(other, "POST", "/work", ask);
  auto res = http_->Post("/work", captured, ask, "application/json");
  ASSERT_TRUE(res && res->status == 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // signed a second before
  server_->stop();
  EXPECT_FALSE(fs::exists(dir_ / "orchestrator.url"));

  ApiOptions o = options();
  o.run_id = "a-new-name";  // ignored: the run ID was fixed at the first start
  start(o);
  const Status s = client_->status();
  EXPECT_EQ(s.run_id, "run-test");
  EXPECT_EQ(s.step, 1);
  EXPECT_EQ(s.policy_version, 1);
  EXPECT_EQ(s.pending, 1);
  const auto accepted = client_->accepted(0);
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_EQ(accepted[0].name, worker_.address() + "-0.parquet");
  EXPECT_EQ(client_->download(0, accepted[0]), bytes);
  EXPECT_EQ(s.assigned, 1);
  // Open work is still the node's, and an upload URL handed out before the restart still good.
  const Assignment same = work(*client_, other, 2, 1);
  EXPECT_EQ(same.step, open.step);
  EXPECT_EQ(same.submission, open.submission);
  res = http_->Post("/work", captured, ask, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_CONTAINS(res->body, "before this server started");
  res = put(url, pending);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(client_->accepted(1).size(), 1u);
}

TEST(OrchestratorOptions, ComeFromTheConfigAndTheRunDirectory) {
  Config config = Config::defaults();
  ApiOptions o = api_options(config, "/tmp/runs/my-run-20260101/");
  // The run directory's name and 64 random bits: a file of one run never passes in another.
  EXPECT_EQ(o.run_id.substr(0, 16), "my-run-20260101-");
  EXPECT_EQ(o.run_id.size(), 16u + 16u);
  EXPECT_NE(api_options(config, "/tmp/runs/my-run-20260101/").run_id, o.run_id);
  EXPECT_EQ(o.data_dir, fs::path("/tmp/runs/my-run-20260101/"));
  EXPECT_EQ(o.steps, config.get<int64_t>("rl.steps"));
  EXPECT_EQ(o.batch_size, config.get<int64_t>("rl.batch_size"));
  EXPECT_EQ(o.async_level, config.get<int64_t>("rl.async_level"));
  EXPECT_EQ(o.max_upload_bytes, config.get<int64_t>("orchestrator.max_upload_mib") << 20);

  config.apply_override("orchestrator.data_dir=/tmp/elsewhere");
  config.apply_override("orchestrator.port=0");
  o = api_options(config, "runs/abc");
  EXPECT_EQ(o.data_dir, fs::path("/tmp/elsewhere"));
  EXPECT_EQ(o.run_id.substr(0, 4), "abc-");
  EXPECT_EQ(o.port, 0);
  config.apply_override("orchestrator.port=70000");
  EXPECT_CONTAINS(test::error_of([&] { api_options(config, "runs/abc"); }), "orchestrator.port");
  config.apply_override("orchestrator.port=0");
  EXPECT_EQ(api_options(config, "runs/abc").work_lease_s,
            config.get<int64_t>("orchestrator.work_lease_s"));
  EXPECT_EQ(api_options(config, "runs/abc").max_backlog_steps, 2.0);
  config.apply_override("orchestrator.max_backlog_steps=0.01");  // less than one group
  EXPECT_CONTAINS(test::error_of([&] { api_options(config, "runs/abc"); }),
                  "orchestrator.max_backlog_steps");
  config.apply_override("orchestrator.max_backlog_steps=2.0");
  EXPECT_EQ(api_options(config, "runs/abc").pool.registration_ttl_s, 600);
  // A lifetime a live worker's registrations (every minute) could not keep up with.
  config.apply_override("orchestrator.registration_ttl_s=90");
  const std::string short_ttl = test::error_of([&] { api_options(config, "runs/abc"); });
  EXPECT_CONTAINS(short_ttl, "orchestrator.registration_ttl_s");
  EXPECT_CONTAINS(short_ttl, "register again every 60 s");
}

}  // namespace
}  // namespace trellis::orchestrator
