// JSON helpers: parse with a clear error, and typed field access that names the missing or
// mistyped field and the document it belongs to.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace trellis {

using Json = nlohmann::json;

// Parses `text`; on a syntax error throws Error naming `where` and the byte offset.
Json parse_json(std::string_view text, const std::string& where);
// Reads and parses a JSON file.
Json read_json_file(const std::string& path);
// Compact JSON text in which bytes that are not valid UTF-8 (a token may hold part of a character)
// become U+FFFD, as Hugging Face decoders do: what goes out on the wire and into JSONL files.
std::string json_text(const Json& j);
// `text` as it reads back from json_text: invalid UTF-8 replaced the same way. Score or hash this
// form of model output, so that what a JSONL file records is exactly what was judged.
std::string json_safe_text(std::string_view text);

// Whether `j` is an integer in [lo, hi]. (nlohmann keeps non-negative integers as unsigned and
// negative ones as signed; both are checked against the same bounds.)
bool json_integer_in(const Json& j, int64_t lo, int64_t hi);

// The value of a required field, converted to T. Throws Error("missing field 'key'", where) or
// Error("field 'key' must be <type>", where).
template <typename T>
T json_required(const Json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) fail(where, "missing field '{}'", key);
  try {
    return obj.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(where, "field '{}' has the wrong type ({})", key, obj.at(key).type_name());
  }
}

// The value of an optional field, or `fallback` when absent or null.
template <typename T>
T json_optional(const Json& obj, const char* key, T fallback, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj.at(key).is_null()) return fallback;
  return json_required<T>(obj, key, where);
}

}  // namespace trellis
