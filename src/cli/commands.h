// The subcommands of `trellis`. Each add_* registers one command group on the app; the command
// bodies stay thin and call into the libraries under src/.
#pragma once

#include <filesystem>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/sampler.h"
#include "model/compute.h"

namespace trellis::cli {

void add_config_commands(CLI::App& app);
void add_model_commands(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_bench_commands(CLI::App& app);
void add_env_commands(CLI::App& app);
void add_eval_commands(CLI::App& app);  // eval and filter
void add_sft_command(CLI::App& app);
void add_rl_command(CLI::App& app);
void add_rollouts_commands(CLI::App& app);  // rollouts inspect
void add_orchestrator_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_pipeline_commands(CLI::App& app);   // trainer and infer
void add_run_commands(CLI::App& app);        // run and quickstart
void add_shardcast_commands(CLI::App& app);  // relay, shardcast publish / fetch
void add_ledger_commands(CLI::App& app);     // ledger verify / show / contributions
void add_discovery_command(CLI::App& app);   // discovery
void add_node_command(CLI::App& app);        // node (the agent)
void add_validate_commands(CLI::App& app);   // validate, toploc verify

// --device / --dtype / --threads, shared by every command that runs the model.
struct ComputeFlags {
  std::string device = "cpu";
  std::string dtype = "auto";
  int threads = 0;
};
void add_compute_flags(CLI::App* cmd, ComputeFlags& flags);
// --temperature / --top-p / --top-k, shared by every command that samples.
void add_sampling_flags(CLI::App* cmd, engine::SamplingParams& sampling);
// Applies the thread count and resolves the device and dtype (Error if unavailable).
model::Compute setup_compute(const ComputeFlags& flags);

// This program's own path, symlinks resolved: what the commands that start more of themselves
// (run, node, the trainer's ranks) execute.
std::filesystem::path self_binary();

}  // namespace trellis::cli
