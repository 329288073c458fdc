#include "cli/prompting.h"

#include <algorithm>

#include "common/error.h"

namespace trellis::cli {

Prompting::Prompting(const std::filesystem::path& dir, const model::Transformer& m)
    : tok(model::Tokenizer::load(dir)) {
  add_bos = m.config().arch == model::Arch::Llama && tok.bos_id().has_value();
  stop_ids = tok.eos_ids();
  for (int64_t id : m.config().eos_token_ids) {
    if (std::find(stop_ids.begin(), stop_ids.end(), id) == stop_ids.end()) {
      stop_ids.push_back(static_cast<int32_t>(id));
    }
  }
  try {
    chat = model::ChatTemplate::for_tokenizer(tok, dir.string());
  } catch (const Error& e) {
    chat_error = e.what();
  }
}

std::vector<int32_t> Prompting::encode(const std::string& text) const {
  std::vector<int32_t> ids;
  if (add_bos) ids.push_back(*tok.bos_id());
  for (int32_t id : tok.encode(text)) ids.push_back(id);
  return ids;
}

std::vector<int32_t> Prompting::encode_chat(const std::string& user_message) const {
  return encode_chat(std::vector<model::ChatMessage>{{"user", user_message}});
}

std::vector<int32_t> Prompting::encode_chat(const std::vector<model::ChatMessage>& messages) const {
  if (!chat) throw Error(chat_error);
  return chat->encode(tok, messages);  // the template emits BOS itself where the format has one
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

}  // namespace trellis::cli
