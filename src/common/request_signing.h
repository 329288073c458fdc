// Signed requests (specs/protocol.md §1): a node signs each request it sends with its Ed25519 key,
// over the run ID, the method, the raw request target (path and query, as sent), a timestamp, a
// fresh nonce and the SHA-256 of the raw body bytes; the signature and its inputs travel in
// headers. A server checks the signature against the address the request claims, refuses a
// timestamp too far from its clock and a nonce it has seen within that window, so a captured
// request can be neither altered, replayed, nor moved to another run or route.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/identity.h"

namespace trellis {

inline constexpr const char* kSignerHeader = "X-Trellis-Node";          // the signer's address
inline constexpr const char* kTimestampHeader = "X-Trellis-Timestamp";  // unix seconds
inline constexpr const char* kNonceHeader = "X-Trellis-Nonce";          // 32 hex digits
inline constexpr const char* kSignatureHeader = "X-Trellis-Signature";  // 128 hex digits

// What is signed: one line per field, the body by its SHA-256 (sha256_hex of the raw bytes; the
// functions here take that hash, so a large body is hashed once for all its uses).
std::string request_message(std::string_view run_id, std::string_view method,
                            std::string_view target, int64_t timestamp, std::string_view nonce,
                            std::string_view body_sha256);

// The four headers of a request `identity` sends at `timestamp` (a fresh random nonce each call).
std::vector<std::pair<std::string, std::string>> sign_request(
    const Identity& identity, std::string_view run_id, std::string_view method,
    std::string_view target, std::string_view body_sha256, int64_t timestamp);

// The headers of a received request, as the server read them ("" for an absent one).
struct SignedHeaders {
  std::string signer, timestamp, nonce, signature;
};

// Nonces seen within the timestamp window, bounded in number: a server remembers each accepted
// request's nonce until its timestamp leaves the window, and refuses more than `capacity` at once
// (a flood of signed requests costs the sender, not the server's memory), and more than
// `per_address` from one client address (its subscriber_block: an IPv6 /64), so that a flood from
// one machine, signed with keys as fresh as it likes, cannot fill the window and turn everyone
// else's requests away. Nonces live in memory only, so the window opens at `opened_at` (the
// server's start, unix seconds): a request signed before then may have been seen by the server's
// previous run, and is refused. Thread-safe.
class NonceWindow {
 public:
  NonceWindow(int64_t window_s, size_t capacity, size_t per_address, int64_t opened_at);
  enum class Result { kFresh, kReplayed, kFull };
  // Records (signer, nonce) of a request from `client_ip` unless seen; forgets those whose
  // timestamp is older than the window.
  Result record(std::string_view signer, std::string_view nonce, int64_t timestamp, int64_t now,
                const std::string& client_ip);
  int64_t window_s() const { return window_s_; }
  int64_t opened_at() const { return opened_at_; }

 private:
  struct Seen {
    int64_t forget_after;
    std::string key, block;  // "signer:nonce", the client's subscriber block
  };
  int64_t window_s_, opened_at_;
  size_t capacity_, per_address_;
  std::mutex mu_;
  std::unordered_set<std::string> seen_;
  std::unordered_map<std::string, size_t> per_block_;  // nonces remembered of each block
  std::deque<Seen> by_time_;                           // in arrival order
};

// Why a signed request was refused (kOk: it was not).
enum class SignatureCheck {
  kOk,
  kMissing,
  kMalformed,
  kStale,
  kBeforeStart,  // signed before the nonce window opened (the server restarted since)
  kBadSignature,
  kReplayed,
  kBusy
};

// Checks `h` for a request of `run_id`, `method`, `target` and `body_sha256` from `client_ip` at
// `now`: every header present and well formed, the timestamp within the window, the signature the
// signer's over request_message(...), and the nonce new (recorded in `nonces` only when everything
// else holds, so forged requests cannot fill it).
SignatureCheck check_signed_request(const SignedHeaders& h, std::string_view run_id,
                                    std::string_view method, std::string_view target,
                                    std::string_view body_sha256, int64_t now,
                                    const std::string& client_ip, NonceWindow& nonces);

// A sentence for a refusal: what was wrong and how to fix it.
std::string describe(SignatureCheck check, const SignedHeaders& h, int64_t now, int64_t window_s);

}  // namespace trellis
