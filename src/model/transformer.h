// Transformer: the decoder-only language model shared by the engine, trainer and validators.
//
// One implementation covers Llama, Qwen2 (q/k/v bias) and Qwen3 (per-head q/k RMSNorm): RMSNorm,
// RoPE (non-interleaved halves, as in Hugging Face), grouped-query attention, SwiGLU MLP, tied or
// untied LM head. Parameters are fp32 master tensors named exactly as in Hugging Face checkpoints
// ("model.layers.0.self_attn.q_proj.weight", ...); the math runs in the compute dtype (bf16 on
// hardware that has it), casting weights on the fly so gradients reach the fp32 masters.
//
// Three forward paths share every layer function and differ only in how attention finds its keys
// (on CPU, (a) and (c) compute each query with the same paged kernel, so a token's numbers do not
// depend on the path or on what else is in the batch):
//  (a) forward_packed: several samples concatenated into one token stream, positions restarting
//      per sample, attention confined to each sample (training, validation prefill);
//  (b) forward_step: new tokens for a batch of sequences appended to a KVCache (generation);
//  (c) forward_tokens: attention supplied by the caller (the rollout engine's paged KV cache).
// All can return the final hidden states (the LM head's input) in addition to, or instead of,
// the logits. Without autograd (generation) the Q/K/V and gate/up projections run as one matmul
// each on cached concatenated weights, and matmuls of a few rows use a weight-streaming kernel.
//
// Not thread-safe: one forward at a time per instance.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

#include "model/compute.h"
#include "model/fp8/fp8_linear.h"
#include "model/hf_config.h"
#include "model/rope.h"

namespace trellis::model {

struct ForwardOptions {
  bool logits = true;  // compute the LM head (fp32 logits)
  // The logits in the compute dtype instead of fp32, as the LM head's matmul gives them (for
  // token_logprobs, which reads them as they are: an fp32 copy of [tokens, vocab] is not made).
  bool compute_dtype_logits = false;
  bool hidden = false;  // return the final normed hidden states (compute dtype)
  // int64 indices into the leading dimension of the last layer's output: only these rows reach
  // the final norm and the LM head, so outputs are [rows, ...]. Undefined = all rows. (With a
  // large vocabulary, scoring only completion rows saves most of the LM head's time and memory.)
  torch::Tensor rows{};
  // The decoder layers' linear layers (q, k, v, o, gate, up, down) as block-scaled FP8 GEMMs
  // (Jet-RL, model/fp8/fp8_linear.h); the embedding, norms, attention and LM head stay in the
  // compute dtype. Without autograd each weight is quantised once per version of its master.
  bool fp8 = false;
  // Activation checkpointing, for forward_packed with autograd: each decoder layer keeps only its
  // input, and the backward pass runs the layer again to differentiate it. The activations of one
  // layer at a time are alive instead of every layer's, for about one more forward of compute;
  // values and gradients are those of the plain forward.
  bool recompute_layers = false;
  // forward_tokens: the largest of `positions` when the caller knows it (>= 0), so that the
  // forward never reads the positions back from the device (a device graph cannot).
  int64_t max_position = -1;
};

struct ForwardOutput {
  torch::Tensor logits;  // [tokens, vocab] (packed) or [batch, t, vocab] (step), fp32 (see above)
  torch::Tensor hidden;  // same leading shape, [..., hidden_size]
};

// Contiguous per-layer key/value cache for `batch` sequences that advance together.
// (The engine's paged cache is its own type; this one serves simple generation and tests.)
class KVCache {
 public:
  KVCache(const HfConfig& config, int64_t batch, int64_t capacity, const Compute& compute);
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }

 private:
  friend class Transformer;
  std::vector<torch::Tensor> k_, v_;  // per layer [batch, kv_heads, capacity, head_dim]
  int64_t batch_, capacity_, length_ = 0;
};

// Attention of one layer for forward_tokens: q [T, heads, hd] and k, v [T, kv_heads, hd] of the
// new tokens (normed and rotated) in, [T, heads * hd] out. The caller decides where keys and
// values are kept and which of them each query sees.
using AttentionFn = std::function<torch::Tensor(int64_t layer, const torch::Tensor& q,
                                                const torch::Tensor& k, const torch::Tensor& v)>;

// The RoPE positions a model's tables hold before any forward asks for more (or the config's
// context, if smaller): 2 MB at head_dim 128.
inline constexpr int64_t kInitialRopePositions = 4096;

class Transformer {
 public:
  // Allocates zeroed fp32 parameters for `config`; call init_random() or load weights.
  Transformer(const HfConfig& config, const Compute& compute);

  const HfConfig& config() const { return config_; }
  const Compute& compute() const { return compute_; }

  // Hugging Face initialisation: linear and embedding weights ~ N(0, 0.02), norms 1, biases 0.
  void init_random(uint64_t seed);

  // Parameters in Hugging Face naming and a stable order. The LM head appears only when untied.
  const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() const {
    return params_;
  }
  std::vector<torch::Tensor> parameters() const;
  // The master tensor of `name`; Error if there is none.
  torch::Tensor parameter(const std::string& name) const;
  void set_requires_grad(bool requires_grad);

  // Takes the FP8 copy of parameter `name` as a checkpoint stored it, so that FP8 forwards use
  // exactly those codes and scales and never re-quantise: the master must already hold their
  // dequantised values (load_transformer does both). Error for an unknown name.
  void set_fp8_weight(const std::string& name, fp8::Fp8Weight weight);
  // Copies every parameter of `other` (the same architecture and shapes) into this model, with the
  // FP8 copies `other` holds of them: a policy version loaded from an FP8 checkpoint keeps its
  // codes and scales.
  void copy_weights_from(const Transformer& other);
  // The codes and scales FP8 forwards use for parameter `name`: its FP8 copy while that is
  // current (as loaded, or quantised by a forward), else the master quantised now.
  fp8::BlockQuantized fp8_blocks(const std::string& name) const;

  // (a) tokens, positions: int64 [T]; seq_lens sums to T. Attention never crosses samples.
  ForwardOutput forward_packed(const torch::Tensor& tokens, const torch::Tensor& positions,
                               const std::vector<int64_t>& seq_lens, ForwardOptions options = {});
  // Convenience: one sample per call, positions 0..T-1.
  ForwardOutput forward(const torch::Tensor& tokens, ForwardOptions options = {});

  // (b) tokens: int64 [batch, t], appended at positions cache.length() .. + t - 1.
  ForwardOutput forward_step(const torch::Tensor& tokens, KVCache& cache,
                             ForwardOptions options = {});

  // (c) tokens, positions: int64 [T].
  ForwardOutput forward_tokens(const torch::Tensor& tokens, const torch::Tensor& positions,
                               const AttentionFn& attention, ForwardOptions options = {});

  // For device graphs (model/device_graph.h), which replay a forward on the addresses it read.
  // Besides the parameters, a forward reads tensors the model keeps: the RoPE tables and the
  // compute-dtype copies of the weights. reserve_positions grows the tables to hold
  // `max_position` (Error past max_position_embeddings); refresh_weight_copies brings every copy
  // up to date with its master in place, as a forward would before reading it. A graph recorded
  // before buffer_generation() last changed reads freed memory: record it again.
  void reserve_positions(int64_t max_position) { rope_through(max_position); }
  void refresh_weight_copies();
  int64_t buffer_generation() const { return buffer_generation_; }

 private:
  struct Layer {
    torch::Tensor input_norm, q_w, q_b, k_w, k_b, v_w, v_b, o_w, q_norm, k_norm;
    torch::Tensor post_norm, gate_w, up_w, down_w;
  };

  torch::Tensor add_param(const std::string& name, std::vector<int64_t> shape);
  // The compute-dtype version of a master weight: cast per call when autograd is on; cached
  // (and refreshed when the master changes) under NoGradGuard, so generation pays no cast.
  torch::Tensor w(const torch::Tensor& master);
  torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight,
                       const torch::Tensor& bias = {});
  // x through the linear layer of `master` (and `bias`, a master too, or undefined): in the
  // compute dtype, or in FP8 when `fp8`.
  torch::Tensor project(const torch::Tensor& x, const torch::Tensor& master,
                        const torch::Tensor& bias, bool fp8);
  // The FP8 copy of a master weight, quantised again only when the master changed.
  const fp8::Fp8Weight& fp8_weight(const torch::Tensor& master);
  // x @ [w_0; w_1; ...].T split back into one output per weight: one matmul on a cached
  // concatenation without autograd, separate matmuls with it (no copies in the backward).
  // In FP8 each weight keeps its own blocks, so the split is always separate matmuls.
  std::vector<torch::Tensor> linear_split(const torch::Tensor& x,
                                          const std::vector<torch::Tensor>& weights,
                                          const std::vector<torch::Tensor>& biases, bool fp8);
  torch::Tensor concatenated(const std::vector<torch::Tensor>& masters);
  torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight);
  // q [..., heads, hd], k and v [..., kv_heads, hd] from normed input h [..., d]: projected,
  // q/k-normed (Qwen3) and rotated.
  std::array<torch::Tensor, 3> project_qkv(const Layer& layer, const torch::Tensor& h,
                                           const torch::Tensor& cos, const torch::Tensor& sin,
                                           bool fp8);
  torch::Tensor mlp(const Layer& layer, const torch::Tensor& x, bool fp8);
  // Decoder layer `i` on x [..., d].
  torch::Tensor layer(size_t i, const torch::Tensor& x, const torch::Tensor& cos,
                      const torch::Tensor& sin, const AttentionFn& attention, bool fp8);
  // Every layer; with `recompute` (and autograd on) each as one node that reruns it in the
  // backward pass, which then calls `attention` again: it must not refer to anything that dies
  // with the forward call.
  torch::Tensor run_layers(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin,
                           const AttentionFn& attention, bool fp8, bool recompute = false);
  ForwardOutput finish(const torch::Tensor& x, const ForwardOptions& options);
  // The RoPE tables, grown to hold `max_position`; throws past max_position_embeddings.
  const RopeTables& rope_through(int64_t max_position);

  HfConfig config_;
  Compute compute_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::unordered_map<std::string, size_t> index_;
  torch::Tensor embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  // Built for the positions used so far (at least kInitialRopePositions), not for the config's
  // whole context: a 1M-context model's full tables would take 0.5 GB whatever the run's length.
  RopeTables rope_;
  // The compute-dtype copies of masters (a cast, or the concatenation of several), made once and
  // then refreshed in place whenever a master changes: they keep their address.
  struct Cast {
    int64_t version;
    torch::Tensor master, value;
  };
  std::unordered_map<const void*, Cast> cast_cache_;
  struct Concat {
    std::vector<int64_t> versions;
    std::vector<torch::Tensor> masters;
    torch::Tensor value;
  };
  std::unordered_map<const void*, Concat> concat_cache_;  // keyed by the first master
  static void refresh(Cast& cast);
  static void refresh(Concat& concat);
  // Counts the times the RoPE tables or a weight copy got a new address (buffer_generation()).
  int64_t buffer_generation_ = 0;
  struct Fp8Cast {
    int64_t version;
    fp8::Fp8Weight value;
  };
  std::unordered_map<const void*, Fp8Cast> fp8_cache_;
};

}  // namespace trellis::model
