#include "rollout/parquet/compression.h"

#include <zstd.h>

#include <algorithm>
#include <memory>

#include "common/error.h"
#include "rollout/parquet/format.h"

namespace trellis::rollout::parquet {

int32_t codec_for_level(int level) {
  return static_cast<int32_t>(level == 0 ? Codec::kUncompressed : Codec::kZstd);
}

std::string compress_page(std::string_view data, int level) {
  if (level == 0) return std::string(data);
  std::string out(ZSTD_compressBound(data.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), data.data(), data.size(), level);
  if (ZSTD_isError(n)) fail("", "zstd compression failed: {}", ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

std::string decompress_page(std::string_view in, int32_t codec, size_t uncompressed_size,
                            const std::string& where) {
  if (uncompressed_size > kMaxPageBytes)
    fail(where, "page declares {} uncompressed bytes, above the limit of {}", uncompressed_size,
         kMaxPageBytes);
  if (codec == static_cast<int32_t>(Codec::kUncompressed)) {
    if (in.size() != uncompressed_size)
      fail(where, "uncompressed page holds {} bytes but declares {}", in.size(), uncompressed_size);
    return std::string(in);
  }
  if (codec != static_cast<int32_t>(Codec::kZstd))
    fail(where,
         "compression {} is not supported: rollout files use ZSTD or UNCOMPRESSED (with DuckDB, "
         "write COPY ... (FORMAT parquet, COMPRESSION zstd))",
         codec_name(codec));

  std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!ctx) fail(where, "cannot create a zstd context");
  std::string out;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  constexpr size_t kStep = size_t{1} << 20;
  size_t ret = 1;
  while (true) {
    // One byte beyond the declared size, so that a page that decompresses to more is noticed.
    const size_t cap = std::min(uncompressed_size + 1, out.size() + kStep);
    const size_t old = out.size();
    out.resize(cap);
    ZSTD_outBuffer output{out.data(), out.size(), old};
    ret = ZSTD_decompressStream(ctx.get(), &output, &input);
    out.resize(output.pos);
    if (ZSTD_isError(ret)) fail(where, "zstd page data is corrupt: {}", ZSTD_getErrorName(ret));
    if (out.size() > uncompressed_size)
      fail(where, "zstd page decompresses to more than its declared {} bytes", uncompressed_size);
    if (ret == 0 && input.pos == input.size) break;  // frame(s) complete, input used up
    if (input.pos == input.size && output.pos < output.size)
      fail(where, "zstd page data ends early (truncated frame)");
  }
  if (out.size() != uncompressed_size)
    fail(where, "zstd page decompresses to {} bytes but declares {}", out.size(),
         uncompressed_size);
  return out;
}

}  // namespace trellis::rollout::parquet
