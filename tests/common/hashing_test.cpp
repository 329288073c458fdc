// Hashing: SHA-256 against FIPS 180-2 vectors, the SHA extensions' engine against libsodium's
// (every tail and block boundary), HMAC-SHA-256 against RFC 4231 (including a key longer than the
// block size), and the hex round trip with its errors.
#include <gtest/gtest.h>
#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "common/hashing.h"
#include "common/sha256_ni.h"
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

// The engine on the SHA extensions against libsodium's portable SHA-256, an independent
// implementation: every length from 0 to 300 bytes and some long ones, in one piece and in uneven
// pieces, so that every tail, padding case and block boundary is crossed; the process's hashes
// (sha256, Sha256Stream) give the same.
TEST(Hashing, TheShaExtensionsMatchLibsodium) {
  if (!sha_ni_supported()) GTEST_SKIP() << "this CPU has no SHA extensions";
  std::mt19937_64 rng(7);
  std::string data(70001, '\0');
  for (auto& c : data) c = static_cast<char>(rng());
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (size_t n : {4095, 4096, 4097, 65536, 70001}) lengths.push_back(n);
  const auto bytes = reinterpret_cast<const uint8_t*>(data.data());
  for (size_t n : lengths) {
    uint8_t want[32], whole[32], pieces[32];
    crypto_hash_sha256(want, bytes, n);
    Sha256NiState one;
    one.update(bytes, n);
    one.finish(whole);
    EXPECT_EQ(std::memcmp(whole, want, 32), 0) << n << " bytes in one piece";
    Sha256NiState fed;
    Sha256Stream stream;
    const size_t steps[] = {1, 7, 63, 64, 65, 130, 0};
    for (size_t at = 0, k = 0; at < n; ++k) {
      const size_t take = std::min(steps[k % 7], n - at);
      fed.update(bytes + at, take);
      stream.update({data.data() + at, take});
      at += take;
    }
    fed.finish(pieces);
    EXPECT_EQ(std::memcmp(pieces, want, 32), 0) << n << " bytes in pieces";
    const std::string hex = to_hex({reinterpret_cast<const char*>(want), 32});
    EXPECT_EQ(stream.hex(), hex) << n;
    EXPECT_EQ(sha256_hex({data.data(), n}), hex) << n;
  }
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
