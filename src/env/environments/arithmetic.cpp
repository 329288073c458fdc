// PLACEHOLDER: replaced by the real arithmetic environment.
#include "common/error.h"
#include "env/environments/environments.h"

namespace trellis::env {

std::unique_ptr<Environment> make_arithmetic_environment() {
  throw Error("the arithmetic environment is not built yet");
}

}  // namespace trellis::env
