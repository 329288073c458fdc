// Runs tests/interop/duckdb_rollouts.js, the DuckDB side of the tests that check rollout files
// against an independent Parquet implementation (its Node package, pinned in
// tests/interop/package-lock.json and installed by scripts/setup.sh).
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/json.h"

namespace trellis::test {

inline const std::filesystem::path kInteropDir =
    std::filesystem::path(TRELLIS_SOURCE_DIR) / "tests" / "interop";
inline constexpr const char* kDuckdbInstallHint =
    "run scripts/setup.sh (it runs `npm ci --prefix tests/interop`, which installs "
    "@duckdb/node-api)";

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs duckdb_rollouts.js with `args` (already quoted); fails the test unless it exits 0;
// returns its JSON (null after a failure).
inline Json run_duckdb(const std::string& args) {
  const std::filesystem::path node_modules = kInteropDir / "node_modules";
  if (!std::filesystem::is_directory(node_modules / "@duckdb" / "node-api")) {
    ADD_FAILURE() << "@duckdb/node-api is not installed in " << node_modules.string() << ": "
                  << kDuckdbInstallHint;
    return Json();
  }
  const std::string cmd =
      "node " + shell_quote((kInteropDir / "duckdb_rollouts.js").string()) + " " + args;
  FILE* p = ::popen((cmd + " </dev/null").c_str(), "r");
  if (p == nullptr) {
    ADD_FAILURE() << "cannot run " << cmd;
    return Json();
  }
  std::string output;
  std::array<char, 65536> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) output.append(buf.data(), n);
  const int st = ::pclose(p);
  const int status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (status == 127) {
    ADD_FAILURE() << "`node` was not found on PATH: " << kDuckdbInstallHint;
    return Json();
  }
  if (status != 0) {
    ADD_FAILURE() << "duckdb_rollouts.js failed (its stderr is above); " << kDuckdbInstallHint;
    return Json();
  }
  return parse_json(output, "duckdb_rollouts.js output");
}

}  // namespace trellis::test
