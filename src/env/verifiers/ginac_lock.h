// The one lock for GiNaC in this process. GiNaC and CLN are not thread-safe: expressions and
// numbers share reference-counted objects (cached small numbers, flyweights) whose counts are not
// atomic. Every entry point that builds, evaluates or destroys GiNaC objects holds this lock while
// they live: compare_math_answers, and the countdown and arithmetic environments.
#pragma once

#include <mutex>

namespace trellis::env {

std::mutex& ginac_mutex();

}  // namespace trellis::env
