// libFuzzer target for chat templates: the tokenizer's chat_template comes with a model from
// anywhere, and the messages with every chat request to `trellis serve`. The input is
//   an options byte (bit 0: add_generation_prompt; bits 1-2: enable_thinking unset, true or false;
//   bit 3: a Llama-3 bos_token), the template source up to the first NUL, then the messages
//   separated by NULs, each a role byte ('s' system, 'u' user, 'a' assistant, anything else an
//   unknown role) and its content.
// ChatTemplate::from_source recognises the format; render() writes the prompt. Anything but a
// trellis::Error is a bug, and so is an Error for messages that are all valid (or none for
// messages that are not). A rendered prompt must also be what the format says:
//   - every user message's content is in it (ChatML verbatim; Llama-3 with ASCII spaces trimmed,
//     where no other space character is at its ends);
//   - it ends with the format's generation prompt, or with the end of a turn without one;
//   - it is no longer than the template, the contents and a fixed overhead per message: nothing
//     is repeated.
// scripts/fuzz.sh builds and runs it; fuzz/corpus/chat_template/ holds the seeds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "model/chat_template.h"

namespace {

using trellis::model::ChatMessage;
using trellis::model::ChatOptions;
using trellis::model::ChatTemplate;

std::string_view ascii_trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// Python's str.strip() also strips 0x1c-0x1f and Unicode spaces, which ascii_trim does not.
bool other_space_at_an_end(std::string_view s) {
  auto other = [](unsigned char c) { return c >= 0x80 || (c >= 0x1c && c <= 0x1f); };
  return !s.empty() && (other(s.front()) || other(s.back()));
}

void check_rendered(const ChatTemplate& t, std::string_view source,
                    const std::vector<ChatMessage>& messages, const ChatOptions& options,
                    const std::string& bos, const std::string& out) {
  const bool chatml = t.format() == ChatTemplate::Format::kChatML;
  size_t contents = 0;
  for (const auto& m : messages) {
    contents += m.content.size();
    if (m.role != "user") continue;
    const std::string_view want = chatml ? std::string_view(m.content) : ascii_trim(m.content);
    if ((chatml || !other_space_at_an_end(want)) && out.find(want) == std::string::npos) {
      __builtin_trap();  // a user message is missing from the prompt
    }
  }
  if (options.add_generation_prompt) {
    // Qwen3-style templates (those that mention </think>) close an empty reasoning block when
    // thinking is off.
    const bool think_off = chatml && options.enable_thinking == false &&
                           source.find("</think>") != std::string_view::npos;
    const char* prompt = !chatml     ? "<|start_header_id|>assistant<|end_header_id|>\n\n"
                         : think_off ? "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                                     : "<|im_start|>assistant\n";
    if (!std::string_view(out).ends_with(prompt)) __builtin_trap();
  } else if (!std::string_view(out).ends_with(t.end_of_turn() + std::string(chatml ? "\n" : ""))) {
    __builtin_trap();
  }
  // The template's default system prompt and date literal are parts of its source; a turn adds a
  // header, its role and (Qwen3) a reasoning block of a few dozen bytes.
  const size_t bound = bos.size() + source.size() + contents + 128 * (messages.size() + 2);
  if (out.size() > bound) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = input.find('\0');
  const std::string source(input.substr(0, nul));
  ChatOptions options;
  options.add_generation_prompt = (flags & 1) != 0;
  if ((flags >> 1 & 3) == 1) options.enable_thinking = true;
  if ((flags >> 1 & 3) == 2) options.enable_thinking = false;
  const std::string bos = (flags & 8) != 0 ? "<|begin_of_text|>" : "";

  std::vector<ChatMessage> messages;
  bool roles_valid = true;
  for (size_t at = nul; at != std::string_view::npos && at < input.size();) {
    const size_t next = input.find('\0', at + 1);
    const std::string_view m = input.substr(
        at + 1, next == std::string_view::npos ? std::string_view::npos : next - at - 1);
    const char role = m.empty() ? '\0' : m.front();
    const char* name = role == 's'   ? "system"
                       : role == 'u' ? "user"
                       : role == 'a' ? "assistant"
                                     : "tool";
    roles_valid = roles_valid && (role == 's' || role == 'u' || role == 'a');
    messages.push_back({name, std::string(m.empty() ? m : m.substr(1))});
    at = next;
  }

  try {
    const ChatTemplate t = ChatTemplate::from_source(source, bos, "fuzz");
    const bool should_refuse = messages.empty() || !roles_valid;
    std::string out;
    try {
      out = t.render(messages, options);
    } catch (const trellis::Error&) {
      if (!should_refuse) __builtin_trap();  // valid messages refused
      return 0;
    }
    if (should_refuse) __builtin_trap();  // an unknown role or no messages rendered
    check_rendered(t, source, messages, options, bos, out);
  } catch (const trellis::Error&) {
    // an unsupported template: refused
  }
  return 0;
}
