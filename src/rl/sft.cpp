#include "rl/sft.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/run_dir.h"
#include "engine/engine.h"
#include "env/registry.h"
#include "model/checkpoint.h"
#include "model/paged_attention.h"
#include "rl/checkpoints.h"
#include "rl/optimizer.h"
#include "rl/packing.h"
#include "rl/rollouts.h"

namespace trellis::rl {
namespace fs = std::filesystem;
namespace {

// Held-out evaluation tasks are generated from the run seed xor this, never from the run seed.
constexpr uint64_t kEvalSeedSalt = 0x6576616c2d736674ull;  // "eval-sft"

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<env::Message> messages_of(const Json& prompt, const std::string& where) {
  if (prompt.is_string()) return {{"user", prompt.get<std::string>()}};
  if (!prompt.is_array() || prompt.empty()) {
    fail(where, "field 'prompt' must be a string or a non-empty list of chat messages");
  }
  std::vector<env::Message> messages;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string at = fmt::format("{}: prompt[{}]", where, i);
    env::Message m{json_required<std::string>(prompt[i], "role", at),
                   json_required<std::string>(prompt[i], "content", at)};
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      fail(at, "unknown role '{}' (system | user | assistant)", m.role);
    }
    messages.push_back(std::move(m));
  }
  return messages;
}

// The run's settings, each checked against the key that sets it.
struct Settings {
  fs::path model_path, out;
  int64_t steps = 0, batch_size = 0, eval_every = 0, eval_tasks = 0, max_tokens = 0;
  int64_t micro_batch_tokens = 0, checkpoint_every = 0, keep_checkpoints = 0;
  bool activation_checkpointing = false;
  int difficulty = 1;
  uint64_t seed = 0;
  std::string system_prompt;

  static Settings from_config(const Config& c) {
    Settings s;
    s.model_path = c.get<std::string>("model.path");
    if (s.model_path.empty()) fail("model.path", "set the base model directory");
    s.out = c.get<std::string>("sft.out");
    s.steps = c.get_at_least<int64_t>("sft.steps", 1);
    s.batch_size = c.get_at_least<int64_t>("sft.batch_size", 1);
    s.eval_every = c.get_at_least<int64_t>("sft.eval_every", 0);
    s.eval_tasks = c.get_at_least<int64_t>("sft.eval_tasks", 0);
    s.max_tokens = c.get_at_least<int64_t>("rl.max_tokens", 1);
    s.micro_batch_tokens = c.get_at_least<int64_t>("trainer.micro_batch_tokens", 1);
    s.checkpoint_every = c.get_at_least<int64_t>("trainer.checkpoint_every", 0);
    s.keep_checkpoints = c.get_at_least<int64_t>("trainer.keep_checkpoints", 0);
    s.activation_checkpointing = c.get<bool>("trainer.activation_checkpointing");
    s.difficulty = static_cast<int>(c.get<int64_t>("env.difficulty"));
    env::check_difficulty(s.difficulty, "env.difficulty");
    s.seed = static_cast<uint64_t>(c.get<int64_t>("run.seed"));
    s.system_prompt = c.get<std::string>("env.system_prompt");
    return s;
  }
};

}  // namespace

int32_t completion_end_id(const model::Prompting& prompting) {
  if (prompting.chat) {
    if (auto id = prompting.tok.token_to_id(prompting.chat->end_of_turn())) return *id;
  }
  if (!prompting.stop_ids.empty()) return prompting.stop_ids.front();
  fail("model", "the model has neither a chat template nor an EOS token: a completion cannot end");
}

SftExample make_example(const model::Prompting& prompting, const std::vector<env::Message>& prompt,
                        const std::string& completion, std::string where) {
  SftExample e;
  e.where = std::move(where);
  e.sequence.prompt = encode_prompt(prompting, prompt);
  e.sequence.completion = prompting.tok.encode(completion, /*allow_special=*/false);
  e.sequence.completion.push_back(completion_end_id(prompting));
  return e;
}

SftExample task_example(const model::Prompting& prompting, const env::Environment& environment,
                        const env::Task& task, const std::string& system_prompt) {
  if (!task.solution) fail(task.task_id, "the task has no reference solution to train on");
  return make_example(prompting, environment.build_prompt(task, {.system_prompt = system_prompt}),
                      *task.solution, task.task_id);
}

std::vector<SftExample> load_sft_examples(const fs::path& path, const model::Prompting& prompting) {
  std::istringstream in(read_file(path));
  std::vector<SftExample> examples;
  int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path.string(), number);
    const Json j = parse_json(line, where);
    if (!j.is_object()) fail(where, "expected a JSON object {{\"prompt\", \"completion\"}}");
    if (!j.contains("prompt")) fail(where, "missing field 'prompt'");
    const auto messages = messages_of(j["prompt"], where);
    const auto completion = json_required<std::string>(j, "completion", where);
    examples.push_back(make_example(prompting, messages, completion, where));
  }
  if (examples.empty()) fail(path.string(), "no examples (sft.data)");
  return examples;
}

SftData::SftData(const Config& config, const model::Prompting& prompting,
                 const env::Environment& environment, uint64_t seed)
    : prompting_(prompting), environment_(environment) {
  system_prompt_ = config.get<std::string>("env.system_prompt");
  path_ = config.get<std::string>("sft.data");
  if (!path_.empty()) {
    examples_ = load_sft_examples(path_, prompting);
    order_.emplace(examples_.size(), seed);
    return;
  }
  tasks_ = std::make_unique<TaskSource>(environment, config, seed);
  const auto probe = tasks_->take(1);
  tasks_->set_cursor(0);
  if (!probe.front().solution) {
    const std::string dataset = config.get<std::string>("env.tasks");
    if (dataset.empty()) {
      fail("env.name",
           "environment '{}' generates tasks without reference solutions; give "
           "(prompt, completion) examples in sft.data",
           environment.name());
    }
    fail(dataset, "task '{}' has no reference solution; SFT needs one per task (or set sft.data)",
         probe.front().task_id);
  }
}

SftData::~SftData() = default;

std::vector<SftExample> SftData::batch(int64_t step, int64_t n) {
  std::vector<SftExample> out;
  out.reserve(n);
  if (tasks_) {
    tasks_->set_cursor(step * n);
    for (const auto& task : tasks_->take(n)) {
      out.push_back(task_example(prompting_, environment_, task, system_prompt_));
    }
    return out;
  }
  for (int64_t i = step * n; i < (step + 1) * n; ++i) out.push_back(examples_[order_->at(i)]);
  return out;
}

std::string SftData::describe() const {
  if (tasks_) return tasks_->describe() + " with their reference solutions";
  return fmt::format("{} examples from {}", examples_.size(), path_);
}

SftLoss sft_backward(model::Transformer& model, const std::vector<SftExample>& batch,
                     int64_t micro_batch_tokens, int64_t vocab_limit,
                     bool activation_checkpointing) {
  SftLoss out;
  const int64_t context = model.config().max_position_embeddings;
  std::vector<int64_t> lengths;
  for (const auto& e : batch) {
    const int64_t len = e.sequence.input_length();
    if (len > micro_batch_tokens) {
      fail(e.where, "the example has {} tokens, more than trainer.micro_batch_tokens = {}", len,
           micro_batch_tokens);
    }
    if (context > 0 && len > context) {
      fail(e.where, "the example has {} tokens, more than the model's context of {}", len, context);
    }
    lengths.push_back(len);
    out.input_tokens += len;
    out.completion_tokens += static_cast<int64_t>(e.sequence.completion.size());
  }
  if (out.completion_tokens == 0) return out;
  // Each micro-batch's summed NLL over the batch's token count: the gradients add up to those of
  // the token mean over the whole batch.
  const double scale = 1.0 / static_cast<double>(out.completion_tokens);
  for (const auto& bin : pack_first_fit_decreasing(lengths, micro_batch_tokens)) {
    std::vector<const Sequence*> sequences;
    for (size_t i : bin) sequences.push_back(&batch[i].sequence);
    const auto logp =
        sequence_logprobs(model, pack_sequences(sequences), vocab_limit, /*with_entropy=*/false,
                          {.recompute_layers = activation_checkpointing})
            .logp;
    const auto loss = logp.sum() * -scale;
    loss.backward();
    out.loss += loss.item<double>();
    ++out.micro_batches;
  }
  return out;
}

Metrics evaluate_greedy(model::Transformer& model, const model::Prompting& prompting,
                        const env::Environment& environment, const std::vector<env::Task>& tasks,
                        int64_t max_tokens, const std::string& system_prompt) {
  Metrics m;
  if (tasks.empty()) return m;
  // A KV cache just large enough for every task at once.
  int64_t kv_tokens = 0;
  for (const auto& task : tasks) {
    const auto prompt =
        encode_prompt(prompting, environment.build_prompt(task, {.system_prompt = system_prompt}));
    const int64_t len = static_cast<int64_t>(prompt.size()) + max_tokens;
    kv_tokens += (len / model::kBlockSize + 2) * model::kBlockSize;
  }
  engine::EngineOptions eo;
  eo.max_num_seqs = static_cast<int64_t>(tasks.size());
  eo.kv_cache_tokens = kv_tokens;
  eo.vocab_limit = prompting.tok.vocab_size();
  RolloutOptions ro;
  ro.group_size = 1;
  ro.max_tokens = max_tokens;
  ro.sampling.temperature = 0;
  ro.system_prompt = system_prompt;
  std::vector<RolloutGroup> groups;
  {
    engine::Engine engine(model, eo);
    groups = generate_rollouts(engine, prompting, environment, tasks, ro);
  }
  double reward = 0, passed = 0, length = 0;
  for (const auto& g : groups) {
    for (const auto& r : g.rollouts) {
      reward += r.task_reward;
      passed += r.task_reward >= 1.0;
      length += static_cast<double>(r.tokens());
    }
  }
  const double n = static_cast<double>(tasks.size());
  m.set("eval/reward", reward / n);
  m.set("eval/pass", passed / n);
  m.set("eval/length", length / n);
  return m;
}

SftResult run_sft(const Config& config, const model::Compute& compute, const SftOptions& options) {
  const Settings s = Settings::from_config(config);
  const auto environment = env::make_environment(config);
  const auto optimizer_config = OptimizerConfig::from_config(config, "sft");
  auto print = options.on_line ? options.on_line : [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };

  SftResult result;
  result.run_dir = make_run_dir(config);
  const fs::path checkpoints = result.run_dir / "checkpoints";
  const auto latest = latest_checkpoint(checkpoints);
  if (options.resume && !latest) {
    fail(checkpoints.string(), "no checkpoint to resume from; run without --resume to start");
  }
  if (!options.resume && latest) {
    fail(result.run_dir.string(),
         "the run directory already has checkpoints; pass --resume to continue it, or choose "
         "another run directory");
  }

  const fs::path weights = options.resume ? *latest : s.model_path;
  auto model = model::load_transformer(weights, compute);
  const auto prompting = model::Prompting::load(s.model_path, model->config());
  const int64_t vocab_limit = prompting.tok.vocab_size();
  model->set_requires_grad(true);
  Optimizer optimizer(model->parameters(), optimizer_config);
  int64_t start = 0;
  if (options.resume) {
    const Json progress = load_checkpoint_state(*latest, optimizer);
    if (progress.contains("command") && progress["command"] != "sft") {
      fail(latest->string(), "a checkpoint of `trellis {}`, not of `trellis sft`",
           progress["command"].get<std::string>());
    }
    start = progress["step"].get<int64_t>();
    log::info("sft: resuming from {} (step {})", latest->string(), start);
  }

  SftData data(config, prompting, *environment, s.seed);
  const auto eval_tasks =
      env::generate_tasks(*environment, s.eval_tasks, s.seed ^ kEvalSeedSalt, s.difficulty);
  log::info("sft: {} ({:.1f}M parameters) on {}; {}; {} steps x {} examples; run dir {}",
            weights.string(), model->config().num_parameters() / 1e6, compute.describe(),
            data.describe(), s.steps, s.batch_size, result.run_dir.string());

  MetricsLog metrics_log(result.run_dir / "metrics.jsonl", start + 1);
  const std::vector<ConsoleField> fields = {{"loss", "loss", "%.4f"},
                                            {"grad_norm", "grad norm", "%.3f"},
                                            {"lr", "lr", "%.2e"},
                                            {"throughput/train_tok_s", "tok/s", "%.0f"},
                                            {"eval/pass", "eval pass", "%.3f"},
                                            {"eval/reward", "eval reward", "%.3f"}};
  for (int64_t i = start; i < s.steps; ++i) {
    const int64_t step = i + 1;
    const auto t0 = std::chrono::steady_clock::now();
    const auto batch = data.batch(i, s.batch_size);
    const SftLoss loss =
        sft_backward(*model, batch, s.micro_batch_tokens, vocab_limit, s.activation_checkpointing);
    const auto info = optimizer.step();
    const double seconds = seconds_since(t0);

    Metrics m;
    m.set("loss", loss.loss);
    m.set("grad_norm", info.grad_norm);
    m.set("lr", info.lr);
    m.set("tokens/completion", static_cast<double>(loss.completion_tokens));
    m.set("throughput/train_tok_s", static_cast<double>(loss.input_tokens) / seconds);
    m.set("time/step", seconds);
    if (s.eval_tasks > 0 && ((s.eval_every > 0 && step % s.eval_every == 0) || step == s.steps)) {
      const auto te = std::chrono::steady_clock::now();
      m.append(evaluate_greedy(*model, prompting, *environment, eval_tasks, s.max_tokens,
                               s.system_prompt));
      model->set_requires_grad(true);  // drops the casts generation cached
      m.set("time/eval", seconds_since(te));
    }
    metrics_log.write(step, m);
    print(console_line(step, s.steps, m, fields));
    result.last = m;

    if ((s.checkpoint_every > 0 && step % s.checkpoint_every == 0) || step == s.steps) {
      save_checkpoint(checkpoints, step, *model, optimizer, s.model_path,
                      Json{{"command", "sft"}, {"examples", step * s.batch_size}});
      prune_checkpoints(checkpoints, s.keep_checkpoints);
    }
  }
  result.steps = std::max(start, s.steps);
  if (start >= s.steps) log::info("sft: the run had already reached step {}", start);
  if (!s.out.empty()) {
    write_model_dir(*model, s.model_path, s.out);
    log::info("sft: final model -> {}", s.out.string());
  }
  return result;
}

}  // namespace trellis::rl
