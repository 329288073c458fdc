// libFuzzer target for SHARDCAST weight deltas (shardcast/weight_delta.h). The first byte picks:
//   even: the rest is a delta file, applied to a fixed 4 KiB base (apply_delta); it must fail
//   with
//         a trellis::Error or write exactly the target its tensor hash names;
//   odd:  the rest (cut or zero-padded to 4 KiB) is a new version of the base: make_delta, then
//         apply_delta, must give back those bytes.
// scripts/fuzz.sh builds and runs it; fuzz/corpus/delta/ holds the seeds (a delta from the base to
// the target below, written by `trellis shardcast publish`).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/files.h"
#include "common/hashing.h"
#include "shardcast/weight_delta.h"

namespace {

using namespace trellis::shardcast;

class Bytes : public WeightSource {
 public:
  explicit Bytes(std::string data) : data_(std::move(data)) {}
  int64_t size() const override { return static_cast<int64_t>(data_.size()); }
  void read(int64_t offset, std::span<char> out) const override {
    std::memcpy(out.data(), data_.data() + offset, out.size());
  }

 private:
  std::string data_;
};

constexpr size_t kSize = 4096;

// base[i] = (37 i + 11) mod 251; the target adds 1 + i mod 3 to byte 97 i mod 4096, i < 40.
std::string base_bytes() {
  std::string b(kSize, '\0');
  for (size_t i = 0; i < kSize; ++i) b[i] = static_cast<char>((37 * i + 11) % 251);
  return b;
}

std::string target_bytes() {
  std::string t = base_bytes();
  for (size_t i = 0; i < 40; ++i)
    t[(97 * i) % kSize] = static_cast<char>(t[(97 * i) % kSize] + 1 + i % 3);
  return t;
}

std::string read_back(const std::string& path) {
  try {
    return trellis::read_file(path);
  } catch (const trellis::Error&) {
    return {};
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Bytes base(base_bytes());
  static const std::string target = target_bytes();
  static const std::string out = "delta_fuzz_out." + std::to_string(::getpid());
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  ::unlink(out.c_str());
  if (data[0] % 2 == 0) {
    const std::vector<TensorHash> tensors = {
        {"__file__", 0, static_cast<int64_t>(kSize), trellis::sha256_hex(target)}};
    try {
      FileSink sink(out);
      apply_delta(base, rest, tensors, sink, "fuzz input");
    } catch (const trellis::Error&) {
      if (::access(out.c_str(), F_OK) == 0) __builtin_trap();  // no result after an error
      return 0;
    }
    if (read_back(out) != target) __builtin_trap();
    return 0;
  }
  std::string next(rest.substr(0, kSize));
  next.resize(kSize, '\0');
  const Bytes version(next);
  const std::string delta = out + ".delta";
  const auto stats = make_delta(base, version, weight_regions(version), delta);
  if (!stats) __builtin_trap();
  {
    FileSink sink(out);
    apply_delta(base, read_back(delta), hash_regions(version, weight_regions(version)), sink,
                "round trip");
  }
  if (read_back(out) != next) __builtin_trap();
  ::unlink(delta.c_str());
  return 0;
}
