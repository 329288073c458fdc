// The registry of built-in environments (see registry.h). An explicit table rather than static
// self-registration: static libraries drop unreferenced objects, and a table is easy to read.
#include "env/registry.h"

#include <functional>

#include "common/config.h"
#include "common/error.h"
#include "env/environments/environments.h"

namespace trellis::env {
namespace {

struct Entry {
  const char* name;
  std::function<std::unique_ptr<Environment>(const EnvSettings&)> make;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"math", [](const EnvSettings&) { return make_math_environment(); }},
      {"code", [](const EnvSettings& s) { return make_code_environment(s.sandbox); }},
      {"countdown", [](const EnvSettings&) { return make_countdown_environment(); }},
      {"arithmetic", [](const EnvSettings&) { return make_arithmetic_environment(); }},
      {"reverse_text", [](const EnvSettings&) { return make_reverse_text_environment(); }},
      {"sort", [](const EnvSettings&) { return make_sort_environment(); }},
      {"sudoku", [](const EnvSettings&) { return make_sudoku_environment(); }},
      {"maze", [](const EnvSettings&) { return make_maze_environment(); }},
      {"knights_knaves", [](const EnvSettings&) { return make_knights_knaves_environment(); }},
  };
  return entries;
}

}  // namespace

EnvSettings EnvSettings::from_config(const Config& config) {
  return {SandboxLimits::from_config(config)};
}

std::vector<std::string> environment_names() {
  std::vector<std::string> names;
  for (const auto& e : registry()) names.emplace_back(e.name);
  return names;
}

std::unique_ptr<Environment> make_environment(std::string_view name, const EnvSettings& settings) {
  for (const auto& e : registry()) {
    if (name == e.name) return e.make(settings);
  }
  fail("env.name", "no environment named '{}'; known: {}", name,
       fmt::join(environment_names(), ", "));
}

std::unique_ptr<Environment> make_environment(const Config& config) {
  return make_environment(config.get<std::string>("env.name"), EnvSettings::from_config(config));
}

}  // namespace trellis::env
