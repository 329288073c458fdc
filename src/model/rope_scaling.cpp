#include "model/rope_scaling.h"

#include <cmath>
#include <set>

#include <fmt/format.h>

namespace trellis::model {

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::Default:
      return "default";
    case RopeType::Linear:
      return "linear";
    case RopeType::Llama3:
      return "llama3";
    case RopeType::Yarn:
      return "yarn";
  }
  return "?";
}

namespace {

RopeType parse_type(const Json& j, const std::string& where) {
  // Older configs spell the key "type", newer ones "rope_type"; some write both.
  std::optional<std::string> name;
  for (const char* key : {"rope_type", "type"}) {
    if (!j.contains(key)) continue;
    auto v = json_required<std::string>(j, key, where);
    if (name && *name != v) {
      fail(where, "has 'type' = \"{}\" and 'rope_type' = \"{}\"; keep one", v, *name);
    }
    name = v;
  }
  if (!name) fail(where, "has no 'rope_type'");
  if (*name == "default") return RopeType::Default;
  if (*name == "linear") return RopeType::Linear;
  if (*name == "llama3") return RopeType::Llama3;
  if (*name == "yarn") return RopeType::Yarn;
  fail(where,
       "type '{}' is not supported (supported: default, linear, llama3, yarn); "
       "remove rope_scaling for plain RoPE",
       *name);
}

double positive(const Json& j, const char* key, const std::string& where) {
  const auto v = json_required<double>(j, key, where);
  if (!(std::isfinite(v) && v > 0)) fail(where, "'{}' must be positive, got {}", key, v);
  return v;
}

std::optional<double> optional_positive(const Json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  return positive(j, key, where);
}

}  // namespace

RopeScaling RopeScaling::from_json(const Json& j, const std::string& where) {
  RopeScaling s;
  if (j.is_null()) return s;
  if (!j.is_object()) fail(where, "must be an object or null");
  s.type = parse_type(j, where);

  std::set<std::string> known = {"rope_type", "type"};
  auto allow = [&](std::initializer_list<const char*> keys) {
    known.insert(keys.begin(), keys.end());
  };
  if (j.contains("partial_rotary_factor")) {
    allow({"partial_rotary_factor"});
    if (json_required<double>(j, "partial_rotary_factor", where) != 1.0) {
      fail(where, "'partial_rotary_factor' other than 1 is not supported");
    }
  }
  switch (s.type) {
    case RopeType::Default:
      break;
    case RopeType::Linear:
      allow({"factor"});
      s.factor = positive(j, "factor", where);
      break;
    case RopeType::Llama3:
      allow({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"});
      s.factor = positive(j, "factor", where);
      s.low_freq_factor = positive(j, "low_freq_factor", where);
      s.high_freq_factor = positive(j, "high_freq_factor", where);
      s.original_max_position_embeddings =
          json_required<int64_t>(j, "original_max_position_embeddings", where);
      if (!(s.high_freq_factor > s.low_freq_factor)) {
        fail(where, "'high_freq_factor' ({}) must exceed 'low_freq_factor' ({})",
             s.high_freq_factor, s.low_freq_factor);
      }
      break;
    case RopeType::Yarn:
      allow({"factor", "original_max_position_embeddings", "attention_factor", "beta_fast",
             "beta_slow", "mscale", "mscale_all_dim", "truncate"});
      s.factor = positive(j, "factor", where);
      if (j.contains("original_max_position_embeddings") &&
          !j["original_max_position_embeddings"].is_null()) {
        s.original_max_position_embeddings =
            json_required<int64_t>(j, "original_max_position_embeddings", where);
      }
      s.attention_factor = optional_positive(j, "attention_factor", where);
      s.beta_fast = optional_positive(j, "beta_fast", where);
      s.beta_slow = optional_positive(j, "beta_slow", where);
      s.mscale = optional_positive(j, "mscale", where);
      s.mscale_all_dim = optional_positive(j, "mscale_all_dim", where);
      if (j.contains("truncate") && !j["truncate"].is_null()) {
        s.truncate = json_required<bool>(j, "truncate", where);
      }
      if (s.beta_fast.value_or(32) <= s.beta_slow.value_or(1)) {
        fail(where, "'beta_fast' ({}) must exceed 'beta_slow' ({})", s.beta_fast.value_or(32),
             s.beta_slow.value_or(1));
      }
      break;
  }
  if (s.original_max_position_embeddings && *s.original_max_position_embeddings <= 0) {
    fail(where, "'original_max_position_embeddings' must be positive");
  }
  for (const auto& [key, value] : j.items()) {
    if (!known.contains(key)) {
      fail(where, "key '{}' is not understood for rope_type '{}'", key, rope_type_name(s.type));
    }
  }
  return s;
}

Json RopeScaling::to_json() const {
  if (type == RopeType::Default) return nullptr;
  Json j = {{"rope_type", rope_type_name(type)}, {"factor", factor}};
  if (original_max_position_embeddings) {
    j["original_max_position_embeddings"] = *original_max_position_embeddings;
  }
  if (type == RopeType::Llama3) {
    j["low_freq_factor"] = low_freq_factor;
    j["high_freq_factor"] = high_freq_factor;
  }
  auto put = [&](const char* key, const auto& v) {
    if (v) j[key] = *v;
  };
  put("attention_factor", attention_factor);
  put("beta_fast", beta_fast);
  put("beta_slow", beta_slow);
  put("mscale", mscale);
  put("mscale_all_dim", mscale_all_dim);
  put("truncate", truncate);
  return j;
}

std::string RopeScaling::describe() const {
  if (type == RopeType::Default) return "none";
  std::string out = fmt::format("{}, factor {}", rope_type_name(type), factor);
  if (original_max_position_embeddings) {
    out += fmt::format(", original context {}", *original_max_position_embeddings);
  }
  return out;
}

}  // namespace trellis::model
