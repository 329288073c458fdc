// Tests for model/safetensors: bit-exact round trips (single file and sharded), the byte layout
// checked by hand in both directions, one test per kind of corrupt input, and stale-shard cleanup.
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>
#include <set>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"

namespace trellis::model {
namespace {

namespace fs = std::filesystem;

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() /
           ("trellis_safetensors_test_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

// Owns the bytes of one tensor to write.
struct OwnedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;

  TensorData view() const { return {name, dtype, shape, bytes}; }
};

std::vector<TensorData> views(const std::vector<OwnedTensor>& ts) {
  std::vector<TensorData> out;
  for (const auto& t : ts) out.push_back(t.view());
  return out;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Random bit patterns, with the special values of the float format mixed in up front: NaNs with
// payloads (quiet and signalling), infinities, denormals and negative zero.
std::vector<std::byte> random_bits(DType dtype, int64_t numel, std::mt19937_64& rng) {
  std::vector<uint64_t> specials;
  switch (dtype) {
    case DType::F32:
      specials = {0x7fc00001, 0xffc12345, 0x7f800001, 0x7f800000, 0xff800000,
                  0x00000001, 0x807fffff, 0x80000000, 0x7f7fffff};
      break;
    case DType::F16:
      specials = {0x7e01, 0xfd55, 0x7c01, 0x7c00, 0xfc00, 0x0001, 0x83ff, 0x8000, 0x7bff};
      break;
    case DType::BF16:
      specials = {0x7fc1, 0xffa5, 0x7f81, 0x7f80, 0xff80, 0x0001, 0x807f, 0x8000, 0x7f7f};
      break;
    default:
      break;
  }
  const size_t size = dtype_size(dtype);
  std::vector<std::byte> out(static_cast<size_t>(numel) * size);
  for (int64_t i = 0; i < numel; ++i) {
    uint64_t v = i < static_cast<int64_t>(specials.size()) ? specials[i] : rng();
    for (size_t b = 0; b < size; ++b) out[i * size + b] = static_cast<std::byte>(v >> (8 * b));
  }
  return out;
}

std::vector<OwnedTensor> random_tensors(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::vector<std::vector<int64_t>> shapes = {{},     {0},       {3, 0, 2},     {7},
                                                    {4, 5}, {2, 3, 4}, {1, 1, 1, 17}, {33}};
  std::vector<OwnedTensor> out;
  for (DType dtype : {DType::F32, DType::F16, DType::BF16}) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::string name = fmt::format("layers.{}.{}.weight", i, dtype_name(dtype));
      out.push_back({name, dtype, shapes[i], random_bits(dtype, numel_of(shapes[i]), rng)});
    }
  }
  return out;
}

std::vector<std::byte> to_vec(std::span<const std::byte> s) { return {s.begin(), s.end()}; }

void expect_same(const SafetensorsModel& model, const std::vector<OwnedTensor>& expected) {
  std::vector<std::string> names;
  for (const auto& t : expected) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(model.names(), names);
  for (const auto& t : expected) {
    const TensorInfo* info = model.find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->name, t.name);
    EXPECT_EQ(info->dtype, t.dtype) << t.name;
    EXPECT_EQ(info->shape, t.shape) << t.name;
    EXPECT_EQ(info->numel(), numel_of(t.shape)) << t.name;
    EXPECT_EQ(to_vec(model.data(t.name)), t.bytes) << t.name;
  }
}

void write_raw(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

std::string le64(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// A safetensors file built by hand: length, header text as given, data.
std::string hand_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// Opens `path` expecting an Error whose message contains every one of `parts`.
void expect_open_error(const fs::path& path, std::initializer_list<std::string> parts) {
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "expected an Error opening " << path;
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nlacks: " << p;
  }
}

void expect_dir_error(const fs::path& dir, std::initializer_list<std::string> parts) {
  try {
    SafetensorsModel::open_dir(dir);
    ADD_FAILURE() << "expected an Error opening " << dir;
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nlacks: " << p;
  }
}

std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// ---- dtypes ----

TEST_F(Safetensors, DTypeNamesAndSizes) {
  const std::vector<std::pair<std::string, size_t>> expected = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},     {"I32", 4},
      {"I16", 2}, {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (const auto& [name, size] : expected) {
    DType d = parse_dtype(name, "here");
    EXPECT_EQ(dtype_name(d), name);
    EXPECT_EQ(dtype_size(d), size) << name;
  }
  try {
    parse_dtype("F4", "somewhere.safetensors");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dtype 'F4'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("somewhere.safetensors"), std::string::npos);
  }
}

// ---- round trips ----

TEST_F(Safetensors, RoundTripBitExactUnsharded) {
  const auto tensors = random_tensors(1);
  write_safetensors_dir(dir_, views(tensors));
  EXPECT_EQ(listing(dir_), std::set<std::string>{"model.safetensors"});
  SafetensorsModel model = SafetensorsModel::open_dir(dir_);
  expect_same(model, tensors);
  EXPECT_EQ(model.file_of(tensors[0].name), (dir_ / "model.safetensors").string());

  SafetensorsFile file = SafetensorsFile::open(dir_ / "model.safetensors");
  EXPECT_EQ(file.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (size_t i = 1; i < file.tensors().size(); ++i) {
    EXPECT_LE(file.tensors()[i - 1].end, file.tensors()[i].begin) << "not in file order";
  }
}

TEST_F(Safetensors, RoundTripSingleFileAndMetadata) {
  const auto tensors = random_tensors(2);
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"step", "17"}, {"note", "ünïcode \"quoted\"\n"}, {"", "empty key"}};
  write_safetensors(dir_ / "sub" / "one.safetensors", views(tensors), metadata);
  SafetensorsFile file = SafetensorsFile::open(dir_ / "sub" / "one.safetensors");
  EXPECT_EQ(file.metadata(), metadata);
  for (const auto& t : tensors) {
    const TensorInfo* info = file.find(t.name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(to_vec(file.data(*info)), t.bytes) << t.name;
  }
  EXPECT_EQ(file.find("absent"), nullptr);
  // open_dir also takes a single file.
  expect_same(SafetensorsModel::open_dir(dir_ / "sub" / "one.safetensors"), tensors);

  // No metadata: no __metadata__ entry at all.
  write_safetensors(dir_ / "plain.safetensors", views(tensors));
  EXPECT_TRUE(SafetensorsFile::open(dir_ / "plain.safetensors").metadata().empty());
  const std::string raw = read_file(dir_ / "plain.safetensors");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(raw[i])) << (8 * i);
  EXPECT_FALSE(Json::parse(raw.substr(8, n)).contains("__metadata__"));
}

TEST_F(Safetensors, RoundTripShardedBitExact) {
  const auto tensors = random_tensors(3);
  write_safetensors_dir(dir_, views(tensors), /*max_shard_bytes=*/128,
                        {{"format", "pt"}, {"origin", "test"}});
  const Json index = read_json_file((dir_ / "model.safetensors.index.json").string());
  std::set<std::string> shards;
  for (const auto& [name, shard] : index.at("weight_map").items()) shards.insert(shard);
  ASSERT_GE(shards.size(), 3u);
  const std::string n = fmt::format("{:05d}", shards.size());
  for (const auto& s : shards) {
    EXPECT_TRUE(s.starts_with("model-") && s.ends_with("-of-" + n + ".safetensors")) << s;
    EXPECT_EQ(SafetensorsFile::open(dir_ / s).metadata().at("origin"), "test");
  }
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors"));

  uint64_t total = 0;
  for (const auto& t : tensors) total += t.bytes.size();
  EXPECT_EQ(index.at("metadata").at("total_size").get<uint64_t>(), total);
  EXPECT_EQ(index.at("weight_map").size(), tensors.size());

  SafetensorsModel model = SafetensorsModel::open_dir(dir_);
  EXPECT_EQ(model.files().size(), shards.size());
  expect_same(model, tensors);
  for (const auto& t : tensors) {
    EXPECT_EQ(model.file_of(t.name),
              (dir_ / index.at("weight_map").at(t.name).get<std::string>()).string());
  }
}

TEST_F(Safetensors, ShardingFollowsGivenOrderAndLimit) {
  // Byte sizes 100, 100, 300 (over the limit), 40, 200, 0 with a 256-byte limit.
  std::mt19937_64 rng(4);
  auto f32 = [&](const std::string& name, int64_t n) {
    return OwnedTensor{name, DType::F32, {n}, random_bits(DType::F32, n, rng)};
  };
  const std::vector<OwnedTensor> tensors = {f32("z.a", 25), f32("y.b", 25), f32("x.big", 75),
                                            f32("w.d", 10), f32("v.e", 50), f32("u.empty", 0)};
  write_safetensors_dir(dir_, views(tensors), 256);
  const Json expected = {{"metadata", {{"total_size", 740}}},
                         {"weight_map",
                          {{"z.a", "model-00001-of-00003.safetensors"},
                           {"y.b", "model-00001-of-00003.safetensors"},
                           {"x.big", "model-00002-of-00003.safetensors"},
                           {"w.d", "model-00003-of-00003.safetensors"},
                           {"v.e", "model-00003-of-00003.safetensors"},
                           {"u.empty", "model-00003-of-00003.safetensors"}}}};
  EXPECT_EQ(read_json_file((dir_ / "model.safetensors.index.json").string()), expected);
  EXPECT_EQ(
      listing(dir_),
      (std::set<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                             "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  EXPECT_EQ(SafetensorsFile::open(dir_ / "model-00002-of-00003.safetensors").tensors().size(), 1u);
  expect_same(SafetensorsModel::open_dir(dir_), tensors);

  // Exactly at the limit: one file.
  write_safetensors_dir(dir_, views(tensors), 740);
  EXPECT_EQ(listing(dir_), std::set<std::string>{"model.safetensors"});
}

// ---- byte layout, checked independently of the reader ----

TEST_F(Safetensors, ReadsHandBuiltFile) {
  // Keys out of offset order, header padded with spaces to an odd length.
  const std::string header = R"({"b":{"dtype":"I32","shape":[2],"data_offsets":[4,12]},)"
                             R"("__metadata__":{"k":"v"},)"
                             R"("a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                             R"("c":{"dtype":"BOOL","shape":[],"data_offsets":[3,4]},)"
                             R"("e":{"dtype":"F64","shape":[0,4],"data_offsets":[12,12]}}   )";
  std::string data = "\x01\x02\x03\x01";
  data += le64(0x0000000200000001ull).substr(0, 4) + std::string("\xff\xff\xff\xff", 4);
  write_raw(dir_ / "hand.safetensors", hand_file(header, data));

  SafetensorsFile f = SafetensorsFile::open(dir_ / "hand.safetensors");
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensors()[0].name, "a");
  EXPECT_EQ(f.tensors()[1].name, "c");
  EXPECT_EQ(f.tensors()[2].name, "b");
  EXPECT_EQ(f.tensors()[3].name, "e");
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"k", "v"}}));
  const TensorInfo* b = f.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::I32);
  EXPECT_EQ(b->shape, std::vector<int64_t>{2});
  int32_t values[2];
  ASSERT_EQ(f.data(*b).size(), sizeof values);
  std::memcpy(values, f.data(*b).data(), sizeof values);
  EXPECT_EQ(values[0], 1);
  EXPECT_EQ(values[1], -1);
  EXPECT_EQ(to_vec(f.data(*f.find("a"))),
            (std::vector<std::byte>{std::byte{1}, std::byte{2}, std::byte{3}}));
  EXPECT_EQ(f.find("c")->numel(), 1);
  EXPECT_EQ(f.find("e")->numel(), 0);
  EXPECT_TRUE(f.data(*f.find("e")).empty());
}

TEST_F(Safetensors, WrittenLayoutParsesByHand) {
  std::mt19937_64 rng(5);
  // Mixed element sizes in an order that would misalign them if written as given.
  const std::vector<OwnedTensor> tensors = {
      {"u8", DType::U8, {3}, random_bits(DType::U8, 3, rng)},
      {"f16", DType::F16, {1}, random_bits(DType::F16, 1, rng)},
      {"f32", DType::F32, {2, 3}, random_bits(DType::F32, 6, rng)},
      {"f64", DType::F64, {5}, random_bits(DType::F64, 5, rng)},
      {"bf16", DType::BF16, {3}, random_bits(DType::BF16, 3, rng)},
      {"i64", DType::I64, {}, random_bits(DType::I64, 1, rng)},
  };
  const fs::path path = dir_ / "layout.safetensors";
  write_safetensors(path, views(tensors), {{"format", "pt"}});
  const std::string raw = read_file(path);

  ASSERT_GE(raw.size(), 8u);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(raw[i])) << (8 * i);
  ASSERT_LE(8 + n, raw.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "data region must start 8-byte aligned";
  const std::string text = raw.substr(8, n);
  EXPECT_EQ(text.front(), '{');
  const size_t last = text.find_last_not_of(' ');
  EXPECT_EQ(text[last], '}');
  EXPECT_LT(text.size() - last - 1, 8u) << "padding is only to the next multiple of 8";
  const Json header = Json::parse(text);
  EXPECT_EQ(header.at("__metadata__"), Json({{"format", "pt"}}));
  EXPECT_EQ(header.size(), tensors.size() + 1);

  uint64_t total = 0;
  for (const auto& t : tensors) {
    const Json& e = header.at(t.name);
    EXPECT_EQ(e.at("dtype").get<std::string>(), dtype_name(t.dtype));
    EXPECT_EQ(e.at("shape").get<std::vector<int64_t>>(), t.shape);
    const uint64_t begin = e.at("data_offsets")[0].get<uint64_t>();
    const uint64_t end = e.at("data_offsets")[1].get<uint64_t>();
    ASSERT_EQ(end - begin, t.bytes.size());
    EXPECT_EQ(begin % dtype_size(t.dtype), 0u) << t.name << " misaligned";
    ASSERT_LE(8 + n + end, raw.size());
    EXPECT_EQ(std::memcmp(raw.data() + 8 + n + begin, t.bytes.data(), t.bytes.size()), 0) << t.name;
    total += t.bytes.size();
  }
  EXPECT_EQ(raw.size(), 8 + n + total) << "tensors are packed without gaps";
}

// ---- corrupt input ----

TEST_F(Safetensors, RejectsFileShorterThanLengthField) {
  const fs::path p = dir_ / "short.safetensors";
  write_raw(p, "\x05\x00\x00");
  expect_open_error(p, {"too short", p.string()});
  write_raw(p, "");
  expect_open_error(p, {"too short", p.string()});
}

TEST_F(Safetensors, RejectsHeaderLongerThanFile) {
  const fs::path p = dir_ / "trunc.safetensors";
  write_raw(p, le64(100) + "{}");
  expect_open_error(p, {"truncated file", "header length 100", p.string()});
  write_raw(p, le64(~0ull) + "{}");  // would overflow 8 + N
  expect_open_error(p, {"truncated file", p.string()});
}

TEST_F(Safetensors, RejectsTruncatedData) {
  std::mt19937_64 rng(6);
  const OwnedTensor t{"w", DType::F32, {4, 4}, random_bits(DType::F32, 16, rng)};
  const fs::path p = dir_ / "model.safetensors";
  write_safetensors(p, {t.view()});
  const uint64_t size = fs::file_size(p);
  fs::resize_file(p, size - 1);
  expect_open_error(p, {"out of range", "truncated", "tensor 'w'", p.string()});
  // Every truncation is an Error, never a crash or a short read.
  const std::string full = hand_file(R"({"w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}})",
                                     std::string(64, 'x'));
  for (size_t len = 0; len < full.size(); ++len) {
    write_raw(p, full.substr(0, len));
    EXPECT_THROW(SafetensorsFile::open(p), Error) << "length " << len;
  }
}

TEST_F(Safetensors, RejectsOffsetsOutOfRange) {
  const fs::path p = dir_ / "range.safetensors";
  write_raw(p, hand_file(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[100,104]}})",
                         std::string(8, '\0')));
  expect_open_error(p, {"out of range", "tensor 'w'", p.string()});
  write_raw(
      p,
      hand_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,0]}})", ""));
  expect_open_error(p, {"begin > end", p.string()});
}

TEST_F(Safetensors, RejectsUnknownDtype) {
  const fs::path p = dir_ / "dtype.safetensors";
  write_raw(p, hand_file(R"({"w":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}})", "x"));
  expect_open_error(p, {"unknown dtype 'Q4_K'", "tensor 'w'", p.string()});
}

TEST_F(Safetensors, RejectsLengthMismatch) {
  const fs::path p = dir_ / "len.safetensors";
  write_raw(p, hand_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                         std::string(16, '\0')));
  expect_open_error(p, {"length mismatch", "need 12", "tensor 'w'", p.string()});
}

TEST_F(Safetensors, RejectsOverlappingTensors) {
  const fs::path p = dir_ / "overlap.safetensors";
  write_raw(p, hand_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         std::string(12, '\0')));
  expect_open_error(p, {"overlapping tensors 'a'", "'b'", p.string()});
  // Same range twice.
  write_raw(p, hand_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
                         std::string(8, '\0')));
  expect_open_error(p, {"overlapping", p.string()});
  // Nested inside a larger tensor, after a small one.
  write_raw(p, hand_file(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                         R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
                         R"("c":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})",
                         std::string(16, '\0')));
  expect_open_error(p, {"overlapping", p.string()});
}

TEST_F(Safetensors, RejectsNonJsonHeader) {
  const fs::path p = dir_ / "json.safetensors";
  write_raw(p, hand_file("this is not json", ""));
  expect_open_error(p, {"not valid JSON", p.string()});
  write_raw(p, hand_file("{\"a\": \"\xff\xfe\"}", ""));  // invalid UTF-8
  expect_open_error(p, {"not valid JSON", p.string()});
  write_raw(p, hand_file(R"([1, 2, 3])", ""));
  expect_open_error(p, {"not an object", p.string()});
  write_raw(p, hand_file(R"({"w": 5})", ""));
  expect_open_error(p, {"must be an object", "tensor 'w'", p.string()});
}

TEST_F(Safetensors, RejectsMissingOrMistypedFields) {
  const fs::path p = dir_ / "fields.safetensors";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "missing field 'dtype'"},
      {R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", "missing field 'shape'"},
      {R"({"w":{"dtype":"U8","shape":[1]}})", "missing field 'data_offsets'"},
      {R"({"w":{"dtype":5,"shape":[1],"data_offsets":[0,1]}})", "field 'dtype' has the wrong type"},
      {R"({"w":{"dtype":"U8","shape":"1","data_offsets":[0,1]}})", "field 'shape' must be"},
      {R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "field 'shape' must be"},
      {R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "[begin, end]"},
      {R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "[begin, end]"},
      {R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "[begin, end]"},
      {R"({"w":{"dtype":"U8","shape":[1],"data_offsets":"0,1"}})", "[begin, end]"},
      {R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}})", "begin > end"},
  };
  for (const auto& [header, problem] : cases) {
    SCOPED_TRACE(header);
    write_raw(p, hand_file(header, "xx"));
    expect_open_error(p, {problem, "tensor 'w'", p.string()});
  }
}

TEST_F(Safetensors, RejectsNegativeDimsAndShapeOverflow) {
  const fs::path p = dir_ / "shape.safetensors";
  write_raw(p, hand_file(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", ""));
  expect_open_error(p, {"negative dimension -1", "tensor 'w'", p.string()});
  write_raw(p, hand_file(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],)"
                         R"("data_offsets":[0,0]}})",
                         ""));
  expect_open_error(p, {"overflows", "tensor 'w'", p.string()});
  // numel fits in int64 but numel * 8 bytes does not.
  write_raw(p, hand_file(R"({"w":{"dtype":"F64","shape":[4611686018427387904],)"
                         R"("data_offsets":[0,0]}})",
                         ""));
  expect_open_error(p, {"overflows", p.string()});
  write_raw(p, hand_file(R"({"w":{"dtype":"U8","shape":[18446744073709551615],)"
                         R"("data_offsets":[0,0]}})",
                         ""));
  expect_open_error(p, {"too large", p.string()});
}

TEST_F(Safetensors, RejectsDuplicateNamesAndBadMetadata) {
  const fs::path p = dir_ / "dup.safetensors";
  write_raw(p, hand_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                         R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                         "xy"));
  expect_open_error(p, {"duplicate tensor name 'w'", p.string()});
  write_raw(p, hand_file(R"({"__metadata__":{"step":3}})", ""));
  expect_open_error(p, {"__metadata__", "must be a string", p.string()});
  write_raw(p, hand_file(R"({"__metadata__":[]})", ""));
  expect_open_error(p, {"__metadata__", p.string()});
}

// ---- budgets and fuzzer findings (fuzz/safetensors_fuzz.cpp) ----

TEST_F(Safetensors, RefusesHeaderOverTheSizeLimit) {
  const fs::path p = dir_ / "huge.safetensors";
  write_raw(p, le64(kMaxSafetensorsHeaderBytes + 1));
  fs::resize_file(p, 8 + kMaxSafetensorsHeaderBytes + 1);  // sparse: nothing is written
  expect_open_error(p, {"header length 100000001 is larger than the limit", p.string()});
}

TEST_F(Safetensors, RefusesMoreTensorsThanTheLimit) {
  // Refused while the header is parsed: entries that are not even tensors are counted.
  std::string header = "{";
  for (size_t i = 0; i <= kMaxSafetensorsTensors; ++i) header += fmt::format("\"t{}\":0,", i);
  header.back() = '}';
  const fs::path p = dir_ / "many.safetensors";
  write_raw(p, hand_file(header, ""));
  expect_open_error(p, {"more than 262144 tensors", p.string()});
}

TEST_F(Safetensors, RefusesNumbersTooLargeForADouble) {
  const fs::path p = dir_ / "big_number.safetensors";
  write_raw(p, hand_file(R"({"w":{"dtype":"U8","shape":[1e400],"data_offsets":[0,1]}})", "x"));
  expect_open_error(p, {"not valid JSON", "too large", p.string()});
}

// Found by fuzz/safetensors_fuzz.cpp: the error message printed the nested value with dump(),
// which recursed once a level and overflowed the stack.
TEST_F(Safetensors, RefusesDeeplyNestedHeaders) {
  const fs::path p = dir_ / "deep.safetensors";
  const std::string deep = std::string(30000, '[') + std::string(30000, ']');
  write_raw(p, hand_file(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":)" + deep + "}}", "x"));
  expect_open_error(p, {"nested deeper than 128 levels", p.string()});
}

TEST_F(Safetensors, ParsesAHeaderInMemoryAsOpenDoes) {
  const std::string file =
      hand_file(R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]},)"
                R"("a":{"dtype":"U8","shape":[],"data_offsets":[0,1]},"__metadata__":{"k":"v"}})",
                "xyz");
  const SafetensorsHeader h = parse_safetensors_header(
      std::as_bytes(std::span<const char>(file.data(), file.size())), "mem");
  EXPECT_EQ(h.data_start, file.size() - 3);
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "a");  // by offset
  EXPECT_EQ(h.tensors[1].end, 3u);
  EXPECT_EQ(h.metadata.at("k"), "v");
}

TEST_F(Safetensors, RandomHeaderCorruptionNeverCrashes) {
  std::mt19937_64 rng(7);
  const auto tensors = random_tensors(8);
  const fs::path good = dir_ / "good.safetensors";
  write_safetensors(good, views(tensors), {{"format", "pt"}});
  const std::string raw = read_file(good);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(raw[i])) << (8 * i);
  const fs::path p = dir_ / "bad.safetensors";
  const std::string alphabet = "0123456789[]{},:\"- ";
  int errors = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::string bad = raw;
    for (int k = 0; k < 3; ++k) {
      size_t pos = 8 + rng() % n;
      bad[pos] = alphabet[rng() % alphabet.size()];
    }
    write_raw(p, bad);
    try {
      SafetensorsFile f = SafetensorsFile::open(p);
      for (const auto& t : f.tensors()) {
        EXPECT_EQ(f.data(t).size(), t.end - t.begin);  // in bounds by construction
      }
    } catch (const Error& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos) << e.what();
    }
  }
  EXPECT_GT(errors, 0);
}

// ---- model directories ----

TEST_F(Safetensors, DirErrorsNameTheProblem) {
  expect_dir_error(dir_ / "nope", {"not found", (dir_ / "nope").string()});
  expect_dir_error(dir_, {"no model.safetensors or model.safetensors.index.json", dir_.string()});

  const fs::path index = dir_ / "model.safetensors.index.json";
  write_raw(index, "{not json");
  expect_dir_error(dir_, {"invalid JSON", index.string()});
  write_raw(index, R"({"metadata": {}})");
  expect_dir_error(dir_, {"missing field 'weight_map'", index.string()});
  write_raw(index, R"({"weight_map": ["a"]})");
  expect_dir_error(dir_, {"'weight_map' must be an object", index.string()});
  write_raw(index, R"({"weight_map": {"a": "../escape.safetensors"}})");
  expect_dir_error(dir_, {"not a plain file name", index.string()});
}

TEST_F(Safetensors, DirRejectsMissingShardAndMissingTensor) {
  std::mt19937_64 rng(9);
  const OwnedTensor a{"a", DType::F32, {8}, random_bits(DType::F32, 8, rng)};
  const OwnedTensor b{"b", DType::F32, {8}, random_bits(DType::F32, 8, rng)};
  write_safetensors_dir(dir_, {a.view(), b.view()}, 32);
  expect_same(SafetensorsModel::open_dir(dir_), {a, b});

  const fs::path shard2 = dir_ / "model-00002-of-00002.safetensors";
  fs::remove(shard2);
  expect_dir_error(dir_, {"missing shard", "model-00002-of-00002.safetensors", "tensor 'b'",
                          "model.safetensors.index.json"});

  // The shard exists but lacks the tensor the index promises.
  write_safetensors(shard2, {a.view()});
  expect_dir_error(dir_, {"tensor 'b'", "missing from this shard", shard2.string()});
}

TEST_F(Safetensors, ModelLookupErrorsNameTensorAndDir) {
  std::mt19937_64 rng(10);
  const OwnedTensor a{"a", DType::BF16, {2}, random_bits(DType::BF16, 2, rng)};
  write_safetensors_dir(dir_, {a.view()});
  SafetensorsModel model = SafetensorsModel::open_dir(dir_);
  EXPECT_EQ(model.find("zzz"), nullptr);
  try {
    model.data("zzz");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'zzz' not found"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(dir_.string()), std::string::npos);
  }
  EXPECT_THROW(model.file_of("zzz"), Error);
}

// ---- writing ----

TEST_F(Safetensors, WriteRejectsBadInputAndWritesNothing) {
  std::vector<std::byte> bytes(12);
  const TensorData ok{"a", DType::F32, {3}, bytes};
  const auto expect_write_error = [&](const std::vector<TensorData>& ts, const std::string& what) {
    try {
      write_safetensors_dir(dir_ / "out", ts);
      ADD_FAILURE() << "expected an Error: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
    EXPECT_THROW(write_safetensors(dir_ / "out.safetensors", ts), Error);
  };
  expect_write_error({ok, ok}, "duplicate tensor name 'a'");
  expect_write_error({{"b", DType::F32, {4}, bytes}}, "need 16");
  expect_write_error({{"b", DType::F16, {3}, bytes}}, "need 6");
  expect_write_error({{"b", DType::U8, {-12}, bytes}}, "negative dimension");
  expect_write_error({{"", DType::F32, {3}, bytes}}, "empty name");
  expect_write_error({{"__metadata__", DType::F32, {3}, bytes}}, "reserved");
  EXPECT_FALSE(fs::exists(dir_ / "out"));
  EXPECT_FALSE(fs::exists(dir_ / "out.safetensors"));
}

TEST_F(Safetensors, RewriteRemovesStaleFiles) {
  const auto tensors = random_tensors(11);
  write_raw(dir_ / "config.json", "{}");
  write_raw(dir_ / "model-extra.safetensors", "unrelated");  // not a shard name: kept

  write_safetensors_dir(dir_, views(tensors), 128);  // many shards
  const size_t many = listing(dir_).size() - 3;
  ASSERT_GE(many, 3u);

  write_safetensors_dir(dir_, views(tensors), 1024);  // fewer shards
  std::set<std::string> files = listing(dir_);
  EXPECT_LT(files.size() - 3, many);
  for (const auto& f : files) {
    if (f.starts_with("model-0")) {
      EXPECT_NE(f.find(fmt::format("-of-{:05d}", files.size() - 3)), std::string::npos) << f;
    }
  }
  expect_same(SafetensorsModel::open_dir(dir_), tensors);

  write_safetensors_dir(dir_, views(tensors));  // unsharded
  EXPECT_EQ(listing(dir_),
            (std::set<std::string>{"config.json", "model-extra.safetensors", "model.safetensors"}));
  expect_same(SafetensorsModel::open_dir(dir_), tensors);

  write_safetensors_dir(dir_, views(tensors), 128);  // and back to sharded
  files = listing(dir_);
  EXPECT_EQ(files.count("model.safetensors"), 0u);
  EXPECT_EQ(files.count("model.safetensors.index.json"), 1u);
  expect_same(SafetensorsModel::open_dir(dir_), tensors);
}

}  // namespace
}  // namespace trellis::model
