#include "model/fp8/block_quant.h"

#include <fmt/format.h>

#include "common/error.h"
#include "model/fp8/e4m3.h"

namespace trellis::model::fp8 {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Each block's scale repeated over its rows and columns, cut to rows x cols.
torch::Tensor expanded(const torch::Tensor& scales, int64_t group_rows, int64_t group_cols,
                       int64_t rows, int64_t cols) {
  return scales.repeat_interleave(group_rows, 0)
      .repeat_interleave(group_cols, 1)
      .narrow(0, 0, rows)
      .narrow(1, 0, cols);
}

}  // namespace

BlockQuantized BlockQuantized::transposed() const {
  return {codes.t().contiguous(), scales.t().contiguous(), group_cols, group_rows};
}

BlockQuantized quantize_blocks(const torch::Tensor& x, int64_t group_rows, int64_t group_cols) {
  if (x.dim() != 2 || x.scalar_type() != torch::kFloat32 || group_rows < 1 || group_cols < 1) {
    throw Error(
        fmt::format("quantize_blocks: a 2-D float32 tensor and positive groups expected, "
                    "got {}-D {} in {} x {} blocks",
                    x.dim(), c10::toString(x.scalar_type()), group_rows, group_cols));
  }
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t block_rows = ceil_div(rows, group_rows), block_cols = ceil_div(cols, group_cols);
  // Zero padding to whole blocks changes no block's amax.
  const torch::Tensor padded = torch::constant_pad_nd(
      x, {0, block_cols * group_cols - cols, 0, block_rows * group_rows - rows});
  const torch::Tensor amax =
      padded.abs().view({block_rows, group_rows, block_cols, group_cols}).amax({1, 3});
  BlockQuantized q;
  q.scales = amax.clamp_min(kAmaxFloor) / kE4M3Max;
  q.group_rows = group_rows;
  q.group_cols = group_cols;
  q.codes = encode_e4m3(x / expanded(q.scales, group_rows, group_cols, rows, cols));
  return q;
}

torch::Tensor dequantize(const BlockQuantized& q) {
  return decode_e4m3(q.codes) * expanded(q.scales, q.group_rows, q.group_cols, q.rows(), q.cols());
}

GemmOperand gemm_operand(const BlockQuantized& q) {
  if (q.group_cols != kGroup)
    throw Error(
        fmt::format("gemm_operand: groups of {} columns expected, got {}", kGroup, q.group_cols));
  return {decode_e4m3(q.codes).to(torch::kFloat64), q.scales.repeat_interleave(q.group_rows, 0)
                                                        .narrow(0, 0, q.rows())
                                                        .to(torch::kFloat64)
                                                        .contiguous()};
}

torch::Tensor fp8_gemm(const GemmOperand& a, const GemmOperand& b) {
  const int64_t k = a.values.size(1);
  if (b.values.size(1) != k)
    throw Error(fmt::format("fp8_gemm: inner dimensions differ ({} and {})", k, b.values.size(1)));
  // In float64 every group's dot products are exact (see the header), so no summation order and
  // no choice of GEMM kernel (the library picks by shape) can change a bit of the result.
  torch::Tensor out = torch::zeros({a.values.size(0), b.values.size(0)}, a.values.options());
  for (int64_t g = 0; g * kGroup < k; ++g) {
    const int64_t begin = g * kGroup, width = std::min(kGroup, k - begin);
    torch::Tensor partial =
        torch::mm(a.values.narrow(1, begin, width), b.values.narrow(1, begin, width).t());
    partial.mul_(a.row_scales.select(1, g).unsqueeze(1))
        .mul_(b.row_scales.select(1, g).unsqueeze(0));
    out.add_(partial);
  }
  return out.to(torch::kFloat32);
}

}  // namespace trellis::model::fp8
