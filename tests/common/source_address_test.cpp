// [network] source_address: an IP address or nothing; what is set is what every client reads.
#include "common/source_address.h"

#include <gtest/gtest.h>

#include "error_of.h"

namespace trellis {
namespace {

TEST(SourceAddress, IsAnIpAddressOrNothing) {
  Config c = Config::defaults();
  set_source_address(c);
  EXPECT_EQ(source_address(), "");
  c.apply_override("network.source_address=\"127.0.0.7\"");
  set_source_address(c);
  EXPECT_EQ(source_address(), "127.0.0.7");
  for (const char* bad : {"lo", "127.0.0.0/8", "host.example", "127.0.0.7 "}) {
    Config b = Config::defaults();
    b.set_string("network.source_address", bad);
    EXPECT_NE(test::error_of([&] { set_source_address(b); }).find("network.source_address"),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(source_address(), "127.0.0.7");  // a refused value changes nothing
  set_source_address(Config::defaults());
}

}  // namespace
}  // namespace trellis
