#include "model/transformer.h"

#include <cmath>

#include "common/error.h"
#include "model/fused_ops.h"

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
  const int64_t d = config.hidden_size, hd = config.head_dim;
  const int64_t q = config.num_attention_heads * hd, kv = config.num_key_value_heads * hd;
  embed_ = add_param("model.embed_tokens.weight", {config.vocab_size, d});
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer l;
    l.input_norm = add_param(p + "input_layernorm.weight", {d});
    l.q_w = add_param(p + "self_attn.q_proj.weight", {q, d});
    l.k_w = add_param(p + "self_attn.k_proj.weight", {kv, d});
    l.v_w = add_param(p + "self_attn.v_proj.weight", {kv, d});
    if (config.attention_bias) {
      l.q_b = add_param(p + "self_attn.q_proj.bias", {q});
      l.k_b = add_param(p + "self_attn.k_proj.bias", {kv});
      l.v_b = add_param(p + "self_attn.v_proj.bias", {kv});
    }
    l.o_w = add_param(p + "self_attn.o_proj.weight", {d, q});
    if (config.qk_norm) {
      l.q_norm = add_param(p + "self_attn.q_norm.weight", {hd});
      l.k_norm = add_param(p + "self_attn.k_norm.weight", {hd});
    }
    l.post_norm = add_param(p + "post_attention_layernorm.weight", {d});
    l.gate_w = add_param(p + "mlp.gate_proj.weight", {config.intermediate_size, d});
    l.up_w = add_param(p + "mlp.up_proj.weight", {config.intermediate_size, d});
    l.down_w = add_param(p + "mlp.down_proj.weight", {d, config.intermediate_size});
    layers_.push_back(l);
  }
  final_norm_ = add_param("model.norm.weight", {d});
  lm_head_ =
      config.tie_word_embeddings ? embed_ : add_param("lm_head.weight", {config.vocab_size, d});

  // RoPE tables: inv_freq in fp32 from an int64 arange and angles in fp32, as HF computes them.
  auto inv_freq = 1.0 / torch::pow(config.rope_theta,
                                   torch::arange(0, hd, 2, torch::kInt64).to(torch::kFloat32) / hd);
  auto t = torch::arange(config.max_position_embeddings, torch::kInt64).to(torch::kFloat32);
  auto freqs = torch::outer(t, inv_freq);
  rope_cos_ = freqs.cos().to(compute.device);
  rope_sin_ = freqs.sin().to(compute.device);
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
}

torch::Tensor Transformer::w(const torch::Tensor& master) {
  if (master.scalar_type() == compute_.dtype) return master;
  if (torch::GradMode::is_enabled() && master.requires_grad()) return master.to(compute_.dtype);
  auto& slot = cast_cache_[master.unsafeGetTensorImpl()];
  if (!slot.value.defined() || slot.version != master._version()) {
    torch::NoGradGuard no_grad;
    slot.value = master.to(compute_.dtype);
    slot.version = master._version();
  }
  return slot.value;
}

torch::Tensor Transformer::rms_norm(const torch::Tensor& x, const torch::Tensor& weight) {
  return fused::rms_norm(x, weight, config_.rms_norm_eps);
}

std::array<torch::Tensor, 3> Transformer::project_qkv(const Layer& l, const torch::Tensor& h,
                                                      const torch::Tensor& cos,
                                                      const torch::Tensor& sin) {
  auto heads = [&](torch::Tensor x, int64_t n) {
    std::vector<int64_t> shape(h.sizes().begin(), h.sizes().end() - 1);
    shape.push_back(n);
    shape.push_back(config_.head_dim);
    return x.view(shape);
  };
  auto bias = [&](const torch::Tensor& b) { return b.defined() ? w(b) : torch::Tensor(); };
  auto q = heads(F::linear(h, w(l.q_w), bias(l.q_b)), config_.num_attention_heads);
  auto k = heads(F::linear(h, w(l.k_w), bias(l.k_b)), config_.num_key_value_heads);
  auto v = heads(F::linear(h, w(l.v_w), bias(l.v_b)), config_.num_key_value_heads);
  if (config_.qk_norm) {
    q = rms_norm(q, l.q_norm);
    k = rms_norm(k, l.k_norm);
  }
  return {fused::rope(q, cos, sin), fused::rope(k, cos, sin), v};
}

torch::Tensor Transformer::mlp(const Layer& l, const torch::Tensor& x) {
  auto gate = F::linear(x, w(l.gate_w));
  auto up = F::linear(x, w(l.up_w));
  return F::linear(fused::swiglu(gate, up), w(l.down_w));
}

ForwardOutput Transformer::finish(const torch::Tensor& x, ForwardOptions options) {
  ForwardOutput out;
  auto h = rms_norm(x, final_norm_);
  if (options.hidden) out.hidden = h;
  if (options.logits) out.logits = F::linear(h, w(lm_head_)).to(torch::kFloat32);
  return out;
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
  const int64_t max_pos = positions.numel() ? positions.max().item<int64_t>() : 0;
  if (max_pos >= config_.max_position_embeddings) {
    throw Error(fmt::format("position {} exceeds max_position_embeddings {}", max_pos,
                            config_.max_position_embeddings));
  }
  auto tok = tokens.to(compute_.device), pos = positions.to(compute_.device);
  auto cos = rope_cos_.index_select(0, pos), sin = rope_sin_.index_select(0, pos);
  auto x = F::embedding(tok, w(embed_));
  for (const Layer& l : layers_) {
    auto [q, k, v] = project_qkv(l, rms_norm(x, l.input_norm), cos, sin);
    x = x + F::linear(fused::packed_attention(q, k, v, seq_lens), w(l.o_w));
    x = x + mlp(l, rms_norm(x, l.post_norm));
  }
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
  if (P + t > config_.max_position_embeddings) {
    throw Error(fmt::format("position {} exceeds max_position_embeddings {}", P + t - 1,
                            config_.max_position_embeddings));
  }
  auto tok = tokens.to(compute_.device);
  auto cos = rope_cos_.narrow(0, P, t), sin = rope_sin_.narrow(0, P, t);
  auto x = F::embedding(tok, w(embed_));  // [B, t, d]
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    auto [q, k, v] = project_qkv(l, rms_norm(x, l.input_norm), cos, sin);
    cache.k_[i].narrow(2, P, t).copy_(k.permute({0, 2, 1, 3}));
    cache.v_[i].narrow(2, P, t).copy_(v.permute({0, 2, 1, 3}));
    auto ks = cache.k_[i].narrow(2, 0, P + t), vs = cache.v_[i].narrow(2, 0, P + t);
    x = x + F::linear(fused::cached_attention(q, ks, vs, P), w(l.o_w));
    x = x + mlp(l, rms_norm(x, l.post_norm));
  }
  cache.length_ = P + t;
  return finish(x, options);
}

}  // namespace trellis::model
