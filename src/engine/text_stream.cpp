#include "engine/text_stream.h"

#include <algorithm>

namespace trellis::engine {
namespace {

// Bytes at the end of `s` that begin a UTF-8 character still missing bytes.
size_t incomplete_utf8(const std::string& s) {
  for (size_t k = 1; k <= std::min<size_t>(3, s.size()); ++k) {
    const auto b = static_cast<unsigned char>(s[s.size() - k]);
    if ((b & 0xc0) == 0x80) continue;  // a continuation byte: look further back
    const size_t need = b >= 0xf0 && b <= 0xf7 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return need > k ? k : 0;
  }
  return 0;  // stray continuation bytes never complete: send them
}

}  // namespace

int64_t utf8_characters(std::string_view text) {
  int64_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

TextStream::TextStream(const model::Tokenizer& tokenizer, std::vector<std::string> stop)
    : tokenizer_(tokenizer) {
  for (auto& s : stop) {
    if (!s.empty()) stop_.push_back(std::move(s));
  }
}

size_t TextStream::held_back() const {
  size_t held = incomplete_utf8(text_);
  // The longest end of the text that a stop string starts with.
  for (const auto& s : stop_) {
    for (size_t k = std::min(s.size() - 1, text_.size()); k > held; --k) {
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        held = k;
        break;
      }
    }
  }
  return held;
}

std::string TextStream::push(int32_t token) {
  if (stopped_) return "";
  // A token that continues an incomplete character begins inside that character.
  offsets_.push_back(characters_ - (incomplete_utf8(text_) > 0 ? 1 : 0));
  if (!tokenizer_.is_special(token)) {
    const std::string bytes = tokenizer_.token_bytes(token);
    characters_ += utf8_characters(bytes);
    text_ += bytes;
  }
  // A stop string can only begin in the unsent text (anything that could begin one is held back).
  size_t first = std::string::npos;
  for (const auto& s : stop_) first = std::min(first, text_.find(s, sent_));
  if (first != std::string::npos) {
    stopped_ = true;
    text_.resize(first);
  }
  const size_t safe = stopped_ ? text_.size() : text_.size() - held_back();
  if (safe <= sent_) return "";
  std::string out = text_.substr(sent_, safe - sent_);
  sent_ = safe;
  return out;
}

std::string TextStream::finish() {
  std::string out = text_.substr(std::min(sent_, text_.size()));
  sent_ = text_.size();
  return out;
}

}  // namespace trellis::engine
