#include "rl/epoch_order.h"

#include <numeric>

#include "common/rng.h"

namespace trellis::rl {

EpochOrder::EpochOrder(size_t size, uint64_t seed) : size_(size), seed_(seed), order_(size) {}

size_t EpochOrder::at(int64_t position) {
  const int64_t size = static_cast<int64_t>(size_);
  const int64_t epoch = position / size;
  if (epoch != epoch_) {
    epoch_ = epoch;
    std::iota(order_.begin(), order_.end(), 0);
    RandomStream rng(seed_, static_cast<uint32_t>(epoch));
    rng.shuffle(order_.begin(), order_.end());
  }
  return order_[position % size];
}

}  // namespace trellis::rl
