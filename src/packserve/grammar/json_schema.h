// json_schema.h: compiles a JSON schema (OpenAI / vLLM `response_format: {"type":
// "json_schema", ...}`) to a regex in grammar/regex.h's dialect, which Grammar::json_schema
// then matches like any other regex. The model writes the JSON token by token under it, so
// the regex describes one canonical layout of every allowed document:
//   - object properties in the order `properties` writes them; the optional ones may be
//     absent, with commas right in every combination; no other keys;
//   - whitespace (kJsonWs) wherever JSON allows it inside a container (after `{` and `[`,
//     around `:` and `,`, before `}` and `]`), at most kMaxWhitespaceRun bytes in a row, and
//     none before or after the top-level value;
//   - enum and const values in their compact serialization (`{"a":1}`, `1.5`, `"x"`).
// Every allowed document is valid against the schema; not every valid document is allowed
// (other key orders, "-0" in a positive range, `\u0041` for "A" in an enum, ...).
//
// Supported keywords (anything else is an error, never silently dropped):
//   type (one or a list); enum; const; anyOf; oneOf (read as anyOf); allOf of one schema;
//   $ref to "#/..." (a JSON pointer: #/$defs/X, #/definitions/X, nested; ~0 ~1 and %XX
//   escapes), not recursive; $defs / definitions (containers);
//   string: minLength, maxLength (JSON string characters: one unescaped code point or one
//     escape), pattern (see below), format date | time | date-time | uuid (RFC 3339 / 4122);
//   integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, or draft-4
//     booleans), any range within +-10^18, as a decimal digit-range regex;
//   number: minimum 0 (non-negative) or exclusiveMinimum 0 (positive) only;
//   object: properties, required, additionalProperties false (absent reads as false);
//   array: items (a schema; false; or a draft-4 list read as prefixItems), prefixItems,
//     minItems, maxItems (no items beyond prefixItems when items is false or absent).
// Annotations are ignored: title, description, default, examples, $schema, $id, $comment,
// deprecated, readOnly, writeOnly, strict, discriminator (a hint on an anyOf / oneOf that
// already constrains the value). A schema without `type` whose keywords belong to one type
// (properties -> object, items -> array, minLength -> string, minimum -> number) is read as
// that type, as outlines does.
//
// `pattern` is matched against the whole string value (a leading ^ and trailing $ are
// dropped; JSON Schema's unanchored search is not kept, as in outlines and xgrammar) and is
// rewritten so that the output stays valid JSON whose decoded value matches it: groups become
// (?:...); `"`, `\` and controls written in the pattern match their JSON escapes (`\"`, `\\`,
// `\n`, `\u0001`); `.`, classes and \s \S \D \W never produce them raw, but allow the escapes
// `\"` `\\` `\t` `\n` `\r` of those they hold (other controls are left out). The regex compiler
// checks the rest (its messages then give positions in the generated regex).
//
// Errors: "json_schema: POINTER: ..." where POINTER is the JSON pointer of the offending
// schema or keyword ("(root)" for the whole document); kInvalidArgument for malformed input
// (not JSON, a keyword of the wrong type, `required` naming an unknown property, minLength >
// maxLength, an empty enum, a range no value satisfies, nesting over kMaxSchemaDepth, a regex
// over kMaxRegexBytes); kUnimplemented for valid JSON Schema this compiler does not support
// (free-form objects and arrays, schema `true` / `{}`, recursive $ref, patternProperties, ...).
//
// Size: the regex becomes a DFA capped at kMaxDfaStates states (regex.h). A bounded
// repetition (minItems, maxItems, minLength, maxLength) is refused, with a message naming the
// keyword, when its count is over kMaxRepeatCount or count * (size of the repeated part, its
// own counted repetitions expanded: kJsonWs counts 20) is over kMaxRepeatAtoms: a rough
// pre-check calibrated on regex.h's NFA limit (an array of objects with two string
// properties fits about 80 items, of integers about 400, a string about 1000 characters).
// The DFA builder keeps the last word, over the whole regex. Optional properties of an
// object with no required one cost O(k^2) regex bytes for k properties.
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "packserve/common/status.h"
#include "packserve/grammar/grammar.h"

namespace packserve::grammar {

// Whitespace between JSON tokens inside containers.
inline constexpr std::string_view kJsonWs = "[ \\t\\n\\r]{0,20}";
static_assert(kMaxWhitespaceRun == 20, "kJsonWs spells kMaxWhitespaceRun out: update both");

// One character of a JSON string's content: an unescaped code point or an escape.
inline constexpr std::string_view kJsonStringChar =
    R"((?:[^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}))";

inline constexpr int kMaxSchemaDepth = 64;                 // nested schemas, $ref included
inline constexpr uint64_t kMaxRepeatAtoms = 20000;         // count * expanded size of repeated part
inline constexpr std::size_t kMaxRegexBytes = 256 * 1024;  // the generated regex
inline constexpr std::size_t kMaxWorkBytes = 16 * 1024 * 1024;  // all fragments built on the way

// The regex (regex.h's dialect) of the JSON documents `schema_json` allows. Errors above.
Result<std::string> json_schema_to_regex(std::string_view schema_json);

}  // namespace packserve::grammar
