#include "rollout/parquet/thrift_compact.h"

#include <thrift/TConfiguration.h>
#include <thrift/Thrift.h>
#include <thrift/protocol/TCompactProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include <limits>

#include "common/error.h"

namespace trellis::rollout::parquet {

using apache::thrift::TException;
using apache::thrift::protocol::TCompactProtocolT;
using apache::thrift::protocol::TType;
using apache::thrift::transport::TMemoryBuffer;

namespace {

constexpr int kMaxDepth = 32;  // Parquet's structs nest 5 deep; refuse anything much deeper
// libthrift refuses messages above its configured size; the callers bound inputs well below.
constexpr int kMaxMessage = std::numeric_limits<int32_t>::max();

TType ttype(FieldType t) { return static_cast<TType>(t); }

}  // namespace

// ---- writer ----

struct ThriftWriter::Impl {
  std::shared_ptr<TMemoryBuffer> buffer = std::make_shared<TMemoryBuffer>(
      std::make_shared<apache::thrift::TConfiguration>(kMaxMessage));
  TCompactProtocolT<TMemoryBuffer> proto{buffer};
};

ThriftWriter::ThriftWriter() : impl_(std::make_unique<Impl>()) {
  impl_->proto.writeStructBegin("");
}

ThriftWriter::~ThriftWriter() = default;

void ThriftWriter::i32(int16_t id, int32_t value) {
  impl_->proto.writeFieldBegin("", apache::thrift::protocol::T_I32, id);
  impl_->proto.writeI32(value);
  impl_->proto.writeFieldEnd();
}

void ThriftWriter::i64(int16_t id, int64_t value) {
  impl_->proto.writeFieldBegin("", apache::thrift::protocol::T_I64, id);
  impl_->proto.writeI64(value);
  impl_->proto.writeFieldEnd();
}

void ThriftWriter::boolean(int16_t id, bool value) {
  impl_->proto.writeFieldBegin("", apache::thrift::protocol::T_BOOL, id);
  impl_->proto.writeBool(value);
  impl_->proto.writeFieldEnd();
}

void ThriftWriter::string(int16_t id, std::string_view value) {
  impl_->proto.writeFieldBegin("", apache::thrift::protocol::T_STRING, id);
  impl_->proto.writeBinary(std::string(value));
  impl_->proto.writeFieldEnd();
}

void ThriftWriter::structure(int16_t id, const std::function<void()>& body) {
  impl_->proto.writeFieldBegin("", apache::thrift::protocol::T_STRUCT, id);
  element_struct(body);
  impl_->proto.writeFieldEnd();
}

void ThriftWriter::list(int16_t id, FieldType element_type, size_t size,
                        const std::function<void(size_t)>& element) {
  impl_->proto.writeFieldBegin("", apache::thrift::protocol::T_LIST, id);
  impl_->proto.writeListBegin(ttype(element_type), static_cast<uint32_t>(size));
  for (size_t i = 0; i < size; ++i) element(i);
  impl_->proto.writeListEnd();
  impl_->proto.writeFieldEnd();
}

void ThriftWriter::element_i32(int32_t value) { impl_->proto.writeI32(value); }

void ThriftWriter::element_string(std::string_view value) {
  impl_->proto.writeBinary(std::string(value));
}

void ThriftWriter::element_struct(const std::function<void()>& body) {
  impl_->proto.writeStructBegin("");
  body();
  impl_->proto.writeFieldStop();
  impl_->proto.writeStructEnd();
}

std::string ThriftWriter::finish() {
  impl_->proto.writeFieldStop();
  impl_->proto.writeStructEnd();
  return impl_->buffer->getBufferAsString();
}

// ---- reader ----

struct ThriftReader::Impl {
  Impl(std::string_view bytes)
      : size(static_cast<uint32_t>(bytes.size())),
        buffer(std::make_shared<TMemoryBuffer>(
            reinterpret_cast<uint8_t*>(const_cast<char*>(bytes.data())), size,
            TMemoryBuffer::OBSERVE,
            std::make_shared<apache::thrift::TConfiguration>(kMaxMessage, kMaxMessage, kMaxDepth))),
        // Strings and lists can be no longer than the input: a corrupt length fails before
        // libthrift allocates for it.
        proto(buffer, static_cast<int32_t>(size), static_cast<int32_t>(size)) {}
  uint32_t size;
  std::shared_ptr<TMemoryBuffer> buffer;
  TCompactProtocolT<TMemoryBuffer> proto;
};

ThriftReader::ThriftReader(std::string_view bytes, std::string where) : where_(std::move(where)) {
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail(where_, "Thrift metadata of {} bytes is too large", bytes.size());
  impl_ = std::make_unique<Impl>(bytes);
}

ThriftReader::~ThriftReader() = default;

template <typename F>
auto ThriftReader::guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const TException& e) {
    fail(where_, "corrupt Thrift metadata: {}", e.what());
  } catch (const std::bad_alloc&) {
    fail(where_, "corrupt Thrift metadata: a size is too large");
  }
}

void ThriftReader::expect(FieldType got, FieldType want, const char* what) {
  // The compact protocol has no separate wire type for i8: it reads as a byte.
  if (got != want)
    fail(where_, "Thrift field {} has wire type {}, expected {}", what, static_cast<int>(got),
         static_cast<int>(want));
}

void ThriftReader::read_struct(const std::function<bool(int16_t, FieldType)>& field) {
  if (++depth_ > kMaxDepth) fail(where_, "Thrift structs nest deeper than {}", kMaxDepth);
  std::string name;
  guarded([&] { return impl_->proto.readStructBegin(name); });
  while (true) {
    TType type;
    int16_t id;
    guarded([&] { return impl_->proto.readFieldBegin(name, type, id); });
    if (type == apache::thrift::protocol::T_STOP) break;
    if (!field(id, static_cast<FieldType>(type)))
      guarded([&] { return apache::thrift::protocol::skip(impl_->proto, type); });
    guarded([&] { return impl_->proto.readFieldEnd(); });
  }
  guarded([&] { return impl_->proto.readStructEnd(); });
  --depth_;
}

void ThriftReader::read_list(FieldType element_type, const std::function<void()>& element,
                             const char* what, size_t max_elements, const char* limit) {
  TType type;
  uint32_t size;
  guarded([&] { return impl_->proto.readListBegin(type, size); });
  if (size > max_elements)
    fail(where_,
         "decode budget exceeded: {} has {} elements, above the limit of {} (DecodeBudget.{})",
         what, size, max_elements, limit);
  if (size > 0 && type != ttype(element_type))
    fail(where_, "Thrift list {} holds wire type {}, expected {}", what, static_cast<int>(type),
         static_cast<int>(element_type));
  // Every element takes at least one byte except in lists of empty structs; the list header was
  // already checked against the bytes left, so this loop is bounded by the input.
  for (uint32_t i = 0; i < size; ++i) element();
  guarded([&] { return impl_->proto.readListEnd(); });
}

int32_t ThriftReader::i32(FieldType type, const char* what) {
  expect(type, FieldType::kI32, what);
  return element_i32();
}

int64_t ThriftReader::i64(FieldType type, const char* what) {
  expect(type, FieldType::kI64, what);
  int64_t v = 0;
  guarded([&] { return impl_->proto.readI64(v); });
  return v;
}

int16_t ThriftReader::i16(FieldType type, const char* what) {
  expect(type, FieldType::kI16, what);
  int16_t v = 0;
  guarded([&] { return impl_->proto.readI16(v); });
  return v;
}

int8_t ThriftReader::i8(FieldType type, const char* what) {
  expect(type, FieldType::kByte, what);
  int8_t v = 0;
  guarded([&] { return impl_->proto.readByte(v); });
  return v;
}

bool ThriftReader::boolean(FieldType type, const char* what) {
  // In the compact protocol a bool field's value is carried in its wire type (1 true, 2 false);
  // libthrift reports both as T_BOOL.
  expect(type, FieldType::kBool, what);
  bool v = false;
  guarded([&] { return impl_->proto.readBool(v); });
  return v;
}

std::string ThriftReader::string(FieldType type, const char* what) {
  expect(type, FieldType::kString, what);
  return element_string();
}

int32_t ThriftReader::element_i32() {
  int32_t v = 0;
  guarded([&] { return impl_->proto.readI32(v); });
  return v;
}

std::string ThriftReader::element_string() {
  std::string v;
  guarded([&] { return impl_->proto.readBinary(v); });
  return v;
}

size_t ThriftReader::consumed() const { return impl_->size - impl_->buffer->available_read(); }

}  // namespace trellis::rollout::parquet
