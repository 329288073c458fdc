// EpochOrder: an endless stream over n items, epoch after epoch, each epoch a fresh permutation
// seeded by (seed, epoch). The item at a stream position depends on the position alone, so a run
// that resumes at position p continues exactly the order an uninterrupted run would have seen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trellis::rl {

class EpochOrder {
 public:
  EpochOrder(size_t size, uint64_t seed);  // size >= 1
  // The index of the item at stream position `position` (>= 0). Cheap for consecutive positions:
  // the permutation is recomputed only when the epoch changes.
  size_t at(int64_t position);

 private:
  size_t size_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<size_t> order_;
};

}  // namespace trellis::rl
