// libFuzzer target for TOML configs: the input is a TOML document, optionally followed by a NUL
// byte and lines that are either `--set` overrides (key=value) or keys to read with every typed
// getter. Anything but a trellis::Error is a bug, and the resolved config must read back from its
// own to_toml() (what `trellis config show` prints and a run saves). scripts/fuzz.sh builds and
// runs it; fuzz/corpus/config/ holds the seeds.
#include <cstddef>
#include <cstdint>
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
  bool changed = false;  // whether anything was merged, so that the round trip below says more
  ignoring_errors([&] {
    c.merge_toml(input.substr(0, nul), "fuzz.toml");
    changed = true;
  });
  if (nul != std::string_view::npos) {
    std::string_view rest = input.substr(nul + 1);
    while (!rest.empty()) {
      const size_t eol = rest.find('\n');
      const std::string_view line = rest.substr(0, eol);
      rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 1);
      if (line.find('=') != std::string_view::npos) {
        ignoring_errors([&] {
          c.apply_override(line);
          changed = true;
        });
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
  if (changed) {
    Config back = defaults;
    back.merge_toml(c.to_toml(), "to_toml()");  // throws (and so crashes the fuzzer) if it cannot
  }
  return 0;
}
