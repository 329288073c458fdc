// OpenAIServer: an OpenAI-compatible HTTP API over an EngineLoop, so that any OpenAI client can use
// a Trellis model. Concurrent clients share the engine's continuous batching.
//
//   GET  /v1/models              the served model
//   POST /v1/completions         text or token-id prompts (or a batch of them)
//   POST /v1/chat/completions    messages rendered with the model's chat template (ChatML, Llama-3)
//   GET  /healthz                {"status": "ok"}
//   GET  /metrics                Prometheus text: requests, tokens, running/waiting, KV blocks
//
// Both generation endpoints take n, max_tokens, temperature, top_p, top_k, seed, stop (strings),
// stop_token_ids, logprobs, stream (server-sent events, `data: [DONE]` at the end) and
// return_token_ids, and answer with usage. Bad requests get OpenAI-style JSON errors with 4xx
// codes (openai_protocol.h); the server keeps serving. A streaming client that disconnects has its
// request aborted.
//
// The HTTP handlers run on a thread pool of their own. The server owns no engine state: the
// EngineLoop must outlive it (the Prompting is copied). start() and stop() are for one owning
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_loop.h"
#include "model/prompting.h"

namespace trellis::engine {

// What the server needs to know about the model besides the engine and its Prompting.
struct ServedModel {
  std::string name;            // the id clients pass as "model"
  int64_t context_length = 0;  // max_position_embeddings
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                          // 0 = any free port (port() tells which)
  size_t max_body_bytes = size_t{1} << 20;  // larger request bodies get 413
  int64_t default_max_tokens = 256;         // when a request gives none (capped by the context)
  int http_threads = 64;                    // connections served at once (each stream holds one)
};

class OpenAIServer {
 public:
  OpenAIServer(EngineLoop& loop, const model::Prompting& prompting, ServedModel model,
               ServerOptions options = {});
  ~OpenAIServer();  // stop()
  OpenAIServer(const OpenAIServer&) = delete;
  OpenAIServer& operator=(const OpenAIServer&) = delete;

  // Binds host:port and serves on a thread of its own; returns the port. Error naming the address
  // when it cannot bind.
  int start();
  // Ends the requests in flight (their clients get an error or the end of their stream), stops
  // accepting connections and joins the HTTP threads. Idempotent.
  void stop();
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trellis::engine
