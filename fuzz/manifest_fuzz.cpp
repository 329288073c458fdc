// libFuzzer target for SHARDCAST manifests (what a client fetches from a relay): any input must
// either parse into a manifest that survives a round trip through to_json, or fail with a
// trellis::Error. scripts/fuzz.sh builds and runs it; fuzz/corpus/manifest/ holds the seeds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"
#include "shardcast/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trellis::shardcast;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Manifest m;
  try {
    m = parse_manifest(text, "manifest.json");
  } catch (const trellis::Error&) {
    return 0;
  }
  // A manifest that parsed is one this code could have written: it reads back the same.
  const Manifest back = manifest_from_json(to_json(m), "round trip");
  if (back.versions.size() != m.versions.size()) __builtin_trap();
  const std::string key(64, 'a');
  for (size_t i = 0; i < m.versions.size(); ++i) {
    if (back.versions[i].signing_message() != m.versions[i].signing_message()) __builtin_trap();
    (void)m.versions[i].signed_by(key);
    (void)m.versions[i].signed_by(m.versions[i].signer);
  }
  if (!m.versions.empty()) (void)m.find(m.newest()->version);
  return 0;
}
