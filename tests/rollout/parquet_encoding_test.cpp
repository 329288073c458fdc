// The Parquet building blocks: RLE/bit-packed hybrid levels, PLAIN and dictionary values, page
// compression and the Thrift footer, each round-tripped and fed corrupt input.
#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "rollout/parquet/compression.h"
#include "rollout/parquet/encoding.h"
#include "rollout/parquet/file_metadata.h"
#include "rollout/parquet/format.h"
#include "rollout/parquet/levels.h"
#include "rollout/parquet/page_header.h"

namespace trellis::rollout::parquet {
namespace {

std::vector<uint32_t> round_trip(const std::vector<uint32_t>& values, int width) {
  std::string bytes;
  encode_hybrid(values, width, bytes);
  std::vector<uint32_t> out;
  EXPECT_EQ(decode_hybrid(bytes, width, values.size(), out, "t"), bytes.size());
  return out;
}

TEST(ParquetLevels, HybridRoundTrips) {
  std::mt19937 rng(7);
  for (int width : {1, 2, 3, 8, 13, 32}) {
    const uint64_t max = width == 32 ? 0xffffffffull : (1ull << width) - 1;
    for (size_t n : {0, 1, 7, 8, 9, 100, 1000}) {
      std::vector<uint32_t> v(n);
      for (size_t i = 0; i < n; ++i)  // runs and noise mixed
        v[i] = (i / 20) % 2 ? static_cast<uint32_t>(max) : static_cast<uint32_t>(rng() % (max + 1));
      EXPECT_EQ(round_trip(v, width), v) << "width " << width << " n " << n;
    }
  }
  EXPECT_EQ(bit_width_for(0), 0);
  EXPECT_EQ(bit_width_for(1), 1);
  EXPECT_EQ(bit_width_for(3), 2);
  EXPECT_EQ(bit_width_for(4), 3);
}

TEST(ParquetLevels, DecodesTheSpecExample) {
  // Encodings.md: values 0..7 bit-packed with width 3 -> header 0x03, bytes 0x88 0xC6 0xFA.
  const std::string bytes("\x03\x88\xc6\xfa", 4);
  std::vector<uint32_t> out;
  decode_hybrid(bytes, 3, 8, out, "t");
  EXPECT_EQ(out, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // An RLE run of 5 ones (width 1): header 5 << 1, value byte 1; asking for 3 cuts the run.
  out.clear();
  decode_hybrid(std::string("\x0a\x01", 2), 1, 3, out, "t");
  EXPECT_EQ(out, (std::vector<uint32_t>{1, 1, 1}));
}

TEST(ParquetLevels, RefusesCorruptInput) {
  std::vector<uint32_t> out;
  // Data ends before the asked-for count.
  EXPECT_THROW(decode_hybrid(std::string("\x0a\x01", 2), 1, 6, out, "t"), Error);
  // A bit-packed run claiming 2^40 groups.
  EXPECT_THROW(decode_hybrid(std::string("\x81\x80\x80\x80\x80\x80\x01", 7), 1, 10, out, "t"),
               Error);
  // An RLE value wider than the bit width.
  EXPECT_THROW(decode_hybrid(std::string("\x02\x05", 2), 2, 1, out, "t"), Error);
  // A header that never ends.
  EXPECT_THROW(decode_hybrid(std::string(12, '\xff'), 1, 1, out, "t"), Error);
  // v1 level length beyond the page.
  EXPECT_THROW(decode_levels_v1(std::string("\xff\x00\x00\x00\x02\x01", 6), 1, 1, out, "t"), Error);
}

TEST(ParquetValues, PlainAndDictionary) {
  Values strings = std::vector<std::string>{"a", "", "héllo"};
  std::string bytes;
  encode_plain(strings, 0, 3, bytes);
  Values back = empty_values(ValueType::kBytes);
  EXPECT_EQ(decode_plain(bytes, 3, back, "t"), bytes.size());
  EXPECT_EQ(back, strings);
  Values short_read = empty_values(ValueType::kBytes);
  EXPECT_THROW(decode_plain(bytes.substr(0, bytes.size() - 1), 3, short_read, "t"), Error);
  Values ints = empty_values(ValueType::kInt64);
  EXPECT_THROW(decode_plain(std::string(15, '\0'), 2, ints, "t"), Error);

  // Dictionary indices: width byte 2, RLE run of 3 x index 2, then an index past the end.
  const Values dict = std::vector<float>{0.5f, 1.5f, 2.5f};
  Values out = empty_values(ValueType::kFloat);
  decode_dictionary_indices(std::string("\x02\x06\x02", 3), 3, dict, out, "t");
  EXPECT_EQ(out, (Values{std::vector<float>{2.5f, 2.5f, 2.5f}}));
  EXPECT_THROW(decode_dictionary_indices(std::string("\x02\x02\x03", 3), 1, dict, out, "t"), Error);
  EXPECT_THROW(decode_dictionary_indices(std::string("\x21\x02\x00", 3), 1, dict, out, "t"), Error);
}

TEST(ParquetValues, Utf8Validation) {
  EXPECT_TRUE(is_valid_utf8("plain ascii"));
  EXPECT_TRUE(is_valid_utf8("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xc3"));              // truncated
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
}

TEST(ParquetCompression, ZstdRoundTripAndCorruption) {
  const std::string data(10000, 'x');
  const std::string z = compress_page(data, 3);
  const auto zstd = static_cast<int32_t>(Codec::kZstd);
  EXPECT_LT(z.size(), data.size());
  EXPECT_EQ(decompress_page(z, zstd, data.size(), "t"), data);
  EXPECT_THROW(decompress_page(z, zstd, data.size() - 1, "t"), Error);  // more than declared
  EXPECT_THROW(decompress_page(z, zstd, data.size() + 1, "t"), Error);  // less than declared
  EXPECT_THROW(decompress_page(z.substr(0, z.size() - 2), zstd, data.size(), "t"), Error);
  EXPECT_THROW(decompress_page(z, zstd, kMaxPageBytes + 1, "t"), Error);
  EXPECT_THROW(decompress_page(z, static_cast<int32_t>(Codec::kSnappy), data.size(), "t"), Error);
  const auto none = static_cast<int32_t>(Codec::kUncompressed);
  EXPECT_EQ(decompress_page("abc", none, 3, "t"), "abc");
  EXPECT_THROW(decompress_page("abc", none, 4, "t"), Error);
}

TEST(ParquetMetadata, FooterRoundTripsAndRefusesGarbage) {
  FileMetaData m;
  m.version = 2;
  SchemaElement root;
  root.name = "schema";
  root.num_children = 1;
  SchemaElement leaf;
  leaf.name = "s";
  leaf.type = static_cast<int32_t>(Type::kByteArray);
  leaf.repetition = 0;
  leaf.converted_type = 0;
  leaf.logical = static_cast<int16_t>(LogicalKind::kString);
  m.schema = {root, leaf};
  m.num_rows = 3;
  RowGroup g;
  g.num_rows = 3;
  ColumnChunk c;
  c.meta_data = ColumnMetaData{};
  c.meta_data->type = 6;
  c.meta_data->encodings = {0, 8};
  c.meta_data->path_in_schema = {"s"};
  c.meta_data->codec = 6;
  c.meta_data->num_values = 3;
  c.meta_data->data_page_offset = 4;
  c.meta_data->dictionary_page_offset = 40;
  g.columns = {c};
  m.row_groups = {g};
  m.key_value_metadata = {{"k", "v"}, {"empty", ""}};
  m.created_by = "me";
  const std::string bytes = serialize_file_metadata(m);
  const FileMetaData p = parse_file_metadata(bytes, "t");
  EXPECT_EQ(p.version, 2);
  ASSERT_EQ(p.schema.size(), 2u);
  EXPECT_EQ(p.schema[1].name, "s");
  EXPECT_EQ(p.schema[1].logical, static_cast<int16_t>(LogicalKind::kString));
  EXPECT_EQ(p.schema[1].converted_type, 0);
  EXPECT_EQ(p.num_rows, 3);
  ASSERT_EQ(p.row_groups.size(), 1u);
  ASSERT_TRUE(p.row_groups[0].columns[0].meta_data);
  EXPECT_EQ(p.row_groups[0].columns[0].meta_data->encodings, (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(p.row_groups[0].columns[0].meta_data->dictionary_page_offset, 40);
  EXPECT_EQ(p.key_value_metadata, m.key_value_metadata);
  EXPECT_EQ(p.created_by, "me");

  for (size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(parse_file_metadata(bytes.substr(0, n), "t"), Error) << n;
  // A string length far beyond the input.
  EXPECT_THROW(parse_file_metadata(std::string("\x18\xff\xff\xff\xff\x0f", 6), "t"), Error);
  // Deeply nested unknown structs.
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += '\x1c';  // field +1, struct
  EXPECT_THROW(parse_file_metadata(deep, "t"), Error);
}

TEST(ParquetMetadata, PageHeaderRoundTrip) {
  PageHeader h;
  h.type = static_cast<int32_t>(PageType::kDataPage);
  h.uncompressed_page_size = 100;
  h.compressed_page_size = 50;
  h.num_values = 7;
  h.encoding = 0;
  h.definition_level_encoding = 3;
  h.repetition_level_encoding = 3;
  const std::string bytes = serialize_page_header(h) + "page data";
  size_t size = 0;
  const PageHeader p = parse_page_header(bytes, size, "t");
  EXPECT_EQ(bytes.substr(size), "page data");
  EXPECT_TRUE(p.has_data_v1);
  EXPECT_EQ(p.num_values, 7);
  EXPECT_EQ(p.uncompressed_page_size, 100);
  EXPECT_EQ(p.compressed_page_size, 50);
  EXPECT_THROW(parse_page_header(bytes.substr(0, 5), size, "t"), Error);
}

}  // namespace
}  // namespace trellis::rollout::parquet
