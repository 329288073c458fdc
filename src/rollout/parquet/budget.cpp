#include "rollout/parquet/budget.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace trellis::rollout::parquet {

uint64_t DecodeBudget::decoded_bytes_limit(size_t file_size) const {
  const uint64_t size = file_size;
  uint64_t relative = std::numeric_limits<uint64_t>::max();
  if (decoded_bytes_per_file_byte == 0 ||
      size <= (relative - decoded_bytes_base) / decoded_bytes_per_file_byte)
    relative = decoded_bytes_base + decoded_bytes_per_file_byte * size;
  return std::min(relative, max_decoded_bytes);
}

BudgetMeter::BudgetMeter(const DecodeBudget& budget, size_t file_size)
    : budget_(budget), file_size_(file_size), limit_(budget.decoded_bytes_limit(file_size)) {}

void BudgetMeter::charge(uint64_t bytes, const char* what, const std::string& at) {
  if (bytes > limit_ - decoded_) {
    fail(at,
         "decode budget exceeded: {} would add {} decoded bytes to the {} already decoded, above "
         "the file's limit of {} decoded bytes (DecodeBudget: decoded_bytes_base {} + "
         "decoded_bytes_per_file_byte {} x {} file bytes, at most max_decoded_bytes {})",
         what, bytes, decoded_, limit_, budget_.decoded_bytes_base,
         budget_.decoded_bytes_per_file_byte, file_size_, budget_.max_decoded_bytes);
  }
  decoded_ += bytes;
}

void BudgetMeter::check_count(uint64_t count, uint64_t limit, const char* what, const char* field,
                              const std::string& at) {
  if (count > limit)
    fail(at, "decode budget exceeded: {} {}, above the limit of {} (DecodeBudget.{})", count, what,
         limit, field);
}

void BudgetMeter::count_page(const std::string& at) {
  check_count(++pages_, budget_.max_pages, "pages read", "max_pages", at);
}

}  // namespace trellis::rollout::parquet
