#include "shardcast/nginx_config.h"

#include <cmath>

#include "common/files.h"
#include "common/nginx_prelude.h"

namespace trellis::shardcast {
namespace fs = std::filesystem;

std::string nginx_allowlist(const std::vector<std::string>& static_allow,
                            const std::optional<std::vector<std::string>>& active_nodes) {
  std::string out =
      "# written by trellis relay: the IPs that may download (specs/shardcast.md §3)\n";
  if (static_allow.empty() && !active_nodes) return out + "allow all;\n";
  for (const auto& e : static_allow) out += "allow " + e + ";\n";
  if (active_nodes)
    for (const auto& ip : *active_nodes) out += "allow " + ip + ";\n";
  return out + "deny all;\n";
}

fs::path write_nginx_config(const RelaySettings& settings, const fs::path& out_dir) {
  const fs::path dir = fs::absolute(out_dir);
  const fs::path data = fs::absolute(settings.server.data_dir);
  const auto& limits = settings.server.limits;
  std::string zone, limit_req;
  if (limits.requests_per_s > 0) {
    // nginx counts in requests per second (or minute) as integers: round up, never below 1/min.
    const double burst = limits.burst > 0 ? limits.burst : std::max(1.0, limits.requests_per_s);
    zone =
        limits.requests_per_s >= 1
            ? fmt::format("  limit_req_zone $binary_remote_addr zone=trellis_req:10m rate={}r/s;\n",
                          static_cast<int64_t>(std::ceil(limits.requests_per_s)))
            : fmt::format("  limit_req_zone $binary_remote_addr zone=trellis_req:10m rate={}r/m;\n",
                          static_cast<int64_t>(std::ceil(limits.requests_per_s * 60)));
    // nginx's burst is what may queue beyond the rate; the built-in bucket holds `burst` in all.
    limit_req = fmt::format("      limit_req zone=trellis_req burst={} nodelay;\n",
                            std::max<int64_t>(0, static_cast<int64_t>(burst) - 1));
  }
  const std::string limit_rate =
      limits.bytes_per_s > 0
          ? fmt::format("      limit_rate {};\n", static_cast<int64_t>(limits.bytes_per_s))
          : "";
  const std::string conf = fmt::format(
      R"(# Written by `trellis relay nginx-config` for relay '{name}': serves its data directory
# with the rules of the built-in server. Run: nginx -p {dir} -c {dir}/nginx.conf
# (the relay daemon keeps allowlist.conf current when relay.nginx_allowlist points at it).
{main}http {{
{paths}  sendfile on;
  tcp_nopush on;
  keepalive_requests 10000;
  types {{ application/json json; }}
  default_type application/octet-stream;
{zone}  limit_req_status 429;
  server {{
    listen {host}:{port};
    root {data};
    include {dir}/allowlist.conf;
    location = /healthz {{
      allow all;
      return 200 "ok\n";
    }}
    location = /manifest.json {{
      add_header Cache-Control no-store;
{limit_req}    }}
    location = /probe.bin {{
{limit_req}{limit_rate}    }}
    location ~ "^/v[0-9]{{1,18}}/(shard|delta)_[0-9]{{5,9}}\.bin$" {{
{limit_req}{limit_rate}    }}
    location / {{
      return 404;
    }}
  }}
}}
)",
      fmt::arg("name", settings.name), fmt::arg("dir", dir.string()),
      fmt::arg("main", nginx_main_lines(dir, "auto")),
      fmt::arg("paths", nginx_http_path_lines(dir)), fmt::arg("data", data.string()),
      fmt::arg("host", settings.server.host), fmt::arg("port", settings.server.port),
      fmt::arg("zone", zone), fmt::arg("limit_req", limit_req), fmt::arg("limit_rate", limit_rate));
  write_file_atomic(dir / "nginx.conf", conf);
  const fs::path allowlist = dir / "allowlist.conf";
  if (!fs::exists(allowlist)) {
    // Until the relay daemon writes the orchestrator's list, only the static entries (if it polls
    // one, nobody else).
    std::optional<std::vector<std::string>> nodes;
    if (!settings.allowlist_url.empty()) nodes.emplace();
    write_file_atomic(allowlist, nginx_allowlist(settings.server.allow, nodes));
  }
  return dir / "nginx.conf";
}

}  // namespace trellis::shardcast
