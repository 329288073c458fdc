// Network addresses as text: which strings are IP addresses, and HOST:PORT as the configs that
// name a server (trainer.rdzv, discovery.redis, the nginx front) give it.
#include "common/ip_address.h"

#include <gtest/gtest.h>

#include "error_of.h"

namespace trellis {
namespace {

TEST(IpAddress, OnlyPlainAddressesAreAddresses) {
  EXPECT_TRUE(is_ip_address("127.0.0.1"));
  EXPECT_TRUE(is_ip_address("::1"));
  for (const char* bad : {"all", "10.0.0.0/8", "example.com", "127.0.0.1; allow all", ""})
    EXPECT_FALSE(is_ip_address(bad)) << bad;
}

TEST(IpAddress, HostPortSplitsAtTheLastColonAndChecksThePort) {
  const HostPort v4 = parse_host_port("10.0.0.1:29500", "trainer.rdzv");
  EXPECT_EQ(v4.host, "10.0.0.1");
  EXPECT_EQ(v4.port, 29500);
  const HostPort v6 = parse_host_port("[::1]:80", "trainer.rdzv");
  EXPECT_EQ(v6.host, "[::1]");
  EXPECT_EQ(v6.port, 80);
  for (const char* bad : {"localhost", ":80", "host:", "host:0", "host:65536", "host:80x",
                          "host:-1", "host:99999999999999999999"}) {
    const std::string error = test::error_of([&] { parse_host_port(bad, "trainer.rdzv"); });
    EXPECT_NE(error.find("trainer.rdzv"), std::string::npos) << bad;
    EXPECT_NE(error.find("is not HOST:PORT"), std::string::npos) << bad << ": " << error;
  }
}

// Per-address limits count a subscriber once: IPv4 by its address, however written, and IPv6 by
// its /64 (what one subscriber is given), checked against addresses worked out by hand.
TEST(IpAddress, ASubscribersBlockIsItsIpv4AddressOrItsIpv6Slash64) {
  EXPECT_EQ(subscriber_block("10.0.0.1"), "10.0.0.1");
  EXPECT_EQ(subscriber_block("::ffff:10.0.0.1"), "10.0.0.1");
  EXPECT_EQ(subscriber_block("2001:db8:1:2:abcd:ef01:2345:6789"), "2001:db8:1:2::/64");
  EXPECT_EQ(subscriber_block("2001:0db8:0001:0002::1"), "2001:db8:1:2::/64");
  EXPECT_EQ(subscriber_block("2001:db8:1:3::1"), "2001:db8:1:3::/64");
  EXPECT_EQ(subscriber_block("::1"), "::/64");
  EXPECT_EQ(subscriber_block("fe80::1:2:3:4"), "fe80::/64");
  EXPECT_EQ(subscriber_block("not an address"), "not an address");
}

}  // namespace
}  // namespace trellis
