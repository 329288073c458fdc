// PLACEHOLDER: replaced by the real sudoku environment.
#include "common/error.h"
#include "env/environments/environments.h"

namespace trellis::env {

std::unique_ptr<Environment> make_sudoku_environment() {
  throw Error("the sudoku environment is not built yet");
}

}  // namespace trellis::env
