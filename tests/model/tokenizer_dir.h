// Test helpers for model directories: TempDir, a fresh directory removed with everything in it at
// the end of its scope, and the byte-level tokenizer of `trellis model init` written into one.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

#include "model/tokenizer.h"

namespace trellis::test {

class TempDir {
 public:
  // `prefix` begins the directory's name (a random suffix follows).
  explicit TempDir(const std::string& prefix = "trellis_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// write_byte_level_tokenizer(dir, chat_format), loaded back.
inline model::Tokenizer written_tokenizer(const std::string& chat_format, const TempDir& dir) {
  model::write_byte_level_tokenizer(dir.path(), chat_format);
  return model::Tokenizer::load(dir.path());
}

}  // namespace trellis::test
