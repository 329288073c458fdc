#include "model/fp8/e4m3.h"

#include <array>
#include <cmath>
#include <cstring>

#include <ATen/Parallel.h>

#include "common/error.h"

namespace trellis::model::fp8 {
namespace {

std::array<float, 256> decode_table() {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) {
    const int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
    float magnitude;
    if ((code & 0x7F) == kE4M3NaN) {
      magnitude = std::nanf("");
    } else if (exponent == 0) {
      magnitude = std::ldexp(static_cast<float>(mantissa), -9);
    } else {
      magnitude = std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
    }
    table[code] = (code & 0x80) ? -magnitude : magnitude;
  }
  return table;
}

const std::array<float, 256> kDecode = decode_table();

uint32_t bits_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

float float_of(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

}  // namespace

uint8_t encode_e4m3(float x) {
  const uint32_t bits = bits_of(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t abs_bits = bits & 0x7FFFFFFF;
  if (abs_bits > 0x7F800000) return sign | kE4M3NaN;
  if (abs_bits >= 0x43E00000) return sign | 0x7E;  // |x| >= 448 (and infinity) saturates
  if (abs_bits < 0x3C800000) {
    // Below 2^-6, the smallest normal: a multiple of 2^-9. Scaling by 2^9 is exact, and the FPU
    // rounds to the nearest integer, ties to even (the default mode). The result 0..8 is the code
    // itself: 8 is the smallest normal, 0.0001.000.
    const float scaled = float_of(abs_bits) * 512.0f;  // exact: a power of two
    return sign | static_cast<uint8_t>(std::nearbyint(scaled));
  }
  // Normal: keep 3 of float's 23 mantissa bits, rounding the 20 dropped ones to nearest, ties to
  // the even kept value. A carry out of the mantissa bumps the exponent, as it should.
  const uint32_t rounded = abs_bits + 0x7FFFF + ((abs_bits >> 20) & 1);
  const uint32_t code = (rounded >> 20) - ((127 - 7) << 3);  // re-bias the exponent: 127 -> 7
  return sign | static_cast<uint8_t>(code > 0x7E ? 0x7E : code);
}

float decode_e4m3(uint8_t code) { return kDecode[code]; }

torch::Tensor encode_e4m3(const torch::Tensor& x) {
  if (x.scalar_type() != torch::kFloat32)
    throw Error("encode_e4m3: float32 input expected, got " +
                std::string(c10::toString(x.scalar_type())));
  const torch::Tensor in = x.contiguous();
  torch::Tensor out = torch::empty(in.sizes(), in.options().dtype(torch::kUInt8));
  const float* src = in.data_ptr<float>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  at::parallel_for(0, in.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = encode_e4m3(src[i]);
  });
  return out;
}

torch::Tensor decode_e4m3(const torch::Tensor& codes) {
  if (codes.scalar_type() != torch::kUInt8)
    throw Error("decode_e4m3: uint8 codes expected, got " +
                std::string(c10::toString(codes.scalar_type())));
  const torch::Tensor in = codes.contiguous();
  torch::Tensor out = torch::empty(in.sizes(), in.options().dtype(torch::kFloat32));
  const uint8_t* src = in.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, in.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = kDecode[src[i]];
  });
  return out;
}

}  // namespace trellis::model::fp8
