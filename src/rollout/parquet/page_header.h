// Parquet page headers (PageHeader with its data page v1/v2 and dictionary page headers): the
// Thrift compact struct in front of every page of a column chunk.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace trellis::rollout::parquet {

struct PageHeader {
  int32_t type = 0;  // PageType
  int32_t uncompressed_page_size = 0;
  int32_t compressed_page_size = 0;
  bool has_data_v1 = false, has_data_v2 = false, has_dictionary = false;
  // DataPageHeader (v1) / DataPageHeaderV2 / DictionaryPageHeader, flattened.
  int32_t num_values = 0;
  int32_t encoding = 0;
  int32_t definition_level_encoding = 0;      // v1
  int32_t repetition_level_encoding = 0;      // v1
  int32_t num_nulls = 0;                      // v2
  int32_t num_rows = 0;                       // v2
  int32_t definition_levels_byte_length = 0;  // v2
  int32_t repetition_levels_byte_length = 0;  // v2
  bool is_compressed = true;                  // v2
};

// Serializes a DATA_PAGE (v1) or DICTIONARY_PAGE header.
std::string serialize_page_header(const PageHeader& header);

// Parses the header at the start of `bytes`; `header_size` gets its length. Error naming
// `where` if it is corrupt or lacks the sub-header its type needs.
PageHeader parse_page_header(std::string_view bytes, size_t& header_size, const std::string& where);

}  // namespace trellis::rollout::parquet
