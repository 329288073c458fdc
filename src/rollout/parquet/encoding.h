// Value encodings of Parquet pages: PLAIN (written and read) and dictionary indices
// (RLE_DICTIONARY / PLAIN_DICTIONARY, read only). Decoders append to a Values of the column's
// type and check every length against the bytes there are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "rollout/parquet/column.h"

namespace trellis::rollout::parquet {

// Appends the PLAIN encoding of values [begin, end) to `out`.
void encode_plain(const Values& values, size_t begin, size_t end, std::string& out);

// Decodes `count` PLAIN values from `in`, appending to `out`. Returns the bytes used.
size_t decode_plain(std::string_view in, size_t count, Values& out, const std::string& where);

// Decodes `count` dictionary indices (a bit-width byte, then RLE/bit-packed hybrid) from `in`
// and appends the dictionary entries they name to `out`. The steps below do the same in parts,
// so that a reader can charge each size to its budget before allocating it.
void decode_dictionary_indices(std::string_view in, size_t count, const Values& dictionary,
                               Values& out, const std::string& where);

// Memory a decoded value takes: sizeof(T) for a number, sizeof(std::string) + its length for a
// byte array.
inline constexpr size_t kStringValueBytes = sizeof(std::string);

// An upper bound of the memory decode_plain(in, count) appends (exact when `in` holds exactly
// `count` values), without decoding: a string costs kStringValueBytes beyond its bytes in `in`.
uint64_t plain_decoded_bytes(const Values& like, size_t in_size, size_t count);

// Replaces `indices` with `count` dictionary indices decoded from `in` (a bit-width byte, then
// the hybrid encoding), each checked against `dict_size`; 4 bytes per index.
void decode_dictionary_index_stream(std::string_view in, size_t count, size_t dict_size,
                                    std::vector<uint32_t>& indices, const std::string& where);
// The memory the entries `indices` name take once copied out of `dictionary`.
uint64_t dictionary_expansion_bytes(const Values& dictionary, const std::vector<uint32_t>& indices);
// Appends the entries `indices` name (all checked to be in range) to `out`.
void expand_dictionary(const Values& dictionary, const std::vector<uint32_t>& indices, Values& out);

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace trellis::rollout::parquet
