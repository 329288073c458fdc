// The decode budget: how much one Parquet file may make the reader parse, decompress and
// allocate. Rollout files come from untrusted workers, and a few KB of RLE runs, dictionary
// references, zstd frames or footer entries can describe gigabytes to terabytes; every such size
// is charged to a BudgetMeter BEFORE the reader allocates for it, so a hostile file fails fast
// with an Error naming the limit, the file, row group and column, and never makes the reader hold
// more than the budget. The defaults fit every honest upload (at most 256 MiB on disk) with a
// wide margin; each says why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace trellis::rollout::parquet {

struct DecodeBudget {
  // Footer (Thrift FileMetaData) bytes. Ours take about 1.2 KB per row group of 19 column chunks,
  // so 1,000 row groups (a million rows at 1,024 per group) are ~1.2 MB; DuckDB's statistics add
  // a few KB per row group, and it writes 122,880 rows per group.
  size_t max_footer_bytes = size_t{16} << 20;
  // Entries of the footer's lists. Rollout files have 28 schema elements, a handful of key/value
  // entries, 3-element column paths and at most 10 distinct encodings per chunk.
  size_t max_schema_elements = 1000;
  size_t max_row_groups = 10000;      // 10x the ~1,000 of a million rows at 1,024 rows per group
  size_t max_column_chunks = 200000;  // all row groups together: 19 per group, 10,000 groups
  size_t max_key_values = 1000;
  size_t max_chunk_list_elements = 16;  // encodings and path_in_schema of one column chunk
  // Pages read, all chunks together: ours are ~1 MiB each plus one per chunk, so an honest
  // 256 MiB file has a few hundred, plus one per column chunk (max_column_chunks).
  size_t max_pages = 1000000;
  // One page, uncompressed (also bounds one string value, which must fit in one page). Writers
  // cut pages at ~1 MiB (ours, DuckDB, Arrow); a list row is one page, so this allows 16 million
  // tokens in one completion.
  size_t max_page_bytes = size_t{64} << 20;
  // Rows in the file (a submission is groups x group_size rows: thousands, not millions).
  int64_t max_rows = 1000000;
  // List elements in one column, all rows together (tokens in a file): 2^28 = 268 million; an
  // honest 256 MiB file holds at most ~60 million (>= 4 bytes of zstd data per token and column).
  int64_t max_list_values = int64_t{1} << 28;
  // Decoded bytes, counted as the reader allocates them: every page header parsed, every page
  // decompressed or copied, 4 bytes per level and dictionary index, every value decoded (4 or 8
  // bytes; 32 + the length for a string), every dictionary entry, every footer struct and
  // string. Counted cumulatively
  // (memory freed after a page still counts), so the count also bounds the reader's work. The
  // limit is decoded_bytes_base + decoded_bytes_per_file_byte x the file's size, at most
  // max_decoded_bytes. An honest file whose tokens and log-probs are like real ones (ids from a
  // 150k vocabulary, varied log-probs: ~6 bytes per completion token on disk) counts ~7.5 bytes
  // per byte on disk (decode_budget_test measures it); only its most repetitive columns
  // (token_versions, levels) compress far better. The 32x factor leaves a 4x margin, and the
  // 256 MiB base covers small files of degenerate completions (the same token and log-prob
  // repeated: ~5 million tokens). A 256 MiB upload may count up to 8 GiB (~2 GiB when real); the
  // rows built from the columns afterwards take about as much again as the values decoded.
  uint64_t decoded_bytes_base = uint64_t{256} << 20;
  uint64_t decoded_bytes_per_file_byte = 32;
  uint64_t max_decoded_bytes = uint64_t{8} << 30;

  // The decoded-bytes limit for a file of `file_size` bytes.
  uint64_t decoded_bytes_limit(size_t file_size) const;
};

// Tracks one file's use of a DecodeBudget; every charge either fits or throws an Error naming
// the limit, the amounts and `at`. Not thread-safe (one meter per decode).
class BudgetMeter {
 public:
  BudgetMeter(const DecodeBudget& budget, size_t file_size);

  const DecodeBudget& budget() const { return budget_; }
  uint64_t decoded_bytes() const { return decoded_; }  // charged so far
  uint64_t decoded_bytes_limit() const { return limit_; }

  // Charges `bytes` decoded bytes for `what` (e.g. "dictionary expansion of 1000 values").
  void charge(uint64_t bytes, const char* what, const std::string& at);
  // `count` more items of a counted kind (pages, row groups, ...) against `limit`, named by
  // `field` (the DecodeBudget member) in errors.
  static void check_count(uint64_t count, uint64_t limit, const char* what, const char* field,
                          const std::string& at);
  void count_page(const std::string& at);

 private:
  DecodeBudget budget_;
  size_t file_size_;
  uint64_t limit_;
  uint64_t decoded_ = 0;
  uint64_t pages_ = 0;
};

}  // namespace trellis::rollout::parquet
