// SFT building blocks on a tiny random model: examples (prompt tokens as `trellis rl` renders them,
// completions ending with the end-of-turn token, file:line errors), the data stream of each step,
// and the micro-batched loss against an independent per-example cross-entropy, gradients included.
#include "rl/sft.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <set>

#include "common/files.h"
#include "common/json.h"
#include "env/registry.h"
#include "error_of.h"
#include "model/checkpoint.h"
#include "model/presets.h"
#include "rl/rollouts.h"

namespace trellis::rl {
namespace {

namespace fs = std::filesystem;
using test::error_of;

fs::path temp_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("trellis_sft_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

model::Prompting prompting_of(const fs::path& dir) {
  return model::Prompting::load(dir, model::HfConfig::load(dir));
}

Config config_with(const std::vector<std::string>& overrides) {
  return Config::resolve({}, overrides);
}

class Sft : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = temp_dir("model");
    model::init_model_dir(dir_, model::Arch::Qwen2, "tiny", 3);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static fs::path dir_;
};
fs::path Sft::dir_;

TEST_F(Sft, TaskExampleIsThePromptAndTheSolutionThenEndOfTurn) {
  for (auto arch : {model::Arch::Qwen2, model::Arch::Llama}) {
    SCOPED_TRACE(model::arch_name(arch));
    const auto dir = temp_dir(std::string("arch_") + model::arch_name(arch));
    model::init_model_dir(dir, arch, "tiny", 0);
    const auto p = prompting_of(dir);
    ASSERT_TRUE(p.chat);
    const auto environment = env::make_environment("reverse_text");
    const auto task = env::generate_tasks(*environment, 1, 7, 2).front();
    ASSERT_TRUE(task.solution);
    const auto e = task_example(p, *environment, task, "");
    EXPECT_EQ(e.where, task.task_id);
    EXPECT_EQ(e.sequence.prompt, encode_prompt(p, environment->build_prompt(task)));
    const int32_t eot = *p.tok.token_to_id(p.chat->end_of_turn());
    EXPECT_EQ(completion_end_id(p), eot);
    ASSERT_FALSE(e.sequence.completion.empty());
    EXPECT_EQ(e.sequence.completion.back(), eot);
    std::vector<int32_t> body(e.sequence.completion.begin(), e.sequence.completion.end() - 1);
    EXPECT_EQ(p.tok.decode(body), *task.solution);
    // A replacement system prompt reaches the prompt tokens.
    const auto custom = task_example(p, *environment, task, "Answer briefly.");
    EXPECT_EQ(
        custom.sequence.prompt,
        encode_prompt(p, environment->build_prompt(task, {.system_prompt = "Answer briefly."})));
    fs::remove_all(dir);
  }
}

TEST_F(Sft, WithoutAChatTemplateTheCompletionEndsWithEos) {
  const auto dir = temp_dir("no_template");
  model::init_model_dir(dir, model::Arch::Qwen2, "tiny", 0);
  auto tc = read_json_file((dir / "tokenizer_config.json").string());
  tc.erase("chat_template");
  tc["eos_token"] = "<|endoftext|>";
  write_file_atomic(dir / "tokenizer_config.json", tc.dump());
  fs::remove(dir / "generation_config.json");
  auto cfg = read_json_file((dir / "config.json").string());
  cfg.erase("eos_token_id");
  write_file_atomic(dir / "config.json", cfg.dump());
  const auto p = prompting_of(dir);
  ASSERT_FALSE(p.chat);
  const int32_t eos = *p.tok.token_to_id("<|endoftext|>");
  EXPECT_EQ(completion_end_id(p), eos);
  const auto e = make_example(p, {{"user", "hi"}}, "ho", "x");
  EXPECT_EQ(e.sequence.prompt, encode_prompt(p, {{"user", "hi"}}));
  EXPECT_EQ(e.sequence.completion, (std::vector<int32_t>{'h', 'o', eos}));
  fs::remove_all(dir);
}

TEST_F(Sft, CompletionTextIsNeverReadAsSpecialTokens) {
  const auto p = prompting_of(dir_);
  const auto e = make_example(p, {{"user", "q"}}, "<|im_end|>", "x");
  EXPECT_EQ(e.sequence.completion.size(), std::string("<|im_end|>").size() + 1);
}

TEST_F(Sft, JsonlExamplesAndBadLines) {
  const auto p = prompting_of(dir_);
  const auto dir = temp_dir("jsonl");
  const auto good = dir / "good.jsonl";
  write_file_atomic(good,
                    "{\"prompt\": \"What is 2+2?\", \"completion\": \"4\"}\n"
                    "\n"
                    "{\"prompt\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                    "{\"role\": \"user\", \"content\": \"Hi\"}], \"completion\": \"Hello\"}\n");
  const auto examples = load_sft_examples(good, p);
  ASSERT_EQ(examples.size(), 2u);
  EXPECT_EQ(examples[0].where, good.string() + ":1");
  EXPECT_EQ(examples[0].sequence.prompt, encode_prompt(p, {{"user", "What is 2+2?"}}));
  EXPECT_EQ(examples[1].where, good.string() + ":3");
  EXPECT_EQ(examples[1].sequence.prompt,
            encode_prompt(p, {{"system", "Be brief."}, {"user", "Hi"}}));
  EXPECT_EQ(examples[1].sequence.completion.back(), completion_end_id(p));

  const std::string first = "{\"prompt\": \"a\", \"completion\": \"b\"}\n";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{\"prompt\": \"a\", \"completion\": \"b\"", "bad.jsonl:2"},
      {"{\"prompt\": \"a\"}", "missing field 'completion'"},
      {"{\"completion\": \"b\"}", "missing field 'prompt'"},
      {"{\"prompt\": 3, \"completion\": \"b\"}", "field 'prompt' must be"},
      {"{\"prompt\": [{\"role\": \"robot\", \"content\": \"x\"}], \"completion\": \"b\"}",
       "unknown role 'robot'"},
      {"[1, 2]", "expected a JSON object"},
  };
  for (const auto& [line, expected] : bad) {
    SCOPED_TRACE(line);
    const auto path = dir / "bad.jsonl";
    write_file_atomic(path, first + line + "\n");
    const auto msg = error_of([&] { load_sft_examples(path, p); });
    EXPECT_NE(msg.find("bad.jsonl:2"), std::string::npos) << msg;
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  }
  write_file_atomic(dir / "empty.jsonl", "\n");
  EXPECT_NE(error_of([&] { load_sft_examples(dir / "empty.jsonl", p); }).find("no examples"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST_F(Sft, GeneratedTasksStreamWithoutRepeats) {
  const auto p = prompting_of(dir_);
  const auto config = config_with({"env.name=\"sort\"", "env.difficulty=2"});
  const auto environment = env::make_environment(config);
  SftData data(config, p, *environment, 11);
  const auto tasks = env::generate_tasks(*environment, 12, 11, 2);
  // Step 2 of 4-example batches is tasks 8..11, whatever was asked before.
  const auto b2 = data.batch(2, 4);
  const auto b0 = data.batch(0, 4);
  ASSERT_EQ(b2.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(b2[i].where, tasks[8 + i].task_id);
    EXPECT_EQ(b0[i].where, tasks[i].task_id);
    EXPECT_EQ(b2[i].sequence.prompt,
              task_example(p, *environment, tasks[8 + i], "").sequence.prompt);
  }
}

TEST_F(Sft, FileEpochsAreShuffledPermutations) {
  const auto p = prompting_of(dir_);
  const auto dir = temp_dir("epochs");
  std::string text;
  for (int i = 0; i < 5; ++i) {
    text += "{\"prompt\": \"p" + std::to_string(i) + "\", \"completion\": \"c\"}\n";
  }
  write_file_atomic(dir / "d.jsonl", text);
  const auto config = config_with({"sft.data=\"" + (dir / "d.jsonl").string() + "\""});
  const auto environment = env::make_environment(config);
  SftData data(config, p, *environment, 5);
  // Batches of 2 across two epochs (10 examples): each epoch holds every line once.
  std::vector<std::string> seen;
  for (int s = 0; s < 5; ++s)
    for (const auto& e : data.batch(s, 2)) seen.push_back(e.where);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.begin() + 5).size(), 5u);
  EXPECT_EQ(std::set<std::string>(seen.begin() + 5, seen.end()).size(), 5u);
  EXPECT_NE(std::vector<std::string>(seen.begin(), seen.begin() + 5),
            std::vector<std::string>(seen.begin() + 5, seen.end()));
  // The same step gives the same examples, asked again out of order.
  EXPECT_EQ(data.batch(3, 2)[0].where, seen[6]);
  fs::remove_all(dir);
}

TEST_F(Sft, TasksWithoutSolutionsAreAnError) {
  const auto p = prompting_of(dir_);
  const auto dir = temp_dir("nosolution");
  const auto environment = env::make_environment("reverse_text");
  auto tasks = env::generate_tasks(*environment, 2, 0, 1);
  for (auto& t : tasks) t.solution.reset();
  env::write_tasks(dir / "tasks.jsonl", tasks);
  const auto config = config_with(
      {"env.name=\"reverse_text\"", "env.tasks=\"" + (dir / "tasks.jsonl").string() + "\""});
  const auto msg = error_of([&] { SftData(config, p, *environment, 0); });
  EXPECT_NE(msg.find("no reference solution"), std::string::npos) << msg;
  fs::remove_all(dir);
}

// The micro-batched loss and gradients equal a per-example cross-entropy over the completion rows
// of unpacked forwards, averaged over all completion tokens of the batch.
TEST_F(Sft, LossMatchesPerExampleCrossEntropy) {
  const auto p = prompting_of(dir_);
  const auto environment = env::make_environment("arithmetic");
  const auto tasks = env::generate_tasks(*environment, 6, 1, 3);
  std::vector<SftExample> batch;
  int64_t longest = 0, total = 0;
  for (const auto& t : tasks) {
    batch.push_back(task_example(p, *environment, t, "Be quick."));
    longest = std::max(longest, batch.back().sequence.input_length());
    total += batch.back().sequence.input_length();
  }
  batch.push_back(make_example(p, {{"user", "x"}}, "", "short"));  // a one-token completion
  const int64_t vocab_limit = p.tok.vocab_size();

  auto model = model::load_transformer(dir_, model::Compute{});
  model->set_requires_grad(true);
  const auto loss = sft_backward(*model, batch, longest + 8, vocab_limit);
  EXPECT_GE(loss.micro_batches, 3);
  EXPECT_LT(loss.micro_batches, static_cast<int64_t>(batch.size()) + 1);
  std::vector<torch::Tensor> grads;
  for (const auto& param : model->parameters()) {
    grads.push_back(param.grad().clone());
    param.mutable_grad().zero_();
  }

  torch::Tensor sum = torch::zeros({});
  int64_t tokens = 0, inputs = 0;
  for (const auto& e : batch) {
    const auto& s = e.sequence;
    std::vector<int64_t> ids(s.prompt.begin(), s.prompt.end());
    ids.insert(ids.end(), s.completion.begin(), s.completion.end() - 1);
    const auto logits = model->forward(torch::tensor(ids, torch::kInt64)).logits;
    const int64_t first = static_cast<int64_t>(s.prompt.size()) - 1;
    const int64_t n = static_cast<int64_t>(s.completion.size());
    const auto rows = logits.narrow(0, first, n).narrow(1, 0, vocab_limit);
    std::vector<int64_t> targets(s.completion.begin(), s.completion.end());
    sum = sum + torch::nn::functional::cross_entropy(
                    rows, torch::tensor(targets, torch::kInt64),
                    torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    tokens += n;
    inputs += static_cast<int64_t>(ids.size());
  }
  const auto reference = sum / static_cast<double>(tokens);
  reference.backward();
  EXPECT_EQ(loss.completion_tokens, tokens);
  EXPECT_EQ(loss.input_tokens, inputs);
  EXPECT_NEAR(loss.loss, reference.item<double>(), 1e-5 * reference.item<double>());
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    SCOPED_TRACE(model->named_parameters()[i].first);
    EXPECT_TRUE(torch::allclose(grads[i], params[i].grad(), 1e-4, 1e-6))
        << (grads[i] - params[i].grad()).abs().max().item<double>();
  }
}

TEST_F(Sft, ExampleLongerThanAMicroBatchIsNamed) {
  const auto p = prompting_of(dir_);
  auto model = model::load_transformer(dir_, model::Compute{});
  model->set_requires_grad(true);
  const auto e = make_example(p, {{"user", std::string(50, 'a')}}, "b", "data.jsonl:4");
  const auto msg = error_of([&] { sft_backward(*model, {e}, 16, p.tok.vocab_size()); });
  EXPECT_NE(msg.find("data.jsonl:4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("trainer.micro_batch_tokens"), std::string::npos) << msg;
}

}  // namespace
}  // namespace trellis::rl
