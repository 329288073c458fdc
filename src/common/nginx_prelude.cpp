#include "common/nginx_prelude.h"

#include <fmt/format.h>

namespace trellis {

std::string nginx_main_lines(const std::filesystem::path& dir, const std::string& workers) {
  return fmt::format(
      "worker_processes {workers};\npid {dir}/nginx.pid;\nerror_log {dir}/error.log warn;\n"
      "events {{ worker_connections 4096; }}\n",
      fmt::arg("workers", workers), fmt::arg("dir", dir.string()));
}

std::string nginx_http_path_lines(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir / "tmp");
  std::string out = fmt::format("  access_log {}/access.log;\n", dir.string());
  for (const auto& [directive, folder] : {std::pair{"client_body", "body"},
                                          {"proxy", "proxy"},
                                          {"fastcgi", "fastcgi"},
                                          {"uwsgi", "uwsgi"},
                                          {"scgi", "scgi"}})
    out += fmt::format("  {}_temp_path {}/tmp/{};\n", directive, dir.string(), folder);
  return out;
}

}  // namespace trellis
