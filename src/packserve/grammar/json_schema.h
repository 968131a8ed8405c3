// json_schema.h: compiles a JSON schema (OpenAI / vLLM `response_format: {"type":
// "json_schema", ...}`) to a regex in grammar/regex.h's dialect, which Grammar::json_schema
// then matches like any other regex. The model writes the JSON token by token under it, so
// the regex describes one canonical layout of every allowed document:
//   - object properties in the order `properties` writes them; the optional ones may be
//     absent, with commas right in every combination; no other keys;
//   - whitespace (kJsonWs, or JsonSchemaOptions::whitespace) wherever JSON allows it inside
//     a container (after `{` and `[`, around `:` and `,`, before `}` and `]`), at most
//     kMaxWhitespaceRun bytes in a row, and none before or after the top-level value;
//   - enum and const values in their compact serialization (`{"a":1}`, `1.5`, `"x"`);
//   - free-form values (below) as any JSON with that whitespace, keys in any order.
// Every allowed document is valid against the schema; not every valid document is allowed
// (other key orders, "-0" in a positive range, `\u0041` for "A" in an enum, ...).
//
// Supported keywords (anything else is an error, never silently dropped):
//   type (one or a list); enum; const; anyOf; oneOf (read as anyOf); allOf of one schema;
//   $ref to "#/..." (a JSON pointer: #/$defs/X, #/definitions/X, nested; ~0 ~1 and %XX
//   escapes), not recursive; $defs / definitions (containers);
//   string: minLength, maxLength (JSON string characters: one unescaped code point or one
//     escape), pattern (see below), format (json_schema_format.h: date, time, date-time,
//     duration, uuid, ipv4, ipv6, hostname, email, uri, uri-reference);
//   integer: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, or draft-4
//     booleans), any range within +-10^18, as a decimal digit-range regex;
//   number: the same four bounds within +-10^18 and at most 32 fraction digits, read as the
//     decimal they are written as (0.1 is 0.1): a bounded number is written without exponent
//     (any fraction digits), except under a lone lower bound 0 (minimum or exclusiveMinimum),
//     where exponents keep the sign and stay allowed;
//   object: properties, required, additionalProperties. With properties: the listed members
//     in their order, then, when additionalProperties is true or a schema, any number of
//     other members (any JSON string key, a listed name included: the regex does not exclude
//     them; free-form values, or values of its schema); no other keys when it is false or
//     absent. Without properties: any keys with free-form values when additionalProperties is
//     absent or true; values of its schema when it is one (a map); `{}` only when it is false;
//     required must then be empty;
//   array: items (a schema; false; true; or a draft-4 list read as prefixItems), prefixItems,
//     minItems, maxItems (no items beyond prefixItems when items is false or absent; free-form
//     items when it is true, and when both are absent).
//   Schema `true`, and one without a constraining keyword (`{}`, annotations only), is a
//   free-form value.
// Annotations are ignored: title, description, default, examples, $schema, $id, $comment,
// deprecated, readOnly, writeOnly, strict, discriminator (a hint on an anyOf / oneOf that
// already constrains the value). A schema without `type` whose keywords belong to one type
// (properties -> object, items -> array, minLength -> string, minimum -> number) is read as
// that type, as outlines does.
//
// Free-form values (schema `true` or `{}`, the values of an object without properties, the
// items of an array without items, other members beside properties): any JSON value, with
// the whitespace above, keys in any order. Grammar::json_schema compiles each to the one byte
// kFreeFormHole (JsonSchemaOptions::free_form_holes) and runs the JSON recognizer of
// json_object there (json_automaton.h: containers nest up to kMaxJsonDepth levels, strings
// valid UTF-8 without lone surrogates). Two cases keep the regex form below instead: a
// whitespace pattern of the request's (the recognizer knows runs of JSON whitespace only),
// and a hole the DFA cannot tell from a neighbour (a state that may start both a free-form
// value and another branch on the same byte, as anyOf [{"type":"string"}, {}] does).
// The regex form (json_schema_to_regex without holes) spells the value out at most
// kMaxFreeFormDepth levels deep, the value itself counting as level 1 when it is an object or
// array: with 2, `{"a":[1]}` and `[[],{}]` are allowed, `{"a":[[1]]}` is not. Strings are any
// JSON string (escapes included: the regex of {"type": "string"}), keys too; numbers any JSON
// number. An object without properties (additionalProperties absent or true) or an array
// without items is the first of those levels, its values free-form with one level fewer:
// {"type": "object"} allows `{"a":{"b":1}}`, not `{"a":{"b":{}}}`. `items` or
// `additionalProperties` that is `true` or a schema without constraints reads as absent. Only
// the free-form value's own containers count: one at /properties/meta still has all its
// levels, however deep the schema puts it, and a map's values have those of their schema. A
// document deeper than the bound is not generated: where the bound is reached the regex
// allows no `{` or `[`, so the model writes a scalar there (or closes the container).
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
// (required without properties, recursive $ref, patternProperties, ...).
//
// Size: the regex becomes a DFA capped at kMaxDfaStates states (regex.h). A bounded
// repetition (minItems, maxItems, minLength, maxLength) is refused, with a message naming the
// keyword, when its count is over kMaxRepeatCount or count * (size of the repeated part, its
// own counted repetitions expanded: kJsonWs counts 20) is over kMaxRepeatAtoms: a rough
// pre-check calibrated on regex.h's NFA limit (an array of objects with two string
// properties fits about 80 items, of integers about 400, a string about 1000 characters).
// The DFA builder keeps the last word, over the whole regex. Optional properties of an
// object with no required one cost O(k^2) regex bytes for k properties. A free-form value
// costs the regex one byte as a hole; spelt out, about 4.3 KB of regex and 2,200 DFA states
// ({"type": "object"}: 2.2 KB, 1,100), and each level more would cost 4x: about ten spelt-out
// free-form values fit in one schema (regex.h's NFA cap), and maxItems on spelt-out
// free-form items is refused past 37.
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

inline constexpr int kMaxSchemaDepth = 64;          // nested schemas, $ref included
inline constexpr int kMaxFreeFormDepth = 2;         // containers in a spelt-out free-form value
inline constexpr uint64_t kMaxRepeatAtoms = 20000;  // count * expanded size of repeated part
inline constexpr std::size_t kMaxRegexBytes = 256 * 1024;       // the generated regex
inline constexpr std::size_t kMaxWorkBytes = 16 * 1024 * 1024;  // all fragments built on the way

// The byte that stands for a whole free-form value in a regex compiled with
// JsonSchemaOptions::free_form_holes, and that regex fragment. JSON text never holds a raw
// U+0001, so no other part of a schema's regex matches it.
inline constexpr uint8_t kFreeFormHole = 0x01;
inline constexpr std::string_view kFreeFormHoleRegex = "\\x01";

// The regex (regex.h's dialect) of the JSON documents `schema_json` allows. Errors above.
struct JsonSchemaOptions {
  // The regex (this dialect) of the whitespace allowed wherever JSON allows it inside a
  // container; "" allows none (vLLM's disable_any_whitespace); another pattern is vLLM's
  // guided_whitespace_pattern (its errors are the regex compiler's, reported by the caller).
  std::string whitespace = std::string(kJsonWs);
  // Every free-form value is the one byte kFreeFormHole instead of its kMaxFreeFormDepth
  // regex: Grammar::json_schema's matcher then runs a JSON recognizer there (any depth up to
  // kMaxJsonDepth; grammar_json_schema.cc). The regex alone is not the schema's language.
  bool free_form_holes = false;
};
Result<std::string> json_schema_to_regex(std::string_view schema_json,
                                         const JsonSchemaOptions& options = {});

}  // namespace packserve::grammar
