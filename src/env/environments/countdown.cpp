// PLACEHOLDER: replaced by the real countdown environment.
#include "common/error.h"
#include "env/environments/environments.h"

namespace trellis::env {

std::unique_ptr<Environment> make_countdown_environment() {
  throw Error("the countdown environment is not built yet");
}

}  // namespace trellis::env
