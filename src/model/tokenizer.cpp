#include "model/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>

#include "common/files.h"

namespace trellis::model {

namespace {

// Ids above this are rejected at load: no real vocabulary comes near it, and a hostile file must
// not make us allocate gigabytes (the token table is indexed by id).
constexpr int64_t kMaxTokenId = static_cast<int64_t>(kMaxVocabSize) - 1;

// The GPT-2 pre-tokenizer regex, as used by ByteLevel with use_regex=true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// The Qwen2 Split regex (Llama-3's, with single digits), used by write_byte_level_tokenizer.
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string sub(const std::string& where, const std::string& field) { return where + ": " + field; }

// ---- UTF-8 ----------------------------------------------------------------------------------

// Length (1..4) of the well-formed UTF-8 character at s[i], storing its code point in `cp`; 0 when
// the bytes there are not one (stray continuation byte, overlong form, surrogate, truncation).
size_t utf8_char(std::string_view s, size_t i, char32_t& cp) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t n;
  char32_t c, min;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  cp = c;
  return n;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// The code point of the character that ends just before s[end], or nullopt if there is none or it
// is not well-formed.
std::optional<char32_t> char_before(std::string_view s, size_t end) {
  for (size_t len = 1; len <= 4 && len <= end; ++len) {
    char32_t cp;
    if (utf8_char(s, end - len, cp) == len) return cp;
  }
  return std::nullopt;
}

bool is_whitespace(char32_t c) { return u_hasBinaryProperty(c, UCHAR_WHITE_SPACE); }

// Rust's char::is_alphanumeric() || '_', which `tokenizers` uses for single_word added tokens.
bool is_word_char(char32_t c) {
  if (c == '_') return true;
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC)) return true;
  const int8_t type = u_charType(c);
  return type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER || type == U_OTHER_NUMBER;
}

// ---- GPT-2 byte <-> unicode -----------------------------------------------------------------

// Byte-level BPE spells each byte as one printable code point: the printable Latin-1 bytes as
// themselves, the rest as 256, 257, ... in byte order.
struct ByteMap {
  std::array<char32_t, 256> to_cp{};
  std::array<int16_t, 512> to_byte{};  // code point -> byte, -1 if none (all code points < 324)

  ByteMap() {
    to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      to_byte[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

std::string bytes_to_byte_level(std::string_view bytes) {
  std::string out;
  for (char b : bytes) append_utf8(out, byte_map().to_cp[static_cast<uint8_t>(b)]);
  return out;
}

// The bytes a byte-level token spelling stands for, or nullopt if a character is outside the map.
std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  std::string out;
  for (size_t i = 0; i < token.size();) {
    char32_t cp;
    const size_t n = utf8_char(token, i, cp);
    if (n == 0 || cp >= byte_map().to_byte.size() || byte_map().to_byte[cp] < 0) {
      return std::nullopt;
    }
    out += static_cast<char>(byte_map().to_byte[cp]);
    i += n;
  }
  return out;
}

// ---- Regex (PCRE2) --------------------------------------------------------------------------

// A compiled pattern, matched in UTF + UCP mode so that \p{L}, \s and (?i) are Unicode-aware.
// PCRE2_MATCH_INVALID_UTF lets it run over arbitrary bytes: invalid sequences never match, so they
// end up in the gaps between matches and are kept.
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
    if (code_ == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      fail(where, "invalid regex at offset {}: {}", offset, reinterpret_cast<const char*>(msg));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // optional: on failure the interpreter runs
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Splits `s` into the matches and the gaps between them, in order, dropping empty pieces
  // (`tokenizers` Split with behavior Isolated). Calls on_piece(std::string_view) for each.
  template <typename OnPiece>
  void split_isolated(std::string_view s, const std::string& where, OnPiece on_piece) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
    if (!md) throw std::bad_alloc();
    size_t prev = 0, offset = 0;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    while (offset <= s.size()) {
      const int rc = pcre2_match(code_, subject, s.size(), offset, 0, md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        fail(where, "regex match failed: {}", reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      const size_t start = ov[0], end = ov[1];
      if (start > prev) on_piece(s.substr(prev, start - prev));
      if (end > start) {
        on_piece(s.substr(start, end - start));
        prev = offset = end;
      } else {  // empty match: step over one character
        if (start >= s.size()) break;
        char32_t cp;
        offset = start + std::max<size_t>(1, utf8_char(s, start, cp));
        prev = start;
      }
    }
    if (prev < s.size()) on_piece(s.substr(prev));
  }

 private:
  pcre2_code* code_ = nullptr;
};

std::string escape_regex(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

// ---- Normalizers (ICU) ----------------------------------------------------------------------

const UNormalizer2* normalizer_instance(const std::string& type) {
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = nullptr;
  if (type == "NFC") n = unorm2_getNFCInstance(&err);
  if (type == "NFD") n = unorm2_getNFDInstance(&err);
  if (type == "NFKC") n = unorm2_getNFKCInstance(&err);
  if (type == "NFKD") n = unorm2_getNFKDInstance(&err);
  if (n != nullptr && U_FAILURE(err)) {
    throw Error(std::string("ICU could not load the ") + type + " normalizer: " + u_errorName(err));
  }
  return n;
}

// Normalizes one well-formed UTF-8 run.
void normalize_valid(const UNormalizer2* norm, std::string_view s, std::string& out) {
  if (std::all_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; })) {
    out += s;  // ASCII is invariant under every normalization form
    return;
  }
  UErrorCode err = U_ZERO_ERROR;
  std::u16string in(s.size(), u'\0');
  int32_t in_len = 0;
  u_strFromUTF8(in.data(), static_cast<int32_t>(in.size()), &in_len, s.data(),
                static_cast<int32_t>(s.size()), &err);
  std::u16string normalized(static_cast<size_t>(in_len) * 2 + 16, u'\0');
  int32_t n_len = unorm2_normalize(norm, in.data(), in_len, normalized.data(),
                                   static_cast<int32_t>(normalized.size()), &err);
  if (err == U_BUFFER_OVERFLOW_ERROR) {
    err = U_ZERO_ERROR;
    normalized.resize(static_cast<size_t>(n_len));
    n_len = unorm2_normalize(norm, in.data(), in_len, normalized.data(), n_len, &err);
  }
  std::string utf8(static_cast<size_t>(n_len) * 3, '\0');
  int32_t utf8_len = 0;
  u_strToUTF8(utf8.data(), static_cast<int32_t>(utf8.size()), &utf8_len, normalized.data(), n_len,
              &err);
  if (U_FAILURE(err)) throw Error(std::string("unicode normalization failed: ") + u_errorName(err));
  out.append(utf8.data(), static_cast<size_t>(utf8_len));
}

// Normalizes `s`, passing bytes that are not well-formed UTF-8 through unchanged.
std::string normalize_bytes(const UNormalizer2* norm, std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t run = 0, i = 0;
  while (i < s.size()) {
    char32_t cp;
    const size_t n = utf8_char(s, i, cp);
    if (n > 0) {
      i += n;
      continue;
    }
    normalize_valid(norm, s.substr(run, i - run), out);
    out += s[i];
    run = ++i;
  }
  normalize_valid(norm, s.substr(run), out);
  return out;
}

// ---- Parts of the model ---------------------------------------------------------------------

struct TokenInfo {
  std::string bytes;     // what the token decodes to
  bool present = false;  // some token has this id
  bool special = false;  // an added token marked special
};

struct AddedToken {
  int32_t id = 0;
  std::string content;  // as written in tokenizer.json
  std::string match;    // what is searched for: content, normalized when `normalized`
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

struct PreStep {
  std::shared_ptr<const Regex> regex;  // split with it (Isolated) when set
  bool add_prefix_space = false;       // ByteLevel: prepend ' ' to pieces not starting with one
};

struct MergeTarget {
  uint32_t rank = 0;
  int32_t id = 0;
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Token pair -> merge, as an open-addressing table (linear probing, load <= 1/2): BPE looks pairs
// up constantly, and a flat table keeps that to about one cache miss.
class MergeTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    if (cap > slots_.size()) rehash(cap);
  }
  void set(uint64_t key, MergeTarget value) {
    if (2 * (size_ + 1) > slots_.size()) rehash(std::max<size_t>(16, 2 * slots_.size()));
    Slot& slot = slots_[slot_of(key)];
    if (slot.key == kEmpty) ++size_;
    slot = {key, value};
  }
  const MergeTarget* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    const Slot& slot = slots_[slot_of(key)];
    return slot.key == kEmpty ? nullptr : &slot.value;
  }

 private:
  struct Slot {
    uint64_t key;
    MergeTarget value;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // no pair of valid ids has this key

  static size_t mix(uint64_t k) {  // the splitmix64 finalizer
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebULL;
    return static_cast<size_t>(k ^ (k >> 31));
  }
  // The slot holding `key`, or the empty one where it would go.
  size_t slot_of(uint64_t key) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = mix(key) & mask;; i = (i + 1) & mask) {
      if (slots_[i].key == key || slots_[i].key == kEmpty) return i;
    }
  }
  void rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{kEmpty, {}});
    for (const Slot& s : old) {
      if (s.key != kEmpty) slots_[slot_of(s.key)] = s;
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

}  // namespace

// ---- Tokenizer::Impl ------------------------------------------------------------------------

struct Tokenizer::Impl {
  std::string where;              // the tokenizer.json, for errors
  std::vector<TokenInfo> tokens;  // by id
  StringMap vocab;                // model vocabulary, as spelled in tokenizer.json
  StringMap vocab_by_bytes;       // model vocabulary by decoded bytes (byte-level spellings only)
  StringMap added_by_content;
  std::array<int32_t, 256> byte_ids{};  // the token of each single byte, -1 if none
  MergeTable merges;
  bool ignore_merges = false;
  std::optional<int32_t> unk_id;
  std::vector<const UNormalizer2*> normalizers;  // applied in order
  std::vector<PreStep> pre_steps;                // applied in order
  std::vector<AddedToken> added;
  // Per matching pass (0: raw text, 1: normalized text) and first byte: indices into `added`,
  // longest match string first.
  std::array<std::array<std::vector<int32_t>, 256>, 2> added_index;
  std::array<bool, 2> has_added{false, false};

  std::optional<int32_t> bos;
  std::vector<int32_t> eos;
  std::string chat_template;

  std::string normalize(std::string_view s) const {
    std::string out(s);
    for (const UNormalizer2* n : normalizers) out = normalize_bytes(n, out);
    return out;
  }

  // Cuts the added tokens of pass `pass` out of `s` (leftmost, then longest, as `tokenizers`
  // does), calling on_text(string_view) for the text between them and on_added(id) for each.
  // allow_special(begin, end): whether a special token may stand at bytes [begin, end) of s.
  template <typename AllowSpecial, typename OnText, typename OnAdded>
  void split_added(std::string_view s, int pass, AllowSpecial allow_special, OnText on_text,
                   OnAdded on_added) const {
    if (!has_added[pass]) {
      if (!s.empty()) on_text(s);
      return;
    }
    const auto& index = added_index[pass];
    size_t start_offset = 0, i = 0;
    while (i < s.size()) {
      const AddedToken* hit = nullptr;
      for (int32_t k : index[static_cast<uint8_t>(s[i])]) {
        const AddedToken& t = added[k];
        if (s.compare(i, t.match.size(), t.match) == 0 &&
            (!t.special || allow_special(i, i + t.match.size()))) {
          hit = &t;
          break;
        }
      }
      if (hit == nullptr) {
        ++i;
        continue;
      }
      size_t start = i, stop = i + hit->match.size();
      i = stop;
      if (hit->single_word) {
        const auto before = char_before(s, start);
        char32_t after = 0;
        const bool word_after =
            stop < s.size() && utf8_char(s, stop, after) > 0 && is_word_char(after);
        if ((before && is_word_char(*before)) || word_after) continue;
      }
      if (hit->lstrip) {  // absorb the whitespace before it
        size_t keep = start_offset;
        for (size_t j = start_offset; j < start;) {
          char32_t cp;
          const size_t n = utf8_char(s, j, cp);
          j += std::max<size_t>(n, 1);
          if (n == 0 || !is_whitespace(cp)) keep = j;
        }
        start = keep;
      }
      if (hit->rstrip) {  // and after it
        char32_t cp;
        for (size_t n; stop < s.size() && (n = utf8_char(s, stop, cp)) > 0 && is_whitespace(cp);) {
          stop += n;
        }
        i = stop;
      }
      if (start_offset < start) on_text(s.substr(start_offset, start - start_offset));
      on_added(hit->id);
      start_offset = stop;
    }
    if (start_offset < s.size()) on_text(s.substr(start_offset));
  }

  int32_t byte_token(uint8_t b) const {
    if (byte_ids[b] >= 0) return byte_ids[b];
    if (unk_id) return *unk_id;
    fail(where, "the vocabulary has no token for byte 0x{:02x} and no unk_token", b);
  }

  // BPE over the bytes of one pre-token: repeatedly merge the adjacent pair of lowest rank
  // (leftmost first among equal ranks), using a heap of candidate pairs and a linked list.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (ignore_merges) {
      if (auto it = vocab_by_bytes.find(piece); it != vocab_by_bytes.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const auto n = static_cast<int32_t>(piece.size());
    if (n == 1) {
      out.push_back(byte_token(static_cast<uint8_t>(piece[0])));
      return;
    }
    struct Sym {
      int32_t id, prev, next;
    };
    struct Cand {
      uint32_t rank;
      int32_t pos, left, right, merged;
      bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    thread_local std::vector<Sym> syms;  // reused across calls: no allocation per pre-token
    thread_local std::vector<Cand> heap;
    syms.resize(static_cast<size_t>(n));
    heap.clear();
    for (int32_t k = 0; k < n; ++k) {
      syms[k] = {byte_token(static_cast<uint8_t>(piece[k])), k - 1, k + 1 < n ? k + 1 : -1};
    }
    auto consider = [&](int32_t pos) {
      if (pos < 0 || syms[pos].next < 0) return;
      const int32_t left = syms[pos].id, right = syms[syms[pos].next].id;
      if (const MergeTarget* m = merges.find(pair_key(left, right))) {
        heap.push_back({m->rank, pos, left, right, m->id});
        std::push_heap(heap.begin(), heap.end(), std::greater<>());
      }
    };
    for (int32_t k = 0; k + 1 < n; ++k) consider(k);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      const Cand c = heap.back();
      heap.pop_back();
      Sym& left = syms[c.pos];
      if (left.id != c.left || left.next < 0 || syms[left.next].id != c.right) continue;  // stale
      const int32_t right = left.next;
      left.id = c.merged;
      left.next = syms[right].next;
      if (left.next >= 0) syms[left.next].prev = c.pos;
      syms[right].id = -1;
      consider(left.prev);
      consider(c.pos);
    }
    for (int32_t k = 0; k >= 0; k = syms[k].next) out.push_back(syms[k].id);
    if (n > 65536) {  // do not keep a huge pre-token's buffers for the thread's lifetime
      syms = {};
      heap = {};
    }
  }

  // Splits text that holds no added token into pre-tokens (raw bytes).
  std::vector<std::string> pre_tokenize(std::string_view text) const {
    std::vector<std::string> pieces, next;
    if (!text.empty()) pieces.emplace_back(text);
    for (const PreStep& step : pre_steps) {
      next.clear();
      for (std::string& p : pieces) {
        if (step.add_prefix_space && p[0] != ' ') p.insert(p.begin(), ' ');
        if (step.regex) {
          step.regex->split_isolated(p, where, [&](std::string_view s) { next.emplace_back(s); });
        } else {
          next.push_back(std::move(p));
        }
      }
      std::swap(pieces, next);
    }
    return pieces;
  }

  void encode_plain(std::string_view text, std::vector<int32_t>& out) const {
    for (const std::string& p : pre_tokenize(text)) bpe(p, out);
  }

  // The bytes of token `id`; "" for an id that names no token (a model's vocabulary is often
  // padded past the tokenizer's, and `tokenizers` also decodes such ids to nothing).
  const std::string& bytes_of(int32_t id) const {
    static const std::string kNone;
    if (id < 0) fail(where, "token id {} is negative", id);
    if (id >= static_cast<int32_t>(tokens.size())) return kNone;
    return tokens[id].bytes;
  }

  void set_token(int32_t id, std::string bytes, const std::string& at) {
    if (id < 0 || id > kMaxTokenId) fail(at, "token id {} is out of range", id);
    if (static_cast<size_t>(id) >= tokens.size()) tokens.resize(static_cast<size_t>(id) + 1);
    tokens[id].bytes = std::move(bytes);
    tokens[id].present = true;
  }

  std::optional<int32_t> lookup(std::string_view token) const {
    if (auto it = added_by_content.find(token); it != added_by_content.end()) return it->second;
    if (auto it = vocab.find(token); it != vocab.end()) return it->second;
    return std::nullopt;
  }

  void parse_model(const Json& model, const std::string& at);
  void parse_added_tokens(const Json& list, const std::string& at);
  void parse_normalizer(const Json& n, const std::string& at);
  void parse_pre_tokenizer(const Json& p, const std::string& at, bool& byte_level);
};

void Tokenizer::Impl::parse_model(const Json& model, const std::string& at) {
  if (!model.is_object()) fail(at, "field 'model' must be an object");
  const auto type = json_required<std::string>(model, "type", at);
  if (type != "BPE") fail(where, "unsupported tokenizer model type '{}'", type);
  if (json_optional<double>(model, "dropout", 0.0, at) != 0.0) {
    fail(at, "BPE dropout is not supported (field 'dropout')");
  }
  if (json_optional<bool>(model, "byte_fallback", false, at)) {
    fail(at, "byte_fallback is not supported (only byte-level BPE is)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!json_optional<std::string>(model, key, "", at).empty()) {
      fail(at, "field '{}' is not supported", key);
    }
  }
  ignore_merges = json_optional<bool>(model, "ignore_merges", false, at);

  if (!model.contains("vocab")) fail(at, "missing field 'vocab'");
  const Json& v = model.at("vocab");
  if (!v.is_object()) fail(at, "field 'vocab' must be an object of token -> id");
  const std::string vocab_at = sub(at, "vocab");
  if (v.size() > kMaxVocabSize) {
    fail(vocab_at, "{} tokens, more than the limit of {}", v.size(), kMaxVocabSize);
  }
  byte_ids.fill(-1);
  vocab.reserve(v.size());
  for (const auto& [text, id_json] : v.items()) {
    if (!id_json.is_number_integer()) fail(vocab_at, "the id of '{}' must be an integer", text);
    const auto id64 = id_json.get<int64_t>();
    if (id64 < 0 || id64 > kMaxTokenId) fail(vocab_at, "token id {} is out of range", id64);
    const auto id = static_cast<int32_t>(id64);
    if (id < static_cast<int32_t>(tokens.size()) && tokens[id].present) {
      fail(vocab_at, "token id {} is used twice ('{}')", id, text);
    }
    // ByteLevel decoding: a spelling outside the byte alphabet decodes to its own UTF-8 bytes.
    auto bytes = byte_level_to_bytes(text);
    if (bytes) {
      vocab_by_bytes.emplace(*bytes, id);
      if (bytes->size() == 1) byte_ids[static_cast<uint8_t>((*bytes)[0])] = id;
    }
    set_token(id, bytes ? std::move(*bytes) : text, vocab_at);
    vocab.emplace(text, id);
  }

  if (auto unk = json_optional<std::string>(model, "unk_token", "", at); !unk.empty()) {
    auto it = vocab.find(unk);
    if (it == vocab.end()) fail(at, "unk_token '{}' is not in the vocabulary", unk);
    unk_id = it->second;
  }

  if (!model.contains("merges")) fail(at, "missing field 'merges'");
  const Json& m = model.at("merges");
  if (!m.is_array()) fail(at, "field 'merges' must be a list");
  const std::string merges_at = sub(at, "merges");
  if (m.size() > kMaxMerges)
    fail(merges_at, "{} merges, more than the limit of {}", m.size(), kMaxMerges);
  merges.reserve(m.size());
  for (size_t rank = 0; rank < m.size(); ++rank) {
    const Json& e = m[rank];
    std::string a, b;
    if (e.is_string()) {
      const auto& line = e.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        fail(merges_at, "merge {} ('{}') must be two tokens separated by one space", rank, line);
      }
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      fail(merges_at, "merge {} must be \"a b\" or [\"a\", \"b\"]", rank);
    }
    std::string ab = a + b;
    for (const std::string* t : {&a, &b, &ab}) {
      if (!vocab.contains(*t)) {
        fail(merges_at, "merge {} ('{} {}') references unknown token '{}'", rank, a, b, *t);
      }
    }
    // As in `tokenizers`, a repeated pair takes its last rank.
    merges.set(pair_key(vocab.at(a), vocab.at(b)), {static_cast<uint32_t>(rank), vocab.at(ab)});
  }
}

void Tokenizer::Impl::parse_added_tokens(const Json& list, const std::string& at) {
  if (list.is_null()) return;
  if (!list.is_array()) fail(at, "field 'added_tokens' must be a list");
  if (list.size() > kMaxAddedTokens) {
    fail(at, "{} added tokens, more than the limit of {}", list.size(), kMaxAddedTokens);
  }
  for (size_t k = 0; k < list.size(); ++k) {
    const Json& e = list[k];
    const std::string item_at = fmt::format("{}[{}]", at, k);
    AddedToken t;
    const auto id64 = json_required<int64_t>(e, "id", item_at);
    if (id64 < 0 || id64 > kMaxTokenId) fail(item_at, "token id {} is out of range", id64);
    t.id = static_cast<int32_t>(id64);
    t.content = json_required<std::string>(e, "content", item_at);
    if (t.content.empty()) fail(item_at, "field 'content' is empty");
    t.special = json_optional<bool>(e, "special", false, item_at);
    t.normalized = json_optional<bool>(e, "normalized", !t.special, item_at);
    t.lstrip = json_optional<bool>(e, "lstrip", false, item_at);
    t.rstrip = json_optional<bool>(e, "rstrip", false, item_at);
    t.single_word = json_optional<bool>(e, "single_word", false, item_at);
    // An added token may repeat a vocabulary entry (GPT-2's <|endoftext|>), with the same id:
    // `tokenizers` gives it the vocabulary's id whatever the file says, so a different one would
    // be misread.
    if (auto it = vocab.find(t.content); it != vocab.end() && it->second != t.id) {
      fail(item_at, "added token '{}' has id {} but the vocabulary gives it id {}", t.content, t.id,
           it->second);
    }
    set_token(t.id, t.content, item_at);
    tokens[t.id].special = t.special;
    added_by_content[t.content] = t.id;
    added.push_back(std::move(t));
  }
}

void Tokenizer::Impl::parse_normalizer(const Json& n, const std::string& at) {
  if (n.is_null()) return;
  const auto type = json_required<std::string>(n, "type", at);
  if (type == "Sequence") {
    const auto list = json_required<Json>(n, "normalizers", at);
    if (!list.is_array()) fail(at, "field 'normalizers' must be a list");
    for (size_t k = 0; k < list.size(); ++k) {
      parse_normalizer(list[k], fmt::format("{}.normalizers[{}]", at, k));
    }
    return;
  }
  const UNormalizer2* norm = normalizer_instance(type);
  if (norm == nullptr) {
    fail(at, "unsupported normalizer type '{}' (supported: NFC, NFD, NFKC, NFKD, Sequence)", type);
  }
  normalizers.push_back(norm);
}

void Tokenizer::Impl::parse_pre_tokenizer(const Json& p, const std::string& at, bool& byte_level) {
  const auto type = json_required<std::string>(p, "type", at);
  if (type == "Sequence") {
    const auto list = json_required<Json>(p, "pretokenizers", at);
    if (!list.is_array()) fail(at, "field 'pretokenizers' must be a list");
    for (size_t k = 0; k < list.size(); ++k) {
      parse_pre_tokenizer(list[k], fmt::format("{}.pretokenizers[{}]", at, k), byte_level);
    }
    return;
  }
  if (byte_level) {  // later steps would see byte-level spellings, which we do not model
    fail(at, "pre-tokenizer '{}' after ByteLevel is not supported", type);
  }
  PreStep step;
  if (type == "ByteLevel") {
    step.add_prefix_space = json_optional<bool>(p, "add_prefix_space", true, at);
    if (json_optional<bool>(p, "use_regex", true, at)) {
      step.regex = std::make_shared<const Regex>(kGpt2Pattern, at);
    }
    byte_level = true;
  } else if (type == "Split") {
    const auto behavior = json_required<std::string>(p, "behavior", at);
    if (behavior != "Isolated") {
      fail(at, "Split behavior '{}' is not supported (only Isolated)", behavior);
    }
    if (json_optional<bool>(p, "invert", false, at)) fail(at, "Split with invert is not supported");
    const auto pattern = json_required<Json>(p, "pattern", at);
    const std::string pattern_at = sub(at, "pattern");
    if (pattern.is_object() && pattern.contains("Regex")) {
      step.regex = std::make_shared<const Regex>(
          json_required<std::string>(pattern, "Regex", pattern_at), pattern_at);
    } else if (pattern.is_object() && pattern.contains("String")) {
      const auto literal = json_required<std::string>(pattern, "String", pattern_at);
      step.regex = std::make_shared<const Regex>(escape_regex(literal), pattern_at);
    } else {
      fail(pattern_at, "field 'pattern' must be {{\"Regex\": ...}} or {{\"String\": ...}}");
    }
  } else {
    fail(at, "unsupported pre_tokenizer type '{}' (supported: ByteLevel, Split, Sequence)", type);
  }
  pre_steps.push_back(std::move(step));
}

// ---- Tokenizer ------------------------------------------------------------------------------

Tokenizer::Tokenizer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::from_json(const Json& j, const std::string& where) {
  auto impl = std::make_shared<Impl>();
  Impl& m = *impl;
  m.where = where;
  if (!j.is_object()) fail(where, "tokenizer.json must be a JSON object");
  if (!j.contains("model")) fail(where, "missing field 'model'");
  m.parse_model(j.at("model"), sub(where, "model"));
  if (j.contains("added_tokens"))
    m.parse_added_tokens(j.at("added_tokens"), sub(where, "added_tokens"));
  if (j.contains("normalizer")) m.parse_normalizer(j.at("normalizer"), sub(where, "normalizer"));

  bool byte_level = false;
  if (j.contains("pre_tokenizer") && !j.at("pre_tokenizer").is_null()) {
    m.parse_pre_tokenizer(j.at("pre_tokenizer"), sub(where, "pre_tokenizer"), byte_level);
  }
  if (!byte_level) {
    fail(sub(where, "pre_tokenizer"),
         "no ByteLevel pre-tokenizer: only byte-level BPE is supported");
  }
  if (!j.contains("decoder") || j.at("decoder").is_null()) {
    fail(where, "missing field 'decoder' (a ByteLevel decoder is required)");
  }
  const auto decoder = json_required<std::string>(j.at("decoder"), "type", sub(where, "decoder"));
  if (decoder != "ByteLevel") {
    fail(sub(where, "decoder"), "unsupported decoder type '{}' (only ByteLevel)", decoder);
  }

  // Matching tables for the added tokens: normalized ones are searched for in normalized text,
  // spelled as the normalizer leaves them.
  for (size_t k = 0; k < m.added.size(); ++k) {
    AddedToken& t = m.added[k];
    t.match = t.normalized ? m.normalize(t.content) : t.content;
    if (t.match.empty()) continue;
    const int pass = t.normalized ? 1 : 0;
    m.added_index[pass][static_cast<uint8_t>(t.match[0])].push_back(static_cast<int32_t>(k));
    m.has_added[pass] = true;
  }
  for (auto& index : m.added_index) {
    for (auto& list : index) {
      std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
        return m.added[a].match.size() > m.added[b].match.size();
      });
    }
  }
  return Tokenizer(std::move(impl));
}

namespace {

// A special token in tokenizer_config.json: a string, {"content": ...} (a serialized AddedToken),
// or null.
std::optional<std::string> config_token(const Json& cfg, const char* key, const std::string& at) {
  if (!cfg.contains(key) || cfg.at(key).is_null()) return std::nullopt;
  const Json& v = cfg.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object()) return json_required<std::string>(v, "content", sub(at, key));
  fail(at, "field '{}' must be a string, an object with 'content', or null", key);
}

// Error if the file at `path` is over kMaxTokenizerFileBytes, before it is read. (A file that
// cannot be examined is left to the read, which names the problem.)
void check_file_size(const std::filesystem::path& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxTokenizerFileBytes) {
    fail(path.string(), "file is {} bytes, more than the limit of {}", size,
         kMaxTokenizerFileBytes);
  }
}

Json read_tokenizer_json(const std::filesystem::path& path) {
  check_file_size(path);
  return read_json_file(path.string());
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& model_dir) {
  const auto tok_path = model_dir / "tokenizer.json";
  Tokenizer tok = from_json(read_tokenizer_json(tok_path), tok_path.string());
  Impl& m = *tok.impl_;

  auto id_of = [&](const std::string& token, const char* key, const std::string& at) {
    auto id = m.lookup(token);
    if (!id) fail(at, "{} '{}' is not a token of {}", key, token, tok_path.string());
    return *id;
  };
  auto add_eos = [&](int32_t id) {
    if (std::find(m.eos.begin(), m.eos.end(), id) == m.eos.end()) m.eos.push_back(id);
  };

  const auto cfg_path = model_dir / "tokenizer_config.json";
  if (std::filesystem::exists(cfg_path)) {
    const std::string at = cfg_path.string();
    const Json cfg = read_tokenizer_json(cfg_path);
    if (!cfg.is_object()) fail(at, "tokenizer_config.json must be a JSON object");
    if (auto bos = config_token(cfg, "bos_token", at)) m.bos = id_of(*bos, "bos_token", at);
    if (auto eos = config_token(cfg, "eos_token", at)) add_eos(id_of(*eos, "eos_token", at));
    if (cfg.contains("chat_template") && !cfg.at("chat_template").is_null()) {
      const Json& t = cfg.at("chat_template");
      if (t.is_string()) {
        m.chat_template = t.get<std::string>();
      } else if (t.is_array() && !t.empty()) {  // [{"name": ..., "template": ...}, ...]
        const Json* pick = &t[0];
        for (const Json& e : t) {
          if (json_optional<std::string>(e, "name", "", at) == "default") pick = &e;
        }
        m.chat_template = json_required<std::string>(*pick, "template", sub(at, "chat_template"));
      } else {
        fail(at, "field 'chat_template' must be a string or a list of {{name, template}}");
      }
    }
  }
  const auto jinja_path = model_dir / "chat_template.jinja";
  if (m.chat_template.empty() && std::filesystem::exists(jinja_path)) {
    check_file_size(jinja_path);
    m.chat_template = read_file(jinja_path);
  }

  const auto gen_path = model_dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    const std::string at = gen_path.string();
    const Json gen = read_tokenizer_json(gen_path);
    if (gen.is_object() && gen.contains("eos_token_id") && !gen.at("eos_token_id").is_null()) {
      const Json& e = gen.at("eos_token_id");
      std::vector<Json> ids = e.is_array() ? e.get<std::vector<Json>>() : std::vector<Json>{e};
      for (const Json& v : ids) {
        if (!v.is_number_integer()) {
          fail(at, "field 'eos_token_id' must be an integer or a list of integers");
        }
        const auto id = v.get<int64_t>();
        if (id < 0 || id >= tok.vocab_size() || !m.tokens[id].present) {
          fail(at, "eos_token_id {} names no token of {}", id, tok_path.string());
        }
        add_eos(static_cast<int32_t>(id));
      }
    }
  }
  return tok;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  if (allow_special) return encode(text, std::span<const TextRange>());
  const TextRange all{0, text.size()};
  return encode(text, std::span(&all, 1));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text,
                                       std::span<const TextRange> plain) const {
  const Impl& m = *impl_;
  const auto outside_plain = [&](size_t begin, size_t end) {
    return std::none_of(plain.begin(), plain.end(),
                        [&](const TextRange& r) { return begin < r.end && r.begin < end; });
  };
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  auto on_added = [&](int32_t id) { out.push_back(id); };
  auto on_normalized = [&](std::string_view s) { m.encode_plain(s, out); };
  m.split_added(
      text, 0, outside_plain,
      [&](std::string_view raw) {
        // The second pass sees pieces of the text (normalized: copies of them).
        const size_t base = static_cast<size_t>(raw.data() - text.data());
        if (m.normalizers.empty()) {
          m.split_added(
              raw, 1, [&](size_t b, size_t e) { return outside_plain(base + b, base + e); },
              on_normalized, on_added);
          return;
        }
        const bool anywhere = outside_plain(base, base + raw.size());
        m.split_added(
            m.normalize(raw), 1, [&](size_t, size_t) { return anywhere; }, on_normalized, on_added);
      },
      on_added);
  return out;
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  return impl_->pre_tokenize(impl_->normalize(text));
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    out += impl_->bytes_of(id);
  }
  return out;
}

std::string Tokenizer::token_bytes(int32_t id) const { return impl_->bytes_of(id); }

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  return impl_->lookup(token);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->tokens[id].special;
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }

std::vector<int32_t> Tokenizer::eos_ids() const { return impl_->eos; }

const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }

// ---- write_byte_level_tokenizer -------------------------------------------------------------

namespace {

const char* const kSpecialTokens[] = {"<|endoftext|>",     "<|im_start|>",    "<|im_end|>",
                                      "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                      "<|end_header_id|>", "<|eot_id|>"};

constexpr const char* kChatmlTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// Meta-Llama-3-Instruct's template.
constexpr const char* kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ "
    "message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}";

Json byte_level_step() {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", false},
          {"use_regex", false}};
}

}  // namespace

void write_byte_level_tokenizer(const std::filesystem::path& dir, const std::string& chat_format) {
  if (chat_format != "chatml" && chat_format != "llama3") {
    fail("write_byte_level_tokenizer", "unknown chat_format '{}' (expected chatml or llama3)",
         chat_format);
  }
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b)
    vocab[bytes_to_byte_level(std::string(1, static_cast<char>(b)))] = b;
  Json added = Json::array();
  int32_t id = 256;
  for (const char* content : kSpecialTokens) {
    added.push_back({{"id", id++},
                     {"content", content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const Json split = {{"type", "Split"},
                      {"pattern", {{"Regex", kQwen2Pattern}}},
                      {"behavior", "Isolated"},
                      {"invert", false}};
  const Json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {split, byte_level_step()}}}},
      {"post_processor", byte_level_step()},
      {"decoder", byte_level_step()},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", Json::array()}}}};

  const bool chatml = chat_format == "chatml";
  Json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                 {"add_bos_token", false},
                 {"add_eos_token", false},
                 {"clean_up_tokenization_spaces", false},
                 {"model_max_length", 131072},
                 {"bos_token", chatml ? Json(nullptr) : Json("<|begin_of_text|>")},
                 {"eos_token", chatml ? "<|im_end|>" : "<|eot_id|>"},
                 {"pad_token", chatml ? "<|endoftext|>" : "<|end_of_text|>"},
                 {"chat_template", chatml ? kChatmlTemplate : kLlama3Template}};

  std::filesystem::create_directories(dir);
  write_file_atomic(dir / "tokenizer.json", tokenizer.dump(2, ' ', false) + "\n");
  write_file_atomic(dir / "tokenizer_config.json", config.dump(2, ' ', false) + "\n");
}

}  // namespace trellis::model
