// PLACEHOLDER: replaced by the real maze environment.
#include "common/error.h"
#include "env/environments/environments.h"

namespace trellis::env {

std::unique_ptr<Environment> make_maze_environment() {
  throw Error("the maze environment is not built yet");
}

}  // namespace trellis::env
