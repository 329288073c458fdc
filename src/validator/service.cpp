#include "validator/service.h"

#include <chrono>
#include <thread>

#include "common/clock.h"
#include "common/error.h"
#include "common/exception_message.h"
#include "common/identity.h"
#include "common/logging.h"
#include "ledger/entry.h"
#include "model/hf_config.h"
#include "model/prompting.h"
#include "orchestrator/client.h"
#include "orchestrator/credentials.h"
#include "orchestrator/registration_keeper.h"
#include "validator/policy_cache.h"
#include "validator/validator.h"

namespace trellis::validator {
namespace fs = std::filesystem;
namespace {

class Service {
 public:
  Service(const Config& config, const fs::path& run_dir, const model::Compute& compute,
          const std::atomic<bool>& stop)
      : stop_(stop),
        client_(orchestrator::client_url(config),
                orchestrator::client_token(config, run_dir, orchestrator::Role::kValidator)) {
    name_ = config.get<std::string>("validator.name");
    poll_s_ = config.get_at_least<double>("validator.poll_s", 0.01);
    fs::path key_file = config.get<std::string>("validator.key_file");
    if (key_file.empty()) key_file = run_dir / "keys" / (name_ + ".key");
    identity_ = std::make_unique<Identity>(Identity::load_or_create(key_file));
    const fs::path base_model = config.get<std::string>("model.path");
    if (base_model.empty())
      fail("model.path", "no model: set [model] path (the tokenizer and architecture)");
    const auto architecture = model::HfConfig::load(base_model);
    prompting_ =
        std::make_unique<model::Prompting>(model::Prompting::load(base_model, architecture));
    policies_ = std::make_unique<PolicyCache>(config, run_dir / "policies" / name_, base_model,
                                              compute, stop);
    // A policy that cannot be fetched or loaded is our problem, not the file's: no verdict.
    const ModelOf model_of = [this](int64_t v) -> model::Transformer& {
      try {
        return policies_->model(v);
      } catch (const std::exception& e) {
        throw CannotJudge(fmt::format("policy version {} is not available: {}", v, message_of(e)));
      }
    };
    validator_ = std::make_unique<Validator>(
        config, *prompting_, model_of,
        ModelLimits{architecture.vocab_size, architecture.max_position_embeddings});
    registration_ = std::make_unique<orchestrator::RegistrationKeeper>(
        client_.base_url(),
        orchestrator::client_token(config, run_dir, orchestrator::Role::kValidator), *identity_,
        stop);
    log::info(
        "validator {} ({}), orchestrator {}; {} of each file's completions (at least {}) "
        "checked by prefill",
        name_, identity_->address(), client_.base_url(), validator_->rules().sample_fraction,
        validator_->rules().min_samples);
  }

  void run() {
    double last_warning = -1e9;
    while (!stop_) {
      // The orchestrator unreachable, a download that failed, a policy we cannot fetch: no
      // verdict (the lease runs out and the file is offered again), and the service carries on.
      try {
        if (!validate_one()) sleep();
      } catch (const std::exception& e) {
        if (monotonic_seconds() - last_warning > 10) {
          log::warn("{}", message_of(e));
          last_warning = monotonic_seconds();
        }
        sleep();
      }
      if (done_) {
        log::info("the run is done; exiting");
        return;
      }
    }
  }

 private:
  void sleep() {
    for (double slept = 0; slept < poll_s_ && !stop_; slept += 0.05)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // Claims, judges and decides one submission; false when none was waiting.
  bool validate_one() {
    const auto status = client_.status();
    if (status.done) {
      done_ = true;
      return false;
    }
    // Relays serve the pool's registered nodes: a validator registers like a worker, and stays
    // live by registering again from the keeper's thread (orchestrator.registration_ttl_s),
    // however long a judgement or a policy download takes.
    if (!registration_->registered()) return false;
    const auto claimed = client_.claim_validation(name_);
    if (!claimed.claim) return false;
    const auto& claim = *claimed.claim;
    if (!status.trainer_public_key.empty()) policies_->set_trainer_key(status.trainer_public_key);
    const std::string what = fmt::format("step {} submission {} of node {}", claim.key.step,
                                         claim.key.submission, claim.key.node_address);
    const std::string bytes = client_.download_for_validation(claim);
    const Expected expected{status.run_id, claim.key.node_address, claim.key.step,
                            claim.key.submission, claimed.policy_version};
    Report report;
    try {
      report = validator_->validate(bytes, expected);
    } catch (const CannotJudge& e) {
      throw Error(fmt::format("cannot judge {} (left for another try): {}", what, e.what()));
    } catch (const std::exception& e) {
      // validate() turns a bad file into findings; anything left is still the file's doing.
      report = Report{};
      report.findings.push_back(
          {"schema", fmt::format("checking the file failed: {}", message_of(e))});
      report.reason = report.findings.back().text();
    }
    // Signed by this validator's key for the run's ledger: the verdict is on the record as ours.
    const ledger::Statement statement = ledger::make_statement(
        status.run_id, *identity_, "verdict",
        ledger::verdict_body(claim.key.node_address, claim.key.step, claim.key.submission,
                             claim.sha256, report.accepted, report.reason),
        ledger::now_ms());
    const std::string decided = client_.post_verdict(claim.key, report.accepted, report.reason,
                                                     name_, report.checked, statement);
    if (report.accepted && decided == "accepted") {
      validator_->accepted();
      log::info("accepted {}: {}", what, report.summary());
    } else if (report.accepted) {
      log::info("judged {} honest, but the orchestrator rejected it (its node was evicted)", what);
    } else {
      log::warn("rejected {}: {} ({})", what, report.reason, report.summary());
    }
    policies_->release_older_than(status.step - claimed.async_level);
    return true;
  }

  const std::atomic<bool>& stop_;
  orchestrator::Client client_;
  std::string name_;
  double poll_s_ = 0.5;
  bool done_ = false;
  std::unique_ptr<Identity> identity_;
  std::unique_ptr<model::Prompting> prompting_;
  std::unique_ptr<PolicyCache> policies_;
  std::unique_ptr<orchestrator::RegistrationKeeper> registration_;  // after identity_
  std::unique_ptr<Validator> validator_;
};

}  // namespace

void run_validator(const Config& config, const fs::path& run_dir, const model::Compute& compute,
                   const std::atomic<bool>& stop) {
  Service(config, run_dir, compute, stop).run();
}

}  // namespace trellis::validator
