// libFuzzer target for what decides who may reach a Trellis service: the signature headers of a
// node's request (check_signed_request and its nonce window), the expires and sig of an upload URL
// (UrlSigner::check), and the address text of allowlists and limits (check_allowlist_entry,
// ip_matches, is_public_address, subscriber_block, parse_host_port). The first byte picks the
// part; the rest is split at NUL bytes into its fields. Beyond "no crash":
// - nothing the fuzzer writes passes as signed, and a refusal's sentence carries no control byte
//   of the sender's;
// - a request this target signs over the fuzzer's run, method, target and body passes once, is
//   refused as a replay, and is refused once any field is changed; the same for upload URLs;
// - the nonce window never takes a replay within the window for fresh, nor a new nonce for a
//   replay, and keeps each client address to its share (checked against a plain record of what it
//   was given);
// - an allowlist entry is accepted exactly when it is an address or an IPv4 network, and matches
//   exactly the addresses a bitwise reference (inet_pton, mask built bit by bit) says it holds;
// - an IPv4 address is public exactly when its IPv4-mapped and NAT64 forms are.
// scripts/fuzz.sh builds and runs it; fuzz/corpus/access/ holds the seeds.
#include <arpa/inet.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/hashing.h"
#include "common/identity.h"
#include "common/ip_address.h"
#include "common/request_signing.h"
#include "orchestrator/signed_url.h"
#include "shardcast/access_control.h"

namespace {

using trellis::SignatureCheck;

constexpr int64_t kNow = 1'800'000'000;  // the server's clock, unix seconds
constexpr int64_t kWindow = 300;

[[noreturn]] void bug(const char* what) {
  std::fprintf(stderr, "access_fuzz: %s\n", what);
  std::abort();
}

// The input after its first byte, split at NUL bytes; missing fields are "".
std::vector<std::string> fields(const uint8_t* data, size_t size, size_t count) {
  std::vector<std::string> out(count);
  size_t f = 0;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && f + 1 < count) {
      ++f;
    } else {
      out[f].push_back(static_cast<char>(data[i]));
    }
  }
  return out;
}

// A refusal is logged and sent back: it must not carry the sender's control bytes (a forged log
// line, a terminal escape).
void check_sentence(const std::string& s) {
  if (s.empty()) bug("an empty sentence for a check's result");
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) bug("a control byte in a refusal's sentence");
  }
}

const trellis::Identity& node() {
  static const trellis::Identity identity = trellis::Identity::generate();
  return identity;
}

SignatureCheck check(const trellis::SignedHeaders& h, const std::vector<std::string>& f,
                     trellis::NonceWindow& window) {
  const SignatureCheck c = trellis::check_signed_request(
      h, f[0], f[1], f[2], trellis::sha256_hex(f[3]), kNow, "198.51.100.1", window);
  check_sentence(trellis::describe(c, h, kNow, kWindow));
  return c;
}

// Fields: run, method, target, body, then the four headers. `knob` picks the genuine request's
// timestamp and the field a copy of it changes.
void signed_request(const std::vector<std::string>& f, uint8_t knob) {
  trellis::NonceWindow window(kWindow, 4, 4, kNow - 1000);
  const trellis::SignedHeaders forged{f[4], f[5], f[6], f[7]};
  if (check(forged, f, window) == SignatureCheck::kOk) bug("forged headers passed as signed");

  const int64_t ts = kNow - kWindow + knob % (2 * kWindow + 1);
  trellis::SignedHeaders h;
  for (const auto& [name, value] :
       trellis::sign_request(node(), f[0], f[1], f[2], trellis::sha256_hex(f[3]), ts)) {
    if (name == trellis::kSignerHeader) h.signer = value;
    if (name == trellis::kTimestampHeader) h.timestamp = value;
    if (name == trellis::kNonceHeader) h.nonce = value;
    if (name == trellis::kSignatureHeader) h.signature = value;
  }
  if (check(h, f, window) != SignatureCheck::kOk) bug("a signed request was refused");
  if (check(h, f, window) != SignatureCheck::kReplayed) bug("a replay was not refused");

  // The same request with one field changed, to a server that has not seen it.
  trellis::NonceWindow fresh(kWindow, 4, 4, kNow - 1000);
  std::vector<std::string> changed = f;
  trellis::SignedHeaders altered = h;
  const int which = knob % 7;
  std::string& field = which < 4    ? changed[which]
                       : which == 4 ? altered.signer
                       : which == 5 ? altered.nonce
                                    : altered.signature;
  if (field.empty()) {
    field = "x";
  } else {
    field[knob % field.size()] ^= 1;
  }
  if (check(altered, changed, fresh) == SignatureCheck::kOk) bug("an altered request passed");
}

// Fields: method, path, expires, sig.
void upload_url(const std::vector<std::string>& f, uint8_t knob) {
  const trellis::orchestrator::UrlSigner signer("the orchestrator's secret");
  const auto c = signer.check(f[0], f[1], f[2], f[3], kNow);
  check_sentence(trellis::orchestrator::describe(c));
  if (c == trellis::orchestrator::UrlCheck::kOk) bug("a forged upload URL passed");

  const int64_t expires = kNow - 2 + knob % 8;
  const std::string url = signer.sign(f[0], f[1], expires);
  const size_t query = url.rfind("?expires=");
  const size_t sig = url.rfind("&sig=");
  if (query != f[1].size() || sig == std::string::npos) bug("a signed URL is not path?expires&sig");
  const std::string e = url.substr(query + 9, sig - query - 9), s = url.substr(sig + 5);
  const auto genuine = signer.check(f[0], f[1], e, s, kNow);
  if (genuine != (expires >= kNow ? trellis::orchestrator::UrlCheck::kOk
                                  : trellis::orchestrator::UrlCheck::kExpired)) {
    bug("a signed upload URL was judged wrongly");
  }
  std::string method = f[0], path = f[1], sig_hex = s;
  std::string& field = knob % 3 == 0 ? method : knob % 3 == 1 ? path : sig_hex;
  if (field.empty()) {
    field = "x";
  } else {
    field[knob % field.size()] ^= 1;
  }
  if (signer.check(method, path, e, sig_hex, kNow) == trellis::orchestrator::UrlCheck::kOk) {
    bug("an altered upload URL passed");
  }
}

// An address as 16 bytes, IPv4 as IPv4-mapped IPv6; nullopt for text that is none.
std::optional<std::array<uint8_t, 16>> address_bytes(const std::string& text) {
  std::array<uint8_t, 16> b{};
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    b[10] = b[11] = 0xff;
    std::memcpy(b.data() + 12, &v4.s_addr, 4);
    return b;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    std::memcpy(b.data(), v6.s6_addr, 16);
    return b;
  }
  return std::nullopt;
}

bool is_mapped_v4(const std::array<uint8_t, 16>& b) {
  return std::all_of(b.begin(), b.begin() + 10, [](uint8_t x) { return x == 0; }) &&
         b[10] == 0xff && b[11] == 0xff;
}

// What an allowlist entry holds, from the grammar: nullopt when it is no entry, else whether `ip`
// is inside it (an address: the same address; "a.b.c.d/n": the same first n bits of an IPv4
// address, compared bit by bit).
std::optional<bool> reference_match(const std::string& ip, const std::string& entry) {
  const size_t slash = entry.find('/');
  const auto addr = address_bytes(ip);
  if (slash == std::string::npos) {
    const auto e = address_bytes(entry);
    if (!e) return std::nullopt;
    return addr && *addr == *e;
  }
  const std::string bits = entry.substr(slash + 1);
  in_addr net{};
  if (inet_pton(AF_INET, entry.substr(0, slash).c_str(), &net) != 1 || bits.empty() ||
      bits.size() > 2 || !std::all_of(bits.begin(), bits.end(), ::isdigit)) {
    return std::nullopt;
  }
  const int n = std::stoi(bits);
  if (n > 32) return std::nullopt;
  if (!addr || !is_mapped_v4(*addr)) return false;
  const auto* a = addr->data() + 12;
  const auto* b = reinterpret_cast<const uint8_t*>(&net.s_addr);
  for (int i = 0; i < n; ++i) {
    const int bit = 7 - i % 8;
    if (((a[i / 8] >> bit) & 1) != ((b[i / 8] >> bit) & 1)) return false;
  }
  return true;
}

// Fields: an address (as a client's), an allowlist entry, a HOST:PORT.
void addresses(const std::vector<std::string>& f) {
  const std::string& ip = f[0];
  const std::string& entry = f[1];
  bool accepted = true;
  try {
    trellis::shardcast::check_allowlist_entry(entry, "relay.allow[0]");
  } catch (const trellis::Error&) {
    accepted = false;
  }
  const auto expected = reference_match(ip, entry);
  if (accepted != expected.has_value()) bug("an allowlist entry was judged wrongly");
  const bool matches = trellis::shardcast::ip_matches(ip, entry);
  if (expected && matches != *expected) bug("an allowlist entry matched wrongly");

  const bool is_ip = trellis::is_ip_address(ip);
  if (is_ip != address_bytes(ip).has_value()) bug("is_ip_address disagrees with inet_pton");
  const bool is_public = trellis::is_public_address(ip);
  if (is_public && !is_ip) bug("text that is no address is public");
  in_addr v4{};
  if (inet_pton(AF_INET, ip.c_str(), &v4) == 1) {
    if (trellis::is_public_address("::ffff:" + ip) != is_public ||
        trellis::is_public_address("64:ff9b::" + ip) != is_public) {
      bug("an IPv4 address carried in IPv6 is judged unlike itself");
    }
  }
  const std::string block = trellis::subscriber_block(ip);
  if (is_ip && block.empty()) bug("an address without a block");

  try {
    const trellis::HostPort hp = trellis::parse_host_port(f[2], "relay.upstream");
    if (hp.host.empty() || hp.port < 1 || hp.port > 65535) bug("a HOST:PORT out of range");
  } catch (const trellis::Error&) {
  }
}

// Each 3 bytes: a signer (of 2), a nonce (of 8), a timestamp offset; the first byte's top bits
// pick the client address (two of the three are one subscriber), the last byte's move the clock.
// Checked against a record of every kFresh: a nonce taken within its window is a replay, one never
// taken is never called one, an address never holds more than its share (nor the window more than
// its capacity), and a nonce is not refused while its address and the window are both far from
// full (counting every nonce ever taken, a bound on those remembered).
void nonce_window(const uint8_t* data, size_t size) {
  constexpr int64_t kW = 10;
  constexpr size_t kCapacity = 6, kPerAddress = 3;
  const char* const addresses[] = {"10.0.0.1", "10.0.0.2", "::ffff:10.0.0.1"};
  trellis::NonceWindow window(kW, kCapacity, kPerAddress, 0);
  std::map<std::string, int64_t> taken;  // "signer:nonce" -> the timestamp it was taken with
  struct Held {
    int block;
    int64_t forget_after;  // remembered at least until then
  };
  std::vector<Held> held;
  size_t taken_of_block[2] = {0, 0}, taken_in_all = 0;
  int64_t now = 100;
  for (size_t i = 0; i + 3 <= size; i += 3) {
    const std::string signer(1, static_cast<char>('a' + data[i] % 2));
    const std::string nonce(1, static_cast<char>('0' + data[i + 1] % 8));
    const int address = (data[i] >> 6) % 3;
    const int block = address == 1 ? 1 : 0;
    const int64_t ts = now - kW + static_cast<int64_t>(data[i + 2] % (2 * kW + 1));
    now += data[i + 2] >> 5;
    const auto r = window.record(signer, nonce, ts, now, addresses[address]);
    const auto it = taken.find(signer + ":" + nonce);
    if (r == trellis::NonceWindow::Result::kReplayed && it == taken.end()) {
      bug("a nonce never taken was called a replay");
    }
    if (r == trellis::NonceWindow::Result::kFresh && it != taken.end() && now <= it->second + kW) {
      bug("a replay within its window was taken as fresh");
    }
    if (r == trellis::NonceWindow::Result::kFull && it == taken.end() &&
        taken_of_block[block] < kPerAddress && taken_in_all < kCapacity) {
      bug("a nonce was refused while neither its address nor the window was full");
    }
    if (r != trellis::NonceWindow::Result::kFresh) continue;
    size_t of_block = 0, all = 0;
    for (const Held& h : held) {
      if (h.forget_after < now) continue;
      ++all;
      if (h.block == block) ++of_block;
    }
    if (of_block >= kPerAddress) bug("an address holds more than its share of the window");
    if (all >= kCapacity) bug("the window holds more than its capacity");
    taken[signer + ":" + nonce] = ts;
    ++taken_of_block[block];
    ++taken_in_all;
    held.push_back({block, std::max(ts, now) + kW});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t knob = data[1];
  switch (data[0] % 4) {
    case 0:
      signed_request(fields(data + 2, size - 2, 8), knob);
      break;
    case 1:
      upload_url(fields(data + 2, size - 2, 4), knob);
      break;
    case 2:
      addresses(fields(data + 1, size - 1, 3));
      break;
    default:
      nonce_window(data + 1, size - 1);
      break;
  }
  return 0;
}
