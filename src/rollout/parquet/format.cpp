#include "rollout/parquet/format.h"

#include <array>
#include <string_view>

namespace trellis::rollout::parquet {
namespace {

template <size_t N>
std::string lookup(const std::array<std::string_view, N>& names, int32_t value,
                   std::string_view kind) {
  if (value >= 0 && static_cast<size_t>(value) < N && !names[value].empty())
    return std::string(names[value]);
  return std::string(kind) + "(" + std::to_string(value) + ")";
}

}  // namespace

std::string type_name(int32_t type) {
  static constexpr std::array<std::string_view, 8> kNames = {
      "BOOLEAN", "INT32",  "INT64",      "INT96",
      "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  return lookup(kNames, type, "type");
}

std::string converted_type_name(int32_t converted) {
  static constexpr std::array<std::string_view, 22> kNames = {"UTF8",
                                                              "MAP",
                                                              "MAP_KEY_VALUE",
                                                              "LIST",
                                                              "ENUM",
                                                              "DECIMAL",
                                                              "DATE",
                                                              "TIME_MILLIS",
                                                              "TIME_MICROS",
                                                              "TIMESTAMP_MILLIS",
                                                              "TIMESTAMP_MICROS",
                                                              "UINT_8",
                                                              "UINT_16",
                                                              "UINT_32",
                                                              "UINT_64",
                                                              "INT_8",
                                                              "INT_16",
                                                              "INT_32",
                                                              "INT_64",
                                                              "JSON",
                                                              "BSON",
                                                              "INTERVAL"};
  return lookup(kNames, converted, "converted_type");
}

std::string repetition_name(int32_t repetition) {
  static constexpr std::array<std::string_view, 3> kNames = {"REQUIRED", "OPTIONAL", "REPEATED"};
  return lookup(kNames, repetition, "repetition");
}

std::string encoding_name(int32_t encoding) {
  static constexpr std::array<std::string_view, 10> kNames = {"PLAIN",
                                                              "",
                                                              "PLAIN_DICTIONARY",
                                                              "RLE",
                                                              "BIT_PACKED",
                                                              "DELTA_BINARY_PACKED",
                                                              "DELTA_LENGTH_BYTE_ARRAY",
                                                              "DELTA_BYTE_ARRAY",
                                                              "RLE_DICTIONARY",
                                                              "BYTE_STREAM_SPLIT"};
  return lookup(kNames, encoding, "encoding");
}

std::string codec_name(int32_t codec) {
  static constexpr std::array<std::string_view, 8> kNames = {
      "UNCOMPRESSED", "SNAPPY", "GZIP", "LZO", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW"};
  return lookup(kNames, codec, "codec");
}

std::string page_type_name(int32_t page_type) {
  static constexpr std::array<std::string_view, 4> kNames = {"DATA_PAGE", "INDEX_PAGE",
                                                             "DICTIONARY_PAGE", "DATA_PAGE_V2"};
  return lookup(kNames, page_type, "page type");
}

}  // namespace trellis::rollout::parquet
