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

// Lists compare addresses, not spellings: the forms below were worked out by hand (RFC 5952's
// shortest lowercase text for IPv6; an IPv4-mapped address is the IPv4 client behind it).
TEST(IpAddress, EveryWayOfWritingAnAddressHasOneCanonicalText) {
  EXPECT_EQ(canonical_ip("10.0.0.1"), "10.0.0.1");
  EXPECT_EQ(canonical_ip("::ffff:10.0.0.1"), "10.0.0.1");
  EXPECT_EQ(canonical_ip("::FFFF:a00:1"), "10.0.0.1");
  EXPECT_EQ(canonical_ip("2001:DB8:0:0::1"), "2001:db8::1");
  EXPECT_EQ(canonical_ip("2001:0db8:0000:0000:0000:0000:0000:0001"), "2001:db8::1");
  EXPECT_EQ(canonical_ip("0:0:0:0:0:0:0:1"), "::1");
  EXPECT_EQ(canonical_ip("64:ff9b::808:808"), "64:ff9b::808:808");  // NAT64: not the client
  EXPECT_EQ(canonical_ip("not an address"), "not an address");
}

// Per-address limits count a subscriber once: IPv4 by its address, however written, and IPv6 by
// its /64 (what one subscriber is given), checked against addresses worked out by hand.
TEST(IpAddress, LoopbackIsTheWhole127BlockAndColonColonOneHoweverWritten) {
  for (const char* loopback :
       {"127.0.0.1", "127.255.3.4", "::ffff:127.0.0.2", "::FFFF:7f00:1", "::1", "0:0:0:0:0:0:0:1"})
    EXPECT_TRUE(is_loopback_address(loopback)) << loopback;
  for (const char* other : {"128.0.0.1", "126.255.255.255", "10.0.0.1", "::2", "::ffff:10.0.0.1",
                            "fe80::1", "localhost", "127.0.0.1/8", ""})
    EXPECT_FALSE(is_loopback_address(other)) << other;
}

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

// Addresses a stranger may name but the public internet does not reach, each block at its edges,
// against the ranges of IANA's special-purpose registries (RFC 6890 and its updates).
TEST(IpAddress, OnlyAddressesTheInternetReachesArePublic) {
  for (const char* ip :
       {"1.1.1.1",         "8.8.8.8",         "9.255.255.255",        "11.0.0.0",
        "100.63.255.255",  "100.128.0.0",     "126.255.255.255",      "128.0.0.0",
        "169.253.255.255", "169.255.0.0",     "172.15.255.255",       "172.32.0.0",
        "192.0.1.0",       "192.167.255.255", "192.169.0.0",          "198.17.255.255",
        "198.20.0.0",      "223.255.255.255", "2001:4860:4860::8888", "2606:4700::1111",
        "2001:200::1",     "3fff:ffff::1",    "::ffff:8.8.8.8",       "64:ff9b::808:808",
        "2002:808:808::1"}) {
    EXPECT_TRUE(is_public_address(ip)) << ip;
  }
  for (const char* ip : {"0.0.0.0",
                         "0.1.2.3",
                         "10.0.0.0",
                         "10.255.255.255",
                         "100.64.0.0",
                         "100.127.255.255",
                         "127.0.0.1",
                         "127.255.255.254",
                         "169.254.169.254",
                         "172.16.0.0",
                         "172.31.255.255",
                         "192.0.0.8",
                         "192.0.2.1",
                         "192.88.99.1",
                         "192.168.0.1",
                         "192.168.255.255",
                         "198.18.0.0",
                         "198.19.255.255",
                         "198.51.100.7",
                         "203.0.113.9",
                         "224.0.0.1",
                         "239.255.255.255",
                         "240.0.0.1",
                         "255.255.255.255",
                         "::",
                         "::1",
                         "::127.0.0.1",
                         "::ffff:127.0.0.1",
                         "::ffff:169.254.169.254",
                         "64:ff9b::a00:1",
                         "2002:a00:1::1",
                         "2001::1",
                         "2001:1ff:ffff::1",
                         "2001:db8::1",
                         "fc00::1",
                         "fd12:3456::1",
                         "fe80::1",
                         "febf::1",
                         "fec0::1",
                         "ff02::1",
                         "1000::1",
                         "4000::1",
                         "100::1",
                         "localhost",
                         "example.com",
                         "",
                         "10.0.0.1/8"}) {
    EXPECT_FALSE(is_public_address(ip)) << ip;
  }
}

}  // namespace
}  // namespace trellis
