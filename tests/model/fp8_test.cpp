// FP8 E4M3 codes, block quantisation and the FP8 linear layer, each against an independent
// reference: the E4M3 values written from the format's definition, a nearest-value search over
// all 256 codes, and element-by-element loops in double for the blocks and every GEMM of the
// forward and backward passes.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "model/fp8/block_quant.h"
#include "model/fp8/e4m3.h"
#include "model/fp8/fp8_linear.h"

namespace trellis::model::fp8 {
namespace {

// The format's definition, written independently of the decoder's table: a positive code is
// s.eeee.mmm with value (8 + m) x 2^(e - 10) for e >= 1 and m x 2^-9 for e = 0.
double reference_value(int code) {
  const int e = (code >> 3) & 0xF, m = code & 7;
  const double magnitude = e == 0 ? m * std::pow(2.0, -9) : (8 + m) * std::pow(2.0, e - 10);
  return (code & 0x80) ? -magnitude : magnitude;
}

bool is_nan_code(int code) { return (code & 0x7F) == 0x7F; }

// Round to nearest by search over every finite code, ties to the code with an even mantissa;
// saturating at +-448.
uint8_t reference_encode(double x) {
  if (std::isnan(x)) return x < 0 || std::signbit(x) ? 0xFF : 0x7F;
  const double clamped = std::max(-448.0, std::min(448.0, x));
  int best = -1;
  double best_error = 0;
  for (int code = 0; code < 256; ++code) {
    if (is_nan_code(code)) continue;
    if ((code & 0x80) != (std::signbit(clamped) ? 0x80 : 0)) continue;  // +-0 keep their sign
    const double error = std::abs(reference_value(code) - clamped);
    if (best < 0 || error < best_error || (error == best_error && (code & 1) == 0)) {
      best = code;
      best_error = error;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(Fp8E4M3, EveryCodeDecodesToTheFormatsValue) {
  for (int code = 0; code < 256; ++code) {
    const float v = decode_e4m3(static_cast<uint8_t>(code));
    if (is_nan_code(code)) {
      EXPECT_TRUE(std::isnan(v)) << code;
      continue;
    }
    EXPECT_EQ(v, reference_value(code)) << code;
    EXPECT_EQ(std::signbit(v), (code & 0x80) != 0) << code;
  }
  EXPECT_EQ(decode_e4m3(0x7E), 448.0f);
  EXPECT_EQ(decode_e4m3(0x38), 1.0f);
  EXPECT_EQ(decode_e4m3(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(decode_e4m3(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(decode_e4m3(0xFE), -448.0f);
}

TEST(Fp8E4M3, EveryCodeEncodesBackToItself) {
  for (int code = 0; code < 256; ++code) {
    if (is_nan_code(code)) continue;
    EXPECT_EQ(encode_e4m3(decode_e4m3(static_cast<uint8_t>(code))), code) << code;
  }
}

TEST(Fp8E4M3, TiesRoundToTheEvenMantissaAndNeighboursToTheNearest) {
  for (int code = 0; code < 0x7E; ++code) {
    for (int sign : {0, 0x80}) {
      const double lo = reference_value(code | sign), hi = reference_value((code + 1) | sign);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: a few significant bits
      ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
      const int even = (code & 1) == 0 ? code : code + 1;
      EXPECT_EQ(encode_e4m3(mid), even | sign) << code;
      const float toward_hi = std::nextafter(mid, sign ? -1e9f : 1e9f);
      const float toward_lo = std::nextafter(mid, 0.0f);
      EXPECT_EQ(encode_e4m3(toward_hi), (code + 1) | sign) << code;
      EXPECT_EQ(encode_e4m3(toward_lo), code | sign) << code;
    }
  }
}

TEST(Fp8E4M3, SaturatesAtTheLargestValueAndKeepsNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float big : {448.0f, 448.5f, 464.0f, 479.0f, 480.0f, 1e6f, 3e38f, inf}) {
    EXPECT_EQ(encode_e4m3(big), 0x7E) << big;
    EXPECT_EQ(encode_e4m3(-big), 0xFE) << big;
  }
  EXPECT_EQ(encode_e4m3(std::nanf("")), 0x7F);
  EXPECT_EQ(encode_e4m3(-std::nanf("")), 0xFF);
  EXPECT_EQ(encode_e4m3(0.0f), 0x00);
  EXPECT_EQ(encode_e4m3(-0.0f), 0x80);
  EXPECT_EQ(encode_e4m3(std::ldexp(1.0f, -11)), 0x00) << "below half the smallest subnormal";
  EXPECT_EQ(encode_e4m3(std::ldexp(1.0f, -10)), 0x00) << "half the smallest subnormal: tie to 0";
  EXPECT_EQ(encode_e4m3(std::ldexp(1.5f, -10)), 0x01);
}

TEST(Fp8E4M3, RandomValuesMatchTheNearestCodeSearch) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exponent(-14, 10);
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) {
    const double magnitude = std::pow(2.0, exponent(rng));
    xs.push_back(static_cast<float>(rng() & 1 ? -magnitude : magnitude));
  }
  const torch::Tensor codes = encode_e4m3(torch::tensor(xs));
  const torch::Tensor back = decode_e4m3(codes);
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint8_t expected = reference_encode(xs[i]);
    ASSERT_EQ(codes[i].item<uint8_t>(), expected) << xs[i];
    ASSERT_EQ(back[i].item<float>(), decode_e4m3(expected)) << xs[i];
  }
}

// Element-by-element references for blocks and GEMMs.
struct RefQuantized {
  int64_t rows, cols, gr, gc;
  std::vector<uint8_t> codes;
  std::vector<double> scales;  // [ceil(rows / gr)][ceil(cols / gc)]
  int64_t block_cols() const { return (cols + gc - 1) / gc; }
  double scale(int64_t r, int64_t c) const { return scales[(r / gr) * block_cols() + c / gc]; }
  double value(int64_t r, int64_t c) const {
    return reference_value(codes[r * cols + c]) * scale(r, c);
  }
};

RefQuantized ref_quantize(const torch::Tensor& x, int64_t gr, int64_t gc) {
  const torch::Tensor t = x.to(torch::kFloat32).contiguous();
  const float* p = t.data_ptr<float>();
  RefQuantized q{t.size(0), t.size(1), gr, gc, {}, {}};
  const int64_t br = (q.rows + gr - 1) / gr, bc = q.block_cols();
  q.scales.assign(br * bc, 0);
  std::vector<float> fscales(br * bc, 0);
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c) {
      float& amax = fscales[(r / gr) * bc + c / gc];
      amax = std::max(amax, std::abs(p[r * q.cols + c]));
    }
  for (size_t i = 0; i < fscales.size(); ++i) {
    fscales[i] = std::max(fscales[i], 1e-4f) / 448.0f;  // in float, as the scale is stored
    q.scales[i] = fscales[i];
  }
  q.codes.resize(q.rows * q.cols);
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      q.codes[r * q.cols + c] =
          reference_encode(p[r * q.cols + c] / fscales[(r / gr) * bc + c / gc]);
  return q;
}

// out[n][m] = sum_k a(n, k) b(m, k), in double: the values are exact, so this is the FP8
// GEMM's result without its float32 rounding.
std::vector<double> ref_gemm(const RefQuantized& a, const RefQuantized& b) {
  std::vector<double> out(a.rows * b.rows, 0);
  for (int64_t n = 0; n < a.rows; ++n)
    for (int64_t m = 0; m < b.rows; ++m) {
      double sum = 0;
      for (int64_t k = 0; k < a.cols; ++k) sum += a.value(n, k) * b.value(m, k);
      out[n * b.rows + m] = sum;
    }
  return out;
}

RefQuantized ref_transposed(const RefQuantized& q) {
  RefQuantized t{q.cols, q.rows, q.gc, q.gr, std::vector<uint8_t>(q.codes.size()), {}};
  const int64_t br = (q.rows + q.gr - 1) / q.gr, bc = q.block_cols();
  t.scales.resize(q.scales.size());
  for (int64_t i = 0; i < br; ++i)
    for (int64_t j = 0; j < bc; ++j) t.scales[j * br + i] = q.scales[i * bc + j];
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c) t.codes[c * q.rows + r] = q.codes[r * q.cols + c];
  return t;
}

torch::Tensor ref_dequantized(const RefQuantized& q) {
  torch::Tensor out = torch::empty({q.rows, q.cols});
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c) out[r][c] = static_cast<float>(q.value(r, c));
  return out;
}

void expect_close(const torch::Tensor& actual, const std::vector<double>& expected, double rtol,
                  const char* what) {
  const torch::Tensor a = actual.to(torch::kFloat64).contiguous().flatten();
  ASSERT_EQ(a.numel(), static_cast<int64_t>(expected.size())) << what;
  double scale = 0;
  for (double e : expected) scale = std::max(scale, std::abs(e));
  const double* p = a.data_ptr<double>();
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(p[i], expected[i], rtol * scale) << what << " at " << i;
}

TEST(Fp8Blocks, CodesAndScalesMatchTheElementwiseReference) {
  torch::manual_seed(3);
  // Partial edge blocks in both directions; one block of zeros; magnitudes that vary by block.
  torch::Tensor x = torch::randn({300, 260}) * torch::logspace(-3, 2, 260).unsqueeze(0);
  x.narrow(0, 256, 44).narrow(1, 128, 128).zero_();
  for (auto [gr, gc] : {std::pair<int64_t, int64_t>{128, 128}, {1, 128}, {128, 1}}) {
    const BlockQuantized q = quantize_blocks(x, gr, gc);
    const RefQuantized ref = ref_quantize(x, gr, gc);
    ASSERT_EQ(q.scales.size(0), (300 + gr - 1) / gr);
    ASSERT_EQ(q.scales.size(1), (260 + gc - 1) / gc);
    const torch::Tensor scales = q.scales.flatten();
    for (size_t i = 0; i < ref.scales.size(); ++i)
      ASSERT_EQ(scales[i].item<float>(), static_cast<float>(ref.scales[i])) << gr << "x" << gc;
    ASSERT_TRUE(torch::equal(
        q.codes.flatten(),
        torch::tensor(std::vector<int64_t>(ref.codes.begin(), ref.codes.end())).to(torch::kUInt8)))
        << gr << "x" << gc;
    EXPECT_TRUE(torch::equal(dequantize(q), ref_dequantized(ref))) << gr << "x" << gc;
    // Each block's largest magnitude is exactly representable: it lands on +-448 x scale.
    EXPECT_LE((dequantize(q) - x).abs().max().item<float>(),
              x.abs().max().item<float>() / 16 + 1e-6);
  }
  const BlockQuantized q = quantize_blocks(x, 128, 128);
  EXPECT_FLOAT_EQ(q.scales[2][1].item<float>(), 1e-4f / 448) << "the zero block's floor";
  EXPECT_TRUE(torch::equal(q.transposed().codes, q.codes.t()));
  EXPECT_TRUE(torch::equal(dequantize(q.transposed()), dequantize(q).t()));
}

TEST(Fp8Blocks, TheGemmMatchesTheElementwiseReference) {
  torch::manual_seed(4);
  const torch::Tensor a = torch::randn({37, 300});
  const torch::Tensor b = torch::randn({130, 300}) * 0.02;
  const BlockQuantized aq = quantize_blocks(a, 1, kGroup), bq = quantize_blocks(b, kGroup, kGroup);
  expect_close(fp8_gemm(gemm_operand(aq), gemm_operand(bq)),
               ref_gemm(ref_quantize(a, 1, 128), ref_quantize(b, 128, 128)), 1e-5, "gemm");
}

TEST(Fp8Linear, ForwardAndBothBackwardGemmsMatchTheReference) {
  torch::manual_seed(5);
  const int64_t in = 200, out = 130;
  torch::Tensor x = torch::randn({3, 5, in}).requires_grad_(true);
  torch::Tensor w = (torch::randn({out, in}) * 0.05).requires_grad_(true);
  const torch::Tensor r = torch::randn({3, 5, out});
  const torch::Tensor y = fp8_linear(x, w);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{3, 5, out}));
  (y * r).sum().backward();

  const torch::Tensor x2 = x.detach().reshape({15, in}), dy = r.reshape({15, out});
  const RefQuantized xq = ref_quantize(x2, 1, 128), wq = ref_quantize(w.detach(), 128, 128);
  expect_close(y, ref_gemm(xq, wq), 1e-5, "FProp");
  expect_close(x.grad(), ref_gemm(ref_quantize(dy, 1, 128), ref_transposed(wq)), 1e-5, "DGrad");
  // WGrad: dy^T and the saved FP8 activation, each re-quantised along the tokens.
  expect_close(
      w.grad(),
      ref_gemm(ref_quantize(dy.t(), 1, 128), ref_quantize(ref_dequantized(xq).t(), 1, 128)), 1e-5,
      "WGrad");
  EXPECT_EQ(w.grad().scalar_type(), torch::kFloat32);

  // And FP8 is a close approximation of the exact layer (relative error of a few percent).
  const torch::Tensor exact = torch::matmul(x.detach(), w.detach().t());
  EXPECT_LT(((y - exact).norm() / exact.norm()).item<float>(), 0.1);
}

TEST(Fp8Linear, AWeightQuantisedOnceGivesTheTrainingForwardsNumbers) {
  // The engine (weights quantised at load, no autograd) and the trainer (quantised per forward,
  // with autograd) must compute the same graph: Jet-RL's unified flow rests on it.
  torch::manual_seed(6);
  const torch::Tensor master = torch::randn({256, 384}) * 0.03;
  const torch::Tensor x = torch::randn({7, 384}).to(torch::kBFloat16);
  const torch::Tensor trained = fp8_linear(x, master.clone().requires_grad_(true));
  torch::NoGradGuard no_grad;
  const torch::Tensor served = fp8_linear(x, quantize_weight(master));
  EXPECT_EQ(served.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(served, trained.detach()));
}

}  // namespace
}  // namespace trellis::model::fp8
