#include "common/json.h"

#include "common/files.h"

namespace trellis {

Json parse_json(std::string_view text, const std::string& where) {
  try {
    return Json::parse(text, [&](int depth, Json::parse_event_t event, Json&) {
      if ((event == Json::parse_event_t::object_start ||
           event == Json::parse_event_t::array_start) &&
          depth >= kMaxJsonDepth) {
        fail(where, "invalid JSON: nested deeper than {} levels", kMaxJsonDepth);
      }
      return true;
    });
  } catch (const nlohmann::json::parse_error& e) {
    fail(where, "invalid JSON at byte {}", e.byte);
  } catch (const nlohmann::json::out_of_range&) {  // a number such as 1e400
    fail(where, "invalid JSON: a number is too large for a double");
  }
}

Json read_json_file(const std::string& path) { return parse_json(read_file(path), path); }

std::string json_text(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool json_integer_in(const Json& j, int64_t lo, int64_t hi) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    return hi >= 0 && v <= static_cast<uint64_t>(hi) && (lo <= 0 || v >= static_cast<uint64_t>(lo));
  }
  return j.is_number_integer() && j.get<int64_t>() >= lo && j.get<int64_t>() <= hi;
}

std::string json_safe_text(std::string_view text) {
  return Json::parse(json_text(Json(std::string(text)))).get<std::string>();
}

}  // namespace trellis
