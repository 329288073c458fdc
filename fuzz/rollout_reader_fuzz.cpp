// libFuzzer target for the rollout-file reader: any input must either decode or fail with a
// trellis::Error; crashes, sanitizer reports, leaks and runaway allocations are bugs.
// scripts/fuzz.sh builds and runs it; fuzz/corpus/rollout_reader/ holds the seeds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/error.h"
#include "rollout/rollout_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    trellis::rollout::decode_rollout_file(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz input");
  } catch (const trellis::Error&) {
  }
  return 0;
}
