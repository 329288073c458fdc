// nginx in front of an orchestrator on the open internet (docs/orchestrator.md#nginx-in-front).
// cpp-httplib gives each connection one of a fixed pool of threads and has no deadline for a
// request's headers: a client that trickles bytes holds a thread, and enough of them stall the
// server. nginx is event-driven: it holds such a client without a thread and for at most
// client_header_timeout, caps header sizes, bodies (per route) and connections per IP, and hands
// the orchestrator, listening on loopback, only complete requests (bodies buffered first). The
// orchestrator takes the client's address from X-Real-IP because nginx's address is listed in
// orchestrator.trusted_proxies.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace trellis::orchestrator {

struct NginxFront {
  std::string listen = "0.0.0.0:8080";            // where nginx listens (HOST:PORT)
  std::string upstream;                           // the orchestrator's HOST:PORT (on loopback)
  int64_t max_request_bytes = 64 << 10;           // every body but an upload's
  int64_t max_upload_bytes = int64_t{256} << 20;  // PUT /upload/...
  int header_timeout_s = 10;                      // a request's headers must arrive within this
  int body_timeout_s = 30;                        // ... and each read of its body
  int connections_per_ip = 64;
};

// Writes <out_dir>/nginx.conf (complete: pid, logs and temp paths under out_dir, so that it runs
// as `nginx -p <out_dir> -c nginx.conf` without root); returns its path. Error naming the field
// for a listen or upstream address that is not HOST:PORT.
std::filesystem::path write_nginx_front_config(const NginxFront& front,
                                               const std::filesystem::path& out_dir);

}  // namespace trellis::orchestrator
