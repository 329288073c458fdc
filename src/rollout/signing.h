// Rollout file signatures (specs/rollout-format.md): a worker signs the SHA-256 of the file body
// (every byte before the footer) with its Ed25519 key; the footer carries the hash and the
// signature, so anyone holding the file and the worker's address can check who wrote it and that
// no byte of the body changed since.
#pragma once

#include <string>

#include "common/identity.h"
#include "rollout/rollout_file.h"

namespace trellis::rollout {

inline constexpr const char* kBodySha256Key = "trellis.body_sha256";  // 64 hex digits
inline constexpr const char* kSignatureKey = "trellis.signature";     // 128 hex digits

// A SignBody for encode_rollout_file: footer metadata trellis.body_sha256 (hex SHA-256 of the
// body) and trellis.signature (hex Ed25519 signature, by `identity`, of the 32 raw hash bytes).
// The identity is copied.
SignBody sign_body_with(const Identity& identity);

// Error naming `where` unless `file` carries both keys, its body hashes to trellis.body_sha256,
// and trellis.signature is `node_address`'s signature of that hash.
void verify_file_signature(const RolloutFile& file, const std::string& node_address,
                           const std::string& where);

}  // namespace trellis::rollout
