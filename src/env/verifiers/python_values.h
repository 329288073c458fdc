// Plain Python values as the code environment's test harness reports them, and Python's `==` on
// them, computed here in the parent process: the untrusted program only encodes what its function
// returned, so an object whose __eq__ always answers True has nothing to answer.
//
// The encoding (JSON; written by the harness in the sandbox after `type(x) is int`-style checks,
// which no subclass or __class__ override passes): null = None, true/false = bool, a JSON string =
// str, {"int": "-12"} (decimal digits, any size), {"float": "1.5"} (Python's repr: also "inf",
// "-inf", "nan"), {"list": [...]}, {"tuple": [...]}, {"set": [...]} (set or frozenset) and
// {"dict": [[key, value], ...]}. Anything else is malformed.
//
// Equality follows Python's for these types: 1 == 1.0 == True, a list never equals a tuple, set
// and frozenset compare as sets, dicts ignore order. One difference: NaN equals NaN here.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace trellis::env {

// Deeper nesting than this (in JSON brackets) is malformed: bounds the parser's recursion.
constexpr int kMaxPythonValueDepth = 256;

// The canonical form of an encoded value: two values are equal (as above) exactly when their
// canonical forms are. nullopt, with `error` saying what is wrong, when `encoded` is malformed.
// Linear-logarithmic in the size of the text; never throws.
std::optional<std::string> canonical_python_value(std::string_view encoded, std::string& error);

}  // namespace trellis::env
