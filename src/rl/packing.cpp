#include "rl/packing.h"

#include <algorithm>
#include <numeric>

#include "common/error.h"

namespace trellis::rl {

std::vector<std::vector<size_t>> pack_first_fit_decreasing(const std::vector<int64_t>& lengths,
                                                           int64_t capacity) {
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<size_t>> bins;
  std::vector<int64_t> room;
  for (size_t i : order) {
    if (lengths[i] > capacity) {
      fail("sample " + std::to_string(i),
           "{} tokens do not fit a micro-batch of {} (raise trainer.micro_batch_tokens)",
           lengths[i], capacity);
    }
    size_t b = 0;
    while (b < bins.size() && room[b] < lengths[i]) ++b;
    if (b == bins.size()) {
      bins.emplace_back();
      room.push_back(capacity);
    }
    bins[b].push_back(i);
    room[b] -= lengths[i];
  }
  for (auto& bin : bins) std::sort(bin.begin(), bin.end());
  return bins;
}

}  // namespace trellis::rl
