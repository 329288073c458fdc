// SHA-256 (the CPU's SHA extensions where it has them, else libsodium: common/sha256_ni.h): file
// hashes for submissions and checkpoint manifests, seeds for fixed data sampling, HMACs for the
// orchestrator's signed upload URLs; random secrets and their comparison.
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
  // A Sha256NiState or a crypto_hash_sha256_state (104 bytes each), as the process chose.
  alignas(16) unsigned char state_[128];
};

std::string to_hex(std::string_view bytes);
// `bytes` random bytes from the operating system's CSPRNG, hex (tokens, nonces, run IDs).
std::string random_hex(size_t bytes);
// Whether `a` and `b` are equal, in time that depends on neither's contents (secrets: tokens).
bool constant_time_equal(std::string_view a, std::string_view b);
// Error naming `where` unless `hex` is an even number of hex digits.
std::string from_hex(std::string_view hex, const std::string& where);

}  // namespace trellis
