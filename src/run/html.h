// HTML escaping for text and attribute values inserted into the run report.
#pragma once

#include <string>
#include <string_view>

namespace trellis::run {

// `text` with & < > " ' replaced by character references, safe both as element content and
// inside a quoted attribute value.
std::string html_escape(std::string_view text);

}  // namespace trellis::run
