// `trellis serve`: an OpenAI-compatible HTTP API over the rollout engine (engine/openai_server.h):
// /v1/models, /v1/completions, /v1/chat/completions, /healthz and /metrics. Concurrent clients are
// batched together. Runs until SIGINT or SIGTERM, then ends the requests in flight and exits 0.
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "cli/commands.h"
#include "common/error.h"
#include "common/logging.h"
#include "engine/engine.h"
#include "engine/engine_loop.h"
#include "engine/openai_server.h"
#include "model/checkpoint.h"
#include "model/prompting.h"

namespace trellis::cli {
namespace {

struct ServeFlags {
  std::string model, host = "127.0.0.1", served_model_name;
  int port = 8000;
  int64_t max_num_seqs = 256, kv_cache_mib = 4096, max_tokens_default = 256;
  int64_t max_body_bytes = int64_t{1} << 20;
  int http_threads = 64;
  bool eager = false;
  ComputeFlags compute;
};

// The directory's base name ("models/qwen3-tiny/" -> "qwen3-tiny").
std::string default_name(const std::string& dir) {
  auto path = std::filesystem::path(dir).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();
  return path.filename().string();
}

// SIGINT and SIGTERM write their number here; the main thread waits to read it.
int signal_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(signal_pipe[1], &byte, 1);
}

// Catches SIGINT and SIGTERM, even when inherited as ignored (a background job of a script), and
// blocks them in the threads started from here on so that they are not interrupted. A thread a
// library started earlier may still take one: the handler works on any thread.
sigset_t catch_stop_signals() {
  if (::pipe2(signal_pipe, O_CLOEXEC) != 0) throw Error("cannot create a pipe", "trellis serve");
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_RESETHAND;  // a second signal ends the process at once
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Unblocks the signals on this thread and returns the first one that arrives.
int wait_for_stop_signal(const sigset_t& signals) {
  pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
  unsigned char sig = 0;
  while (::read(signal_pipe[0], &sig, 1) != 1) {
    if (errno != EINTR) return SIGTERM;
  }
  return sig;
}

void run_serve(const ServeFlags& f) {
  const sigset_t signals = catch_stop_signals();

  auto compute = setup_compute(f.compute);
  auto transformer = model::load_transformer(f.model, compute);
  const auto p = model::Prompting::load(f.model, transformer->config());
  engine::EngineOptions options;
  options.max_num_seqs = f.max_num_seqs;
  options.kv_cache_mib = f.kv_cache_mib;
  options.vocab_limit = p.tok.vocab_size();
  options.decode_graphs = !f.eager;
  engine::Engine engine(*transformer, options);
  engine::EngineLoop loop(engine);

  engine::ServedModel served;
  served.name = f.served_model_name.empty() ? default_name(f.model) : f.served_model_name;
  served.context_length = transformer->config().max_position_embeddings;
  engine::ServerOptions server_options;
  server_options.host = f.host;
  server_options.port = f.port;
  server_options.max_body_bytes = static_cast<size_t>(f.max_body_bytes);
  server_options.default_max_tokens = f.max_tokens_default;
  server_options.http_threads = f.http_threads;
  engine::OpenAIServer server(loop, p, served, server_options);
  const int port = server.start();
  log::info("{} on {}, chat template: {}", f.model, compute.describe(),
            p.chat ? p.chat->format_name() : "none");
  std::fprintf(stderr,
               "serving %s on http://%s:%d (OpenAI API: /v1/completions, /v1/chat/completions)\n",
               served.name.c_str(), f.host.c_str(), port);
  std::fflush(stderr);

  const int sig = wait_for_stop_signal(signals);
  log::info("{}: shutting down", strsignal(sig));
  server.stop();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  static ServeFlags f;
  auto* cmd = app.add_subcommand(
      "serve", "Serve a model over an OpenAI-compatible HTTP API (completions and chat)");
  cmd->add_option("--model", f.model, "Hugging Face model directory")->required();
  cmd->add_option("--host", f.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", f.port, "port to listen on (0 = any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--served-model-name", f.served_model_name,
                  "the model id clients pass as \"model\" (default: the directory's name)");
  cmd->add_option("--max-num-seqs", f.max_num_seqs, "sequences decoded at once")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--kv-cache-mib", f.kv_cache_mib, "memory for the KV cache")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--max-tokens-default", f.max_tokens_default,
                  "max_tokens of requests that give none (capped by the context)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--max-body-bytes", f.max_body_bytes, "larger request bodies get HTTP 413")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  cmd->add_option("--http-threads", f.http_threads,
                  "connections served at once (each streaming client holds one)")
      ->capture_default_str()
      ->check(CLI::Range(2, 4096));
  cmd->add_flag("--eager", f.eager,
                "on a GPU, run every decode step op by op instead of replaying CUDA graphs");
  add_compute_flags(cmd, f.compute);
  cmd->callback([] { run_serve(f); });
}

}  // namespace trellis::cli
