// PLACEHOLDER: replaced by the real math environment.
#include "common/error.h"
#include "env/environments/environments.h"

namespace trellis::env {

std::unique_ptr<Environment> make_math_environment() {
  throw Error("the math environment is not built yet");
}

}  // namespace trellis::env
