// Fixed data sampling (specs/toploc.md §5): which prompts a worker must use for a submission is
// a pure function of (node address, step, submission number), so a validator can recompute the
// indices and a worker cannot cherry-pick easy prompts or repeat ones it already solved.
//
// seed = SHA-256(address ‖ ":" ‖ step ‖ ":" ‖ submission) with step and submission in decimal.
// Draw i (with replacement) is Philox4x32-10 at counter (i, 0, 0, 0) under the key made of the
// seed's first 8 bytes (little-endian words); its first two outputs form a 64-bit number x and
// the index is floor(x · n / 2^64) (a multiply-shift: no modulo bias worth naming for n < 2^32).
//
// The completions of draw i sample with seeds sampling_seed(...) + i·G + j (j < G, the group
// size), so a validator can recompute the seed of every row as well.
//
// Partial rollouts (C3PO++, specs/rl.md §6) finish a group in a later file than the one its prompt
// was drawn for, so such files name each group's draw in its task_id: "<task id>@<step>:<draw>:<i>"
// (the step and draw number the prompts were drawn for, and the group's place i in that draw).
// A task_id without the suffix was drawn for its own file: (step, submission, group_index).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trellis::rollout {

// The most prompts one draw may ask for (sample_prompt_indices' count).
inline constexpr int64_t kMaxDrawCount = int64_t{1} << 24;

// `count` prompt indices in [0, dataset_size). Error unless 0 <= count <= kMaxDrawCount.
std::vector<int64_t> sample_prompt_indices(const std::string& node_address, int64_t step,
                                           int64_t submission, int64_t count, int64_t dataset_size);

// Index `place` of that draw alone (sample_prompt_indices(...)[place], in constant time): what a
// validator recomputes for one group. Error unless place >= 0.
int64_t sample_prompt_index(const std::string& node_address, int64_t step, int64_t submission,
                            int64_t place, int64_t dataset_size);

// The base sampling seed of a draw: the first 8 bytes of SHA-256("address:step:submission:
// sampling") (little-endian), shifted right by one so that seeds fit the file's int64 column.
uint64_t sampling_seed(const std::string& node_address, int64_t step, int64_t submission);

// Where a group's prompt was drawn: draw number `submission` of `step`, place `index`.
struct DrawCoordinates {
  int64_t step = 0, submission = 0, index = 0;
  bool operator==(const DrawCoordinates&) const = default;
};

std::string drawn_task_id(const std::string& task_id, const DrawCoordinates& draw);
// Splits a task_id written by drawn_task_id() into the dataset's task id and the draw; nullopt
// for a plain task_id (no '@' followed by three decimal numbers in [0, 2^31) at the end: each
// coordinate must fit the file's int32 columns, whatever an untrusted worker wrote).
std::optional<std::pair<std::string, DrawCoordinates>> parse_drawn_task_id(
    const std::string& task_id);

}  // namespace trellis::rollout
