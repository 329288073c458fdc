// The two clocks Trellis reads, in seconds.
#pragma once

#include <chrono>

namespace trellis {

// Seconds on a clock that never jumps (steady_clock), from an arbitrary zero: for durations,
// timeouts, rates and benchmarks within one process.
inline double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds since the Unix epoch (system_clock): for times other processes and machines read, or
// that outlive the process (heartbeats, leases, invites, records in a database).
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace trellis
