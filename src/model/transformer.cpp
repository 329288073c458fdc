#include "model/transformer.h"

#include <cmath>

#include "common/error.h"
#include "model/fused_ops.h"
#include "model/rope.h"

namespace trellis::model {

namespace F = torch::nn::functional;

KVCache::KVCache(const HfConfig& config, int64_t batch, int64_t capacity, const Compute& compute)
    : batch_(batch), capacity_(capacity) {
  auto opts = torch::TensorOptions().dtype(compute.dtype).device(compute.device);
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    k_.push_back(
        torch::zeros({batch, config.num_key_value_heads, capacity, config.head_dim}, opts));
    v_.push_back(
        torch::zeros({batch, config.num_key_value_heads, capacity, config.head_dim}, opts));
  }
}

Transformer::Transformer(const HfConfig& config, const Compute& compute)
    : config_(config), compute_(compute) {
  config_.validate("model config");
  for (const WeightShape& w : config_.weight_shapes()) add_param(w.name, w.shape);
  embed_ = parameter("model.embed_tokens.weight");
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer l;
    l.input_norm = parameter(p + "input_layernorm.weight");
    l.q_w = parameter(p + "self_attn.q_proj.weight");
    l.k_w = parameter(p + "self_attn.k_proj.weight");
    l.v_w = parameter(p + "self_attn.v_proj.weight");
    if (config.attention_bias) {
      l.q_b = parameter(p + "self_attn.q_proj.bias");
      l.k_b = parameter(p + "self_attn.k_proj.bias");
      l.v_b = parameter(p + "self_attn.v_proj.bias");
    }
    l.o_w = parameter(p + "self_attn.o_proj.weight");
    if (config.qk_norm) {
      l.q_norm = parameter(p + "self_attn.q_norm.weight");
      l.k_norm = parameter(p + "self_attn.k_norm.weight");
    }
    l.post_norm = parameter(p + "post_attention_layernorm.weight");
    l.gate_w = parameter(p + "mlp.gate_proj.weight");
    l.up_w = parameter(p + "mlp.up_proj.weight");
    l.down_w = parameter(p + "mlp.down_proj.weight");
    layers_.push_back(l);
  }
  final_norm_ = parameter("model.norm.weight");
  lm_head_ = config.tie_word_embeddings ? embed_ : parameter("lm_head.weight");
  rope_through(0);
}

torch::Tensor Transformer::add_param(const std::string& name, std::vector<int64_t> shape) {
  auto t =
      torch::zeros(shape, torch::TensorOptions().dtype(torch::kFloat32).device(compute_.device));
  index_[name] = params_.size();
  params_.emplace_back(name, t);
  return t;
}

void Transformer::init_random(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& [name, p] : params_) {
    bool is_norm = name.find("norm") != std::string::npos;
    bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (is_norm) {
      p.fill_(1.0);
    } else if (is_bias) {
      p.zero_();
    } else {
      auto cpu = at::normal(0.0, 0.02, p.sizes(), gen);
      p.copy_(cpu);
    }
  }
  cast_cache_.clear();
  concat_cache_.clear();
  fp8_cache_.clear();
  ++buffer_generation_;
}

std::vector<torch::Tensor> Transformer::parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& [_, p] : params_) out.push_back(p);
  return out;
}

torch::Tensor Transformer::parameter(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error("model has no parameter '" + name + "'");
  return params_[it->second].second;
}

void Transformer::set_requires_grad(bool requires_grad) {
  for (auto& [_, p] : params_) p.requires_grad_(requires_grad);
  cast_cache_.clear();
  concat_cache_.clear();
  fp8_cache_.clear();
  ++buffer_generation_;
}

torch::Tensor Transformer::w(const torch::Tensor& master) {
  if (master.scalar_type() == compute_.dtype) return master;
  if (torch::GradMode::is_enabled() && master.requires_grad()) return master.to(compute_.dtype);
  auto [it, added] = cast_cache_.try_emplace(master.unsafeGetTensorImpl());
  Cast& slot = it->second;
  if (added) {
    torch::NoGradGuard no_grad;
    slot = {master._version(), master, master.to(compute_.dtype)};
    ++buffer_generation_;
  }
  refresh(slot);
  return slot.value;
}

void Transformer::refresh(Cast& cast) {
  if (cast.version == cast.master._version()) return;
  torch::NoGradGuard no_grad;
  cast.value.copy_(cast.master);
  cast.version = cast.master._version();
}

void Transformer::refresh(Concat& concat) {
  std::vector<int64_t> versions;
  for (const auto& m : concat.masters) versions.push_back(m._version());
  if (versions == concat.versions) return;
  torch::NoGradGuard no_grad;
  int64_t offset = 0;
  for (const auto& m : concat.masters) {
    concat.value.narrow(0, offset, m.size(0)).copy_(m);
    offset += m.size(0);
  }
  concat.versions = std::move(versions);
}

void Transformer::refresh_weight_copies() {
  for (auto& [_, cast] : cast_cache_) refresh(cast);
  for (auto& [_, concat] : concat_cache_) refresh(concat);
}

// Up to this many rows a matmul streams its weight (fused::skinny_linear) rather than calling the
// GEMM library, whose weight packing dominates when decoding one or two sequences.
constexpr int64_t kSkinnyRows = 2;

torch::Tensor Transformer::linear(const torch::Tensor& x, const torch::Tensor& weight,
                                  const torch::Tensor& bias) {
  if (!torch::GradMode::is_enabled() && x.numel() <= kSkinnyRows * x.size(-1) &&
      fused::skinny_linear_supported(x, weight)) {
    return fused::skinny_linear(x, weight, bias);
  }
  return F::linear(x, weight, bias);
}

torch::Tensor Transformer::project(const torch::Tensor& x, const torch::Tensor& master,
                                   const torch::Tensor& bias, bool fp8) {
  const torch::Tensor b = bias.defined() ? w(bias) : torch::Tensor();
  if (!fp8) return linear(x, w(master), b);
  torch::Tensor y = torch::GradMode::is_enabled() && master.requires_grad()
                        ? fp8::fp8_linear(x, master)
                        : fp8::fp8_linear(x, fp8_weight(master));
  return b.defined() ? y + b : y;
}

// The FP8 copy `cache` holds of `master` while it is current (the master unchanged since it was
// made), else null.
template <class Cache>
auto current_fp8(Cache& cache, const torch::Tensor& master) -> decltype(&cache.begin()->second) {
  const auto it = cache.find(master.unsafeGetTensorImpl());
  return it != cache.end() && it->second.version == master._version() ? &it->second : nullptr;
}

void Transformer::set_fp8_weight(const std::string& name, fp8::Fp8Weight weight) {
  const torch::Tensor master = parameter(name);
  fp8_cache_.insert_or_assign(master.unsafeGetTensorImpl(),
                              Fp8Cast{master._version(), std::move(weight)});
}

void Transformer::copy_weights_from(const Transformer& other) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, p] : other.named_parameters()) {
    parameter(name).copy_(p);
    if (const auto* stored = current_fp8(other.fp8_cache_, p)) set_fp8_weight(name, stored->value);
  }
}

fp8::BlockQuantized Transformer::fp8_blocks(const std::string& name) const {
  const torch::Tensor master = parameter(name);
  if (const auto* stored = current_fp8(fp8_cache_, master)) return stored->value.blocks;
  torch::NoGradGuard no_grad;
  return fp8::quantize_weight(master.detach().to(torch::kCPU)).blocks;
}

const fp8::Fp8Weight& Transformer::fp8_weight(const torch::Tensor& master) {
  if (const auto* stored = current_fp8(fp8_cache_, master)) return stored->value;
  torch::NoGradGuard no_grad;
  return fp8_cache_
      .insert_or_assign(master.unsafeGetTensorImpl(),
                        Fp8Cast{master._version(), fp8::quantize_weight(master)})
      .first->second.value;
}

torch::Tensor Transformer::concatenated(const std::vector<torch::Tensor>& masters) {
  auto [it, added] = concat_cache_.try_emplace(masters[0].unsafeGetTensorImpl());
  Concat& slot = it->second;
  if (added) {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> parts;
    for (const auto& m : masters) {
      parts.push_back(m.to(compute_.dtype));
      slot.versions.push_back(m._version());
    }
    slot.masters = masters;
    slot.value = torch::cat(parts);
    ++buffer_generation_;
  }
  refresh(slot);
  return slot.value;
}

std::vector<torch::Tensor> Transformer::linear_split(const torch::Tensor& x,
                                                     const std::vector<torch::Tensor>& weights,
                                                     const std::vector<torch::Tensor>& biases,
                                                     bool fp8) {
  std::vector<torch::Tensor> out;
  const bool has_bias = biases[0].defined();
  if (fp8 || (torch::GradMode::is_enabled() && weights[0].requires_grad())) {
    for (size_t i = 0; i < weights.size(); ++i)
      out.push_back(project(x, weights[i], biases[i], fp8));
    return out;
  }
  torch::NoGradGuard no_grad;
  auto y = linear(x, concatenated(weights), has_bias ? concatenated(biases) : torch::Tensor());
  int64_t offset = 0;
  for (const auto& weight : weights) {
    out.push_back(y.narrow(-1, offset, weight.size(0)));
    offset += weight.size(0);
  }
  return out;
}

torch::Tensor Transformer::rms_norm(const torch::Tensor& x, const torch::Tensor& weight) {
  return fused::rms_norm(x, weight, config_.rms_norm_eps);
}

std::array<torch::Tensor, 3> Transformer::project_qkv(const Layer& l, const torch::Tensor& h,
                                                      const torch::Tensor& cos,
                                                      const torch::Tensor& sin, bool fp8) {
  auto heads = [&](const torch::Tensor& x, int64_t n) {
    std::vector<int64_t> shape(h.sizes().begin(), h.sizes().end() - 1);
    shape.push_back(n);
    shape.push_back(config_.head_dim);
    return x.reshape(shape);
  };
  auto qkv = linear_split(h, {l.q_w, l.k_w, l.v_w}, {l.q_b, l.k_b, l.v_b}, fp8);
  auto q = heads(qkv[0], config_.num_attention_heads);
  auto k = heads(qkv[1], config_.num_key_value_heads);
  auto v = heads(qkv[2], config_.num_key_value_heads);
  if (config_.qk_norm) {
    q = rms_norm(q, l.q_norm);
    k = rms_norm(k, l.k_norm);
  }
  return {fused::rope(q, cos, sin), fused::rope(k, cos, sin), v};
}

torch::Tensor Transformer::mlp(const Layer& l, const torch::Tensor& x, bool fp8) {
  auto gate_up = linear_split(x, {l.gate_w, l.up_w}, {torch::Tensor(), torch::Tensor()}, fp8);
  return project(fused::swiglu(gate_up[0], gate_up[1]), l.down_w, {}, fp8);
}

torch::Tensor Transformer::layer(size_t i, const torch::Tensor& x, const torch::Tensor& cos,
                                 const torch::Tensor& sin, const AttentionFn& attention, bool fp8) {
  const Layer& l = layers_[i];
  auto [q, k, v] = project_qkv(l, rms_norm(x, l.input_norm), cos, sin, fp8);
  auto h = x + project(attention(static_cast<int64_t>(i), q, k, v), l.o_w, {}, fp8);
  return h + mlp(l, rms_norm(h, l.post_norm), fp8);
}

namespace {

// What the backward pass needs to run a decoder layer again: a closure over the model, the
// layer's index, the rotary tables and the attention of the forward that ran it.
struct LayerRerun : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> run;
};

// Activation checkpointing: a decoder layer as one autograd node that saves only its input (and
// the layer's parameters, which live anyway). The forward builds the layer's graph with the same
// kernels as a plain forward and drops it at once; the backward builds it again from the saved
// input and differentiates that.
class RecomputedLayer : public torch::autograd::Function<RecomputedLayer> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               at::TensorList params, c10::intrusive_ptr<LayerRerun> rerun) {
    torch::Tensor y;
    {
      torch::AutoGradMode grad(true);
      y = rerun->run(x.detach());
    }
    std::vector<torch::Tensor> saved{x};
    saved.insert(saved.end(), params.begin(), params.end());
    ctx->save_for_backward(saved);
    ctx->saved_data["rerun"] = c10::IValue::make_capsule(std::move(rerun));
    return y.detach();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto inputs = ctx->get_saved_variables();  // x, then the parameters
    auto rerun =
        c10::static_intrusive_pointer_cast<LayerRerun>(ctx->saved_data["rerun"].toCapsule());
    inputs[0] = inputs[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode grad(true);
      y = rerun->run(inputs[0]);
    }
    auto grads = torch::autograd::grad({y}, inputs, {grad_out[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    grads.emplace_back();  // for `rerun`
    return grads;
  }
};

}  // namespace

torch::Tensor Transformer::run_layers(torch::Tensor x, const torch::Tensor& cos,
                                      const torch::Tensor& sin, const AttentionFn& attention,
                                      bool fp8, bool recompute) {
  recompute = recompute && torch::GradMode::is_enabled();
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!recompute) {
      x = layer(i, x, cos, sin, attention, fp8);
      continue;
    }
    auto rerun = c10::make_intrusive<LayerRerun>();
    rerun->run = [this, i, cos, sin, attention, fp8](const torch::Tensor& input) {
      return layer(i, input, cos, sin, attention, fp8);
    };
    std::vector<torch::Tensor> params;
    const Layer& l = layers_[i];
    for (const auto& p : {l.input_norm, l.q_w, l.q_b, l.k_w, l.k_b, l.v_w, l.v_b, l.o_w, l.q_norm,
                          l.k_norm, l.post_norm, l.gate_w, l.up_w, l.down_w}) {
      if (p.defined() && p.requires_grad()) params.push_back(p);
    }
    x = RecomputedLayer::apply(x, at::TensorList(params), rerun);
  }
  return x;
}

ForwardOutput Transformer::finish(const torch::Tensor& x, const ForwardOptions& options) {
  ForwardOutput out;
  auto h = rms_norm(options.rows.defined() ? x.index_select(0, options.rows.to(x.device())) : x,
                    final_norm_);
  if (options.hidden) out.hidden = h;
  if (options.logits) {
    out.logits = linear(h, w(lm_head_));
    if (!options.compute_dtype_logits) out.logits = out.logits.to(torch::kFloat32);
  }
  return out;
}

const RopeTables& Transformer::rope_through(int64_t max_position) {
  const int64_t limit = config_.max_position_embeddings;
  if (max_position >= limit) {
    throw Error(fmt::format("position {} exceeds max_position_embeddings {}", max_position, limit));
  }
  const int64_t rows = rope_.cos.defined() ? rope_.cos.size(0) : 0;
  if (max_position >= rows) {
    // Doubling: a long generation rebuilds the tables a logarithmic number of times.
    int64_t grown = std::max(rows, kInitialRopePositions);
    while (grown <= max_position) grown *= 2;
    rope_ = rope_tables(config_, std::min(grown, limit), compute_.device);
    ++buffer_generation_;
  }
  return rope_;
}

ForwardOutput Transformer::forward_packed(const torch::Tensor& tokens,
                                          const torch::Tensor& positions,
                                          const std::vector<int64_t>& seq_lens,
                                          ForwardOptions options) {
  const int64_t T = tokens.size(0);
  int64_t total = 0;
  for (int64_t len : seq_lens) {
    if (len <= 0) throw Error("packed forward: sample lengths must be positive");
    total += len;
  }
  if (tokens.dim() != 1 || positions.sizes() != tokens.sizes() || total != T) {
    throw Error("packed forward: tokens and positions must be [T] with sum(seq_lens) == T");
  }
  const auto& rope = rope_through(positions.numel() ? positions.max().item<int64_t>() : 0);
  auto tok = tokens.to(compute_.device), pos = positions.to(compute_.device);
  auto cos = rope.cos.index_select(0, pos), sin = rope.sin.index_select(0, pos);
  // seq_lens by value: with recompute_layers the backward pass calls this again.
  auto x = run_layers(
      F::embedding(tok, w(embed_)), cos, sin,
      [seq_lens](int64_t, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        return fused::packed_attention(q, k, v, seq_lens);
      },
      options.fp8, options.recompute_layers);
  return finish(x, options);
}

ForwardOutput Transformer::forward(const torch::Tensor& tokens, ForwardOptions options) {
  const int64_t T = tokens.size(0);
  return forward_packed(tokens, torch::arange(T, torch::kInt64), {T}, options);
}

ForwardOutput Transformer::forward_step(const torch::Tensor& tokens, KVCache& cache,
                                        ForwardOptions options) {
  if (tokens.dim() != 2 || tokens.size(0) != cache.batch_) {
    throw Error("forward_step: tokens must be [batch, t] with the cache's batch size");
  }
  const int64_t t = tokens.size(1), P = cache.length_;
  if (P + t > cache.capacity_) {
    throw Error(
        fmt::format("KV cache full: {} + {} tokens exceed capacity {}", P, t, cache.capacity_));
  }
  const auto& rope = rope_through(P + t - 1);
  auto tok = tokens.to(compute_.device);
  auto cos = rope.cos.narrow(0, P, t), sin = rope.sin.narrow(0, P, t);
  auto x = run_layers(
      F::embedding(tok, w(embed_)), cos, sin,  // x: [B, t, d]
      [&](int64_t i, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
        cache.k_[i].narrow(2, P, t).copy_(k.permute({0, 2, 1, 3}));
        cache.v_[i].narrow(2, P, t).copy_(v.permute({0, 2, 1, 3}));
        auto ks = cache.k_[i].narrow(2, 0, P + t);
        auto vs = cache.v_[i].narrow(2, 0, P + t);
        return fused::cached_attention(q, ks, vs, P);
      },
      options.fp8);
  cache.length_ = P + t;
  return finish(x, options);
}

ForwardOutput Transformer::forward_tokens(const torch::Tensor& tokens,
                                          const torch::Tensor& positions,
                                          const AttentionFn& attention, ForwardOptions options) {
  if (tokens.dim() != 1 || positions.sizes() != tokens.sizes() || tokens.numel() == 0) {
    throw Error("forward_tokens: tokens and positions must be non-empty [T]");
  }
  const auto& rope = rope_through(options.max_position >= 0 ? options.max_position
                                                            : positions.max().item<int64_t>());
  auto tok = tokens.to(compute_.device), pos = positions.to(compute_.device);
  auto cos = rope.cos.index_select(0, pos), sin = rope.sin.index_select(0, pos);
  auto x = run_layers(F::embedding(tok, w(embed_)), cos, sin, attention, options.fp8);
  return finish(x, options);
}

}  // namespace trellis::model
