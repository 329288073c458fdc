// Transformer tests: the packed and incremental paths against each other and against a naive,
// independently written double-precision reference, for every supported architecture.
#include "model/transformer.h"

#include <cmath>
#include <functional>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "model/fp8/block_quant.h"
#include "model/presets.h"
#include "model/rope_reference.h"
#include "peak_rss.h"

namespace trellis::model {
namespace {

using torch::indexing::Slice;

HfConfig tiny(Arch arch) {
  HfConfig c = preset_config(arch, "tiny");
  c.num_hidden_layers = 2;
  return c;
}

// Random init plus non-trivial norms and biases, so that every parameter matters.
std::unique_ptr<Transformer> make_model(const HfConfig& c, torch::ScalarType dtype,
                                        uint64_t seed = 1) {
  auto m = std::make_unique<Transformer>(c, Compute{torch::kCPU, dtype});
  m->init_random(seed);
  torch::NoGradGuard g;
  auto gen = at::detail::createCPUGenerator(seed + 100);
  for (auto& [name, p] : m->named_parameters()) {
    if (name.find("norm") != std::string::npos) p.add_(at::normal(0.0, 0.2, p.sizes(), gen));
    if (name.find(".bias") != std::string::npos) p.copy_(at::normal(0.0, 0.1, p.sizes(), gen));
  }
  return m;
}

torch::Tensor random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  return at::randint(vocab, {n}, gen, torch::kInt64);
}

// y = x W^T of a decoder linear layer, in double.
using Projection = std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& w)>;
torch::Tensor exact_projection(const torch::Tensor& x, const torch::Tensor& w) {
  return torch::matmul(x, w.t());
}
// The FP8 layer's definition: x in 1x128 groups and W in 128x128 blocks, each rounded to E4M3
// with its scale (fp8/block_quant, tested on its own), then multiplied in double.
torch::Tensor fp8_projection(const torch::Tensor& x, const torch::Tensor& w) {
  auto q = [](const torch::Tensor& t, int64_t rows) {
    return fp8::dequantize(fp8::quantize_blocks(t.to(torch::kFloat32), rows, fp8::kGroup))
        .to(torch::kFloat64);
  };
  return torch::matmul(q(x, 1), q(w, fp8::kGroup).t());
}

// Naive reference: per head, per query loops over explicit formulas, in double precision, for
// tokens at `positions` (0, 1, ... if empty).
torch::Tensor reference_logits(const Transformer& m, const torch::Tensor& tokens,
                               const Projection& project = exact_projection,
                               std::vector<int64_t> positions = {}) {
  const HfConfig& c = m.config();
  auto P = [&](const std::string& n) { return m.parameter(n).to(torch::kFloat64); };
  auto rms = [&](const torch::Tensor& x, const torch::Tensor& w) {
    return x / torch::sqrt(x.pow(2).mean(-1, true) + c.rms_norm_eps) * w;
  };
  const int64_t T = tokens.size(0), hd = c.head_dim;
  if (positions.empty()) {
    for (int64_t t = 0; t < T; ++t) positions.push_back(t);
  }
  const auto inv_freq = reference::inv_freq(c);
  const double rope_scale = reference::attention_factor(c.rope_scaling);
  auto rope_row = [&](torch::Tensor v, int64_t pos) {  // v: [hd]
    auto out = v.clone();
    for (int64_t i = 0; i < hd / 2; ++i) {
      // The angle in fp32, as Hugging Face computes it (one rounding of the exact product).
      double a = static_cast<float>(pos) * static_cast<float>(inv_freq[i]);
      double cos = rope_scale * std::cos(a), sin = rope_scale * std::sin(a);
      double x1 = v[i].item<double>(), x2 = v[i + hd / 2].item<double>();
      out[i] = x1 * cos - x2 * sin;
      out[i + hd / 2] = x2 * cos + x1 * sin;
    }
    return out;
  };
  auto x = P("model.embed_tokens.weight").index_select(0, tokens);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    auto h = rms(x, P(p + "input_layernorm.weight"));
    auto proj = [&](const std::string& n) {
      auto y = project(h, P(p + "self_attn." + n + ".weight"));
      if (c.attention_bias) y = y + P(p + "self_attn." + n + ".bias");
      return y;
    };
    auto q = proj("q_proj"), k = proj("k_proj"), v = proj("v_proj");
    auto attn = torch::zeros({T, c.num_attention_heads * hd}, torch::kFloat64);
    for (int64_t head = 0; head < c.num_attention_heads; ++head) {
      int64_t kvh = head / (c.num_attention_heads / c.num_key_value_heads);
      std::vector<torch::Tensor> qs, ks;
      for (int64_t t = 0; t < T; ++t) {
        auto qv = q[t].slice(0, head * hd, (head + 1) * hd);
        auto kv = k[t].slice(0, kvh * hd, (kvh + 1) * hd);
        if (c.qk_norm) {
          qv = rms(qv, P(p + "self_attn.q_norm.weight"));
          kv = rms(kv, P(p + "self_attn.k_norm.weight"));
        }
        qs.push_back(rope_row(qv, positions[t]));
        ks.push_back(rope_row(kv, positions[t]));
      }
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(i + 1);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          s[j] = torch::dot(qs[i], ks[j]).item<double>() / std::sqrt(double(hd));
          mx = std::max(mx, s[j]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        auto o = torch::zeros({hd}, torch::kFloat64);
        for (int64_t j = 0; j <= i; ++j) o += s[j] / sum * v[j].slice(0, kvh * hd, (kvh + 1) * hd);
        attn[i].slice(0, head * hd, (head + 1) * hd).copy_(o);
      }
    }
    x = x + project(attn, P(p + "self_attn.o_proj.weight"));
    auto h2 = rms(x, P(p + "post_attention_layernorm.weight"));
    auto g = project(h2, P(p + "mlp.gate_proj.weight"));
    auto u = project(h2, P(p + "mlp.up_proj.weight"));
    x = x + project(g / (1 + torch::exp(-g)) * u, P(p + "mlp.down_proj.weight"));
  }
  auto head = c.tie_word_embeddings ? P("model.embed_tokens.weight") : P("lm_head.weight");
  return torch::matmul(rms(x, P("model.norm.weight")), head.t());
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

class TransformerArch : public ::testing::TestWithParam<Arch> {};

TEST_P(TransformerArch, MatchesNaiveReference) {
  torch::NoGradGuard g;
  HfConfig c = tiny(GetParam());
  auto m = make_model(c, torch::kFloat32);
  auto tokens = random_tokens(11, c.vocab_size, 7);
  auto ours = m->forward(tokens).logits;
  auto ref = reference_logits(*m, tokens);
  EXPECT_LT(max_diff(ours, ref), 1e-4) << arch_name(c.arch);
  EXPECT_GT(ref.abs().max().item<double>(), 0.1);  // not trivially zero
}

// Each rope_scaling, with an original context short enough that the tiny model's frequencies
// fall on both sides of it, against the reference; and it must change the logits.
TEST(Transformer, RopeScalingMatchesNaiveReference) {
  torch::NoGradGuard g;
  const HfConfig plain = tiny(Arch::Llama);
  const auto tokens = random_tokens(11, plain.vocab_size, 7);
  const auto plain_logits = make_model(plain, torch::kFloat32)->forward(tokens).logits;
  for (const char* scaling :
       {R"({"rope_type": "linear", "factor": 4.0})",
        R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64})",
        R"({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})"}) {
    HfConfig c = plain;
    c.rope_scaling = RopeScaling::from_json(Json::parse(scaling), "test");
    auto m = make_model(c, torch::kFloat32);
    auto ours = m->forward(tokens).logits;
    EXPECT_LT(max_diff(ours, reference_logits(*m, tokens)), 1e-4) << scaling;
    EXPECT_GT(max_diff(ours, plain_logits), 1e-3) << scaling;
  }
}

TEST_P(TransformerArch, PackedEqualsPerSample) {
  torch::NoGradGuard g;
  HfConfig c = tiny(GetParam());
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    auto m = make_model(c, dtype);
    std::vector<int64_t> lens = {5, 9, 1, 3};
    std::vector<torch::Tensor> samples, positions;
    for (size_t i = 0; i < lens.size(); ++i) {
      samples.push_back(random_tokens(lens[i], c.vocab_size, 20 + i));
      positions.push_back(torch::arange(lens[i], torch::kInt64));
    }
    auto packed = m->forward_packed(torch::cat(samples), torch::cat(positions), lens,
                                    {.logits = true, .hidden = true});
    int64_t start = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      auto single = m->forward(samples[i], {.logits = true, .hidden = true});
      auto part = packed.logits.narrow(0, start, lens[i]);
      double tol = dtype == torch::kFloat32 ? 1e-5 : 2e-2;
      EXPECT_LT(max_diff(part, single.logits), tol) << "sample " << i;
      EXPECT_LT(max_diff(packed.hidden.narrow(0, start, lens[i]), single.hidden), tol * 10);
      start += lens[i];
    }
  }
}

TEST_P(TransformerArch, KvCacheStepsEqualFullForward) {
  torch::NoGradGuard g;
  HfConfig c = tiny(GetParam());
  auto m = make_model(c, torch::kFloat32);
  const int64_t T = 13;
  auto tokens = random_tokens(T, c.vocab_size, 3);
  auto full = m->forward(tokens, {.logits = true, .hidden = true});
  // Batch of two identical rows: prefill 4, then 1, 1, a chunk of 3, then one at a time.
  KVCache cache(c, 2, T, m->compute());
  auto rows = tokens.unsqueeze(0).repeat({2, 1});
  int64_t pos = 0;
  for (int64_t chunk : {4, 1, 1, 3, 1, 1, 1, 1}) {
    auto out = m->forward_step(rows.narrow(1, pos, chunk), cache, {.logits = true, .hidden = true});
    for (int64_t b = 0; b < 2; ++b) {
      EXPECT_LT(max_diff(out.logits[b], full.logits.narrow(0, pos, chunk)), 1e-5)
          << "positions " << pos << ".." << pos + chunk - 1;
      EXPECT_LT(max_diff(out.hidden[b], full.hidden.narrow(0, pos, chunk)), 1e-5);
    }
    pos += chunk;
  }
  EXPECT_EQ(cache.length(), T);
  EXPECT_THROW(m->forward_step(rows.narrow(1, 0, 1), cache), Error);  // cache full
}

TEST_P(TransformerArch, Fp8LayersMatchTheirDefinitionOnEveryPath) {
  HfConfig c = tiny(GetParam());
  auto m = make_model(c, torch::kFloat32);
  const int64_t T = 13;
  auto tokens = random_tokens(T, c.vocab_size, 3);
  torch::Tensor full;
  {
    torch::NoGradGuard g;
    full = m->forward(tokens, {.fp8 = true}).logits;
    const auto exact = reference_logits(*m, tokens);
    const auto fp8_ref = reference_logits(*m, tokens, fp8_projection);
    // FP8 moves the logits by several percent; the definition accounts for nearly all of it.
    // Not all: the reference computes activations in double, and an activation within 1e-7 of a
    // rounding boundary of E4M3 may land on the neighbouring code (1/16 away), which attention
    // carries to the later positions (1e-7 relative agreement without one, about 1% with one).
    const auto off = [&](const torch::Tensor& ref) {
      return ((full.to(torch::kFloat64) - ref).norm() / ref.norm()).item<double>();
    };
    EXPECT_GT(off(exact), 0.01) << arch_name(c.arch);
    EXPECT_LT(off(fp8_ref), off(exact) / 3) << arch_name(c.arch);
    // The engine's path: weights quantised once, a KV cache, a chunk at a time.
    KVCache cache(c, 1, T, m->compute());
    int64_t pos = 0;
    for (int64_t chunk : {4, 1, 3, 5}) {
      auto out = m->forward_step(tokens.narrow(0, pos, chunk).unsqueeze(0), cache, {.fp8 = true});
      EXPECT_LT(max_diff(out.logits[0], full.narrow(0, pos, chunk)), 1e-5) << pos;
      pos += chunk;
    }
  }
  // The trainer's path (autograd, quantised per forward) computes the same numbers, and its
  // gradients reach every fp32 master.
  m->set_requires_grad(true);
  auto trained = m->forward(tokens, {.fp8 = true}).logits;
  EXPECT_TRUE(torch::equal(trained.detach(), full));
  trained.logsumexp(-1).mean().backward();
  for (const auto& [name, p] : m->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32) << name;
    EXPECT_TRUE(torch::isfinite(p.grad()).all().item<bool>()) << name;
  }
  EXPECT_GT(m->parameter("model.layers.1.mlp.down_proj.weight").grad().abs().sum().item<double>(),
            0);
}

INSTANTIATE_TEST_SUITE_P(AllArchs, TransformerArch,
                         ::testing::Values(Arch::Llama, Arch::Qwen2, Arch::Qwen3),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

// The autograd nodes reachable from `t`, by name.
std::map<std::string, int> graph_nodes(const torch::Tensor& t) {
  std::map<std::string, int> names;
  std::set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{t.grad_fn().get()};
  while (!todo.empty()) {
    auto* node = todo.back();
    todo.pop_back();
    if (!node || !seen.insert(node).second) continue;
    ++names[node->name()];
    for (const auto& edge : node->next_edges()) todo.push_back(edge.function.get());
  }
  return names;
}

int nodes_named(const std::map<std::string, int>& nodes, const std::string& part) {
  int n = 0;
  for (const auto& [name, count] : nodes)
    if (name.find(part) != std::string::npos) n += count;
  return n;
}

// Activation checkpointing changes where activations live, never the numbers: the logits and
// every parameter's gradient equal the plain backward's (fp32, bf16 compute, FP8 layers). And it
// does change where they live: the graph holds one node per layer instead of the layers' ops.
TEST(Transformer, RecomputedLayersGiveTheSameGradients) {
  for (auto [arch, dtype, fp8] : {std::tuple{Arch::Qwen2, torch::kFloat32, false},
                                  std::tuple{Arch::Qwen3, torch::kBFloat16, false},
                                  std::tuple{Arch::Llama, torch::kFloat32, true}}) {
    HfConfig c = tiny(arch);
    auto m = make_model(c, dtype);
    m->set_requires_grad(true);
    const std::vector<int64_t> lens = {9, 14};
    auto tokens = random_tokens(23, c.vocab_size, 11);
    auto positions = torch::cat({torch::arange(9), torch::arange(14)});
    auto rows = torch::tensor({3, 8, 10, 20, 22});
    auto target = at::normal(0.0, 1.0, {5, c.vocab_size}, at::detail::createCPUGenerator(4));
    auto run = [&](bool recompute) {
      for (auto& [_, p] : m->named_parameters()) p.mutable_grad() = torch::Tensor();
      auto logits = m->forward_packed(tokens, positions, lens,
                                      {.rows = rows, .fp8 = fp8, .recompute_layers = recompute})
                        .logits;
      const auto nodes = graph_nodes(logits);
      EXPECT_EQ(nodes_named(nodes, "RecomputedLayer"), recompute ? c.num_hidden_layers : 0);
      // Without recompute, every op of every layer is in the graph, with what it saved.
      const int total = nodes_named(nodes, "") - nodes_named(nodes, "AccumulateGrad");
      // With it: the layer nodes and the ops outside the layers (embedding, final norm, LM head,
      // casts).
      if (recompute) EXPECT_LE(total, c.num_hidden_layers + 10) << arch_name(arch);
      if (!recompute) EXPECT_GT(total, 10 * c.num_hidden_layers) << arch_name(arch);
      (logits * target).sum().backward();
      std::vector<torch::Tensor> grads{logits.detach()};
      for (auto& [_, p] : m->named_parameters()) grads.push_back(p.grad().clone());
      return grads;
    };
    const auto plain = run(false), recomputed = run(true);
    ASSERT_EQ(plain.size(), recomputed.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      const std::string what = i == 0 ? "logits" : m->named_parameters()[i - 1].first;
      ASSERT_TRUE(recomputed[i].defined()) << what;
      const double scale = plain[i].abs().max().item<double>();
      EXPECT_GT(scale, 0) << what;
      EXPECT_LE(max_diff(plain[i], recomputed[i]), 1e-6 * scale) << arch_name(arch) << " " << what;
    }
  }
}

TEST(Transformer, HiddenStatesAreTheLmHeadInput) {
  torch::NoGradGuard g;
  HfConfig c = tiny(Arch::Qwen2);
  c.tie_word_embeddings = false;
  auto m = make_model(c, torch::kFloat32);
  auto out = m->forward(random_tokens(6, c.vocab_size, 1), {.logits = true, .hidden = true});
  auto expect = torch::matmul(out.hidden, m->parameter("lm_head.weight").t());
  EXPECT_LT(max_diff(out.logits, expect), 1e-5);
}

TEST(Transformer, BiasAndQkNormParametersAreUsed) {
  torch::NoGradGuard g;
  for (auto [arch, name] : {std::pair{Arch::Qwen2, "model.layers.0.self_attn.k_proj.bias"},
                            std::pair{Arch::Qwen3, "model.layers.0.self_attn.q_norm.weight"}}) {
    HfConfig c = tiny(arch);
    auto m = make_model(c, torch::kFloat32);
    auto tokens = random_tokens(8, c.vocab_size, 2);
    auto before = m->forward(tokens).logits;
    m->parameter(name).mul_(3.0).add_(0.5);
    EXPECT_GT(max_diff(before, m->forward(tokens).logits), 1e-3) << name;
  }
  EXPECT_THROW(make_model(tiny(Arch::Llama), torch::kFloat32)
                   ->parameter("model.layers.0.self_attn.q_proj.bias"),
               Error);
}

TEST(Transformer, Bf16ComputeTracksFp32AndGradientsReachFp32Masters) {
  HfConfig c = tiny(Arch::Qwen3);
  auto m32 = make_model(c, torch::kFloat32);
  auto m16 = make_model(c, torch::kBFloat16);
  auto tokens = random_tokens(16, c.vocab_size, 5);
  {
    torch::NoGradGuard g;
    auto a = torch::log_softmax(m32->forward(tokens).logits, -1);
    auto b = torch::log_softmax(m16->forward(tokens).logits, -1);
    EXPECT_LT(max_diff(a, b), 0.1);
  }
  m16->set_requires_grad(true);
  auto loss = m16->forward(tokens).logits.logsumexp(-1).mean();
  loss.backward();
  for (const auto& [name, p] : m16->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_EQ(p.grad().scalar_type(), torch::kFloat32) << name;
  }
  EXPECT_GT(m16->parameter("model.layers.1.mlp.down_proj.weight").grad().abs().sum().item<double>(),
            0);
}

// Device graphs replay a forward on the addresses it read (model/device_graph.h). The bf16 copies
// of the weights (casts, and the concatenated q/k/v and gate/up weights and biases) are refreshed
// in place when their masters change: buffer_generation() holds still and the forward computes
// with the new weights. It moves when the copies are dropped or the RoPE tables grow.
TEST(Transformer, WeightCopiesAreRefreshedInPlaceAndTheirMovesCounted) {
  torch::NoGradGuard g;
  HfConfig c = tiny(Arch::Qwen2);
  c.max_position_embeddings = 1 << 16;
  auto m = make_model(c, torch::kBFloat16);
  const auto tokens = random_tokens(12, c.vocab_size, 3);
  const auto before = m->forward(tokens).logits;
  const int64_t generation = m->buffer_generation();
  for (const auto& [name, p] : m->named_parameters()) p.mul_(1.25);
  const auto after = m->forward(tokens).logits;
  EXPECT_EQ(m->buffer_generation(), generation) << "the copies kept their addresses";
  Transformer fresh(c, m->compute());
  fresh.copy_weights_from(*m);
  EXPECT_TRUE(torch::equal(after, fresh.forward(tokens).logits)) << "the copies are current";
  EXPECT_GT(max_diff(after, before), 1e-2);

  m->reserve_positions(kInitialRopePositions - 1);
  m->refresh_weight_copies();
  EXPECT_EQ(m->buffer_generation(), generation);
  m->reserve_positions(kInitialRopePositions);
  EXPECT_GT(m->buffer_generation(), generation) << "longer RoPE tables";
  const int64_t grown = m->buffer_generation();
  m->set_requires_grad(false);
  EXPECT_GT(m->buffer_generation(), grown) << "the copies dropped";
}

// A long-context model's RoPE tables hold the positions used so far, and grow past
// kInitialRopePositions when a forward reaches further: the logits match the reference at
// positions on both sides of the first tables, and they are the same bits whether the tables
// grew for them or were that long already. (Not one run of far positions: RoPE sees only the
// distances between positions, so a shift of every position changes nothing.)
TEST(Transformer, PositionsBeyondTheFirstRopeTablesMatchTheReference) {
  torch::NoGradGuard g;
  HfConfig c = tiny(Arch::Qwen3);
  c.max_position_embeddings = 1 << 20;
  const int64_t far = 3 * kInitialRopePositions + 5;
  const std::vector<int64_t> spread = {0, 1, 2, far, far + 1, far + 2};
  const auto tokens = random_tokens(6, c.vocab_size, 9);
  const auto positions = torch::tensor(spread, torch::kInt64);
  auto grown = make_model(c, torch::kFloat32);
  auto contiguous = grown->forward(tokens).logits;
  auto logits = grown->forward_packed(tokens, positions, {6}).logits;
  EXPECT_LT(max_diff(logits, reference_logits(*grown, tokens, exact_projection, spread)), 1e-4);
  EXPECT_GT(max_diff(logits, contiguous), 1e-3);  // the positions matter

  // A model whose tables reached further first.
  auto longer = make_model(c, torch::kFloat32);
  longer->forward_packed(tokens, positions * 5, {6});
  EXPECT_TRUE(torch::equal(longer->forward_packed(tokens, positions, {6}).logits, logits));
  EXPECT_TRUE(torch::equal(longer->forward(tokens).logits, contiguous));
}

// Decoding across the end of the first tables: the KV-cache steps past kInitialRopePositions
// give what one forward over the whole sequence gives.
TEST(Transformer, KvCacheStepsCrossTheFirstRopeTables) {
  torch::NoGradGuard g;
  HfConfig c = tiny(Arch::Llama);
  c.max_position_embeddings = 1 << 16;
  auto m = make_model(c, torch::kFloat32);
  const int64_t T = kInitialRopePositions + 6;
  const auto tokens = random_tokens(T, c.vocab_size, 4);
  KVCache cache(c, 1, T, m->compute());
  const int64_t prefill = kInitialRopePositions - 3;
  m->forward_step(tokens.narrow(0, 0, prefill).unsqueeze(0), cache);
  auto steps = m->forward_step(tokens.narrow(0, prefill, T - prefill).unsqueeze(0), cache).logits;
  auto full = make_model(c, torch::kFloat32)->forward(tokens).logits;
  EXPECT_LT(max_diff(steps[0], full.narrow(0, prefill, T - prefill)), 1e-4);
}

// The tables of a 4M-position model are 512 MiB at head_dim 32 (more while they are computed);
// a model that uses a few thousand positions holds a few thousand rows.
TEST(Transformer, ALongContextCostsNoMemoryUntilItsPositionsAreUsed) {
  torch::NoGradGuard g;
  HfConfig c = tiny(Arch::Llama);
  c.max_position_embeddings = 1 << 22;
  const int64_t before = test::peak_rss();
  auto m = make_model(c, torch::kFloat32);
  m->forward(random_tokens(16, c.vocab_size, 2));
  EXPECT_LT(test::peak_rss() - before, int64_t{128} << 20);
}

TEST(Transformer, RejectsPositionsBeyondTheContext) {
  torch::NoGradGuard g;
  HfConfig c = tiny(Arch::Llama);
  c.max_position_embeddings = 8;
  auto m = make_model(c, torch::kFloat32);
  EXPECT_THROW(m->forward(random_tokens(9, c.vocab_size, 1)), Error);
  EXPECT_NO_THROW(m->forward(random_tokens(8, c.vocab_size, 1)));
}

}  // namespace
}  // namespace trellis::model
