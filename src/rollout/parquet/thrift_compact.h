// Thrift compact protocol (libthrift's TCompactProtocol over a TMemoryBuffer) for the Parquet
// structs, which are written and read field by field by hand (file_metadata.cpp,
// page_header.cpp) rather than generated. The reader is bounded by its input: strings and lists
// larger than the bytes left are refused before anything is allocated, nesting is limited, and
// every Thrift failure becomes an Error naming `where`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace trellis::rollout::parquet {

// Wire types of the compact protocol as libthrift names them (apache::thrift::protocol::TType).
enum class FieldType : int8_t {
  kStop = 0,
  kBool = 2,
  kByte = 3,
  kI16 = 6,
  kI32 = 8,
  kI64 = 10,
  kString = 11,
  kStruct = 12,
  kMap = 13,
  kSet = 14,
  kList = 15,
};

// Serializes one top-level struct. Fields must be written in increasing id order.
class ThriftWriter {
 public:
  ThriftWriter();
  ~ThriftWriter();
  ThriftWriter(const ThriftWriter&) = delete;
  ThriftWriter& operator=(const ThriftWriter&) = delete;

  void i32(int16_t id, int32_t value);
  void i64(int16_t id, int64_t value);
  void boolean(int16_t id, bool value);
  void string(int16_t id, std::string_view value);
  // A struct field whose fields `body` writes.
  void structure(int16_t id, const std::function<void()>& body);
  // List fields: the elements are written by `element(i)` with the element_* calls below.
  void list(int16_t id, FieldType element_type, size_t size,
            const std::function<void(size_t)>& element);
  void element_i32(int32_t value);
  void element_string(std::string_view value);
  void element_struct(const std::function<void()>& body);

  // Ends the top-level struct and returns its bytes.
  std::string finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Reads structs from `bytes`. Values are read with the typed getters after read_struct reports
// the field; unknown fields are skipped.
class ThriftReader {
 public:
  ThriftReader(std::string_view bytes, std::string where);
  ~ThriftReader();
  ThriftReader(const ThriftReader&) = delete;
  ThriftReader& operator=(const ThriftReader&) = delete;

  // Reads a struct: calls `field(id, type)` for each field, which reads the value with a getter
  // and returns true, or returns false to have it skipped.
  void read_struct(const std::function<bool(int16_t id, FieldType type)>& field);
  // Reads a list of `element_type` elements, calling `element()` for each (which reads it). A
  // list of more than `max_elements` is refused before any element is read, naming `limit` (the
  // DecodeBudget field that sets it).
  void read_list(FieldType element_type, const std::function<void()>& element, const char* what,
                 size_t max_elements = SIZE_MAX, const char* limit = "");

  // Getters: `type` is the wire type read_struct reported (checked against what the field must
  // be); `what` names the field in errors.
  int32_t i32(FieldType type, const char* what);
  int64_t i64(FieldType type, const char* what);
  int16_t i16(FieldType type, const char* what);
  int8_t i8(FieldType type, const char* what);
  bool boolean(FieldType type, const char* what);
  std::string string(FieldType type, const char* what);
  // List element getters (no type check: read_list checked the element type).
  int32_t element_i32();
  std::string element_string();

  size_t consumed() const;  // bytes read so far
  const std::string& where() const { return where_; }

 private:
  template <typename F>
  auto guarded(F&& f) -> decltype(f());
  void expect(FieldType got, FieldType want, const char* what);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string where_;
  int depth_ = 0;
};

}  // namespace trellis::rollout::parquet
