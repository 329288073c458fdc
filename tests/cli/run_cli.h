// Runs the real `trellis` binary (TRELLIS_BIN, set by CMake) and captures its output and status.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

// Fails (and shows the whole output) unless `haystack` contains `needle`.
#define EXPECT_CONTAINS(haystack, needle)                                                       \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "missing '" << (needle) << "' in:\n" \
                                                        << (haystack)

namespace trellis::test {

struct CliResult {
  int status = -1;     // exit status
  std::string output;  // stdout, and stderr too unless dropped
};

inline CliResult run_trellis(const std::string& args, bool with_stderr = true) {
  std::string cmd = std::string(TRELLIS_BIN) + " " + args +
                    (with_stderr ? " 2>&1" : " 2>/dev/null") + " </dev/null";
  CliResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("trellis_cli_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace trellis::test
