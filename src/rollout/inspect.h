// `trellis rollouts inspect`: a readable report of one rollout file (schema, row groups,
// metadata, summary statistics and the first rows), for people debugging a run or a worker's
// submission. The file is fully decoded and validated first, so a bad file is an Error.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace trellis::rollout {

// The report for the file `bytes`, named `where`, showing its first `show_rows` rows.
std::string inspect_rollout_file(std::string_view bytes, const std::string& where,
                                 size_t show_rows);

}  // namespace trellis::rollout
