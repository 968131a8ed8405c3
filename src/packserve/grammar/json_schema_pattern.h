// json_schema_pattern.h: translates a JSON Schema `pattern` (an ECMA-262 regex) into
// regex.h's dialect, as the content of a JSON string (the bytes between its quotes): every
// text the translation matches is valid JSON string content whose decoded value the pattern
// matches in full, as regex.h's dialect reads the pattern. Not every such text matches: a
// character JSON may write raw is matched raw only, never as \uXXXX, and of the escapes
// only those listed below. Rewrites:
//   - a leading ^ and a trailing unescaped $ are dropped: the pattern matches the whole
//     value, not a substring (as in outlines and xgrammar);
//   - groups, named ones (?<n>...) and (?P<n>...) included, become (?:...);
//   - `"`, `\` and the controls written in the pattern (raw or as escapes: \n, \x01, \u0022,
//     ...) match their JSON escapes (`\"`, `\\`, `\n`, `\u0001`);
//   - `.`, classes and \s \S \D \W never match those characters raw, but allow the escapes
//     `\"` `\\` `\t` `\n` `\r` of the ones they hold (other controls are left out);
//   - everything else (literals, quantifiers, \d \w, escaped punctuation, \x \u \U of other
//     characters) is copied as written, for the regex compiler to check (its messages then
//     give positions in the generated regex).
// Internal to the schema compiler: json_schema.cc is its one caller; json_schema.h
// documents `pattern` to users.
//
// Errors: "json_schema: POINTER: ..." with the caller's POINTER (that of the `pattern`
// keyword), most naming a byte offset into the pattern ("at byte N", counted after a dropped
// leading ^). kInvalidArgument for a malformed pattern: invalid UTF-8, a trailing backslash,
// a \x \u \U escape without its hex digits or naming a surrogate or a value past U+10FFFF,
// an unterminated [ or group name, a class range whose ends are reversed or not characters,
// unmatched parentheses, a class that matches no character a JSON string can hold.
// kUnimplemented for ECMA-262 that the translation does not support: lookaround and flag
// groups, \b outside a class, backreferences, \B, \p and other escaped letters or digits, ^
// or $ anywhere but the ends, \D \W \S inside a class that also holds a character JSON must
// escape.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "packserve/common/status.h"

namespace packserve::grammar::detail {

// The regex of a JSON string's content for schema `pattern` (see json_schema.h), without the
// quotes around it; `pointer` is the JSON pointer of the `pattern` keyword, for messages.
Result<std::string> translate_pattern(std::string_view p, const std::string& pointer);

}  // namespace packserve::grammar::detail
