#include "model/checkpoint.h"

#include <set>

#include "common/error.h"
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

}  // namespace

std::unique_ptr<Transformer> load_transformer(const std::filesystem::path& dir,
                                              const Compute& compute) {
  HfConfig config = HfConfig::load(dir);
  auto model = std::make_unique<Transformer>(config, compute);
  SafetensorsModel st = SafetensorsModel::open_dir(dir);
  torch::NoGradGuard no_grad;
  std::set<std::string> expected;
  for (const auto& [name, param] : model->named_parameters()) {
    expected.insert(name);
    const TensorInfo* info = st.find(name);
    if (info == nullptr) fail(dir.string(), "missing tensor '{}' in the safetensors files", name);
    const std::string where = st.file_of(name);
    std::vector<int64_t> shape(info->shape.begin(), info->shape.end());
    if (c10::IntArrayRef(shape) != param.sizes()) {
      fail(where, "tensor '{}' has shape {} but config.json implies {}", name, shape_str(shape),
           shape_str(param.sizes()));
    }
    auto bytes = st.data(name);
    auto src = torch::from_blob(const_cast<std::byte*>(bytes.data()), shape,
                                torch_dtype(info->dtype, name, where));
    param.copy_(src);  // converts to the fp32 master (and to the device)
  }
  for (const auto& name : st.names()) {
    if (expected.count(name) || ignorable(name)) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) continue;  // tied copy
    fail(dir.string(), "unexpected tensor '{}' (not part of a {} model with this config)", name,
         arch_name(config.arch));
  }
  return model;
}

void save_transformer(const Transformer& model, const std::filesystem::path& dir, StoreDtype dtype,
                      uint64_t max_shard_bytes) {
  torch::NoGradGuard no_grad;
  const auto target = dtype == StoreDtype::BF16 ? torch::kBFloat16 : torch::kFloat32;
  std::vector<torch::Tensor> keep;  // owns the bytes the views below point at
  std::vector<TensorData> tensors;
  for (const auto& [name, param] : model.named_parameters()) {
    auto t = param.detach().to(torch::kCPU).to(target).contiguous();
    keep.push_back(t);
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    tensors.push_back(TensorData{
        name, dtype == StoreDtype::BF16 ? DType::BF16 : DType::F32, shape,
        std::span<const std::byte>(static_cast<const std::byte*>(t.data_ptr()), t.nbytes())});
  }
  std::filesystem::create_directories(dir);
  HfConfig config = model.config();
  config.torch_dtype = dtype == StoreDtype::BF16 ? "bfloat16" : "float32";
  write_safetensors_dir(dir, tensors, max_shard_bytes);
  config.save(dir);
}

}  // namespace trellis::model
