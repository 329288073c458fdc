#include "toploc/recompute.h"

#include "toploc/proof_builder.h"

namespace trellis::toploc {

std::vector<uint16_t> committed_rows(model::Transformer& model, const std::vector<int32_t>& prompt,
                                     const std::vector<int32_t>& completion) {
  if (completion.size() < 2) return {};
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  seq.insert(seq.end(), completion.begin(), completion.end() - 1);
  torch::NoGradGuard no_grad;
  const auto out = model.forward(torch::tensor(seq), {.logits = false, .hidden = true});
  const auto first = static_cast<int64_t>(prompt.size());
  return bf16_bits(out.hidden.slice(0, first, static_cast<int64_t>(seq.size())));
}

}  // namespace trellis::toploc
