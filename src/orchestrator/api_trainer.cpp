// The trainer's routes: POST /trainer/version publishes a policy version (and the trainer's
// public key); POST /trainer/metrics reports a trained step's metrics for the dashboard.

#include "orchestrator/api_impl.h"

#include <cstdint>
#include <string>

#include "common/clock.h"
#include "common/http_service.h"
#include "common/json.h"
#include "common/logging.h"

namespace trellis::orchestrator {

using namespace api_detail;

namespace {

constexpr size_t kMaxMetrics = 256;    // names in one step's report
constexpr size_t kMaxMetricName = 64;  // bytes of a name

}  // namespace

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

void Server::Impl::trainer_metrics(const httplib::Request& req, httplib::Response& res) {
  const std::string where = "POST /trainer/metrics";
  const Json body = parse_body(req, where);
  const int64_t step = integer_field(body, "step", 0, INT32_MAX, where);
  if (!body.contains("metrics") || !body.at("metrics").is_object() ||
      body.at("metrics").size() > kMaxMetrics) {
    refuse(400, "malformed_request",
           fmt::format("field 'metrics' must be an object of at most {} names ({})", kMaxMetrics,
                       where));
  }
  for (const auto& [name, value] : body.at("metrics").items()) {
    // null is how JSON writes a non-finite value (a loss that diverged).
    if (name.empty() || name.size() > kMaxMetricName || !(value.is_number() || value.is_null())) {
      refuse(400, "malformed_request",
             fmt::format("metric '{}' must have a name of 1 to {} bytes and a number ({})",
                         name.substr(0, kMaxMetricName), kMaxMetricName, where));
    }
  }
  state.record_step_metrics(step, body.at("metrics").dump(), unix_seconds());
  reply_json(res, {{"step", step}});
}

}  // namespace trellis::orchestrator
