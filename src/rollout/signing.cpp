#include "rollout/signing.h"

#include "common/error.h"
#include "common/hashing.h"

namespace trellis::rollout {

SignBody sign_body_with(const Identity& identity) {
  SignBody sign;
  sign.body_metadata = [](std::string_view body) -> KeyValues {
    return {{kBodySha256Key, sha256_hex(body)}};
  };
  sign.sign_file = [identity](std::string_view message) { return identity.sign_hex(message); };
  return sign;
}

void verify_file_signature(const RolloutFile& file, const std::string& node_address,
                           const std::string& where) {
  const std::string declared = metadata_value(file.metadata, kBodySha256Key);
  const std::string signature = metadata_value(file.metadata, kSignatureKey);
  if (declared.empty()) fail(where, "the file is unsigned: no {} in its metadata", kBodySha256Key);
  if (signature.empty()) fail(where, "the file is unsigned: no {} in its metadata", kSignatureKey);
  const Sha256 hash = sha256(file.body);
  const std::string_view raw(reinterpret_cast<const char*>(hash.data()), hash.size());
  if (to_hex(raw) != declared) {
    fail(where, "the file body does not match its {} (the body was changed after signing)",
         kBodySha256Key);
  }
  if (file.footer_sha256.size() != 64)
    fail(where, "the file's footer was not hashed (decode it with decode_rollout_file)");
  if (!verify_signature(node_address, file_signature_message(hash, file.footer_sha256),
                        signature)) {
    fail(where,
         "{} is not node {}'s signature of the file (its body and footer: the file was changed "
         "after signing, or another key signed it)",
         kSignatureKey, node_address);
  }
}

}  // namespace trellis::rollout
