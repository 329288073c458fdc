// Hand-built rollout files for the decode-budget tests: a Parquet file with the rollout schema
// whose column chunks are written page by page (so a test can put a hostile page in one column),
// whose row groups may all point at the same chunks, and a runner that decodes in a child process
// with a capped address space, so that a decompression bomb shows as a failed allocation instead
// of taking the machine's memory.
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "common/error.h"
#include "rollout/parquet/column.h"
#include "rollout/parquet/compression.h"
#include "rollout/parquet/encoding.h"
#include "rollout/parquet/file_metadata.h"
#include "rollout/parquet/format.h"
#include "rollout/parquet/page_header.h"
#include "rollout/parquet/rollout_columns.h"
#include "rollout/parquet/schema.h"
#include "rollout/rollout_file.h"

namespace trellis::rollout::hostile {

using namespace parquet;

inline constexpr size_t kMiB = size_t{1} << 20;

inline void put_uleb(uint64_t v, std::string& out) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// An RLE run of `n` copies of `value` (bit width 1 or 0: one value byte, or none).
inline std::string rle_run(uint64_t n, int value, int bit_width) {
  std::string out;
  put_uleb(n << 1, out);
  if (bit_width > 0) out.push_back(static_cast<char>(value));
  return out;
}

// A v1 level stream: 4-byte length, then the hybrid data.
inline std::string levels_v1(const std::string& hybrid) {
  std::string out;
  const auto n = static_cast<uint32_t>(hybrid.size());
  for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((n >> (8 * b)) & 0xff));
  return out + hybrid;
}

// The PLAIN bytes of one value.
template <typename T>
std::string plain(const T& value) {
  std::string out;
  encode_plain(Values{std::vector<T>{value}}, 0, 1, out);
  return out;
}

// A page header followed by `data`, compressed at `level` (0 = uncompressed).
inline std::string page(PageType type, Encoding encoding, int64_t num_values,
                        const std::string& data, int level) {
  const std::string stored = compress_page(data, level);
  PageHeader h;
  h.type = static_cast<int32_t>(type);
  h.uncompressed_page_size = static_cast<int32_t>(data.size());
  h.compressed_page_size = static_cast<int32_t>(stored.size());
  h.num_values = static_cast<int32_t>(num_values);
  h.encoding = static_cast<int32_t>(encoding);
  h.definition_level_encoding = static_cast<int32_t>(Encoding::kRle);
  h.repetition_level_encoding = static_cast<int32_t>(Encoding::kRle);
  return serialize_page_header(h) + stored;
}

// One column chunk: its pages, its value count and the level its pages are compressed at.
struct Chunk {
  std::string bytes;
  int64_t num_values = 0;
  int level = 0;
};

// A scalar column whose `rows` values are all `plain_entry` (PLAIN bytes of one value): a
// one-entry dictionary page and a data page of RLE indices of bit width 0.
inline Chunk repeated_value(const std::string& plain_entry, int64_t rows, int level = 0) {
  Chunk c;
  c.level = level;
  c.num_values = rows;
  c.bytes = page(PageType::kDictionaryPage, Encoding::kPlain, 1, plain_entry, level);
  c.bytes += page(PageType::kDataPage, Encoding::kRleDictionary, rows,
                  std::string(1, '\0') + rle_run(static_cast<uint64_t>(rows), 0, 0), level);
  return c;
}

// A list column of `rows` empty lists (repetition and definition level 0 for each).
inline Chunk empty_lists(int64_t rows) {
  Chunk c;
  c.num_values = rows;
  const std::string zeros = levels_v1(rle_run(static_cast<uint64_t>(rows), 0, 1));
  c.bytes = page(PageType::kDataPage, Encoding::kPlain, rows, zeros + zeros, 0);
  return c;
}

// An int32 list column of one row holding `n` copies of `value` (dictionary-encoded).
inline Chunk one_long_list(int64_t n, int32_t value) {
  Chunk c;
  c.num_values = n;
  c.bytes = page(PageType::kDictionaryPage, Encoding::kPlain, 1, plain(value), 0);
  const std::string rep = levels_v1(rle_run(1, 0, 1) + rle_run(static_cast<uint64_t>(n - 1), 1, 1));
  const std::string def = levels_v1(rle_run(static_cast<uint64_t>(n), 1, 1));
  const std::string indices = std::string(1, '\0') + rle_run(static_cast<uint64_t>(n), 0, 0);
  c.bytes += page(PageType::kDataPage, Encoding::kRleDictionary, n, rep + def + indices, 0);
  return c;
}

// A scalar column of one row holding `value`, in one PLAIN data page.
template <typename T>
Chunk single_plain(const T& value, int level) {
  Chunk c;
  c.level = level;
  c.num_values = 1;
  c.bytes = page(PageType::kDataPage, Encoding::kPlain, 1, plain(value), level);
  return c;
}

// Chunks of `rows` rows that decode to valid records (every row the same; lists empty).
inline std::vector<Chunk> benign_chunks(int64_t rows) {
  std::vector<Chunk> chunks;
  for (const ColumnSpec& spec : rollout_columns()) {
    if (spec.list) {
      chunks.push_back(empty_lists(rows));
      continue;
    }
    std::string entry;
    if (spec.name == "finish_reason") {
      entry = plain(std::string("eos"));
    } else if (spec.name == "proof") {
      entry = plain(std::string());
    } else if (spec.type == ValueType::kBytes) {
      entry = plain(spec.name + "-value");
    } else if (spec.type == ValueType::kInt64) {
      entry = plain(int64_t{7});
    } else if (spec.type == ValueType::kFloat) {
      entry = plain(0.5f);
    } else {
      entry = plain(int32_t{3});
    }
    chunks.push_back(repeated_value(entry, rows));
  }
  return chunks;
}

inline size_t column_index(const std::string& name) {
  const auto& specs = rollout_columns();
  for (size_t k = 0; k < specs.size(); ++k)
    if (specs[k].name == name) return k;
  throw std::logic_error("no column " + name);
}

// The file: the chunks once in the body, then `row_groups` row groups of `rows_per_group` rows,
// every one of which points at the same chunks.
inline std::string build_file(const std::vector<Chunk>& chunks, int64_t rows_per_group,
                              int64_t row_groups, const KeyValues& metadata = {}) {
  const auto& specs = rollout_columns();
  std::string out(kMagic, kMagicSize);
  std::vector<ColumnMetaData> metas;
  for (size_t k = 0; k < specs.size(); ++k) {
    ColumnMetaData m;
    m.type = physical_type(specs[k].type);
    m.encodings = {static_cast<int32_t>(Encoding::kPlain), static_cast<int32_t>(Encoding::kRle),
                   static_cast<int32_t>(Encoding::kRleDictionary)};
    m.path_in_schema = leaf_path(specs[k]);
    m.codec = codec_for_level(chunks[k].level);
    m.num_values = chunks[k].num_values;
    m.total_uncompressed_size = static_cast<int64_t>(chunks[k].bytes.size());
    m.total_compressed_size = static_cast<int64_t>(chunks[k].bytes.size());
    m.data_page_offset = static_cast<int64_t>(out.size());
    out += chunks[k].bytes;
    metas.push_back(m);
  }
  FileMetaData meta;
  meta.version = 2;
  meta.schema = build_schema(specs);
  meta.num_rows = rows_per_group * row_groups;
  for (int64_t g = 0; g < row_groups; ++g) {
    RowGroup group;
    group.num_rows = rows_per_group;
    for (const ColumnMetaData& m : metas) {
      ColumnChunk c;
      c.file_offset = m.data_page_offset;
      c.meta_data = m;
      group.columns.push_back(c);
    }
    meta.row_groups.push_back(group);
  }
  meta.key_value_metadata = metadata;
  append_footer(out, meta);
  return out;
}

// Runs decode_rollout_file(bytes) in a forked child whose address space may grow by at most
// `headroom` bytes beyond its size at the fork. Returns "ok <rows>", "error: <message>" for a
// trellis::Error, "bad_alloc" when an allocation failed (the limit was hit), or what else ended
// the child.
inline std::string decode_in_child(const std::string& bytes, size_t headroom = 1024 * kMiB) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    close(fds[0]);
    std::string result;
    size_t pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%zu", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    const rlim_t limit = pages * static_cast<size_t>(sysconf(_SC_PAGESIZE)) + headroom;
    const rlimit rl{limit, limit};
    if (pages == 0 || setrlimit(RLIMIT_AS, &rl) != 0) {
      result = "could not limit the address space";
    } else {
      try {
        result = "ok " + std::to_string(decode_rollout_file(bytes, "bomb.parquet").rows.size());
      } catch (const Error& e) {
        result = std::string("error: ") + e.what();
      } catch (const std::bad_alloc&) {
        result = "bad_alloc";
      } catch (const std::exception& e) {
        result = std::string("exception: ") + e.what();
      }
    }
    const char* p = result.data();
    size_t left = result.size();
    while (left > 0) {
      const ssize_t w = write(fds[1], p, left);
      if (w <= 0) break;
      p += w;
      left -= static_cast<size_t>(w);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string result;
  char buffer[4096];
  ssize_t r;
  while ((r = read(fds[0], buffer, sizeof(buffer))) > 0)
    result.append(buffer, static_cast<size_t>(r));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return result;
}

}  // namespace trellis::rollout::hostile
