// Base64: the RFC 4648 §10 vectors, round trips of every length, and the strict decoder's
// refusals (length, alphabet, padding placement, non-canonical trailing bits).
#include <gtest/gtest.h>

#include <random>

#include "common/base64.h"
#include "error_of.h"

namespace trellis {
namespace {

TEST(Base64, MatchesRfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {
      {"", ""},
      {"f", "Zg=="},
      {"fo", "Zm8="},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="},
      {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"},
  };
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(base64_encode(plain), encoded);
    EXPECT_EQ(base64_decode(encoded, "test"), plain);
  }
  // Every alphabet character, including '+' and '/'.
  EXPECT_EQ(base64_encode(std::string("\xfb\xff\xbf", 3)), "+/+/");
  EXPECT_EQ(base64_decode("+/+/", "test"), std::string("\xfb\xff\xbf", 3));
}

TEST(Base64, RoundTripsRandomBytesOfEveryLength) {
  std::mt19937 rng(3);
  for (size_t n = 0; n < 300; ++n) {
    std::string bytes(n, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    const std::string text = base64_encode(bytes);
    ASSERT_EQ(text.size(), (n + 2) / 3 * 4);
    ASSERT_EQ(base64_decode(text, "test"), bytes) << n;
  }
}

TEST(Base64, StrictDecodingRefusesMalformedText) {
  auto error = [](const std::string& text) {
    return test::error_of([&] { base64_decode(text, "proof field"); });
  };
  EXPECT_NE(error("Zg=").find("not a multiple of 4"), std::string::npos);
  EXPECT_NE(error("Zg").find("not a multiple of 4"), std::string::npos);
  EXPECT_NE(error("Zg==\n").find("not a multiple of 4"), std::string::npos);
  EXPECT_NE(error("Zm9v Zg==").find("not a multiple of 4"), std::string::npos);
  EXPECT_NE(error("Zm9!").find("invalid base64 character 0x21 at offset 3"), std::string::npos);
  EXPECT_NE(error("Zm9-").find("invalid base64 character"), std::string::npos);  // URL alphabet
  EXPECT_NE(error("Zg==Zm9v").find("'=' (padding)"), std::string::npos);         // padding mid-text
  EXPECT_NE(error("Z===").find("'=' (padding)"), std::string::npos);
  EXPECT_NE(error("====").find("'=' (padding)"), std::string::npos);
  EXPECT_NE(error("Zm=v").find("'=' (padding)"), std::string::npos);
  // "Zh==" and "Zm9=" carry non-zero bits below the last byte: another text for "f" / "fo".
  EXPECT_NE(error("Zh==").find("non-canonical"), std::string::npos);
  EXPECT_NE(error("Zm9=").find("non-canonical"), std::string::npos);
  EXPECT_NE(error("Zh==").find("(proof field)"), std::string::npos);
}

}  // namespace
}  // namespace trellis
