#include "rl/sequence_logprobs.h"

#include "common/error.h"

namespace trellis::rl {

PackedSequences pack_sequences(const std::vector<const Sequence*>& sequences) {
  std::vector<int64_t> tokens, positions, rows, targets;
  std::vector<float> inv_temperature;
  PackedSequences p;
  int64_t offset = 0;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const Sequence& s = *sequences[i];
    const std::string where = "sequence " + std::to_string(i);
    if (s.prompt.empty()) fail(where, "empty prompt");
    if (s.completion.empty()) fail(where, "empty completion");
    if (!(s.temperature > 0)) fail(where, "temperature {} is not positive", s.temperature);
    const int64_t len = s.input_length();
    for (int64_t t = 0; t < len; ++t) {
      const size_t np = s.prompt.size();
      tokens.push_back(t < static_cast<int64_t>(np) ? s.prompt[t] : s.completion[t - np]);
      positions.push_back(t);
    }
    // Completion token j is predicted by the row of the token before it.
    const int64_t first_row = offset + static_cast<int64_t>(s.prompt.size()) - 1;
    for (size_t j = 0; j < s.completion.size(); ++j) {
      rows.push_back(first_row + static_cast<int64_t>(j));
      targets.push_back(s.completion[j]);
      inv_temperature.push_back(static_cast<float>(1.0 / s.temperature));
    }
    p.seq_lens.push_back(len);
    offset += len;
  }
  auto i64 = [](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64); };
  p.tokens = i64(tokens);
  p.positions = i64(positions);
  p.rows = i64(rows);
  p.targets = i64(targets);
  p.inv_temperature = torch::tensor(inv_temperature, torch::kFloat32).reshape({-1, 1});
  return p;
}

TokenLogprobs sequence_logprobs(model::Transformer& model, const PackedSequences& packed,
                                int64_t vocab_limit, bool with_entropy,
                                model::ForwardOptions forward) {
  const auto device = model.compute().device;
  // Only the rows that score completion tokens reach the LM head: [N, vocab], compute dtype.
  forward.rows = packed.rows;
  forward.compute_dtype_logits = true;
  const auto logits = model
                          .forward_packed(packed.tokens.to(device), packed.positions.to(device),
                                          packed.seq_lens, forward)
                          .logits;
  auto out = model::token_logprobs(logits, packed.targets, packed.inv_temperature, vocab_limit);
  if (!with_entropy) out.entropy = torch::Tensor();
  return out;
}

}  // namespace trellis::rl
