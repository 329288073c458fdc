#include "common/request_signing.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "common/hashing.h"
#include "common/ip_address.h"

namespace trellis {
namespace {

constexpr size_t kNonceHexDigits = 32;  // 128 random bits

bool is_hex(std::string_view s, size_t digits) {
  return s.size() == digits && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

std::string request_message(std::string_view run_id, std::string_view method,
                            std::string_view target, int64_t timestamp, std::string_view nonce,
                            std::string_view body_sha256) {
  return fmt::format("trellis-request-v1\n{}\n{}\n{}\n{}\n{}\n{}", run_id, method, target,
                     timestamp, nonce, body_sha256);
}

std::vector<std::pair<std::string, std::string>> sign_request(
    const Identity& identity, std::string_view run_id, std::string_view method,
    std::string_view target, std::string_view body_sha256, int64_t timestamp) {
  const std::string nonce = random_hex(kNonceHexDigits / 2);
  return {{kSignerHeader, identity.address()},
          {kTimestampHeader, std::to_string(timestamp)},
          {kNonceHeader, nonce},
          {kSignatureHeader, identity.sign_hex(request_message(run_id, method, target, timestamp,
                                                               nonce, body_sha256))}};
}

NonceWindow::NonceWindow(int64_t window_s, size_t capacity, size_t per_address, int64_t opened_at)
    : window_s_(window_s), opened_at_(opened_at), capacity_(capacity), per_address_(per_address) {}

NonceWindow::Result NonceWindow::record(std::string_view signer, std::string_view nonce,
                                        int64_t timestamp, int64_t now,
                                        const std::string& client_ip) {
  std::lock_guard lock(mu_);
  // A nonce need only be remembered while its timestamp could still pass the window check.
  // Arrival order keeps by_time_ sorted enough: entries expire at most 2 windows late.
  while (!by_time_.empty() && by_time_.front().forget_after < now) {
    const Seen& old = by_time_.front();
    seen_.erase(old.key);
    if (const auto it = per_block_.find(old.block); --it->second == 0) per_block_.erase(it);
    by_time_.pop_front();
  }
  std::string key = fmt::format("{}:{}", signer, nonce);
  if (seen_.contains(key)) return Result::kReplayed;
  std::string block = subscriber_block(client_ip);
  size_t& of_block = per_block_[block];
  if (seen_.size() >= capacity_ || of_block >= per_address_) {
    if (of_block == 0) per_block_.erase(block);
    return Result::kFull;
  }
  ++of_block;
  seen_.insert(key);
  by_time_.push_back({std::max(timestamp, now) + window_s_, std::move(key), std::move(block)});
  return Result::kFresh;
}

SignatureCheck check_signed_request(const SignedHeaders& h, std::string_view run_id,
                                    std::string_view method, std::string_view target,
                                    std::string_view body_sha256, int64_t now,
                                    const std::string& client_ip, NonceWindow& nonces) {
  if (h.signer.empty() || h.timestamp.empty() || h.nonce.empty() || h.signature.empty()) {
    return SignatureCheck::kMissing;
  }
  int64_t ts = 0;
  const auto [end, ec] =
      std::from_chars(h.timestamp.data(), h.timestamp.data() + h.timestamp.size(), ts);
  if (ec != std::errc() || end != h.timestamp.data() + h.timestamp.size() ||
      !is_hex(h.signer, 64) || !is_hex(h.nonce, kNonceHexDigits) || !is_hex(h.signature, 128)) {
    return SignatureCheck::kMalformed;
  }
  if (ts < now - nonces.window_s() || ts > now + nonces.window_s()) return SignatureCheck::kStale;
  if (ts < nonces.opened_at()) return SignatureCheck::kBeforeStart;
  if (!verify_signature(h.signer, request_message(run_id, method, target, ts, h.nonce, body_sha256),
                        h.signature)) {
    return SignatureCheck::kBadSignature;
  }
  switch (nonces.record(h.signer, h.nonce, ts, now, client_ip)) {
    case NonceWindow::Result::kFresh:
      return SignatureCheck::kOk;
    case NonceWindow::Result::kReplayed:
      return SignatureCheck::kReplayed;
    case NonceWindow::Result::kFull:
      return SignatureCheck::kBusy;
  }
  return SignatureCheck::kBusy;
}

std::string describe(SignatureCheck check, const SignedHeaders& h, int64_t now, int64_t window_s) {
  switch (check) {
    case SignatureCheck::kOk:
      return "signed";
    case SignatureCheck::kMissing:
      return fmt::format(
          "the request is not signed: it needs the headers {}, {}, {} and {} (a node's Ed25519 "
          "signature, specs/protocol.md §1)",
          kSignerHeader, kTimestampHeader, kNonceHeader, kSignatureHeader);
    case SignatureCheck::kMalformed:
      return fmt::format(
          "malformed signature headers: {} must be 64 lowercase hex digits, {} unix seconds, {} "
          "{} lowercase hex digits, {} 128 lowercase hex digits",
          kSignerHeader, kTimestampHeader, kNonceHeader, kNonceHexDigits, kSignatureHeader);
    case SignatureCheck::kStale:
      return fmt::format(
          "the request is signed with timestamp {}, more than {} s from the server's clock ({}): "
          "a replayed request, or the sender's clock is wrong",
          h.timestamp.substr(0, 20), window_s, now);
    case SignatureCheck::kBeforeStart:
      return fmt::format(
          "the request is signed at {}, before this server started: the nonces of requests "
          "before a restart are not remembered, so it could be a replay; sign it again",
          h.timestamp.substr(0, 20));
    case SignatureCheck::kBadSignature:
      return fmt::format(
          "the signature is not {}'s over this run, method, target, time, nonce and body",
          h.signer);
    case SignatureCheck::kReplayed:
      return fmt::format("nonce {} of {} was used already: a replayed request", h.nonce, h.signer);
    case SignatureCheck::kBusy:
      return fmt::format(
          "too many signed requests in the last {} s, from this address or in all; retry shortly",
          window_s);
  }
  return "unknown";
}

}  // namespace trellis
