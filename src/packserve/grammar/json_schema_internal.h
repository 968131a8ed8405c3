// json_schema_internal.h: the helpers that the JSON Schema compiler (json_schema.cc) shares
// with its integer-range generator (integer_range.h) and `pattern` translator
// (json_schema_pattern.h): errors in json_schema.h's format, regex fragments that can be
// concatenated as is, and hex digits. Internal to the grammar compilers: nothing outside
// json_schema*.cc, integer_range.cc and ebnf.cc (parse_hex) includes it.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "packserve/common/status.h"

namespace packserve::grammar::detail {

// "json_schema: POINTER: " (json_schema.h's error format; "(root)" for the empty pointer).
inline std::string prefix(const std::string& pointer) {
  return "json_schema: " + (pointer.empty() ? std::string("(root)") : pointer) + ": ";
}

// kInvalidArgument: malformed input at `pointer`.
inline Status bad(const std::string& pointer, const std::string& what) {
  return invalid_argument(prefix(pointer) + what);
}

// kUnimplemented: valid JSON Schema at `pointer` that the compiler does not support.
inline Status unsupported(const std::string& pointer, const std::string& what) {
  return unimplemented(prefix(pointer) + what);
}

// A fragment matching any of `alternatives` (duplicates dropped, order kept): the one left, or
// (?:a|b|...); it can be concatenated as is when each alternative can.
inline std::string alternation(std::vector<std::string> alternatives) {
  std::vector<std::string> unique;
  for (auto& a : alternatives) {
    if (std::find(unique.begin(), unique.end(), a) == unique.end()) unique.push_back(std::move(a));
  }
  if (unique.size() == 1) return unique[0];
  std::string out = "(?:";
  for (std::size_t i = 0; i < unique.size(); ++i) out += (i ? "|" : "") + unique[i];
  return out + ")";
}

// `atom` (one regex atom) repeated min..max times (max nullopt: unbounded); "" when max == 0.
inline std::string repeat(const std::string& atom, int64_t min, std::optional<int64_t> max) {
  if (max && *max == 0) return "";
  if (!max) {
    if (min == 0) return atom + "*";
    if (min == 1) return atom + "+";
    return atom + "{" + std::to_string(min) + ",}";
  }
  if (min == *max) return min == 1 ? atom : atom + "{" + std::to_string(min) + "}";
  if (min == 0 && *max == 1) return atom + "?";
  return atom + "{" + std::to_string(min) + "," + std::to_string(*max) + "}";
}

// The value of the `digits` hex digits at p[at] (either case); nullopt when p is too short or
// one of them is not a hex digit.
inline std::optional<uint32_t> parse_hex(std::string_view p, std::size_t at, std::size_t digits) {
  if (at + digits > p.size()) return std::nullopt;
  uint32_t v = 0;
  for (std::size_t k = 0; k < digits; ++k) {
    const char c = p[at + k];
    const int d = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
    if (d < 0) return std::nullopt;
    v = v * 16 + static_cast<uint32_t>(d);
  }
  return v;
}

}  // namespace packserve::grammar::detail
