// libFuzzer target for the safetensors header parser (parse_safetensors_header, what
// SafetensorsFile::open runs on a mapped file): any input must either parse into tensors that lie
// inside the input, or fail with a trellis::Error. scripts/fuzz.sh builds and runs it;
// fuzz/corpus/safetensors/ holds the seeds.
#include <cstddef>
#include <cstdint>
#include <span>

#include "common/error.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trellis::model;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const SafetensorsHeader h = parse_safetensors_header(bytes, "fuzz input");
    for (const TensorInfo& t : h.tensors) {
      // What the loader relies on: the bytes are inside the file and match dtype and shape.
      if (t.begin > t.end || h.data_start + t.end > size) __builtin_trap();
      if (static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype) != t.nbytes()) __builtin_trap();
    }
  } catch (const trellis::Error&) {
  }
  return 0;
}
