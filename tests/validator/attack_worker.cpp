// trellis_attack: a dishonest inference worker for the attack-suite tests (built with the tests,
// never part of the shipped binary). Each run plays one row of the attack matrix of
// specs/toploc.md §7 as a node of its own: it waits for a policy version, generates a submission
// the way an honest worker would (or with the cheat the attack names), tampers with it, signs it
// with its own key and uploads it. It prints one JSON line: the attack, its node address, the
// step and submission it uploaded, and what the orchestrator answered.
//
//   trellis_attack CONFIG --run-dir DIR --attack NAME [--other-model DIR] [--steal-from DIR]
//                  [--set key=value ...]
//
// The attacker is a smart one: whatever it changes, it recomputes what it can without the
// checks' secrets (rewards, advantages, proofs by prefill of the claimed policy, log-probs), so
// that each attack is caught by the check that the matrix names and not by a side effect.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "common/error.h"
#include "common/files.h"
#include "common/identity.h"
#include "common/json.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "env/registry.h"
#include "model/checkpoint.h"
#include "model/compute.h"
#include "model/prompting.h"
#include "orchestrator/client.h"
#include "pipeline/fixed_data_sampler.h"
#include "pipeline/partial_rollouts.h"
#include "pipeline/policy_fetcher.h"
#include "pipeline/rollout_rows.h"
#include "rl/advantages.h"
#include "rl/rl_loop.h"
#include "rl/rollouts.h"
#include "rl/task_source.h"
#include "rollout/rollout_file.h"
#include "rollout/signing.h"
#include "toploc/proof.h"
#include "toploc/proof_builder.h"
#include "toploc/recompute.h"

namespace trellis {
namespace fs = std::filesystem;
namespace {

using Records = std::vector<rollout::RolloutRecord>;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Attacker {
  const Config& config;
  std::string attack;
  fs::path run_dir, other_model;
  fs::path stolen;  // replay attacks: the accepted files of others they got hold of
  model::Compute compute;
  std::atomic<bool> stop{false};
  rl::RlLoopConfig rl;
  orchestrator::Client client;
  Identity identity;
  std::unique_ptr<env::Environment> environment;
  std::unique_ptr<rl::TaskSource> tasks;
  std::unique_ptr<pipeline::FixedDataSampler> sampler;
  fs::path base_model;
  std::unique_ptr<model::Transformer> policy;  // the claimed version's weights
  std::unique_ptr<model::Prompting> prompting;
  int64_t version = -1;
  int64_t assigned_groups = 1;  // what the orchestrator's work allows

  Attacker(const Config& c, std::string name, fs::path dir, fs::path other)
      : config(c),
        attack(std::move(name)),
        run_dir(std::move(dir)),
        other_model(std::move(other)),
        compute(model::resolve_compute(c.get<std::string>("compute.device"),
                                       c.get<std::string>("compute.dtype"))),
        rl(rl::RlLoopConfig::from_config(c)),
        client(orchestrator::client_url(c)),
        identity(Identity::load_or_create(run_dir / "keys" / (attack + ".key"))) {
    environment = env::make_environment(c);
    tasks = std::make_unique<rl::TaskSource>(*environment, c, rl.seed);
    sampler = std::make_unique<pipeline::FixedDataSampler>(*tasks, identity.address(), c);
    base_model = c.get<std::string>("model.path");
  }

  // The newest policy version, at least `min_version`, fetched through the relays as a worker
  // does (registering the node first, so that the relays serve it).
  void fetch_policy(int64_t min_version) {
    pipeline::PolicyFetcher fetcher(config, run_dir / "policies" / attack, base_model, identity,
                                    stop);
    const double t0 = now_s();
    while (true) {
      if (auto newer = fetcher.newer_than(min_version - 1)) {
        policy = model::load_transformer(newer->second, compute);
        version = newer->first;
        break;
      }
      if (now_s() - t0 > 600) fail(attack, "no policy version >= {} within 600 s", min_version);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    prompting =
        std::make_unique<model::Prompting>(model::Prompting::load(base_model, policy->config()));
  }

  // Honest generation with `model` of the groups drawn for (step, submission), with proofs.
  std::vector<rl::RolloutGroup> generate(model::Transformer& model, int64_t step,
                                         int64_t submission, std::vector<env::Task>& drawn) {
    drawn = sampler->draw(step, submission, assigned_groups);
    engine::Engine engine(
        model, pipeline::worker_engine_options(config, false, prompting->tok.vocab_size()));
    toploc::ProofBuilder proofs;
    rl::feed_proofs(engine, proofs);
    engine.update_weights([](model::Transformer&) {}, version);
    auto options = rl::rollout_options(rl, config);
    options.proofs = &proofs;
    options.seed = sampler->seed(step, submission);
    return rl::generate_rollouts(engine, *prompting, *environment, drawn, options);
  }

  Records to_rows(std::vector<rl::RolloutGroup> groups, const std::vector<env::Task>& drawn,
                  const std::string& run_id, int64_t step, int64_t submission) {
    for (auto& g : groups) {
      std::vector<double> rewards;
      for (const auto& r : g.rollouts) rewards.push_back(r.reward);
      const auto adv = rl::group_advantages(rewards, rl.normalize_std);
      for (size_t i = 0; i < adv.size(); ++i) g.rollouts[i].advantage = adv[i];
    }
    return pipeline::to_records(
        {run_id, identity.address(), static_cast<int32_t>(step), static_cast<int32_t>(submission)},
        groups, drawn);
  }

  // What a smart cheat recomputes after changing tokens: the proof (a prefill of the claimed
  // policy), the behaviour log-probs under the claimed policy, the reward and the advantages.
  void recompute(Records& rows, const std::vector<env::Task>& drawn) {
    const auto rollout = rl::rollout_options(rl, config);
    for (auto& r : rows) {
      r.proof =
          toploc::build_proof(toploc::committed_rows(*policy, r.prompt_tokens, r.completion_tokens),
                              static_cast<size_t>(policy->config().hidden_size));
      std::vector<int64_t> seq(r.prompt_tokens.begin(), r.prompt_tokens.end());
      seq.insert(seq.end(), r.completion_tokens.begin(), r.completion_tokens.end());
      torch::NoGradGuard no_grad;
      const auto logits = policy->forward(torch::tensor(seq)).logits.to(torch::kFloat32);
      const auto lp =
          torch::log_softmax(logits.slice(1, 0, prompting->tok.vocab_size()) / rl.temperature, 1);
      const int64_t p = static_cast<int64_t>(r.prompt_tokens.size());
      r.completion_logprobs.clear();
      for (size_t j = 0; j < r.completion_tokens.size(); ++j)
        r.completion_logprobs.push_back(
            lp[p - 1 + static_cast<int64_t>(j)][r.completion_tokens[j]].item<float>());
      r.token_versions.assign(r.completion_tokens.size(), static_cast<int32_t>(version));
      const auto& task = drawn[static_cast<size_t>(r.group_index)];
      const std::string text =
          json_safe_text(prompting->tok.decode(r.completion_tokens, /*skip_special=*/true));
      r.task_reward = static_cast<float>(environment->score(task, text).reward);
      const std::string finish = r.finish_reason == "eos" ? "stop" : r.finish_reason;
      r.reward =
          static_cast<float>(rl::training_reward(rollout, r.task_reward, r.target_length, finish,
                                                 static_cast<int64_t>(r.completion_tokens.size())));
      r.length_penalty = r.task_reward - r.reward;
    }
    set_advantages(rows);
  }

  void set_advantages(Records& rows) {
    std::map<int32_t, std::vector<size_t>> groups;
    for (size_t i = 0; i < rows.size(); ++i) groups[rows[i].group_index].push_back(i);
    for (const auto& [g, members] : groups) {
      std::vector<double> rewards;
      for (size_t m : members) rewards.push_back(rows[m].reward);
      const auto adv = rl::group_advantages(rewards, rl.normalize_std);
      for (size_t j = 0; j < members.size(); ++j)
        rows[members[j]].advantage = static_cast<float>(adv[j]);
    }
  }

  std::string encode(const Records& rows) {
    return rollout::encode_rollout_file(rows, {{"trellis.node_address", identity.address()}},
                                        rollout::sign_body_with(identity));
  }

  int32_t stop_token() const {
    const auto stops = prompting->chat ? prompting->chat_stop_ids() : prompting->stop_ids;
    return stops.front();
  }

  bool is_stop(int32_t t) const {
    const auto stops = prompting->chat ? prompting->chat_stop_ids() : prompting->stop_ids;
    return std::find(stops.begin(), stops.end(), t) != stops.end();
  }

  // The tampered file for (step, submission), per attack.
  std::string build(const std::string& run_id, int64_t step, int64_t submission) {
    std::vector<env::Task> drawn;
    const auto honest = [&](model::Transformer& m) {
      return to_rows(generate(m, step, submission, drawn), drawn, run_id, step, submission);
    };
    if (attack == "noisy_weights" || attack == "fp8_weights") {
      auto cheap = model::load_transformer(
          fs::path(run_dir / "policies" / attack) / ("step_" + std::to_string(version)), compute);
      torch::NoGradGuard no_grad;
      for (const auto& [name, p] : cheap->named_parameters()) {
        if (attack == "noisy_weights") {
          p.add_(torch::randn_like(p) * p.to(torch::kFloat32).std().item<double>() * 0.05);
        } else {  // e4m3: 3 mantissa bits, magnitudes clamped to 448
          auto f = p.to(torch::kFloat32);
          const auto e = torch::floor(torch::log2(f.abs().clamp_min(1e-30)));
          const auto scale = torch::pow(2.0, e - 3);
          p.copy_((torch::round(f / scale) * scale).clamp(-448, 448));
        }
      }
      return encode(honest(*cheap));
    }
    if (attack == "older_policy") {  // version 0's weights, labelled as the newest version
      auto old = model::load_transformer(base_model, compute);
      return encode(honest(*old));
    }
    if (attack == "small_model") {  // tokens of another (cheaper) model, proofs of the claimed
      auto other = model::load_transformer(other_model, compute);
      auto rows = honest(*other);
      recompute(rows, drawn);
      return encode(rows);
    }
    auto rows = honest(*policy);
    if (attack == "edited_tokens") {
      for (auto& r : rows) {
        for (size_t j = r.completion_tokens.size() / 2; j + 1 < r.completion_tokens.size(); ++j) {
          int32_t t = (r.completion_tokens[j] + 7) % prompting->tok.vocab_size();
          while (is_stop(t)) t = (t + 1) % prompting->tok.vocab_size();
          r.completion_tokens[j] = t;
        }
      }
      recompute(rows, drawn);
    } else if (attack == "truncated") {
      for (auto& r : rows) {
        r.completion_tokens.resize(std::max<size_t>(2, r.completion_tokens.size() / 2));
        if (is_stop(r.completion_tokens.back())) r.completion_tokens.back() = 'a';
        r.finish_reason = "length";
      }
      recompute(rows, drawn);
    } else if (attack == "early_eos") {
      for (auto& r : rows) {
        r.completion_tokens.resize(std::max<size_t>(2, r.completion_tokens.size() / 3));
        r.completion_tokens.back() = stop_token();
        r.finish_reason = "eos";
      }
      recompute(rows, drawn);
    } else if (attack == "cherry_picked") {  // the prompts of another draw, and its seeds
      std::vector<env::Task> other;
      auto groups = generate(*policy, step, submission + 1000, other);
      rows = to_rows(std::move(groups), other, run_id, step, submission);
    } else if (attack == "repeated_prompts") {  // the first group twice (or more)
      // Work of one group leaves no room for a repeat within the file: the second copy then
      // exceeds the assignment, which the orchestrator catches first.
      const int32_t groups = std::max(2, rows.back().group_index + 1);
      Records twice;
      for (const auto& r : rows) {
        if (r.group_index != 0) continue;
        for (int32_t g = 0; g < groups; ++g) {
          twice.push_back(r);
          twice.back().group_index = g;
        }
      }
      std::stable_sort(twice.begin(), twice.end(),
                       [](const auto& a, const auto& b) { return a.group_index < b.group_index; });
      rows = twice;
    } else if (attack == "inflated_rewards") {
      for (auto& r : rows) {
        r.task_reward = 1;
        r.reward = 1 - r.length_penalty;
      }
      rows.front().task_reward = rows.front().reward = 0;  // keep some signal in the group
      rows.front().length_penalty = 0;
      set_advantages(rows);
    } else if (attack == "inflated_advantages") {
      for (auto& r : rows) r.advantage = r.advantage * 10 + 1;
    } else if (attack == "wrong_proof_length") {
      for (auto& r : rows) r.proof += r.proof.substr(0, toploc::chunk_proof_bytes(128));
    } else if (attack == "malformed_file") {
      std::string bytes = encode(rows);
      bytes.resize(bytes.size() / 2);
      return bytes;
    } else if (attack == "replayed_file" || attack == "replayed_resigned") {
      // An accepted file of another node, as it is or re-signed as this node's (as many of its
      // groups as this node's work allows, its tokens labelled with the version this node
      // holds, so that the orchestrator's version window passes it on to a validator).
      const auto found = replayable();
      if (!found) fail(attack, "no accepted file of another node to replay yet");
      const std::string bytes = read_file(*found);
      if (attack == "replayed_file") return bytes;
      auto replayed = rollout::decode_rollout_file(bytes, found->string()).rows;
      std::erase_if(replayed, [&](const auto& r) { return r.group_index >= assigned_groups; });
      for (auto& r : replayed) {
        r.node_address = identity.address();
        r.step = static_cast<int32_t>(step);
        r.submission = static_cast<int32_t>(submission);
        r.token_versions.assign(r.completion_tokens.size(), static_cast<int32_t>(version));
      }
      return encode(replayed);
    } else if (attack != "honest") {
      fail("--attack", "unknown attack '{}'", attack);
    }
    if (attack == "older_policy") {
      for (auto& r : rows) r.token_versions.assign(r.completion_tokens.size(), version);
    }
    return encode(rows);
  }

  // The newest accepted file of another node (of the highest step) in the stolen store; nothing
  // before one exists. Accepted files are the trainer's alone, so a replayer needs an accomplice
  // (or a leak): --steal-from stands in for it.
  std::optional<fs::path> replayable() const {
    std::optional<fs::path> newest;
    int64_t newest_step = -1;
    std::error_code ec;
    for (const auto& dir : fs::directory_iterator(stolen, ec)) {
      const std::string name = dir.path().filename().string();
      if (!name.starts_with("step_")) continue;
      const int64_t step = std::stoll(name.substr(5));
      if (step <= newest_step) continue;
      for (const auto& f : fs::directory_iterator(dir.path(), ec)) {
        const std::string file = f.path().filename().string();
        if (file.ends_with(".parquet") && !file.starts_with(identity.address())) {
          newest = f.path();
          newest_step = step;
          break;
        }
      }
    }
    return newest;
  }

  // Asks for work like a worker (refetching the policy when the run has moved past it), builds
  // the tampered file for it and uploads it, until the orchestrator takes it in (validating,
  // accepted) or rejects it; work whose step filled first (dropped) is asked for again.
  Json run(int64_t min_version) {
    fetch_policy(min_version);
    const double t0 = now_s();
    const int64_t max_groups = config.get_at_least<int64_t>("infer.groups_per_submission", 1);
    std::string last_error;
    while (now_s() - t0 < 600) {
      const auto status = client.status();
      if (status.done) break;
      if (version < status.step - status.async_level)
        fetch_policy(status.step - status.async_level);
      // A replayer takes work only once there is something to replay: work it cannot deliver
      // would hold its step's share for a whole lease.
      if ((attack == "replayed_file" || attack == "replayed_resigned") && !replayable()) {
        last_error = "no accepted file of another node to replay yet";
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      const auto answer = client.request_work(identity, version, max_groups);
      if (!answer.work) {
        last_error = answer.wait_reason;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        continue;
      }
      const auto& work = *answer.work;
      assigned_groups = work.groups;
      std::string file;
      try {
        file = build(status.run_id, work.step, work.submission);
      } catch (const Error& e) {
        last_error = e.what();  // e.g. nothing to replay yet
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      Json out = {{"attack", attack},      {"node", identity.address()},
                  {"step", work.step},     {"submission", work.submission},
                  {"groups", work.groups}, {"version", version}};
      try {
        out["upload"] = client.submit(identity, work.step, work.submission, file);
        if (out["upload"] != "dropped") return out;
        last_error = "dropped";
      } catch (const Error& e) {
        last_error = e.what();
        if (last_error.find("422") != std::string::npos ||
            last_error.find("rejected") != std::string::npos) {
          out["upload"] = "rejected";
          out["error"] = last_error;
          return out;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    fail(attack, "could not upload: {}", last_error);
  }
};

}  // namespace
}  // namespace trellis

int main(int argc, char** argv) {
  using namespace trellis;
  CLI::App app{"A dishonest inference worker for the attack-suite tests"};
  std::vector<std::string> configs, overrides;
  std::string run_dir, attack, other_model, stolen;
  int64_t min_version = 0;
  app.add_option("config", configs, "TOML configuration files")->check(CLI::ExistingFile);
  app.add_option("--set", overrides, "section.key=value");
  app.add_option("--run-dir", run_dir, "where its keys and fetched policies go")->required();
  app.add_option("--attack", attack, "the attack to play")->required();
  app.add_option("--other-model", other_model, "small_model: the cheaper model that samples");
  app.add_option("--min-version", min_version, "wait for at least this policy version");
  app.add_option("--steal-from", stolen,
                 "replay attacks: a rollout store (step_N/*.parquet) to take others' files from");
  CLI11_PARSE(app, argc, argv);
  try {
    const Config config = Config::resolve(
        std::vector<std::filesystem::path>(configs.begin(), configs.end()), overrides);
    model::init_compute_runtime(1);
    Attacker attacker(config, attack, run_dir, other_model);
    attacker.stolen = stolen;
    const Json out = attacker.run(min_version);
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
