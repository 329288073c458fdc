// message_of: what to show a user, a log or a peer of any exception.
#pragma once

#include <exception>
#include <string>

namespace trellis {

// The exception's message without the C++ backtrace that libtorch's c10::Error appends
// ("\nException raised from <function> at <file>:<line> (most recent call first):\nframe #0: ..."):
// thirty lines of library addresses that help nobody reading an error, and that would tell a
// remote client where the libraries are mapped.
inline std::string message_of(const std::exception& e) {
  std::string message = e.what();
  const auto backtrace = message.find("\nException raised from ");
  if (backtrace != std::string::npos) message.resize(backtrace);
  return message;
}

}  // namespace trellis
