// Error: the one exception type Trellis throws for bad input, bad files and failed operations.
//
// Its message reads "<what> (<where>)", where `where` names the file, field, request or peer at
// fault, so that the CLI can print `error: <message>` and a user can fix the problem without a
// debugger. Programming errors (broken invariants) are not Errors; they may abort.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace trellis {

class Error : public std::runtime_error {
 public:
  Error(const std::string& what, const std::string& where)
      : std::runtime_error(where.empty() ? what : what + " (" + where + ")") {}
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// fail("bad {} here", x).at(path) reads badly; instead: throw Error(fmt::format(...), where).
template <typename... Args>
[[noreturn]] void fail(const std::string& where, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...), where);
}

}  // namespace trellis
