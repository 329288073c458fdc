// Tokenizer: a Hugging Face `tokenizer.json` byte-level BPE tokenizer (GPT-2, Llama-3,
// Qwen2/2.5/3), plus the special tokens, EOS/BOS ids and chat template from tokenizer_config.json
// and generation_config.json.
//
// Encoding follows the `tokenizers` library's pipeline:
//   1. added tokens (special tokens such as <|im_end|>) are cut out of the text, leftmost-longest
//      first; special ones only when `allow_special`;
//   2. each remaining piece is normalized (none, NFC/NFD/NFKC/NFKD via ICU, or a Sequence);
//   3. pre-tokenized: `Split` (PCRE2 regex, behavior Isolated) and `ByteLevel` (optional prefix
//   space,
//      optional GPT-2 regex), alone or in a `Sequence`;
//   4. each pre-token's bytes are merged by BPE rank (lowest first; `ignore_merges` honoured).
// Arbitrary bytes, invalid UTF-8 included, encode; decode(encode(s)) == s whenever the tokenizer
// has no normalizer, no prefix space and no added token that strips whitespace.
//
// Supported: model.type BPE over the GPT-2 byte-to-unicode alphabet. Everything else (WordPiece,
// Unigram, byte fallback, BPE dropout, Metaspace, other decoders, other Split behaviors, unknown
// normalizers) is rejected at load with an Error naming the field and file, never misread.
//
// A Tokenizer is immutable once loaded; copies share state, and every const method is safe to call
// from many threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"

namespace trellis::model {

// Budgets for tokenizer files, which come with a model from anywhere: each is checked before
// anything is allocated for what it bounds. Real tokenizers are far below them (Gemma 3: 262k
// tokens in a 33 MB tokenizer.json; Qwen2: 151k merges).
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{256} << 20;  // each JSON file
inline constexpr size_t kMaxVocabSize = size_t{1} << 21;  // model.vocab entries; ids below this
inline constexpr size_t kMaxMerges = size_t{1} << 22;     // model.merges entries
inline constexpr size_t kMaxAddedTokens = size_t{1} << 16;

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json (required), DIR/tokenizer_config.json and DIR/generation_config.json
  // (both optional). The chat template comes from tokenizer_config.json's `chat_template` (a
  // string, or a list of {name, template} of which "default" or else the first is taken), else
  // from DIR/chat_template.jinja when that file exists.
  static Tokenizer load(const std::filesystem::path& model_dir);
  // Builds the tokenizer from a parsed tokenizer.json; `where` names it in errors. No BOS/EOS or
  // chat template (those live in the other files). Error on anything over the budgets above.
  static Tokenizer from_json(const Json& tokenizer_json, const std::string& where);

  // Token ids for `text` (any bytes). Never adds BOS/EOS. With allow_special=false, special added
  // tokens in the text are encoded as plain text; non-special added tokens are still matched.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // The same with special tokens matched only where they lie wholly outside the byte ranges
  // `plain` of the text: what a chat message's author wrote cannot stand for the special tokens
  // that frame the turns. Text without special tokens in `plain` encodes as with allow_special.
  struct TextRange {
    size_t begin, end;  // [begin, end)
  };
  std::vector<int32_t> encode(std::string_view text, std::span<const TextRange> plain) const;
  // The pre-tokens BPE would see for `text` (normalized and split; raw bytes, any prefix space
  // included), with no added-token matching. For tests and debugging.
  std::vector<std::string> pre_tokenize(std::string_view text) const;
  // The bytes the ids stand for, concatenated (possibly invalid UTF-8 when a multi-byte character
  // is split across ids). An id that names no token (e.g. in a model's padded vocabulary rows)
  // stands for nothing, as in `tokenizers`; a negative id is an Error.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The raw bytes one token stands for (an added token's content as written); "" for an id that
  // names no token; a negative id is an Error.
  std::string token_bytes(int32_t id) const;

  int32_t vocab_size() const;  // largest id + 1 (added tokens included)
  // The id of a token as spelled in tokenizer.json (byte-level form, e.g. "Ġthe", or an added
  // token's content such as "<|im_end|>").
  std::optional<int32_t> token_to_id(std::string_view token) const;
  bool is_special(int32_t id) const;      // an added token marked special
  std::optional<int32_t> bos_id() const;  // tokenizer_config bos_token, if any
  // tokenizer_config eos_token first, then generation_config eos_token_id (int or list), no
  // repeats.
  std::vector<int32_t> eos_ids() const;
  const std::string& chat_template() const;  // "" if none

 private:
  struct Impl;
  explicit Tokenizer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// Writes DIR/tokenizer.json + DIR/tokenizer_config.json for a fresh model: a byte-level BPE with
// the 256 byte tokens (id = byte value, spelled in GPT-2 byte-to-unicode form), no merges, then the
// special tokens <|endoftext|> <|im_start|> <|im_end|> <|begin_of_text|> <|end_of_text|>
// <|start_header_id|> <|end_header_id|> <|eot_id|> (ids 256..263), with the Qwen2 Split regex and
// no normalizer (so encode/decode round-trip exactly). The files load in HF `tokenizers` too.
// `chat_format` "chatml": eos <|im_end|>, no bos, ChatML template; "llama3": bos <|begin_of_text|>,
// eos <|eot_id|>, the Llama-3-Instruct template. Anything else is an Error.
void write_byte_level_tokenizer(const std::filesystem::path& dir, const std::string& chat_format);

}  // namespace trellis::model
