#include "rl/optimizer.h"

#include <torch/version.h>

#include <cmath>
#include <cstring>

#include "common/config.h"
#include "common/error.h"
#include "common/files.h"
#include "common/json.h"
#include "model/safetensors.h"
#include "rl/process_group.h"

namespace trellis::rl {
namespace fs = std::filesystem;
namespace {

// The key libtorch's optimizers file a parameter's state under: its TensorImpl's address, as a
// string before PyTorch 2 and as the pointer itself since.
auto adamw_state_key(const torch::Tensor& parameter) {
#if TORCH_VERSION_MAJOR >= 2
  return static_cast<void*>(parameter.unsafeGetTensorImpl());
#else
  return c10::guts::to_string(parameter.unsafeGetTensorImpl());
#endif
}

const char* const kFormat = "trellis-sharded-adamw";

std::string shard_file(int rank, int world) {
  return "shard-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors";
}

std::span<const std::byte> bytes_of(const torch::Tensor& t) {
  return {static_cast<const std::byte*>(t.data_ptr()), static_cast<size_t>(t.nbytes())};
}

}  // namespace

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

Optimizer::Optimizer(std::vector<torch::Tensor> parameters, OptimizerConfig config,
                     ProcessGroup* group)
    : parameters_(std::move(parameters)), config_(config), group_(group) {
  if (group_) {
    rank_ = group_->rank();
    world_ = group_->world();
  }
  if (!parameters_.empty()) state_options_ = state_options_.device(parameters_[0].device());
  for (const auto& p : parameters_) {
    if (p.scalar_type() != torch::kFloat32 || !p.is_contiguous())
      fail("optimizer", "parameters must be contiguous fp32 master tensors");
    if (p.device() != state_options_.device())
      fail("optimizer", "parameters lie on {} and {}; they must share one device", p.device().str(),
           state_options_.device().str());
    offsets_.push_back(total_);
    total_ += p.numel();
  }
  shard_ = (total_ + world_ - 1) / world_;
  std::tie(begin_, end_) = slice_of(rank_);
  const int64_t n = end_ - begin_;
  exp_avg_ = torch::zeros({n}, state_options_);
  exp_avg_sq_ = torch::zeros({n}, state_options_);
  torch::NoGradGuard no_grad;
  if (world_ > 1) {
    // Every rank starts from rank 0's weights (a checkpoint may have given rank 0 others), and
    // keeps its own fp32 copy of its slice: one segment.
    for (auto& p : parameters_) {
      torch::Tensor t = p.detach();
      group_->broadcast(t, 0);
    }
    masters_ = flatten(/*grads=*/false).narrow(0, begin_, n).clone();
    if (n > 0) segments_.push_back({masters_, 0});
  } else {
    // One rank: the parameters are the masters (views share their version counter, so the
    // model sees every update).
    for (size_t i = 0; i < parameters_.size(); ++i) {
      if (parameters_[i].numel() > 0)
        segments_.push_back({parameters_[i].detach().view({-1}), offsets_[i]});
    }
  }
}

Optimizer::~Optimizer() = default;

double Optimizer::lr_at(int64_t step) const {
  if (config_.warmup_steps <= 0 || step >= config_.warmup_steps) return config_.lr;
  return config_.lr * static_cast<double>(step + 1) / static_cast<double>(config_.warmup_steps);
}

std::pair<int64_t, int64_t> Optimizer::slice_of(int rank) const {
  const int64_t begin = std::min(total_, rank * shard_);
  return {begin, std::min(total_, begin + shard_)};
}

torch::Tensor Optimizer::flatten(bool grads) const {
  // One cat, not a copy per parameter: a few kernels on a GPU however many tensors there are.
  std::vector<torch::Tensor> parts;
  parts.reserve(parameters_.size() + 1);
  for (const auto& p : parameters_) {
    const torch::Tensor& t = grads ? p.grad() : p;
    parts.push_back(t.defined() ? t.detach().reshape({-1})
                                : torch::zeros({p.numel()}, state_options_));
  }
  const int64_t padding = shard_ * world_ - total_;
  if (padding > 0 || parts.empty()) parts.push_back(torch::zeros({padding}, state_options_));
  return torch::cat(parts);
}

int64_t Optimizer::state_bytes() const {
  const int64_t masters = world_ > 1 ? masters_.numel() : total_;
  return 4 * (masters + exp_avg_.numel() + exp_avg_sq_.numel());
}

Optimizer::StepInfo Optimizer::step() {
  torch::NoGradGuard no_grad;
  StepInfo info;
  info.lr = lr_at(steps_);
  const int64_t n = end_ - begin_;

  // This rank's slice of the gradient, summed over the ranks.
  const torch::Tensor flat = flatten(/*grads=*/true);
  torch::Tensor grad = (world_ > 1 ? group_->reduce_scatter_sum(flat) : flat).narrow(0, 0, n);
  torch::Tensor sum_sq = torch::sum(grad.square(), torch::kFloat64).reshape({1});
  if (group_) group_->all_reduce_sum(sum_sq);
  info.grad_norm = std::sqrt(sum_sq.item<double>());

  if (std::isfinite(info.grad_norm)) {
    // As torch.nn.utils.clip_grad_norm_ and torch.optim.AdamW compute them.
    const double max_norm =
        config_.max_grad_norm > 0 ? config_.max_grad_norm : std::numeric_limits<double>::infinity();
    const double clip = max_norm / (info.grad_norm + 1e-6);
    if (clip < 1) grad.mul_(clip);
    ++adam_steps_;
    adamw_update(grad, info.lr);
    if (world_ > 1) {
      // Every rank's updated slice into every rank's working weights.
      torch::Tensor mine = torch::zeros({shard_}, state_options_);
      mine.narrow(0, 0, n).copy_(masters_);
      torch::Tensor all = torch::empty({shard_ * world_}, state_options_);
      group_->all_gather(mine, all);
      for (size_t i = 0; i < parameters_.size(); ++i) {
        auto p = parameters_[i].detach();
        p.view({-1}).copy_(all.narrow(0, offsets_[i], p.numel()));
      }
    }
  }
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters_) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (!grads.empty()) torch::_foreach_zero_(grads);  // foreach ops refuse empty lists
  ++steps_;
  return info;
}

void Optimizer::adamw_update(const torch::Tensor& grad, double lr) {
  if (segments_.empty()) return;  // this rank's slice is empty (more ranks than elements)
  std::vector<torch::Tensor> masters;
  for (const auto& seg : segments_) masters.push_back(seg.master);
  // Each segment's (parameter's, or this rank's slice's) view of a flat vector.
  const auto views_of = [this](const torch::Tensor& flat) {
    std::vector<torch::Tensor> views;
    for (const auto& seg : segments_)
      views.push_back(flat.narrow(0, seg.offset, seg.master.numel()));
    return views;
  };
  const double b1 = config_.beta1, b2 = config_.beta2;
  // Decoupled weight decay first, as torch.optim.AdamW; then Adam without decay.
  if (config_.weight_decay != 0) torch::_foreach_mul_(masters, 1 - lr * config_.weight_decay);
  if (state_options_.device().is_cuda()) {
    // libtorch's fused Adam kernel (CUDA in every libtorch since 1.13): moments, bias correction
    // and the update in one pass over each tensor, a few launches for the whole model.
    const torch::Tensor step = torch::full({}, static_cast<double>(adam_steps_), state_options_);
    const std::vector<torch::Tensor> steps(masters.size(), step);
    torch::_fused_adam_(masters, views_of(grad), views_of(exp_avg_), views_of(exp_avg_sq_),
                        /*max_exp_avg_sqs=*/{}, steps, lr, b1, b2,
                        /*weight_decay=*/0.0, config_.eps, /*amsgrad=*/false, /*maximize=*/false);
    return;
  }
  // The moments are flat, so a handful of ops covers the slice; the masters take one foreach op
  // (a loop on the CPU, multi-tensor kernels elsewhere).
  const double bc1 = 1 - std::pow(b1, static_cast<double>(adam_steps_));
  const double bc2 = 1 - std::pow(b2, static_cast<double>(adam_steps_));
  exp_avg_.mul_(b1).add_(grad, 1 - b1);
  exp_avg_sq_.mul_(b2).addcmul_(grad, grad, 1 - b2);
  const torch::Tensor denom = (exp_avg_sq_.sqrt() / std::sqrt(bc2)).add_(config_.eps);
  torch::_foreach_addcdiv_(masters, views_of(exp_avg_), views_of(denom), -lr / bc1);
}

void Optimizer::save(const fs::path& dir) {
  if (rank_ != 0) {
    group_->send(exp_avg_, 0);
    group_->send(exp_avg_sq_, 0);
    return;
  }
  const fs::path out = dir / "optimizer";
  fs::create_directories(out);
  Json shards = Json::array();
  for (int r = 0; r < world_; ++r) {
    const auto [lo, hi] = slice_of(r);
    torch::Tensor m, v;
    if (r == 0) {
      m = exp_avg_.cpu();
      v = exp_avg_sq_.cpu();
    } else {
      m = torch::empty({hi - lo}, torch::kFloat32);
      v = torch::empty({hi - lo}, torch::kFloat32);
      group_->recv(m, r);
      group_->recv(v, r);
    }
    const std::string file = shard_file(r, world_);
    model::write_safetensors(out / file,
                             {{"exp_avg", model::DType::F32, {hi - lo}, bytes_of(m)},
                              {"exp_avg_sq", model::DType::F32, {hi - lo}, bytes_of(v)}});
    shards.push_back({{"file", file}, {"begin", lo}, {"end", hi}});
  }
  const Json index{{"format", kFormat},
                   {"parameters", total_},
                   {"steps", steps_},
                   {"adam_steps", adam_steps_},
                   {"shards", shards}};
  write_file_atomic(out / "index.json", index.dump(1) + "\n");
}

void Optimizer::load_moments(const fs::path& dir, torch::Tensor& m, torch::Tensor& v,
                             int64_t& steps, int64_t& adam_steps) const {
  const fs::path index_path = dir / "optimizer" / "index.json";
  const fs::path legacy = dir / "optimizer.pt";
  if (!fs::exists(index_path) && fs::exists(legacy)) {
    // A checkpoint from before sharding: one torch::optim::AdamW archive.
    std::vector<torch::Tensor> params;
    for (const auto& p : parameters_) params.push_back(torch::zeros_like(p));
    torch::optim::AdamW adamw(params);
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(legacy.string());
      adamw.load(archive);
      torch::Tensor s;
      archive.read("trellis_steps", s);
      steps = s.item<int64_t>();
    } catch (const c10::Error& e) {
      fail(legacy.string(), "cannot read optimizer state: {}", e.what_without_backtrace());
    }
    adam_steps = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const auto it = adamw.state().find(adamw_state_key(params[i]));
      if (it == adamw.state().end()) continue;
      const auto& st = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      m.narrow(0, offsets_[i], params[i].numel()).copy_(st.exp_avg().reshape({-1}));
      v.narrow(0, offsets_[i], params[i].numel()).copy_(st.exp_avg_sq().reshape({-1}));
      adam_steps = std::max(adam_steps, st.step());
    }
    return;
  }
  if (!fs::exists(index_path))
    fail(index_path.string(), "missing: the checkpoint has no optimizer state");
  const std::string where = index_path.string();
  const Json index = read_json_file(where);
  if (json_required<std::string>(index, "format", where) != kFormat)
    fail(where, "not a {} index", kFormat);
  const auto parameters = json_required<int64_t>(index, "parameters", where);
  if (parameters != total_) {
    fail(where, "holds the state of {} parameters; this model has {}", parameters, total_);
  }
  steps = json_required<int64_t>(index, "steps", where);
  adam_steps = json_required<int64_t>(index, "adam_steps", where);
  int64_t covered = 0;
  for (const auto& s : json_required<std::vector<Json>>(index, "shards", where)) {
    const auto name = json_required<std::string>(s, "file", where);
    const auto lo = json_required<int64_t>(s, "begin", where);
    const auto hi = json_required<int64_t>(s, "end", where);
    if (lo != covered || hi < lo || hi > total_ || name.find('/') != std::string::npos)
      fail(where, "shard '{}' [{}, {}) does not continue at {}", name, lo, hi, covered);
    covered = hi;
    const fs::path path = dir / "optimizer" / name;
    const auto file = model::SafetensorsFile::open(path);
    for (auto [key, out] : {std::pair{"exp_avg", &m}, std::pair{"exp_avg_sq", &v}}) {
      const auto* t = file.find(key);
      if (!t || t->dtype != model::DType::F32 || t->numel() != hi - lo)
        fail(path.string(), "no fp32 '{}' of {} elements", key, hi - lo);
      std::memcpy(out->narrow(0, lo, hi - lo).data_ptr(), file.data(*t).data(), t->nbytes());
    }
  }
  if (covered != total_) fail(where, "the shards end at {} of {} elements", covered, total_);
}

void Optimizer::load(const fs::path& dir) {
  torch::Tensor counts = torch::zeros({2}, torch::kInt64);
  if (rank_ == 0) {
    torch::Tensor m = torch::zeros({total_}, torch::kFloat32);
    torch::Tensor v = torch::zeros({total_}, torch::kFloat32);
    int64_t steps = 0, adam_steps = 0;
    load_moments(dir, m, v, steps, adam_steps);
    counts[0] = steps;
    counts[1] = adam_steps;
    for (int r = 1; r < world_; ++r) {
      const auto [lo, hi] = slice_of(r);
      group_->send(m.narrow(0, lo, hi - lo), r);
      group_->send(v.narrow(0, lo, hi - lo), r);
    }
    exp_avg_.copy_(m.narrow(0, begin_, end_ - begin_));
    exp_avg_sq_.copy_(v.narrow(0, begin_, end_ - begin_));
  } else {
    group_->recv(exp_avg_, 0);
    group_->recv(exp_avg_sq_, 0);
  }
  if (group_) group_->broadcast(counts, 0);
  steps_ = counts[0].item<int64_t>();
  adam_steps_ = counts[1].item<int64_t>();
}

}  // namespace trellis::rl
