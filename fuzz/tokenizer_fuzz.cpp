// libFuzzer target for tokenizer.json: the input is a tokenizer.json, optionally followed by a NUL
// byte and text. The JSON is parsed and loaded as Tokenizer::load does; when it loads, the text
// (or a fixed sample) is encoded with and without special tokens (and with them outside a plain
// range), decoded, and its bytes are also decoded as token ids. Anything but a trellis::Error is a
// bug. scripts/fuzz.sh builds and runs it; fuzz/corpus/tokenizer/ holds the seeds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"
#include "model/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using trellis::model::Tokenizer;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos
                                    ? std::string_view("Hello, wörld! <|im_end|> 12345 \xff\n\n  x")
                                    : input.substr(nul + 1);
  try {
    const Tokenizer tok =
        Tokenizer::from_json(trellis::parse_json(json, "tokenizer.json"), "tokenizer.json");
    for (bool special : {true, false}) {
      const std::vector<int32_t> ids = tok.encode(text, special);
      for (int32_t id : ids) {
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();  // encode only emits real ids
      }
      (void)tok.decode(ids, !special);
    }
    // The middle third as a chat message's content: special tokens there are text.
    const Tokenizer::TextRange content{text.size() / 3, 2 * text.size() / 3};
    for (int32_t id : tok.encode(text, std::span(&content, 1))) {
      if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    }
    (void)tok.pre_tokenize(text);
    std::vector<int32_t> raw(text.size() / 4);
    if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
    (void)tok.decode(raw);  // negative ids are an Error, others decode (possibly to nothing)
    (void)tok.token_to_id(text);
  } catch (const trellis::Error&) {
  }
  return 0;
}
