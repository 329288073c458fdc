#include "model/chat_template.h"

#include <ctime>
#include <optional>
#include <string_view>

#include "common/error.h"

namespace trellis::model {
namespace {

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// Length of the whitespace character (Python's str.isspace) ending at s[.. end), or 0.
size_t space_before(std::string_view s, size_t end) {
  if (end == 0) return 0;
  const auto b = static_cast<unsigned char>(s[end - 1]);
  if (b == ' ' || (b >= 0x09 && b <= 0x0d) || (b >= 0x1c && b <= 0x1f)) return 1;
  for (std::string_view w : {"\u0085", "\u00a0", "\u1680", "\u2028", "\u2029", "\u202f", "\u205f",
                             "\u3000", "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005",
                             "\u2006", "\u2007", "\u2008", "\u2009", "\u200a"}) {
    if (end >= w.size() && s.substr(end - w.size(), w.size()) == w) return w.size();
  }
  return 0;
}

// Length of the whitespace character starting at s[begin], or 0.
size_t space_at(std::string_view s, size_t begin) {
  for (size_t n = 1; n <= 3 && begin + n <= s.size(); ++n) {
    if (space_before(s.substr(0, begin + n), begin + n) == n) return n;
  }
  return 0;
}

// Jinja's `| trim` (Python's str.strip()).
std::string trim(std::string_view s) {
  size_t begin = 0, end = s.size();
  while (begin < end) {
    const size_t n = space_at(s, begin);
    if (n == 0) break;
    begin += n;
  }
  while (end > begin) {
    const size_t n = space_before(s, end);
    if (n == 0) break;
    end -= n;
  }
  return std::string(s.substr(begin, end - begin));
}

std::string lstrip(std::string_view s, char c) {
  while (!s.empty() && s.front() == c) s.remove_prefix(1);
  return std::string(s);
}

std::string rstrip(std::string_view s, char c) {
  while (!s.empty() && s.back() == c) s.remove_suffix(1);
  return std::string(s);
}

// Python's s.split(sep)[0] and s.split(sep)[-1].
std::string_view before_first(std::string_view s, std::string_view sep) {
  return s.substr(0, s.find(sep));
}
std::string_view after_last(std::string_view s, std::string_view sep) {
  const size_t at = s.rfind(sep);
  return at == std::string_view::npos ? s : s.substr(at + sep.size());
}

// The text of a Jinja string literal's body (\n, \t, \', \" and \\ escapes).
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
  }
  return out;
}

// Qwen2/2.5 templates print a literal '<|im_start|>system\n...<|im_end|>\n' when the messages
// bring no system prompt; returns its text ("" when the template has none).
std::string find_default_system(const std::string& source) {
  for (char quote : {'\'', '"'}) {
    const std::string open = std::string(1, quote) + "<|im_start|>system\\n";
    const std::string close = std::string("<|im_end|>\\n") + quote;
    for (size_t at = source.find(open); at != std::string::npos;
         at = source.find(open, at + open.size())) {
      const size_t begin = at + open.size();
      const size_t end = source.find(close, begin);
      if (end == std::string::npos) break;
      const std::string_view body(source.data() + begin, end - begin);
      if (!contains(body, std::string(1, quote)) && !contains(body, "<|im_start|>")) {
        return unescape(body);
      }
    }
  }
  return "";
}

bool is_jinja_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

size_t skip_spaces(std::string_view s, size_t at) {
  while (at < s.size() && is_jinja_space(s[at])) ++at;
  return at;
}

// The literal of Llama-3.1's `{%- set date_string = "26 Jul 2024" %}`: the first `set`, spaces,
// `date_string`, `=` and a quoted string, read by hand. (std::regex recursed once per character
// of the literal and overflowed the stack on a template with a literal of 100 KB.)
std::optional<std::string> find_date_string(std::string_view source) {
  constexpr std::string_view kSet = "set", kName = "date_string";
  for (size_t at = source.find(kSet); at != std::string_view::npos;
       at = source.find(kSet, at + 1)) {
    size_t i = skip_spaces(source, at + kSet.size());
    if (i == at + kSet.size() || source.substr(i, kName.size()) != kName) continue;
    i = skip_spaces(source, i + kName.size());
    if (i == source.size() || source[i] != '=') continue;
    i = skip_spaces(source, i + 1);
    if (i == source.size() || (source[i] != '"' && source[i] != '\'')) continue;
    const size_t end = source.find_first_of("\"'", i + 1);
    if (end == std::string_view::npos) return std::nullopt;  // no later match can close either
    return std::string(source.substr(i + 1, end - i - 1));
  }
  return std::nullopt;
}

void check_roles(std::span<const ChatMessage> messages) {
  if (messages.empty()) throw Error("there are no messages", "chat messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      fail("chat messages", "message {} has role '{}' (expected system, user or assistant)", i,
           role);
    }
  }
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
  return buf;
}

}  // namespace

ChatTemplate ChatTemplate::from_source(const std::string& source, const std::string& bos_token,
                                       const std::string& where) {
  ChatTemplate t;
  t.bos_token_ = bos_token;
  if (source.empty()) {
    throw Error("the model has no chat template (supported formats: ChatML, Llama-3)", where);
  }
  if (contains(source, "<|im_start|>") && contains(source, "<|im_end|>")) {
    t.format_ = Format::kChatML;
    t.default_system_ = find_default_system(source);
    t.thinking_ = contains(source, "</think>");
  } else if (contains(source, "<|start_header_id|>") && contains(source, "<|eot_id|>")) {
    t.format_ = Format::kLlama3;
    t.knowledge_header_ = contains(source, "Cutting Knowledge Date");
    t.date_is_today_ = contains(source, "strftime_now");
    t.date_string_ = find_date_string(source).value_or("26 Jul 2024");
  } else {
    throw Error(
        "the chat template is in an unsupported format (supported: ChatML with "
        "<|im_start|>/<|im_end|>, Llama-3 with <|start_header_id|>/<|eot_id|>)",
        where);
  }
  return t;
}

ChatTemplate ChatTemplate::for_tokenizer(const Tokenizer& tokenizer, const std::string& where) {
  std::string bos;
  if (auto id = tokenizer.bos_id()) {
    bos = tokenizer.token_bytes(*id);
  } else if (tokenizer.token_to_id("<|begin_of_text|>")) {
    bos = "<|begin_of_text|>";
  }
  return from_source(tokenizer.chat_template(), bos, where);
}

const char* ChatTemplate::format_name() const {
  return format_ == Format::kChatML ? "chatml" : "llama3";
}

const char* ChatTemplate::end_of_turn() const {
  return format_ == Format::kChatML ? "<|im_end|>" : "<|eot_id|>";
}

ChatTemplate::Rendered ChatTemplate::render_parts(std::span<const ChatMessage> messages,
                                                  const ChatOptions& options) const {
  check_roles(messages);
  return format_ == Format::kChatML ? render_chatml(messages, options)
                                    : render_llama3(messages, options);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 const ChatOptions& options) const {
  return render_parts(messages, options).text;
}

std::vector<int32_t> ChatTemplate::encode(const Tokenizer& tokenizer,
                                          std::span<const ChatMessage> messages,
                                          const ChatOptions& options) const {
  const Rendered r = render_parts(messages, options);
  return tokenizer.encode(r.text, r.contents);
}

ChatTemplate::Rendered ChatTemplate::render_chatml(std::span<const ChatMessage> messages,
                                                   const ChatOptions& options) const {
  Rendered out;
  if (!default_system_.empty() && messages.front().role != "system") {
    out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
  }
  // Qwen3: the last user message that is not a tool response splits history from the current turn.
  size_t last_query = messages.size() - 1;
  for (size_t i = messages.size(); i-- > 0;) {
    const std::string_view c = messages[i].content;
    if (messages[i].role == "user" &&
        !(c.starts_with("<tool_response>") && c.ends_with("</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (m.role != "assistant" || !thinking_) {
      out += "<|im_start|>" + m.role + "\n";
      out.add_content(m.content);
      out += "<|im_end|>\n";
      continue;
    }
    std::string content = m.content, reasoning;
    if (contains(m.content, "</think>")) {
      content = lstrip(after_last(m.content, "</think>"), '\n');
      reasoning =
          lstrip(after_last(rstrip(before_first(m.content, "</think>"), '\n'), "<think>"), '\n');
    }
    out += "<|im_start|>assistant\n";
    if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
      out += "<think>\n";
      out.add_content(lstrip(rstrip(reasoning, '\n'), '\n'));
      out += "\n</think>\n\n";
      out.add_content(lstrip(content, '\n'));
    } else {
      out.add_content(content);
    }
    out += "<|im_end|>\n";
  }
  if (options.add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (thinking_ && options.enable_thinking == false) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

ChatTemplate::Rendered ChatTemplate::render_llama3(std::span<const ChatMessage> messages,
                                                   const ChatOptions& options) const {
  Rendered out;
  out += bos_token_;
  if (knowledge_header_) {
    // Llama-3.1+: the system turn always comes first, with the knowledge cutoff and the date.
    std::string system;
    if (messages.front().role == "system") {
      system = trim(messages.front().content);
      messages = messages.subspan(1);
    }
    out += "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n";
    out += "Today Date: " + (date_is_today_ ? today() : date_string_) + "\n\n";
    out.add_content(system);
    out += "<|eot_id|>";
  }
  for (const auto& m : messages) {
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
    out.add_content(trim(m.content));
    out += "<|eot_id|>";
  }
  if (options.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

}  // namespace trellis::model
