// Tests for the tokenizer.json byte-level BPE tokenizer: round trips over arbitrary bytes, merge
// order, pre-tokenizer regexes, added/special tokens, normalization, errors and model directories.
#include "model/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/files.h"
#include "error_of.h"
#include "model/tokenizer_dir.h"

namespace trellis::model {
namespace {

using Ids = std::vector<int32_t>;
using test::error_of;
using test::TempDir;
using test::written_tokenizer;

// The GPT-2 byte -> unicode spelling, written out independently of the implementation.
std::string bl(std::string_view bytes) {
  std::string out;
  for (char ch : bytes) {
    const auto b = static_cast<unsigned char>(ch);
    unsigned cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174))) {
      unsigned n = 0;  // rank of b among the non-printable bytes
      for (unsigned k = 0; k < b; ++k) {
        if (!((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || (k >= 174))) ++n;
      }
      cp = 256 + n;
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

Json byte_level(bool use_regex = false, bool add_prefix_space = false) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", false},
          {"use_regex", use_regex}};
}

Json split(const std::string& regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

Json sequence(const Json& a, const Json& b) {
  return {{"type", "Sequence"}, {"pretokenizers", {a, b}}};
}

const std::string kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A tokenizer.json: the 256 byte tokens (id = byte), then one token per merge (ids from 256, in
// order), each merge given as raw byte strings.
struct Spec {
  std::vector<std::pair<std::string, std::string>> merges;
  Json pre_tokenizer = byte_level();
  Json normalizer = nullptr;
  Json added_tokens = Json::array();
  bool ignore_merges = false;
  bool merges_as_pairs = false;
  std::vector<std::string> extra_vocab;  // raw byte strings appended after the merge tokens
};

Json make_json(const Spec& spec) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[bl(std::string(1, static_cast<char>(b)))] = b;
  Json merges = Json::array();
  int id = 256;
  for (const auto& [a, b] : spec.merges) {
    if (!vocab.contains(bl(a + b))) vocab[bl(a + b)] = id++;
    if (spec.merges_as_pairs) {
      merges.push_back({bl(a), bl(b)});
    } else {
      merges.push_back(bl(a) + " " + bl(b));
    }
  }
  for (const auto& t : spec.extra_vocab) vocab[bl(t)] = id++;
  return {{"version", "1.0"},
          {"added_tokens", spec.added_tokens},
          {"normalizer", spec.normalizer},
          {"pre_tokenizer", spec.pre_tokenizer},
          {"post_processor", nullptr},
          {"decoder", byte_level()},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"ignore_merges", spec.ignore_merges},
            {"vocab", vocab},
            {"merges", merges}}}};
}

Tokenizer make(const Spec& spec) { return Tokenizer::from_json(make_json(spec), "test.json"); }

Json added(int id, const std::string& content, bool special = true) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

Ids bytes_of(std::string_view s) {
  Ids out;
  for (char c : s) out.push_back(static_cast<unsigned char>(c));
  return out;
}

// A tokenizer with a handful of merges over English, CJK, emoji, combining-mark and invalid bytes.
Tokenizer merged_tokenizer(Json pre_tokenizer) {
  Spec spec;
  spec.pre_tokenizer = std::move(pre_tokenizer);
  spec.merges = {{"t", "h"},       {"th", "e"},          {"h", "e"},       {" ", "the"},
                 {"i", "n"},       {"in", "g"},          {" ", " "},       {"  ", "  "},
                 {"\n", "\n"},     {"e", "r"},           {" ", "a"},       {"\xc3", "\xa9"},
                 {"\xcc", "\x81"}, {"e", "\xcc\x81"},    {"\xf0", "\x9f"}, {"\xf0\x9f", "\x98"},
                 {"\xe4", "\xb8"}, {"\xe4\xb8", "\xad"}, {"\xff", "\xfe"}, {"\xff\xfe", "\x80"},
                 {"1", "2"},       {"12", "3"}};
  return make(spec);
}

const std::vector<std::string>& tricky_strings() {
  static const std::vector<std::string> strings = {
      "",
      "a",
      "Hello, world! The theory of everything is nothing.",
      "中文分词测试，中国人民。日本語のテキスト、한국어 텍스트",
      "👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 😀😃",
      "e\u0301 a\u0300\u0301 Z\u0351\u0352\u0353 ñ n\u0303",
      "Привет мир مرحبا بالعالم שלום नमस्ते ΕΛΛΗΝΙΚΆ ไทย",
      "  \t\n\n   \r\n x  \n\t\t y   \n",
      "\xff\xfe\x80",
      "abc\x80"
      "def\xc3",
      "\xe4\xb8",
      "\xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80 \xf8\x88\x80\x80\x80",
      std::string("a\0b\0\0c", 6),
      "I'm 1234567 it's THEY'LL we'd",
      "<|im_start|>user\nhi<|im_end|>\n<|im_end|",
      "x\xff<|eot_id|>\xfe\xe4\xb8\xad",
  };
  return strings;
}

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
  }
  s += static_cast<char>(0x80 | (c & 0x3F));
  return s;
}

// Random strings mixing ASCII, whitespace, raw bytes and valid multi-byte characters.
std::string random_string(std::mt19937& rng) {
  static const char32_t ranges[][2] = {{0x80, 0x7FF},    {0x300, 0x36F},     {0x4E00, 0x9FFF},
                                       {0xAC00, 0xD7A3}, {0x1F300, 0x1FAFF}, {0x200D, 0x200D},
                                       {0xFE0F, 0xFE0F}, {0x10000, 0x10FFFF}};
  std::uniform_int_distribution<int> len_dist(0, 60), kind(0, 9), byte(0, 255);
  std::string s;
  const int len = len_dist(rng);
  for (int i = 0; i < len; ++i) {
    const int k = kind(rng);
    if (k < 3) {
      s += static_cast<char>(std::uniform_int_distribution<int>(32, 126)(rng));
    } else if (k < 5) {
      s += " \n\t\r"[std::uniform_int_distribution<int>(0, 3)(rng)];
    } else if (k < 7) {
      s += static_cast<char>(byte(rng));
    } else {
      const auto& r = ranges[std::uniform_int_distribution<int>(0, 7)(rng)];
      char32_t c = std::uniform_int_distribution<char32_t>(r[0], r[1])(rng);
      if (c >= 0xD800 && c <= 0xDFFF) c = 0xE000;
      s += utf8(c);
    }
  }
  return s;
}

// ---- round trips ----------------------------------------------------------------------------

TEST(Tokenizer, RoundTripWrittenByteLevel) {
  TempDir dir;
  const Tokenizer tok = written_tokenizer("chatml", dir);
  for (const std::string& s : tricky_strings()) {
    for (bool allow_special : {true, false}) {
      const Ids ids = tok.encode(s, allow_special);
      EXPECT_EQ(tok.decode(ids), s) << "input: " << s;
      for (int32_t id : ids) {
        ASSERT_GE(id, 0);
        ASSERT_LT(id, tok.vocab_size());
      }
    }
  }
  // No merges: plain text is its bytes.
  EXPECT_EQ(tok.encode("héllo\xff"), bytes_of("héllo\xff"));
}

TEST(Tokenizer, RoundTripWithMerges) {
  for (const Json& pre : {sequence(split(kLlama3Regex), byte_level()), byte_level(true)}) {
    const Tokenizer tok = merged_tokenizer(pre);
    for (const std::string& s : tricky_strings()) {
      const Ids ids = tok.encode(s);
      EXPECT_EQ(tok.decode(ids), s) << "input: " << s;
    }
    // The merges are used: "the" is one token, and so are "é" and the invalid run.
    EXPECT_EQ(tok.encode("the").size(), 1u);
    EXPECT_EQ(tok.encode("\xc3\xa9").size(), 1u);
    EXPECT_EQ(tok.encode("\xff\xfe\x80").size(), 1u);
  }
}

TEST(Tokenizer, RandomBytesRoundTrip) {
  TempDir dir;
  const Tokenizer written = written_tokenizer("llama3", dir);
  const Tokenizer merged = merged_tokenizer(sequence(split(kLlama3Regex), byte_level()));
  const Tokenizer gpt2 = merged_tokenizer(byte_level(true));
  std::mt19937 rng(12345);
  for (int i = 0; i < 3000; ++i) {
    const std::string s = random_string(rng);
    for (const Tokenizer* tok : {&written, &merged, &gpt2}) {
      const Ids ids = tok->encode(s);
      ASSERT_EQ(tok->decode(ids), s) << "iteration " << i;
    }
  }
}

TEST(Tokenizer, LongInputsRoundTrip) {
  const Tokenizer tok = merged_tokenizer(sequence(split(kLlama3Regex), byte_level()));
  std::string letters(200000, 'a'), spaces(200000, ' '), junk(50000, '\xff');
  std::string mixed;
  for (int i = 0; i < 20000; ++i) mixed += "the 中 \xff\n\n  ";
  for (const std::string* s : {&letters, &spaces, &junk, &mixed}) {
    EXPECT_EQ(tok.decode(tok.encode(*s)), *s);
  }
  EXPECT_EQ(tok.encode(spaces).size(), spaces.size() / 4);  // "  "+"  " merged: 4 spaces a token
}

// ---- BPE merges -----------------------------------------------------------------------------

TEST(Tokenizer, MergesApplyByRank) {
  for (bool pairs : {false, true}) {
    Spec spec;
    spec.merges_as_pairs = pairs;
    // ids: "bc" 256, "ab" 257, "abc" 258 (from "a"+"bc"), "aa" 259.
    spec.merges = {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"a", "a"}};
    const Tokenizer tok = make(spec);
    // Rank order merges b+c first, then a+bc; a greedy left-to-right merge would give "ab" "c".
    EXPECT_EQ(tok.encode("abc"), (Ids{258}));
    EXPECT_EQ(tok.encode("abcbc"), (Ids{258, 256}));
    EXPECT_EQ(tok.encode("abab"), (Ids{257, 257}));
    EXPECT_EQ(tok.encode("abx"), (Ids{257, 'x'}));
    // Among equal ranks the leftmost pair goes first.
    EXPECT_EQ(tok.encode("aaa"), (Ids{259, 'a'}));
    EXPECT_EQ(tok.encode("aaaa"), (Ids{259, 259}));
    EXPECT_EQ(tok.token_bytes(258), "abc");
  }
}

TEST(Tokenizer, MergeChainsFollowRanks) {
  Spec spec;
  // "xy" 256, "yz" 257, "xyz" 258 (xy+z), "wx" 259. In "wxyz": x+y (rank 0) beats w+x (rank 3),
  // then xy+z (rank 2) -> "w" "xyz"; the pair y+z (rank 1) never forms because x+y took the y.
  spec.merges = {{"x", "y"}, {"y", "z"}, {"xy", "z"}, {"w", "x"}};
  const Tokenizer tok = make(spec);
  EXPECT_EQ(tok.encode("wxyz"), (Ids{'w', 258}));
  EXPECT_EQ(tok.encode("yz"), (Ids{257}));
  EXPECT_EQ(tok.encode("wx"), (Ids{259}));
}

TEST(Tokenizer, IgnoreMergesEmitsWholeVocabPieces) {
  Spec spec;
  spec.merges = {{"a", "b"}};  // "ab" 256
  spec.extra_vocab = {"abc"};  // 257, unreachable by merges
  EXPECT_EQ(make(spec).encode("abc"), (Ids{256, 'c'}));
  spec.ignore_merges = true;
  EXPECT_EQ(make(spec).encode("abc"), (Ids{257}));
  // The piece "abcab" is not in the vocabulary, so it goes through the merges.
  EXPECT_EQ(make(spec).encode("abcab"), (Ids{256, 'c', 256}));
}

// ---- pre-tokenizers -------------------------------------------------------------------------

using Pieces = std::vector<std::string>;

TEST(Tokenizer, Gpt2RegexSplitting) {
  Spec spec;
  spec.pre_tokenizer = byte_level(/*use_regex=*/true);
  const Tokenizer tok = make(spec);
  EXPECT_EQ(tok.pre_tokenize("Hello world's 123  x\n"),
            (Pieces{"Hello", " world", "'s", " 123", " ", " x", "\n"}));
  EXPECT_EQ(tok.pre_tokenize("I'LL héllo,  мир!!"),
            (Pieces{"I", "'", "LL", " héllo", ",", " ", " мир", "!!"}));
  EXPECT_EQ(tok.pre_tokenize("a\xff\xfe b"), (Pieces{"a", "\xff\xfe", " b"}));

  spec.pre_tokenizer = byte_level(/*use_regex=*/true, /*add_prefix_space=*/true);
  EXPECT_EQ(make(spec).pre_tokenize("Hello there"), (Pieces{" Hello", " there"}));
  EXPECT_EQ(make(spec).decode(make(spec).encode("Hi")), " Hi");

  // Splitting decides what may merge: "o w" never merges across the " world" boundary.
  spec.pre_tokenizer = byte_level(true);
  spec.merges = {{"o", " "}};
  EXPECT_EQ(make(spec).encode("o w"), (Ids{'o', ' ', 'w'}));
  spec.pre_tokenizer = byte_level(false);
  EXPECT_EQ(make(spec).encode("o w"), (Ids{256, 'w'}));
}

TEST(Tokenizer, Llama3SplitPattern) {
  Spec spec;
  spec.pre_tokenizer = sequence(split(kLlama3Regex), byte_level());
  const Tokenizer tok = make(spec);
  EXPECT_EQ(tok.pre_tokenize("I'M 1234567 x's\n\n  hi!!\n"),
            (Pieces{"I", "'M", " ", "123", "456", "7", " x", "'s", "\n\n", " ", " hi", "!!\n"}));
  EXPECT_EQ(tok.pre_tokenize("we'll THEY'RE"), (Pieces{"we", "'ll", " THEY", "'RE"}));
  EXPECT_EQ(tok.pre_tokenize("(foo)bar"), (Pieces{"(foo", ")bar"}));
  EXPECT_EQ(tok.pre_tokenize("٣٤٥٦"), (Pieces{"٣٤٥", "٦"}));  // \p{N} is Unicode-aware

  // The Qwen2 pattern in written tokenizers splits digits one by one.
  TempDir dir;
  const Tokenizer qwen = written_tokenizer("chatml", dir);
  EXPECT_EQ(qwen.pre_tokenize("x 2024!"), (Pieces{"x", " ", "2", "0", "2", "4", "!"}));
}

TEST(Tokenizer, SplitWithStringPattern) {
  Spec spec;
  spec.pre_tokenizer = sequence(
      {{"type", "Split"}, {"pattern", {{"String", "."}}}, {"behavior", "Isolated"}}, byte_level());
  EXPECT_EQ(make(spec).pre_tokenize("a.b..c"), (Pieces{"a", ".", "b", ".", ".", "c"}));
}

// ---- added and special tokens ---------------------------------------------------------------

TEST(Tokenizer, SpecialTokensMatchedOnlyWhenAllowed) {
  TempDir dir;
  const Tokenizer tok = written_tokenizer("chatml", dir);
  const std::string text = "<|im_start|>user\nhi<|im_end|><|im_end|>";
  Ids expected{257};
  for (int32_t b : bytes_of("user\nhi")) expected.push_back(b);
  expected.push_back(258);
  expected.push_back(258);
  EXPECT_EQ(tok.encode(text), expected);
  EXPECT_EQ(tok.encode(text, /*allow_special=*/false), bytes_of(text));
  EXPECT_EQ(tok.encode("<|im_end|"), bytes_of("<|im_end|"));
  EXPECT_EQ(tok.decode(expected), text);
  EXPECT_EQ(tok.decode(expected, /*skip_special=*/true), "user\nhi");
}

// Special tokens in the plain ranges (a chat message's content) are text; those outside stay
// special, in either pass of added-token matching (raw, and normalized).
TEST(Tokenizer, SpecialTokensInPlainRangesAreText) {
  TempDir dir;
  const Tokenizer tok = written_tokenizer("chatml", dir);
  const std::string text = "<|im_start|>user\nsay <|im_end|> now<|im_end|>";
  const Tokenizer::TextRange content{text.find("say"), text.rfind("<|im_end|>")};
  Ids want{257};
  for (int32_t b : bytes_of("user\nsay <|im_end|> now")) want.push_back(b);
  want.push_back(258);
  EXPECT_EQ(tok.encode(text, std::span(&content, 1)), want);
  EXPECT_EQ(tok.decode(want), text);
  EXPECT_EQ(tok.encode(text, std::span<const Tokenizer::TextRange>()), tok.encode(text, true));
  // A special token that reaches into a plain range is text too.
  const Tokenizer::TextRange tail{text.size() - 3, text.size()};
  Ids straddled = tok.encode(text.substr(0, text.size() - 10), true);
  for (int32_t b : bytes_of("<|im_end|>")) straddled.push_back(b);
  EXPECT_EQ(tok.encode(text, std::span(&tail, 1)), straddled);

  // A special token matched after normalization.
  Spec spec;
  spec.normalizer = {{"type", "NFC"}};
  Json normalized = added(300, "<s>");
  normalized["normalized"] = true;
  spec.added_tokens = {normalized};
  const Tokenizer nfc = make(spec);
  const std::string two = "<s>ab<s>";
  const Tokenizer::TextRange second{5, 8};
  EXPECT_EQ(nfc.encode(two, std::span<const Tokenizer::TextRange>()), (Ids{300, 'a', 'b', 300}));
  EXPECT_EQ(nfc.encode(two, std::span(&second, 1)), bytes_of(two))
      << "a normalized piece that holds plain text matches no special token";
}

TEST(Tokenizer, AddedTokensLongestMatchFirst) {
  Spec spec;
  spec.added_tokens = {added(300, "<x>"), added(301, "<x><y>"), added(302, "plain", false)};
  const Tokenizer tok = make(spec);
  EXPECT_EQ(tok.encode("<x><y><x>"), (Ids{301, 300}));
  EXPECT_EQ(tok.encode("a<x><y"), (Ids{'a', 300, '<', 'y'}));
  // A non-special added token is still matched when special tokens are not allowed.
  EXPECT_EQ(tok.encode("<x>plain", false), (Ids{'<', 'x', '>', 302}));
  EXPECT_TRUE(tok.is_special(300));
  EXPECT_FALSE(tok.is_special(302));
  EXPECT_EQ(tok.decode(Ids{302, 300}, /*skip_special=*/true), "plain");
  EXPECT_EQ(tok.vocab_size(), 303);
}

TEST(Tokenizer, AddedTokenStripAndSingleWord) {
  Spec spec;
  Json l = added(300, "<L>"), r = added(301, "<R>"), w = added(302, "ab", false);
  l["lstrip"] = true;
  r["rstrip"] = true;
  w["single_word"] = true;
  spec.added_tokens = {l, r, w};
  const Tokenizer tok = make(spec);
  EXPECT_EQ(tok.encode("x \t<L>y"), (Ids{'x', 300, 'y'}));
  EXPECT_EQ(tok.encode("x<R> \n y"), (Ids{'x', 301, 'y'}));
  EXPECT_EQ(tok.encode("ab cab ab_"), (Ids{302, ' ', 'c', 'a', 'b', ' ', 'a', 'b', '_'}));
}

TEST(Tokenizer, AddedTokenAlsoInVocab) {  // as GPT-2's <|endoftext|>
  Spec spec;
  spec.extra_vocab = {"<|endoftext|>"};  // id 256
  spec.added_tokens = {added(256, "<|endoftext|>")};
  const Tokenizer tok = make(spec);
  EXPECT_EQ(tok.encode("a<|endoftext|>"), (Ids{'a', 256}));
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 256);
  EXPECT_EQ(tok.decode(Ids{256}), "<|endoftext|>");
}

// ---- normalizers ----------------------------------------------------------------------------

TEST(Tokenizer, NfcNormalizer) {
  Spec spec;
  spec.merges = {{"\xc3", "\xa9"}};                              // "é" 256
  EXPECT_EQ(make(spec).encode("e\u0301"), bytes_of("e\u0301"));  // without NFC: no change
  for (const Json& n :
       {Json{{"type", "NFC"}}, Json{{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}}}) {
    spec.normalizer = n;
    const Tokenizer tok = make(spec);
    EXPECT_EQ(tok.encode("e\u0301"), tok.encode("\u00e9"));
    EXPECT_EQ(tok.encode("e\u0301"), (Ids{256}));
    // Invalid bytes pass through normalization untouched.
    EXPECT_EQ(tok.decode(tok.encode("\xff"
                                    "e\u0301\xfe")),
              "\xff\u00e9\xfe");
  }
  spec.normalizer = {{"type", "NFKC"}};
  EXPECT_EQ(make(spec).decode(make(spec).encode("\ufb01x")), "fix");
}

// ---- errors ---------------------------------------------------------------------------------

TEST(Tokenizer, RejectsUnsupportedModelType) {
  Json j = make_json({});
  j["model"]["type"] = "Unigram";
  const std::string msg = error_of([&] { Tokenizer::from_json(j, "test.json"); });
  EXPECT_NE(msg.find("unsupported tokenizer model type 'Unigram'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test.json"), std::string::npos) << msg;
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j, "test.json"); }).find("'WordPiece'"),
            std::string::npos);
}

TEST(Tokenizer, RejectsMissingFields) {
  Json j = make_json({});
  j["model"].erase("vocab");
  std::string msg = error_of([&] { Tokenizer::from_json(j, "test.json"); });
  EXPECT_NE(msg.find("missing field 'vocab'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test.json: model"), std::string::npos) << msg;

  j = make_json({});
  j["model"].erase("merges");
  msg = error_of([&] { Tokenizer::from_json(j, "test.json"); });
  EXPECT_NE(msg.find("missing field 'merges'"), std::string::npos) << msg;

  j = make_json({});
  j.erase("model");
  EXPECT_NE(error_of([&] { Tokenizer::from_json(j, "test.json"); }).find("missing field 'model'"),
            std::string::npos);

  j = make_json({});
  j["added_tokens"] = {{{"id", 300}}};
  msg = error_of([&] { Tokenizer::from_json(j, "test.json"); });
  EXPECT_NE(msg.find("missing field 'content'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("added_tokens[0]"), std::string::npos) << msg;
}

TEST(Tokenizer, RejectsInvalidJson) {
  TempDir dir;
  write_file_atomic(dir.path() / "tokenizer.json", "{\"model\": {\"type\": \"BPE\",");
  const std::string msg = error_of([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;
  EXPECT_NE(msg.find((dir.path() / "tokenizer.json").string()), std::string::npos) << msg;
  // And a directory without tokenizer.json.
  EXPECT_NE(error_of([&] { Tokenizer::load(dir.path() / "nope"); }).find("tokenizer.json"),
            std::string::npos);
}

TEST(Tokenizer, RejectsMergesWithUnknownTokens) {
  Json j = make_json({});
  j["model"]["merges"] = {"a b"};  // "ab" is not in the vocabulary
  std::string msg = error_of([&] { Tokenizer::from_json(j, "test.json"); });
  EXPECT_NE(msg.find("references unknown token 'ab'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("merges"), std::string::npos) << msg;

  j["model"]["merges"] = Json::array({Json::array({"zz", "a"})});
  msg = error_of([&] { Tokenizer::from_json(j, "test.json"); });
  EXPECT_NE(msg.find("unknown token 'zz'"), std::string::npos) << msg;

  j["model"]["merges"] = {"abc"};
  msg = error_of([&] { Tokenizer::from_json(j, "test.json"); });
  EXPECT_NE(msg.find("merge 0 ('abc')"), std::string::npos) << msg;
}

TEST(Tokenizer, RejectsUnsupportedComponents) {
  struct Case {
    std::function<void(Json&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](Json& j) {
         j["normalizer"] = {{"type", "Lowercase"}};
       },
       "unsupported normalizer type 'Lowercase'"},
      {[](Json& j) {
         j["pre_tokenizer"] = {{"type", "Metaspace"}};
       },
       "unsupported pre_tokenizer type 'Metaspace'"},
      {[](Json& j) {
         j["pre_tokenizer"] =
             sequence({{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Removed"}},
                      byte_level());
       },
       "Split behavior 'Removed'"},
      {[](Json& j) { j["pre_tokenizer"] = split("a"); }, "no ByteLevel pre-tokenizer"},
      {[](Json& j) { j["pre_tokenizer"] = sequence(split("(a"), byte_level()); }, "invalid regex"},
      {[](Json& j) { j["pre_tokenizer"] = sequence(byte_level(), split("a")); }, "after ByteLevel"},
      {[](Json& j) {
         j["decoder"] = {{"type", "WordPiece"}};
       },
       "unsupported decoder type 'WordPiece'"},
      {[](Json& j) { j.erase("decoder"); }, "missing field 'decoder'"},
      {[](Json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {[](Json& j) { j["model"]["dropout"] = 0.1; }, "dropout"},
      {[](Json& j) { j["model"]["vocab"]["dup"] = 5; }, "token id 5 is used twice"},
      {[](Json& j) { j["model"]["vocab"]["neg"] = -1; }, "out of range"},
      {[](Json& j) { j["model"]["vocab"] = Json::array(); }, "field 'vocab' must be an object"},
      {[](Json& j) { j["added_tokens"] = {added(300, "a")}; },
       "added token 'a' has id 300 but the vocabulary gives it id 97"},
  };
  for (const Case& c : cases) {
    Json j = make_json({});
    c.edit(j);
    const std::string msg = error_of([&] { Tokenizer::from_json(j, "test.json"); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "got: '" << msg << "'";
    EXPECT_NE(msg.find("test.json"), std::string::npos) << msg;
  }
}

TEST(Tokenizer, IdsWithoutTokens) {
  // Ids past the tokenizer (a model's padded vocabulary rows) decode to nothing; negative ids are
  // errors.
  const Tokenizer tok = make({});
  EXPECT_EQ(tok.decode(Ids{'a', 256, 1000, 'b'}), "ab");
  EXPECT_EQ(tok.token_bytes(300), "");
  EXPECT_NE(error_of([&] { tok.decode(Ids{1, -5}); }).find("token id -5"), std::string::npos);
  EXPECT_NE(error_of([&] { tok.token_bytes(-1); }).find("token id -1"), std::string::npos);
  EXPECT_FALSE(tok.is_special(-1));
  EXPECT_FALSE(tok.is_special(1000));
}

// ---- model directories ----------------------------------------------------------------------

TEST(Tokenizer, LoadWrittenChatml) {
  TempDir dir;
  const Tokenizer tok = written_tokenizer("chatml", dir);
  EXPECT_EQ(tok.vocab_size(), 264);
  EXPECT_FALSE(tok.bos_id().has_value());
  EXPECT_EQ(tok.eos_ids(), (Ids{258}));
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), 258);
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 256);
  EXPECT_EQ(tok.token_to_id("\xc4\xa0"), 32);  // "Ġ" spells the space byte
  EXPECT_EQ(tok.token_to_id("nope"), std::nullopt);
  EXPECT_EQ(tok.token_bytes(32), " ");
  EXPECT_EQ(tok.token_bytes(0), std::string(1, '\0'));
  EXPECT_TRUE(tok.is_special(263));
  EXPECT_FALSE(tok.is_special(32));
  EXPECT_NE(tok.chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_NE(tok.chat_template().find("add_generation_prompt"), std::string::npos);
  const Json config = read_json_file((dir.path() / "tokenizer_config.json").string());
  EXPECT_EQ(config["eos_token"], "<|im_end|>");
}

TEST(Tokenizer, LoadWrittenLlama3) {
  TempDir dir;
  const Tokenizer tok = written_tokenizer("llama3", dir);
  EXPECT_EQ(tok.bos_id(), 259);
  EXPECT_EQ(tok.eos_ids(), (Ids{263}));
  EXPECT_NE(tok.chat_template().find("<|start_header_id|>"), std::string::npos);
  EXPECT_NE(tok.chat_template().find("bos_token"), std::string::npos);
  EXPECT_NE(error_of([&] { write_byte_level_tokenizer(dir.path(), "alpaca"); }).find("alpaca"),
            std::string::npos);
}

TEST(Tokenizer, LoadMergesGenerationConfigEos) {
  TempDir dir;
  write_byte_level_tokenizer(dir.path(), "llama3");
  write_file_atomic(dir.path() / "generation_config.json", R"({"eos_token_id": [263, 257]})");
  EXPECT_EQ(Tokenizer::load(dir.path()).eos_ids(), (Ids{263, 257}));
  write_file_atomic(dir.path() / "generation_config.json", R"({"eos_token_id": 260})");
  EXPECT_EQ(Tokenizer::load(dir.path()).eos_ids(), (Ids{263, 260}));
  write_file_atomic(dir.path() / "generation_config.json", R"({"eos_token_id": 9999})");
  EXPECT_NE(error_of([&] { Tokenizer::load(dir.path()); }).find("eos_token_id 9999"),
            std::string::npos);
}

TEST(Tokenizer, LoadTokenizerConfigForms) {
  TempDir dir;
  write_byte_level_tokenizer(dir.path(), "chatml");
  const auto cfg = dir.path() / "tokenizer_config.json";
  // Special tokens as serialized AddedTokens, and a list of named templates.
  write_file_atomic(cfg, R"({"bos_token": {"__type": "AddedToken", "content": "<|endoftext|>"},
                             "eos_token": {"content": "<|eot_id|>"},
                             "chat_template": [{"name": "tool_use", "template": "T"},
                                               {"name": "default", "template": "D"}]})");
  Tokenizer tok = Tokenizer::load(dir.path());
  EXPECT_EQ(tok.bos_id(), 256);
  EXPECT_EQ(tok.eos_ids(), (Ids{263}));
  EXPECT_EQ(tok.chat_template(), "D");
  // No template in the config: chat_template.jinja beside it.
  write_file_atomic(cfg, R"({"eos_token": "<|im_end|>"})");
  write_file_atomic(dir.path() / "chat_template.jinja", "{{ messages }}");
  EXPECT_EQ(Tokenizer::load(dir.path()).chat_template(), "{{ messages }}");
  // A special token that is not in the vocabulary.
  write_file_atomic(cfg, R"({"eos_token": "</s>"})");
  const std::string msg = error_of([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(msg.find("eos_token '</s>'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer_config.json"), std::string::npos) << msg;
}

// ---- budgets (fuzz/tokenizer_fuzz.cpp) --------------------------------------------------------

TEST(Tokenizer, RefusesTokenizerFilesOverTheSizeLimit) {
  TempDir dir;
  write_byte_level_tokenizer(dir.path(), "chatml");
  const auto path = dir.path() / "tokenizer.json";
  std::filesystem::resize_file(path, kMaxTokenizerFileBytes + 1);  // sparse: nothing is read
  std::string msg = error_of([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(msg.find("file is 268435457 bytes, more than the limit"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
  write_byte_level_tokenizer(dir.path(), "chatml");
  const auto cfg = dir.path() / "tokenizer_config.json";
  std::filesystem::resize_file(cfg, kMaxTokenizerFileBytes + 1);
  msg = error_of([&] { Tokenizer::load(dir.path()); });
  EXPECT_NE(msg.find("file is 268435457 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find(cfg.string()), std::string::npos) << msg;
}

TEST(Tokenizer, RefusesVocabulariesAndMergesOverTheLimits) {
  auto error = [](const std::function<void(Json&)>& edit) {
    Json j = make_json({});
    edit(j);
    return error_of([&] { Tokenizer::from_json(j, "test.json"); });
  };
  // An id just past the limit: the token table (indexed by id) is never sized for it.
  std::string msg = error([](Json& j) { j["model"]["vocab"]["x"] = kMaxVocabSize; });
  EXPECT_NE(msg.find("token id 2097152 is out of range"), std::string::npos) << msg;
  msg = error([](Json& j) { j["added_tokens"] = {added(kMaxVocabSize, "<x>")}; });
  EXPECT_NE(msg.find("token id 2097152 is out of range"), std::string::npos) << msg;
  // Counts are checked before any entry is read: these entries are not even well-formed.
  msg = error([](Json& j) {
    Json& vocab = j["model"]["vocab"];
    for (size_t i = vocab.size(); i <= kMaxVocabSize; ++i) vocab[std::to_string(i)] = nullptr;
  });
  EXPECT_NE(msg.find("2097153 tokens, more than the limit of 2097152 (test.json: model: vocab)"),
            std::string::npos)
      << msg;
  msg = error([](Json& j) { j["model"]["merges"] = Json::array_t(kMaxMerges + 1); });
  EXPECT_NE(msg.find("4194305 merges, more than the limit of 4194304 (test.json: model: merges)"),
            std::string::npos)
      << msg;
  msg = error([](Json& j) { j["added_tokens"] = Json::array_t(kMaxAddedTokens + 1); });
  EXPECT_NE(msg.find("65537 added tokens, more than the limit"), std::string::npos) << msg;
}

}  // namespace
}  // namespace trellis::model
