// Helpers for the SHARDCAST tests: a temporary directory, reproducible random bytes, and the
// HTTP status a server answers a GET with.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>

#include "shardcast/http_fetch.h"

namespace trellis::test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "trellis-shardcast-XXXXXX");
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
    std::filesystem::permissions(path_, std::filesystem::perms(0755));  // nginx's workers read it
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng());
  return out;
}

// The status of GET `url` from `source_ip` ("" = the system's choice); 0 when nothing answers.
inline int status_of(const std::string& url, const std::string& source_ip = "") {
  shardcast::HttpOptions http;
  http.timeout_s = 5;
  http.source_ip = source_ip;
  std::string body;
  return shardcast::http_get_string(url, http, body).status;
}

}  // namespace trellis::test
