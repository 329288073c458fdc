// JSON helpers: parse with a clear error, and typed field access that names the missing or
// mistyped field and the document it belongs to.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace trellis {

using Json = nlohmann::json;

// Arrays and objects nested deeper than this are refused: nlohmann's dump() recurses once a level,
// so a deep enough document would overflow the stack of whoever prints it.
inline constexpr int kMaxJsonDepth = 128;

// Parses `text`; on a syntax error throws Error naming `where` and the byte offset. Error too for
// nesting deeper than kMaxJsonDepth and numbers too large for a double.
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

// Whether `j` is a number that integer type T holds exactly: an integer in T's range, or a float
// with an integral value in T's range (4096.0). nlohmann's own conversion wraps integers and is
// undefined behaviour for floats out of range.
template <typename T>
bool json_fits_integer(const Json& j) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  using Limits = std::numeric_limits<T>;
  if (j.is_number_unsigned()) return j.get<uint64_t>() <= static_cast<uint64_t>(Limits::max());
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return Limits::is_signed && v >= static_cast<int64_t>(Limits::min());
    return static_cast<uint64_t>(v) <= static_cast<uint64_t>(Limits::max());
  }
  if (j.is_number_float()) {
    const double d = j.get<double>();
    // [min, 2^digits): both bounds are exact doubles.
    return std::trunc(d) == d && d >= static_cast<double>(Limits::min()) &&
           d < std::ldexp(1.0, Limits::digits);
  }
  return false;
}

namespace detail {

template <typename T>
struct IntegerVector : std::false_type {};
template <typename U>
struct IntegerVector<std::vector<U>>
    : std::bool_constant<std::is_integral_v<U> && !std::is_same_v<U, bool>> {};

}  // namespace detail

// The value of a required field, converted to T. Throws Error("missing field 'key'", where) or
// Error("field 'key' must be <type>", where). An integer T (or a vector of them) takes only numbers
// it holds exactly: Error("field 'key' ... out of range") otherwise.
template <typename T>
T json_required(const Json& obj, const char* key, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) fail(where, "missing field '{}'", key);
  const Json& v = obj.at(key);
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (v.is_number() && !json_fits_integer<T>(v)) {
      fail(where, "field '{}' = {} is not an integer in range", key, v.dump());
    }
  } else if constexpr (detail::IntegerVector<T>::value) {
    if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i].is_number() && !json_fits_integer<typename T::value_type>(v[i])) {
          fail(where, "field '{}': element {} = {} is not an integer in range", key, i,
               v[i].dump());
        }
      }
    }
  }
  try {
    return v.get<T>();
  } catch (const nlohmann::json::exception&) {
    fail(where, "field '{}' has the wrong type ({})", key, v.type_name());
  }
}

// The value of an optional field, or `fallback` when absent or null.
template <typename T>
T json_optional(const Json& obj, const char* key, T fallback, const std::string& where) {
  if (!obj.is_object() || !obj.contains(key) || obj.at(key).is_null()) return fallback;
  return json_required<T>(obj, key, where);
}

}  // namespace trellis
