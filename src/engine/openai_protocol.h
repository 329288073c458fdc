// The OpenAI API's wire format, as OpenAIServer speaks it: request bodies of /v1/completions and
// /v1/chat/completions parsed into typed requests (every bad field is an ApiError naming it), and
// the JSON of log-probs, usage and errors. No I/O and no engine state: pure functions.
//
// Extensions beyond OpenAI's fields, as vLLM has them: top_k, stop_token_ids,
// return_token_ids, chat_template_kwargs.enable_thinking, add_generation_prompt.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/json.h"
#include "engine/sampler.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"

namespace trellis::engine {

// An error answered as {"error": {"message", "type", "param", "code"}} with an HTTP status.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "");
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  Json to_json() const;

 private:
  int status_;
  std::string param_, code_;
};

inline constexpr int64_t kMaxLogprobs = 20;
// Choices per prompt (`n`) at most: each holds a sequence and its KV cache.
inline constexpr int64_t kMaxChoices = 128;

// What both APIs share: how many completions, how long, how to sample, when to stop.
struct GenerationParams {
  std::string model;  // "" when the request names none
  int64_t n = 1;
  std::optional<int64_t> max_tokens;  // none: the server's default
  SamplingParams sampling;
  std::optional<uint64_t> seed;  // none: a random seed
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  int64_t logprobs = -1;  // -1: no log-probs; else alternatives per token (0 .. kMaxLogprobs)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool return_token_ids = false;
};

// A prompt as sent: text or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> ids;  // when text is empty
};

struct CompletionsRequest {
  GenerationParams params;
  std::vector<PromptInput> prompts;  // a batch: choices of prompt k are k*n .. k*n + n-1
  bool echo = false;
};

struct ChatRequest {
  GenerationParams params;
  std::vector<model::ChatMessage> messages;
  model::ChatOptions options;
};

// Parse a request body (ApiError 400 naming the field for anything malformed).
Json parse_body(const std::string& body);
CompletionsRequest parse_completions(const Json& body);
ChatRequest parse_chat(const Json& body);

// One choice's tokens with what the engine recorded for them.
struct TokenRun {
  std::span<const int32_t> tokens;
  std::span<const float> logprobs;
  std::span<const std::vector<std::pair<int32_t, float>>> top;  // empty unless asked for
  std::span<const int64_t> offsets;  // where each token's text begins (characters)
};

// Completions' {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; `offset_base` is
// added to each text offset (the echoed prompt's length).
Json completion_logprobs(const model::Tokenizer& tok, const TokenRun& run, bool with_top,
                         int64_t offset_base = 0);
// Chat's {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
Json chat_logprobs(const model::Tokenizer& tok, const TokenRun& run);

Json usage_json(int64_t prompt_tokens, int64_t completion_tokens);

}  // namespace trellis::engine
