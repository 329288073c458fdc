// Progress bar (see progress.h).
#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace trellis::cli {

Progress::Progress(std::string unit)
    : unit_(std::move(unit)),
      tty_(::isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()) {}

double Progress::seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::draw(int64_t done, int64_t total, int64_t tokens) {
  if (!tty_) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(total, 1));
  const double s = seconds();
  const double rate = s > 0 ? tokens / s : 0;
  const double eta = done > 0 ? s * (total - done) / done : 0;
  std::fprintf(stderr, "\r[%s%s] %lld/%lld %s | %.0f tok/s | ETA %d:%02d ",
               std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
               static_cast<long long>(done), static_cast<long long>(total), unit_.c_str(), rate,
               static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
  std::fflush(stderr);
}

void Progress::finish() {
  if (tty_) std::fputs("\n", stderr);
}

}  // namespace trellis::cli
