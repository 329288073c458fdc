// Hashing: SHA-256 against FIPS 180-2 vectors, HMAC-SHA-256 against RFC 4231 (including a key
// longer than the block size), and the hex round trip with its errors.
#include <gtest/gtest.h>

#include "common/hashing.h"
#include "error_of.h"

namespace trellis {
namespace {

TEST(Hashing, Sha256MatchesTheStandardVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // The raw digest is the hex one's bytes.
  const Sha256 raw = sha256("abc");
  EXPECT_EQ(to_hex({reinterpret_cast<const char*>(raw.data()), raw.size()}), sha256_hex("abc"));
}

TEST(Hashing, HmacSha256MatchesRfc4231) {
  // Test case 1: 20-byte key.
  EXPECT_EQ(hmac_sha256_hex(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2: a key shorter than the output.
  EXPECT_EQ(hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3: 50 bytes of 0xdd.
  EXPECT_EQ(hmac_sha256_hex(std::string(20, '\xaa'), std::string(50, '\xdd')),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 6: a 131-byte key, hashed first.
  EXPECT_EQ(hmac_sha256_hex(std::string(131, '\xaa'),
                            "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Any change to key or message changes the MAC.
  EXPECT_NE(hmac_sha256_hex("Jefe", "what do ya want for nothing!"),
            hmac_sha256_hex("Jefe", "what do ya want for nothing?"));
  EXPECT_NE(hmac_sha256_hex("Jeff", "x"), hmac_sha256_hex("Jefe", "x"));
}

TEST(Hashing, HexRoundTripsAndNamesBadInput) {
  const std::string bytes("\x00\x01\x7f\x80\xff", 5);
  EXPECT_EQ(to_hex(bytes), "00017f80ff");
  EXPECT_EQ(from_hex("00017f80ff", "t"), bytes);
  EXPECT_EQ(from_hex("00017F80FF", "t"), bytes);
  EXPECT_EQ(from_hex("", "t"), "");
  EXPECT_NE(test::error_of([] { from_hex("abc", "the field"); }).find("odd number"),
            std::string::npos);
  const std::string bad = test::error_of([] { from_hex("zz", "the field"); });
  EXPECT_NE(bad.find("'z' is not a hex digit"), std::string::npos) << bad;
  EXPECT_NE(bad.find("the field"), std::string::npos) << bad;
}

}  // namespace
}  // namespace trellis
