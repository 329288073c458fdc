// RoPE scaling: the frequencies of released checkpoints' rope_scaling against an independent
// double-precision reference and hand-computed values, the cos/sin tables, and the config fields.
#include "model/rope.h"

#include <cmath>
#include <numbers>

#include <gtest/gtest.h>

#include "error_of.h"
#include "model/presets.h"
#include "model/rope_reference.h"

namespace trellis::model {
namespace {

using test::error_of;

HfConfig with_rope(int64_t head_dim, double theta, int64_t max_positions, const char* scaling) {
  HfConfig c;
  c.head_dim = head_dim;
  c.rope_theta = theta;
  c.max_position_embeddings = max_positions;
  c.rope_scaling = RopeScaling::from_json(Json::parse(scaling), "test");
  return c;
}

// The rope settings of released checkpoints (config.json as published).
struct Case {
  const char* name;
  HfConfig config;
};
std::vector<Case> released() {
  return {
      {"llama-3.1-8b", with_rope(128, 500000, 131072,
                                 R"({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 8192,
                                     "rope_type": "llama3"})")},
      {"llama-3.2-1b", with_rope(64, 500000, 131072,
                                 R"({"factor": 32.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 8192,
                                     "rope_type": "llama3"})")},
      {"qwen2.5-yarn", with_rope(128, 1000000, 32768,
                                 R"({"factor": 4.0, "original_max_position_embeddings": 32768,
                                     "type": "yarn"})")},
      {"deepseek-v3-yarn", with_rope(64, 10000, 163840,
                                     R"({"beta_fast": 32, "beta_slow": 1, "factor": 40,
                                         "mscale": 1.0, "mscale_all_dim": 1.0,
                                         "original_max_position_embeddings": 4096,
                                         "type": "yarn"})")},
      {"gpt-oss-yarn", with_rope(64, 150000, 131072,
                                 R"({"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                                     "original_max_position_embeddings": 4096,
                                     "rope_type": "yarn", "truncate": false})")},
      {"linear-2x", with_rope(128, 10000, 8192, R"({"type": "linear", "factor": 2.0})")},
      {"plain", with_rope(128, 1000000, 32768, "null")},
  };
}

std::vector<double> to_vector(const torch::Tensor& t) {
  auto d = t.to(torch::kFloat64).contiguous();
  return {d.data_ptr<double>(), d.data_ptr<double>() + d.numel()};
}

TEST(Rope, FrequenciesOfReleasedConfigsMatchTheReference) {
  for (const auto& [name, c] : released()) {
    auto ours = rope_inv_freq(c);
    ASSERT_EQ(ours.scalar_type(), torch::kFloat32) << name;
    const auto got = to_vector(ours), want = reference::inv_freq(c);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i] / want[i], 1.0, 2e-6) << name << " pair " << i;
    }
    EXPECT_DOUBLE_EQ(rope_attention_factor(c.rope_scaling),
                     reference::attention_factor(c.rope_scaling))
        << name;
  }
}

TEST(Rope, KnownValues) {
  auto cases = released();
  auto theta = [](const HfConfig& c, int i) {
    return std::pow(c.rope_theta, -2.0 * i / c.head_dim);
  };
  // Llama 3.1: wavelengths under 8192/4 = 2048 positions are kept (pair 0 turns every 2 pi), those
  // over 8192 divided by 8; pair 63's wavelength is 2.6M positions.
  const HfConfig& llama = cases[0].config;
  auto f = to_vector(rope_inv_freq(llama));
  EXPECT_FLOAT_EQ(f[0], 1.0);
  EXPECT_FLOAT_EQ(f[20], theta(llama, 20));  // wavelength 379
  EXPECT_FLOAT_EQ(f[63], theta(llama, 63) / 8);
  // Between: pair 35's wavelength 2 pi * 500000^(70/128) = 8,219 lies just over 8192, pair 30's,
  // 2,948, is blended with smooth = (8192 / 2948 - 1) / 3 = 0.59.
  EXPECT_FLOAT_EQ(f[35], theta(llama, 35) / 8);
  const double w30 = 2 * std::numbers::pi / theta(llama, 30), s30 = (8192 / w30 - 1) / 3;
  EXPECT_NEAR(s30, 0.593, 0.001);
  EXPECT_NEAR(f[30], (1 - s30) * theta(llama, 30) / 8 + s30 * theta(llama, 30), 1e-6 * f[30]);

  // Qwen2.5 YaRN, factor 4 over 32768: pair 23 turns 32 times (kept), pair 40 once (divided by 4),
  // by dim * ln(32768 / (2 pi r)) / (2 ln 1e6) = 23.6 for r = 32 and 39.65 for r = 1.
  const HfConfig& qwen = cases[2].config;
  f = to_vector(rope_inv_freq(qwen));
  EXPECT_FLOAT_EQ(f[23], theta(qwen, 23));
  EXPECT_FLOAT_EQ(f[40], theta(qwen, 40) / 4);
  EXPECT_NEAR(f[30], (1 - 7.0 / 17) * theta(qwen, 30) + 7.0 / 17 * theta(qwen, 30) / 4,
              1e-6 * f[30]);
  EXPECT_NEAR(rope_attention_factor(qwen.rope_scaling), 1.1386294361, 1e-9);  // 0.1 ln 4 + 1
  // DeepSeek-V3: mscale = mscale_all_dim, so the factors cancel.
  EXPECT_DOUBLE_EQ(rope_attention_factor(cases[3].config.rope_scaling), 1.0);
  // gpt-oss: 0.1 ln 32 + 1.
  EXPECT_NEAR(rope_attention_factor(cases[4].config.rope_scaling), 1.3465735903, 1e-9);
  // Linear: every frequency halved.
  f = to_vector(rope_inv_freq(cases[5].config));
  EXPECT_FLOAT_EQ(f[10], theta(cases[5].config, 10) / 2);
}

TEST(Rope, TablesAreScaledAnglesOfEveryPosition) {
  for (const auto& [name, c] : released()) {
    auto t = rope_tables(c, c.max_position_embeddings, torch::kCPU);
    ASSERT_EQ(t.cos.sizes(), (std::vector<int64_t>{c.max_position_embeddings, c.head_dim / 2}));
    const auto inv = reference::inv_freq(c);
    const double a = reference::attention_factor(c.rope_scaling);
    for (int64_t pos : {int64_t(0), int64_t(1), int64_t(777), c.max_position_embeddings - 1}) {
      for (int64_t i : {int64_t(0), int64_t(17), c.head_dim / 2 - 1}) {
        // fp32 angles: the error grows with the position (an ulp of pos * inv).
        const double tol = 2e-7 * (pos * inv[i] + 1) * a + 1e-6;
        EXPECT_NEAR(t.cos[pos][i].item<double>(), a * std::cos(pos * inv[i]), tol) << name;
        EXPECT_NEAR(t.sin[pos][i].item<double>(), a * std::sin(pos * inv[i]), tol) << name;
      }
    }
  }
}

// Each entry is its fp32 angle's cos and sin correctly rounded to fp32 (glibc's double cos, then
// one rounding), so a table holds the same bits however long it is and however many threads built
// it: a model that grows its tables, or a validator on another machine, rotates exactly as the
// worker did. libtorch's fp32 cos (SLEEF's 1-ulp vector code, std::cos in the tails) is off in
// the last bit for some entries.
TEST(Rope, EachEntryIsItsAnglesCosAndSinCorrectlyRounded) {
  const int threads = at::get_num_threads();
  for (const auto& [name, c] : released()) {
    const int64_t rows = 4099;
    auto table = rope_tables(c, rows, torch::kCPU);
    const auto inv = rope_inv_freq(c);
    const float* f = inv.data_ptr<float>();
    const double a = rope_attention_factor(c.rope_scaling);
    auto cos = table.cos.accessor<float, 2>(), sin = table.sin.accessor<float, 2>();
    int64_t wrong = 0;
    for (int64_t pos = 0; pos < rows; ++pos) {
      for (int64_t i = 0; i < c.head_dim / 2; ++i) {
        const double angle = static_cast<float>(pos) * f[i];  // the fp32 product
        wrong += cos[pos][i] != static_cast<float>(a * std::cos(angle));
        wrong += sin[pos][i] != static_cast<float>(a * std::sin(angle));
      }
    }
    EXPECT_EQ(wrong, 0) << name;
    // A shorter table on one thread holds the same bits.
    at::set_num_threads(1);
    auto shorter = rope_tables(c, 1000, torch::kCPU);
    at::set_num_threads(threads);
    EXPECT_TRUE(torch::equal(shorter.cos, table.cos.narrow(0, 0, 1000))) << name;
    EXPECT_TRUE(torch::equal(shorter.sin, table.sin.narrow(0, 0, 1000))) << name;
  }
}

TEST(Rope, ConfigFieldsParseRoundTripAndRefuseWhatIsNotSupported) {
  // Every released scaling reads back from what to_json writes.
  for (const auto& [name, c] : released()) {
    EXPECT_EQ(RopeScaling::from_json(c.rope_scaling.to_json(), "t"), c.rope_scaling) << name;
  }
  // Transformers v5's rope_parameters, with rope_theta inside.
  const HfConfig base = preset_config(Arch::Llama, "tiny");
  Json j = base.to_json();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 150000.0}, {"factor", 2.0}};
  auto v5 = HfConfig::from_json(j, "config.json");
  EXPECT_EQ(v5.rope_theta, 150000.0);
  EXPECT_EQ(v5.rope_scaling.type, RopeType::Yarn);
  EXPECT_EQ(HfConfig::from_json(v5.to_json(), "c").rope_scaling, v5.rope_scaling);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 20000.0}};
  EXPECT_EQ(HfConfig::from_json(j, "c").rope_scaling.type, RopeType::Default);
  EXPECT_EQ(HfConfig::from_json(j, "c").rope_theta, 20000.0);

  const Json good = base.to_json();
  auto error_for = [&](const char* field, Json value) {
    Json bad = good;
    bad[field] = value;
    return error_of([&] { HfConfig::from_json(bad, "dir/config.json"); });
  };
  for (auto [scaling, expected] : std::vector<std::pair<const char*, const char*>>{
           {R"({"type": "dynamic", "factor": 2.0})", "type 'dynamic' is not supported"},
           {R"({"rope_type": "longrope", "short_factor": [1], "long_factor": [2]})",
            "type 'longrope' is not supported"},
           {R"({"rope_type": "mrope", "mrope_section": [16, 24, 24]})", "'mrope' is not supported"},
           {R"({"factor": 2.0})", "has no 'rope_type'"},
           {R"({"type": "yarn", "rope_type": "linear", "factor": 2.0})", "keep one"},
           {R"({"rope_type": "linear"})", "missing field 'factor'"},
           {R"({"rope_type": "linear", "factor": -2.0})", "'factor' must be positive"},
           {R"({"rope_type": "linear", "factor": "2"})", "'factor' has the wrong type"},
           {R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "original_max_position_embeddings": 8192})",
            "missing field 'high_freq_factor'"},
           {R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})",
            "must exceed 'low_freq_factor'"},
           {R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": -1})",
            "'original_max_position_embeddings' must be positive"},
           {R"({"rope_type": "yarn", "factor": 4.0, "beta_fast": 1, "beta_slow": 32})",
            "'beta_fast' (1) must exceed 'beta_slow' (32)"},
           {R"({"rope_type": "yarn", "factor": 4.0, "mscale_all": 1})", "key 'mscale_all'"},
           {R"({"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5})",
            "'partial_rotary_factor' other than 1"},
           {R"([1, 2])", "must be an object or null"},
       }) {
    const auto msg = error_for("rope_scaling", Json::parse(scaling));
    EXPECT_NE(msg.find(expected), std::string::npos) << scaling << ": " << msg;
    EXPECT_NE(msg.find("dir/config.json: rope_scaling"), std::string::npos) << msg;
  }
  EXPECT_NE(error_for("partial_rotary_factor", 0.5).find("partial_rotary_factor"),
            std::string::npos);
}

}  // namespace
}  // namespace trellis::model
