#include "rollout/parquet/page_header.h"

#include "common/error.h"
#include "rollout/parquet/format.h"
#include "rollout/parquet/thrift_compact.h"

namespace trellis::rollout::parquet {

using FT = FieldType;

std::string serialize_page_header(const PageHeader& h) {
  ThriftWriter w;
  w.i32(1, h.type);
  w.i32(2, h.uncompressed_page_size);
  w.i32(3, h.compressed_page_size);
  if (h.type == static_cast<int32_t>(PageType::kDataPage)) {
    w.structure(5, [&] {
      w.i32(1, h.num_values);
      w.i32(2, h.encoding);
      w.i32(3, h.definition_level_encoding);
      w.i32(4, h.repetition_level_encoding);
    });
  } else if (h.type == static_cast<int32_t>(PageType::kDictionaryPage)) {
    w.structure(7, [&] {
      w.i32(1, h.num_values);
      w.i32(2, h.encoding);
    });
  }
  return w.finish();
}

PageHeader parse_page_header(std::string_view bytes, size_t& header_size,
                             const std::string& where) {
  ThriftReader r(bytes, where);
  PageHeader h;
  unsigned seen = 0;
  r.read_struct([&](int16_t id, FT t) {
    switch (id) {
      case 1:
        h.type = r.i32(t, "PageHeader.type");
        break;
      case 2:
        h.uncompressed_page_size = r.i32(t, "PageHeader.uncompressed_page_size");
        break;
      case 3:
        h.compressed_page_size = r.i32(t, "PageHeader.compressed_page_size");
        break;
      case 5: {
        if (t != FT::kStruct) return false;
        unsigned sub = 0;
        r.read_struct([&](int16_t f, FT ft) {
          switch (f) {
            case 1:
              h.num_values = r.i32(ft, "DataPageHeader.num_values");
              break;
            case 2:
              h.encoding = r.i32(ft, "DataPageHeader.encoding");
              break;
            case 3:
              h.definition_level_encoding = r.i32(ft, "DataPageHeader.definition_level_encoding");
              break;
            case 4:
              h.repetition_level_encoding = r.i32(ft, "DataPageHeader.repetition_level_encoding");
              break;
            default:
              return false;
          }
          sub |= 1u << f;
          return true;
        });
        if (sub != 0b11110) fail(where, "a DataPageHeader lacks a required field");
        h.has_data_v1 = true;
        break;
      }
      case 7: {
        if (t != FT::kStruct) return false;
        unsigned sub = 0;
        r.read_struct([&](int16_t f, FT ft) {
          switch (f) {
            case 1:
              h.num_values = r.i32(ft, "DictionaryPageHeader.num_values");
              break;
            case 2:
              h.encoding = r.i32(ft, "DictionaryPageHeader.encoding");
              break;
            default:
              return false;
          }
          sub |= 1u << f;
          return true;
        });
        if (sub != 0b110) fail(where, "a DictionaryPageHeader lacks a required field");
        h.has_dictionary = true;
        break;
      }
      case 8: {
        if (t != FT::kStruct) return false;
        unsigned sub = 0;
        r.read_struct([&](int16_t f, FT ft) {
          switch (f) {
            case 1:
              h.num_values = r.i32(ft, "DataPageHeaderV2.num_values");
              break;
            case 2:
              h.num_nulls = r.i32(ft, "DataPageHeaderV2.num_nulls");
              break;
            case 3:
              h.num_rows = r.i32(ft, "DataPageHeaderV2.num_rows");
              break;
            case 4:
              h.encoding = r.i32(ft, "DataPageHeaderV2.encoding");
              break;
            case 5:
              h.definition_levels_byte_length =
                  r.i32(ft, "DataPageHeaderV2.definition_levels_byte_length");
              break;
            case 6:
              h.repetition_levels_byte_length =
                  r.i32(ft, "DataPageHeaderV2.repetition_levels_byte_length");
              break;
            case 7:
              h.is_compressed = r.boolean(ft, "DataPageHeaderV2.is_compressed");
              break;
            default:
              return false;
          }
          sub |= 1u << f;
          return true;
        });
        if ((sub & 0b1111110) != 0b1111110)
          fail(where, "a DataPageHeaderV2 lacks a required field");
        h.has_data_v2 = true;
        break;
      }
      default:
        return false;
    }
    seen |= 1u << id;
    return true;
  });
  if ((seen & 0b1110) != 0b1110) fail(where, "a page header lacks its type or sizes");
  header_size = r.consumed();
  return h;
}

}  // namespace trellis::rollout::parquet
