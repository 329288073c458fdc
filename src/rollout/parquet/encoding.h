// Value encodings of Parquet pages: PLAIN (written and read) and dictionary indices
// (RLE_DICTIONARY / PLAIN_DICTIONARY, read only). Decoders append to a Values of the column's
// type and check every length against the bytes there are.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "rollout/parquet/column.h"

namespace trellis::rollout::parquet {

// Appends the PLAIN encoding of values [begin, end) to `out`.
void encode_plain(const Values& values, size_t begin, size_t end, std::string& out);

// Decodes `count` PLAIN values from `in`, appending to `out`. Returns the bytes used.
size_t decode_plain(std::string_view in, size_t count, Values& out, const std::string& where);

// Decodes `count` dictionary indices (a bit-width byte, then RLE/bit-packed hybrid) from `in`
// and appends the dictionary entries they name to `out`.
void decode_dictionary_indices(std::string_view in, size_t count, const Values& dictionary,
                               Values& out, const std::string& where);

// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace trellis::rollout::parquet
