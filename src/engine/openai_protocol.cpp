#include "engine/openai_protocol.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace trellis::engine {
namespace {

const char* error_type(int status) {
  return status >= 500 ? "server_error" : "invalid_request_error";
}

// The field's value, or nullptr when it is absent or null.
const Json* find(const Json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// The field's value; an error naming `name` when it is absent or null.
const Json& required(const Json& obj, const char* key, const std::string& name) {
  const Json* v = find(obj, key);
  if (v == nullptr) bad(name, fmt::format("missing field '{}'", name));
  return *v;
}

int64_t as_int(const Json& v, const std::string& name) {
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      bad(name, fmt::format("'{}' is too large", name));
    }
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.007199254740992e15) {
      return static_cast<int64_t>(d);
    }
  }
  bad(name, fmt::format("'{}' must be an integer, got {}", name, v.dump()));
}

double as_number(const Json& v, const std::string& name) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    bad(name, fmt::format("'{}' must be a number, got {}", name, v.dump()));
  }
  return v.get<double>();
}

bool as_bool(const Json& v, const std::string& name) {
  if (!v.is_boolean()) bad(name, fmt::format("'{}' must be true or false, got {}", name, v.dump()));
  return v.get<bool>();
}

std::string as_string(const Json& v, const std::string& name) {
  if (!v.is_string()) bad(name, fmt::format("'{}' must be a string", name));
  return v.get<std::string>();
}

int32_t as_token_id(const Json& v, const std::string& name) {
  const int64_t id = as_int(v, name);
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
    bad(name, fmt::format("'{}' holds {}, which is not a token id", name, id));
  }
  return static_cast<int32_t>(id);
}

// Fields OpenAI has that Trellis does not implement: refused unless left at their neutral value.
void refuse_unsupported(const Json& body) {
  for (const char* key : {"presence_penalty", "frequency_penalty", "repetition_penalty"}) {
    if (const Json* v = find(body, key)) {
      const double neutral = std::string(key) == "repetition_penalty" ? 1.0 : 0.0;
      if (as_number(*v, key) != neutral) bad(key, fmt::format("'{}' is not supported", key));
    }
  }
  if (const Json* v = find(body, "logit_bias"); v && !v->empty()) {
    bad("logit_bias", "'logit_bias' is not supported");
  }
  if (const Json* v = find(body, "tools"); v && !v->empty()) {
    bad("tools", "tools are not supported");
  }
  if (const Json* v = find(body, "suffix");
      v && !(v->is_string() && v->get<std::string>().empty())) {
    bad("suffix", "'suffix' is not supported");
  }
  if (const Json* v = find(body, "response_format")) {
    if (!v->is_object() || v->value("type", "") != "text") {
      bad("response_format", "only the \"text\" response_format is supported");
    }
  }
}

GenerationParams parse_params(const Json& body, bool chat) {
  refuse_unsupported(body);
  GenerationParams p;
  if (const Json* v = find(body, "model")) p.model = as_string(*v, "model");
  if (const Json* v = find(body, "n")) {
    p.n = as_int(*v, "n");
    if (p.n < 1) bad("n", fmt::format("'n' must be at least 1, got {}", p.n));
    // Checked before anything is sized by it: each choice holds a sequence and its KV cache.
    if (p.n > kMaxChoices)
      bad("n", fmt::format("'n' must be at most {}, got {}", kMaxChoices, p.n));
  }
  if (const Json* v = find(body, "best_of"); v && as_int(*v, "best_of") != p.n) {
    bad("best_of", "'best_of' other than n is not supported");
  }
  const char* max_key =
      chat && find(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (const Json* v = find(body, max_key)) {
    p.max_tokens = as_int(*v, max_key);
    if (*p.max_tokens < 1) {
      bad(max_key, fmt::format("'{}' must be at least 1, got {}", max_key, *p.max_tokens));
    }
  }
  if (const Json* v = find(body, "temperature")) {
    p.sampling.temperature = as_number(*v, "temperature");
    if (p.sampling.temperature < 0) bad("temperature", "'temperature' must be at least 0");
  }
  if (const Json* v = find(body, "top_p")) {
    p.sampling.top_p = as_number(*v, "top_p");
    if (!(p.sampling.top_p > 0 && p.sampling.top_p <= 1)) {
      bad("top_p", "'top_p' must be in (0, 1]");
    }
  }
  if (const Json* v = find(body, "top_k")) {
    const int64_t k = as_int(*v, "top_k");
    if (k < -1) bad("top_k", "'top_k' must be -1 or 0 (off) or a positive count");
    p.sampling.top_k = std::max<int64_t>(k, 0);
  }
  if (const Json* v = find(body, "seed")) p.seed = static_cast<uint64_t>(as_int(*v, "seed"));
  if (const Json* v = find(body, "stop")) {
    if (v->is_string()) {
      p.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const auto& s : *v) p.stop.push_back(as_string(s, "stop"));
    } else {
      bad("stop", "'stop' must be a string or a list of strings");
    }
    for (const auto& s : p.stop) {
      if (s.empty()) bad("stop", "'stop' strings must not be empty");
    }
  }
  if (const Json* v = find(body, "stop_token_ids")) {
    if (!v->is_array()) bad("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    for (const auto& id : *v) p.stop_token_ids.push_back(as_token_id(id, "stop_token_ids"));
  }
  if (chat) {
    const Json* lp = find(body, "logprobs");
    const bool logprobs = lp != nullptr && as_bool(*lp, "logprobs");
    int64_t top = 0;
    if (const Json* v = find(body, "top_logprobs")) {
      top = as_int(*v, "top_logprobs");
      if (top != 0 && !logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    if (top < 0 || top > kMaxLogprobs) {
      bad("top_logprobs", fmt::format("'top_logprobs' must be in [0, {}]", kMaxLogprobs));
    }
    p.logprobs = logprobs ? top : -1;
  } else if (const Json* v = find(body, "logprobs")) {
    p.logprobs = as_int(*v, "logprobs");
    if (p.logprobs < 0 || p.logprobs > kMaxLogprobs) {
      bad("logprobs", fmt::format("'logprobs' must be in [0, {}]", kMaxLogprobs));
    }
  }
  if (const Json* v = find(body, "stream")) p.stream = as_bool(*v, "stream");
  if (const Json* v = find(body, "stream_options")) {
    if (!v->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (const Json* u = find(*v, "include_usage")) {
      p.include_usage = as_bool(*u, "stream_options.include_usage");
    }
  }
  if (const Json* v = find(body, "return_token_ids")) {
    p.return_token_ids = as_bool(*v, "return_token_ids");
  }
  return p;
}

std::vector<int32_t> token_ids(const Json& v, const std::string& name) {
  std::vector<int32_t> ids;
  for (const auto& id : v) ids.push_back(as_token_id(id, name));
  return ids;
}

std::string message_content(const Json& content, const std::string& name, bool assistant) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null() && assistant) return "";
  if (!content.is_array()) bad(name, fmt::format("'{}' must be a string or a list of parts", name));
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string where = fmt::format("{}[{}]", name, i);
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text")) {
      bad(where, fmt::format("'{}' must be {{\"type\": \"text\", \"text\": ...}} (only text "
                             "content is supported)",
                             where));
    }
    if (i > 0) text += "\n";
    text += as_string(part["text"], where + ".text");
  }
  return text;
}

Json byte_list(const std::string& s) {
  Json out = Json::array();
  for (char c : s) out.push_back(static_cast<unsigned char>(c));
  return out;
}

}  // namespace

ApiError::ApiError(int status, const std::string& message, std::string param, std::string code)
    : std::runtime_error(message),
      status_(status),
      param_(std::move(param)),
      code_(std::move(code)) {}

Json ApiError::to_json() const {
  Json e = {{"message", what()},
            {"type", error_type(status_)},
            {"param", param_.empty() ? Json(nullptr) : Json(param_)},
            {"code", code_.empty() ? Json(nullptr) : Json(code_)}};
  return Json{{"error", e}};
}

Json parse_body(const std::string& body) {
  Json j;
  try {  // bounded nesting, and numbers beyond a double refused (nlohmann throws out_of_range)
    j = parse_json(body, "the request body");
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return j;
}

CompletionsRequest parse_completions(const Json& body) {
  CompletionsRequest r;
  r.params = parse_params(body, /*chat=*/false);
  const Json& prompt = required(body, "prompt", "prompt");
  auto one = [&](const Json& p, const std::string& name) {
    PromptInput in;
    if (p.is_string()) {
      in.text = p.get<std::string>();
    } else if (p.is_array() && !p.empty()) {
      in.ids = token_ids(p, name);
    } else {
      bad(name, fmt::format("'{}' must be a string or a non-empty list of token ids", name));
    }
    return in;
  };
  if (prompt.is_array() && !prompt.empty() && !prompt.front().is_number()) {
    for (size_t i = 0; i < prompt.size(); ++i) {
      r.prompts.push_back(one(prompt[i], fmt::format("prompt[{}]", i)));
    }
  } else {
    r.prompts.push_back(one(prompt, "prompt"));
  }
  if (const Json* v = find(body, "echo")) r.echo = as_bool(*v, "echo");
  if (r.echo && r.params.logprobs >= 0) {
    bad("echo", "'echo' with 'logprobs' (prompt log-probs) is not supported");
  }
  return r;
}

ChatRequest parse_chat(const Json& body) {
  ChatRequest r;
  r.params = parse_params(body, /*chat=*/true);
  const Json& messages = required(body, "messages", "messages");
  if (!messages.is_array() || messages.empty()) {
    bad("messages", "'messages' must be a non-empty list of {role, content}");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(where, fmt::format("'{}' must be an object", where));
    std::string r_name = as_string(required(m, "role", where + ".role"), where + ".role");
    if (r_name == "developer") r_name = "system";  // OpenAI's newer name for the system role
    if (r_name != "system" && r_name != "user" && r_name != "assistant") {
      bad(where + ".role",
          fmt::format("'{}.role' must be system, user or assistant, got '{}'", where, r_name));
    }
    auto it = m.find("content");
    if (it == m.end()) bad(where + ".content", fmt::format("missing field '{}.content'", where));
    r.messages.push_back(
        {r_name, message_content(*it, where + ".content", /*assistant=*/r_name == "assistant")});
  }
  if (const Json* v = find(body, "add_generation_prompt")) {
    r.options.add_generation_prompt = as_bool(*v, "add_generation_prompt");
  }
  if (const Json* kwargs = find(body, "chat_template_kwargs")) {
    if (!kwargs->is_object())
      bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (const Json* v = find(*kwargs, "enable_thinking")) {
      r.options.enable_thinking = as_bool(*v, "chat_template_kwargs.enable_thinking");
    }
  }
  return r;
}

Json completion_logprobs(const model::Tokenizer& tok, const TokenRun& run, bool with_top,
                         int64_t offset_base) {
  Json tokens = Json::array(), logprobs = Json::array(), offsets = Json::array();
  Json top = with_top ? Json::array() : Json(nullptr);
  for (size_t i = 0; i < run.tokens.size(); ++i) {
    tokens.push_back(tok.token_bytes(run.tokens[i]));
    logprobs.push_back(run.logprobs[i]);
    offsets.push_back(offset_base + (i < run.offsets.size() ? run.offsets[i] : 0));
    if (with_top) {
      Json alternatives = Json::object();
      if (i < run.top.size()) {
        for (const auto& [id, lp] : run.top[i]) {
          const std::string key = tok.token_bytes(id);
          if (!alternatives.contains(key)) alternatives[key] = lp;  // most likely spelling wins
        }
      }
      top.push_back(std::move(alternatives));
    }
  }
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

Json chat_logprobs(const model::Tokenizer& tok, const TokenRun& run) {
  Json content = Json::array();
  for (size_t i = 0; i < run.tokens.size(); ++i) {
    const std::string text = tok.token_bytes(run.tokens[i]);
    Json top = Json::array();
    if (i < run.top.size()) {
      for (const auto& [id, lp] : run.top[i]) {
        const std::string alt = tok.token_bytes(id);
        top.push_back({{"token", alt}, {"logprob", lp}, {"bytes", byte_list(alt)}});
      }
    }
    content.push_back({{"token", text},
                       {"logprob", run.logprobs[i]},
                       {"bytes", byte_list(text)},
                       {"top_logprobs", std::move(top)}});
  }
  return Json{{"content", std::move(content)}};
}

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return Json{{"prompt_tokens", prompt_tokens},
              {"completion_tokens", completion_tokens},
              {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace trellis::engine
