// TempDir for the run tests: a fresh directory, removed with everything in it at the end of its
// scope, and write_text to fill it.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace trellis::test {

class RunTempDir {
 public:
  RunTempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "trellis_run_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~RunTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  RunTempDir(const RunTempDir&) = delete;
  RunTempDir& operator=(const RunTempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace trellis::test
