// Tasks: the roles (worker, validator, relay) the pool owner asks nodes to run: POST /tasks,
// GET /tasks, and a task's JSON (heartbeats hand a node its task).

#include "orchestrator/api_impl.h"

#include <algorithm>
#include <string>

#include "common/clock.h"
#include "common/config.h"
#include "common/error.h"
#include "common/http_service.h"
#include "common/json.h"
#include "common/logging.h"

namespace trellis::orchestrator {

using namespace api_detail;

Json Server::Impl::task_json(const Task& t) {
  return {{"id", t.id},
          {"role", t.role},
          {"config", t.config},
          {"node", t.node},
          {"created_at", t.created_at},
          {"assigned_at", t.assigned_at}};
}

void Server::Impl::list_tasks(const httplib::Request& req, httplib::Response& res) {
  Json tasks = Json::array();
  for (const Task& t : state.tasks()) tasks.push_back(task_json(t));
  reply_json(res, {{"tasks", tasks}});
}

void Server::Impl::create_task(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /tasks";
  const Json body = parse_body(req, where);
  const std::string role = string_field(body, "role", where);
  const auto& roles = task_roles();
  if (std::find(roles.begin(), roles.end(), role) == roles.end()) {
    refuse(400, "malformed_request",
           fmt::format("field 'role' must be worker, validator or relay ({})", where));
  }
  const std::string config = string_field(body, "config", where);
  try {
    Config::defaults().merge_toml(config, "the task's config");
  } catch (const Error& e) {
    refuse(400, "malformed_request", fmt::format("{} ({})", e.what(), where));
  }
  std::string node;
  if (body.contains("node")) node = address_field(body, "node", where);
  const int64_t id = state.create_task(role, config, node, unix_seconds());
  log::info("orchestrator: task {} ({}) created{}", id, role,
            node.empty() ? "" : " for node " + node);
  reply_json(res, {{"id", id}});
}

}  // namespace trellis::orchestrator
