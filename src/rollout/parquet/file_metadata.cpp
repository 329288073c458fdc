#include "rollout/parquet/file_metadata.h"

#include "common/error.h"
#include "rollout/parquet/budget.h"
#include "rollout/parquet/format.h"
#include "rollout/parquet/thrift_compact.h"

namespace trellis::rollout::parquet {
namespace {

using FT = FieldType;

// ---- writing ----

void write_schema_element(ThriftWriter& w, const SchemaElement& e) {
  if (e.type) w.i32(1, *e.type);
  if (e.type_length) w.i32(2, *e.type_length);
  if (e.repetition) w.i32(3, *e.repetition);
  w.string(4, e.name);
  if (e.num_children) w.i32(5, *e.num_children);
  if (e.converted_type) w.i32(6, *e.converted_type);
  if (e.logical) {
    const int16_t member = *e.logical;
    // Trellis writes only the members that are empty structs (StringType, ListType).
    w.structure(10, [&] { w.structure(member, [] {}); });
  }
}

void write_column_meta(ThriftWriter& w, const ColumnMetaData& m) {
  w.i32(1, m.type);
  w.list(2, FT::kI32, m.encodings.size(), [&](size_t i) { w.element_i32(m.encodings[i]); });
  w.list(3, FT::kString, m.path_in_schema.size(),
         [&](size_t i) { w.element_string(m.path_in_schema[i]); });
  w.i32(4, m.codec);
  w.i64(5, m.num_values);
  w.i64(6, m.total_uncompressed_size);
  w.i64(7, m.total_compressed_size);
  w.i64(9, m.data_page_offset);
  if (m.dictionary_page_offset) w.i64(11, *m.dictionary_page_offset);
}

// ---- reading ----

// What parsing one footer needs beside the reader: the budget every list and struct is charged
// to before it is added, and the column chunks counted so far.
struct Parse {
  ThriftReader& r;
  BudgetMeter& meter;
  size_t chunks = 0;

  const DecodeBudget& budget() const { return meter.budget(); }
  void charge(uint64_t bytes, const char* what) { meter.charge(bytes, what, r.where()); }
};

LogicalKind read_logical(ThriftReader& r, SchemaElement& e) {
  LogicalKind kind = LogicalKind::kNone;
  r.read_struct([&](int16_t id, FT type) {
    if (type != FT::kStruct) return false;
    kind = (id == 1 || id == 3 || id == 10) ? static_cast<LogicalKind>(id) : LogicalKind::kOther;
    r.read_struct([&](int16_t field, FT t) {
      if (kind != LogicalKind::kInteger) return false;
      if (field == 1) {
        e.int_bit_width = r.i8(t, "IntType.bitWidth");
        return true;
      }
      if (field == 2) {
        e.int_signed = r.boolean(t, "IntType.isSigned");
        return true;
      }
      return false;
    });
    return true;
  });
  return kind;
}

SchemaElement read_schema_element(Parse& p) {
  ThriftReader& r = p.r;
  SchemaElement e;
  bool has_name = false;
  r.read_struct([&](int16_t id, FT t) {
    switch (id) {
      case 1:
        e.type = r.i32(t, "SchemaElement.type");
        return true;
      case 2:
        e.type_length = r.i32(t, "SchemaElement.type_length");
        return true;
      case 3:
        e.repetition = r.i32(t, "SchemaElement.repetition_type");
        return true;
      case 4:
        e.name = r.string(t, "SchemaElement.name");
        has_name = true;
        return true;
      case 5:
        e.num_children = r.i32(t, "SchemaElement.num_children");
        return true;
      case 6:
        e.converted_type = r.i32(t, "SchemaElement.converted_type");
        return true;
      case 10:
        if (t != FT::kStruct) return false;
        e.logical = static_cast<int16_t>(read_logical(r, e));
        return true;
      default:
        return false;
    }
  });
  if (!has_name) fail(r.where(), "a schema element has no name");
  p.charge(sizeof(SchemaElement) + e.name.size(), "a schema element");
  return e;
}

ColumnMetaData read_column_meta(Parse& p) {
  ThriftReader& r = p.r;
  ColumnMetaData m;
  unsigned seen = 0;
  const size_t max_list = p.budget().max_chunk_list_elements;
  r.read_struct([&](int16_t id, FT t) {
    switch (id) {
      case 1:
        m.type = r.i32(t, "ColumnMetaData.type");
        break;
      case 2:
        if (t != FT::kList) fail(r.where(), "ColumnMetaData.encodings is not a list");
        r.read_list(
            FT::kI32,
            [&] {
              p.charge(sizeof(int32_t), "ColumnMetaData.encodings");
              m.encodings.push_back(r.element_i32());
            },
            "ColumnMetaData.encodings", max_list, "max_chunk_list_elements");
        break;
      case 3:
        if (t != FT::kList) fail(r.where(), "ColumnMetaData.path_in_schema is not a list");
        r.read_list(
            FT::kString,
            [&] {
              std::string element = r.element_string();
              p.charge(sizeof(std::string) + element.size(), "ColumnMetaData.path_in_schema");
              m.path_in_schema.push_back(std::move(element));
            },
            "ColumnMetaData.path_in_schema", max_list, "max_chunk_list_elements");
        break;
      case 4:
        m.codec = r.i32(t, "ColumnMetaData.codec");
        break;
      case 5:
        m.num_values = r.i64(t, "ColumnMetaData.num_values");
        break;
      case 6:
        m.total_uncompressed_size = r.i64(t, "ColumnMetaData.total_uncompressed_size");
        break;
      case 7:
        m.total_compressed_size = r.i64(t, "ColumnMetaData.total_compressed_size");
        break;
      case 9:
        m.data_page_offset = r.i64(t, "ColumnMetaData.data_page_offset");
        break;
      case 11:
        m.dictionary_page_offset = r.i64(t, "ColumnMetaData.dictionary_page_offset");
        break;
      default:
        return false;
    }
    if (id < 32) seen |= 1u << id;
    return true;
  });
  for (int id : {1, 2, 3, 4, 5, 6, 7, 9})
    if (!(seen & (1u << id))) fail(r.where(), "ColumnMetaData lacks required field {}", id);
  return m;
}

ColumnChunk read_column_chunk(Parse& p) {
  ThriftReader& r = p.r;
  BudgetMeter::check_count(++p.chunks, p.budget().max_column_chunks, "column chunks in the footer",
                           "max_column_chunks", r.where());
  p.charge(sizeof(ColumnChunk), "a column chunk");
  ColumnChunk c;
  r.read_struct([&](int16_t id, FT t) {
    switch (id) {
      case 1:
        c.file_path = r.string(t, "ColumnChunk.file_path");
        p.charge(c.file_path->size(), "ColumnChunk.file_path");
        return true;
      case 2:
        c.file_offset = r.i64(t, "ColumnChunk.file_offset");
        return true;
      case 3:
        if (t != FT::kStruct) fail(r.where(), "ColumnChunk.meta_data is not a struct");
        c.meta_data = read_column_meta(p);
        return true;
      case 8:
      case 9:
        c.encrypted = true;
        return false;
      default:
        return false;
    }
  });
  return c;
}

RowGroup read_row_group(Parse& p) {
  ThriftReader& r = p.r;
  p.charge(sizeof(RowGroup), "a row group");
  RowGroup g;
  bool has_columns = false, has_rows = false;
  r.read_struct([&](int16_t id, FT t) {
    switch (id) {
      case 1:
        if (t != FT::kList) fail(r.where(), "RowGroup.columns is not a list");
        r.read_list(
            FT::kStruct, [&] { g.columns.push_back(read_column_chunk(p)); }, "RowGroup.columns",
            p.budget().max_column_chunks, "max_column_chunks");
        has_columns = true;
        return true;
      case 2:
        g.total_byte_size = r.i64(t, "RowGroup.total_byte_size");
        return true;
      case 3:
        g.num_rows = r.i64(t, "RowGroup.num_rows");
        has_rows = true;
        return true;
      case 5:
        g.file_offset = r.i64(t, "RowGroup.file_offset");
        return true;
      case 6:
        g.total_compressed_size = r.i64(t, "RowGroup.total_compressed_size");
        return true;
      default:
        return false;
    }
  });
  if (!has_columns || !has_rows) fail(r.where(), "a row group lacks its columns or row count");
  return g;
}

}  // namespace

std::string serialize_file_metadata(const FileMetaData& meta) {
  ThriftWriter w;
  w.i32(1, meta.version);
  w.list(2, FT::kStruct, meta.schema.size(),
         [&](size_t i) { w.element_struct([&] { write_schema_element(w, meta.schema[i]); }); });
  w.i64(3, meta.num_rows);
  w.list(4, FT::kStruct, meta.row_groups.size(), [&](size_t i) {
    const RowGroup& g = meta.row_groups[i];
    w.element_struct([&] {
      w.list(1, FT::kStruct, g.columns.size(), [&](size_t c) {
        const ColumnChunk& chunk = g.columns[c];
        w.element_struct([&] {
          w.i64(2, chunk.file_offset);
          if (chunk.meta_data) w.structure(3, [&] { write_column_meta(w, *chunk.meta_data); });
        });
      });
      w.i64(2, g.total_byte_size);
      w.i64(3, g.num_rows);
      if (g.file_offset) w.i64(5, *g.file_offset);
      if (g.total_compressed_size) w.i64(6, *g.total_compressed_size);
    });
  });
  if (!meta.key_value_metadata.empty()) {
    w.list(5, FT::kStruct, meta.key_value_metadata.size(), [&](size_t i) {
      w.element_struct([&] {
        w.string(1, meta.key_value_metadata[i].first);
        w.string(2, meta.key_value_metadata[i].second);
      });
    });
  }
  if (!meta.created_by.empty()) w.string(6, meta.created_by);
  return w.finish();
}

void append_footer(std::string& out, const FileMetaData& meta) {
  const std::string footer = serialize_file_metadata(meta);
  out += footer;
  const auto n = static_cast<uint32_t>(footer.size());
  for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((n >> (8 * b)) & 0xff));
  out.append(kMagic, kMagicSize);
}

FileMetaData parse_file_metadata(std::string_view bytes, const std::string& where) {
  BudgetMeter meter(DecodeBudget{}, bytes.size());
  return parse_file_metadata(bytes, where, meter);
}

FileMetaData parse_file_metadata(std::string_view bytes, const std::string& where,
                                 BudgetMeter& meter) {
  ThriftReader r(bytes, where);
  Parse p{r, meter};
  const DecodeBudget& budget = meter.budget();
  FileMetaData meta;
  unsigned seen = 0;
  r.read_struct([&](int16_t id, FT t) {
    switch (id) {
      case 1:
        meta.version = r.i32(t, "FileMetaData.version");
        break;
      case 2:
        if (t != FT::kList) fail(where, "FileMetaData.schema is not a list");
        r.read_list(
            FT::kStruct, [&] { meta.schema.push_back(read_schema_element(p)); },
            "FileMetaData.schema", budget.max_schema_elements, "max_schema_elements");
        break;
      case 3:
        meta.num_rows = r.i64(t, "FileMetaData.num_rows");
        break;
      case 4:
        if (t != FT::kList) fail(where, "FileMetaData.row_groups is not a list");
        r.read_list(
            FT::kStruct, [&] { meta.row_groups.push_back(read_row_group(p)); },
            "FileMetaData.row_groups", budget.max_row_groups, "max_row_groups");
        break;
      case 5:
        if (t != FT::kList) fail(where, "FileMetaData.key_value_metadata is not a list");
        r.read_list(
            FT::kStruct,
            [&] {
              std::pair<std::string, std::string> kv;
              size_t offset = std::string::npos;
              bool has_key = false;
              r.read_struct([&](int16_t field, FT ft) {
                if (field == 1) {
                  kv.first = r.string(ft, "KeyValue.key");
                  has_key = true;
                  return true;
                }
                if (field == 2) {
                  kv.second = r.string(ft, "KeyValue.value");
                  offset = r.consumed() - kv.second.size();  // the value's bytes end here
                  return true;
                }
                return false;
              });
              if (!has_key) fail(where, "a key/value metadata entry has no key");
              p.charge(sizeof(kv) + sizeof(offset) + kv.first.size() + kv.second.size(),
                       "a key/value metadata entry");
              meta.key_value_metadata.push_back(std::move(kv));
              meta.key_value_offsets.push_back(offset);
            },
            "FileMetaData.key_value_metadata", budget.max_key_values, "max_key_values");
        break;
      case 6:
        meta.created_by = r.string(t, "FileMetaData.created_by");
        break;
      case 8:
        meta.encrypted = true;
        return false;
      default:
        return false;
    }
    if (id < 32) seen |= 1u << id;
    return true;
  });
  for (int id : {1, 2, 3, 4})
    if (!(seen & (1u << id))) fail(where, "FileMetaData lacks required field {}", id);
  return meta;
}

}  // namespace trellis::rollout::parquet
