// Plain Python values (see python_values.h): checking the encoding and putting it in canonical
// form.
//
// Canonical forms: numbers by value (bool as 0/1; an integral finite float as its exact integer
// digits; other floats as "F:" and their shortest round-trip text), "N" for None, strings "S" +
// byte length + ":" + bytes, "L[...]" and "T[...]" for lists and tuples, "E[...]" for sets (sorted,
// duplicates merged) and "D[...]" for dicts (entries key=value sorted by key). Every part delimits
// itself, so equal forms mean equal values.
#include "env/verifiers/python_values.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "common/json.h"

namespace trellis::env {
namespace {

struct Malformed {
  std::string what;
};

// Whether JSON text nests brackets deeper than `limit` (strings skipped): checked before parsing.
bool nests_deeper_than(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

// "-0012" -> "-12", "-0" -> "0".
std::string normalized_integer(std::string_view digits) {
  const bool negative = digits.starts_with('-');
  if (negative) digits.remove_prefix(1);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) {
    throw Malformed{"an int is not decimal digits"};
  }
  const auto first = digits.find_first_not_of('0');
  if (first == std::string_view::npos) return "0";
  return (negative ? "-" : "") + std::string(digits.substr(first));
}

std::string canonical_float(const std::string& text) {
  if (text.empty() || text.find_first_of(" \t\n\r\f\v") != std::string::npos) {
    throw Malformed{"a float is not a number"};
  }
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) throw Malformed{"a float is not a number"};
  if (std::isnan(d)) return "F:nan";
  if (std::isinf(d)) return d > 0 ? "F:inf" : "F:-inf";
  // An integral float equals the int of the same value: both get that int's digits (exact).
  if (d == std::floor(d)) return normalized_integer(fmt::format("{:.0f}", d));
  return fmt::format("F:{}", d);
}

std::string canonical(const Json& value);

std::vector<std::string> canonical_items(const Json& items) {
  if (!items.is_array()) throw Malformed{"a list, tuple, set or dict holds no array"};
  std::vector<std::string> out;
  out.reserve(items.size());
  for (const Json& item : items) out.push_back(canonical(item));
  return out;
}

std::string joined(const char* open, const std::vector<std::string>& parts) {
  std::string out = open;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += ',';
    out += parts[i];
  }
  return out + "]";
}

std::string canonical(const Json& value) {
  if (value.is_null()) return "N";
  if (value.is_boolean()) return value.get<bool>() ? "1" : "0";
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    return fmt::format("S{}:{}", s.size(), s);
  }
  if (!value.is_object() || value.size() != 1) throw Malformed{"a value of unknown form"};
  // Through the object's own iterator: a structured binding to *value.items().begin() would
  // refer to a proxy that dies with the statement (ASan: stack-use-after-scope, found by fuzzing).
  const auto only = value.begin();
  const std::string& tag = only.key();
  const Json& body = only.value();
  if (tag == "int" || tag == "float") {
    if (!body.is_string()) throw Malformed{"a number is not given as text"};
    const auto& text = body.get_ref<const std::string&>();
    return tag == "int" ? normalized_integer(text) : canonical_float(text);
  }
  if (tag == "list") return joined("L[", canonical_items(body));
  if (tag == "tuple") return joined("T[", canonical_items(body));
  if (tag == "set") {
    auto items = canonical_items(body);
    std::sort(items.begin(), items.end());
    items.erase(std::unique(items.begin(), items.end()), items.end());
    return joined("E[", items);
  }
  if (tag == "dict") {
    if (!body.is_array()) throw Malformed{"a dict holds no array"};
    std::vector<std::pair<std::string, std::string>> entries;
    for (const Json& entry : body) {
      if (!entry.is_array() || entry.size() != 2) throw Malformed{"a dict entry is not a pair"};
      entries.emplace_back(canonical(entry[0]), canonical(entry[1]));
    }
    std::sort(entries.begin(), entries.end());
    std::vector<std::string> parts;
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i && entries[i].first == entries[i - 1].first) throw Malformed{"a dict repeats a key"};
      parts.push_back(entries[i].first + "=" + entries[i].second);
    }
    return joined("D[", parts);
  }
  throw Malformed{fmt::format("unknown type tag '{}'", tag.substr(0, 20))};
}

}  // namespace

std::optional<std::string> canonical_python_value(std::string_view encoded, std::string& error) {
  if (nests_deeper_than(encoded, kMaxPythonValueDepth)) {
    error = fmt::format("nested more than {} levels deep", kMaxPythonValueDepth);
    return std::nullopt;
  }
  const Json value = Json::parse(encoded, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    error = "not JSON";
    return std::nullopt;
  }
  try {
    return canonical(value);
  } catch (const Malformed& m) {
    error = m.what;
  } catch (const std::exception& e) {
    error = e.what();
  }
  return std::nullopt;
}

}  // namespace trellis::env
