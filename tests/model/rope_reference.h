// Independent double-precision RoPE frequencies, written from the published definitions rather
// than from model/rope.cpp: Meta's Llama 3.1 `apply_scaling` (per frequency, by wavelength), the
// YaRN paper's ramp over dimensions with the reference implementation's rounding of its ends, and
// the attention factor sqrt(1/t) = 0.1 ln(s) + 1.
#pragma once

#include <cmath>
#include <numbers>
#include <vector>

#include "model/hf_config.h"

namespace trellis::model::reference {

inline double yarn_mscale(double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1.0; }

inline double attention_factor(const RopeScaling& s) {
  if (s.type != RopeType::Yarn) return 1.0;
  if (s.attention_factor) return *s.attention_factor;
  if (s.mscale && s.mscale_all_dim) {
    return yarn_mscale(s.factor, *s.mscale) / yarn_mscale(s.factor, *s.mscale_all_dim);
  }
  return yarn_mscale(s.factor, 1.0);
}

inline std::vector<double> inv_freq(const HfConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  const int64_t d = c.head_dim;
  std::vector<double> out;
  for (int64_t i = 0; i < d / 2; ++i) {
    const double theta = std::pow(c.rope_theta, -2.0 * i / d);  // radians per position
    const double wavelength = 2 * std::numbers::pi / theta;     // positions per turn
    double f = theta;
    if (s.type == RopeType::Linear) f = theta / s.factor;
    if (s.type == RopeType::Llama3) {
      const double L = static_cast<double>(*s.original_max_position_embeddings);
      if (wavelength > L / s.low_freq_factor) {
        f = theta / s.factor;  // long wavelengths: interpolated
      } else if (wavelength >= L / s.high_freq_factor) {
        const double smooth =
            (L / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * theta / s.factor + smooth * theta;
      }  // short wavelengths: unchanged
    }
    if (s.type == RopeType::Yarn) {
      const double L = static_cast<double>(
          s.original_max_position_embeddings.value_or(c.max_position_embeddings));
      // The (fractional) pair index that makes r full turns over the context L:
      // L * theta_i / (2 pi) = r.
      auto index_of = [&](double r) {
        return d * std::log(L / (2 * std::numbers::pi * r)) / (2 * std::log(c.rope_theta));
      };
      double lo = index_of(s.beta_fast.value_or(32)), hi = index_of(s.beta_slow.value_or(1));
      if (s.truncate.value_or(true)) {
        lo = std::floor(lo);
        hi = std::ceil(hi);
      }
      lo = std::max(lo, 0.0);
      hi = std::min(hi, double(d - 1));
      if (hi == lo) hi += 0.001;
      const double gamma = std::clamp((i - lo) / (hi - lo), 0.0, 1.0);  // 1: fully interpolated
      f = gamma * theta / s.factor + (1 - gamma) * theta;
    }
    out.push_back(f);
  }
  return out;
}

}  // namespace trellis::model::reference
