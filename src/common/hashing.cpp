#include "common/hashing.h"

#include <sodium.h>

#include <new>

#include "common/error.h"
#include "common/sha256_ni.h"

namespace trellis {
namespace {

// The SHA extensions where the CPU has them, libsodium's portable code elsewhere: one choice per
// process, so that a stream's state always belongs to the engine that reads it.
const bool kShaNi = sha_ni_supported();

const unsigned char* bytes_of(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

Sha256 sha256(std::string_view bytes) {
  Sha256 out;
  if (kShaNi) {
    Sha256NiState state;
    state.update(bytes_of(bytes), bytes.size());
    state.finish(out.data());
  } else {
    crypto_hash_sha256(out.data(), bytes_of(bytes), bytes.size());
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  const Sha256 h = sha256(bytes);
  return to_hex({reinterpret_cast<const char*>(h.data()), h.size()});
}

std::string hmac_sha256_hex(std::string_view key, std::string_view message) {
  // HMAC-SHA-256 with a key of any length (libsodium's streaming API hashes long keys first).
  crypto_auth_hmacsha256_state state;
  unsigned char out[crypto_auth_hmacsha256_BYTES];
  crypto_auth_hmacsha256_init(&state, reinterpret_cast<const unsigned char*>(key.data()),
                              key.size());
  crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(message.data()),
                                message.size());
  crypto_auth_hmacsha256_final(&state, out);
  return to_hex({reinterpret_cast<const char*>(out), sizeof out});
}

static_assert(sizeof(crypto_hash_sha256_state) <= 128 && sizeof(Sha256NiState) <= 128);

Sha256Stream::Sha256Stream() {
  if (kShaNi) {
    new (state_) Sha256NiState();
  } else {
    crypto_hash_sha256_init(reinterpret_cast<crypto_hash_sha256_state*>(state_));
  }
}

void Sha256Stream::update(std::string_view bytes) {
  if (kShaNi) {
    std::launder(reinterpret_cast<Sha256NiState*>(state_))->update(bytes_of(bytes), bytes.size());
  } else {
    crypto_hash_sha256_update(reinterpret_cast<crypto_hash_sha256_state*>(state_), bytes_of(bytes),
                              bytes.size());
  }
}

std::string Sha256Stream::hex() {
  Sha256 out;
  if (kShaNi) {
    std::launder(reinterpret_cast<Sha256NiState*>(state_))->finish(out.data());
  } else {
    crypto_hash_sha256_final(reinterpret_cast<crypto_hash_sha256_state*>(state_), out.data());
  }
  return to_hex({reinterpret_cast<const char*>(out.data()), out.size()});
}

std::string random_hex(size_t bytes) {
  static const bool ready = sodium_init() >= 0;  // idempotent; seeds the generator
  if (!ready) throw Error("libsodium failed to initialise", "random_hex");
  std::string raw(bytes, '\0');
  randombytes_buf(raw.data(), raw.size());
  return to_hex(raw);
}

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Compare hashes, so that the time depends on neither length nor contents.
  const Sha256 ha = sha256(a), hb = sha256(b);
  return sodium_memcmp(ha.data(), hb.data(), ha.size()) == 0;
}

std::string to_hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::string from_hex(std::string_view hex, const std::string& where) {
  if (hex.size() % 2 != 0) fail(where, "hex string has an odd number of digits ({})", hex.size());
  const auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    fail(where, "'{}' is not a hex digit", c);
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<char>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  return out;
}

}  // namespace trellis
