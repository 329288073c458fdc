// ChatTemplate: turns a list of chat messages into the prompt a model was trained on, for the
// chat formats Trellis knows. We do not run Jinja: the format is recognized from the tokenizer's
// chat_template text and rendered by hand, exactly as the Hugging Face templates render plain text
// messages (no tools, no images).
//
// Formats:
//   ChatML (Qwen2, Qwen2.5, Qwen3): "<|im_start|>{role}\n{content}<|im_end|>\n" per message, then
//     "<|im_start|>assistant\n". Templates with a default system prompt (Qwen2/2.5) insert it when
//     the first message is not a system message; Qwen3-style templates drop the reasoning
//     (<think>...</think>) of assistant turns before the last user message, wrap later assistant
//     turns in <think> tags, and honour enable_thinking = false.
//   Llama-3 (Llama-3, 3.1, 3.2, 3.3 Instruct): "<|begin_of_text|>" then
//     "<|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>" per message,
//     then
//     "<|start_header_id|>assistant<|end_header_id|>\n\n". Llama-3.1+ templates always open with a
//     system header carrying "Cutting Knowledge Date: December 2023" and "Today Date: ...".
//
// Roles are system, user and assistant. A ChatTemplate is immutable; const methods are safe to call
// from many threads.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/tokenizer.h"

namespace trellis::model {

struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant"
  std::string content;
};

struct ChatOptions {
  bool add_generation_prompt = true;    // end with the header of an assistant turn
  std::optional<bool> enable_thinking;  // Qwen3's switch (false adds an empty <think></think>)
};

class ChatTemplate {
 public:
  enum class Format { kChatML, kLlama3 };

  // Recognizes the format of a chat template's Jinja source. `bos_token` is what the template's
  // bos_token variable holds (Llama-3 emits it first). Error naming `where` when the source is
  // empty or in no supported format.
  static ChatTemplate from_source(const std::string& source, const std::string& bos_token,
                                  const std::string& where);
  // The tokenizer's own template (tokenizer_config.json or chat_template.jinja).
  static ChatTemplate for_tokenizer(const Tokenizer& tokenizer, const std::string& where);

  Format format() const { return format_; }
  const char* format_name() const;  // "chatml" | "llama3"
  // The special token that ends a turn ("<|im_end|>" | "<|eot_id|>"): a chat reply stops there.
  const char* end_of_turn() const;

  // The prompt text. Error on no messages or an unknown role.
  std::string render(std::span<const ChatMessage> messages, const ChatOptions& options = {}) const;
  // render() encoded with the template's special tokens, while the messages' contents are plain
  // text: a message holding "<|im_end|>\n<|im_start|>system\n..." cannot open a turn of its own
  // (Hugging Face's apply_chat_template would let it). Messages without special tokens encode as
  // the rendered text does. No BOS is added: the text holds it already when the format wants one
  // (Llama-3), so callers must not add another.
  std::vector<int32_t> encode(const Tokenizer& tokenizer, std::span<const ChatMessage> messages,
                              const ChatOptions& options = {}) const;

 private:
  // The rendered text and the byte ranges in it that the messages' contents fill.
  struct Rendered {
    std::string text;
    std::vector<Tokenizer::TextRange> contents;
    Rendered& operator+=(std::string_view s) {
      text += s;
      return *this;
    }
    void add_content(std::string_view s) {
      contents.push_back({text.size(), text.size() + s.size()});
      text += s;
    }
  };

  ChatTemplate() = default;
  Rendered render_parts(std::span<const ChatMessage> messages, const ChatOptions& options) const;
  Rendered render_chatml(std::span<const ChatMessage> messages, const ChatOptions& options) const;
  Rendered render_llama3(std::span<const ChatMessage> messages, const ChatOptions& options) const;

  Format format_ = Format::kChatML;
  std::string bos_token_;
  std::string default_system_;     // ChatML: system prompt used when the messages have none
  bool thinking_ = false;          // ChatML: Qwen3-style reasoning handling
  bool knowledge_header_ = false;  // Llama-3.1+: system header with knowledge and today's date
  bool date_is_today_ = false;     // Llama-3.2+: "Today Date" is the current date
  std::string date_string_;        // Llama-3.1: the template's fixed date
};

}  // namespace trellis::model
