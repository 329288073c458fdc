// Pulling the final answer out of a model's reply. Replies often reason first and may mention
// candidate answers along the way, so every helper takes the *last* occurrence.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace trellis::env {

// The text of the last <tag>...</tag> block (trimmed), or none. An unclosed last block is none.
std::optional<std::string> last_tagged(std::string_view text, std::string_view tag = "answer");

// The reply without its reasoning: the text after the last "</think>" (all of it when none).
std::string_view strip_reasoning(std::string_view text);

// Whitespace removed from both ends.
std::string_view trim(std::string_view text);

}  // namespace trellis::env
