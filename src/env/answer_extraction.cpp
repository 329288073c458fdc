// Answer extraction helpers (see answer_extraction.h).
#include "env/answer_extraction.h"

namespace trellis::env {

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n\f\v");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n\f\v");
  return text.substr(first, last - first + 1);
}

std::optional<std::string> last_tagged(std::string_view text, std::string_view tag) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const auto start = text.rfind(open);
  if (start == std::string_view::npos) return std::nullopt;
  const auto body = start + open.size();
  const auto end = text.find(close, body);
  if (end == std::string_view::npos) return std::nullopt;
  return std::string(trim(text.substr(body, end - body)));
}

std::string_view strip_reasoning(std::string_view text) {
  const auto end = text.rfind("</think>");
  return end == std::string_view::npos ? text : text.substr(end + 8);
}

}  // namespace trellis::env
