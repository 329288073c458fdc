// A node's Ed25519 identity (specs/protocol.md §1): the key pair lives in a file of mode 0600,
// created on first use; the node's address is its public key in hex.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace trellis {

class Identity {
 public:
  // Loads the key file, or creates it (and its directory) when absent. Error when the file is
  // malformed or readable by others (mode other than 0600).
  static Identity load_or_create(const std::filesystem::path& key_file);
  // A fresh identity held only in memory (tests, throwaway workers).
  static Identity generate();

  const std::string& address() const { return address_; }  // 64 hex digits
  std::string sign_hex(std::string_view message) const;    // detached signature, 128 hex digits

 private:
  std::string secret_;  // 64-byte libsodium secret key
  std::string address_;
};

// The text of the secret file `file` (mode 0600), without trailing whitespace; when absent it is
// created (with its directory) holding fresh(), safely against another process doing the same;
// fresh() may throw instead, and then nothing is created.
// Error when the file is accessible to other users, not a regular file or over 4 KiB.
std::string load_or_create_secret(const std::filesystem::path& file,
                                  const std::function<std::string()>& fresh);

// True when `signature_hex` is `address_hex`'s signature of `message`; false for any malformed
// input.
bool verify_signature(const std::string& address_hex, std::string_view message,
                      const std::string& signature_hex);

}  // namespace trellis
