// PLACEHOLDER: replaced by the real knights_knaves environment.
#include "common/error.h"
#include "env/environments/environments.h"

namespace trellis::env {

std::unique_ptr<Environment> make_knights_knaves_environment() {
  throw Error("the knights_knaves environment is not built yet");
}

}  // namespace trellis::env
