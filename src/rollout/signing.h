// Rollout file signatures (docs/rollout-files.md): a worker signs the whole file with its Ed25519
// key, every byte but the signature itself. The footer carries the body's SHA-256
// (trellis.body_sha256) and the signature (trellis.signature) of file_signature_message: the
// SHA-256 of the body's hash and of the footer with the signature's characters set to '0'. Anyone
// holding the file and the worker's address can check who wrote it and that no byte of it, body
// or footer (row counts, row groups, column and key/value metadata), changed since.
#pragma once

#include <string>

#include "common/identity.h"
#include "rollout/rollout_file.h"

namespace trellis::rollout {

// kBodySha256Key and kSignatureKey are declared in rollout_file.h.

// A SignBody for encode_rollout_file: footer metadata trellis.body_sha256 (hex SHA-256 of the
// body), then trellis.signature (hex Ed25519 signature, by `identity`, of the 32 bytes of
// file_signature_message for the finished file). The identity is copied.
SignBody sign_body_with(const Identity& identity);

// Error naming `where` unless `file` (as decode_rollout_file returned it) carries both keys, its
// body hashes to trellis.body_sha256, and trellis.signature is `node_address`'s signature of the
// file's body and footer (file_signature_message of the body's hash and file.footer_sha256).
void verify_file_signature(const RolloutFile& file, const std::string& node_address,
                           const std::string& where);

}  // namespace trellis::rollout
