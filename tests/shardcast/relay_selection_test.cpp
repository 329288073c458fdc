// Relay choice: the spec's EMA updates and healing against values worked by hand, draws in
// proportion to success x bandwidth, and always-fastest for comparison.
#include "shardcast/relay_selection.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "shardcast/access_control.h"

namespace trellis::shardcast {
namespace {

TEST(ShardcastRelaySelection, UpdatesFollowTheSpecsMovingAveragesAndHealing) {
  RelaySelector s({"a", "b"}, RelayChoice::Weighted, 1);
  s.seed(0, true, 100);
  s.seed(1, false, 0);
  s.record(0, true, 2000, 10);  // sample 200 B/s
  auto st = s.stats();
  EXPECT_NEAR(st[0].bandwidth, 0.3 * 200 + 0.7 * 100, 1e-9);  // 130
  EXPECT_NEAR(st[0].success, 1.0, 1e-12);                     // 0.3 + 0.7, healed, capped at 1
  EXPECT_NEAR(st[1].success, 0.01, 1e-12);                    // only healing
  s.record(0, false, 0, 5);  // a failure counts as bandwidth 0, not its time-out
  st = s.stats();
  EXPECT_NEAR(st[0].bandwidth, 0.7 * 130, 1e-9);
  EXPECT_NEAR(st[0].success, 0.7 + 0.01, 1e-12);
  EXPECT_NEAR(st[1].success, 0.02, 1e-12);
  EXPECT_EQ(st[0].downloads, 2);
  EXPECT_EQ(st[0].failures, 1);
}

TEST(ShardcastRelaySelection, WeightedDrawsFollowSuccessTimesBandwidth) {
  RelaySelector s({"a", "b", "c"}, RelayChoice::Weighted, 7);
  s.seed(0, true, 300);
  s.seed(1, true, 100);
  s.seed(2, true, 600);
  std::vector<int> counts(3, 0);
  const int n = 30000;
  for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.choose({true, true, true}))];
  EXPECT_NEAR(counts[0] / double(n), 0.3, 0.015);
  EXPECT_NEAR(counts[1] / double(n), 0.1, 0.015);
  EXPECT_NEAR(counts[2] / double(n), 0.6, 0.015);
  // Ineligible relays (not holding the version) are never chosen.
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(s.choose({true, false, false}), 0);
  EXPECT_EQ(s.choose({false, false, false}), -1);
}

TEST(ShardcastRelaySelection, AFailedRelayHealsBackAndFastestAlwaysPicksTheBest) {
  RelaySelector s({"a", "b"}, RelayChoice::Weighted, 3);
  s.seed(0, true, 1000);
  s.seed(1, false, 0);  // its probe failed: success 0, bandwidth 0
  const auto draws_of_b = [&] {
    int b = 0;
    for (int i = 0; i < 20000; ++i) b += s.choose({true, true}) == 1;
    return b;
  };
  EXPECT_LT(draws_of_b(), 5);
  // Every update heals its success by 0.01; its bandwidth keeps a floor of 1% of the best, so
  // after 50 updates it gets about 0.5 x 1% of the draws.
  for (int i = 0; i < 50; ++i) s.record(0, true, 1000, 1);
  EXPECT_NEAR(s.stats()[1].success, 0.5, 1e-9);
  const int healed = draws_of_b();
  EXPECT_GT(healed, 40);
  EXPECT_LT(healed, 200);
  // One good download and its bandwidth estimate is real again.
  s.record(1, true, 1000, 1);
  EXPECT_NEAR(s.stats()[1].bandwidth, 0.3 * 1000, 1e-9);

  RelaySelector f({"a", "b", "c"}, RelayChoice::Fastest, 3);
  f.seed(0, true, 300);
  f.seed(1, true, 900);
  f.seed(2, true, 600);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(f.choose({true, true, true}), 1);
  EXPECT_EQ(f.choose({true, false, true}), 2);
}

TEST(ShardcastAccessControl, AllowlistMatchesAddressesAndNetworks) {
  EXPECT_TRUE(ip_matches("10.1.2.3", "10.0.0.0/8"));
  EXPECT_FALSE(ip_matches("11.1.2.3", "10.0.0.0/8"));
  EXPECT_TRUE(ip_matches("127.0.0.2", "127.0.0.2"));
  EXPECT_FALSE(ip_matches("127.0.0.2", "127.0.0.3"));
  EXPECT_TRUE(ip_matches("1.2.3.4", "0.0.0.0/0"));
  EXPECT_THROW(check_allowlist_entry("10.0.0.0/33", "relay.allow[0]"), Error);
  EXPECT_THROW(check_allowlist_entry("example.com", "relay.allow[0]"), Error);
  EXPECT_NO_THROW(check_allowlist_entry("::1", "relay.allow[0]"));
  for (const char* bad : {"10.0.0.0/", "10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/8x", "10.0.0.0/008",
                          "::1/64", "10.0.0.0/8/8"}) {
    EXPECT_THROW(check_allowlist_entry(bad, "relay.allow[0]"), Error) << bad;
  }
  // An address matches however it is written: an operator's "2001:DB8::1" is the client the
  // socket reports as "2001:db8::1", and an IPv4 client of a dual-stack socket (::ffff:a.b.c.d)
  // is the IPv4 address, for an address entry, a network and the orchestrator's list alike.
  EXPECT_TRUE(ip_matches("2001:db8::1", "2001:DB8:0::1"));
  EXPECT_FALSE(ip_matches("2001:db8::2", "2001:DB8:0::1"));
  EXPECT_TRUE(ip_matches("::ffff:10.1.2.3", "10.1.2.3"));
  EXPECT_TRUE(ip_matches("::ffff:10.1.2.3", "10.0.0.0/8"));
  EXPECT_FALSE(ip_matches("::ffff:11.1.2.3", "10.0.0.0/8"));
  EXPECT_FALSE(ip_matches("2001:db8::1", "0.0.0.0/0"));

  AccessControl open({});
  EXPECT_TRUE(open.allowed("8.8.8.8"));
  AccessControl a({});
  a.set_static({"127.0.0.1"});
  EXPECT_TRUE(a.allowed("127.0.0.1"));
  EXPECT_FALSE(a.allowed("127.0.0.2"));
  a.set_dynamic({"127.0.0.2"});
  EXPECT_TRUE(a.allowed("127.0.0.2"));
  EXPECT_TRUE(a.allowed("::ffff:127.0.0.2"));
  EXPECT_FALSE(a.allowed("::ffff:127.0.0.3"));
  a.set_dynamic({});  // evicted
  EXPECT_FALSE(a.allowed("127.0.0.2"));
  AccessControl only_dynamic({});
  only_dynamic.set_dynamic({});  // an orchestrator list, still empty: nobody
  EXPECT_FALSE(only_dynamic.allowed("127.0.0.1"));
}

TEST(ShardcastAccessControl, RateBucketsOfClientsGoneQuietAreForgotten) {
  // A flood from many addresses must not grow the relay's memory for good: a bucket that has
  // refilled is the same as none, and goes once the map has doubled.
  AccessControl a({/*requests_per_s=*/10, /*burst=*/10, /*bytes_per_s=*/1000});
  for (int i = 0; i < 5000; ++i) {
    const std::string ip = "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250);
    EXPECT_TRUE(a.admit_request(ip, 100.0));
    a.reserve_bytes(ip, 10, 100.0);
  }
  EXPECT_EQ(a.tracked_clients(), 10000u);
  // Two seconds later every bucket is full again: the sweep when a map reaches 8192 (twice its
  // size at the last sweep) forgets those 5000, and keeps the 3192 new ones.
  for (int i = 0; i < 4000; ++i) {
    const std::string ip = "10.1." + std::to_string(i / 250) + "." + std::to_string(i % 250);
    EXPECT_TRUE(a.admit_request(ip, 102.0));
    a.reserve_bytes(ip, 10, 102.0);
  }
  EXPECT_EQ(a.tracked_clients(), 2u * 4000u);  // 18000 without forgetting
  // A client still over its rate keeps its bucket, and stays limited.
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(a.admit_request("10.9.9.9", 103.0));
  EXPECT_FALSE(a.admit_request("10.9.9.9", 103.0));
  for (int i = 0; i < 5000; ++i) a.admit_request("10.2.0." + std::to_string(i), 103.0);
  EXPECT_FALSE(a.admit_request("10.9.9.9", 103.0));
}

TEST(ShardcastAccessControl, RequestAndByteBucketsRefillAtTheirRate) {
  AccessControl a({/*requests_per_s=*/2, /*burst=*/3, /*bytes_per_s=*/1000});
  int admitted = 0;
  for (int i = 0; i < 10; ++i) admitted += a.admit_request("1.1.1.1", 100.0);
  EXPECT_EQ(admitted, 3);                           // the burst
  EXPECT_TRUE(a.admit_request("2.2.2.2", 100.0));   // per IP
  EXPECT_FALSE(a.admit_request("1.1.1.1", 100.4));  // 0.8 tokens
  EXPECT_TRUE(a.admit_request("1.1.1.1", 100.6));   // 1.2 tokens
  // Bytes: 100 ms of burst (100 bytes), then a debt paid back at 1000 B/s.
  EXPECT_DOUBLE_EQ(a.reserve_bytes("1.1.1.1", 100, 50.0), 0);
  EXPECT_NEAR(a.reserve_bytes("1.1.1.1", 500, 50.0), 0.5, 1e-9);
  EXPECT_NEAR(a.reserve_bytes("1.1.1.1", 500, 50.5), 0.5, 1e-9);
  AccessControl unlimited({});
  EXPECT_DOUBLE_EQ(unlimited.reserve_bytes("1.1.1.1", 1 << 30, 0), 0);
}

}  // namespace
}  // namespace trellis::shardcast
