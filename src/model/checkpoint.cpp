#include "model/checkpoint.h"

#include <set>

#include "common/error.h"
#include "model/fp8/block_quant.h"
#include "model/fp8/fp8_linear.h"
#include "model/safetensors.h"

namespace trellis::model {
namespace {

std::string shape_str(c10::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

torch::ScalarType torch_dtype(DType d, const std::string& tensor, const std::string& where) {
  switch (d) {
    case DType::F32:
      return torch::kFloat32;
    case DType::F16:
      return torch::kFloat16;
    case DType::BF16:
      return torch::kBFloat16;
    default:
      fail(where, "tensor '{}' has dtype {}; model weights must be F32, F16 or BF16", tensor,
           dtype_name(d));
  }
}

// Buffers some exporters add that carry no weights of their own.
bool ignorable(const std::string& name) {
  return name.find("rotary_emb.inv_freq") != std::string::npos;
}

// "<name>_scale_inv" of an FP8 weight: its 128x128 block scales.
std::string scale_name(const std::string& weight) { return weight + "_scale_inv"; }

// The decoder's linear weights: what FP8 forwards quantise (Transformer::project).
bool fp8_linear_weight(const std::string& name) {
  return name.rfind("model.layers.", 0) == 0 && name.size() > 12 &&
         name.compare(name.size() - 12, 12, "_proj.weight") == 0;
}

// The codes of `name` (F8_E4M3, of `shape`) and their scales, checked and copied out of the file.
fp8::BlockQuantized read_fp8(const SafetensorsModel& st, const std::string& name,
                             const std::vector<int64_t>& shape, const std::string& where) {
  if (shape.size() != 2) fail(where, "F8_E4M3 tensor '{}' must be 2-D", name);
  const std::string scales = scale_name(name);
  const TensorInfo* info = st.find(scales);
  const std::vector<int64_t> expected = {(shape[0] + fp8::kGroup - 1) / fp8::kGroup,
                                         (shape[1] + fp8::kGroup - 1) / fp8::kGroup};
  if (info == nullptr) fail(where, "F8_E4M3 tensor '{}' has no '{}'", name, scales);
  if (info->dtype != DType::F32 ||
      std::vector<int64_t>(info->shape.begin(), info->shape.end()) != expected) {
    fail(st.file_of(scales), "'{}' must be F32 {} (one scale per 128x128 block of '{}')", scales,
         shape_str(expected), name);
  }
  auto bytes = [&](const std::string& n) { return const_cast<std::byte*>(st.data(n).data()); };
  fp8::BlockQuantized q;
  q.codes = torch::from_blob(bytes(name), shape, torch::kUInt8).clone();
  q.scales = torch::from_blob(bytes(scales), expected, torch::kFloat32).clone();
  q.group_rows = q.group_cols = fp8::kGroup;
  if (!torch::isfinite(q.scales).all().item<bool>() || !(q.scales > 0).all().item<bool>())
    fail(st.file_of(scales), "'{}' holds a scale that is not finite and positive", scales);
  return q;
}

}  // namespace

std::unique_ptr<Transformer> load_transformer(const std::filesystem::path& dir,
                                              const Compute& compute) {
  HfConfig config = HfConfig::load(dir);
  SafetensorsModel st = SafetensorsModel::open_dir(dir);
  // Every weight the config describes is checked against the files before the model is
  // allocated: a config.json that does not belong to its weights (a wrong or hostile one) could
  // otherwise ask for far more memory than the files hold.
  std::set<std::string> expected;
  for (const WeightShape& w : config.weight_shapes()) {
    expected.insert(w.name);
    const TensorInfo* info = st.find(w.name);
    if (info == nullptr) {
      fail(dir.string(), "missing tensor '{}' in the safetensors files", w.name);
    }
    const std::string where = st.file_of(w.name);
    if (info->shape != w.shape) {
      fail(where, "tensor '{}' has shape {} but config.json implies {}", w.name,
           shape_str(info->shape), shape_str(w.shape));
    }
    if (info->dtype == DType::F8_E4M3) {
      expected.insert(scale_name(w.name));
    } else {
      torch_dtype(info->dtype, w.name, where);  // an Error unless F32, F16 or BF16
    }
  }
  for (const auto& name : st.names()) {
    if (expected.count(name) || ignorable(name)) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;  // tied copy
    fail(dir.string(), "unexpected tensor '{}' (not part of a {} model with this config)", name,
         arch_name(config.arch));
  }

  auto model = std::make_unique<Transformer>(config, compute);
  torch::NoGradGuard no_grad;
  for (const auto& [name, param] : model->named_parameters()) {
    const TensorInfo* info = st.find(name);
    const std::string where = st.file_of(name);
    if (info->dtype == DType::F8_E4M3) {
      fp8::BlockQuantized q = read_fp8(st, name, info->shape, where);
      param.copy_(fp8::dequantize(q));
      model->set_fp8_weight(name, fp8::stored_weight(std::move(q)));
      continue;
    }
    auto bytes = st.data(name);
    auto src = torch::from_blob(const_cast<std::byte*>(bytes.data()), info->shape,
                                torch_dtype(info->dtype, name, where));
    param.copy_(src);  // converts to the fp32 master (and to the device)
  }
  return model;
}

void save_transformer(const Transformer& model, const std::filesystem::path& dir, StoreDtype dtype,
                      uint64_t max_shard_bytes) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> keep;  // owns the bytes the views below point at
  std::vector<TensorData> tensors;
  auto add = [&](const std::string& name, DType stored, torch::Tensor t) {
    t = t.to(torch::kCPU).contiguous();
    keep.push_back(t);
    tensors.push_back(TensorData{
        name, stored, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
        std::span<const std::byte>(static_cast<const std::byte*>(t.data_ptr()), t.nbytes())});
  };
  for (const auto& [name, param] : model.named_parameters()) {
    const torch::Tensor p = param.detach().to(torch::kCPU);
    const bool fp8 = dtype == StoreDtype::FP8 || dtype == StoreDtype::FP8_BF16;
    if (fp8 && fp8_linear_weight(name)) {
      const fp8::BlockQuantized q = model.fp8_blocks(name);
      add(name, DType::F8_E4M3, q.codes);
      add(scale_name(name), DType::F32, q.scales);
    } else if (dtype == StoreDtype::BF16 || dtype == StoreDtype::FP8_BF16) {
      add(name, DType::BF16, p.to(torch::kBFloat16));
    } else {
      add(name, DType::F32, p.to(torch::kFloat32));
    }
  }
  std::filesystem::create_directories(dir);
  HfConfig config = model.config();
  config.torch_dtype =
      dtype == StoreDtype::BF16 || dtype == StoreDtype::FP8_BF16 ? "bfloat16" : "float32";
  config.fp8_blocks = dtype == StoreDtype::FP8 || dtype == StoreDtype::FP8_BF16;
  write_safetensors_dir(dir, tensors, max_shard_bytes);
  config.save(dir);
}

}  // namespace trellis::model
