// Evolving weights for the delta tests: a safetensors file of tensors of every width the
// trainer publishes (bf16, fp32, FP8 codes, an int64), written here by hand (not with our
// writer), and a step that moves a chosen fraction of its elements by a few ulps, as an
// optimizer step at RL learning rates does to bf16 weights.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/json.h"

namespace trellis::test {

class FakeWeights {
 public:
  struct Tensor {
    std::string name, dtype;
    int64_t numel;
    int width;
    int64_t begin = 0;  // in the data region
  };

  explicit FakeWeights(uint64_t seed, int64_t scale = 1) : rng_(seed) {
    tensors_ = {{"model.embed_tokens.weight", "BF16", 6000 * scale, 2},
                {"model.layers.0.input_layernorm.weight", "F32", 96, 4},
                {"model.layers.0.mlp.up_proj.weight", "F8_E4M3", 9000 * scale, 1},
                {"model.layers.0.mlp.up_proj.weight_scale", "F32", 70, 4},
                {"model.layers.0.self_attn.q_proj.weight", "BF16", 20000 * scale, 2},
                {"step_counter", "I64", 3, 8}};
    Json header = Json::object();
    int64_t at = 0;
    for (auto& t : tensors_) {
      t.begin = at;
      header[t.name] = {{"dtype", t.dtype},
                        {"shape", Json::array({t.numel})},
                        {"data_offsets", Json::array({at, at + t.numel * t.width})}};
      at += t.numel * t.width;
    }
    header["__metadata__"] = {{"format", "pt"}};
    header_ = header.dump();
    while ((header_.size() + 8) % 8) header_.push_back(' ');
    data_.resize(static_cast<size_t>(at));
    for (auto& c : data_) c = static_cast<char>(rng_());
  }

  // The whole file: header length, header, data.
  std::string file() const {
    const uint64_t n = header_.size();
    std::string out(reinterpret_cast<const char*>(&n), 8);
    return out + header_ + data_;
  }

  // Moves each element with probability `fraction` by 1 to 3 ulps (its bits read as an unsigned
  // integer), or to random bits when `!small`. Returns how many elements changed.
  int64_t step(double fraction, bool small = true) {
    std::bernoulli_distribution pick(fraction);
    std::uniform_int_distribution<int> ulps(-3, 3);
    int64_t changed = 0;
    for (const auto& t : tensors_) {
      for (int64_t i = 0; i < t.numel; ++i) {
        if (!pick(rng_)) continue;
        char* p = data_.data() + t.begin + i * t.width;
        uint64_t v = 0;
        std::memcpy(&v, p, static_cast<size_t>(t.width));
        const uint64_t before = v;
        int d = 0;
        while (small && d == 0) d = ulps(rng_);
        v = small ? v + static_cast<uint64_t>(static_cast<int64_t>(d)) : rng_();
        std::memcpy(p, &v, static_cast<size_t>(t.width));
        uint64_t after = 0;
        std::memcpy(&after, p, static_cast<size_t>(t.width));
        uint64_t mask = t.width == 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * t.width)) - 1;
        changed += (after & mask) != (before & mask);
      }
    }
    return changed;
  }

  int64_t elements() const {
    int64_t n = 0;
    for (const auto& t : tensors_) n += t.numel;
    return n;
  }
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::mt19937_64 rng_;
  std::vector<Tensor> tensors_;
  std::string header_, data_;
};

}  // namespace trellis::test
