// The RLE / bit-packed hybrid encoding of Parquet (Encodings.md): repetition and definition
// levels, and dictionary indices. Decoding is bounded by the input and by the number of values
// asked for: a run that claims more values than that is cut, data that ends early is an Error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace trellis::rollout::parquet {

// Bits needed to store values up to `max_value` (0 for 0).
int bit_width_for(uint32_t max_value);

// Appends `values` (each < 2^bit_width) to `out`: RLE runs for repeats of 8 or more, bit-packed
// groups of 8 otherwise (the last group padded with zeros).
void encode_hybrid(const std::vector<uint32_t>& values, int bit_width, std::string& out);

// Decodes exactly `count` values from `in` and appends them to `out`. Returns the bytes used.
size_t decode_hybrid(std::string_view in, int bit_width, size_t count, std::vector<uint32_t>& out,
                     const std::string& where);

// Level streams of data page v1: a 4-byte little-endian length, then the hybrid data. Returns the
// bytes used (length + data).
void encode_levels_v1(const std::vector<uint32_t>& levels, int bit_width, std::string& out);
size_t decode_levels_v1(std::string_view in, int bit_width, size_t count,
                        std::vector<uint32_t>& out, const std::string& where);

}  // namespace trellis::rollout::parquet
