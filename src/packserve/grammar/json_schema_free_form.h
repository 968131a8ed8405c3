// json_schema_free_form.h: the regexes (regex.h's dialect) of free-form JSON, for the schema
// compiler's schema `true` / `{}`, objects without `properties` and arrays without `items`
// (json_schema.h documents them to users). A free-form value of `levels` levels is any JSON
// value whose containers nest at most `levels` deep, the value itself counting as level 1
// when it is a container: levels 0 allows scalars only, 1 adds objects and arrays of scalars
// (`{"a":1}`, `[1,"x"]`), 2 adds `{"a":[1]}` and `[[1],{}]`, and so on. A deeper document is
// not in the language: where the bound is reached, the regex offers no `{` or `[`.
// Layout as the rest of the compiler: `ws` (a fragment, kJsonWs unless the caller asks for
// another: JsonSchemaOptions::whitespace) wherever JSON allows whitespace inside a container
// and none around the value; strings are any JSON string (kJsonStringChar: an
// unescaped code point or an escape), keys too; numbers are JSON numbers.
// Size: each level holds four copies of the level below (a container's first element and the
// ones after a comma, in objects and arrays), so the regex and the DFA grow about 4x a level.
// Internal to the schema compiler: json_schema.cc is its one caller.
// Errors: none. Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace packserve::grammar::detail {

// Any JSON string: "kJsonStringChar*" (the regex of schema {"type": "string"}).
std::string json_string_regex();

// Any JSON number (the regex of schema {"type": "number"}).
inline constexpr std::string_view kJsonNumberRegex =
    R"(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)";

// An object of any keys (JSON strings) whose values match `value` (a fragment that can be
// concatenated as is): \{W(?:KEY W:W value(?:W,W KEY W:W value)*W)?\} with W = ws.
std::string object_of(const std::string& value, std::string_view ws);

// An array whose elements match `value`: \[W(?:value(?:W,W value)*W)?\].
std::string array_of(const std::string& value, std::string_view ws);

// A free-form value of at most `levels` (>= 0) nested containers (see above).
std::string free_form_value(int levels, std::string_view ws);

}  // namespace packserve::grammar::detail
