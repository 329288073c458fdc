// What every nginx.conf Trellis writes (relays, nginx in front of the orchestrator) shares: nginx
// run without root, with its pid, logs and temporary files under one directory.
#pragma once

#include <filesystem>
#include <string>

namespace trellis {

// The main-context lines (worker_processes `workers`, pid, error_log, events) for a
// configuration run as `nginx -p <dir> -c <dir>/nginx.conf`.
std::string nginx_main_lines(const std::filesystem::path& dir, const std::string& workers);
// The http-context lines that keep the access log and every temporary path under `dir`
// (indented two spaces). Creates <dir>/tmp.
std::string nginx_http_path_lines(const std::filesystem::path& dir);

}  // namespace trellis
