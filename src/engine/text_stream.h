// TextStream: the text of one completion as its tokens arrive, for servers that stream it. Decoding
// is incremental and UTF-8 safe: the bytes of a character split across tokens are held back until
// the character is complete. Stop strings end the text: whatever could still become a stop string
// is held back too, and once one appears the text ends just before it.
//
// Special tokens (EOS and the like) stand for no text. One TextStream per completion; not
// thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.h"

namespace trellis::engine {

// Unicode characters in UTF-8 text: its bytes that are not continuation bytes.
int64_t utf8_characters(std::string_view text);

class TextStream {
 public:
  // `tokenizer` must outlive the stream. Empty stop strings are ignored.
  explicit TextStream(const model::Tokenizer& tokenizer, std::vector<std::string> stop = {});

  // Adds the next token; returns the text that is now safe to send (possibly empty). Once a stop
  // string appears, returns the text up to it and from then on nothing.
  std::string push(int32_t token);
  // The completion ended: returns the text still held back ("" after a stop string).
  std::string finish();

  bool stopped() const { return stopped_; }  // a stop string ended the text
  // The text so far (sent or not); after a stop string, the text before it.
  const std::string& text() const { return text_; }
  // Tokens pushed before the stop string was complete, that one included (all, if none).
  int64_t tokens() const { return static_cast<int64_t>(offsets_.size()); }
  // Where each counted token's text begins in text(), in Unicode characters.
  const std::vector<int64_t>& offsets() const { return offsets_; }

 private:
  size_t held_back() const;  // bytes at the end of text_ that may not be sent yet

  const model::Tokenizer& tokenizer_;
  std::vector<std::string> stop_;
  std::string text_;
  size_t sent_ = 0;         // bytes of text_ already returned
  int64_t characters_ = 0;  // UTF-8 lead (non-continuation) bytes in text_
  std::vector<int64_t> offsets_;
  bool stopped_ = false;
};

}  // namespace trellis::engine
