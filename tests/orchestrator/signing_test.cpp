// Rollout file signatures: a file signed by a worker verifies against its address only, and any
// change to the body or the signature metadata is caught.
#include <gtest/gtest.h>

#include "common/hashing.h"
#include "error_of.h"
#include "rollout_fixtures.h"

namespace trellis::rollout {
namespace {

TEST(Signing, SignedFileVerifiesForItsSignerOnly) {
  const Identity worker = Identity::generate(), other = Identity::generate();
  const test::FileSpec spec{"run", worker.address(), 0, 0, 0};
  const std::string bytes = test::signed_file(spec, {{0, 1}, {1, 1}}, worker);
  const RolloutFile file = decode_rollout_file(bytes, "file");
  EXPECT_EQ(metadata_value(file.metadata, kBodySha256Key), sha256_hex(file.body));
  EXPECT_EQ(metadata_value(file.metadata, kSignatureKey).size(), 128u);
  EXPECT_EQ(test::error_of([&] { verify_file_signature(file, worker.address(), "file"); }), "");

  const std::string e =
      test::error_of([&] { verify_file_signature(file, other.address(), "the upload"); });
  EXPECT_NE(e.find("signature"), std::string::npos) << e;
  EXPECT_NE(e.find("the upload"), std::string::npos) << e;
}

TEST(Signing, ChangedBodyOrMetadataIsCaught) {
  const Identity worker = Identity::generate();
  const test::FileSpec spec{"run", worker.address(), 0, 0, 0};
  const std::string bytes = test::signed_file(spec, {{0, 1}}, worker);
  RolloutFile file = decode_rollout_file(bytes, "file");

  // A body that differs from the one signed (the hash in the footer no longer matches).
  std::string changed(file.body);
  changed[changed.size() / 2] ^= 1;
  RolloutFile tampered = file;
  tampered.body = changed;
  EXPECT_NE(test::error_of([&] {
              verify_file_signature(tampered, worker.address(), "f");
            }).find("does not match"),
            std::string::npos);

  // A hash recomputed for the changed body, but the signature is still of the old one.
  RolloutFile rehashed = tampered;
  for (auto& [k, v] : rehashed.metadata)
    if (k == kBodySha256Key) v = sha256_hex(changed);
  EXPECT_NE(test::error_of([&] {
              verify_file_signature(rehashed, worker.address(), "f");
            }).find("not node"),
            std::string::npos);

  // Unsigned files.
  RolloutFile unsigned_file = file;
  unsigned_file.metadata.clear();
  EXPECT_NE(test::error_of([&] {
              verify_file_signature(unsigned_file, worker.address(), "f");
            }).find("unsigned"),
            std::string::npos);
  const std::string plain = encode_rollout_file(test::group(spec, 0, {0, 1}), {});
  EXPECT_NE(test::error_of([&] {
              verify_file_signature(decode_rollout_file(plain, "f"), worker.address(), "f");
            }).find("unsigned"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::rollout
