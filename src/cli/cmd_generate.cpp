// `trellis generate`: load a model and complete one prompt, streaming the text to stdout.
#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "common/error.h"
#include "common/logging.h"
#include "model/checkpoint.h"
#include "model/generate.h"
#include "model/tokenizer.h"

namespace trellis::cli {
namespace {

struct GenerateFlags {
  std::string model, prompt;
  model::GenerateOptions options;
  ComputeFlags compute;
};

void run_generate(const GenerateFlags& f) {
  auto compute = setup_compute(f.compute);
  auto tok = model::Tokenizer::load(f.model);
  auto transformer = model::load_transformer(f.model, compute);
  std::vector<int32_t> prompt;
  if (auto bos = tok.bos_id(); bos && transformer->config().arch == model::Arch::Llama) {
    prompt.push_back(*bos);  // Llama-3 expects <|begin_of_text|>; Qwen adds no BOS
  }
  for (int32_t id : tok.encode(f.prompt)) prompt.push_back(id);
  if (prompt.empty()) throw Error("the prompt is empty", "--prompt");
  std::vector<int64_t> stop;
  for (int32_t id : tok.eos_ids()) stop.push_back(id);
  for (int64_t id : transformer->config().eos_token_ids) stop.push_back(id);

  auto options = f.options;
  options.vocab_limit = tok.vocab_size();
  log::info("{}: {} prompt tokens, up to {} new tokens on {}", f.model, prompt.size(),
            f.options.max_tokens, compute.describe());
  auto t0 = std::chrono::steady_clock::now();
  std::fputs(f.prompt.c_str(), stdout);
  auto result = model::generate(*transformer, prompt, stop, options, [&](int32_t id) {
    if (tok.is_special(id)) return;
    std::string bytes = tok.token_bytes(id);
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    std::fflush(stdout);
  });
  std::fputs("\n", stdout);
  std::fflush(stdout);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "[%zu tokens in %.2f s, %.1f tokens/s, finish: %s]\n", result.tokens.size(),
               s, result.tokens.size() / s, result.finish_reason.c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
  static GenerateFlags f;
  auto* cmd = app.add_subcommand("generate", "Complete a prompt with a model (simple sampling)");
  cmd->add_option("--model", f.model, "Hugging Face model directory")->required();
  cmd->add_option("--prompt", f.prompt, "prompt text")->required();
  cmd->add_option("--max-tokens", f.options.max_tokens, "new tokens at most")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--temperature", f.options.temperature, "sampling temperature (0 = greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--seed", f.options.seed, "sampling seed")->capture_default_str();
  add_compute_flags(cmd, f.compute);
  cmd->callback([] { run_generate(f); });
}

}  // namespace trellis::cli
