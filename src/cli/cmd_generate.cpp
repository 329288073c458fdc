// `trellis generate`: complete prompts with the rollout engine. Either one --prompt, streamed to
// stdout as it is sampled, or a JSONL file of prompts (--input) completed with continuous batching
// into a JSONL file of results (--output), with a progress bar on a terminal. With --chat, each
// prompt is a user message rendered with the model's chat template.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "cli/commands.h"
#include "cli/progress.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/prompting.h"
#include "model/tokenizer.h"

namespace trellis::cli {
namespace {

using model::Prompting;

struct GenerateFlags {
  std::string model, prompt, input, output;
  int64_t n = 1, max_tokens = 256, max_num_seqs = 256;
  engine::SamplingParams sampling;
  uint64_t seed = 0;
  bool chat = false;
  ComputeFlags compute;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

engine::Request base_request(const GenerateFlags& f, const Prompting& p) {
  engine::Request r;
  r.n = f.n;
  r.max_tokens = f.max_tokens;
  r.stop_ids = f.chat ? p.chat_stop_ids() : p.stop_ids;
  r.sampling = f.sampling;
  r.seed = f.seed;
  return r;
}

void generate_one(const GenerateFlags& f, engine::Engine& engine, const Prompting& p) {
  auto r = base_request(f, p);
  r.id = "prompt";
  r.n = 1;
  r.prompt = f.chat ? p.encode_chat(f.prompt) : p.encode(f.prompt);
  if (!f.chat) std::fputs(f.prompt.c_str(), stdout);  // a chat prints just the reply
  engine::Completion done;
  engine.add(std::move(r), {.on_token =
                                [&](const engine::TokenEvent& e) {
                                  if (p.tok.is_special(e.token)) return;
                                  std::string bytes = p.tok.token_bytes(e.token);
                                  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
                                  std::fflush(stdout);
                                },
                            .on_finish = [&](engine::Completion c) { done = std::move(c); }});
  const auto t0 = std::chrono::steady_clock::now();
  while (engine.has_work()) engine.step();
  const double s = seconds_since(t0);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  std::fprintf(stderr, "[%zu tokens in %.2f s, %.1f tokens/s, finish: %s]\n", done.tokens.size(), s,
               done.tokens.size() / s, engine::finish_name(done.finish));
}

// One input line: {"prompt": "..."} or {"prompt_token_ids": [...]}, optionally "id"; with --chat,
// "prompt" is one user message, or "messages" a conversation ([{"role", "content"}, ...]).
struct InputLine {
  Json id;
  std::string prompt;
  std::vector<int32_t> ids;
};

std::vector<InputLine> read_input(const GenerateFlags& f, const Prompting& p) {
  std::ifstream in(f.input);
  if (!in) throw Error("cannot open the input file", f.input);
  std::vector<InputLine> lines;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", f.input, number);
    auto j = parse_json(text, where);
    if (!j.is_object()) throw Error("each line must be a JSON object", where);
    InputLine line;
    line.id = j.contains("id") ? j["id"] : Json();
    if (j.contains("prompt_token_ids")) {
      line.ids = json_required<std::vector<int32_t>>(j, "prompt_token_ids", where);
    } else if (f.chat && j.contains("messages")) {
      std::vector<model::ChatMessage> messages;
      const Json& list = j["messages"];
      if (!list.is_array()) throw Error("field 'messages' must be a list", where);
      for (const Json& m : list) {
        messages.push_back({json_required<std::string>(m, "role", where),
                            json_required<std::string>(m, "content", where)});
      }
      try {
        line.ids = p.encode_chat(messages);
      } catch (const Error& e) {
        throw Error(e.what(), where);
      }
    } else if (f.chat) {
      line.prompt = json_required<std::string>(j, "prompt", where);
      line.ids = p.encode_chat(line.prompt);
    } else {
      line.prompt = json_required<std::string>(j, "prompt", where);
      line.ids = p.encode(line.prompt);
    }
    if (line.ids.empty()) throw Error("the prompt is empty", where);
    lines.push_back(std::move(line));
  }
  if (lines.empty()) throw Error("no prompts in the input file", f.input);
  return lines;
}

Json completion_json(const engine::Completion& c, const Prompting& p) {
  return Json{{"text", p.tok.decode(c.tokens, /*skip_special=*/true)},
              {"token_ids", c.tokens},
              {"logprobs", c.logprobs},
              {"finish_reason", engine::finish_name(c.finish)},
              {"seed", c.seed}};
}

void generate_file(const GenerateFlags& f, engine::Engine& engine, const Prompting& p) {
  auto lines = read_input(f, p);
  std::vector<std::vector<engine::Completion>> results(lines.size());
  std::vector<int64_t> remaining(lines.size(), f.n);
  AtomicFileWriter out(f.output);
  size_t next_to_write = 0;
  int64_t done = 0, tokens = 0;
  const int64_t total = static_cast<int64_t>(lines.size()) * f.n;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto r = base_request(f, p);
    r.id = std::to_string(i);
    r.prompt = lines[i].ids;
    engine.add(std::move(r), {.on_finish = [&, i](engine::Completion c) {
                 tokens += static_cast<int64_t>(c.tokens.size());
                 ++done;
                 --remaining[i];
                 results[i].push_back(std::move(c));
               }});
  }
  log::info("{} prompts x {} completions, up to {} new tokens each", lines.size(), f.n,
            f.max_tokens);
  Progress progress("completions");
  while (engine.has_work()) {
    engine.step();
    // Lines go out in input order as soon as all of a line's completions are in.
    for (; next_to_write < lines.size() && remaining[next_to_write] == 0; ++next_to_write) {
      auto& cs = results[next_to_write];
      std::sort(cs.begin(), cs.end(),
                [](const auto& a, const auto& b) { return a.index < b.index; });
      Json row{{"index", next_to_write}, {"prompt_tokens", lines[next_to_write].ids.size()}};
      if (!lines[next_to_write].id.is_null()) row["id"] = lines[next_to_write].id;
      if (!lines[next_to_write].prompt.empty()) row["prompt"] = lines[next_to_write].prompt;
      row["completions"] = Json::array();
      for (const auto& c : cs) row["completions"].push_back(completion_json(c, p));
      const std::string text = json_text(row) + "\n";
      out.write(text.data(), text.size());
      cs.clear();
    }
    progress.draw(done, total, tokens);
  }
  out.commit();
  const double s = progress.seconds();
  progress.finish();
  std::fprintf(stderr, "%lld completions, %lld tokens in %.1f s (%.1f tokens/s) -> %s\n",
               static_cast<long long>(done), static_cast<long long>(tokens), s, tokens / s,
               f.output.c_str());
}

void run_generate(const GenerateFlags& f) {
  if (f.prompt.empty() == f.input.empty()) {
    throw Error("give exactly one of --prompt TEXT or --input FILE.jsonl", "trellis generate");
  }
  if (!f.input.empty() && f.output.empty()) {
    throw Error("--input needs --output FILE.jsonl for the results", "trellis generate");
  }
  auto compute = setup_compute(f.compute);
  auto transformer = model::load_transformer(f.model, compute);
  const auto p = model::Prompting::load(f.model, transformer->config());
  if (f.chat && !p.chat) throw Error(p.chat_error, "--chat");
  engine::EngineOptions options;
  options.max_num_seqs = f.max_num_seqs;
  options.vocab_limit = p.tok.vocab_size();
  engine::Engine engine(*transformer, options);
  log::info("{} on {}", f.model, compute.describe());
  if (!f.prompt.empty()) {
    generate_one(f, engine, p);
  } else {
    generate_file(f, engine, p);
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  static GenerateFlags f;
  auto* cmd = app.add_subcommand(
      "generate", "Complete a prompt (--prompt) or a JSONL file of prompts (--input/--output)");
  cmd->add_option("--model", f.model, "Hugging Face model directory")->required();
  cmd->add_option("--prompt", f.prompt, "one prompt, streamed to stdout");
  cmd->add_option("--input", f.input,
                  "JSONL of prompts: {\"prompt\": TEXT} or {\"prompt_token_ids\": [...]}, "
                  "optional \"id\"");
  cmd->add_option("--output", f.output, "JSONL of results, one line per input line, in order");
  cmd->add_option("--n", f.n, "completions per prompt")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--max-tokens", f.max_tokens, "new tokens at most")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  add_sampling_flags(cmd, f.sampling);
  cmd->add_option("--seed", f.seed, "sampling seed (completion i of a prompt uses seed + i)")
      ->capture_default_str();
  cmd->add_flag("--chat", f.chat,
                "render each prompt as a user message with the model's chat template (ChatML or "
                "Llama-3); --input lines may also give \"messages\"");
  cmd->add_option("--max-num-seqs", f.max_num_seqs, "sequences decoded at once")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_compute_flags(cmd, f.compute);
  cmd->callback([] { run_generate(f); });
}

}  // namespace trellis::cli
