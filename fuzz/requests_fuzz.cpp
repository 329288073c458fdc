// libFuzzer target for the request bodies the services read into structures of their own: the
// first byte picks the reader, the rest is the body. `trellis serve`'s OpenAI completions and chat
// requests (ApiError 400 is the refusal), an invite a node agent receives, the metadata a node
// publishes to discovery, and a task of a dataset (each refused with a trellis::Error). Any other
// exception, a crash, a sanitizer report, a leak or a time-out is a bug; what a reader accepts
// must read back the same from what Trellis writes of it (to_json). scripts/fuzz.sh builds and
// runs it; fuzz/corpus/requests/ holds the seeds.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/json.h"
#include "discovery/node_metadata.h"
#include "engine/openai_protocol.h"
#include "env/task.h"
#include "orchestrator/invite.h"

namespace {

using trellis::Json;

const std::string kAddress(64, 'a');

[[noreturn]] void bug(const char* what) {
  std::fprintf(stderr, "requests_fuzz: %s\n", what);
  std::abort();
}

void openai(const std::string& body, bool chat) {
  try {
    const Json j = trellis::engine::parse_body(body);
    if (chat) {
      (void)trellis::engine::parse_chat(j);
    } else {
      (void)trellis::engine::parse_completions(j);
    }
  } catch (const trellis::engine::ApiError& e) {
    if (e.status() != 400) bug("a refusal that is not 400");
  }
}

// A body `read` accepts must read back the same from what `write` makes of it.
template <typename Read, typename Write>
void round_trip(const Json& j, const char* what, Read read, Write write) {
  decltype(read(j)) parsed;
  try {
    parsed = read(j);
  } catch (const trellis::Error&) {
    return;
  }
  const Json written = write(parsed);
  if (write(read(written)) != written) bug(what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int reader = data[0] % 5;
  if (reader < 2) {
    openai(body, reader == 1);
    return 0;
  }
  Json j;
  try {
    j = trellis::parse_json(body, "request body");
  } catch (const trellis::Error&) {
    return 0;
  }
  namespace orchestrator = trellis::orchestrator;
  namespace discovery = trellis::discovery;
  if (reader == 2) {
    round_trip(
        j, "an invite does not read back the same",
        [](const Json& x) { return orchestrator::parse_invite(x, "invite"); },
        [](const orchestrator::Invite& i) { return orchestrator::to_json(i); });
  } else if (reader == 3) {
    round_trip(
        j, "node metadata does not read back the same",
        [](const Json& x) { return discovery::parse_node_metadata(x, kAddress, "metadata"); },
        [](const discovery::NodeMetadata& m) { return discovery::to_json(m); });
  } else {
    round_trip(
        j, "a task does not read back the same",
        [](const Json& x) { return trellis::env::task_from_json(x, "task"); },
        [](const trellis::env::Task& t) { return trellis::env::task_to_json(t); });
  }
  return 0;
}
