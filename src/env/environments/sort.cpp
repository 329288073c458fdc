// PLACEHOLDER: replaced by the real sort environment.
#include "common/error.h"
#include "env/environments/environments.h"

namespace trellis::env {

std::unique_ptr<Environment> make_sort_environment() {
  throw Error("the sort environment is not built yet");
}

}  // namespace trellis::env
