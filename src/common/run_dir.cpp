#include "common/run_dir.h"

#include <chrono>
#include <ctime>

#include "common/error.h"
#include "common/files.h"

namespace trellis {

namespace {

std::filesystem::path create_run_dir(const Config& config) {
  std::filesystem::path dir = config.get<std::string>("run.dir");
  if (dir.empty()) {
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm utc{};
    gmtime_r(&now, &utc);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
    dir = std::filesystem::path("runs") / (config.get<std::string>("run.name") + "-" + stamp);
  }
  std::error_code ec;
  std::filesystem::create_directories(dir / "logs", ec);
  if (ec) fail(dir.string(), "cannot create the run directory: {}", ec.message());
  return dir;
}

}  // namespace

std::filesystem::path make_run_dir(const Config& config) {
  const auto dir = create_run_dir(config);
  write_file_atomic(dir / "config.toml", config.to_toml());
  return dir;
}

std::filesystem::path join_run_dir(const Config& config) {
  const auto dir = create_run_dir(config);
  if (!std::filesystem::exists(dir / "config.toml"))
    write_file_atomic(dir / "config.toml", config.to_toml());
  return dir;
}

}  // namespace trellis
