// json_schema_format.h: the string `format`s the JSON Schema compiler (json_schema.cc)
// supports, as regexes (regex.h's dialect) of a JSON string's content. Every character they
// allow is printable ASCII other than '"' and '\', so the content needs no escapes.
//   date, time, date-time  RFC 3339 (full-date, full-time; 'T' and 'Z' in either case)
//   duration               RFC 3339 appendix A (ISO 8601): P1Y2M3DT4H5M6S, P3W, PT0S, ...
//   uuid                   RFC 4122's 8-4-4-4-12 hex digits, either case
//   ipv4                   dotted quad, each 0-255 without leading zeros
//   ipv6                   RFC 4291 text: 8 groups, one "::" for a run of zero groups, an
//                          IPv4 tail for the last two groups; no zone id
//   hostname               RFC 1123 labels of 1-63 letters, digits and '-' (not first or
//                          last), dot-separated; the 253-byte total is not enforced
//   email                  a dot-atom local part (RFC 5322 atext, no quoted form) '@' a
//                          hostname of at least two labels (no address literal)
//   uri, uri-reference     RFC 3986 characters and %XX escapes; uri starts with a scheme and ':'
// Internal to the schema compiler. Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace packserve::grammar::detail {

// The regex of a string of `format` (without the quotes), or nullopt when it is not supported.
std::optional<std::string> string_format_regex(std::string_view format);

// The supported names, comma-separated, for error messages.
std::string_view supported_string_formats();

}  // namespace packserve::grammar::detail
