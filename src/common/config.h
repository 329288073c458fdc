// Config: Trellis configuration as TOML, resolved in layers, left to right:
//   embedded defaults  <-  each CONFIG file in order  <-  each `--set section.key=value`.
//
// Every key a user may set exists in the embedded defaults (default_config.cpp), so a typo in a
// file or an override is an error naming the key and where it came from, never a silent no-op.
// Sections are named after modules (`[model]`, `[engine]`, `[trainer]`, ...).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace trellis {

class Config {
 public:
  // The embedded defaults alone.
  static Config defaults();
  // Defaults, then `files`, then `overrides` ("section.key=value" each).
  static Config resolve(const std::vector<std::filesystem::path>& files,
                        const std::vector<std::string>& overrides);

  void merge_file(const std::filesystem::path& path);
  void merge_toml(std::string_view text, const std::string& where);
  void apply_override(std::string_view assignment);
  // apply_override(string_override(key, value)).
  void set_string(std::string_view key, std::string_view value);
  // "key=<value as a TOML string>", quoting `value` (paths, names): a --set for a child process.
  static std::string string_override(std::string_view key, std::string_view value);

  // The value at a dotted key: T is std::string, int64_t, double or bool. Error if the key is
  // missing or holds another type.
  template <typename T>
  T get(std::string_view key) const {
    auto v = node(key).value<T>();
    if (!v) throw_wrong_type(key);
    return *v;
  }

  // get<T>(key), with an Error naming the key unless the value is at least `lo`.
  template <typename T>
  T get_at_least(std::string_view key, T lo) const {
    const T v = get<T>(key);
    if (!(v >= lo)) throw_below(key, fmt::format("{}", lo), fmt::format("{}", v));
    return v;
  }

  // The array at a dotted key, each element converted to T (as get()). Error naming the key and
  // the element's index when one holds another type.
  template <typename T>
  std::vector<T> get_list(std::string_view key) const {
    const toml::array* a = node(key).as_array();
    if (a == nullptr) throw_wrong_type(key);
    std::vector<T> out;
    for (size_t i = 0; i < a->size(); ++i) {
      auto v = (*a)[i].value<T>();
      if (!v) throw_wrong_element(key, i);
      out.push_back(*v);
    }
    return out;
  }

  // The resolved configuration as TOML text (what `trellis config show` prints and what a run
  // saves as config.toml).
  std::string to_toml() const;
  // One top-level section (e.g. "rl", with its sub-tables) as TOML text; Error naming the
  // section unless the configuration has it.
  std::string to_toml(std::string_view section) const;

 private:
  const toml::node& node(std::string_view key) const;
  [[noreturn]] void throw_wrong_type(std::string_view key) const;
  [[noreturn]] void throw_below(std::string_view key, const std::string& lo,
                                const std::string& value) const;
  [[noreturn]] void throw_wrong_element(std::string_view key, size_t index) const;
  // Merges `src` into `dst` (the table at dotted key `prefix`), walking both side by side.
  static void merge_table(const toml::table& src, toml::table& dst, const std::string& prefix,
                          const std::string& where);

  toml::table table_;
};

// The embedded default configuration (TOML text, documented inline).
std::string_view default_config_toml();

}  // namespace trellis
