// Parquet format constants (parquet.thrift enums) for the subset Trellis reads and writes, and
// their names for error messages and `trellis rollouts inspect`.
#pragma once

#include <cstdint>
#include <string>

namespace trellis::rollout::parquet {

inline constexpr char kMagic[] = "PAR1";  // at the start and the end of every file
inline constexpr size_t kMagicSize = 4;

enum class Type : int32_t {
  kBoolean = 0,
  kInt32 = 1,
  kInt64 = 2,
  kInt96 = 3,
  kFloat = 4,
  kDouble = 5,
  kByteArray = 6,
  kFixedLenByteArray = 7,
};

enum class ConvertedType : int32_t { kUtf8 = 0, kList = 3, kInt32 = 17, kInt64 = 18 };

enum class Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };

enum class Encoding : int32_t {
  kPlain = 0,
  kPlainDictionary = 2,
  kRle = 3,
  kBitPacked = 4,
  kDeltaBinaryPacked = 5,
  kDeltaLengthByteArray = 6,
  kDeltaByteArray = 7,
  kRleDictionary = 8,
  kByteStreamSplit = 9,
};

enum class Codec : int32_t {
  kUncompressed = 0,
  kSnappy = 1,
  kGzip = 2,
  kLzo = 3,
  kBrotli = 4,
  kLz4 = 5,
  kZstd = 6,
  kLz4Raw = 7,
};

enum class PageType : int32_t {
  kDataPage = 0,
  kIndexPage = 1,
  kDictionaryPage = 2,
  kDataPageV2 = 3
};

// LogicalType union members (field ids of parquet.thrift's LogicalType) that Trellis uses.
enum class LogicalKind : int16_t { kNone = 0, kString = 1, kList = 3, kInteger = 10, kOther = -1 };

std::string type_name(int32_t type);
std::string converted_type_name(int32_t converted);
std::string repetition_name(int32_t repetition);
std::string encoding_name(int32_t encoding);
std::string codec_name(int32_t codec);
std::string page_type_name(int32_t page_type);

}  // namespace trellis::rollout::parquet
