#include "toploc/proof_builder.h"

#include <chrono>
#include <cstring>

#include "common/error.h"
#include "common/logging.h"

namespace trellis::toploc {

std::vector<uint16_t> bf16_bits(const torch::Tensor& hidden) {
  const torch::Tensor b = hidden.detach().to(torch::kCPU, torch::kBFloat16).contiguous();
  std::vector<uint16_t> out(static_cast<size_t>(b.numel()));
  static_assert(sizeof(at::BFloat16) == sizeof(uint16_t));
  std::memcpy(out.data(), b.data_ptr<at::BFloat16>(), out.size() * sizeof(uint16_t));
  return out;
}

std::string completion_key(const std::string& request_id, int64_t index) {
  return request_id + "#" + std::to_string(index);
}

ProofBuilder::ProofBuilder(ProofConfig config) : config_(config) {}

void ProofBuilder::prove_rows(Pending& p, const std::string& key) const {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    p.proof += build_proof(p.rows, static_cast<size_t>(p.hidden), config_);
  } catch (const Error& e) {
    p.broken = e.what();
    log::warn("toploc: no proof for {}: {}", key, p.broken);
  }
  p.rows.clear();
  proving_ns_ +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count();
}

void ProofBuilder::add(const std::string& key, int64_t token_index, const torch::Tensor& row) {
  std::vector<uint16_t> bits = bf16_bits(row);
  std::unique_lock lock(mu_);
  Pending& p = pending_[key];
  if (!p.broken.empty()) return;
  if (token_index != p.received ||
      (p.hidden != 0 && p.hidden != static_cast<int64_t>(bits.size()))) {
    p.broken = fmt::format("row {} arrived after {} rows of width {} (a row of width {})",
                           token_index, p.received, p.hidden, bits.size());
    return;
  }
  p.hidden = static_cast<int64_t>(bits.size());
  p.rows.insert(p.rows.end(), bits.begin(), bits.end());
  ++p.received;
  if (p.rows.size() == config_.chunk_rows * bits.size()) {
    // Proven outside the lock: take() for other completions must not wait on it. The entry
    // stays put (std::map never moves it), and only this thread adds rows to it.
    std::vector<uint16_t> rows;
    rows.swap(p.rows);
    lock.unlock();
    Pending chunk{std::move(rows), "", 0, p.hidden, ""};
    prove_rows(chunk, key);
    lock.lock();
    const auto it = pending_.find(key);
    if (it == pending_.end()) return;  // forgotten meanwhile
    it->second.proof += chunk.proof;
    if (!chunk.broken.empty() && it->second.broken.empty()) it->second.broken = chunk.broken;
  }
  cv_.notify_all();
}

std::string ProofBuilder::take(const std::string& key, int64_t rows, double timeout_s) {
  std::unique_lock lock(mu_);
  const auto ready = [&] {
    const auto it = pending_.find(key);
    if (rows <= 0) return true;
    if (it == pending_.end()) return false;
    // All rows in, and no full chunk still being proven outside the lock.
    const Pending& p = it->second;
    return !p.broken.empty() ||
           (p.received >= rows &&
            p.proof.size() ==
                chunk_proof_bytes(config_.k) *
                    static_cast<size_t>(p.received / static_cast<int64_t>(config_.chunk_rows)));
  };
  if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), ready))
    fail(key, "TOPLOC rows for {} tokens did not arrive within {:.0f} s", rows, timeout_s);
  if (rows <= 0) {
    pending_.erase(key);
    return "";
  }
  Pending p = std::move(pending_[key]);
  pending_.erase(key);
  if (!p.broken.empty()) fail(key, "no TOPLOC proof: {}", p.broken);
  if (p.received != rows)
    fail(key, "{} TOPLOC rows arrived for a completion that commits {}", p.received, rows);
  if (!p.rows.empty()) prove_rows(p, key);
  if (!p.broken.empty()) fail(key, "no TOPLOC proof: {}", p.broken);
  return p.proof;
}

void ProofBuilder::forget(const std::string& key) {
  std::lock_guard lock(mu_);
  pending_.erase(key);
}

size_t ProofBuilder::held() const {
  std::lock_guard lock(mu_);
  return pending_.size();
}

}  // namespace trellis::toploc
