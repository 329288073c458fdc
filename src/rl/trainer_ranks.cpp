#include "rl/trainer_ranks.h"

#include "common/error.h"
#include "common/logging.h"
#include "model/checkpoint.h"
#include "model/prompting.h"
#include "rl/checkpoints.h"

namespace trellis::rl {

void RankLeader::send(const Json& message) {
  if (group_.world() > 1) group_.broadcast_from_leader(message.dump());
}

Json RankLeader::resume(const std::filesystem::path& checkpoint) {
  send({{"op", "resume"}});
  return load_checkpoint_state(checkpoint, trainer_.optimizer());
}

Metrics RankLeader::step(const std::vector<Rollout>& batch) {
  if (group_.world() > 1) {
    Json rollouts = Json::array();
    for (const auto& r : batch) rollouts.push_back(rollout_json(r));
    send({{"op", "step"}, {"batch", rollouts}});
  }
  return trainer_.step(batch);
}

std::filesystem::path RankLeader::checkpoint(const std::function<std::filesystem::path()>& save) {
  send({{"op", "checkpoint"}});
  return save();
}

void RankLeader::stop() { send({{"op", "stop"}}); }

void run_follower(const Config& config, const model::Compute& compute, ProcessGroup& group) {
  const std::string base = config.get<std::string>("model.path");
  if (base.empty()) fail("model.path", "no model: set [model] path (a Hugging Face directory)");
  auto model = model::load_transformer(base, compute);
  const auto prompting = model::Prompting::load(base, model->config());
  const auto trainer = make_trainer(TrainerConfig::from_config(config), prompting.tok.vocab_size(),
                                    *model, base, compute, 0, &group);
  log::info("rank {} of {}: following rank 0", group.rank(), group.world());
  for (;;) {
    const Json message = Json::parse(group.broadcast_from_leader(""));
    const std::string op = message.at("op").get<std::string>();
    if (op == "stop") return;
    if (op == "resume") {
      trainer->optimizer().load({});
    } else if (op == "checkpoint") {
      trainer->optimizer().save({});
    } else if (op == "step") {
      std::vector<Rollout> batch;
      for (const auto& r : message.at("batch")) batch.push_back(rollout_from_json(r));
      trainer->step(batch);
    } else {
      fail("rank 0", "unknown instruction '{}'", op);
    }
  }
}

}  // namespace trellis::rl
