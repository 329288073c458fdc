#include "rl/optimizer.h"

#include <cmath>

#include "common/config.h"
#include "common/error.h"

namespace trellis::rl {

OptimizerConfig OptimizerConfig::from_config(const Config& config, const std::string& section) {
  OptimizerConfig c;
  c.lr = config.get<double>(section + ".lr");
  c.warmup_steps = config.get_at_least<int64_t>(section + ".warmup_steps", 0);
  c.weight_decay = config.get_at_least<double>("trainer.weight_decay", 0.0);
  c.beta1 = config.get<double>("trainer.beta1");
  c.beta2 = config.get<double>("trainer.beta2");
  c.eps = config.get<double>("trainer.eps");
  c.max_grad_norm = config.get<double>("trainer.max_grad_norm");
  if (!(c.lr > 0) || !std::isfinite(c.lr)) fail(section + ".lr", "must be positive, got {}", c.lr);
  if (!(c.beta1 >= 0 && c.beta1 < 1)) fail("trainer.beta1", "must be in [0, 1)");
  if (!(c.beta2 >= 0 && c.beta2 < 1)) fail("trainer.beta2", "must be in [0, 1)");
  if (!(c.eps > 0) || !std::isfinite(c.eps)) fail("trainer.eps", "must be positive, got {}", c.eps);
  return c;
}

Optimizer::Optimizer(std::vector<torch::Tensor> parameters, OptimizerConfig config)
    : parameters_(std::move(parameters)), config_(config) {
  adamw_ =
      std::make_unique<torch::optim::AdamW>(parameters_, torch::optim::AdamWOptions(config_.lr)
                                                             .betas({config_.beta1, config_.beta2})
                                                             .eps(config_.eps)
                                                             .weight_decay(config_.weight_decay));
}

Optimizer::~Optimizer() = default;

double Optimizer::lr_at(int64_t step) const {
  if (config_.warmup_steps <= 0 || step >= config_.warmup_steps) return config_.lr;
  return config_.lr * static_cast<double>(step + 1) / static_cast<double>(config_.warmup_steps);
}

Optimizer::StepInfo Optimizer::step() {
  StepInfo info;
  info.lr = lr_at(steps_);
  std::vector<torch::Tensor> with_grad;
  for (const auto& p : parameters_)
    if (p.grad().defined()) with_grad.push_back(p);
  // The norm over every gradient at once; clipping scales them all by the same factor.
  info.grad_norm = torch::nn::utils::clip_grad_norm_(
      with_grad,
      config_.max_grad_norm > 0 ? config_.max_grad_norm : std::numeric_limits<double>::infinity());
  if (std::isfinite(info.grad_norm)) {
    for (auto& group : adamw_->param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(info.lr);
    adamw_->step();
  }
  adamw_->zero_grad();
  ++steps_;
  return info;
}

void Optimizer::save(const std::filesystem::path& path) const {
  torch::serialize::OutputArchive archive;
  adamw_->save(archive);
  archive.write("trellis_steps", torch::tensor(steps_, torch::kInt64));
  archive.save_to(path.string());
}

void Optimizer::load(const std::filesystem::path& path) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path.string());
    adamw_->load(archive);
    torch::Tensor steps;
    archive.read("trellis_steps", steps);
    steps_ = steps.item<int64_t>();
  } catch (const c10::Error& e) {
    fail(path.string(), "cannot read optimizer state: {}", e.what_without_backtrace());
  }
}

}  // namespace trellis::rl
