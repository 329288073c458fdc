// The GiNaC lock (see ginac_lock.h).
#include "env/verifiers/ginac_lock.h"

namespace trellis::env {

std::mutex& ginac_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace trellis::env
