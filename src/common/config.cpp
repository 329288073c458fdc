#include "common/config.h"

#include <algorithm>
#include <sstream>

#include "common/error.h"
#include "common/files.h"

namespace trellis {
namespace {

// TOML allows characters beyond ASCII only in strings and comments; toml++ 3.3.0 reaches
// __builtin_unreachable (undefined behaviour) on some of them elsewhere (a bare U+039F, found by
// fuzz/config_fuzz.cpp), so such text is refused before toml++ sees it.
void refuse_non_ascii_outside_strings(std::string_view text, const std::string& where) {
  enum { kCode, kComment, kBasic, kLiteral, kMultiBasic, kMultiLiteral } state = kCode;
  int64_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool triple_quote = text.substr(i, 3) == "\"\"\"",
               triple_apostrophe = text.substr(i, 3) == "'''";
    if (c == '\n') {
      ++line;
      if (state != kMultiBasic && state != kMultiLiteral) state = kCode;  // comments end; a
      continue;  // single-line string that does not is toml++'s error to report
    }
    switch (state) {
      case kCode:
        if (static_cast<unsigned char>(c) >= 0x80) {
          throw Error(
              "a character beyond ASCII outside a string or comment (TOML allows them "
              "only there: quote the value)",
              fmt::format("{}:{}", where, line));
        }
        if (c == '#') state = kComment;
        if (triple_quote || triple_apostrophe) {
          state = triple_quote ? kMultiBasic : kMultiLiteral;
          i += 2;
        } else if (c == '"' || c == '\'') {
          state = c == '"' ? kBasic : kLiteral;
        }
        break;
      case kComment:
        break;
      case kBasic:
        if (c == '\\')
          ++i;  // an escape: the next character cannot end the string
        else if (c == '"')
          state = kCode;
        break;
      case kLiteral:
        if (c == '\'') state = kCode;
        break;
      case kMultiBasic:
        if (c == '\\') {
          // toml++ classifies the character after a backslash here, and the first one after a
          // line-ending backslash and its whitespace, with a function that is undefined
          // behaviour for most characters beyond ASCII (is_non_ascii_horizontal_whitespace;
          // found by fuzz/config_fuzz.cpp): refuse those.
          size_t next = i + 1;
          int64_t at_line = line;
          for (; next < text.size() &&
                 std::string_view(" \t\r\n").find(text[next]) != std::string_view::npos;
               ++next) {
            at_line += text[next] == '\n';
          }
          if (next < text.size() && static_cast<unsigned char>(text[next]) >= 0x80) {
            throw Error(
                "a character beyond ASCII right after a backslash (or a line-ending backslash "
                "and its whitespace) in a multi-line string: write it as \\uXXXX there",
                fmt::format("{}:{}", where, at_line));
          }
          ++i;
        } else if (triple_quote) {
          state = kCode;
          i += 2;
        }
        break;
      case kMultiLiteral:
        if (triple_apostrophe) {
          state = kCode;
          i += 2;
        }
        break;
    }
  }
}

// `text` with each character beyond ASCII (each UTF-8 lead byte; continuation bytes dropped)
// replaced by '?', which TOML allows only where those characters are allowed too: in strings and
// comments.
std::string ascii_stand_in(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x80) {
      out += c;
    } else if (b >= 0xc0) {
      out += '?';
    }
  }
  return out;
}

toml::table parse_toml(std::string_view text, const std::string& where) {
  refuse_non_ascii_outside_strings(text, where);
  try {
    // toml++ 3.3.0 reaches __builtin_unreachable when it asks whether most characters beyond
    // ASCII are whitespace, which it does wherever it looks past a value (`x = 2."é"` and many
    // more, found by fuzz/config_fuzz.cpp). So the text is parsed first with a stand-in for each
    // such character, which is never whitespace: the real text is parsed only when that copy is
    // valid TOML, and then every such character sits inside a string or comment, where toml++
    // does not ask (the one place it does is refused above).
    const bool beyond_ascii = std::any_of(
        text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
    if (beyond_ascii) (void)toml::parse(ascii_stand_in(text), where);
    return toml::parse(text, where);
  } catch (const toml::parse_error& e) {
    const auto& pos = e.source().begin;
    throw Error(std::string(e.description()), fmt::format("{}:{}:{}", where, pos.line, pos.column));
  }
}

const char* type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    default:
      return "a value";
  }
}

// `key` bare where TOML allows, else quoted.
std::string toml_key(std::string_view key) {
  const bool bare = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  if (bare) return std::string(key);
  std::ostringstream os;
  os << toml::toml_formatter{toml::value<std::string>(std::string(key))};
  return os.str();
}

// Arrays and tables are written here, scalars by toml++: toml++ 3.3.0's formatter sizes every
// array by casting log10 of each number to size_t, which is undefined behaviour for a float
// below 1, an infinity, NaN or INT64_MIN (`targets = [0.5]`; found by fuzz/config_fuzz.cpp).
void write_toml_value(std::ostream& os, const toml::node& v) {
  if (const toml::array* a = v.as_array()) {
    os << '[';
    for (size_t i = 0; i < a->size(); ++i) {
      os << (i == 0 ? "" : ", ");
      write_toml_value(os, *a->get(i));
    }
    os << ']';
  } else if (const toml::table* t = v.as_table()) {  // inline, inside an array
    os << '{';
    bool first = true;
    for (const auto& [k, x] : *t) {
      os << (first ? " " : ", ") << toml_key(k.str()) << " = ";
      write_toml_value(os, x);
      first = false;
    }
    os << " }";
  } else {
    os << toml::toml_formatter{v};
  }
}

// A table's keys with values first, then each subtable under its [dotted.header].
void write_toml_table(std::ostream& os, const toml::table& t, const std::string& path) {
  for (const auto& [k, v] : t) {
    if (v.is_table()) continue;
    os << toml_key(k.str()) << " = ";
    write_toml_value(os, v);
    os << '\n';
  }
  for (const auto& [k, v] : t) {
    if (!v.is_table()) continue;
    const std::string header = path.empty() ? toml_key(k.str()) : path + "." + toml_key(k.str());
    os << (os.tellp() > 0 ? "\n[" : "[") << header << "]\n";
    write_toml_table(os, *v.as_table(), header);
  }
}

}  // namespace

Config Config::defaults() {
  Config c;
  c.table_ = parse_toml(default_config_toml(), "<embedded defaults>");
  return c;
}

Config Config::resolve(const std::vector<std::filesystem::path>& files,
                       const std::vector<std::string>& overrides) {
  Config c = defaults();
  for (const auto& f : files) c.merge_file(f);
  for (const auto& o : overrides) c.apply_override(o);
  return c;
}

namespace {

// An unknown key's error; keys that were removed say what replaced them.
[[noreturn]] void unknown_key(const std::string& key, const std::string& where) {
  if (key == "orchestrator.trainer_token" || key == "orchestrator.validator_token") {
    throw Error(fmt::format("config key '{}' was removed: tokens are secrets and never live in "
                            "configs; the orchestrator creates them in files of mode 0600 under "
                            "orchestrator.secrets_dir (or set TRELLIS_TRAINER_TOKEN / "
                            "TRELLIS_VALIDATOR_TOKEN), see docs/security.md",
                            key),
                where);
  }
  throw Error("unknown config key '" + key + "'", where);
}

}  // namespace

void Config::merge_file(const std::filesystem::path& path) {
  merge_toml(read_file(path), path.string());
}

void Config::merge_toml(std::string_view text, const std::string& where) {
  merge_table(parse_toml(text, where), table_, "", where);
}

void Config::merge_table(const toml::table& src, toml::table& dst, const std::string& prefix,
                         const std::string& where) {
  for (const auto& [k, v] : src) {
    const std::string key =
        prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    toml::node* existing = dst.get(k.str());
    if (existing == nullptr) unknown_key(key, where);
    if (toml::table* sub = existing->as_table()) {
      if (!v.is_table()) throw Error("config key '" + key + "' must be a table", where);
      merge_table(*v.as_table(), *sub, key, where);
      continue;
    }
    const bool widen = existing->is_floating_point() && v.is_integer();  // 1 where 1.0 is expected
    if (existing->type() != v.type() && !widen) {
      throw Error(fmt::format("config key '{}' must be {}, got {}", key,
                              type_name(existing->type()), type_name(v.type())),
                  where);
    }
    if (widen) {
      dst.insert_or_assign(k.str(), static_cast<double>(v.as_integer()->get()));
    } else {
      dst.insert_or_assign(k.str(), v);
    }
  }
}

void Config::set_string(std::string_view key, std::string_view value) {
  apply_override(string_override(key, value));
}

std::string Config::string_override(std::string_view key, std::string_view value) {
  std::string quoted;  // a TOML basic string
  for (char c : value)
    quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
  return fmt::format("{}=\"{}\"", key, quoted);
}

void Config::apply_override(std::string_view assignment) {
  const std::string where = "--set " + std::string(assignment);
  auto eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    throw Error("override must look like section.key=value", where);
  }
  std::string key(assignment.substr(0, eq));
  std::string value(assignment.substr(eq + 1));
  const toml::node* existing = table_.at_path(key).node();
  if (existing == nullptr) unknown_key(key, where);
  // Strings may be given bare (--set model.path=/tmp/m); everything else is a TOML value.
  std::string literal = value;
  if (existing->is_string() && (value.empty() || value.front() != '"')) {
    std::ostringstream os;
    os << toml::value<std::string>(value);
    literal = os.str();
  }
  // Build a nested table {a = {b = value}} and merge it like a file.
  std::string text;
  auto dot = key.rfind('.');
  if (dot != std::string::npos) text = "[" + key.substr(0, dot) + "]\n";
  text += (dot == std::string::npos ? key : key.substr(dot + 1)) + " = " + literal + "\n";
  merge_toml(text, where);
}

const toml::node& Config::node(std::string_view key) const {
  const toml::node* n = table_.at_path(key).node();
  if (n == nullptr) throw Error("missing config key '" + std::string(key) + "'");
  return *n;
}

void Config::throw_below(std::string_view key, const std::string& lo,
                         const std::string& value) const {
  throw Error(fmt::format("must be >= {}, got {}", lo, value), std::string(key));
}

void Config::throw_wrong_type(std::string_view key) const {
  throw Error(fmt::format("config key '{}' holds {}, not the type asked for", key,
                          type_name(node(key).type())));
}

void Config::throw_wrong_element(std::string_view key, size_t index) const {
  throw Error(fmt::format("config key '{}': element {} holds {}, not the type asked for", key,
                          index, type_name((*node(key).as_array())[index].type())));
}

std::string Config::to_toml() const {
  std::ostringstream os;
  write_toml_table(os, table_, "");
  return os.str();
}

std::string Config::to_toml(std::string_view section) const {
  const toml::table* t = table_.get_as<toml::table>(section);
  if (t == nullptr) throw Error("no config section '" + std::string(section) + "'");
  toml::table only;
  only.insert(section, *t);
  std::ostringstream os;
  write_toml_table(os, only, "");
  return os.str();
}

}  // namespace trellis
