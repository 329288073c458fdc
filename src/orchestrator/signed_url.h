// Signed, expiring upload URLs (specs/protocol.md §4): the orchestrator hands a worker
// "<path>?expires=<unix seconds>&sig=<hex>" where sig = HMAC-SHA-256(secret, method \n path \n
// expires). Whoever holds the URL may use it for that method and path until it expires; changing
// any part of it breaks the signature. The secret never leaves the orchestrator (it is kept in its
// state database so URLs survive a restart).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trellis::orchestrator {

enum class UrlCheck { kOk, kMissing, kMalformed, kExpired, kBadSignature };

// "the upload URL has expired", ...: what a refused check means, for error messages.
const char* describe(UrlCheck check);

class UrlSigner {
 public:
  explicit UrlSigner(std::string secret);

  // The signature of (method, path, expires), hex.
  std::string signature(std::string_view method, std::string_view path, int64_t expires) const;
  // path + "?expires=<expires>&sig=<signature>"
  std::string sign(std::string_view method, const std::string& path, int64_t expires) const;
  // Checks the expires and sig query values of a request for `method` `path` at time `now`
  // (unix seconds). Empty strings mean the parameter was absent.
  UrlCheck check(std::string_view method, std::string_view path, const std::string& expires,
                 const std::string& sig, int64_t now) const;

 private:
  std::string secret_;
};

}  // namespace trellis::orchestrator
