// Optimizer and checkpoint tests: the warm-up schedule and clipping, AdamW against libtorch's
// (two tensors, a whole model, and on CUDA against the CPU where there is a GPU), exact save/load
// of its state (a restored optimizer continues bit-for-bit; older checkpoints
// load), checkpoint directories (atomic, pruned, newest found) and metrics.jsonl truncation on
// resume.
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
                 .to(params[i].device());
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

TEST(Optimizer, MatchesTorchAdamWWithGradientClipping) {
  // The independent reference: libtorch's own clip_grad_norm_ and AdamW on the same gradients.
  OptimizerConfig c;
  c.lr = 1e-2;
  c.warmup_steps = 3;
  c.weight_decay = 0.1;
  c.max_grad_norm = 2.5;  // below the sine gradients' norm (about 2.9): the updates are clipped
  auto ours = fresh_params();
  std::vector<torch::Tensor> ref;
  for (const auto& p : ours) ref.push_back(p.detach().clone().requires_grad_());
  Optimizer opt(ours, c);
  torch::optim::AdamW adamw(ref, torch::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  for (int k = 0; k < 6; ++k) {
    set_grads(ours, k);
    set_grads(ref, k);
    const double lr = c.lr * std::min(1.0, (k + 1) / 3.0);
    const double norm = torch::nn::utils::clip_grad_norm_(ref, c.max_grad_norm);
    for (auto& g : adamw.param_groups())
      static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    adamw.step();
    EXPECT_NEAR(opt.step().grad_norm, norm, 1e-5 * norm) << "step " << k;
    for (size_t i = 0; i < ours.size(); ++i)
      EXPECT_TRUE(torch::allclose(ours[i], ref[i], 1e-6, 1e-7)) << "param " << i << " step " << k;
  }
}

TEST(Optimizer, UpdatesEveryTensorOfAModelAsTorchAdamWAndBumpsTheirVersions) {
  // The update runs as a few ops over all tensors at once (flat moments, foreach masters). Over a
  // model's worth of tensors it must still be AdamW's per tensor, treat a missing gradient as
  // zero, and bump each master's version: the model's bf16/FP8 weight caches go by it.
  const auto dir = temp_dir("opt_model");
  model::init_model_dir(dir, model::Arch::Qwen2, "tiny", 1);
  auto model = model::load_transformer(dir, kFp32);
  auto ours = model->parameters();
  ASSERT_GT(ours.size(), 10u);
  std::vector<torch::Tensor> ref;
  for (const auto& p : ours) ref.push_back(p.detach().clone().requires_grad_());
  OptimizerConfig c;
  c.lr = 1e-2;
  c.weight_decay = 0.1;
  c.max_grad_norm = 0;  // no clipping: libtorch's AdamW alone is the reference
  Optimizer opt(ours, c);
  torch::optim::AdamW adamw(ref, torch::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  for (int k = 0; k < 3; ++k) {
    set_grads(ours, k);
    set_grads(ref, k);
    ours[1].mutable_grad() = torch::Tensor();  // no gradient this step: counts as zero
    ref[1].mutable_grad().zero_();
    std::vector<int64_t> versions;
    for (const auto& p : ours) versions.push_back(p._version());
    opt.step();
    adamw.step();
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_TRUE(torch::allclose(ours[i], ref[i], 1e-6, 1e-7)) << "tensor " << i << " step " << k;
      EXPECT_GT(ours[i]._version(), versions[i]) << "tensor " << i << " step " << k;
      if (i != 1) EXPECT_EQ(ours[i].grad().abs().max().item<float>(), 0.0f) << "tensor " << i;
    }
  }
  fs::remove_all(dir);
}

TEST(Optimizer, OnCudaMatchesTheCpuUpdate) {
  // The CUDA path (state on the device, libtorch's fused Adam kernel) against the CPU path, and a
  // CUDA optimizer's saved state continuing on the CPU.
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device in this libtorch or machine";
  const auto dir = temp_dir("opt_cuda");
  OptimizerConfig c;
  c.lr = 1e-2;
  c.warmup_steps = 2;
  c.weight_decay = 0.1;
  c.max_grad_norm = 2.5;
  auto cpu = fresh_params();
  std::vector<torch::Tensor> gpu;
  for (const auto& p : cpu) gpu.push_back(p.detach().to(torch::kCUDA).requires_grad_());
  Optimizer on_cpu(cpu, c), on_gpu(gpu, c);
  const auto expect_close = [&](const std::vector<torch::Tensor>& a, int k) {
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_TRUE(torch::allclose(a[i].cpu(), cpu[i], 1e-5, 1e-6))
          << "param " << i << " step " << k;
  };
  for (int k = 0; k < 4; ++k) {
    set_grads(cpu, k);
    set_grads(gpu, k);
    const int64_t version = gpu[0]._version();
    EXPECT_NEAR(on_gpu.step().grad_norm, on_cpu.step().grad_norm, 1e-5) << "step " << k;
    expect_close(gpu, k);
    EXPECT_GT(gpu[0]._version(), version) << "the fused kernel's update is seen by the caches";
  }
  on_gpu.save(dir);
  std::vector<torch::Tensor> resumed;
  for (const auto& p : gpu) resumed.push_back(p.detach().cpu().requires_grad_());
  Optimizer on_cpu_again(resumed, c);
  on_cpu_again.load(dir);
  for (int k = 4; k < 6; ++k) {
    set_grads(cpu, k);
    set_grads(resumed, k);
    on_cpu.step();
    on_cpu_again.step();
    expect_close(resumed, k);
  }
  fs::remove_all(dir);
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
  opt_a.save(dir);
  EXPECT_TRUE(fs::exists(dir / "optimizer" / "index.json"));
  std::vector<torch::Tensor> b;
  for (const auto& p : a) b.push_back(p.detach().clone().requires_grad_());
  Optimizer opt_b(b, c);
  opt_b.load(dir);
  EXPECT_EQ(opt_b.steps(), 3);
  for (int k = 3; k < 6; ++k) {
    set_grads(a, k);
    set_grads(b, k);
    opt_a.step();
    opt_b.step();
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));

  // A shard that does not fit is named.
  write_file_atomic(dir / "optimizer" / "shard-0-of-1.safetensors", "not a safetensors file");
  EXPECT_NE(test::error_of([&] { opt_b.load(dir); }).find("shard-0-of-1"), std::string::npos);
  Optimizer other({torch::zeros({7}).requires_grad_()}, c);
  EXPECT_NE(test::error_of([&] { other.load(dir); }).find("17 parameters; this model has 7"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(Optimizer, LoadsTheSingleArchiveOfOlderCheckpoints) {
  // Checkpoints written before the optimizer was sharded hold one torch::optim::AdamW archive.
  const auto dir = temp_dir("opt_legacy");
  OptimizerConfig c;
  c.lr = 1e-2;
  auto a = fresh_params();
  torch::optim::AdamW adamw(a, torch::optim::AdamWOptions(c.lr).weight_decay(c.weight_decay));
  for (int k = 0; k < 3; ++k) {
    set_grads(a, k);
    torch::nn::utils::clip_grad_norm_(a, c.max_grad_norm);
    adamw.step();
  }
  torch::serialize::OutputArchive archive;
  adamw.save(archive);
  archive.write("trellis_steps", torch::tensor(int64_t{3}, torch::kInt64));
  archive.save_to((dir / "optimizer.pt").string());
  std::vector<torch::Tensor> b;
  for (const auto& p : a) b.push_back(p.detach().clone().requires_grad_());
  Optimizer opt(b, c);
  opt.load(dir);
  EXPECT_EQ(opt.steps(), 3);
  for (int k = 3; k < 5; ++k) {
    set_grads(a, k);
    set_grads(b, k);
    torch::nn::utils::clip_grad_norm_(a, c.max_grad_norm);
    adamw.step();
    opt.step();
  }
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-6, 1e-7)) << "param " << i;
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

  fs::remove_all(*latest / "optimizer");
  EXPECT_NE(test::error_of([&] { load_checkpoint_state(*latest, opt2); }).find("index.json"),
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
