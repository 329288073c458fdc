// peak_rss(): the process's peak resident memory in bytes, for tests that an input is refused (or
// served) without allocating what it asks for. CTest runs each test in a process of its own, so
// the growth of the peak across a test is that test's.
#pragma once

#include <sys/resource.h>

#include <cstdint>

namespace trellis::test {

inline int64_t peak_rss() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} * 1024;
}

}  // namespace trellis::test
