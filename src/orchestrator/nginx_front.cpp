#include "orchestrator/nginx_front.h"

#include <fmt/format.h>

#include "common/error.h"
#include "common/files.h"
#include "common/ip_address.h"
#include "common/nginx_prelude.h"

namespace trellis::orchestrator {
namespace fs = std::filesystem;
namespace {

// Error naming `what` unless `address` is HOST:PORT (parse_host_port) with a host of letters,
// digits, '.', '-', ':' (IPv6 in brackets) only: it goes into nginx.conf verbatim.
void check_host_port(const std::string& address, const std::string& what) {
  for (const char c : parse_host_port(address, what).host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':' &&
        c != '[' && c != ']')
      fail(what,
           "'{}' is not HOST:PORT (the host has a character other than letters, digits, "
           "'.', '-', ':', '[' and ']')",
           address.substr(0, 100));
  }
}

}  // namespace

fs::path write_nginx_front_config(const NginxFront& front, const fs::path& out_dir) {
  check_host_port(front.listen, "--listen");
  check_host_port(front.upstream, "orchestrator.host and orchestrator.port");
  const fs::path dir = fs::absolute(out_dir);
  const std::string conf = fmt::format(
      R"(# Written by `trellis orchestrator nginx-config`: nginx in front of the orchestrator at
# {upstream} (docs/orchestrator.md#nginx-in-front). Run: nginx -p {dir} -c {dir}/nginx.conf
# The orchestrator needs orchestrator.trusted_proxies = ["<the address nginx connects from>"].
{main}http {{
{paths}  # A slow client is held without a thread, and only this long.
  client_header_timeout {header_timeout}s;
  client_body_timeout {body_timeout}s;
  send_timeout 60s;
  keepalive_timeout 30s;
  client_header_buffer_size 1k;
  large_client_header_buffers 4 8k;
  limit_conn_zone $binary_remote_addr zone=trellis_conn:10m;
  limit_conn_status 429;
  server {{
    listen {listen};
    limit_conn trellis_conn {connections};
    client_max_body_size {max_request};
    # The orchestrator gets whole requests: bodies are read (and bounded) here first. The
    # request URI goes on as sent, so that node signatures over it still hold.
    proxy_request_buffering on;
    proxy_set_header X-Real-IP $remote_addr;
    proxy_read_timeout 300s;
    location /upload/ {{
      client_max_body_size {max_upload};
      proxy_pass http://{upstream};
    }}
    location / {{
      proxy_pass http://{upstream};
    }}
  }}
}}
)",
      fmt::arg("dir", dir.string()), fmt::arg("main", nginx_main_lines(dir, "1")),
      fmt::arg("paths", nginx_http_path_lines(dir)), fmt::arg("listen", front.listen),
      fmt::arg("upstream", front.upstream), fmt::arg("header_timeout", front.header_timeout_s),
      fmt::arg("body_timeout", front.body_timeout_s),
      fmt::arg("connections", front.connections_per_ip),
      fmt::arg("max_request", front.max_request_bytes),
      fmt::arg("max_upload", front.max_upload_bytes));
  write_file_atomic(dir / "nginx.conf", conf);
  return dir / "nginx.conf";
}

}  // namespace trellis::orchestrator
