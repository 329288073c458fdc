// The orchestrator's privileged credentials (specs/protocol.md §2): nothing privileged is open
// because a setting was left empty. The trainer's token (publish versions, evict nodes, list nodes,
// submissions and accepted files), the validators' token (claim, download, decide) and the relays'
// token (read the allowlist of node IPs) are random secrets the orchestrator creates on its first
// start in files of mode 0600 (<secrets dir>/trainer.token, validator.token, relay.token);
// processes on the same machine read them from there, processes elsewhere get a copy of the file
// or the environment variable TRELLIS_TRAINER_TOKEN / TRELLIS_VALIDATOR_TOKEN /
// TRELLIS_RELAY_TOKEN. Tokens never go into config files, command lines or logs.
#pragma once

#include <filesystem>
#include <string>

#include "common/config.h"

namespace trellis::orchestrator {

enum class Role { kTrainer, kValidator, kRelay };

// "trainer", "validator" or "relay".
const char* role_name(Role role);
// The environment variable that holds `role`'s token: TRELLIS_TRAINER_TOKEN, ... .
const char* token_env_name(Role role);

// At least this many characters (a token from the environment may be chosen by a person).
inline constexpr size_t kMinTokenChars = 32;

// orchestrator.secrets_dir, or <orchestrator data dir>/secrets when it is "" (the data dir being
// orchestrator.data_dir, or `run_dir` when that is "").
std::filesystem::path secrets_dir(const Config& config, const std::filesystem::path& run_dir);

// The orchestrator's key, with which it keeps the ledger: `key_file` (orchestrator.key_file), or
// <data_dir>/keys/orchestrator.key when that is "".
std::filesystem::path keeper_key_file(const std::filesystem::path& key_file,
                                      const std::filesystem::path& data_dir);

// The server's token for `role`: the environment variable when set, else the token file, created
// with a fresh random token when absent. Error naming the file or variable when it is unreadable,
// accessible to other users, or shorter than kMinTokenChars.
std::string server_token(const std::filesystem::path& secrets_dir, Role role);

// The token a client of `role` sends: the environment variable when set, else the token file.
// Error saying how to provide it when neither exists.
std::string client_token(const Config& config, const std::filesystem::path& run_dir, Role role);

}  // namespace trellis::orchestrator
