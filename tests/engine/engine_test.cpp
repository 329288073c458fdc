// The rollout engine end to end on a tiny random model: batch invariance of verifiable sampling,
// log-probs against the model's full forward, stop ids and max_tokens, n completions sharing a
// prefill, preemption, weight swaps with per-token versions, C3PO++ budgets and retention, hidden
// rows, aborts, stopping one completion, validation, and the threaded loop.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <thread>

#include "common/error.h"
#include "engine/decode_graphs.h"
#include "engine/engine_loop.h"
#include "error_of.h"
#include "model/presets.h"

namespace trellis::engine {
namespace {

using model::Arch;
using model::Compute;
using model::Transformer;
using test::error_of;

std::unique_ptr<Transformer> tiny_model(torch::ScalarType dtype, uint64_t seed = 1) {
  auto cfg = model::preset_config(Arch::Qwen3, "tiny");
  auto m = std::make_unique<Transformer>(cfg, Compute{torch::kCPU, dtype});
  m->init_random(seed);
  return m;
}

std::vector<int32_t> prompt_of(int64_t len, int32_t salt) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < len; ++i) p.push_back(static_cast<int32_t>((i * 37 + salt * 11) % 250));
  return p;
}

Request make_request(std::string id, int64_t prompt_len, uint64_t seed, int64_t max_tokens = 24) {
  Request r;
  r.id = std::move(id);
  r.prompt = prompt_of(prompt_len, static_cast<int32_t>(seed));
  r.seed = seed;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 1.0;
  return r;
}

// Runs the engine until idle and returns every completion by (request id, index).
std::map<std::pair<std::string, int64_t>, Completion> run_all(Engine& engine,
                                                              std::vector<Request> requests) {
  std::map<std::pair<std::string, int64_t>, Completion> out;
  for (auto& r : requests) {
    engine.add(std::move(r), {.on_finish = [&](Completion c) {
                 auto key = std::make_pair(c.request_id, c.index);
                 out[key] = std::move(c);
               }});
  }
  while (engine.has_work()) engine.step();
  return out;
}

Completion run_one(Transformer& model, Request r, EngineOptions options = {}) {
  Engine engine(model, options);
  auto id = r.id;
  return run_all(engine, {std::move(r)}).at({id, 0});
}

// log softmax(logits / T) of each completion token under a full forward of prompt + completion.
std::vector<double> reference_logprobs(Transformer& model, const Completion& c,
                                       double temperature) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> seq(c.prompt.begin(), c.prompt.end());
  seq.insert(seq.end(), c.tokens.begin(), c.tokens.end() - 1);
  auto logits = model.forward(torch::tensor(seq)).logits.to(torch::kFloat64);
  auto lp = torch::log_softmax(logits / temperature, -1);
  std::vector<double> out;
  const int64_t P = static_cast<int64_t>(c.prompt.size());
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    out.push_back(lp[P - 1 + static_cast<int64_t>(i)][c.tokens[i]].item<double>());
  }
  return out;
}

// Requests of assorted lengths that share the batch with the one under test.
std::vector<Request> crowd(int count) {
  std::vector<Request> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(make_request("crowd" + std::to_string(i), 3 + 9 * i, 100 + i, 8 + 5 * i));
  }
  return out;
}

double agreement(torch::ScalarType dtype, int trials) {
  auto model = tiny_model(dtype);
  int64_t same = 0, total = 0;
  for (int t = 0; t < trials; ++t) {
    auto alone = run_one(*model, make_request("x", 20 + t, 7 + t, 40));
    Engine engine(*model, {});
    auto requests = crowd(6);
    requests.insert(requests.begin() + 3, make_request("x", 20 + t, 7 + t, 40));
    auto batched = run_all(engine, std::move(requests)).at({"x", 0});
    total += static_cast<int64_t>(alone.tokens.size());
    for (size_t i = 0; i < alone.tokens.size() && i < batched.tokens.size(); ++i) {
      if (alone.tokens[i] != batched.tokens[i]) break;  // sequences diverge after a mismatch
      ++same;
    }
  }
  return static_cast<double>(same) / static_cast<double>(total);
}

TEST(Engine, SameSeedSameCompletionAloneOrBatchedFp32) {
  EXPECT_EQ(agreement(torch::kFloat32, 4), 1.0);
}

TEST(Engine, BatchInvarianceAgreementBf16) {
  const double rate = agreement(torch::kBFloat16, 4);
  std::printf("bf16: %.1f%% of tokens agree alone vs batched\n", 100 * rate);
  RecordProperty("bf16_agreement", std::to_string(rate));
  EXPECT_GT(rate, 0.5);
}

TEST(Engine, LogprobsMatchFullForward) {
  for (auto [dtype, tol] : {std::pair{torch::kFloat32, 1e-4}, std::pair{torch::kBFloat16, 0.1}}) {
    auto model = tiny_model(dtype);
    for (double temperature : {1.0, 0.7}) {
      Engine engine(*model, {});
      auto requests = crowd(3);
      auto r = make_request("x", 17, 3, 30);
      r.sampling.temperature = temperature;
      requests.push_back(r);
      auto c = run_all(engine, requests).at({"x", 0});
      auto ref = reference_logprobs(*model, c, temperature);
      ASSERT_EQ(ref.size(), c.logprobs.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_NEAR(c.logprobs[i], ref[i], tol) << "token " << i << " T=" << temperature;
      }
    }
  }
}

TEST(Engine, StopIdsAndMaxTokensEndWithTheRightReason) {
  auto model = tiny_model(torch::kFloat32);
  auto free_run = run_one(*model, make_request("a", 10, 5, 30));
  EXPECT_EQ(free_run.finish, Finish::kLength);
  EXPECT_EQ(free_run.tokens.size(), 30u);
  // Stop at the first token that has not appeared before it.
  size_t i = 1;
  while (std::count(free_run.tokens.begin(), free_run.tokens.begin() + i, free_run.tokens[i])) ++i;
  auto r = make_request("a", 10, 5, 30);
  r.stop_ids = {free_run.tokens[i]};
  auto stopped = run_one(*model, r);
  EXPECT_EQ(stopped.finish, Finish::kStop);
  EXPECT_EQ(stopped.tokens,
            std::vector<int32_t>(free_run.tokens.begin(), free_run.tokens.begin() + i + 1));
  EXPECT_STREQ(finish_name(stopped.finish), "stop");
  EXPECT_STREQ(finish_name(free_run.finish), "length");
}

TEST(Engine, NCompletionsShareOnePrefillAndEqualSingleRequests) {
  auto model = tiny_model(torch::kFloat32);
  Engine engine(*model, {});
  auto r = make_request("g", 40, 9, 20);
  r.n = 3;
  auto out = run_all(engine, {r});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(engine.stats().prompt_tokens, 40);  // one prefill for all three
  for (int64_t i = 0; i < 3; ++i) {
    auto single = make_request("s", 40, 9 + i, 20);
    single.prompt = r.prompt;
    auto alone = run_one(*model, single);
    EXPECT_EQ(out.at({"g", i}).seed, 9u + i);
    EXPECT_EQ(out.at({"g", i}).tokens, alone.tokens) << "completion " << i;
  }
  EXPECT_NE(out.at({"g", 0}).tokens, out.at({"g", 1}).tokens);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);  // everything released
}

// The engine samples in tensor ops wherever the logits live off the CPU (engine/batch_sampler);
// on the CPU the same option runs that path, and every completion must come out as the row-by-row
// sampler makes it: forks of one prefill, greedy, top-k, top-p, top log-probs, a narrowed vocab.
TEST(Engine, SamplingInTensorOpsGivesTheRowByRowCompletions) {
  auto model = tiny_model(torch::kFloat32);
  std::vector<Request> requests = crowd(4);
  const std::vector<SamplingParams> kinds = {
      {0.0, 0, 1.0}, {0.7, 0, 1.0}, {1.3, 5, 1.0}, {1.0, 0, 0.6}, {0.9, 12, 0.8}};
  for (size_t i = 0; i < kinds.size(); ++i) {
    auto r = make_request("k" + std::to_string(i), 5 + 7 * static_cast<int64_t>(i), 40 + i, 30);
    r.sampling = kinds[i];
    r.n = i == 3 ? 3 : 1;
    r.top_logprobs = i == 4 ? 3 : 0;
    r.stop_ids = {17, 42};
    requests.push_back(r);
  }
  EngineOptions rows{.vocab_limit = 200}, tensors{.vocab_limit = 200, .sample_in_tensor_ops = true};
  Engine by_rows(*model, rows), by_tensors(*model, tensors);
  const auto want = run_all(by_rows, requests), got = run_all(by_tensors, requests);
  ASSERT_EQ(want.size(), 11u);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [key, w] : want) {
    const Completion& g = got.at(key);
    const std::string where = key.first + "/" + std::to_string(key.second);
    EXPECT_EQ(g.tokens, w.tokens) << where;
    EXPECT_EQ(g.finish, w.finish) << where;
    ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << where;
    for (size_t i = 0; i < w.logprobs.size(); ++i) EXPECT_NEAR(g.logprobs[i], w.logprobs[i], 1e-5);
    EXPECT_EQ(g.top_logprobs, w.top_logprobs) << where;
    for (int32_t t : g.tokens) EXPECT_LT(t, 200) << where;
  }
  EXPECT_EQ(got.at({"k4", 0}).top_logprobs.size(), got.at({"k4", 0}).tokens.size());

  // NaN logits are an error naming the row on either path (and show which path ran).
  for (const auto& [name, p] : model->named_parameters()) {
    if (name == "model.norm.weight") p.fill_(NAN);
  }
  Engine poisoned(*model, tensors);
  const std::string msg = error_of([&] { run_all(poisoned, {make_request("nan", 4, 1)}); });
  EXPECT_NE(msg.find("sample_batch: row 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is NaN"), std::string::npos) << msg;
}

// On a GPU, steps of decodes alone replay recorded CUDA graphs (engine/decode_graphs.h), padded
// to a recorded batch size as sequences finish: the completions are those of op-by-op steps.
TEST(Engine, DecodeGraphsGiveTheOpByOpCompletionsOnCuda) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Transformer model(model::preset_config(Arch::Qwen3, "tiny"),
                    Compute{torch::Device(torch::kCUDA, 0), torch::kFloat32});
  model.init_random(1);
  if (!DecodeGraphs::available(model)) GTEST_SKIP() << "a build without TRELLIS_CUDA_KERNELS";
  std::vector<Request> requests = crowd(4);
  for (int64_t i = 0; i < 5; ++i) {
    auto r = make_request("g" + std::to_string(i), 5 + 7 * i, 60 + i, 10 + 6 * i);
    if (i % 2 == 1) r.sampling.temperature = 0;
    r.n = i == 2 ? 3 : 1;
    requests.push_back(r);
  }
  EngineOptions eager{.vocab_limit = 200, .decode_graphs = false}, graphs{.vocab_limit = 200};
  Engine op_by_op(model, eager), replayed(model, graphs);
  const auto want = run_all(op_by_op, requests), got = run_all(replayed, requests);
  EXPECT_EQ(op_by_op.stats().decode_graphs, 0);
  EXPECT_GT(replayed.stats().decode_graphs, 1) << "a batch that shrinks needs several sizes";
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [key, w] : want) {
    const Completion& g = got.at(key);
    const std::string where = key.first + "/" + std::to_string(key.second);
    EXPECT_EQ(g.tokens, w.tokens) << where;
    ASSERT_EQ(g.logprobs.size(), w.logprobs.size()) << where;
    for (size_t i = 0; i < w.logprobs.size(); ++i) EXPECT_NEAR(g.logprobs[i], w.logprobs[i], 1e-4);
  }
}

TEST(Engine, ContinuousBatchingRespectsMaxNumSeqsAndRefills) {
  auto model = tiny_model(torch::kFloat32);
  Engine engine(*model, {.max_num_seqs = 2});
  std::vector<Request> requests;
  for (int i = 0; i < 5; ++i)
    requests.push_back(make_request("r" + std::to_string(i), 8, i, 4 + 6 * i));
  for (auto& r : requests) engine.add(r);
  int64_t max_running = 0, steps = 0;
  while (engine.has_work()) {
    engine.step();
    ++steps;
    max_running = std::max(max_running, engine.stats().running);
  }
  EXPECT_EQ(max_running, 2);
  EXPECT_EQ(engine.stats().completions_finished, 5);
  // Retiring at once: fewer steps than running the requests two at a time in lockstep.
  EXPECT_LT(steps, 4 + 6 * 4 + 6 * 3 + 5);
}

TEST(Engine, PreemptionUnderMemoryPressureKeepsResults) {
  auto model = tiny_model(torch::kFloat32);
  std::vector<Request> requests;
  for (int i = 0; i < 6; ++i) requests.push_back(make_request("p" + std::to_string(i), 30, i, 40));
  Engine roomy(*model, {});
  auto expected = run_all(roomy, requests);
  Engine tight(*model, {.kv_cache_tokens = 16 * 12});  // 12 blocks: ~2.5 sequences at full length
  auto got = run_all(tight, requests);
  EXPECT_GT(tight.stats().preemptions, 0);
  for (const auto& [key, c] : expected) EXPECT_EQ(got.at(key).tokens, c.tokens) << key.first;
  EXPECT_EQ(tight.stats().kv_blocks_used, 0);
}

TEST(Engine, WeightSwapContinuesUnderNewWeightsAndTagsVersions) {
  auto model = tiny_model(torch::kFloat32, 1);
  auto other = tiny_model(torch::kFloat32, 2);
  auto before = run_one(*model, make_request("w", 12, 4, 30));  // old weights throughout
  Engine engine(*model, {});
  Completion done;
  engine.add(make_request("w", 12, 4, 30), {.on_finish = [&](Completion c) { done = c; }});
  while (engine.stats().tokens_generated < 10) engine.step();
  engine.update_weights(
      [&](Transformer& m) {
        for (const auto& [name, p] : m.named_parameters()) p.copy_(other->parameter(name));
      },
      1);
  EXPECT_EQ(engine.version(), 1);
  while (engine.has_work()) engine.step();
  ASSERT_EQ(done.tokens.size(), 30u);
  const int64_t k = std::count(done.versions.begin(), done.versions.end(), 0);
  EXPECT_EQ(k, 10);
  for (size_t i = 0; i < done.versions.size(); ++i) EXPECT_EQ(done.versions[i], i < 10 ? 0 : 1);
  // The first 10 tokens are what the old weights sample; the rest are exactly what the new weights
  // sample when given prompt + prefix (sampling is keyed by position, so the seeds line up).
  EXPECT_EQ(std::vector<int32_t>(done.tokens.begin(), done.tokens.begin() + 10),
            std::vector<int32_t>(before.tokens.begin(), before.tokens.begin() + 10));
  auto resumed = make_request("w", 12, 4, 20);
  resumed.prompt.insert(resumed.prompt.end(), done.tokens.begin(), done.tokens.begin() + 10);
  auto after = run_one(*other, resumed);
  EXPECT_EQ(std::vector<int32_t>(done.tokens.begin() + 10, done.tokens.end()), after.tokens);
  EXPECT_NEAR(done.logprobs[15], after.logprobs[5], 1e-5);
}

TEST(Engine, TokenBudgetStopsAndCarriesUnfinishedCompletions) {
  auto model = tiny_model(torch::kFloat32);
  Engine engine(*model, {.max_retention = 2});
  std::vector<Completion> purged;
  auto on_finish = [&](Completion c) {
    if (c.finish == Finish::kPurged) purged.push_back(c);
  };
  // A long tail: four short completions and two long ones.
  for (int i = 0; i < 4; ++i)
    engine.add(make_request("short" + std::to_string(i), 6, i, 8), {.on_finish = on_finish});
  for (int i = 0; i < 2; ++i)
    engine.add(make_request("long" + std::to_string(i), 6, 10 + i, 200), {.on_finish = on_finish});
  auto it1 = engine.run(30);
  EXPECT_TRUE(it1.budget_reached);
  EXPECT_GE(it1.tokens, 30);
  EXPECT_EQ(it1.finished.size(), 4u);  // the short ones; the long ones carry over
  EXPECT_TRUE(engine.has_work());
  EXPECT_EQ(engine.stats().running, 2);
  int64_t sum = 0;
  for (const auto& c : it1.finished) sum += static_cast<int64_t>(c.tokens.size());
  EXPECT_EQ(sum, it1.tokens);

  // Version 1: the long completions have spanned one version; with σ = 2 they continue.
  engine.update_weights([](Transformer&) {}, 1);
  EXPECT_TRUE(purged.empty());
  engine.add(make_request("fresh", 6, 20, 8), {.on_finish = on_finish});
  auto it2 = engine.run(8);
  EXPECT_TRUE(it2.budget_reached);
  ASSERT_EQ(it2.finished.size(), 1u);
  EXPECT_EQ(it2.finished[0].request_id, "fresh");
  // Version 2: they would span three versions, more than σ = 2: purged, and reported as such.
  engine.update_weights([](Transformer&) {}, 2);
  EXPECT_EQ(purged.size(), 2u);
  for (const auto& c : purged) {
    EXPECT_EQ(c.request_id.rfind("long", 0), 0u);
    std::set<int64_t> versions(c.versions.begin(), c.versions.end());
    EXPECT_EQ(versions, (std::set<int64_t>{0, 1}));
  }
  EXPECT_FALSE(engine.has_work());
  EXPECT_EQ(engine.stats().purged, 2);
}

TEST(Engine, HiddenRowsMatchFullForwardAndArriveOncePerToken) {
  auto model = tiny_model(torch::kFloat32);
  Engine engine(*model, {});
  std::mutex mu;
  std::map<int64_t, torch::Tensor> rows;
  int duplicates = 0;
  engine.set_hidden_sink([&](HiddenRow r) {
    std::lock_guard lock(mu);
    if (rows.count(r.token_index)) ++duplicates;
    rows[r.token_index] = r.row;
  });
  auto r = make_request("h", 9, 2, 25);
  r.hidden_states = true;
  Completion c;
  engine.add(r, {.on_finish = [&](Completion x) { c = x; }});
  for (auto& other : crowd(2)) engine.add(other);
  int steps = 0;
  while (engine.has_work()) {
    engine.step();
    // Swap in the same weights midway: the re-prefill must not resend delivered rows.
    if (++steps == 8) engine.update_weights([](Transformer&) {}, 0);
  }
  engine.flush_hidden();
  EXPECT_EQ(duplicates, 0);
  ASSERT_EQ(rows.size(), c.tokens.size() - 1);  // rows for completion tokens 0 .. N-2
  std::vector<int64_t> seq(c.prompt.begin(), c.prompt.end());
  seq.insert(seq.end(), c.tokens.begin(), c.tokens.end() - 1);
  torch::NoGradGuard no_grad;
  auto hidden = model->forward(torch::tensor(seq), {.logits = false, .hidden = true}).hidden;
  for (const auto& [j, row] : rows) {
    EXPECT_TRUE(torch::allclose(row, hidden[9 + j], 1e-4, 1e-4)) << "row " << j;
  }
}

TEST(Engine, AbortEndsEveryCompletionOfTheRequest) {
  auto model = tiny_model(torch::kFloat32);
  Engine engine(*model, {});
  std::vector<Completion> ended;
  auto r = make_request("a", 5, 1, 100);
  r.n = 2;
  engine.add(r, {.on_finish = [&](Completion c) { ended.push_back(c); }});
  engine.add(make_request("q", 5, 1, 100),
             {.on_finish = [&](Completion c) { ended.push_back(c); }});
  engine.step();
  engine.step();
  engine.abort("a");
  engine.abort("q");
  ASSERT_EQ(ended.size(), 3u);
  for (const auto& c : ended) EXPECT_EQ(c.finish, Finish::kAbort);
  EXPECT_FALSE(engine.has_work());
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  engine.add(r);  // the id is free again
}

TEST(Engine, StopEndsOneCompletionAndItsSiblingsRunOn) {
  auto model = tiny_model(torch::kFloat32);
  Engine engine(*model, {});
  std::map<std::pair<std::string, int64_t>, Completion> ended;
  auto record = [&](Completion c) { ended[{c.request_id, c.index}] = std::move(c); };
  auto r = make_request("s", 6, 4, 30);
  r.n = 3;
  engine.add(r, {.on_finish = record});
  // A shared prefill not yet split: stopping one of its completions splits it first.
  auto q = make_request("q", 8, 5, 30);
  q.n = 2;
  engine.add(q, {.on_finish = record});
  engine.stop("q", 1);
  ASSERT_EQ(ended.count({"q", 1}), 1u);
  EXPECT_EQ(ended.at({"q", 1}).finish, Finish::kStop);
  EXPECT_TRUE(ended.at({"q", 1}).tokens.empty());
  for (int i = 0; i < 5; ++i) engine.step();
  engine.stop("s", 1);
  engine.stop("s", 7);       // no such completion: ignored
  engine.stop("nobody", 0);  // no such request: ignored
  ASSERT_EQ(ended.count({"s", 1}), 1u);
  EXPECT_EQ(ended.at({"s", 1}).finish, Finish::kStop);
  EXPECT_EQ(ended.at({"s", 1}).tokens.size(), 5u);
  while (engine.has_work()) engine.step();
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  // The others ran to max_tokens exactly as they would have alone.
  for (int64_t i : {0, 2}) {
    auto alone = make_request("s", 6, 4, 30);
    alone.seed = 4 + static_cast<uint64_t>(i);
    const auto& c = ended.at({"s", i});
    EXPECT_EQ(c.finish, Finish::kLength);
    EXPECT_EQ(c.tokens, run_one(*model, alone).tokens) << "completion " << i;
  }
  auto alone = make_request("q", 8, 5, 30);
  EXPECT_EQ(ended.at({"q", 0}).tokens, run_one(*model, alone).tokens);
  EXPECT_EQ(ended.at({"q", 0}).finish, Finish::kLength);
  // The stopped completion's tokens are a prefix of what it would have sampled.
  auto one = make_request("s", 6, 4, 30);
  one.seed = 5;
  auto full = run_one(*model, one).tokens;
  const auto& stopped = ended.at({"s", 1}).tokens;
  EXPECT_TRUE(std::equal(stopped.begin(), stopped.end(), full.begin()));
}

TEST(Engine, InvalidRequestsAreRefusedWithTheReason) {
  auto model = tiny_model(torch::kFloat32);
  Engine engine(*model, {});
  auto expect_error = [&](Request r, const std::string& needle) {
    try {
      engine.add(r);
      ADD_FAILURE() << "accepted a request that should fail with: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto ok = make_request("v", 5, 1, 10);
  auto r = ok;
  r.prompt.clear();
  expect_error(r, "prompt is empty");
  r = ok;
  r.prompt[2] = 100000;
  expect_error(r, "outside the vocabulary");
  r = ok;
  r.max_tokens = 0;
  expect_error(r, "max_tokens");
  r = ok;
  r.max_tokens = model->config().max_position_embeddings;
  expect_error(r, "maximum context length");
  r = ok;
  r.sampling.top_p = 0;
  expect_error(r, "top_p");
  r = ok;
  r.n = 0;
  expect_error(r, "n must be");
  engine.add(ok);
  expect_error(ok, "already");
}

TEST(EngineLoop, ConcurrentClientsAreBatchedAndMatchAloneRuns) {
  auto model = tiny_model(torch::kFloat32);
  Engine engine(*model, {});
  EngineLoop loop(engine);
  std::vector<std::thread> clients;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Completion> results;
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back([&, i] {
      loop.submit(make_request("c" + std::to_string(i), 5 + 3 * i, i, 20),
                  {.on_finish = [&](Completion c) {
                    std::lock_guard lock(mu);
                    results[c.request_id] = c;
                    cv.notify_all();
                  }});
    });
  }
  for (auto& t : clients) t.join();
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return results.size() == 6; });
  }
  EXPECT_THROW(loop.submit(make_request("bad", 0, 0), {}), Error);
  loop.pause();
  int64_t version = -1;
  loop.with_engine([&](Engine& e) {
    e.update_weights([](Transformer&) {}, 5);
    version = e.version();
  });
  loop.resume();
  EXPECT_EQ(version, 5);
  EXPECT_EQ(loop.stats().completions_finished, 6);
  for (int i = 0; i < 6; ++i) {
    auto alone = run_one(*model, make_request("c" + std::to_string(i), 5 + 3 * i, i, 20));
    EXPECT_EQ(results.at("c" + std::to_string(i)).tokens, alone.tokens);
  }
}

}  // namespace
}  // namespace trellis::engine
