// PLACEHOLDER: replaced by the real reverse_text environment.
#include "common/error.h"
#include "env/environments/environments.h"

namespace trellis::env {

std::unique_ptr<Environment> make_reverse_text_environment() {
  throw Error("the reverse_text environment is not built yet");
}

}  // namespace trellis::env
