// The trainer's route: POST /trainer/version publishes a policy version (and the trainer's
// public key).

#include "orchestrator/api_impl.h"

#include <cstdint>
#include <string>

#include "common/http_service.h"
#include "common/json.h"
#include "common/logging.h"

namespace trellis::orchestrator {

using namespace api_detail;

void Server::Impl::trainer_version(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /trainer/version";
  const Json body = parse_body(req, where);
  const int64_t version = integer_field(body, "version", 0, INT32_MAX, where);
  std::string key;
  if (body.contains("public_key")) key = address_field(body, "public_key", where);
  const int64_t before = state.policy_version();
  const std::string key_before = state.trainer_public_key();
  const int64_t newest = state.publish_version(version, key);
  if (newest > before) log::info("orchestrator: policy version {} published", newest);
  if (!key.empty() && key != key_before) log::info("orchestrator: trainer public key {}", key);
  reply_json(res, {{"policy_version", newest}, {"trainer_public_key", state.trainer_public_key()}});
}

}  // namespace trellis::orchestrator
