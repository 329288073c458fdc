// Runs the real `trellis` binary (TRELLIS_BIN, set by CMake) and captures its output and status.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/files.h"
#include "common/json.h"

// Fails (and shows the whole output) unless `haystack` contains `needle`.
#define EXPECT_CONTAINS(haystack, needle)                                                       \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "missing '" << (needle) << "' in:\n" \
                                                        << (haystack)

namespace trellis::test {

struct CliResult {
  int status = -1;     // exit status
  std::string output;  // stdout, and stderr too unless dropped
};

// A shell command line with its stderr joined to its stdout and no stdin.
inline CliResult run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1 </dev/null";
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

inline CliResult run_trellis(const std::string& args, bool with_stderr = true) {
  const std::string cmd = std::string(TRELLIS_BIN) + " " + args;
  return run_command(with_stderr ? cmd : "(" + cmd + " 2>/dev/null)");
}

// Polls `ready` every 200 ms for up to `seconds`; whether it became true.
inline bool wait_for(const std::function<bool()>& ready, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return ready();
}

// The URL a server wrote to `file` once it listened (orchestrator.url, relay.url), without the
// newline.
inline std::string read_url(const std::filesystem::path& file) {
  std::string url = read_file(file);
  while (!url.empty() && std::isspace(static_cast<unsigned char>(url.back()))) url.pop_back();
  return url;
}

inline std::filesystem::path fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("trellis_cli_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

// Every line of a JSONL file (metrics.jsonl, results), parsed.
inline std::vector<Json> read_jsonl(const std::filesystem::path& path) {
  std::vector<Json> rows;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) rows.push_back(parse_json(line, path.string()));
  return rows;
}

// A shell-quoted argument.
inline std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The console lines of `output` that report a training step ("step 3/8 | ...").
inline std::vector<std::string> step_lines(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("step ", 0) == 0) lines.push_back(line);
  return lines;
}

}  // namespace trellis::test
