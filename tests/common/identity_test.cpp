// Identity: Ed25519 against RFC 8032's first test vector (a key file written by hand), key files
// created once with mode 0600 and reloaded to the same address, and refusals of key files that
// others can read or that are malformed.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/files.h"
#include "common/hashing.h"
#include "common/identity.h"
#include "error_of.h"

namespace trellis {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  auto dir =
      fs::temp_directory_path() / ("trellis_identity_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_key(const fs::path& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  ASSERT_EQ(::chmod(path.c_str(), mode), 0);
}

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return st.st_mode & 07777;
}

TEST(Identity, MatchesRfc8032TestVector1) {
  const auto dir = fresh_dir("rfc8032");
  const auto key = dir / "node.key";
  write_key(key, "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60\n", 0600);
  const Identity id = Identity::load_or_create(key);
  EXPECT_EQ(id.address(), "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a");
  const std::string sig = id.sign_hex("");
  EXPECT_EQ(sig,
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39"
            "701cf9b46bd25bf5f0595bbe24655141438e7a100b");
  EXPECT_TRUE(verify_signature(id.address(), "", sig));
  fs::remove_all(dir);
}

TEST(Identity, KeyFileIsCreatedOnceWithMode0600) {
  const auto dir = fresh_dir("create");
  const auto key = dir / "keys" / "worker.key";  // the directory is created too
  const Identity first = Identity::load_or_create(key);
  ASSERT_TRUE(fs::exists(key));
  EXPECT_EQ(mode_of(key), 0600u);
  EXPECT_EQ(first.address().size(), 64u);
  const Identity again = Identity::load_or_create(key);
  EXPECT_EQ(again.address(), first.address());
  EXPECT_EQ(again.sign_hex("m"), first.sign_hex("m"));  // Ed25519 signatures are deterministic
  // No temporary files are left beside it.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir / "keys"), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

TEST(Identity, SignaturesVerifyOnlyForTheSignerAndTheMessage) {
  const Identity a = Identity::generate(), b = Identity::generate();
  EXPECT_NE(a.address(), b.address());
  const std::string sig = a.sign_hex("message");
  EXPECT_EQ(sig.size(), 128u);
  EXPECT_TRUE(verify_signature(a.address(), "message", sig));
  EXPECT_FALSE(verify_signature(b.address(), "message", sig));
  EXPECT_FALSE(verify_signature(a.address(), "messagE", sig));
  std::string flipped = sig;
  flipped[10] = flipped[10] == '0' ? '1' : '0';
  EXPECT_FALSE(verify_signature(a.address(), "message", flipped));
  // Malformed input is false, never an exception.
  EXPECT_FALSE(verify_signature("zz", "message", sig));
  EXPECT_FALSE(verify_signature(a.address(), "message", "abc"));
  EXPECT_FALSE(verify_signature(std::string(64, 'g'), "message", sig));
  EXPECT_FALSE(verify_signature(a.address(), "message", std::string(128, 'x')));
}

TEST(Identity, RefusesAKeyFileOthersCanRead) {
  const auto dir = fresh_dir("mode");
  const auto key = dir / "node.key";
  Identity::load_or_create(key);
  for (mode_t mode : {0644, 0640, 0604, 0660}) {
    ASSERT_EQ(::chmod(key.c_str(), mode), 0);
    const std::string e = test::error_of([&] { Identity::load_or_create(key); });
    EXPECT_NE(e.find("chmod 600"), std::string::npos) << e;
    EXPECT_NE(e.find(key.string()), std::string::npos) << e;
  }
  ASSERT_EQ(::chmod(key.c_str(), 0400), 0);  // read-only for its owner is fine
  EXPECT_EQ(test::error_of([&] { Identity::load_or_create(key); }), "");
  fs::remove_all(dir);
}

TEST(Identity, RefusesMalformedKeyFiles) {
  const auto dir = fresh_dir("malformed");
  const auto key = dir / "node.key";
  for (const std::string& text : {std::string(""), std::string(63, 'a'), std::string(66, 'a'),
                                  std::string(64, 'q'), std::string("not a key at all")}) {
    write_key(key, text, 0600);
    const std::string e = test::error_of([&] { Identity::load_or_create(key); });
    EXPECT_NE(e.find("malformed key file"), std::string::npos) << "'" << text << "': " << e;
    EXPECT_NE(e.find(key.string()), std::string::npos) << e;
    EXPECT_EQ(read_file(key), text);  // never overwritten
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trellis
