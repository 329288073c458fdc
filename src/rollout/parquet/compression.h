// Page compression: zstd (written and read) and uncompressed pages. Decompression never produces
// more than the page header's declared size, and grows its buffer only as output arrives, so a
// corrupt size cannot make the reader allocate what the data does not hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trellis::rollout::parquet {

// Largest uncompressed page the reader accepts.
inline constexpr size_t kMaxPageBytes = size_t{256} << 20;

// `level` 0 writes the page uncompressed (codec UNCOMPRESSED), otherwise zstd at that level.
int32_t codec_for_level(int level);
std::string compress_page(std::string_view data, int level);

// Decompresses `in` with `codec` into exactly `uncompressed_size` bytes; Error naming `where` if
// the codec is not supported or the data does not decompress to that size.
std::string decompress_page(std::string_view in, int32_t codec, size_t uncompressed_size,
                            const std::string& where);

}  // namespace trellis::rollout::parquet
