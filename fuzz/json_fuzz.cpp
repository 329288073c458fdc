// libFuzzer target for JSON request bodies as the services read them: parse_json, then the typed
// field helpers (json_required, json_optional, json_integer_in) on every field of an object body,
// and json_text / json_safe_text. Anything but a trellis::Error is a bug. scripts/fuzz.sh builds
// and runs it; fuzz/corpus/json/ holds the seeds.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json.h"

namespace {

template <typename T>
void field(const trellis::Json& obj, const std::string& key) {
  try {
    (void)trellis::json_required<T>(obj, key.c_str(), "body");
  } catch (const trellis::Error&) {
  }
  try {
    (void)trellis::json_optional<T>(obj, key.c_str(), T{}, "body");
  } catch (const trellis::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using trellis::Json;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)trellis::json_safe_text(text);
  Json j;
  try {
    j = trellis::parse_json(text, "request body");
  } catch (const trellis::Error&) {
    return 0;
  }
  // What json_text writes always reads back (an Error here escapes and is reported as a crash).
  (void)trellis::parse_json(trellis::json_text(j), "json_text");
  if (!j.is_object()) return 0;
  for (const auto& [key, value] : j.items()) {
    (void)trellis::json_integer_in(value, -1000, 1000);
    (void)trellis::json_integer_in(value, 0, INT64_MAX);
    (void)trellis::json_integer_in(value, INT64_MIN, -1);
    field<std::string>(j, key);
    field<int64_t>(j, key);
    field<int32_t>(j, key);
    field<uint64_t>(j, key);
    field<double>(j, key);
    field<bool>(j, key);
    field<std::vector<std::string>>(j, key);
    field<std::vector<int64_t>>(j, key);
    field<std::map<std::string, std::string>>(j, key);
    field<Json>(j, key);
  }
  return 0;
}
