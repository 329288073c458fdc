#include "orchestrator/signed_url.h"

#include <charconv>

#include <fmt/format.h>

#include "common/hashing.h"

namespace trellis::orchestrator {

const char* describe(UrlCheck check) {
  switch (check) {
    case UrlCheck::kOk:
      return "the upload URL is valid";
    case UrlCheck::kMissing:
      return "the upload URL is not signed (expires and sig are required)";
    case UrlCheck::kMalformed:
      return "the upload URL's expires or sig is malformed";
    case UrlCheck::kExpired:
      return "the upload URL has expired; ask for a new one with POST /submissions";
    case UrlCheck::kBadSignature:
      return "the upload URL's signature does not match (forged or altered URL)";
  }
  return "?";
}

UrlSigner::UrlSigner(std::string secret) : secret_(std::move(secret)) {}

std::string UrlSigner::signature(std::string_view method, std::string_view path,
                                 int64_t expires) const {
  return hmac_sha256_hex(secret_, fmt::format("{}\n{}\n{}", method, path, expires));
}

std::string UrlSigner::sign(std::string_view method, const std::string& path,
                            int64_t expires) const {
  return fmt::format("{}?expires={}&sig={}", path, expires, signature(method, path, expires));
}

UrlCheck UrlSigner::check(std::string_view method, std::string_view path,
                          const std::string& expires, const std::string& sig, int64_t now) const {
  if (expires.empty() || sig.empty()) return UrlCheck::kMissing;
  int64_t e = 0;
  const auto [end, ec] = std::from_chars(expires.data(), expires.data() + expires.size(), e);
  if (ec != std::errc() || end != expires.data() + expires.size() || sig.size() != 64) {
    return UrlCheck::kMalformed;
  }
  // Constant-time comparison: the time taken says nothing about how much of a guess was right.
  const std::string expected = signature(method, path, e);
  unsigned char diff = 0;
  for (size_t i = 0; i < expected.size(); ++i) diff |= expected[i] ^ sig[i];
  if (diff != 0) return UrlCheck::kBadSignature;
  if (now > e) return UrlCheck::kExpired;
  return UrlCheck::kOk;
}

}  // namespace trellis::orchestrator
