#include "rollout/signing.h"

#include "common/error.h"
#include "common/hashing.h"

namespace trellis::rollout {

SignBody sign_body_with(const Identity& identity) {
  return [identity](std::string_view body) -> KeyValues {
    const Sha256 hash = sha256(body);
    const std::string_view raw(reinterpret_cast<const char*>(hash.data()), hash.size());
    return {{kBodySha256Key, to_hex(raw)}, {kSignatureKey, identity.sign_hex(raw)}};
  };
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
  if (!verify_signature(node_address, raw, signature)) {
    fail(where, "{} is not node {}'s signature of the file body", kSignatureKey, node_address);
  }
}

}  // namespace trellis::rollout
