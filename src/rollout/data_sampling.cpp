#include "rollout/data_sampling.h"

#include <cstring>

#include "common/error.h"
#include "common/hashing.h"
#include "common/rng.h"

namespace trellis::rollout {

std::vector<int64_t> sample_prompt_indices(const std::string& node_address, int64_t step,
                                           int64_t submission, int64_t count,
                                           int64_t dataset_size) {
  if (dataset_size <= 0) fail("fixed data sampling", "the dataset is empty");
  const Sha256 seed = sha256(fmt::format("{}:{}:{}", node_address, step, submission));
  PhiloxKey key;
  std::memcpy(key.data(), seed.data(), sizeof key);  // little-endian on every supported host
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    const auto r =
        philox4x32({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), 0, 0}, key);
    const uint64_t x = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    const auto scaled = static_cast<unsigned __int128>(x) * static_cast<uint64_t>(dataset_size);
    out.push_back(static_cast<int64_t>(scaled >> 64));
  }
  return out;
}

}  // namespace trellis::rollout
