#include "rollout/parquet/reader.h"

#include <cstring>

#include "common/error.h"
#include "rollout/parquet/compression.h"
#include "rollout/parquet/encoding.h"
#include "rollout/parquet/format.h"
#include "rollout/parquet/levels.h"
#include "rollout/parquet/page_header.h"
#include "rollout/parquet/schema.h"

namespace trellis::rollout::parquet {
namespace {

constexpr size_t kMaxPageHeaderBytes = size_t{16} << 20;

bool is_dictionary_encoding(int32_t e) {
  return e == static_cast<int32_t>(Encoding::kRleDictionary) ||
         e == static_cast<int32_t>(Encoding::kPlainDictionary);
}

// Reads the pages of one column chunk and appends its rows to `out`, charging `meter` for every
// page, decompressed byte, level, index and value before it is allocated.
class ChunkReader {
 public:
  ChunkReader(const ColumnSpec& spec, const LeafLevels& levels, int32_t codec, std::string where,
              BudgetMeter& meter)
      : spec_(spec),
        lv_(levels),
        codec_(codec),
        where_(std::move(where)),
        meter_(meter),
        budget_(meter.budget()) {}

  // Reads pages from `chunk` (exactly the chunk's bytes) until `num_values` levels were read;
  // the chunk must hold `num_rows` rows. `total_values` counts list values across the file.
  void read(std::string_view chunk, int64_t num_values, int64_t num_rows, ColumnData& out,
            int64_t& total_values) {
    out_ = &out;
    rows_before_ = spec_.list ? out.offsets.size() : value_count(out.values);
    values_total_ = value_count(out.values);
    if (spec_.list)
      meter_.charge(static_cast<uint64_t>(num_rows) * sizeof(uint64_t), "list offsets", where_);
    size_t pos = 0;
    int64_t levels_read = 0;
    bool first = true;
    while (levels_read < num_values) {
      if (pos >= chunk.size())
        fail(where_, "column chunk ends after {} of its {} values", levels_read, num_values);
      meter_.count_page(where_);
      size_t header_size = 0;
      // Page headers are small (statistics at most); bound the Thrift input regardless.
      const PageHeader h =
          parse_page_header(chunk.substr(pos, kMaxPageHeaderBytes), header_size, where_);
      pos += header_size;
      // Headers may carry (skipped) statistics of any size, and many column chunks may point at
      // the same pages: count what was parsed, so re-reading the same bytes is bounded too.
      meter_.charge(header_size, "a page header", where_);
      if (h.compressed_page_size < 0 || h.uncompressed_page_size < 0 ||
          static_cast<size_t>(h.compressed_page_size) > chunk.size() - pos)
        fail(where_, "page of {} bytes runs past the end of its column chunk ({} bytes left)",
             h.compressed_page_size, chunk.size() - pos);
      const std::string_view data = chunk.substr(pos, static_cast<size_t>(h.compressed_page_size));
      pos += static_cast<size_t>(h.compressed_page_size);

      if (h.type == static_cast<int32_t>(PageType::kDictionaryPage)) {
        if (!first || !h.has_dictionary)
          fail(where_, "dictionary page is not the first page of its column chunk");
        read_dictionary(h, data);
      } else if (h.type == static_cast<int32_t>(PageType::kDataPage) ||
                 h.type == static_cast<int32_t>(PageType::kDataPageV2)) {
        if (h.num_values < 0 || h.num_values > num_values - levels_read)
          fail(where_, "page declares {} values, the column chunk has {} left", h.num_values,
               num_values - levels_read);
        if (h.type == static_cast<int32_t>(PageType::kDataPage)) {
          if (!h.has_data_v1) fail(where_, "DATA_PAGE without a data page header");
          read_data_v1(h, data, total_values);
        } else {
          if (!h.has_data_v2) fail(where_, "DATA_PAGE_V2 without a data page v2 header");
          read_data_v2(h, data, total_values);
        }
        levels_read += h.num_values;
      } else {
        fail(where_, "page type {} is not supported", page_type_name(h.type));
      }
      first = false;
    }
    if (pos != chunk.size())
      fail(where_, "column chunk has {} bytes after its last page", chunk.size() - pos);
    const size_t rows_now = spec_.list ? out.offsets.size() : value_count(out.values);
    if (static_cast<int64_t>(rows_now - rows_before_) != num_rows)
      fail(where_, "column chunk holds {} rows, its row group {}", rows_now - rows_before_,
           num_rows);
  }

 private:
  void read_dictionary(const PageHeader& h, std::string_view data) {
    if (h.encoding != static_cast<int32_t>(Encoding::kPlain) &&
        h.encoding != static_cast<int32_t>(Encoding::kPlainDictionary))
      fail(where_, "dictionary page encoding {} is not supported", encoding_name(h.encoding));
    if (h.num_values < 0) fail(where_, "dictionary page declares {} values", h.num_values);
    const std::string page = page_data(h.uncompressed_page_size, data, "a dictionary page");
    dictionary_ = empty_values(spec_.type);
    meter_.charge(plain_decoded_bytes(dictionary_, page.size(), static_cast<size_t>(h.num_values)),
                  "the dictionary's values", where_);
    decode_plain(page, static_cast<size_t>(h.num_values), dictionary_, where_);
    has_dictionary_ = true;
  }

  void read_data_v1(const PageHeader& h, std::string_view data, int64_t& total_values) {
    const std::string page = page_data(h.uncompressed_page_size, data, "a data page");
    const auto n = static_cast<size_t>(h.num_values);
    std::string_view rest = page;
    std::vector<uint32_t> rep, def;
    if (lv_.max_rep > 0) {
      check_level_encoding(h.repetition_level_encoding, "repetition");
      charge_levels(n, "repetition");
      rest.remove_prefix(decode_levels_v1(rest, bit_width_for(lv_.max_rep), n, rep, where_));
    }
    if (lv_.max_def > 0) {
      check_level_encoding(h.definition_level_encoding, "definition");
      charge_levels(n, "definition");
      rest.remove_prefix(decode_levels_v1(rest, bit_width_for(lv_.max_def), n, def, where_));
    }
    assemble(n, rep, def, h.encoding, rest, total_values);
  }

  void read_data_v2(const PageHeader& h, std::string_view data, int64_t& total_values) {
    const int64_t rep_len = h.repetition_levels_byte_length,
                  def_len = h.definition_levels_byte_length;
    if (rep_len < 0 || def_len < 0 || rep_len + def_len > static_cast<int64_t>(data.size()) ||
        rep_len + def_len > h.uncompressed_page_size)
      fail(where_, "data page v2 level lengths {} and {} do not fit its {} bytes", rep_len, def_len,
           data.size());
    check_page_size(h.uncompressed_page_size);
    const auto n = static_cast<size_t>(h.num_values);
    std::vector<uint32_t> rep, def;
    if (lv_.max_rep > 0) {
      charge_levels(n, "repetition");
      decode_hybrid(data.substr(0, rep_len), bit_width_for(lv_.max_rep), n, rep, where_);
    } else if (rep_len != 0) {
      fail(where_, "data page v2 has repetition levels for a column without any");
    }
    if (lv_.max_def > 0) {
      charge_levels(n, "definition");
      decode_hybrid(data.substr(rep_len, def_len), bit_width_for(lv_.max_def), n, def, where_);
    } else if (def_len != 0) {
      fail(where_, "data page v2 has definition levels for a column without any");
    }
    const std::string_view values_data = data.substr(rep_len + def_len);
    const auto values_size = static_cast<int32_t>(h.uncompressed_page_size - rep_len - def_len);
    if (h.is_compressed) {
      const std::string values = page_data(values_size, values_data, "a data page v2");
      assemble(n, rep, def, h.encoding, values, total_values);
    } else {
      if (values_data.size() != static_cast<size_t>(values_size))
        fail(where_, "uncompressed data page v2 holds {} value bytes but declares {}",
             values_data.size(), values_size);
      assemble(n, rep, def, h.encoding, values_data, total_values);  // a view: nothing to charge
    }
  }

  void check_page_size(int32_t uncompressed_size) {
    if (static_cast<size_t>(uncompressed_size) > budget_.max_page_bytes)
      fail(where_,
           "decode budget exceeded: a page declares {} uncompressed bytes, above the limit of {} "
           "(DecodeBudget.max_page_bytes)",
           uncompressed_size, budget_.max_page_bytes);
  }

  // The page's bytes, decompressed (or copied) once its declared size fits the budget.
  std::string page_data(int32_t uncompressed_size, std::string_view data, const char* what) {
    check_page_size(uncompressed_size);
    meter_.charge(static_cast<uint64_t>(uncompressed_size), what, where_);
    return decompress_page(data, codec_, static_cast<size_t>(uncompressed_size), where_);
  }

  void charge_levels(size_t n, const char* which) {
    meter_.charge(static_cast<uint64_t>(n) * sizeof(uint32_t),
                  which[0] == 'r' ? "the page's repetition levels" : "the page's definition levels",
                  where_);
  }

  void check_level_encoding(int32_t encoding, const char* which) {
    if (encoding != static_cast<int32_t>(Encoding::kRle))
      fail(where_, "{} level encoding {} is not supported (only RLE)", which,
           encoding_name(encoding));
  }

  // Maps `n` level entries to rows and decodes the values they say are present.
  void assemble(size_t n, const std::vector<uint32_t>& rep, const std::vector<uint32_t>& def,
                int32_t encoding, std::string_view values, int64_t& total_values) {
    size_t present = 0;
    for (size_t i = 0; i < n; ++i) {
      const int d = lv_.max_def > 0 ? static_cast<int>(def[i]) : 0;
      if (d > lv_.max_def)
        fail(where_, "definition level {} is above the maximum {}", d, lv_.max_def);
      if (!spec_.list) {
        if (d != lv_.value_def) fail(where_, "column '{}' holds a null", spec_.name);
        ++present;
        continue;
      }
      const int r = static_cast<int>(rep[i]);
      if (r > lv_.max_rep) fail(where_, "repetition level {} is above the maximum 1", r);
      if (r == 0) {
        // A new row starts at the next value.
        if (out_->offsets.size() >= static_cast<size_t>(budget_.max_rows))
          fail(
              where_,
              "decode budget exceeded: column '{}' holds more than {} rows (DecodeBudget.max_rows)",
              spec_.name, budget_.max_rows);
        out_->offsets.push_back(values_total_ + present);
        row_has_values_ = false;
      } else if (out_->offsets.size() == rows_before_ || !row_has_values_) {
        fail(where_, "a list continues (repetition level 1) where no list was started");
      }
      if (d < lv_.empty_def) fail(where_, "column '{}' holds a null list", spec_.name);
      if (d == lv_.empty_def) {
        if (r != 0) fail(where_, "an empty list inside a list");
        continue;
      }
      if (d != lv_.value_def) fail(where_, "column '{}' holds a null list element", spec_.name);
      row_has_values_ = true;
      ++present;
    }
    if (spec_.list) {
      total_values += static_cast<int64_t>(present);
      if (total_values > budget_.max_list_values)
        fail(where_,
             "decode budget exceeded: column '{}' holds more than {} list values "
             "(DecodeBudget.max_list_values)",
             spec_.name, budget_.max_list_values);
    }
    if (encoding == static_cast<int32_t>(Encoding::kPlain)) {
      meter_.charge(plain_decoded_bytes(out_->values, values.size(), present), "the page's values",
                    where_);
      decode_plain(values, present, out_->values, where_);
    } else if (is_dictionary_encoding(encoding)) {
      if (!has_dictionary_) fail(where_, "dictionary-encoded page without a dictionary page");
      meter_.charge(static_cast<uint64_t>(present) * sizeof(uint32_t),
                    "the page's dictionary indices", where_);
      std::vector<uint32_t> indices;
      decode_dictionary_index_stream(values, present, value_count(dictionary_), indices, where_);
      const uint64_t expanded = dictionary_expansion_bytes(dictionary_, indices);
      const std::string what = fmt::format("dictionary expansion of {} values", indices.size());
      meter_.charge(expanded, what.c_str(), where_);
      expand_dictionary(dictionary_, indices, out_->values);
    } else {
      fail(where_, "value encoding {} is not supported (PLAIN or dictionary only)",
           encoding_name(encoding));
    }
    values_total_ += present;
  }

  const ColumnSpec& spec_;
  LeafLevels lv_;
  int32_t codec_;
  std::string where_;
  BudgetMeter& meter_;
  const DecodeBudget& budget_;
  ColumnData* out_ = nullptr;
  size_t rows_before_ = 0;
  Values dictionary_;
  bool has_dictionary_ = false;
  size_t values_total_ = 0;      // values in the column once this page's are appended
  bool row_has_values_ = false;  // the current list row has at least one value
};

uint32_t get_u32(std::string_view bytes, size_t pos) {
  uint32_t v;
  std::memcpy(&v, bytes.data() + pos, 4);
  return v;
}

}  // namespace

Footer read_footer(std::string_view bytes, const std::string& where) {
  BudgetMeter meter(DecodeBudget{}, bytes.size());
  return read_footer(bytes, where, meter);
}

Footer read_footer(std::string_view bytes, const std::string& where, BudgetMeter& meter) {
  constexpr size_t kMinSize = 2 * kMagicSize + 4;
  if (bytes.size() < kMinSize)
    fail(where, "not a Parquet file: {} bytes, fewer than the {} of magic and footer length",
         bytes.size(), kMinSize);
  const std::string_view head = bytes.substr(0, kMagicSize);
  const std::string_view tail = bytes.substr(bytes.size() - kMagicSize);
  if (tail == "PARE")
    fail(where, "the Parquet file is encrypted (footer magic PARE); rollout files are not");
  if (head != kMagic || tail != kMagic)
    fail(where, "not a Parquet file: the magic bytes PAR1 are missing at the {}",
         head != kMagic ? "start" : "end");
  const size_t footer_len = get_u32(bytes, bytes.size() - kMagicSize - 4);
  if (footer_len > bytes.size() - kMinSize)
    fail(where, "footer length {} is larger than the file allows ({} bytes)", footer_len,
         bytes.size() - kMinSize);
  if (footer_len > meter.budget().max_footer_bytes)
    fail(where,
         "decode budget exceeded: a footer of {} bytes, above the limit of {} "
         "(DecodeBudget.max_footer_bytes)",
         footer_len, meter.budget().max_footer_bytes);
  Footer f;
  f.body_size = bytes.size() - kMagicSize - 4 - footer_len;
  f.meta = parse_file_metadata(bytes.substr(f.body_size, footer_len), where + ", footer", meter);
  if (f.meta.encrypted) fail(where, "the Parquet file is encrypted; rollout files are not");
  return f;
}

Table read_table(std::string_view bytes, const std::vector<ColumnSpec>& specs,
                 const std::string& where, const DecodeBudget& budget) {
  BudgetMeter meter(budget, bytes.size());
  Table t;
  t.footer = read_footer(bytes, where, meter);
  const FileMetaData& meta = t.footer.meta;
  const std::vector<LeafLevels> leaves = check_schema(meta.schema, specs, where);

  if (meta.num_rows < 0) fail(where, "the file declares {} rows", meta.num_rows);
  if (meta.num_rows > budget.max_rows)
    fail(where,
         "decode budget exceeded: the file declares {} rows, above the limit of {} "
         "(DecodeBudget.max_rows)",
         meta.num_rows, budget.max_rows);
  int64_t rows = 0;
  for (const RowGroup& g : meta.row_groups) {
    if (g.num_rows < 0 || g.num_rows > budget.max_rows)
      fail(where, "a row group declares {} rows", g.num_rows);
    rows += g.num_rows;
  }
  if (rows != meta.num_rows)
    fail(where, "row groups hold {} rows, the file declares {}", rows, meta.num_rows);
  t.rows = static_cast<size_t>(rows);

  for (const ColumnSpec& spec : specs) t.columns.push_back(ColumnData{empty_values(spec.type), {}});
  std::vector<int64_t> list_values(specs.size(), 0);

  const std::string_view body = bytes.substr(0, t.footer.body_size);
  for (size_t g = 0; g < meta.row_groups.size(); ++g) {
    const RowGroup& group = meta.row_groups[g];
    if (group.columns.size() != specs.size())
      fail(where, "row group {} has {} column chunks, expected {}", g, group.columns.size(),
           specs.size());
    for (size_t k = 0; k < specs.size(); ++k) {
      const ColumnSpec& spec = specs[k];
      const std::string at = fmt::format("{}, row group {}, column '{}'", where, g, spec.name);
      const ColumnChunk& chunk = group.columns[k];
      if (chunk.file_path) fail(at, "column data in another file ('{}')", *chunk.file_path);
      if (chunk.encrypted) fail(at, "the column chunk is encrypted");
      if (!chunk.meta_data) fail(at, "the column chunk has no metadata");
      const ColumnMetaData& cm = *chunk.meta_data;
      if (cm.type != physical_type(spec.type))
        fail(at, "the column chunk's type is {}, the schema's {}", type_name(cm.type),
             type_name(physical_type(spec.type)));
      if (cm.path_in_schema != leaf_path(spec))
        fail(at, "the column chunk's path does not match the schema");
      if (cm.codec != static_cast<int32_t>(Codec::kZstd) &&
          cm.codec != static_cast<int32_t>(Codec::kUncompressed))
        fail(at,
             "compression {} is not supported: rollout files use ZSTD or UNCOMPRESSED (with "
             "DuckDB, write COPY ... (FORMAT parquet, COMPRESSION zstd))",
             codec_name(cm.codec));
      if (spec.list ? (cm.num_values < group.num_rows ||
                       cm.num_values > group.num_rows + budget.max_list_values)
                    : cm.num_values != group.num_rows)
        fail(at, "the column chunk declares {} values for {} rows", cm.num_values, group.num_rows);
      int64_t start = cm.data_page_offset;
      if (cm.dictionary_page_offset && *cm.dictionary_page_offset > 0 &&
          *cm.dictionary_page_offset < start)
        start = *cm.dictionary_page_offset;
      const auto body_size = static_cast<int64_t>(body.size());
      if (start < static_cast<int64_t>(kMagicSize) || start >= body_size ||
          cm.total_compressed_size <= 0 || cm.total_compressed_size > body_size - start)
        fail(at, "the column chunk (offset {}, {} bytes) lies outside the file's {} data bytes",
             start, cm.total_compressed_size, body_size);
      ChunkReader reader(spec, leaves[k], cm.codec, at, meter);
      reader.read(
          body.substr(static_cast<size_t>(start), static_cast<size_t>(cm.total_compressed_size)),
          cm.num_values, group.num_rows, t.columns[k], list_values[k]);
    }
  }

  for (size_t k = 0; k < specs.size(); ++k) {
    ColumnData& col = t.columns[k];
    if (specs[k].list) col.offsets.push_back(value_count(col.values));
    if (specs[k].utf8) {
      const auto& strings = std::get<std::vector<std::string>>(col.values);
      for (size_t i = 0; i < strings.size(); ++i)
        if (!is_valid_utf8(strings[i]))
          fail(where, "column '{}' value {} is not valid UTF-8", specs[k].name, i);
    }
  }
  t.decoded_bytes = meter.decoded_bytes();
  return t;
}

}  // namespace trellis::rollout::parquet
