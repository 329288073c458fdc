// Prompting: everything a prompt needs besides its text, shared by whatever runs the model
// (`trellis generate`, the OpenAI server): the tokenizer, whether text prompts start with BOS, the
// stop ids, and the chat template when the model has a supported one.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/chat_template.h"
#include "model/hf_config.h"
#include "model/tokenizer.h"

namespace trellis::model {

struct Prompting {
  Tokenizer tok;
  bool add_bos = false;              // Llama-3 expects <|begin_of_text|>; Qwen none
  std::vector<int32_t> stop_ids;     // tokenizer EOS ids, then the model's generation_config ones
  std::optional<ChatTemplate> chat;  // none when the model has no supported template
  std::string chat_error;            // why `chat` is none

  // For a model of `config` whose tokenizer is `tokenizer`; `where` names it in chat_error.
  Prompting(Tokenizer tokenizer, const HfConfig& config, const std::string& where);
  // The tokenizer (and chat template) of the model directory `dir`.
  static Prompting load(const std::filesystem::path& dir, const HfConfig& config);

  // A text prompt's ids (BOS first when the model wants one).
  std::vector<int32_t> encode(const std::string& text) const;
  // One user message rendered with the chat template (Error when there is none), or a conversation.
  std::vector<int32_t> encode_chat(const std::string& user_message) const;
  std::vector<int32_t> encode_chat(std::span<const ChatMessage> messages,
                                   const ChatOptions& options = {}) const;
  // stop_ids plus the chat template's end-of-turn token.
  std::vector<int32_t> chat_stop_ids() const;
};

}  // namespace trellis::model
