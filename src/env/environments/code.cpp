// PLACEHOLDER: replaced by the real code environment.
#include "common/error.h"
#include "env/environments/environments.h"

namespace trellis::env {

std::unique_ptr<Environment> make_code_environment(const SandboxLimits&) {
  throw Error("the code environment is not built yet");
}

}  // namespace trellis::env
