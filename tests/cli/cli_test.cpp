// End-to-end tests of the `trellis` binary as a user runs it: model init/info/generate, config
// show, and a clear `error: ...` with a non-zero exit for every kind of corrupt model directory.
#include <fstream>

#include <gtest/gtest.h>

#include "cli/run_cli.h"
#include "common/files.h"
#include "common/json.h"

namespace trellis::test {
namespace {

namespace fs = std::filesystem;

// Writes a safetensors file by hand: u64 header length, header JSON, data.
void write_raw_safetensors(const fs::path& path, const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out += std::string(data_bytes, '\0');
  write_file_atomic(path, out);
}

class CliModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fresh_dir("model");
    auto r = run_trellis("model init --arch qwen3 --preset tiny --seed 1 --out " + dir_.string());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() {
    for (const auto& d : made_) fs::remove_all(d);
    fs::remove_all(dir_);
  }
  // A copy of the model to corrupt (removed after the suite).
  fs::path copy(const std::string& name) {
    auto dst = fresh_dir(name);
    fs::copy(dir_, dst, fs::copy_options::recursive);
    made_.push_back(dst);
    return dst;
  }
  static fs::path dir_;
  static std::vector<fs::path> made_;
};
fs::path CliModel::dir_;
std::vector<fs::path> CliModel::made_;

TEST(Cli, VersionAndHelp) {
  auto v = run_trellis("--version");
  EXPECT_EQ(v.status, 0);
  EXPECT_CONTAINS(v.output, "trellis 0.");
  auto h = run_trellis("--help");
  EXPECT_EQ(h.status, 0);
  for (const char* cmd : {"model", "generate", "config", "bench"}) EXPECT_CONTAINS(h.output, cmd);
  auto none = run_trellis("");
  EXPECT_NE(none.status, 0);
  auto bad = run_trellis("frobnicate");
  EXPECT_NE(bad.status, 0);
}

// Every command that runs a model takes --device, --dtype and --threads: the config-driven ones
// as overrides of [compute] (so `--device cuda` is never read as a CONFIG file), the others as
// their own flags.
TEST_F(CliModel, EveryCommandThatRunsAModelTakesDeviceDtypeAndThreads) {
  for (const char* cmd : {"generate", "serve", "eval", "filter", "sft", "rl", "run", "quickstart",
                          "trainer", "infer", "validate", "toploc verify", "bench train",
                          "bench generate", "bench rollouts", "bench validate"}) {
    const auto help = run_trellis(std::string(cmd) + " --help");
    EXPECT_EQ(help.status, 0) << cmd;
    for (const char* flag : {"--device", "--dtype", "--threads"})
      EXPECT_CONTAINS(help.output, flag) << cmd;
  }
  const std::string example = std::string(TRELLIS_SOURCE_DIR) + "/examples/reverse_text.toml";
  const auto run_dir = fresh_dir("compute-flags");
  auto r = run_trellis("rl " + example + " --device cuda --set model.path=" + dir_.string() +
                       " --run-dir " + run_dir.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "--device cuda requested");
  r = run_trellis("rl " + example + " --device tpu --set model.path=" + dir_.string() +
                  " --run-dir " + run_dir.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "unknown device 'tpu'");
  // The flags win over the files and --set, and are saved with the run.
  r = run_trellis("sft " + example + " --set compute.threads=2 --dtype fp32 --threads 1" +
                  " --set model.path=" + dir_.string() +
                  " --set sft.steps=1 --set sft.eval_tasks=0 --run-dir " + run_dir.string());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string saved = read_file(run_dir / "config.toml");
  EXPECT_CONTAINS(saved, "dtype = 'fp32'");
  EXPECT_CONTAINS(saved, "threads = 1");
  fs::remove_all(run_dir);
}

TEST_F(CliModel, InfoDescribesTheModel) {
  auto r = run_trellis("model info " + dir_.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "qwen3");
  EXPECT_CONTAINS(r.output, "q/k norm");
  EXPECT_CONTAINS(r.output, "BF16");
  EXPECT_CONTAINS(r.output, "tokenizer     264 tokens");
}

TEST_F(CliModel, GenerateIsDeterministicPerSeed) {
  std::string base = "generate --model " + dir_.string() + " --prompt hello --max-tokens 12 ";
  auto a = run_trellis(base + "--seed 5", /*with_stderr=*/false);
  auto b = run_trellis(base + "--seed 5", false);
  auto c = run_trellis(base + "--seed 6", false);
  auto stats = run_trellis(base + "--temperature 0");
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_EQ(a.output.rfind("hello", 0), 0u) << a.output;  // stdout: the prompt, then the text
  EXPECT_GT(a.output.size(), std::string("hello\n").size());
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output, c.output);
  EXPECT_EQ(stats.status, 0) << stats.output;
  EXPECT_CONTAINS(stats.output, "tokens/s");
}

TEST_F(CliModel, GenerateJsonlCompletesEveryLineInOrder) {
  auto dir = fresh_dir("jsonl");
  fs::create_directories(dir);
  {
    std::ofstream in(dir / "prompts.jsonl");
    in << R"({"prompt": "hello", "id": "a"})"
       << "\n"
       << "\n"  // blank lines are skipped
       << R"({"prompt_token_ids": [104, 105, 106]})"
       << "\n"
       << R"({"prompt": "a longer prompt with several words in it"})"
       << "\n";
  }
  const std::string base = "generate --model " + dir_.string() + " --input " +
                           (dir / "prompts.jsonl").string() +
                           " --n 2 --max-tokens 9 --seed 3 --output ";
  auto r = run_trellis(base + (dir / "a.jsonl").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "6 completions");
  std::ifstream out(dir / "a.jsonl");
  std::vector<Json> rows;
  for (std::string line; std::getline(out, line);) rows.push_back(Json::parse(line));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["id"], "a");
  EXPECT_EQ(rows[1]["prompt_tokens"], 3);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["index"], i);
    ASSERT_EQ(rows[i]["completions"].size(), 2u);
    for (int k = 0; k < 2; ++k) {
      const auto& c = rows[i]["completions"][k];
      EXPECT_EQ(c["seed"], 3 + k);
      EXPECT_EQ(c["token_ids"].size(), c["logprobs"].size());
      EXPECT_LE(c["token_ids"].size(), 9u);
      const std::string reason = c["finish_reason"];
      EXPECT_TRUE(reason == "stop" || (reason == "length" && c["token_ids"].size() == 9u));
      for (double lp : c["logprobs"]) EXPECT_LE(lp, 0.0);
    }
  }
  // Same seed, same file.
  ASSERT_EQ(run_trellis(base + (dir / "b.jsonl").string()).status, 0);
  EXPECT_EQ(read_file(dir / "a.jsonl"), read_file(dir / "b.jsonl"));

  // A malformed line is an error naming the file and line; no output file is left behind.
  {
    std::ofstream in(dir / "bad.jsonl");
    in << R"({"prompt": "ok"})"
       << "\n"
       << R"({"prompt": )"
       << "\n";
  }
  auto bad = run_trellis("generate --model " + dir_.string() + " --input " +
                         (dir / "bad.jsonl").string() + " --output " + (dir / "c.jsonl").string());
  EXPECT_EQ(bad.status, 1) << bad.output;
  EXPECT_CONTAINS(bad.output, "bad.jsonl:2");
  EXPECT_FALSE(fs::exists(dir / "c.jsonl"));
  fs::remove_all(dir);
}

TEST_F(CliModel, GenerateChatUsesTheChatTemplate) {
  auto dir = fresh_dir("chat");
  fs::create_directories(dir);
  // The same conversation as a "prompt" (one user message), as "messages", and as the token ids
  // of the ChatML rendering: greedy, all three complete alike.
  std::vector<int32_t> ids = {257};  // <|im_start|>
  for (char c : std::string("user\nhi")) ids.push_back(c);
  ids.push_back(258);  // <|im_end|>
  ids.push_back('\n');
  ids.push_back(257);
  for (char c : std::string("assistant\n")) ids.push_back(c);
  {
    std::ofstream in(dir / "chat.jsonl");
    in << R"({"prompt": "hi"})"
       << "\n"
       << R"({"messages": [{"role": "user", "content": "hi"}]})"
       << "\n"
       << Json{{"prompt_token_ids", ids}}.dump() << "\n";
  }
  auto r = run_trellis("generate --model " + dir_.string() + " --chat --temperature 0 " +
                       "--max-tokens 8 --input " + (dir / "chat.jsonl").string() + " --output " +
                       (dir / "out.jsonl").string());
  ASSERT_EQ(r.status, 0) << r.output;
  std::ifstream out(dir / "out.jsonl");
  std::vector<Json> rows;
  for (std::string line; std::getline(out, line);) rows.push_back(Json::parse(line));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["prompt_tokens"], ids.size());
  EXPECT_EQ(rows[1]["prompt_tokens"], ids.size());
  EXPECT_EQ(rows[0]["completions"][0]["token_ids"], rows[2]["completions"][0]["token_ids"]);
  EXPECT_EQ(rows[1]["completions"][0]["token_ids"], rows[2]["completions"][0]["token_ids"]);

  auto one = run_trellis("generate --model " + dir_.string() +
                         " --chat --prompt hi --temperature 0 --max-tokens 8");
  EXPECT_EQ(one.status, 0) << one.output;

  // Without a chat template, --chat is an error that says so.
  auto bare = copy("nochat");
  auto cfg = read_json_file((bare / "tokenizer_config.json").string());
  cfg.erase("chat_template");
  write_file_atomic(bare / "tokenizer_config.json", cfg.dump());
  auto no = run_trellis("generate --model " + bare.string() + " --chat --prompt hi");
  EXPECT_EQ(no.status, 1) << no.output;
  EXPECT_CONTAINS(no.output, "no chat template");
  EXPECT_CONTAINS(no.output, "--chat");
  fs::remove_all(dir);
}

TEST_F(CliModel, BenchGenerateReportsThroughputAndUtilisation) {
  auto r = run_trellis("bench generate --model " + dir_.string() +
                       " --batch 4 --prompt-len 16 --max-tokens 8");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "tokens/s");
  EXPECT_CONTAINS(r.output, "decode step ms");
  EXPECT_CONTAINS(r.output, "32 tokens in");
  EXPECT_EQ(r.output.find("nan"), std::string::npos) << r.output;
}

TEST_F(CliModel, BenchRolloutsComparesPlainAndPartialWorkers) {
  auto r = run_trellis("bench rollouts --model " + dir_.string() +
                       " --env reverse_text --set rl.group_size=2 --set rl.max_tokens=8" +
                       " --set infer.groups_per_submission=2 --steps 2 --groups-per-step 4");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "2 steps of 4 groups of 2, max_tokens 8");
  EXPECT_CONTAINS(r.output, "decode batch");
  EXPECT_CONTAINS(r.output, "\nplain ");
  EXPECT_CONTAINS(r.output, "\nc3po ");
  EXPECT_EQ(r.output.find("nan"), std::string::npos) << r.output;
}

TEST_F(CliModel, BenchTrainReportsThroughputAndUtilisation) {
  auto r = run_trellis("bench train --model " + dir_.string() +
                       " --batch 4 --prompt-len 16 --completion-len 16 --steps 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "tokens/s");
  EXPECT_CONTAINS(r.output, "MFU");
  EXPECT_CONTAINS(r.output, "per step: ");
  EXPECT_CONTAINS(r.output, "logp_old");
  EXPECT_EQ(r.output.find("nan"), std::string::npos) << r.output;
}

TEST_F(CliModel, TruncatedSafetensorsIsAnError) {
  auto dir = copy("truncated");
  auto file = dir / "model.safetensors";
  fs::resize_file(file, fs::file_size(file) / 2);
  auto r = run_trellis("generate --prompt hi --model " + dir.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: ");
  EXPECT_CONTAINS(r.output, "model.safetensors");
  EXPECT_EQ(r.output.find("terminate called"), std::string::npos);
}

TEST_F(CliModel, HeaderOffsetsOutOfRangeIsAnError) {
  auto dir = copy("offsets");
  write_raw_safetensors(dir / "model.safetensors",
                        R"({"model.norm.weight":{"dtype":"F32","shape":[128],)"
                        R"("data_offsets":[0,100000]}})",
                        512);
  auto r = run_trellis("model info " + dir.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: ");
  EXPECT_CONTAINS(r.output, "model.norm.weight");
}

TEST_F(CliModel, UnknownDtypeIsAnError) {
  auto dir = copy("dtype");
  write_raw_safetensors(dir / "model.safetensors",
                        R"({"model.norm.weight":{"dtype":"Q4_K","shape":[128],)"
                        R"("data_offsets":[0,64]}})",
                        64);
  auto r = run_trellis("model info " + dir.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "unknown dtype 'Q4_K'");
}

TEST_F(CliModel, ShapeNotMatchingConfigIsAnError) {
  auto dir = copy("shape");
  auto j = read_json_file((dir / "config.json").string());
  j["hidden_size"] = 256;
  j["head_dim"] = 64;
  write_file_atomic(dir / "config.json", j.dump());
  auto r = run_trellis("generate --prompt hi --model " + dir.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: tensor 'model.embed_tokens.weight' has shape [320, 128]");
}

TEST_F(CliModel, AConfigBeyondEveryRealModelIsOneLineNamingTheField) {
  // Before the bounds, libtorch refused the allocation itself: an overflow message and thirty
  // lines of backtrace, naming neither the file nor the field.
  auto dir = copy("huge");
  auto j = read_json_file((dir / "config.json").string());
  j["hidden_size"] = int64_t{1} << 62;
  write_file_atomic(dir / "config.json", j.dump());
  auto r = run_trellis("generate --prompt hi --model " + dir.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output,
                  "error: field 'hidden_size' is 4611686018427387904, more than Trellis "
                  "loads (at most 131072)");
  EXPECT_CONTAINS(r.output, (dir / "config.json").string());
  EXPECT_EQ(r.output.find("frame #"), std::string::npos) << r.output;
}

TEST_F(CliModel, UnsupportedTokenizerModelTypeIsAnError) {
  auto dir = copy("tokenizer");
  auto j = read_json_file((dir / "tokenizer.json").string());
  j["model"]["type"] = "Unigram";
  write_file_atomic(dir / "tokenizer.json", j.dump());
  auto r = run_trellis("generate --prompt hi --model " + dir.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "Unigram");
  EXPECT_CONTAINS(r.output, "tokenizer.json");
}

TEST_F(CliModel, ConfigMissingFieldIsAnError) {
  auto dir = copy("config");
  auto j = read_json_file((dir / "config.json").string());
  j.erase("num_attention_heads");
  write_file_atomic(dir / "config.json", j.dump());
  auto r = run_trellis("model info " + dir.string());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "missing field 'num_attention_heads'");
  EXPECT_CONTAINS(r.output, "config.json");
}

TEST(Cli, ModelDirectoryThatDoesNotExist) {
  auto r = run_trellis("generate --prompt hi --model /nonexistent/model");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "error: ");
  EXPECT_CONTAINS(r.output, "/nonexistent/model");
}

TEST(Cli, ConfigShowResolvesFilesAndOverrides) {
  auto dir = fresh_dir("config");
  fs::create_directories(dir);
  write_file_atomic(dir / "a.toml", "[run]\nname = \"from-file\"\nseed = 3\n");
  auto r = run_trellis("config show " + (dir / "a.toml").string() +
                       " --set run.seed=9 --set model.path=/tmp/m");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "name = 'from-file'");
  EXPECT_CONTAINS(r.output, "seed = 9");
  EXPECT_CONTAINS(r.output, "path = '/tmp/m'");
  auto typo = run_trellis("config show --set run.sed=9");
  EXPECT_EQ(typo.status, 1);
  EXPECT_CONTAINS(typo.output, "error: unknown config key 'run.sed'");
  write_file_atomic(dir / "bad.toml", "[run]\nseed = \"three\"\n");
  auto bad = run_trellis("config show " + (dir / "bad.toml").string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_CONTAINS(bad.output, "'run.seed' must be an integer");
  EXPECT_CONTAINS(bad.output, "bad.toml");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trellis::test
