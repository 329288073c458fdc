// nginx for production relays (specs/shardcast.md §3): `trellis relay nginx-config` writes a
// configuration that serves a relay's data_dir with the same rules as the built-in server
// (shard_server.h): the same paths, the per-IP request rate (limit_req, 429 beyond its burst), the
// per-IP bandwidth (limit_rate), and the allowlist as an included file that the relay daemon
// rewrites (nginx_allowlist) and reloads when the orchestrator's list of active nodes changes.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "shardcast/relay.h"

namespace trellis::shardcast {

// The allowlist include: `allow <entry>;` for each static entry and each active node, then
// `deny all;`; or `allow all;` when there are no static entries and `active_nodes` is nullopt
// (the relay polls no orchestrator).
std::string nginx_allowlist(const std::vector<std::string>& static_allow,
                            const std::optional<std::vector<std::string>>& active_nodes);

// Writes <out_dir>/nginx.conf (complete: pid, logs and temp paths under out_dir, so it runs as
// `nginx -p <out_dir> -c nginx.conf` without root) and <out_dir>/allowlist.conf. Returns the
// path of nginx.conf.
std::filesystem::path write_nginx_config(const RelaySettings& settings,
                                         const std::filesystem::path& out_dir);

}  // namespace trellis::shardcast
