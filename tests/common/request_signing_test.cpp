// Signed requests: what a signature binds (run, method, target, time, nonce, body), the timestamp
// window, replays, and the nonce memory's bound.
#include "common/request_signing.h"

#include <gtest/gtest.h>

#include <map>

#include "common/hashing.h"

namespace trellis {
namespace {

const std::string kClient = "203.0.113.7";  // the address requests come from

SignedHeaders headers_of(const std::vector<std::pair<std::string, std::string>>& list) {
  std::map<std::string, std::string> m(list.begin(), list.end());
  return {m[kSignerHeader], m[kTimestampHeader], m[kNonceHeader], m[kSignatureHeader]};
}

TEST(RequestSigning, AHonestRequestPassesOnceAndEveryAlterationFails) {
  const Identity node = Identity::generate();
  NonceWindow nonces(60, 1000, 1000, 0);
  const int64_t now = 1'000'000;
  const auto h =
      headers_of(sign_request(node, "run-1", "POST", "/work", sha256_hex("{\"a\":1}"), now));
  EXPECT_EQ(check_signed_request(h, "run-1", "POST", "/work", sha256_hex("{\"a\":1}"), now, kClient,
                                 nonces),
            SignatureCheck::kOk);
  EXPECT_EQ(check_signed_request(h, "run-1", "POST", "/work", sha256_hex("{\"a\":1}"), now, kClient,
                                 nonces),
            SignatureCheck::kReplayed);
  // Each alteration is caught before the nonce is consulted (a fresh window would pass it).
  NonceWindow fresh(60, 1000, 1000, 0);
  EXPECT_EQ(check_signed_request(h, "run-2", "POST", "/work", sha256_hex("{\"a\":1}"), now, kClient,
                                 fresh),
            SignatureCheck::kBadSignature);
  EXPECT_EQ(check_signed_request(h, "run-1", "PUT", "/work", sha256_hex("{\"a\":1}"), now, kClient,
                                 fresh),
            SignatureCheck::kBadSignature);
  EXPECT_EQ(check_signed_request(h, "run-1", "POST", "/work?x=1", sha256_hex("{\"a\":1}"), now,
                                 kClient, fresh),
            SignatureCheck::kBadSignature);
  EXPECT_EQ(check_signed_request(h, "run-1", "POST", "/work", sha256_hex("{\"a\":2}"), now, kClient,
                                 fresh),
            SignatureCheck::kBadSignature);
  SignedHeaders other = h;
  other.signer = Identity::generate().address();  // claims another node
  EXPECT_EQ(check_signed_request(other, "run-1", "POST", "/work", sha256_hex("{\"a\":1}"), now,
                                 kClient, fresh),
            SignatureCheck::kBadSignature);
  other = h;
  other.timestamp = std::to_string(now + 1);
  EXPECT_EQ(check_signed_request(other, "run-1", "POST", "/work", sha256_hex("{\"a\":1}"), now,
                                 kClient, fresh),
            SignatureCheck::kBadSignature);
  // None of those consumed the nonce: the honest request still passes in the fresh window.
  EXPECT_EQ(check_signed_request(h, "run-1", "POST", "/work", sha256_hex("{\"a\":1}"), now, kClient,
                                 fresh),
            SignatureCheck::kOk);
}

TEST(RequestSigning, StaleMissingAndMalformedHeadersAreRefused) {
  const Identity node = Identity::generate();
  NonceWindow nonces(60, 1000, 1000, 0);
  const int64_t now = 1'000'000;
  const auto old = headers_of(sign_request(node, "r", "GET", "/x", sha256_hex(""), now - 61));
  EXPECT_EQ(check_signed_request(old, "r", "GET", "/x", sha256_hex(""), now, kClient, nonces),
            SignatureCheck::kStale);
  const auto ahead = headers_of(sign_request(node, "r", "GET", "/x", sha256_hex(""), now + 61));
  EXPECT_EQ(check_signed_request(ahead, "r", "GET", "/x", sha256_hex(""), now, kClient, nonces),
            SignatureCheck::kStale);
  EXPECT_NE(describe(SignatureCheck::kStale, old, now, 60).find("clock"), std::string::npos);
  EXPECT_EQ(check_signed_request({}, "r", "GET", "/x", sha256_hex(""), now, kClient, nonces),
            SignatureCheck::kMissing);
  SignedHeaders bad = headers_of(sign_request(node, "r", "GET", "/x", sha256_hex(""), now));
  bad.timestamp = "12x";
  EXPECT_EQ(check_signed_request(bad, "r", "GET", "/x", sha256_hex(""), now, kClient, nonces),
            SignatureCheck::kMalformed);
  bad = headers_of(sign_request(node, "r", "GET", "/x", sha256_hex(""), now));
  bad.nonce = "short";
  EXPECT_EQ(check_signed_request(bad, "r", "GET", "/x", sha256_hex(""), now, kClient, nonces),
            SignatureCheck::kMalformed);
  bad = headers_of(sign_request(node, "r", "GET", "/x", sha256_hex(""), now));
  bad.timestamp = "99999999999999999999999";  // overflows int64
  EXPECT_EQ(check_signed_request(bad, "r", "GET", "/x", sha256_hex(""), now, kClient, nonces),
            SignatureCheck::kMalformed);
}

TEST(RequestSigning, TheNonceMemoryIsBoundedAndForgetsOldNonces) {
  NonceWindow nonces(60, 3, 3, 0);
  EXPECT_EQ(nonces.record("a", "1", 100, 100, kClient), NonceWindow::Result::kFresh);
  EXPECT_EQ(nonces.record("a", "2", 100, 100, kClient), NonceWindow::Result::kFresh);
  EXPECT_EQ(nonces.record("b", "1", 100, 100, kClient), NonceWindow::Result::kFresh);  // per signer
  EXPECT_EQ(nonces.record("a", "3", 100, 100, kClient), NonceWindow::Result::kFull);
  EXPECT_EQ(nonces.record("a", "1", 100, 150, kClient), NonceWindow::Result::kReplayed);
  // Once the window has passed, a replay fails the timestamp check instead, so nonces go.
  EXPECT_EQ(nonces.record("a", "3", 200, 200, kClient), NonceWindow::Result::kFresh);
}

// One machine cannot fill the window for everyone: each client address (an IPv6 /64) holds at
// most `per_address` of its nonces. Without the bound, the flood from 203.0.113.7 below, signed
// with a fresh key each time, took the whole window and the other client got kFull.
TEST(RequestSigning, OneAddressFillsOnlyItsOwnShareOfTheNonceWindow) {
  NonceWindow nonces(60, 10, 4, 0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(nonces.record("key" + std::to_string(i), "1", 100, 100, "203.0.113.7"),
              NonceWindow::Result::kFresh);
  }
  for (int i = 4; i < 20; ++i) {
    EXPECT_EQ(nonces.record("key" + std::to_string(i), "1", 100, 100, "203.0.113.7"),
              NonceWindow::Result::kFull);
  }
  EXPECT_EQ(nonces.record("key0", "1", 100, 100, "203.0.113.7"), NonceWindow::Result::kReplayed);
  EXPECT_EQ(nonces.record("honest", "1", 100, 100, "198.51.100.1"), NonceWindow::Result::kFresh);
  // An IPv6 subscriber is its /64, and an IPv4-mapped address is the IPv4 one.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(
        nonces.record("v6", std::to_string(i), 100, 100, "2001:db8::" + std::to_string(i + 1)),
        NonceWindow::Result::kFresh);
  }
  EXPECT_EQ(nonces.record("v6", "9", 100, 100, "2001:db8::ffff"), NonceWindow::Result::kFull);
  EXPECT_EQ(nonces.record("mapped", "1", 100, 100, "::ffff:203.0.113.7"),
            NonceWindow::Result::kFull);
  // The total bound still holds (4 + 1 + 4 of 10), and the window's end frees each share.
  EXPECT_EQ(nonces.record("other", "1", 100, 100, "192.0.2.1"), NonceWindow::Result::kFresh);
  EXPECT_EQ(nonces.record("other", "2", 100, 100, "192.0.2.2"), NonceWindow::Result::kFull);
  EXPECT_EQ(nonces.record("key9", "1", 200, 200, "203.0.113.7"), NonceWindow::Result::kFresh);
  EXPECT_EQ(nonces.record("other", "2", 200, 200, "192.0.2.2"), NonceWindow::Result::kFresh);
}

// Nonces live in memory: a request signed before the window opened (the server's start) may
// have been seen by its previous run, so it is refused even within the timestamp window.
TEST(RequestSigning, ARequestSignedBeforeTheServerStartedIsRefused) {
  const Identity node = Identity::generate();
  const int64_t start = 1'000'000;
  NonceWindow nonces(60, 1000, 1000, start);
  const auto before =
      headers_of(sign_request(node, "r", "POST", "/work", sha256_hex(""), start - 1));
  EXPECT_EQ(check_signed_request(before, "r", "POST", "/work", sha256_hex(""), start + 5, kClient,
                                 nonces),
            SignatureCheck::kBeforeStart);
  EXPECT_NE(describe(SignatureCheck::kBeforeStart, before, start + 5, 60).find("sign it again"),
            std::string::npos);
  const auto after = headers_of(sign_request(node, "r", "POST", "/work", sha256_hex(""), start));
  EXPECT_EQ(
      check_signed_request(after, "r", "POST", "/work", sha256_hex(""), start + 5, kClient, nonces),
      SignatureCheck::kOk);
}

TEST(Hashing, ConstantTimeEqualAndRandomHex) {
  EXPECT_TRUE(constant_time_equal("token", "token"));
  EXPECT_FALSE(constant_time_equal("token", "tokem"));
  EXPECT_FALSE(constant_time_equal("token", "token "));
  EXPECT_FALSE(constant_time_equal("", "x"));
  const std::string a = random_hex(16), b = random_hex(16);
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace trellis
