#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "common/error.h"
#include "common/logging.h"
#include "engine/batch_sampler.h"
#include "engine/decode_graphs.h"
#include "engine/kv_cache.h"
#include "model/paged_attention.h"

namespace trellis::engine {

using model::kBlockSize;
using model::PagedBatch;

const char* finish_name(Finish finish) {
  switch (finish) {
    case Finish::kNone:
      return "";
    case Finish::kStop:
      return "stop";
    case Finish::kLength:
      return "length";
    case Finish::kAbort:
      return "abort";
    case Finish::kPurged:
      return "purged";
  }
  return "";
}

namespace {

constexpr int64_t kMaxTopLogprobs = 20;

// What the completions of one request share.
struct Group {
  Request request;
  Callbacks callbacks;
  int64_t unfinished = 0;
};

// One completion in flight. Its token stream is prompt + generated tokens; the first `cached`
// of them have keys and values in the cache, the rest are fed by the next forwards.
struct Seq {
  std::shared_ptr<Group> group;
  Completion c;
  std::vector<int32_t> blocks;
  int64_t cached = 0;
  int64_t fork = 1;         // > 1: the shared prefill of a request's n completions, not yet split
  int64_t hidden_sent = 0;  // completion tokens whose hidden rows have been delivered
  int64_t admitted = 0;     // admission order: preemption takes the newest

  int64_t length() const { return static_cast<int64_t>(c.prompt.size() + c.tokens.size()); }
  int64_t pending() const { return length() - cached; }
  int32_t token_at(int64_t i) const {
    const int64_t P = static_cast<int64_t>(c.prompt.size());
    return i < P ? c.prompt[i] : c.tokens[i - P];
  }
};

// Distinct policy versions among a completion's tokens (versions never decrease).
int64_t versions_spanned(const std::vector<int64_t>& versions) {
  int64_t n = 0;
  for (size_t i = 0; i < versions.size(); ++i) n += (i == 0 || versions[i] != versions[i - 1]);
  return n;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

struct Engine::Impl {
  model::Transformer& model;
  EngineOptions opt;
  int64_t context, vocab_limit;
  bool sample_in_tensor_ops;  // opt.sample_in_tensor_ops, or a model off the CPU
  std::unique_ptr<PagedKVCache> cache;
  std::unique_ptr<DecodeGraphs> graphs;  // null: every step op by op
  int64_t version = 0, admissions = 0;
  std::deque<std::unique_ptr<Seq>> waiting;
  std::vector<std::unique_ptr<Seq>> running;
  std::unordered_set<std::string> ids;
  EngineStats stats;
  bool collecting = false;
  std::vector<Completion> collected;

  // Hidden rows go through a queue to a worker thread that calls the sink.
  std::function<void(HiddenRow)> sink;
  std::mutex hidden_mu;
  std::condition_variable hidden_cv;
  std::deque<HiddenRow> hidden_queue;
  int64_t hidden_busy = 0;
  bool hidden_stop = false;
  std::thread hidden_thread;

  Impl(model::Transformer& m, EngineOptions o) : model(m), opt(o) {
    const auto& cfg = model.config();
    context = cfg.max_position_embeddings;
    vocab_limit = opt.vocab_limit > 0 ? std::min(opt.vocab_limit, cfg.vocab_size) : cfg.vocab_size;
    sample_in_tensor_ops = opt.sample_in_tensor_ops || !model.compute().device.is_cpu();
    if (opt.max_num_seqs <= 0 || opt.max_batch_tokens <= 0 || opt.kv_cache_tokens < 0 ||
        opt.kv_cache_mib <= 0) {
      throw Error("max_num_seqs, max_batch_tokens and kv_cache_mib must be positive",
                  "engine options");
    }
    int64_t tokens = opt.kv_cache_tokens;
    if (tokens == 0) {
      const int64_t dtype_bytes = model.compute().dtype == torch::kFloat32 ? 4 : 2;
      const int64_t per_token =
          2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * dtype_bytes;
      tokens =
          std::min(opt.kv_cache_mib * (int64_t{1} << 20) / per_token, opt.max_num_seqs * context);
    }
    cache = std::make_unique<PagedKVCache>(cfg, std::max<int64_t>(1, tokens / kBlockSize),
                                           kBlockSize, model.compute());
    if (opt.decode_graphs && !opt.fp8 && DecodeGraphs::available(model) &&
        cache->num_blocks() > DecodeGraphs::kPaddingBlocks) {
      graphs = std::make_unique<DecodeGraphs>(model, *cache, opt.max_num_seqs);
    }
    stats.kv_blocks_total = usable_blocks();
    log::debug("engine: KV cache of {} blocks x {} tokens, up to {} sequences", cache->num_blocks(),
               kBlockSize, opt.max_num_seqs);
  }

  ~Impl() {
    {
      std::lock_guard lock(hidden_mu);
      hidden_stop = true;
    }
    hidden_cv.notify_all();
    if (hidden_thread.joinable()) hidden_thread.join();
  }

  // Takes whatever is queued at once: a lock and a wake-up per forward, not per row.
  void hidden_worker() {
    for (;;) {
      std::deque<HiddenRow> rows;
      {
        std::unique_lock lock(hidden_mu);
        hidden_cv.wait(lock, [&] { return hidden_stop || !hidden_queue.empty(); });
        if (hidden_queue.empty()) return;
        rows.swap(hidden_queue);
        hidden_busy = static_cast<int64_t>(rows.size());
      }
      for (auto& row : rows) sink(std::move(row));
      {
        std::lock_guard lock(hidden_mu);
        hidden_busy = 0;
      }
      hidden_cv.notify_all();
    }
  }

  // The cache's blocks that sequences may hold (the decode graphs keep one for padding).
  int64_t usable_blocks() const {
    return cache->num_blocks() - (graphs ? DecodeGraphs::kPaddingBlocks : 0);
  }

  int64_t running_weight() const {
    int64_t n = 0;
    for (const auto& s : running) n += s->fork;
    return n;
  }

  void release_blocks(Seq& s) {
    for (int32_t b : s.blocks) cache->release(b);
    s.blocks.clear();
    s.cached = 0;
  }

  // Splits a shared prefill into its n completions (sharing its blocks); returns them all.
  std::vector<Seq*> split(std::unique_ptr<Seq>& s, std::vector<std::unique_ptr<Seq>>& out) {
    std::vector<Seq*> all{s.get()};
    for (int64_t i = 1; i < s->fork; ++i) {
      auto child = std::make_unique<Seq>(*s);
      child->fork = 1;
      child->c.index = i;
      child->c.seed = s->group->request.seed + static_cast<uint64_t>(i);
      child->admitted = ++admissions;
      for (int32_t b : child->blocks) cache->retain(b);
      all.push_back(child.get());
      out.push_back(std::move(child));
    }
    s->fork = 1;
    return all;
  }

  void finish(Seq& s, Finish why) {
    release_blocks(s);
    s.c.finish = why;
    ++stats.completions_finished;
    if (why == Finish::kPurged) ++stats.purged;
    auto& g = *s.group;
    if (--g.unfinished == 0) ids.erase(g.request.id);
    if (collecting && (why == Finish::kStop || why == Finish::kLength)) collected.push_back(s.c);
    if (g.callbacks.on_finish) g.callbacks.on_finish(std::move(s.c));
  }

  // Ends every completion of `s` (all n if it is an unsplit prefill).
  void finish_all(std::unique_ptr<Seq>& s, Finish why) {
    std::vector<std::unique_ptr<Seq>> children;
    for (Seq* c : split(s, children)) finish(*c, why);
  }

  // Ends, with `end`, every sequence of `queue` that `pick` selects, and drops it from the queue.
  template <typename Queue, typename Pick, typename End>
  static void end_if(Queue& queue, const Pick& pick, const End& end) {
    for (auto& s : queue) {
      if (pick(s)) {
        end(s);
        s.reset();
      }
    }
    std::erase(queue, nullptr);
  }

  void preempt(std::unique_ptr<Seq> s) {
    release_blocks(*s);
    ++stats.preemptions;
    waiting.push_front(std::move(s));
  }

  // Makes room for `s` to cache `n` more tokens: new blocks, and a private copy of a shared block
  // it would write into. False when the cache is out of blocks.
  bool reserve(Seq& s, int64_t n) {
    const int64_t have = static_cast<int64_t>(s.blocks.size());
    const int64_t need = cache->blocks_for(s.cached + n) - have;
    const bool cow = s.cached % kBlockSize != 0 && cache->refs(s.blocks[s.cached / kBlockSize]) > 1;
    if (cache->free_blocks() < need + (cow ? 1 : 0)) return false;
    if (cow) {
      const int64_t i = s.cached / kBlockSize;
      s.blocks[i] = cache->copy_on_write(s.blocks[i], i > 0 ? s.blocks[i - 1] : -1);
    }
    for (int64_t i = 0; i < need; ++i) {
      s.blocks.push_back(cache->allocate(s.blocks.empty() ? -1 : s.blocks.back()));
    }
    return true;
  }

  struct Entry {
    Seq* seq;
    int64_t start, count;
    int64_t sample_row = -1;                          // row of the output to sample from
    std::vector<std::pair<int64_t, int64_t>> hidden;  // (completion token index, output row)
  };

  // Chooses this step's work: running completions first (oldest first; preempting the newest when
  // blocks run out), then waiting ones in arrival order while sequences, blocks and tokens last.
  std::vector<Entry> schedule() {
    std::vector<Entry> batch;
    int64_t budget = opt.max_batch_tokens;
    std::stable_sort(running.begin(), running.end(),
                     [](const auto& a, const auto& b) { return a->admitted < b->admitted; });
    for (size_t i = 0; i < running.size() && budget > 0;) {
      Seq& s = *running[i];
      const int64_t n = std::min(s.pending(), budget);
      if (reserve(s, n)) {
        batch.push_back({&s, s.cached, n, -1, {}});
        budget -= n;
        ++i;
        continue;
      }
      // Out of blocks: the newest running completion goes back to the queue (maybe this one).
      auto victim = std::move(running.back());
      running.pop_back();
      std::erase_if(batch, [&](const Entry& e) { return e.seq == victim.get(); });
      preempt(std::move(victim));
    }
    int64_t weight = running_weight();
    while (!waiting.empty() && budget > 0) {
      Seq& s = *waiting.front();
      if (weight + s.fork > opt.max_num_seqs) break;
      // Admit only with room for the whole stream plus one token, so prefills rarely preempt.
      if (cache->free_blocks() < cache->blocks_for(s.length() + 1)) break;
      const int64_t n = std::min(s.pending(), budget);
      reserve(s, n);
      s.admitted = ++admissions;
      batch.push_back({&s, s.cached, n, -1, {}});
      budget -= n;
      weight += s.fork;
      running.push_back(std::move(waiting.front()));
      waiting.pop_front();
    }
    return batch;
  }

  // Queues one forward's hidden rows for the sink's thread, under one lock and one wake-up.
  void deliver_hidden(std::vector<HiddenRow> rows) {
    if (rows.empty()) return;
    {
      std::lock_guard lock(hidden_mu);
      for (auto& r : rows) hidden_queue.push_back(std::move(r));
    }
    hidden_cv.notify_one();
  }

  // One completion's next token and the row of this step's logits it comes from.
  struct Draw {
    Seq* seq;
    int64_t row;
  };

  // Samples every draw from logits [rows, vocab] by the verifiable rule: row by row on the CPU,
  // or in tensor ops on the logits' device (engine/batch_sampler), so that only the tokens leave
  // it. The two give the same tokens (tests/engine/engine_test.cpp).
  std::vector<Sample> sample_draws(const torch::Tensor& logits, const std::vector<Draw>& draws) {
    std::vector<SamplingParams> params;
    std::vector<double> u;
    std::vector<int64_t> rows;
    for (const Draw& d : draws) {
      params.push_back(d.seq->group->request.sampling);
      u.push_back(sampling_uniform(d.seq->c.seed, d.seq->length()));
      rows.push_back(d.row);
    }
    if (sample_in_tensor_ops) {
      auto index = torch::tensor(rows, torch::kInt64).to(logits.device());
      return sample_batch(logits.index_select(0, index).narrow(1, 0, vocab_limit), params, u);
    }
    std::vector<Sample> out;
    for (size_t i = 0; i < draws.size(); ++i) {
      out.push_back(sample_token(logits[rows[i]].data_ptr<float>(), vocab_limit, params[i], u[i]));
    }
    return out;
  }

  // Appends a sampled token (and its top log-probs, from row `row` of logits, when asked for) to
  // its completion.
  void append(Seq& s, const Sample& smp, const torch::Tensor& logits, int64_t row) {
    const Request& r = s.group->request;
    s.c.tokens.push_back(smp.token);
    s.c.logprobs.push_back(smp.logprob);
    s.c.versions.push_back(version);
    if (r.top_logprobs > 0) {
      const auto cpu_row = logits[row].to(torch::kCPU).contiguous();
      s.c.top_logprobs.push_back(top_logprobs(cpu_row.data_ptr<float>(), vocab_limit,
                                              r.sampling.temperature, r.top_logprobs));
    }
    ++stats.tokens_generated;
    if (s.group->callbacks.on_token) s.group->callbacks.on_token({s.c, smp.token, smp.logprob});
  }

  // A step's forward: the logits (and hidden rows) of the tokens in `rows`. When each sequence
  // feeds one token and every token is a row (a step of decodes alone), a decode graph replays it.
  model::ForwardOutput forward(const PagedBatch& pb, const torch::Tensor& tokens,
                               const std::vector<int64_t>& rows, bool hidden) {
    const int64_t T = tokens.numel();
    if (graphs && pb.block_tables.size(0) == T && static_cast<int64_t>(rows.size()) == T &&
        T <= graphs->max_tokens()) {
      try {
        return graphs->run(tokens, pb.positions, pb.slots, pb.block_tables);
      } catch (const Error& e) {
        log::warn("engine: decode graphs off, every step runs op by op from now on: {}", e.what());
        graphs.reset();
      }
    }
    return forward_on_cache(model, *cache, tokens, pb,
                            {.logits = true,
                             .hidden = hidden,
                             .rows = torch::tensor(rows, torch::kInt64),
                             .fp8 = opt.fp8});
  }

  StepStats step() {
    const auto t0 = std::chrono::steady_clock::now();
    StepStats st;
    auto batch = schedule();
    if (batch.empty()) return st;

    // The mixed token stream of this step and where each token's key and value go.
    int64_t T = 0;
    for (const auto& e : batch) T += e.count;
    auto tokens = torch::empty({T}, torch::kInt64), positions = torch::empty({T}, torch::kInt64);
    auto slots = torch::empty({T}, torch::kInt64), token_seq = torch::empty({T}, torch::kInt64);
    size_t max_blocks = 1;
    for (const auto& e : batch) max_blocks = std::max(max_blocks, e.seq->blocks.size());
    auto tables = torch::zeros(
        {static_cast<int64_t>(batch.size()), static_cast<int64_t>(max_blocks)}, torch::kInt32);
    int64_t *tp = tokens.data_ptr<int64_t>(), *pp = positions.data_ptr<int64_t>();
    int64_t *sp = slots.data_ptr<int64_t>(), *qp = token_seq.data_ptr<int64_t>();
    int32_t* bp = tables.data_ptr<int32_t>();
    std::vector<int64_t> rows;
    int64_t t = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      auto& e = batch[i];
      Seq& s = *e.seq;
      std::copy(s.blocks.begin(), s.blocks.end(), bp + i * max_blocks);
      const int64_t P = static_cast<int64_t>(s.c.prompt.size());
      const bool hidden = s.group->request.hidden_states;
      for (int64_t j = e.start; j < e.start + e.count; ++j, ++t) {
        tp[t] = s.token_at(j);
        pp[t] = j;
        sp[t] = static_cast<int64_t>(s.blocks[j / kBlockSize]) * kBlockSize + j % kBlockSize;
        qp[t] = static_cast<int64_t>(i);
        if (hidden && j >= P && j - P >= s.hidden_sent) {
          e.hidden.emplace_back(j - P, static_cast<int64_t>(rows.size()));
          rows.push_back(t);
        }
      }
      if (e.start + e.count == s.length()) {
        if (!e.hidden.empty() && rows.back() == t - 1) {
          e.sample_row = e.hidden.back().second;
        } else {
          e.sample_row = static_cast<int64_t>(rows.size());
          rows.push_back(t - 1);
        }
      }
      if (s.cached < P) {
        st.prefill_tokens += e.count;
      } else {
        st.decode_tokens += e.count;
      }
    }

    bool any_hidden = false;
    for (const auto& e : batch) any_hidden |= !e.hidden.empty();
    torch::NoGradGuard no_grad;
    const auto out = forward({slots, positions, token_seq, tables}, tokens, rows, any_hidden);
    auto logits = sample_in_tensor_ops ? out.logits : out.logits.to(torch::kCPU).contiguous();
    // Hidden rows leave the device without waiting for it (into pinned memory; a copy on the
    // CPU), so that the host queues the sampling meanwhile; they go to the sink once the device
    // is past the copy.
    torch::Tensor hidden_rows;
    if (any_hidden) {
      hidden_rows = out.hidden.to(torch::kCPU, out.hidden.scalar_type(), /*non_blocking=*/true,
                                  /*copy=*/true);
    }

    std::vector<HiddenRow> delivered;
    for (auto& e : batch) {
      Seq& s = *e.seq;
      s.cached += e.count;
      for (auto [j, row] : e.hidden) {
        delivered.push_back({s.group->request.id, s.c.index, j, version, hidden_rows[row]});
        s.hidden_sent = j + 1;
      }
    }
    stats.prompt_tokens += st.prefill_tokens;

    // Sample, then retire finished completions at once.
    std::unordered_map<const Seq*, int64_t> sample_rows;
    for (const auto& e : batch) {
      if (e.sample_row >= 0) sample_rows[e.seq] = e.sample_row;
    }
    // A shared prefill's row is sampled once for each of its completions.
    std::vector<std::unique_ptr<Seq>> born;
    std::vector<Draw> draws;
    for (auto& owner : running) {
      auto it = sample_rows.find(owner.get());
      if (it == sample_rows.end()) continue;
      for (Seq* s : split(owner, born)) draws.push_back({s, it->second});
    }
    for (auto& b : born) running.push_back(std::move(b));
    const auto samples = sample_draws(logits, draws);  // waits for the device: tokens come back
    if (!delivered.empty() && draws.empty()) model::synchronize(model.compute());
    deliver_hidden(std::move(delivered));
    std::unordered_set<const Seq*> just_sampled;
    for (size_t i = 0; i < draws.size(); ++i) {
      append(*draws[i].seq, samples[i], logits, draws[i].row);
      just_sampled.insert(draws[i].seq);
    }
    for (auto& s : running) {
      if (!just_sampled.count(s.get())) continue;
      const Request& r = s->group->request;
      const int32_t last = s->c.tokens.back();
      Finish why = Finish::kNone;
      if (std::find(r.stop_ids.begin(), r.stop_ids.end(), last) != r.stop_ids.end()) {
        why = Finish::kStop;
      } else if (static_cast<int64_t>(s->c.tokens.size()) >= r.max_tokens ||
                 s->length() >= context) {
        why = Finish::kLength;
      }
      if (why != Finish::kNone) {
        finish(*s, why);
        s.reset();
        ++st.finished;
      }
    }
    std::erase(running, nullptr);
    st.seconds = seconds_since(t0);
    ++stats.steps;
    stats.busy_seconds += st.seconds;
    return st;
  }

  void validate(const Request& r) const {
    const std::string where = "request '" + r.id + "'";
    if (r.prompt.empty()) throw Error("the prompt is empty", where);
    const int64_t V = model.config().vocab_size;
    for (size_t i = 0; i < r.prompt.size(); ++i) {
      if (r.prompt[i] < 0 || r.prompt[i] >= V) {
        throw Error(fmt::format("prompt token {} at index {} is outside the vocabulary (size {})",
                                r.prompt[i], i, V),
                    where);
      }
    }
    if (r.n < 1 || r.n > opt.max_num_seqs) {
      throw Error(fmt::format("n must be in [1, {}] (max_num_seqs), got {}", opt.max_num_seqs, r.n),
                  where);
    }
    if (r.max_tokens < 1) {
      throw Error(fmt::format("max_tokens must be at least 1, got {}", r.max_tokens), where);
    }
    const int64_t P = static_cast<int64_t>(r.prompt.size());
    if (P + r.max_tokens > context) {
      throw Error(fmt::format("this model's maximum context length is {} tokens, but {} were "
                              "requested ({} in the prompt, {} for the completion)",
                              context, P + r.max_tokens, P, r.max_tokens),
                  where);
    }
    if (cache->blocks_for(P + r.max_tokens + 1) > usable_blocks()) {
      throw Error(fmt::format("{} tokens do not fit the KV cache of {} tokens (raise "
                              "engine.kv_cache_tokens)",
                              P + r.max_tokens, usable_blocks() * kBlockSize),
                  where);
    }
    validate_sampling(r.sampling, where);
    if (r.top_logprobs < 0 || r.top_logprobs > kMaxTopLogprobs) {
      throw Error(
          fmt::format("top_logprobs must be in [0, {}], got {}", kMaxTopLogprobs, r.top_logprobs),
          where);
    }
    if (r.hidden_states && !sink) throw Error("hidden states requested but no sink is set", where);
  }
};

Engine::Engine(model::Transformer& model, EngineOptions options)
    : impl_(std::make_unique<Impl>(model, options)) {}

Engine::~Engine() = default;

void Engine::validate(const Request& request) const { impl_->validate(request); }

void Engine::add(Request request, Callbacks callbacks) {
  auto& m = *impl_;
  m.validate(request);
  if (m.ids.count(request.id)) {
    throw Error("a request with this id is already in the engine", "request '" + request.id + "'");
  }
  auto group = std::make_shared<Group>();
  group->unfinished = request.n;
  auto s = std::make_unique<Seq>();
  s->group = group;
  s->fork = request.n;
  s->c.request_id = request.id;
  s->c.seed = request.seed;
  s->c.prompt = request.prompt;
  m.ids.insert(request.id);
  group->request = std::move(request);
  group->callbacks = std::move(callbacks);
  m.waiting.push_back(std::move(s));
  ++m.stats.requests;
}

void Engine::abort(const std::string& request_id) {
  auto& m = *impl_;
  if (!m.ids.count(request_id)) return;
  auto matches = [&](const std::unique_ptr<Seq>& s) {
    return s && s->group->request.id == request_id;
  };
  auto end = [&](std::unique_ptr<Seq>& s) { m.finish_all(s, Finish::kAbort); };
  m.end_if(m.running, matches, end);
  m.end_if(m.waiting, matches, end);
}

void Engine::stop(const std::string& request_id, int64_t index) {
  auto& m = *impl_;
  if (!m.ids.count(request_id)) return;
  auto covers = [&](const std::unique_ptr<Seq>& s) {
    return s && s->group->request.id == request_id && index >= s->c.index &&
           index < s->c.index + s->fork;
  };
  // A shared prefill not yet split holds all n completions: split it first (the new completions
  // join the same queue), then end the one asked for.
  for (size_t i = 0; i < m.running.size(); ++i) {
    if (covers(m.running[i]) && m.running[i]->fork > 1) {
      std::vector<std::unique_ptr<Seq>> children;
      m.split(m.running[i], children);
      for (auto& c : children) m.running.push_back(std::move(c));
      break;
    }
  }
  for (size_t i = 0; i < m.waiting.size(); ++i) {
    if (covers(m.waiting[i]) && m.waiting[i]->fork > 1) {
      std::vector<std::unique_ptr<Seq>> children;
      m.split(m.waiting[i], children);
      m.waiting.insert(m.waiting.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                       std::make_move_iterator(children.begin()),
                       std::make_move_iterator(children.end()));
      break;
    }
  }
  auto end = [&](std::unique_ptr<Seq>& s) { m.finish(*s, Finish::kStop); };
  m.end_if(m.running, covers, end);
  m.end_if(m.waiting, covers, end);
}

void Engine::abort_all() {
  auto& m = *impl_;
  for (auto& s : m.running) m.finish_all(s, Finish::kAbort);
  m.running.clear();
  for (auto& s : m.waiting) m.finish_all(s, Finish::kAbort);
  m.waiting.clear();
}

StepStats Engine::step() { return impl_->step(); }

bool Engine::has_work() const { return !impl_->running.empty() || !impl_->waiting.empty(); }

IterationResult Engine::run(int64_t token_budget) {
  auto& m = *impl_;
  IterationResult result;
  m.collecting = true;
  m.collected.clear();
  while (has_work()) {
    step();
    result.tokens = 0;
    for (const auto& c : m.collected) result.tokens += static_cast<int64_t>(c.tokens.size());
    if (token_budget > 0 && result.tokens >= token_budget) {
      result.budget_reached = true;
      break;
    }
  }
  m.collecting = false;
  result.finished = std::move(m.collected);
  m.collected.clear();
  return result;
}

void Engine::update_weights(const std::function<void(model::Transformer&)>& load, int64_t version) {
  auto& m = *impl_;
  {
    torch::NoGradGuard no_grad;
    load(m.model);
  }
  m.version = version;
  m.stats.version = version;
  // Every cached key and value belongs to the old weights: in-flight completions re-prefill,
  // oldest first, ahead of requests that have not started.
  std::stable_sort(m.running.begin(), m.running.end(),
                   [](const auto& a, const auto& b) { return a->admitted < b->admitted; });
  for (auto it = m.running.rbegin(); it != m.running.rend(); ++it) {
    m.release_blocks(**it);
    m.waiting.push_front(std::move(*it));
  }
  m.running.clear();
  if (m.opt.max_retention > 0) {
    for (auto& s : m.waiting) {
      if (!s->c.tokens.empty() && versions_spanned(s->c.versions) + 1 > m.opt.max_retention) {
        m.finish_all(s, Finish::kPurged);
        s.reset();
      }
    }
    std::erase(m.waiting, nullptr);
  }
}

int64_t Engine::version() const { return impl_->version; }

void Engine::set_hidden_sink(std::function<void(HiddenRow)> sink) {
  auto& m = *impl_;
  if (m.hidden_thread.joinable()) throw Error("the hidden-state sink is already set");
  m.sink = std::move(sink);
  m.hidden_thread = std::thread([&m] { m.hidden_worker(); });
}

void Engine::flush_hidden() {
  auto& m = *impl_;
  std::unique_lock lock(m.hidden_mu);
  m.hidden_cv.wait(lock, [&] { return m.hidden_queue.empty() && m.hidden_busy == 0; });
}

EngineStats Engine::stats() const {
  auto& m = *impl_;
  EngineStats s = m.stats;
  s.running = m.running_weight();
  s.waiting = 0;
  for (const auto& w : m.waiting) s.waiting += w->fork;
  s.kv_blocks_used = m.usable_blocks() - m.cache->free_blocks();
  s.decode_graphs = m.graphs ? m.graphs->recordings() : 0;
  return s;
}

const EngineOptions& Engine::options() const { return impl_->opt; }
const model::Transformer& Engine::model() const { return impl_->model; }

}  // namespace trellis::engine
