// A fixed list of common lowercase English words for the text generators (reverse_text, sort).
// Fixed in the source, not read from a system dictionary, so generated tasks are the same on every
// machine.
#pragma once

#include <span>
#include <string_view>

namespace trellis::env {

// About 200 distinct lowercase ASCII words of 3 to 10 letters, in alphabetical order.
std::span<const std::string_view> common_words();

}  // namespace trellis::env
