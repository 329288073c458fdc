// libFuzzer target for TOML configs: the input is a TOML document, optionally followed by a NUL
// byte and lines that are either `--set` overrides (key=value) or keys to read with every typed
// getter. Anything but a trellis::Error is a bug, and every section the input touched must read
// back from its own to_toml() (what `trellis config show` prints and a run saves) to the same
// text. Only the touched sections are round-tripped: the whole config would cost five times more
// per execution, and the untouched sections are the defaults, which config_test round-trips.
// scripts/fuzz.sh builds and runs it; fuzz/corpus/config/ holds the seeds.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "common/config.h"
#include "common/error.h"

namespace {

template <typename F>
void ignoring_errors(F f) {
  try {
    f();
  } catch (const trellis::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using trellis::Config;
  static const Config defaults = Config::defaults();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  Config c = defaults;
  std::set<std::string> touched;  // the top-level sections that merges or overrides may change
  const std::string_view text = input.substr(0, nul);
  bool merged = false;
  ignoring_errors([&] {  // may stop half-way through: what it merged is still checked below
    c.merge_toml(text, "fuzz.toml");
    merged = true;
  });
  // toml++ itself reaches unreachable code on some non-ASCII outside strings, which merge_toml
  // refuses before parsing: parse here only what merge_toml parsed, or plain ASCII.
  const bool ascii =
      std::all_of(text.begin(), text.end(), [](char ch) { return (ch & 0x80) == 0; });
  if (merged || ascii) {
    try {
      for (const auto& [key, value] : toml::parse(text)) touched.emplace(key.str());
    } catch (const toml::parse_error&) {
    }
  }
  if (nul != std::string_view::npos) {
    std::string_view rest = input.substr(nul + 1);
    while (!rest.empty()) {
      const size_t eol = rest.find('\n');
      const std::string_view line = rest.substr(0, eol);
      rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
      if (line.find('=') != std::string_view::npos) {
        touched.emplace(line.substr(0, line.find_first_of(".=")));
        ignoring_errors([&] { c.apply_override(line); });
        continue;
      }
      ignoring_errors([&] { (void)c.get<std::string>(line); });
      ignoring_errors([&] { (void)c.get<int64_t>(line); });
      ignoring_errors([&] { (void)c.get<double>(line); });
      ignoring_errors([&] { (void)c.get<bool>(line); });
      ignoring_errors([&] { (void)c.get_at_least<int64_t>(line, 1); });
      ignoring_errors([&] { (void)c.get_at_least<double>(line, 0.5); });
      ignoring_errors([&] { (void)c.get_list<std::string>(line); });
      ignoring_errors([&] { (void)c.get_list<int64_t>(line); });
      ignoring_errors([&] { (void)c.get_list<double>(line); });
    }
  }
  for (const std::string& section : touched) {
    std::string printed;
    try {
      printed = c.to_toml(section);
    } catch (const trellis::Error&) {
      continue;  // no such section: nothing was merged into it
    }
    // Read back into itself (no copy of the defaults: they dominate the cost). Throws, and so
    // crashes the fuzzer, if it cannot; printing it again must give the same text.
    c.merge_toml(printed, "to_toml()");
    if (c.to_toml(section) != printed) __builtin_trap();
  }
  return 0;
}
