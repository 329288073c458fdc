// Builds TOPLOC proofs while a worker decodes (specs/toploc.md §1). The rollout engine's
// hidden-row sink (engine.h) feeds add() on a thread of its own; each completion's rows are kept
// as bf16 bit patterns until a chunk of `chunk_rows` is full, and that chunk is proven at once,
// there, off the decode hot path. take() proves the last, shorter chunk once every row of the
// completion has arrived and hands back the completion's proof bytes (what a rollout file's
// `proof` column holds).
//
// Thread-safe: add() runs on the engine's hidden-row thread, take() and forget() on the thread
// that collects finished completions.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "toploc/proof.h"

namespace trellis::toploc {

// The rows a validator recomputes and a worker commits, as bf16 bits, row-major: `hidden`
// ([rows, H], any float dtype) rounded to bf16.
std::vector<uint16_t> bf16_bits(const torch::Tensor& hidden);

class ProofBuilder {
 public:
  explicit ProofBuilder(ProofConfig config = {});

  // Row `token_index` (0, 1, ... in order) of the completion `key` names: its final hidden state
  // ([H], any float dtype). A row out of order, or one that cannot be proven (NaN/Inf), marks
  // the completion broken: take() then fails for it.
  void add(const std::string& key, int64_t token_index, const torch::Tensor& row);
  // The proof of `key`'s first `rows` rows (a completion of N tokens commits N - 1). Waits up to
  // `timeout_s` for rows still queued in the engine. Forgets `key`. Error naming it when the rows
  // never came or the completion is broken.
  std::string take(const std::string& key, int64_t rows, double timeout_s = 60);
  // Drops what is held for `key` (an aborted completion); rows that still arrive are held again
  // until forgotten, so call it after the engine is done with the completion.
  void forget(const std::string& key);

  size_t held() const;  // completions with rows held
  double proving_seconds() const { return proving_ns_.load() * 1e-9; }  // thread time so far

 private:
  struct Pending {
    std::vector<uint16_t> rows;  // the current, unproven chunk's rows
    std::string proof;           // proofs of the full chunks so far
    int64_t received = 0;        // rows added
    int64_t hidden = 0;          // H
    std::string broken;          // why no proof can be built ("" = fine)
  };
  void prove_rows(Pending& p, const std::string& key) const;

  const ProofConfig config_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Pending> pending_;
  mutable std::atomic<int64_t> proving_ns_{0};
};

// The key add() and take() use for completion `index` of request `request_id`.
std::string completion_key(const std::string& request_id, int64_t index);

}  // namespace trellis::toploc
