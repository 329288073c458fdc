#include "orchestrator/credentials.h"

#include <cstdlib>

#include "common/error.h"
#include "common/hashing.h"
#include "common/identity.h"

namespace trellis::orchestrator {
const char* token_env_name(Role role) {
  switch (role) {
    case Role::kTrainer:
      return "TRELLIS_TRAINER_TOKEN";
    case Role::kValidator:
      return "TRELLIS_VALIDATOR_TOKEN";
    case Role::kRelay:
      return "TRELLIS_RELAY_TOKEN";
  }
  return "";
}

namespace {

std::filesystem::path token_file(const std::filesystem::path& dir, Role role) {
  return dir / (std::string(role_name(role)) + ".token");
}

std::string checked(std::string token, const std::string& where) {
  if (token.size() < kMinTokenChars) {
    fail(where,
         "a token needs at least {} characters, this one has {} (generate one with `head -c "
         "32 /dev/urandom | xxd -p -c 64`)",
         kMinTokenChars, token.size());
  }
  return token;
}

// The environment's token for `role`, or "" when the variable is unset.
std::string env_token(Role role) {
  const char* v = std::getenv(token_env_name(role));
  return v && *v ? checked(v, token_env_name(role)) : "";
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::kTrainer:
      return "trainer";
    case Role::kValidator:
      return "validator";
    case Role::kRelay:
      return "relay";
  }
  return "";
}

std::filesystem::path keeper_key_file(const std::filesystem::path& key_file,
                                      const std::filesystem::path& data_dir) {
  return key_file.empty() ? data_dir / "keys" / "orchestrator.key" : key_file;
}

std::filesystem::path secrets_dir(const Config& config, const std::filesystem::path& run_dir) {
  const std::string dir = config.get<std::string>("orchestrator.secrets_dir");
  if (!dir.empty()) return dir;
  const std::string data_dir = config.get<std::string>("orchestrator.data_dir");
  return (data_dir.empty() ? run_dir : std::filesystem::path(data_dir)) / "secrets";
}

std::string server_token(const std::filesystem::path& dir, Role role) {
  if (std::string t = env_token(role); !t.empty()) return t;
  const auto file = token_file(dir, role);
  return checked(load_or_create_secret(file, [] { return random_hex(32); }), file.string());
}

std::string client_token(const Config& config, const std::filesystem::path& run_dir, Role role) {
  if (std::string t = env_token(role); !t.empty()) return t;
  const auto file = token_file(secrets_dir(config, run_dir), role);
  // A client never creates the file: where it is missing, it says how to provide it.
  const auto missing = [&]() -> std::string {
    fail(file.string(),
         "no {} token: the orchestrator creates this file on its first start; on another machine "
         "copy it here (mode 0600), point orchestrator.secrets_dir at its folder, or set {}",
         role_name(role), token_env_name(role));
  };
  return checked(load_or_create_secret(file, missing), file.string());
}

}  // namespace trellis::orchestrator
