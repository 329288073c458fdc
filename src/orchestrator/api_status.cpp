// What the orchestrator reports: GET /status (the run's shape and progress), GET /metrics
// (Prometheus text) and GET /ledger/head, with the rates and counts they share.

#include "orchestrator/api_impl.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "common/clock.h"
#include "common/http_service.h"
#include "common/json.h"
#include "orchestrator/step_counter.h"

namespace trellis::orchestrator {

using namespace api_detail;

namespace {

constexpr double kTokensWindowS = 60;  // rollout_tokens_per_s averages over this long
// Validators are behind while work was held back for the backlog bound this recently (and a
// step's worth still waits for a verdict).
constexpr double kBehindWindowS = 10;

}  // namespace

int64_t Server::Impl::step_counter_now() {
  return step_counter(state.signal_samples_by_step(), opt.steps, opt.batch_size);
}

double Server::Impl::tokens_per_s() {
  return static_cast<double>(state.completion_tokens_since(unix_seconds() - kTokensWindowS)) /
         kTokensWindowS;
}

Json Server::Impl::status() {
  const auto counts = state.count_by_status();
  const auto samples = state.samples_by_status();
  const int64_t version = state.policy_version();
  return {{"run_id", state.run_id()},
          {"step", step_counter_now()},
          {"policy_version", version},
          {"trainer_public_key", state.trainer_public_key()},
          {"steps", opt.steps},
          {"async_level", opt.async_level},
          {"batch_size", opt.batch_size},
          {"group_size", opt.group_size},
          {"assigned", counts.at("assigned")},
          {"pending", counts.at("pending")},
          {"validating", counts.at("validating")},
          {"accepted", counts.at("accepted")},
          {"rejected", counts.at("rejected")},
          {"dropped", counts.at("dropped")},
          {"samples",
           {{"generated", generated_samples(samples)},
            {"validating", samples.at("validating")},
            {"accepted", samples.at("accepted")},
            {"rejected", samples.at("rejected")},
            {"dropped", samples.at("dropped")}}},
          {"max_backlog_samples", max_backlog_samples()},
          {"validators_behind", validators_behind(samples.at("validating"))},
          {"judged_samples_per_s", judged_per_s()},
          {"rollout_tokens_per_s", tokens_per_s()},
          {"done", version >= opt.steps}};
}

bool Server::Impl::validators_behind(int64_t validating_samples) const {
  return unix_seconds() - backlog_full_at < kBehindWindowS && validating_samples >= opt.batch_size;
}

int64_t Server::Impl::generated_samples(const std::map<std::string, int64_t>& by_status) {
  int64_t n = 0;
  for (const auto& [status, samples] : by_status) n += samples;
  return n;
}

int64_t Server::Impl::max_backlog_samples() const {
  return static_cast<int64_t>(opt.max_backlog_steps * static_cast<double>(opt.batch_size));
}

double Server::Impl::judged_per_s() {
  return static_cast<double>(state.samples_judged_since(unix_seconds() - kTokensWindowS)) /
         kTokensWindowS;
}

std::string Server::Impl::metrics() {
  std::string out;
  const auto gauge = [&](const char* name, const char* help, const std::string& value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", name, help, value);
  };
  gauge("trellis_orchestrator_step",
        "the step counter: smallest step lacking batch_size signal samples",
        std::to_string(step_counter_now()));
  gauge("trellis_orchestrator_policy_version", "newest policy version the trainer published",
        std::to_string(state.policy_version()));
  out +=
      "# HELP trellis_orchestrator_submissions submissions by status\n"
      "# TYPE trellis_orchestrator_submissions gauge\n";
  for (const auto& [status, n] : state.count_by_status()) {
    out += fmt::format("trellis_orchestrator_submissions{{status=\"{}\"}} {}\n", status, n);
  }
  const FileCounts totals = state.accepted_totals();
  gauge("trellis_orchestrator_accepted_samples", "completions in accepted files",
        std::to_string(totals.samples));
  gauge("trellis_orchestrator_accepted_signal_samples",
        "completions in accepted files, in groups whose rewards differ",
        std::to_string(totals.signal_samples));
  gauge("trellis_orchestrator_rollout_tokens_per_second",
        "completion tokens accepted per second over the last 60 s",
        fmt::format("{}", tokens_per_s()));
  out +=
      "# HELP trellis_orchestrator_samples samples by the status of their file (generated = "
      "the sum)\n"
      "# TYPE trellis_orchestrator_samples gauge\n";
  const auto samples = state.samples_by_status();
  for (const auto& [status, n] : samples) {
    if (status != "assigned")
      out += fmt::format("trellis_orchestrator_samples{{status=\"{}\"}} {}\n", status, n);
  }
  out += fmt::format("trellis_orchestrator_samples{{status=\"generated\"}} {}\n",
                     generated_samples(samples));
  gauge("trellis_orchestrator_judged_samples_per_second",
        "samples validators accepted or rejected per second over the last 60 s",
        fmt::format("{}", judged_per_s()));
  const NodeCounts nodes = state.node_counts();
  out += fmt::format(
      "# HELP trellis_orchestrator_nodes nodes registered (and not evicted) and evicted\n"
      "# TYPE trellis_orchestrator_nodes gauge\n"
      "trellis_orchestrator_nodes{{state=\"registered\"}} {}\n"
      "trellis_orchestrator_nodes{{state=\"evicted\"}} {}\n",
      nodes.registered, nodes.evicted);
  gauge("trellis_orchestrator_allowlist_revision",
        "revision of the IP allowlist relays poll (GET /allowlist)",
        std::to_string(state.allowlist(unix_seconds()).revision));
  out +=
      "# HELP trellis_orchestrator_uploads_refused_total refused requests and rejected uploads "
      "since start, by reason\n"
      "# TYPE trellis_orchestrator_uploads_refused_total counter\n";
  std::lock_guard lock(metrics_mu);
  for (const auto& [kind, n] : refused) {
    out += fmt::format("trellis_orchestrator_uploads_refused_total{{reason=\"{}\"}} {}\n", kind, n);
  }
  return out;
}

void Server::Impl::ledger_head(const httplib::Request& req, httplib::Response& res) {
  const auto [seq, hash] = state.ledger_head();
  reply_json(res, {{"ledger", state.ledger().id()},
                   {"keeper", state.ledger().keeper().address()},
                   {"seq", seq},
                   {"hash", hash}});
}

}  // namespace trellis::orchestrator
