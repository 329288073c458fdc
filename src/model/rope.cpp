#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace trellis::model {

namespace {

// theta^(2i/d) for i < d/2: the wavelength of dimension pair i over 2 pi.
torch::Tensor base_powers(double theta, int64_t dim) {
  return torch::pow(theta, torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / dim);
}

torch::Tensor llama3_inv_freq(torch::Tensor inv_freq, const RopeScaling& s) {
  const double context = static_cast<double>(*s.original_max_position_embeddings);
  const double low_freq_wavelen = context / s.low_freq_factor;
  const double high_freq_wavelen = context / s.high_freq_factor;
  auto wavelen = 2 * std::numbers::pi / inv_freq;
  auto scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  // Between the two wavelengths: a blend, from all-divided at low_freq_wavelen to all-kept at
  // high_freq_wavelen.
  auto smooth = (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  auto blended = (1 - smooth) * scaled / s.factor + smooth * scaled;
  auto medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return torch::where(medium, blended, scaled);
}

torch::Tensor yarn_inv_freq(double theta, int64_t dim, int64_t max_positions,
                            const RopeScaling& s) {
  const double context =
      static_cast<double>(s.original_max_position_embeddings.value_or(max_positions));
  // The dimension (pair index, fractional) that turns `rotations` times over the context.
  auto dim_of = [&](double rotations) {
    return dim * std::log(context / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
  };
  double low = dim_of(s.beta_fast.value_or(32)), high = dim_of(s.beta_slow.value_or(1));
  if (s.truncate.value_or(true)) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  // 0 at and below `low` (fast dimensions: kept), 1 at and above `high` (slow: divided).
  auto ramp = ((torch::arange(dim / 2, torch::kFloat32) - low) / (high - low)).clamp(0, 1);
  auto powers = base_powers(theta, dim);
  auto kept = 1.0 / powers, divided = 1.0 / (s.factor * powers);
  auto keep = 1 - ramp;
  return divided * (1 - keep) + kept * keep;
}

double yarn_mscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

}  // namespace

torch::Tensor rope_inv_freq(const HfConfig& config) {
  const RopeScaling& s = config.rope_scaling;
  const int64_t dim = config.head_dim;
  switch (s.type) {
    case RopeType::Default:
      return 1.0 / base_powers(config.rope_theta, dim);
    case RopeType::Linear:
      return 1.0 / base_powers(config.rope_theta, dim) / s.factor;
    case RopeType::Llama3:
      return llama3_inv_freq(1.0 / base_powers(config.rope_theta, dim), s);
    case RopeType::Yarn:
      return yarn_inv_freq(config.rope_theta, dim, config.max_position_embeddings, s);
  }
  return {};
}

double rope_attention_factor(const RopeScaling& s) {
  if (s.type != RopeType::Yarn) return 1.0;
  if (s.attention_factor) return *s.attention_factor;
  if (s.mscale && s.mscale_all_dim) {
    return yarn_mscale(s.factor, *s.mscale) / yarn_mscale(s.factor, *s.mscale_all_dim);
  }
  return yarn_mscale(s.factor, 1.0);
}

RopeTables rope_tables(const HfConfig& config, int64_t positions, const torch::Device& device) {
  const auto inv_freq = rope_inv_freq(config);
  const double attention_factor = rope_attention_factor(config.rope_scaling);
  auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  RopeTables out{torch::empty({positions, inv_freq.size(0)}, options),
                 torch::empty({positions, inv_freq.size(0)}, options)};
  // In blocks of rows, so that the fp64 temporaries stay small beside a table of millions of rows.
  constexpr int64_t kBlock = int64_t{1} << 16;
  for (int64_t begin = 0; begin < positions; begin += kBlock) {
    const int64_t rows = std::min(kBlock, positions - begin);
    // Angles in fp32 from an int64 arange, as Hugging Face computes them.
    auto angles =
        torch::outer(torch::arange(begin, begin + rows, torch::kInt64).to(torch::kFloat32),
                     inv_freq)
            .to(torch::kFloat64);
    out.cos.narrow(0, begin, rows).copy_(angles.cos().mul_(attention_factor));
    out.sin.narrow(0, begin, rows).copy_(angles.sin().mul_(attention_factor));
  }
  return out;
}

}  // namespace trellis::model
