#include "toploc/topk.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace trellis::toploc {
namespace {

constexpr uint32_t kMagnitudes = 0x8000;  // magnitude = bits & 0x7FFF

std::string describe_non_finite(uint16_t bits, size_t index, size_t row_width, size_t first_row) {
  const bool inf = (bits & 0x7FFF) == 0x7F80;
  const std::string what =
      inf ? ((bits & 0x8000) ? "-Inf" : "+Inf") : fmt::format("NaN (0x{:04x})", bits);
  if (row_width == 0) return fmt::format("{} at element {}", what, index);
  return fmt::format("{} at row {}, column {}", what, first_row + index / row_width,
                     index % row_width);
}

}  // namespace

TopK top_k(std::span<const uint16_t> chunk, size_t k, const std::string& where, size_t row_width,
           size_t first_row) {
  if (k == 0) fail(where, "top-k needs k >= 1");
  if (chunk.size() < k) fail(where, "{} values, fewer than k = {}", chunk.size(), k);
  if (chunk.size() > std::numeric_limits<uint32_t>::max()) {
    fail(where, "{} values in one chunk, more than 2^32", chunk.size());
  }
  std::vector<uint32_t> count(kMagnitudes, 0);
  for (size_t i = 0; i < chunk.size(); ++i) {
    if (!bf16_is_finite(chunk[i])) {
      fail(where, "cannot commit to a non-finite value: {}",
           describe_non_finite(chunk[i], i, row_width, first_row));
    }
    ++count[chunk[i] & 0x7FFF];
  }
  // The k-th largest magnitude t: fewer than k values lie above it, at least k at or above it.
  size_t above = 0;
  uint32_t t = 0x7F7F;  // largest finite magnitude
  while (above + count[t] < k) above += count[t--];
  size_t take_at_t = k - above;  // ties at t: the lowest indices win

  TopK out;
  out.indices.reserve(k);
  for (size_t i = 0; i < chunk.size(); ++i) {
    const uint32_t mag = chunk[i] & 0x7FFF;
    if (mag > t) {
      out.indices.push_back(static_cast<uint32_t>(i));
    } else if (mag == t && take_at_t > 0) {
      out.indices.push_back(static_cast<uint32_t>(i));
      --take_at_t;
    }
  }
  std::sort(out.indices.begin(), out.indices.end(), [&](uint32_t a, uint32_t b) {
    const uint32_t ma = chunk[a] & 0x7FFF, mb = chunk[b] & 0x7FFF;
    return ma != mb ? ma > mb : a < b;
  });
  out.values.reserve(k);
  for (uint32_t i : out.indices) out.values.push_back(chunk[i]);
  return out;
}

}  // namespace trellis::toploc
