// json_schema.cc: see json_schema.h. One recursive pass over the schema (class Compiler)
// builds each node's regex from its children's; every fragment it returns can be
// concatenated as is (a top-level alternation is wrapped in (?:...)). Integer and number
// ranges as digit-range regexes are integer_range.h's, the rewrite of `pattern` into JSON-safe
// form is json_schema_pattern.h's, free-form JSON (objects of any keys, arrays of any values)
// is json_schema_free_form.h's, string formats json_schema_format.h's, and the helpers they
// share with this file json_schema_internal.h's.
#include "packserve/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "packserve/common/json_depth.h"
#include "packserve/grammar/integer_range.h"
#include "packserve/grammar/json_schema_format.h"
#include "packserve/grammar/json_schema_free_form.h"
#include "packserve/grammar/json_schema_internal.h"
#include "packserve/grammar/json_schema_pattern.h"
#include "packserve/grammar/regex.h"

namespace packserve::grammar {
namespace {

using detail::alternation;
using detail::bad;
using detail::compare;
using detail::DecimalBound;
using detail::free_form_value;
using detail::integer_range;
using detail::json_string_regex;
using detail::kJsonNumberRegex;
using detail::kMaxIntegerBound;
using detail::number_range;
using detail::object_of;
using detail::parse_hex;
using detail::repeat;
using detail::string_format_regex;
using detail::supported_string_formats;
using detail::translate_pattern;
using detail::unsupported;

using Json = nlohmann::ordered_json;

// The most fraction digits a number bound may have.
constexpr int64_t kMaxBoundFractionDigits = 32;
constexpr std::string_view kFraction = R"((?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)";
constexpr std::string_view kPositiveNumber =
    R"((?:[1-9][0-9]*(?:\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)(?:[eE][+-]?[0-9]+)?)";

constexpr std::string_view kAnnotations[] = {
    "title",    "description", "default",  "examples",  "$schema", "$id",
    "$comment", "deprecated",  "readOnly", "writeOnly", "strict",  "discriminator"};
constexpr std::string_view kStringKeywords[] = {"minLength", "maxLength", "pattern", "format"};
constexpr std::string_view kNumberKeywords[] = {"minimum", "maximum", "exclusiveMinimum",
                                                "exclusiveMaximum"};
constexpr std::string_view kObjectKeywords[] = {"properties", "required", "additionalProperties"};
constexpr std::string_view kArrayKeywords[] = {"items", "prefixItems", "minItems", "maxItems"};
constexpr std::string_view kStructuralKeywords[] = {"type",  "enum",  "const", "anyOf",
                                                    "oneOf", "allOf", "$ref"};
constexpr std::string_view kTypes[] = {"string", "integer", "number", "boolean",
                                       "null",   "object",  "array"};

template <std::size_t N>
bool one_of(std::string_view s, const std::string_view (&list)[N]) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

// The JSON-Schema keywords a type reads ("integer" and "number" share theirs).
bool applies(std::string_view keyword, std::string_view type) {
  if (one_of(keyword, kStringKeywords)) return type == "string";
  if (one_of(keyword, kNumberKeywords)) return type == "integer" || type == "number";
  if (one_of(keyword, kObjectKeywords)) return type == "object";
  if (one_of(keyword, kArrayKeywords)) return type == "array";
  return false;
}

std::string child(const std::string& pointer, std::string_view token) {
  std::string out = pointer + "/";
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string describe(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

Status no_keyword(const std::string& pointer, std::string_view keyword) {
  return unsupported(pointer, "keyword \"" + std::string(keyword) + "\" is not supported");
}

// A count keyword (minLength, maxItems, ...): a non-negative integer (5.0 counts as 5).
Result<std::optional<int64_t>> get_count(const Json& schema, const char* keyword,
                                         const std::string& pointer) {
  auto it = schema.find(keyword);
  if (it == schema.end()) return std::optional<int64_t>();
  const Json& v = *it;
  if (v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0)) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) {
      return unsupported(child(pointer, keyword), "count " + describe(v) + " is too large");
    }
    return std::optional<int64_t>(v.get<int64_t>());
  }
  if (v.is_number_float() && v.get<double>() >= 0 && v.get<double>() < 9e18 &&
      std::floor(v.get<double>()) == v.get<double>()) {
    return std::optional<int64_t>(static_cast<int64_t>(v.get<double>()));
  }
  return bad(child(pointer, keyword), "expected a non-negative integer, got " + describe(v));
}

// r[i] == '{' starts a counted repetition {n}, {n,} or {n,m} with counts of at most 4 digits.
bool is_count(std::string_view r, std::size_t i) {
  const std::size_t close = r.find('}', i);
  if (close == std::string_view::npos) return false;
  const std::string_view body = r.substr(i + 1, close - i - 1);
  const std::size_t comma = body.find(',');
  const std::string_view low = body.substr(0, comma);
  const std::string_view high = comma == std::string_view::npos ? low : body.substr(comma + 1);
  auto digits = [](std::string_view d) {
    return !d.empty() && d.size() <= 4 &&
           d.find_first_not_of("0123456789") == std::string_view::npos;
  };
  return digits(low) && (digits(high) || (comma != std::string_view::npos && high.empty()));
}

// A rough size of `regex` once the DFA builder expands its counted repetitions: a literal,
// escape or class counts 1, a group 1 + its content (all alternatives), `*` `+` `?` 1 more,
// and {n,m} repeats its atom m times ({n,}: n + 1). Saturates at 2^40.
uint64_t expanded_atoms(std::string_view r) {
  constexpr uint64_t kCap = uint64_t{1} << 40;
  struct Frame {
    uint64_t total = 0;
    uint64_t last = 0;  // the atom a quantifier would apply to
  };
  std::vector<Frame> stack(1);
  auto add_atom = [&](uint64_t cost) {
    stack.back().total = std::min(kCap, stack.back().total + cost);
    stack.back().last = cost;
  };
  std::size_t i = 0;
  while (i < r.size()) {
    const char c = r[i];
    if (c == '\\') {
      const char e = i + 1 < r.size() ? r[i + 1] : ' ';
      i += e == 'u' ? 6 : e == 'x' ? 4 : e == 'U' ? 10 : 2;
      add_atom(1);
    } else if (c == '[') {
      std::size_t j = i + 1;
      if (j < r.size() && r[j] == '^') ++j;
      if (j < r.size() && r[j] == ']') ++j;
      while (j < r.size() && r[j] != ']') j += r[j] == '\\' ? 2 : 1;
      i = j + 1;
      add_atom(1);
    } else if (c == '(') {
      stack.emplace_back();
      ++i;
      if (i < r.size() && r[i] == '?') {
        const std::size_t close = r.find_first_of(":>", i);
        i = close == std::string_view::npos ? r.size() : close + 1;
      }
    } else if (c == ')' && stack.size() > 1) {
      const uint64_t group = stack.back().total + 1;
      stack.pop_back();
      add_atom(group);
      ++i;
    } else if (c == '|') {
      stack.back().last = 0;
      ++i;
    } else if (c == '*' || c == '+' || c == '?') {
      stack.back().total = std::min(kCap, stack.back().total + 1);
      ++i;
    } else if (c == '{' && is_count(r, i)) {  // {n}, {n,} or {n,m} (n, m <= 4 digits)
      const std::size_t close = r.find('}', i);
      const std::string_view body = r.substr(i + 1, close - i - 1);
      const std::size_t comma = body.find(',');
      const std::string_view high = comma == std::string_view::npos ? body : body.substr(comma + 1);
      uint64_t times = 0;
      for (char d : high.empty() ? body.substr(0, comma) : high) times = times * 10 + (d - '0');
      if (high.empty()) ++times;
      Frame& top = stack.back();
      top.total = std::min(kCap, top.total + top.last * (times > 0 ? times - 1 : 0));
      i = close + 1;
    } else {
      add_atom(1);
      ++i;
    }
  }
  uint64_t total = 0;
  for (const Frame& f : stack) total = std::min(kCap, total + f.total);
  return total;
}

// Refuses `count` repetitions of `part` that the DFA builder would reject anyway, naming the
// keyword (at `pointer`) and its `value`.
Status check_repeat(const std::string& part, int64_t count, const std::string& pointer,
                    std::string_view keyword, int64_t value) {
  const std::string what = std::string(keyword) + " " + std::to_string(value) + " needs " +
                           std::to_string(count) + " repetitions";
  if (count > kMaxRepeatCount) {
    return unsupported(child(pointer, keyword),
                       what + ", over the limit of " + std::to_string(kMaxRepeatCount));
  }
  const uint64_t atoms = expanded_atoms(part);
  if (static_cast<uint64_t>(count) * atoms > kMaxRepeatAtoms) {
    return unsupported(child(pointer, keyword),
                       what + " of a " + std::to_string(atoms) + "-atom regex, over " +
                           std::to_string(kMaxRepeatAtoms) +
                           " atoms; lower it or simplify the repeated schema");
  }
  return ok_status();
}

bool matches_type(const Json& v, std::string_view type) {
  if (type == "string") return v.is_string();
  if (type == "integer") {
    return v.is_number_integer() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  }
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  return v.is_array();
}

// Whether `schema` allows any value: `true`, or an object of annotations only (and $defs /
// definitions holding objects). `items` and `additionalProperties` read such a schema as absent.
bool is_free_form(const Json& schema) {
  if (schema.is_boolean()) return schema.get<bool>();
  if (!schema.is_object()) return false;
  for (const auto& [key, value] : schema.items()) {
    if (one_of(key, kAnnotations)) continue;
    if ((key == "$defs" || key == "definitions") && value.is_object()) continue;
    return false;
  }
  return true;
}

// ---- the compiler -------------------------------------------------------------------------

class Compiler {
 public:
  // ws: the whitespace fragment between JSON tokens (JsonSchemaOptions::whitespace).
  Compiler(const Json& root, std::string ws, bool holes)
      : root_(root), ws_(std::move(ws)), holes_(holes) {}

  // The regex of `schema`, found at JSON pointer `pointer`, `depth` schemas deep.
  Result<std::string> compile(const Json& schema, const std::string& pointer, int depth);

 private:
  Result<std::string> compile_node(const Json& schema, const std::string& pointer, int depth);
  Result<std::string> compile_ref(const Json& ref, const std::string& pointer, int depth);
  Result<std::string> compile_enum(const Json& schema, const std::string& pointer,
                                   const std::vector<std::string>& types);
  Result<std::string> compile_type(std::string_view type, const Json& schema,
                                   const std::string& pointer, int depth);
  Result<std::string> compile_string(const Json& schema, const std::string& pointer);
  Result<std::string> compile_number(bool integer, const Json& schema, const std::string& pointer);
  Result<std::string> compile_object(const Json& schema, const std::string& pointer, int depth);
  Result<std::string> compile_array(const Json& schema, const std::string& pointer, int depth);

  const Json& root_;
  const std::string ws_;
  const bool holes_;  // free-form values as kFreeFormHole (JsonSchemaOptions::free_form_holes)

  // A free-form value of at most `levels` containers, or the hole standing for any value.
  std::string free_form(int levels) const {
    return holes_ ? std::string(kFreeFormHoleRegex) : free_form_value(levels, ws_);
  }
  std::vector<std::string> ref_stack_;  // pointers of the $ref targets being expanded
  std::size_t work_bytes_ = 0;          // bytes of every fragment built so far
};

Result<std::string> Compiler::compile(const Json& schema, const std::string& pointer, int depth) {
  if (depth > kMaxSchemaDepth) {
    return bad(pointer, "schemas nested deeper than " + std::to_string(kMaxSchemaDepth) +
                            " levels ($ref included)");
  }
  PS_ASSIGN_OR_RETURN(std::string regex, compile_node(schema, pointer, depth));
  work_bytes_ += regex.size();
  if (work_bytes_ > kMaxWorkBytes || regex.size() > kMaxRegexBytes) {
    return bad(pointer,
               "schema too large: its regex exceeds " + std::to_string(kMaxRegexBytes) + " bytes");
  }
  return regex;
}

// Reads `type` (a name or a list of names); empty when absent.
Result<std::vector<std::string>> read_types(const Json& schema, const std::string& pointer) {
  std::vector<std::string> types;
  auto it = schema.find("type");
  if (it == schema.end()) return types;
  const std::string at = child(pointer, "type");
  const Json list = it->is_array() ? *it : Json::array({*it});
  if (list.empty()) return bad(at, "expected a type name or a non-empty list of them, got []");
  for (const Json& t : list) {
    if (!t.is_string() || !one_of(t.get_ref<const std::string&>(), kTypes)) {
      return bad(at,
                 "expected \"string\", \"integer\", \"number\", \"boolean\", \"null\", "
                 "\"object\" or \"array\", got " +
                     describe(t));
    }
    if (std::find(types.begin(), types.end(), t.get<std::string>()) != types.end()) {
      return bad(at, "type " + describe(t) + " is listed twice");
    }
    types.push_back(t.get<std::string>());
  }
  return types;
}

Result<std::string> Compiler::compile_node(const Json& schema, const std::string& pointer,
                                           int depth) {
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) return bad(pointer, "schema false allows no value");
    return free_form(kMaxFreeFormDepth);
  }
  if (!schema.is_object()) {
    return bad(pointer, "expected a schema (an object), got " + describe(schema));
  }
  std::vector<std::string> keywords;  // the ones that constrain the value
  for (const auto& [key, value] : schema.items()) {
    if (one_of(key, kAnnotations)) continue;
    if (key == "$defs" || key == "definitions") {
      if (!value.is_object()) {
        return bad(child(pointer, key),
                   "expected an object of named schemas, got " + describe(value));
      }
      continue;
    }
    if (!one_of(key, kStructuralKeywords) && !one_of(key, kStringKeywords) &&
        !one_of(key, kNumberKeywords) && !one_of(key, kObjectKeywords) &&
        !one_of(key, kArrayKeywords)) {
      return no_keyword(pointer, key);
    }
    keywords.push_back(key);
  }
  if (keywords.empty()) return free_form(kMaxFreeFormDepth);
  // $ref, anyOf, oneOf, allOf each stand alone (annotations aside).
  for (const std::string combinator : {"$ref", "anyOf", "oneOf", "allOf"}) {
    if (!schema.contains(combinator)) continue;
    for (const std::string& k : keywords) {
      if (k != combinator) {
        return unsupported(pointer,
                           "keyword \"" + k + "\" beside \"" + combinator + "\" is not supported");
      }
    }
    const Json& value = schema.at(combinator);
    const std::string at = child(pointer, combinator);
    if (combinator == "$ref") return compile_ref(value, at, depth);
    if (!value.is_array() || value.empty()) {
      return bad(at, "expected a non-empty list of schemas, got " + describe(value));
    }
    if (combinator == "allOf" && value.size() != 1) {
      return unsupported(at, "allOf of " + std::to_string(value.size()) +
                                 " schemas is not supported (only of one)");
    }
    std::vector<std::string> alternatives;
    for (std::size_t i = 0; i < value.size(); ++i) {
      PS_ASSIGN_OR_RETURN(std::string a,
                          compile(value[i], child(at, std::to_string(i)), depth + 1));
      alternatives.push_back(std::move(a));
    }
    return alternation(std::move(alternatives));
  }
  PS_ASSIGN_OR_RETURN(std::vector<std::string> types, read_types(schema, pointer));
  if (schema.contains("enum") || schema.contains("const")) {
    for (const std::string& k : keywords) {
      if (k != "enum" && k != "const" && k != "type") {
        return unsupported(pointer, "keyword \"" + k + "\" beside \"" +
                                        (schema.contains("enum") ? "enum" : "const") +
                                        "\" is not supported");
      }
    }
    return compile_enum(schema, pointer, types);
  }
  if (types.empty()) {  // infer the type from the keywords, as outlines does
    std::set<std::string> inferred;
    for (const std::string& k : keywords) {
      for (std::string_view t : {"string", "number", "object", "array"}) {
        if (applies(k, t)) inferred.insert(std::string(t));
      }
    }
    if (inferred.size() != 1) {
      return unsupported(pointer,
                         "a schema without \"type\" is supported only when its keywords "
                         "belong to one type");
    }
    types.push_back(*inferred.begin());
  }
  for (const std::string& k : keywords) {
    if (k == "type") continue;
    if (std::none_of(types.begin(), types.end(),
                     [&](const std::string& t) { return applies(k, t); })) {
      return bad(child(pointer, k),
                 "keyword \"" + k + "\" does not apply to type " + describe(Json(types)));
    }
  }
  std::vector<std::string> alternatives;
  for (const std::string& t : types) {
    PS_ASSIGN_OR_RETURN(std::string a, compile_type(t, schema, pointer, depth));
    alternatives.push_back(std::move(a));
  }
  return alternation(std::move(alternatives));
}

Result<std::string> Compiler::compile_ref(const Json& ref, const std::string& pointer, int depth) {
  if (!ref.is_string()) return bad(pointer, "expected a string, got " + describe(ref));
  const std::string& text = ref.get_ref<const std::string&>();
  if (text.empty() || text[0] != '#') {
    return unsupported(pointer,
                       "only local references (\"#/...\") are supported, got " + describe(ref));
  }
  std::string target;  // the fragment, %XX-decoded: a JSON pointer
  for (std::size_t i = 1; i < text.size(); ++i) {
    auto hex = text[i] == '%' ? parse_hex(text, i + 1, 2) : std::nullopt;
    target += hex ? static_cast<char>(*hex) : text[i];
    if (hex) i += 2;
  }
  if (!target.empty() && target[0] != '/') {
    return unsupported(
        pointer, "only JSON-pointer references (\"#/...\") are supported, got " + describe(ref));
  }
  const Json* node = &root_;
  std::size_t pos = 0;
  while (pos < target.size()) {  // each step: "/" token
    std::size_t next = target.find('/', pos + 1);
    if (next == std::string::npos) next = target.size();
    std::string token;
    for (std::size_t i = pos + 1; i < next; ++i) {
      if (target[i] != '~') {
        token += target[i];
      } else if (i + 1 < next && (target[i + 1] == '0' || target[i + 1] == '1')) {
        token += target[++i] == '0' ? '~' : '/';
      } else {
        return bad(pointer, "bad ~ escape in " + describe(ref) + " (expected ~0 or ~1)");
      }
    }
    const Json* found = nullptr;
    if (node->is_object() && node->contains(token)) found = &node->at(token);
    if (node->is_array() && !token.empty() && token.size() < 10 &&
        token.find_first_not_of("0123456789") == std::string::npos &&
        std::stoul(token) < node->size()) {
      found = &(*node)[std::stoul(token)];
    }
    if (!found) return bad(pointer, describe(ref) + " does not resolve");
    node = found;
    pos = next;
  }
  if (std::find(ref_stack_.begin(), ref_stack_.end(), target) != ref_stack_.end()) {
    return unsupported(pointer, "recursive $ref " + describe(ref) + " is not supported");
  }
  ref_stack_.push_back(target);
  Result<std::string> regex = compile(*node, target, depth + 1);
  ref_stack_.pop_back();
  return regex;
}

Result<std::string> Compiler::compile_enum(const Json& schema, const std::string& pointer,
                                           const std::vector<std::string>& types) {
  Json values = Json::array();
  if (auto it = schema.find("enum"); it != schema.end()) {
    if (!it->is_array() || it->empty()) {
      return bad(child(pointer, "enum"),
                 "expected a non-empty list of values, got " + describe(*it));
    }
    values = *it;
  }
  if (auto it = schema.find("const"); it != schema.end()) {
    if (!schema.contains("enum")) values.push_back(*it);
    Json kept = Json::array();
    for (const Json& v : values) {
      if (v == *it) kept.push_back(v);
    }
    values = kept;
  }
  std::vector<std::string> alternatives;
  for (const Json& v : values) {
    if (!types.empty() && std::none_of(types.begin(), types.end(),
                                       [&](const std::string& t) { return matches_type(v, t); })) {
      continue;
    }
    alternatives.push_back(regex_literal(v.dump()));
  }
  if (alternatives.empty()) {
    return bad(pointer,
               "no value satisfies enum / const" + std::string(types.empty() ? "" : " and type"));
  }
  return alternation(std::move(alternatives));
}

Result<std::string> Compiler::compile_type(std::string_view type, const Json& schema,
                                           const std::string& pointer, int depth) {
  if (type == "string") return compile_string(schema, pointer);
  if (type == "integer" || type == "number") {
    return compile_number(type == "integer", schema, pointer);
  }
  if (type == "boolean") return std::string("(?:true|false)");
  if (type == "null") return std::string("null");
  if (type == "object") return compile_object(schema, pointer, depth);
  return compile_array(schema, pointer, depth);
}

Result<std::string> Compiler::compile_string(const Json& schema, const std::string& pointer) {
  PS_ASSIGN_OR_RETURN(auto min_length, get_count(schema, "minLength", pointer));
  PS_ASSIGN_OR_RETURN(auto max_length, get_count(schema, "maxLength", pointer));
  const bool has_length = min_length || max_length;
  if (auto it = schema.find("format"); it != schema.end()) {
    const std::string at = child(pointer, "format");
    if (!it->is_string()) return bad(at, "expected a string, got " + describe(*it));
    if (schema.contains("pattern") || has_length) {
      return unsupported(pointer,
                         "\"format\" together with \"pattern\", \"minLength\" or "
                         "\"maxLength\" is not supported");
    }
    if (std::optional<std::string> content =
            string_format_regex(it->get_ref<const std::string&>())) {
      return "\"" + *content + "\"";
    }
    return unsupported(at, "format " + describe(*it) + " is not supported (supported: " +
                               std::string(supported_string_formats()) + ")");
  }
  if (auto it = schema.find("pattern"); it != schema.end()) {
    const std::string at = child(pointer, "pattern");
    if (!it->is_string()) return bad(at, "expected a string, got " + describe(*it));
    if (has_length) {
      return unsupported(pointer,
                         "\"pattern\" together with \"minLength\" or \"maxLength\" is "
                         "not supported; bound the length in the pattern");
    }
    PS_ASSIGN_OR_RETURN(std::string content, translate_pattern(it->get<std::string>(), at));
    return "\"(?:" + content + ")\"";
  }
  const int64_t min = min_length.value_or(0);
  if (max_length && min > *max_length) {
    return bad(child(pointer, "minLength"),
               "minLength " + std::to_string(min) + " > maxLength " + std::to_string(*max_length));
  }
  const std::string chars(kJsonStringChar);
  PS_RETURN_IF_ERROR(check_repeat(chars, min, pointer, "minLength", min));
  if (max_length) {
    PS_RETURN_IF_ERROR(check_repeat(chars, *max_length, pointer, "maxLength", *max_length));
  }
  if (min == 0 && !max_length) return json_string_regex();
  return "\"" + repeat(chars, min, max_length) + "\"";
}

// One bound keyword, if present: a number; the exclusive ones may be draft-4 booleans.
struct Bound {
  const char* keyword;
  const Json* value;  // a number
  bool exclusive;
};

Result<std::vector<Bound>> read_bounds(const Json& schema, const std::string& pointer, bool lower) {
  const char* inclusive = lower ? "minimum" : "maximum";
  const char* exclusive = lower ? "exclusiveMinimum" : "exclusiveMaximum";
  std::vector<Bound> bounds;
  bool draft4_exclusive = false;
  if (auto it = schema.find(exclusive); it != schema.end()) {
    if (it->is_boolean()) {
      if (!schema.contains(inclusive)) {
        return bad(child(pointer, exclusive),
                   std::string("a boolean needs \"") + inclusive + "\" beside it (draft 4)");
      }
      draft4_exclusive = it->get<bool>();
    } else if (it->is_number()) {
      bounds.push_back({exclusive, &*it, true});
    } else {
      return bad(child(pointer, exclusive), "expected a number, got " + describe(*it));
    }
  }
  if (auto it = schema.find(inclusive); it != schema.end()) {
    if (!it->is_number())
      return bad(child(pointer, inclusive), "expected a number, got " + describe(*it));
    bounds.push_back({inclusive, &*it, draft4_exclusive});
  }
  return bounds;
}

// A bound past +-kMaxIntegerBound, at `at`.
Status outside_range(const std::string& at, const Json& value) {
  return unsupported(at, describe(value) + " is outside the supported range +-10^18");
}

// The tightest integer the bound allows from below (lower) or above.
Result<int64_t> integer_bound(const Bound& b, bool lower, const std::string& pointer) {
  const Json& v = *b.value;
  const std::string at = child(pointer, b.keyword);
  const auto too_large = [&] { return outside_range(at, v); };
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{kMaxIntegerBound}) return too_large();
  if (v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    if (n > kMaxIntegerBound || n < -kMaxIntegerBound) return too_large();
    return b.exclusive ? (lower ? n + 1 : n - 1) : n;
  }
  const double d = v.get<double>();
  if (!(std::fabs(d) <= 1e18)) return too_large();
  if (lower) return static_cast<int64_t>(b.exclusive ? std::floor(d) + 1 : std::ceil(d));
  return static_cast<int64_t>(b.exclusive ? std::ceil(d) - 1 : std::floor(d));
}

// The bound's value as a decimal: its shortest spelling (nlohmann writes a double's shortest
// round-trip digits), so 0.1 is 0.1, not the double's binary value.
Result<DecimalBound> decimal_bound(const Bound& b, const std::string& pointer) {
  const std::string at = child(pointer, b.keyword);
  const std::string text = b.value->dump();
  std::size_t i = 0;
  const bool negative = i < text.size() && text[i] == '-';
  if (negative) ++i;
  std::string digits;  // mantissa digits without the point
  int64_t point = -1;  // digits before the point
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.') {
      point = static_cast<int64_t>(digits.size());
    } else {
      digits += text[i];
    }
  }
  if (point < 0) point = static_cast<int64_t>(digits.size());
  if (i < text.size()) point += std::stoll(text.substr(i + 1));  // "e+20", "e-07"
  const auto too_precise = [&] {
    return unsupported(at, describe(*b.value) + " has more than " +
                               std::to_string(kMaxBoundFractionDigits) + " fraction digits");
  };
  const auto too_large = [&] { return outside_range(at, *b.value); };
  if (point < -kMaxBoundFractionDigits) return too_precise();
  if (point < 0) {
    digits.insert(0, static_cast<std::size_t>(-point), '0');
    point = 0;
  }
  if (point > static_cast<int64_t>(digits.size())) {
    if (point > 19) return too_large();
    digits.append(static_cast<std::size_t>(point) - digits.size(), '0');
  }
  std::string integer = digits.substr(0, static_cast<std::size_t>(point));
  std::string fraction = digits.substr(static_cast<std::size_t>(point));
  while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
  if (static_cast<int64_t>(fraction.size()) > kMaxBoundFractionDigits) return too_precise();
  integer.erase(0, std::min(integer.find_first_not_of('0'), integer.size()));
  if (integer.size() > 19) return too_large();
  DecimalBound out;
  out.value.integer = integer.empty() ? 0 : std::stoull(integer);
  if (out.value.integer > uint64_t{kMaxIntegerBound}) return too_large();
  out.value.fraction = std::move(fraction);
  out.value.negative = negative && (out.value.integer != 0 || !out.value.fraction.empty());
  out.inclusive = !b.exclusive;
  return out;
}

// The tighter of a side's bounds (an exclusive one wins a tie).
Result<std::optional<DecimalBound>> tightest(const std::vector<Bound>& bounds, bool lower,
                                             const std::string& pointer) {
  std::optional<DecimalBound> best;
  for (const Bound& b : bounds) {
    PS_ASSIGN_OR_RETURN(DecimalBound d, decimal_bound(b, pointer));
    const int c = best ? compare(d.value, best->value) : 0;
    if (!best || (lower ? c > 0 : c < 0) || (c == 0 && !d.inclusive)) best = std::move(d);
  }
  return best;
}

Result<std::string> Compiler::compile_number(bool integer, const Json& schema,
                                             const std::string& pointer) {
  PS_ASSIGN_OR_RETURN(std::vector<Bound> lower, read_bounds(schema, pointer, true));
  PS_ASSIGN_OR_RETURN(std::vector<Bound> upper, read_bounds(schema, pointer, false));
  if (!integer) {
    if (lower.empty() && upper.empty()) return std::string(kJsonNumberRegex);
    // Only a lower bound 0: any exponent keeps the sign, so exponents stay allowed.
    if (upper.empty() && lower.size() == 1 && *lower[0].value == 0) {
      if (lower[0].exclusive) return std::string(kPositiveNumber);
      return "(?:0|[1-9][0-9]*)" + std::string(kFraction);
    }
    PS_ASSIGN_OR_RETURN(std::optional<DecimalBound> lo, tightest(lower, true, pointer));
    PS_ASSIGN_OR_RETURN(std::optional<DecimalBound> hi, tightest(upper, false, pointer));
    std::optional<std::string> range = number_range(lo, hi);
    if (!range) return bad(pointer, "no number satisfies the bounds");
    return *range;
  }
  std::optional<int64_t> lo;
  std::optional<int64_t> hi;
  for (const Bound& b : lower) {
    PS_ASSIGN_OR_RETURN(int64_t v, integer_bound(b, true, pointer));
    lo = lo ? std::max(*lo, v) : v;
  }
  for (const Bound& b : upper) {
    PS_ASSIGN_OR_RETURN(int64_t v, integer_bound(b, false, pointer));
    hi = hi ? std::min(*hi, v) : v;
  }
  if (lo && hi && *lo > *hi) {
    return bad(pointer, "no integer satisfies the bounds (lowest allowed " + std::to_string(*lo) +
                            " > highest allowed " + std::to_string(*hi) + ")");
  }
  return integer_range(lo, hi);
}

Result<std::string> Compiler::compile_object(const Json& schema, const std::string& pointer,
                                             int depth) {
  const Json* additional = nullptr;  // absent: any properties when `properties` is absent too
  const std::string additional_at = child(pointer, "additionalProperties");
  if (auto it = schema.find("additionalProperties"); it != schema.end()) {
    if (!it->is_boolean() && !it->is_object()) {
      return bad(additional_at, "expected a boolean or a schema, got " + describe(*it));
    }
    additional = &*it;
  }
  const bool closed = additional && *additional == false;
  auto props_it = schema.find("properties");
  const std::string props_at = child(pointer, "properties");
  if (props_it != schema.end()) {
    if (!props_it->is_object()) {
      return bad(props_at, "expected an object of property schemas, got " + describe(*props_it));
    }
  }
  std::set<std::string> required;
  if (auto it = schema.find("required"); it != schema.end()) {
    const std::string at = child(pointer, "required");
    if (!it->is_array()) return bad(at, "expected a list of property names, got " + describe(*it));
    for (const Json& name : *it) {
      if (!name.is_string()) return bad(at, "expected property names, got " + describe(name));
      if (props_it == schema.end()) {
        return unsupported(at,
                           "required properties of an object without \"properties\" are not "
                           "supported; list them in \"properties\"");
      }
      if (!props_it->contains(name.get<std::string>())) {
        return bad(at, "required property " + describe(name) + " is not in \"properties\"");
      }
      if (!required.insert(name.get<std::string>()).second) {
        return bad(at, "property " + describe(name) + " is listed twice");
      }
    }
  }
  // The value of a key outside "properties": free-form (additionalProperties absent without
  // properties, true, or a schema without constraints), additionalProperties' schema, or none.
  std::optional<std::string> extra_value;
  if (additional == nullptr ? props_it == schema.end() : !closed) {
    if (additional == nullptr || is_free_form(*additional)) {
      extra_value = free_form(kMaxFreeFormDepth - 1);
    } else {
      PS_ASSIGN_OR_RETURN(extra_value, compile(*additional, additional_at, depth + 1));
    }
  }
  const std::string& ws = ws_;
  if (props_it == schema.end() || props_it->empty()) {  // an object of any keys, or none
    return extra_value ? object_of(*extra_value, ws_) : "\\{" + ws + "\\}";
  }
  const std::string sep = ws + "," + ws;
  // Additional members follow the listed ones; their keys are any JSON string (a listed name
  // too: a regex does not exclude them).
  const std::string extra =
      extra_value ? json_string_regex() + ws + ":" + ws + *extra_value : std::string();
  const std::string extras = extra_value ? "(?:" + sep + extra + ")*" : std::string();
  std::vector<std::string> members;
  std::vector<bool> is_required;
  for (const auto& [name, sub] : props_it->items()) {
    PS_ASSIGN_OR_RETURN(std::string value, compile(sub, child(props_at, name), depth + 1));
    members.push_back(regex_literal(Json(name).dump()) + ws + ":" + ws + value);
    is_required.push_back(required.count(name) > 0);
  }
  const auto first_required = std::find(is_required.begin(), is_required.end(), true);
  if (first_required != is_required.end()) {
    // Optional members before the first required one carry their comma after them, the
    // ones after it before them.
    const std::size_t r = static_cast<std::size_t>(first_required - is_required.begin());
    std::string content;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (i < r) {
        content += "(?:" + members[i] + sep + ")?";
      } else if (i == r) {
        content += members[i];
      } else {
        content += is_required[i] ? sep + members[i] : "(?:" + sep + members[i] + ")?";
      }
    }
    return "\\{" + ws + content + extras + ws + "\\}";
  }
  // All optional: choose the first member present, then each later one may follow.
  std::vector<std::string> alternatives;
  for (std::size_t i = 0; i < members.size(); ++i) {
    std::string a = members[i];
    for (std::size_t j = i + 1; j < members.size(); ++j) a += "(?:" + sep + members[j] + ")?";
    alternatives.push_back(std::move(a) + extras);
  }
  if (extra_value) alternatives.push_back(extra + extras);  // additional members alone
  return "\\{" + ws + "(?:" + alternation(std::move(alternatives)) + ws + ")?\\}";
}

Result<std::string> Compiler::compile_array(const Json& schema, const std::string& pointer,
                                            int depth) {
  PS_ASSIGN_OR_RETURN(auto min_items_opt, get_count(schema, "minItems", pointer));
  PS_ASSIGN_OR_RETURN(auto max_items, get_count(schema, "maxItems", pointer));
  const int64_t min_items = min_items_opt.value_or(0);
  if (max_items && min_items > *max_items) {
    return bad(child(pointer, "minItems"), "minItems " + std::to_string(min_items) +
                                               " > maxItems " + std::to_string(*max_items));
  }
  const Json* prefix = nullptr;
  std::string prefix_at;
  std::optional<std::string> item;  // the regex of items beyond the prefix; none: no more
  auto items_it = schema.find("items");
  if (auto it = schema.find("prefixItems"); it != schema.end()) {
    prefix_at = child(pointer, "prefixItems");
    if (!it->is_array()) return bad(prefix_at, "expected a list of schemas, got " + describe(*it));
    if (items_it != schema.end() && items_it->is_array()) {
      return bad(child(pointer, "items"), "a list of schemas beside \"prefixItems\"");
    }
    prefix = &*it;
  }
  if (items_it != schema.end()) {
    const std::string at = child(pointer, "items");
    if (items_it->is_array()) {  // draft 4-7 tuple
      prefix = &*items_it;
      prefix_at = at;
    } else if (is_free_form(*items_it)) {
      item = free_form(kMaxFreeFormDepth - 1);
    } else if (*items_it != false) {
      PS_ASSIGN_OR_RETURN(std::string regex, compile(*items_it, at, depth + 1));
      item = std::move(regex);
    }
  } else if (!prefix) {  // an array of any values
    item = free_form(kMaxFreeFormDepth - 1);
  }
  const std::string& ws = ws_;
  const std::string sep = ws + "," + ws;
  std::string content;
  if (!prefix || prefix->empty()) {
    if (!item) {
      if (min_items > 0)
        return bad(child(pointer, "minItems"), "minItems > 0 but no items are allowed");
      return "\\[" + ws + "\\]";
    }
    if (max_items && *max_items == 0) return "\\[" + ws + "\\]";
    const std::string rest = "(?:" + sep + *item + ")";
    const int64_t rest_min = std::max<int64_t>(0, min_items - 1);
    std::optional<int64_t> rest_max;
    if (max_items) rest_max = *max_items - 1;
    PS_RETURN_IF_ERROR(check_repeat(rest, rest_min, pointer, "minItems", min_items));
    if (rest_max) {
      PS_RETURN_IF_ERROR(check_repeat(rest, *rest_max, pointer, "maxItems", *max_items));
    }
    content = *item + repeat(rest, rest_min, rest_max);
  } else {
    const int64_t num_prefix = static_cast<int64_t>(prefix->size());
    if (!item && min_items > num_prefix) {
      return bad(child(pointer, "minItems"), "minItems " + std::to_string(min_items) + " > the " +
                                                 std::to_string(num_prefix) +
                                                 " prefix items, and no items may follow them");
    }
    if (max_items && *max_items == 0) return "\\[" + ws + "\\]";
    const int64_t used = max_items ? std::min(num_prefix, *max_items) : num_prefix;
    std::vector<std::string> elements;
    for (int64_t i = 0; i < used; ++i) {
      PS_ASSIGN_OR_RETURN(std::string regex,
                          compile((*prefix)[static_cast<std::size_t>(i)],
                                  child(prefix_at, std::to_string(i)), depth + 1));
      elements.push_back(std::move(regex));
    }
    // Items after the prefix: only when every prefix item is allowed.
    if (item && used == num_prefix) {
      const std::string rest = "(?:" + sep + *item + ")";
      const int64_t rest_min = std::max<int64_t>(0, min_items - num_prefix);
      std::optional<int64_t> rest_max;
      if (max_items) rest_max = *max_items - num_prefix;
      PS_RETURN_IF_ERROR(check_repeat(rest, rest_min, pointer, "minItems", min_items));
      if (rest_max) {
        PS_RETURN_IF_ERROR(check_repeat(rest, *rest_max, pointer, "maxItems", *max_items));
      }
      content = repeat(rest, rest_min, rest_max);
    }
    // Element i (0-based) may end the array when i + 1 >= minItems.
    for (int64_t i = used - 1; i >= 0; --i) {
      const std::size_t k = static_cast<std::size_t>(i);
      if (i == used - 1) {
        content = elements[k] + content;
      } else {
        content = elements[k] + (i + 1 >= min_items ? "(?:" + sep + content + ")?" : sep + content);
      }
    }
  }
  if (min_items == 0) return "\\[" + ws + "(?:" + content + ws + ")?\\]";
  return "\\[" + ws + content + ws + "\\]";
}

}  // namespace

Result<std::string> json_schema_to_regex(std::string_view schema_json,
                                         const JsonSchemaOptions& options) {
  // nlohmann's parser and dump recurse per nesting level: bound it before parsing.
  if (json_nesting_depth(schema_json, 4 * kMaxSchemaDepth) > 4 * kMaxSchemaDepth) {
    return bad("", "JSON nested deeper than " + std::to_string(4 * kMaxSchemaDepth) + " levels");
  }
  try {
    Json root = Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
    if (root.is_discarded()) return bad("", "not valid JSON");
    // A caller's fragment is grouped, so that an alternation in it stays inside.
    Compiler compiler(root,
                      options.whitespace == kJsonWs || options.whitespace.empty()
                          ? options.whitespace
                          : "(?:" + options.whitespace + ")",
                      options.free_form_holes);
    PS_ASSIGN_OR_RETURN(std::string regex, compiler.compile(root, "", 0));
    return regex;
  } catch (const std::exception& e) {
    return internal_error(std::string("json_schema: ") + e.what());
  }
}

}  // namespace packserve::grammar
