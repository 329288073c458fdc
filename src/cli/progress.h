// A one-line progress bar on stderr, redrawn in place when stderr is a terminal:
// "[#######.......] 12/64 completions | 3,456 tok/s | ETA 0:12". Silent otherwise, so logs and CI
// output stay clean.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace trellis::cli {

class Progress {
 public:
  explicit Progress(std::string unit);  // "completions"
  void draw(int64_t done, int64_t total, int64_t tokens);
  void finish();  // ends the line
  double seconds() const;

 private:
  std::string unit_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace trellis::cli
