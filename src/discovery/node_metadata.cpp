#include "discovery/node_metadata.h"

#include <fmt/format.h>

#include "common/error.h"

namespace trellis::discovery {
namespace {

constexpr size_t kMaxTextBytes = 256;
constexpr size_t kMaxGpus = 64;

std::string bounded_text(const Json& obj, const char* key, size_t max_bytes,
                         const std::string& where) {
  const auto s = json_required<std::string>(obj, key, where);
  if (s.size() > max_bytes) fail(where, "field '{}' is longer than {} bytes", key, max_bytes);
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      fail(where, "field '{}' holds a control character", key);
    }
  }
  return s;
}

int64_t bounded_count(const Json& obj, const char* key, int64_t hi, const std::string& where) {
  const auto v = json_required<int64_t>(obj, key, where);
  if (v < 0 || v > hi) fail(where, "field '{}' = {} is not in [0, {}]", key, v, hi);
  return v;
}

}  // namespace

bool is_node_address(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Json to_json(const NodeMetadata& m) {
  Json gpus = Json::array();
  for (const Gpu& g : m.hardware.gpus)
    gpus.push_back({{"name", g.name}, {"memory_mib", g.memory_mib}});
  return {{"address", m.address},
          {"endpoint", m.endpoint},
          {"software_version", m.software_version},
          {"hardware",
           {{"cpu_model", m.hardware.cpu_model},
            {"cpu_cores", m.hardware.cpu_cores},
            {"memory_mib", m.hardware.memory_mib},
            {"disk_mib", m.hardware.disk_mib},
            {"bandwidth_mbps", m.hardware.bandwidth_mbps},
            {"gpus", gpus}}}};
}

NodeMetadata parse_node_metadata(const Json& j, const std::string& address,
                                 const std::string& where) {
  if (!j.is_object()) fail(where, "node metadata must be a JSON object");
  NodeMetadata m;
  m.address = address;
  if (j.contains("address") && j["address"] != address) {
    fail(where, "field 'address' names another node than the request");
  }
  m.endpoint = bounded_text(j, "endpoint", kMaxTextBytes, where);
  if (!m.endpoint.starts_with("http://") && !m.endpoint.starts_with("https://")) {
    fail(where, "field 'endpoint' must be an http:// or https:// URL, got '{}'", m.endpoint);
  }
  if (m.endpoint.find_first_of(" \t") != std::string::npos) {
    fail(where, "field 'endpoint' holds whitespace");
  }
  m.software_version = bounded_text(j, "software_version", 64, where);
  if (!j.contains("hardware") || !j["hardware"].is_object()) {
    fail(where, "field 'hardware' must be an object");
  }
  const Json& h = j["hardware"];
  const std::string hw = where + ": hardware";
  m.hardware.cpu_model = bounded_text(h, "cpu_model", 128, hw);
  m.hardware.cpu_cores = bounded_count(h, "cpu_cores", 1 << 16, hw);
  m.hardware.memory_mib = bounded_count(h, "memory_mib", int64_t{1} << 40, hw);
  m.hardware.disk_mib = bounded_count(h, "disk_mib", int64_t{1} << 50, hw);
  m.hardware.bandwidth_mbps = bounded_count(h, "bandwidth_mbps", int64_t{1} << 30, hw);
  if (!h.contains("gpus") || !h["gpus"].is_array()) fail(hw, "field 'gpus' must be an array");
  if (h["gpus"].size() > kMaxGpus) fail(hw, "more than {} GPUs", kMaxGpus);
  for (size_t i = 0; i < h["gpus"].size(); ++i) {
    const std::string gw = fmt::format("{}: gpus[{}]", hw, i);
    const Json& g = h["gpus"][i];
    if (!g.is_object()) fail(gw, "must be an object");
    m.hardware.gpus.push_back(
        {bounded_text(g, "name", 128, gw), bounded_count(g, "memory_mib", int64_t{1} << 30, gw)});
  }
  return m;
}

}  // namespace trellis::discovery
