// Optimizer and checkpoint tests: the warm-up schedule and clipping, exact save/load of AdamW
// state (a restored optimizer continues bit-for-bit), checkpoint directories (atomic, pruned,
// newest found) and metrics.jsonl truncation on resume.
#include "rl/checkpoints.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "common/files.h"
#include "error_of.h"
#include "model/checkpoint.h"
#include "model/presets.h"
#include "rl/metrics_log.h"
#include "rl/optimizer.h"

namespace trellis::rl {
namespace {
namespace fs = std::filesystem;

const model::Compute kFp32{torch::kCPU, torch::kFloat32};

fs::path temp_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("trellis_rl_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A fixed pseudo-gradient for step k, so that two optimizers can be fed identically.
void set_grads(const std::vector<torch::Tensor>& params, int k) {
  for (size_t i = 0; i < params.size(); ++i) {
    auto g = torch::sin(torch::arange(params[i].numel(), torch::kFloat32) * (0.37 + i) + k)
                 .reshape(params[i].sizes())
                 .clone();
    params[i].mutable_grad() = g;
  }
}

std::vector<torch::Tensor> fresh_params() {
  return {torch::ones({3, 4}).requires_grad_(), torch::zeros({5}).requires_grad_()};
}

TEST(Optimizer, WarmupThenConstant) {
  OptimizerConfig c;
  c.lr = 1e-3;
  c.warmup_steps = 4;
  Optimizer opt(fresh_params(), c);
  EXPECT_DOUBLE_EQ(opt.lr_at(0), 0.25e-3);
  EXPECT_DOUBLE_EQ(opt.lr_at(3), 1e-3);
  EXPECT_DOUBLE_EQ(opt.lr_at(100), 1e-3);
  c.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(Optimizer(fresh_params(), c).lr_at(0), 1e-3);
}

TEST(Optimizer, ReportsNormBeforeClippingAndSkipsNonFinite) {
  auto params = fresh_params();
  OptimizerConfig c;
  c.max_grad_norm = 1.0;
  Optimizer opt(params, c);
  params[0].mutable_grad() = torch::full({3, 4}, 3.0);
  params[1].mutable_grad() = torch::full({5}, 4.0);
  const auto info = opt.step();
  EXPECT_NEAR(info.grad_norm, std::sqrt(12 * 9.0 + 5 * 16.0), 1e-4);
  EXPECT_NE(params[0][0][0].item<float>(), 1.0f);

  const auto before = params[0].clone();
  params[0].mutable_grad() = torch::full({3, 4}, std::numeric_limits<float>::infinity());
  params[1].mutable_grad() = torch::zeros({5});
  EXPECT_FALSE(std::isfinite(opt.step().grad_norm));
  EXPECT_TRUE(torch::equal(params[0], before));  // skipped, not poisoned
  EXPECT_EQ(opt.steps(), 2);
}

TEST(Optimizer, SavedStateContinuesBitForBit) {
  const auto dir = temp_dir("opt");
  OptimizerConfig c;
  c.lr = 1e-2;
  c.warmup_steps = 3;
  auto a = fresh_params();
  Optimizer opt_a(a, c);
  for (int k = 0; k < 3; ++k) {
    set_grads(a, k);
    opt_a.step();
  }
  opt_a.save(dir / "opt.pt");
  std::vector<torch::Tensor> b;
  for (const auto& p : a) b.push_back(p.detach().clone().requires_grad_());
  Optimizer opt_b(b, c);
  opt_b.load(dir / "opt.pt");
  EXPECT_EQ(opt_b.steps(), 3);
  for (int k = 3; k < 6; ++k) {
    set_grads(a, k);
    set_grads(b, k);
    opt_a.step();
    opt_b.step();
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));

  write_file_atomic(dir / "bad.pt", "not an archive");
  EXPECT_NE(test::error_of([&] { opt_b.load(dir / "bad.pt"); }).find("bad.pt"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Checkpoints, SaveLoadPruneAndFindNewest) {
  const auto dir = temp_dir("ckpt");
  model::init_model_dir(dir / "base", model::Arch::Qwen2, "tiny", 1);
  auto m = model::load_transformer(dir / "base", kFp32);
  {
    torch::NoGradGuard g;
    m->parameters()[0].add_(0.123456789f);  // not representable in bf16: fp32 must survive
  }
  Optimizer opt(m->parameters(), OptimizerConfig{});
  EXPECT_FALSE(latest_checkpoint(dir / "checkpoints"));
  for (int step : {2, 4, 6, 8}) {
    save_checkpoint(dir / "checkpoints", step, *m, opt, dir / "base", Json{{"cursor", step * 10}});
  }
  prune_checkpoints(dir / "checkpoints", 2);
  EXPECT_FALSE(fs::exists(dir / "checkpoints" / "step_2"));
  EXPECT_FALSE(fs::exists(dir / "checkpoints" / "step_4"));
  const auto latest = latest_checkpoint(dir / "checkpoints");
  ASSERT_TRUE(latest);
  EXPECT_EQ(latest->filename(), "step_8");
  EXPECT_TRUE(fs::exists(*latest / "tokenizer.json"));  // a complete model directory

  auto restored = model::load_transformer(*latest, kFp32);
  for (const auto& [name, p] : m->named_parameters())
    EXPECT_TRUE(torch::equal(p, restored->parameter(name))) << name;
  Optimizer opt2(restored->parameters(), OptimizerConfig{});
  const Json progress = load_checkpoint_state(*latest, opt2);
  EXPECT_EQ(progress.at("step").get<int64_t>(), 8);
  EXPECT_EQ(progress.at("cursor").get<int64_t>(), 80);

  fs::remove(*latest / "optimizer.pt");
  EXPECT_NE(test::error_of([&] { load_checkpoint_state(*latest, opt2); }).find("optimizer.pt"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(MetricsLog, ResumeDropsStepsNotYetCheckpointed) {
  const auto dir = temp_dir("metrics");
  {
    MetricsLog log(dir / "metrics.jsonl");
    for (int s = 0; s < 5; ++s) {
      Metrics m;
      m.set("loss", s * 0.5);
      log.write(s, m);
    }
  }
  MetricsLog resumed(dir / "metrics.jsonl", 3);  // resumed at step 3: steps 3 and 4 rerun
  Metrics m;
  m.set("loss", 9);
  resumed.write(3, m);
  const std::string text = read_file(dir / "metrics.jsonl");
  EXPECT_EQ(text,
            "{\"loss\":0.0,\"step\":0}\n{\"loss\":0.5,\"step\":1}\n{\"loss\":1.0,\"step\":2}\n"
            "{\"loss\":9.0,\"step\":3}\n");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace trellis::rl
