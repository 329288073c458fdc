#include "model/prompting.h"

#include <algorithm>
#include <utility>

#include "common/error.h"

namespace trellis::model {

Prompting::Prompting(Tokenizer tokenizer, const HfConfig& config, const std::string& where)
    : tok(std::move(tokenizer)) {
  add_bos = config.arch == Arch::Llama && tok.bos_id().has_value();
  stop_ids = tok.eos_ids();
  for (int64_t id : config.eos_token_ids) {
    if (std::find(stop_ids.begin(), stop_ids.end(), id) == stop_ids.end()) {
      stop_ids.push_back(static_cast<int32_t>(id));
    }
  }
  try {
    chat = ChatTemplate::for_tokenizer(tok, where);
  } catch (const Error& e) {
    chat_error = e.what();
  }
}

Prompting Prompting::load(const std::filesystem::path& dir, const HfConfig& config) {
  return Prompting(Tokenizer::load(dir), config, dir.string());
}

std::vector<int32_t> Prompting::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  if (add_bos) ids.push_back(*tok.bos_id());
  for (int32_t id : tok.encode(text)) ids.push_back(id);
  return ids;
}

std::vector<int32_t> Prompting::encode_chat(const std::string& user_message) const {
  const ChatMessage message{"user", user_message};
  return encode_chat(std::span(&message, 1));
}

std::vector<int32_t> Prompting::encode_chat(std::span<const ChatMessage> messages,
                                            const ChatOptions& options) const {
  if (!chat) throw Error(chat_error);
  return chat->encode(tok, messages, options);  // the template emits BOS itself where it has one
}

std::vector<int32_t> Prompting::chat_stop_ids() const {
  std::vector<int32_t> ids = stop_ids;
  if (chat) {
    if (auto id = tok.token_to_id(chat->end_of_turn());
        id && std::find(ids.begin(), ids.end(), *id) == ids.end()) {
      ids.push_back(*id);
    }
  }
  return ids;
}

}  // namespace trellis::model
