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

namespace {

// Adds the time since its construction to `ns` when it goes out of scope.
struct ThreadTime {
  std::atomic<int64_t>& ns;
  const std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~ThreadTime() {
    ns +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
  }
};

}  // namespace

std::string completion_key(const std::string& request_id, int64_t index) {
  return request_id + "#" + std::to_string(index);
}

ProofBuilder::ProofBuilder(ProofConfig config) : config_(config) {}

void ProofBuilder::submit_chunk(const std::string& key, Pending& p) {
  const int64_t chunk = p.submitted++;
  prover_.submit([this, key, chunk, hidden = p.hidden, rows = std::move(p.rows)] {
    std::string proof, broken;
    {
      const ThreadTime timer{proving_ns_};
      try {
        proof = build_proof(rows, static_cast<size_t>(hidden), config_);
      } catch (const Error& e) {
        broken = e.what();
      }
    }
    std::lock_guard lock(mu_);
    const auto it = pending_.find(key);
    if (it == pending_.end()) return;  // forgotten meanwhile
    Pending& q = it->second;
    q.proofs[chunk] = std::move(proof);
    ++q.proven;
    if (!broken.empty() && q.broken.empty()) {
      q.broken = broken;
      log::warn("toploc: no proof for {}: {}", key, broken);
    }
    cv_.notify_all();
  });
  p.rows.clear();
}

void ProofBuilder::maybe_submit_last(const std::string& key, Pending& p) {
  if (p.expected >= 0 && p.received == p.expected && !p.rows.empty()) submit_chunk(key, p);
}

void ProofBuilder::add(const std::string& key, int64_t token_index, const torch::Tensor& row) {
  const ThreadTime timer{adding_ns_};
  std::vector<uint16_t> bits = bf16_bits(row);
  std::lock_guard lock(mu_);
  Pending& p = pending_[key];
  if (!p.broken.empty()) return;
  const auto width = static_cast<int64_t>(bits.size());
  if (token_index != p.received || (p.hidden != 0 && p.hidden != width)) {
    p.broken = fmt::format("row {} (width {}) arrived after {} rows of width {}", token_index,
                           width, p.received, p.hidden);
    cv_.notify_all();
    return;
  }
  p.hidden = width;
  p.rows.insert(p.rows.end(), bits.begin(), bits.end());
  ++p.received;
  if (p.rows.size() == config_.chunk_rows * bits.size())
    submit_chunk(key, p);
  else
    maybe_submit_last(key, p);
  cv_.notify_all();
}

void ProofBuilder::finish(const std::string& key, int64_t rows) {
  std::lock_guard lock(mu_);
  Pending& p = pending_[key];
  if (p.expected >= 0) return;
  p.expected = std::max<int64_t>(0, rows);
  maybe_submit_last(key, p);
}

std::string ProofBuilder::take(const std::string& key, int64_t rows, double timeout_s) {
  finish(key, rows);
  std::unique_lock lock(mu_);
  const auto done = [&] {
    const Pending& p = pending_[key];
    return !p.broken.empty() || p.received > p.expected ||
           (p.received == p.expected && p.rows.empty() && p.proven == p.submitted);
  };
  const bool ready = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), done);
  Pending p = std::move(pending_[key]);
  pending_.erase(key);
  if (!ready)
    fail(key, "TOPLOC rows for {} tokens did not arrive within {:.0f} s ({} did)", rows, timeout_s,
         p.received);
  if (!p.broken.empty()) fail(key, "no TOPLOC proof: {}", p.broken);
  if (p.received != p.expected)
    fail(key, "{} TOPLOC rows arrived for a completion that commits {}", p.received, p.expected);
  std::string proof;
  for (const auto& [chunk, bytes] : p.proofs) proof += bytes;
  return proof;
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
