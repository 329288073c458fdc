// error_of(f): the message of the trellis::Error that f throws ("" when it throws none), for tests
// that check what an error names.
#pragma once

#include <functional>
#include <string>

#include "common/error.h"

namespace trellis::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace trellis::test
