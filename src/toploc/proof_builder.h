// Builds TOPLOC proofs while a worker decodes (specs/toploc.md §1). The rollout engine's
// hidden-row thread (engine.h) feeds add(), which keeps each completion's rows as bf16 bit
// patterns; every full chunk of `chunk_rows` rows, and a finished completion's last, shorter
// chunk, is proven on a prover thread of the builder's own, off the decode hot path and off the
// thread that collects finished completions. take() hands back a completion's proof bytes (what
// a rollout file's `proof` column holds) once its chunks are proven.
//
// Thread-safe: add() runs on the engine's hidden-row thread, finish() on the engine's thread (in
// a completion's on_finish), take() and forget() on the thread that collects completions.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/worker_pool.h"
#include "toploc/proof.h"

namespace trellis::toploc {

// The rows a validator recomputes and a worker commits, as bf16 bits, row-major: `hidden`
// ([rows, H], any float dtype) rounded to bf16.
std::vector<uint16_t> bf16_bits(const torch::Tensor& hidden);

// The key add(), finish() and take() use for completion `index` of request `request_id`.
std::string completion_key(const std::string& request_id, int64_t index);

class ProofBuilder {
 public:
  // Destroy it after the engine that feeds it (whose hidden-row thread calls add()).
  explicit ProofBuilder(ProofConfig config = {});

  // Row `token_index` (0, 1, ... in order) of completion `key`: its final hidden state ([H], any
  // float dtype). A row out of order marks the completion broken: take() then fails for it.
  void add(const std::string& key, int64_t token_index, const torch::Tensor& row);
  // `key` has ended with `rows` committed rows (N - 1 for N tokens): its last chunk is proven as
  // soon as its rows are in. Optional: take() calls it when it was not.
  void finish(const std::string& key, int64_t rows);
  // The proof of `key`'s `rows` rows. Waits up to `timeout_s` for rows still queued in the engine
  // and chunks still being proven. Forgets `key`. Error naming it when the rows never came, or
  // they cannot be proven (NaN/Inf hidden states).
  std::string take(const std::string& key, int64_t rows, double timeout_s = 60);
  // Drops what is held for `key` (a completion dropped with its group).
  void forget(const std::string& key);

  size_t held() const;  // completions with rows or proofs held
  // Thread time so far: proving (the prover thread), and taking rows in (add(), on the engine's
  // hidden-row thread: the bf16 copy and the bookkeeping).
  double proving_seconds() const { return static_cast<double>(proving_ns_.load()) * 1e-9; }
  double adding_seconds() const { return static_cast<double>(adding_ns_.load()) * 1e-9; }

 private:
  struct Pending {
    std::vector<uint16_t> rows;             // received, not yet handed to the prover
    std::map<int64_t, std::string> proofs;  // chunk index -> its proof
    int64_t received = 0, hidden = 0;       // rows added; H
    int64_t expected = -1;                  // committed rows, once finished
    int64_t submitted = 0, proven = 0;      // chunks handed to the prover, and done
    std::string broken;                     // why no proof can be built ("" = fine)
  };
  // Hands p's rows, as chunk p.submitted, to the prover (with the lock held).
  void submit_chunk(const std::string& key, Pending& p);
  void maybe_submit_last(const std::string& key, Pending& p);

  const ProofConfig config_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Pending> pending_;
  std::atomic<int64_t> proving_ns_{0}, adding_ns_{0};
  WorkerPool prover_{1};  // last: its thread stops before the state it writes goes away
};

}  // namespace trellis::toploc
