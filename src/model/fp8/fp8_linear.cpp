#include "model/fp8/fp8_linear.h"

#include <fmt/format.h>

#include "common/error.h"

namespace trellis::model::fp8 {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// [..., in] as float32 [tokens, in].
torch::Tensor rows_of(const torch::Tensor& x) {
  return x.reshape({-1, x.size(-1)}).to(torch::kFloat32);
}

// [tokens, out] back to x's leading shape and dtype.
torch::Tensor shaped_like(const torch::Tensor& y, const torch::Tensor& x) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(y.size(1));
  return y.view(shape).to(x.scalar_type());
}

void check_inputs(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!x.device().is_cpu() || !weight.device().is_cpu()) {
    throw Error(
        "fp8_linear: FP8 is emulated on CPU tensors only so far (the CUDA path is the GPU "
        "issue's); use rl.precision = \"bf16\" on a GPU");
  }
  if (x.dim() < 1 || weight.dim() != 2 || x.size(-1) != weight.size(1)) {
    throw Error(
        fmt::format("fp8_linear: x [..., in] and a weight [out, in] expected, got {} and {}",
                    c10::str(x.sizes()), c10::str(weight.sizes())));
  }
}

struct Fp8LinearFunction : torch::autograd::Function<Fp8LinearFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& master) {
    const Fp8Weight weight = quantize_weight(master.detach());
    const BlockQuantized xq = quantize_blocks(rows_of(x.detach()), 1, kGroup);
    ctx->saved_data["x_codes"] = xq.codes;
    ctx->saved_data["x_scales"] = xq.scales;
    ctx->saved_data["w_codes"] = weight.blocks.codes;
    ctx->saved_data["w_scales"] = weight.blocks.scales;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());  // dx's
    ctx->saved_data["x_shape"] = x.sizes().vec();
    return shaped_like(fp8_gemm(gemm_operand(xq), weight.operand), x);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const torch::Tensor dy = rows_of(grads[0]);  // [tokens, out]
    const BlockQuantized xq{ctx->saved_data["x_codes"].toTensor(),
                            ctx->saved_data["x_scales"].toTensor(), 1, kGroup};
    const BlockQuantized wq{ctx->saved_data["w_codes"].toTensor(),
                            ctx->saved_data["w_scales"].toTensor(), kGroup, kGroup};
    // DGrad: dy in 1x128 groups along out, the weight's blocks transposed to [in, out].
    const torch::Tensor dx =
        fp8_gemm(gemm_operand(quantize_blocks(dy, 1, kGroup)), gemm_operand(wq.transposed()));
    // WGrad: the reduction runs over tokens, so both operands are grouped along them: dy^T and
    // the saved activation (dequantised from its FP8 copy) transposed, each in 1x128 groups.
    const torch::Tensor dw = fp8_gemm(gemm_operand(quantize_blocks(dy.t(), 1, kGroup)),
                                      gemm_operand(quantize_blocks(dequantize(xq).t(), 1, kGroup)));
    const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto x_shape = ctx->saved_data["x_shape"].toIntVector();
    return {dx.view(x_shape).to(x_dtype), dw};
  }
};

}  // namespace

Fp8Weight quantize_weight(const torch::Tensor& master) {
  return stored_weight(quantize_blocks(master.to(torch::kFloat32), kGroup, kGroup));
}

Fp8Weight stored_weight(BlockQuantized blocks) {
  Fp8Weight w;
  w.operand = gemm_operand(blocks);
  w.blocks = std::move(blocks);
  return w;
}

torch::Tensor fp8_linear(const torch::Tensor& x, const torch::Tensor& master) {
  check_inputs(x, master);
  return Fp8LinearFunction::apply(x, master);
}

torch::Tensor fp8_linear(const torch::Tensor& x, const Fp8Weight& weight) {
  check_inputs(x, weight.blocks.codes);
  const BlockQuantized xq = quantize_blocks(rows_of(x), 1, kGroup);
  return shaped_like(fp8_gemm(gemm_operand(xq), weight.operand), x);
}

}  // namespace trellis::model::fp8
