#include "rollout/data_sampling.h"

#include <charconv>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/hashing.h"
#include "common/rng.h"

namespace trellis::rollout {

namespace {

PhiloxKey draw_key(const std::string& node_address, int64_t step, int64_t submission) {
  const Sha256 seed = sha256(fmt::format("{}:{}:{}", node_address, step, submission));
  PhiloxKey key;
  std::memcpy(key.data(), seed.data(), sizeof key);  // little-endian on every supported host
  return key;
}

int64_t index_at(const PhiloxKey& key, int64_t place, int64_t dataset_size) {
  const auto i = static_cast<uint64_t>(place);
  const auto r = philox4x32({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0, 0}, key);
  const uint64_t x = (static_cast<uint64_t>(r[0]) << 32) | r[1];
  const auto scaled = static_cast<unsigned __int128>(x) * static_cast<uint64_t>(dataset_size);
  return static_cast<int64_t>(scaled >> 64);
}

}  // namespace

std::vector<int64_t> sample_prompt_indices(const std::string& node_address, int64_t step,
                                           int64_t submission, int64_t count,
                                           int64_t dataset_size) {
  if (dataset_size <= 0) fail("fixed data sampling", "the dataset is empty");
  if (count < 0 || count > kMaxDrawCount)
    fail("fixed data sampling", "a draw of {} prompts (step {}, submission {}), outside [0, {}]",
         count, step, submission, kMaxDrawCount);
  const PhiloxKey key = draw_key(node_address, step, submission);
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.push_back(index_at(key, i, dataset_size));
  return out;
}

int64_t sample_prompt_index(const std::string& node_address, int64_t step, int64_t submission,
                            int64_t place, int64_t dataset_size) {
  if (dataset_size <= 0) fail("fixed data sampling", "the dataset is empty");
  if (place < 0)
    fail("fixed data sampling", "place {} of a draw (step {}, submission {}) is negative", place,
         step, submission);
  return index_at(draw_key(node_address, step, submission), place, dataset_size);
}

uint64_t sampling_seed(const std::string& node_address, int64_t step, int64_t submission) {
  const Sha256 h = sha256(fmt::format("{}:{}:{}:sampling", node_address, step, submission));
  uint64_t seed;
  std::memcpy(&seed, h.data(), sizeof seed);
  return seed >> 1;
}

std::string drawn_task_id(const std::string& task_id, const DrawCoordinates& draw) {
  return fmt::format("{}@{}:{}:{}", task_id, draw.step, draw.submission, draw.index);
}

std::optional<std::pair<std::string, DrawCoordinates>> parse_drawn_task_id(
    const std::string& task_id) {
  constexpr int64_t kMaxCoordinate = std::numeric_limits<int32_t>::max();
  const size_t at = task_id.rfind('@');
  if (at == std::string::npos) return std::nullopt;
  int64_t parts[3];
  const char* p = task_id.data() + at + 1;
  const char* end = task_id.data() + task_id.size();
  for (int i = 0; i < 3; ++i) {
    const auto [next, ec] = std::from_chars(p, end, parts[i]);
    const bool last = i == 2;
    if (ec != std::errc() || parts[i] < 0 || parts[i] > kMaxCoordinate ||
        (last ? next != end : next == end || *next != ':'))
      return std::nullopt;
    p = next + 1;
  }
  return std::make_pair(task_id.substr(0, at), DrawCoordinates{parts[0], parts[1], parts[2]});
}

}  // namespace trellis::rollout
