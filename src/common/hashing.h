// SHA-256 (libsodium): file hashes for submissions and checkpoint manifests, seeds for fixed data
// sampling, and HMACs for the orchestrator's signed upload URLs.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trellis {

using Sha256 = std::array<uint8_t, 32>;

Sha256 sha256(std::string_view bytes);
std::string sha256_hex(std::string_view bytes);  // 64 lowercase hex digits
// HMAC-SHA-256 of `message` under `key`, hex.
std::string hmac_sha256_hex(std::string_view key, std::string_view message);

// SHA-256 of bytes fed in pieces (files too large to hold at once).
class Sha256Stream {
 public:
  Sha256Stream();
  void update(std::string_view bytes);
  std::string hex();  // finishes the hash: call once

 private:
  alignas(16) unsigned char state_[128];  // crypto_hash_sha256_state (104 bytes in libsodium)
};

std::string to_hex(std::string_view bytes);
// Error naming `where` unless `hex` is an even number of hex digits.
std::string from_hex(std::string_view hex, const std::string& where);

}  // namespace trellis
