// json_schema_test.cc: json_schema_to_regex. Oracles: exact regexes of small schemas worked
// out by hand from json_schema.h's layout; documents checked with std::regex_match on the
// output (ECMAScript reads every construct the compiler emits as the dialect does), each
// document marked valid also checked to be JSON; integer ranges against arithmetic over a
// window of values; every error path with its code and exact message.
#include "packserve/grammar/json_schema.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "packserve/grammar/regex.h"

namespace packserve::grammar {
namespace {

const std::string W(kJsonWs);
const std::string C(kJsonStringChar);
const std::string kInt = "-?(?:0|[1-9][0-9]*)";

std::string compile_ok(const std::string& schema) {
  Result<std::string> r = json_schema_to_regex(schema);
  EXPECT_TRUE(r.ok()) << schema << "\n" << r.status().to_string();
  return r.ok() ? *r : std::string("(?!)");
}

// Every document of `valid` matches, none of `invalid` does.
void expect_documents(const std::string& schema, const std::vector<std::string>& valid,
                      const std::vector<std::string>& invalid) {
  SCOPED_TRACE(schema);
  const std::string regex = compile_ok(schema);
  const std::regex re(regex);
  for (const std::string& doc : valid) {
    EXPECT_TRUE(nlohmann::json::accept(doc)) << "test bug, not JSON: " << doc;
    EXPECT_TRUE(std::regex_match(doc, re)) << "rejected: " << doc << "\nregex: " << regex;
  }
  for (const std::string& doc : invalid) {
    EXPECT_FALSE(std::regex_match(doc, re)) << "accepted: " << doc << "\nregex: " << regex;
  }
}

// ---- exact regexes ----------------------------------------------------------------------

TEST(JsonSchemaExact, Scalars) {
  EXPECT_EQ(compile_ok(R"({"type": "boolean"})"), "(?:true|false)");
  EXPECT_EQ(compile_ok(R"({"type": "null"})"), "null");
  EXPECT_EQ(compile_ok(R"({"type": "integer"})"), kInt);
  EXPECT_EQ(compile_ok(R"({"type": "number"})"),
            R"(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)");
  EXPECT_EQ(compile_ok(R"({"type": "number", "minimum": 0})"),
            R"((?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)");
  EXPECT_EQ(compile_ok(R"({"type": "string"})"), "\"" + C + "*\"");
  EXPECT_EQ(C, R"((?:[^"\\\x00-\x1F]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4}))");
  EXPECT_EQ(W, R"([ \t\n\r]{0,20})");
  EXPECT_EQ(compile_ok(R"({"type": "string", "minLength": 2, "maxLength": 5})"),
            "\"" + C + "{2,5}\"");
  EXPECT_EQ(compile_ok(R"({"type": "string", "minLength": 1})"), "\"" + C + "+\"");
  EXPECT_EQ(compile_ok(R"({"type": "string", "maxLength": 1})"), "\"" + C + "?\"");
  EXPECT_EQ(compile_ok(R"({"type": "string", "minLength": 3, "maxLength": 3.0})"),
            "\"" + C + "{3}\"");
  EXPECT_EQ(compile_ok(R"({"type": ["integer", "null"], "minimum": 1})"), "(?:[1-9][0-9]*|null)");
  // Annotations (and `strict`) are ignored.
  EXPECT_EQ(compile_ok(R"({"title": "T", "description": "d", "type": "null", "default": null,
      "examples": [null], "$schema": "https://json-schema.org/draft/2020-12/schema",
      "$id": "x", "$comment": "c", "deprecated": false, "readOnly": true, "writeOnly": false,
      "strict": true})"),
            "null");
}

TEST(JsonSchemaExact, IntegerRanges) {
  EXPECT_EQ(compile_ok(R"({"type": "integer", "minimum": 0})"), "(?:0|[1-9][0-9]*)");
  EXPECT_EQ(compile_ok(R"({"type": "integer", "exclusiveMinimum": 0})"), "[1-9][0-9]*");
  // 0..9 | 10..99 | 100..199 | 200..249 | 250..255.
  EXPECT_EQ(compile_ok(R"({"type": "integer", "minimum": 0, "maximum": 255})"),
            "(?:[0-9]|[1-9][0-9]|1[0-9]{2}|2[0-4][0-9]|25[0-5])");
  // -5..-1 | 0..5.
  EXPECT_EQ(compile_ok(R"({"type": "integer", "minimum": -5, "maximum": 5})"), "(?:-[1-5]|[0-5])");
  // 12..19 | 20..99 | three digits or more.
  EXPECT_EQ(compile_ok(R"({"type": "integer", "minimum": 12})"),
            "(?:1[2-9]|[2-9][0-9]|[1-9][0-9]{2,})");
  // <= -3: magnitudes 3..9, or two digits and more.
  EXPECT_EQ(compile_ok(R"({"type": "integer", "maximum": -3})"), "-(?:[3-9]|[1-9][0-9]+)");
}

TEST(JsonSchemaExact, Objects) {
  const std::string sep = W + "," + W;
  EXPECT_EQ(compile_ok(R"({"type": "object", "properties": {"a": {"type": "integer"},
                           "b": {"type": "boolean"}}, "required": ["a"]})"),
            "\\{" + W + "\"a\"" + W + ":" + W + kInt + "(?:" + sep + "\"b\"" + W + ":" + W +
                "(?:true|false))?" + W + "\\}");
  // No required property: the first one present is chosen, the later ones may follow.
  const std::string a = "\"a\"" + W + ":" + W + "null";
  const std::string b = "\"b\"" + W + ":" + W + "null";
  EXPECT_EQ(compile_ok(R"({"properties": {"a": {"type": "null"}, "b": {"type": "null"}}})"),
            "\\{" + W + "(?:(?:" + a + "(?:" + sep + b + ")?|" + b + ")" + W + ")?\\}");
  EXPECT_EQ(compile_ok(R"({"type": "object", "properties": {}})"), "\\{" + W + "\\}");
  // Keys are JSON-serialized, then regex-escaped.
  EXPECT_EQ(compile_ok(R"({"type": "object", "properties": {"a.b\"c": {"type": "null"}},
                           "required": ["a.b\"c"], "additionalProperties": false})"),
            "\\{" + W + R"("a\.b\\"c")" + W + ":" + W + "null" + W + "\\}");
}

TEST(JsonSchemaExact, Arrays) {
  const std::string sep = W + "," + W;
  EXPECT_EQ(compile_ok(R"({"type": "array", "items": {"type": "null"}})"),
            "\\[" + W + "(?:null(?:" + sep + "null)*" + W + ")?\\]");
  EXPECT_EQ(compile_ok(R"({"type": "array", "items": {"type": "null"}, "minItems": 1,
                           "maxItems": 3})"),
            "\\[" + W + "null(?:" + sep + "null){0,2}" + W + "\\]");
  EXPECT_EQ(compile_ok(R"({"type": "array", "items": {"type": "null"}, "maxItems": 0})"),
            "\\[" + W + "\\]");
  // Element 0 is required (minItems 1), element 1 may end the array.
  EXPECT_EQ(compile_ok(R"({"type": "array", "prefixItems": [{"type": "integer"},
                           {"type": "null"}], "items": false, "minItems": 1})"),
            "\\[" + W + kInt + "(?:" + sep + "null)?" + W + "\\]");
  EXPECT_EQ(compile_ok(R"({"type": "array", "prefixItems": [{"type": "integer"}],
                           "items": {"type": "null"}, "minItems": 2})"),
            "\\[" + W + kInt + "(?:" + sep + "null)+" + W + "\\]");
}

TEST(JsonSchemaExact, EnumConstAnyOfRef) {
  EXPECT_EQ(compile_ok(R"({"enum": ["a.b", 1, null, {"k": [true]}, "a.b"]})"),
            R"((?:"a\.b"|1|null|\{"k":\[true\]\}))");
  EXPECT_EQ(compile_ok(R"({"const": "x+y"})"), R"("x\+y")");
  EXPECT_EQ(compile_ok(R"({"type": "string", "enum": ["a", 1, "b"]})"), R"((?:"a"|"b"))");
  EXPECT_EQ(compile_ok(R"({"enum": [1, 2, 3], "const": 2})"), "2");
  EXPECT_EQ(compile_ok(R"({"anyOf": [{"type": "string", "maxLength": 2}, {"type": "null"}]})"),
            "(?:\"" + C + "{0,2}\"|null)");
  EXPECT_EQ(compile_ok(R"({"oneOf": [{"type": "null"}, {"type": "boolean"}]})"),
            "(?:null|(?:true|false))");
  EXPECT_EQ(compile_ok(R"({"allOf": [{"type": "null"}], "description": "x"})"), "null");
  EXPECT_EQ(compile_ok(R"({"$defs": {"A": {"type": "null"}}, "$ref": "#/$defs/A"})"), "null");
  EXPECT_EQ(compile_ok(R"({"definitions": {"a/b": {"x~y": {"type": "null"}}},
                           "$ref": "#/definitions/a~1b/x~0y"})"),
            "null");
  EXPECT_EQ(compile_ok(R"({"$defs": {"A B": {"type": "null"}}, "$ref": "#/$defs/A%20B"})"), "null");
}

TEST(JsonSchemaExact, FormatsAndPatterns) {
  const std::string date = "(?:[0-9]{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01]))";
  EXPECT_EQ(compile_ok(R"({"type": "string", "format": "date"})"), "\"" + date + "\"");
  EXPECT_EQ(compile_ok(R"({"type": "string", "format": "uuid"})"),
            "\"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\"");
  // Anchors dropped; a capturing group becomes non-capturing.
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "^[a-z]+(-[0-9]{2})?$"})"),
            R"x("(?:[a-z]+(?:-[0-9]{2})?)")x");
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "(?P<year>\\d{4})|x\\.y"})"),
            R"x("(?:(?:\d{4})|x\.y)")x");
  // `.`: any JSON character but an unescaped quote, backslash or control.
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "a.b"})"),
            R"x("(?:a(?:[^"\\\x00-\x1F]|\\["\\rt])b)")x");
  // A negated class also excludes them, and allows the escapes of those it does not exclude.
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "[^,]+"})"),
            R"x("(?:(?:[^"\\\x00-\x1F,]|\\["\\tnr])+)")x");
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "[^]\"]"})"),
            R"x("(?:(?:[^"\\\x00-\x1F\]"]|\\[\\tnr]))")x");
  // [ -~] holds '"' and '\': split around them, and their escapes allowed.
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "[ -~]+"})"),
            R"x("(?:(?:[ -!#-\[\]-~]|\\["\\])+)")x");
  // Quotes, backslashes and controls written in the pattern match their escapes.
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "\"\\\\\\n"})"),
            R"x("(?:(?:\\")(?:\\\\)(?:\\n))")x");
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "\\s\\d"})"), R"x("(?:(?: |\\[tnr])\d)")x");
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "[\\s\\d]"})"),
            R"x("(?:(?:[ \d]|\\[tnr]))")x");
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "\\$5"})"), R"x("(?:\$5)")x");
}

// ---- integers against arithmetic --------------------------------------------------------

TEST(JsonSchemaIntegerRange, MatchesExactlyTheRange) {
  struct Case {
    std::string bounds;
    std::optional<int64_t> lo, hi;
  };
  const Case cases[] = {
      {R"("minimum": -10, "maximum": 10)", -10, 10},
      {R"("minimum": 0, "maximum": 255)", 0, 255},
      {R"("minimum": 7, "maximum": 1234)", 7, 1234},
      {R"("minimum": -1234, "maximum": -7)", -1234, -7},
      {R"("minimum": -99, "maximum": 0)", -99, 0},
      {R"("minimum": 100, "maximum": 100)", 100, 100},
      {R"("minimum": 0, "maximum": 0)", 0, 0},
      {R"("minimum": -1, "maximum": -1)", -1, -1},
      {R"("minimum": 5)", 5, std::nullopt},
      {R"("minimum": 1000)", 1000, std::nullopt},
      {R"("minimum": 999)", 999, std::nullopt},
      {R"("minimum": -35)", -35, std::nullopt},
      {R"("maximum": 42)", std::nullopt, 42},
      {R"("maximum": -42)", std::nullopt, -42},
      {R"("maximum": 0)", std::nullopt, 0},
      {R"("exclusiveMinimum": 2.5, "maximum": 10.7)", 3, 10},
      {R"("exclusiveMinimum": -3, "exclusiveMaximum": 3)", -2, 2},
      {R"("minimum": 3, "exclusiveMinimum": true, "maximum": 9, "exclusiveMaximum": true)", 4, 8},
      {R"("minimum": 3, "exclusiveMinimum": 5)", 6, std::nullopt},
      {R"("minimum": -1.5, "maximum": 1.5)", -1, 1},
      {R"("minimum": 1999, "maximum": 2001)", 1999, 2001},
  };
  for (const Case& c : cases) {
    const std::string schema = R"({"type": "integer", )" + c.bounds + "}";
    SCOPED_TRACE(schema);
    const std::regex re(compile_ok(schema));
    for (int64_t v = -2500; v <= 2500; ++v) {
      const bool in = (!c.lo || v >= *c.lo) && (!c.hi || v <= *c.hi);
      ASSERT_EQ(std::regex_match(std::to_string(v), re), in) << v;
    }
    for (const char* other : {"-0", "01", "+1", "1.0", "", "-", "1e2"}) {
      EXPECT_FALSE(std::regex_match(other, re)) << other;
    }
  }
}

TEST(JsonSchemaIntegerRange, LargeBounds) {
  const std::regex re(compile_ok(
      R"({"type": "integer", "minimum": -1000000000000000000, "maximum": 999999999999999999})"));
  EXPECT_TRUE(std::regex_match("-1000000000000000000", re));
  EXPECT_FALSE(std::regex_match("-1000000000000000001", re));
  EXPECT_TRUE(std::regex_match("999999999999999999", re));
  EXPECT_FALSE(std::regex_match("1000000000000000000", re));
  const std::regex above(compile_ok(R"({"type": "integer", "minimum": 123456789012})"));
  EXPECT_TRUE(std::regex_match("123456789012", above));
  EXPECT_TRUE(std::regex_match("99999999999999999999999", above));
  EXPECT_FALSE(std::regex_match("123456789011", above));
  EXPECT_FALSE(std::regex_match("99999999999", above));
}

// ---- numbers against arithmetic ---------------------------------------------------------

// A decimal spelled with up to 4 fraction digits, and its value x 10^4.
struct Spelled {
  std::string text;
  int64_t value;
};

std::vector<Spelled> number_spellings() {
  std::vector<Spelled> out;
  for (int64_t v = -130000; v <= 130000; v += 25) {
    const int64_t mag = v < 0 ? -v : v;
    std::string text = (v < 0 ? "-" : "") + std::to_string(mag / 10000);
    std::string fraction = std::to_string(10000 + mag % 10000).substr(1);
    while (!fraction.empty() && fraction.back() == '0') fraction.pop_back();
    if (!fraction.empty()) text += "." + fraction;
    if (v == 0 && text == "-0") continue;
    out.push_back({text, v});
    // The same value with trailing zeros, every 23rd value (a sample keeps the test fast).
    if (v % 575 == 0) out.push_back({text + (fraction.empty() ? ".00" : "0"), v});
  }
  for (const int64_t v : {1, 9999, 10001, 249999, 250001, 749999}) {  // next to the bounds
    out.push_back(
        {std::to_string(v / 10000) + "." + std::to_string(10000 + v % 10000).substr(1), v});
  }
  return out;
}

TEST(JsonSchemaNumberRange, MatchesExactlyTheRange) {
  struct Case {
    std::string bounds;
    std::optional<int64_t> lo, hi;  // x 10^4
    bool lo_in = true, hi_in = true;
  };
  const Case cases[] = {
      {R"("minimum": 0, "maximum": 1)", 0, 10000},
      {R"("minimum": 0.25, "exclusiveMaximum": 3)", 2500, 30000, true, false},
      {R"("exclusiveMinimum": -1.5, "maximum": 2.75)", -15000, 27500, false, true},
      {R"("minimum": -90, "maximum": 90)", -900000, 900000},
      {R"("minimum": -12.125, "maximum": -0.5)", -121250, -5000},
      {R"("exclusiveMinimum": -1, "exclusiveMaximum": 0)", -10000, 0, false, false},
      {R"("minimum": 0.1, "maximum": 0.1)", 1000, 1000},
      {R"("minimum": 1.05, "maximum": 1.75)", 10500, 17500},
      {R"("minimum": 5, "maximum": 5.0001)", 50000, 50001},
      {R"("maximum": 2.5)", std::nullopt, 25000},
      {R"("exclusiveMaximum": -0.25)", std::nullopt, -2500, true, false},
      {R"("minimum": 0.75)", 7500, std::nullopt},
      {R"("exclusiveMinimum": -7)", -70000, std::nullopt, false, true},
      {R"("minimum": 1, "exclusiveMinimum": true, "maximum": 10, "exclusiveMaximum": false)", 10000,
       100000, false, true},
      {R"("minimum": 0, "exclusiveMinimum": 0, "maximum": 0.5)", 0, 5000, false, true},
      {R"("minimum": 2, "exclusiveMinimum": 1, "maximum": 3, "exclusiveMaximum": 3)", 20000, 30000,
       true, false},
      {R"("minimum": 1e-3, "maximum": 1.2e1)", 10, 120000},
  };
  const std::vector<Spelled> numbers = number_spellings();
  for (const Case& c : cases) {
    const std::string schema = R"({"type": "number", )" + c.bounds + "}";
    SCOPED_TRACE(schema);
    const std::regex re(compile_ok(schema));
    for (const Spelled& n : numbers) {
      const bool above = !c.lo || (c.lo_in ? n.value >= *c.lo : n.value > *c.lo);
      const bool below = !c.hi || (c.hi_in ? n.value <= *c.hi : n.value < *c.hi);
      ASSERT_EQ(std::regex_match(n.text, re), above && below) << n.text;
    }
    for (const char* other : {"-0", "-0.0", "01", "+1", "1.", ".5", "", "-", "1e0", "0.5e1"}) {
      EXPECT_FALSE(std::regex_match(other, re)) << other;
    }
  }
}

// ---- documents ---------------------------------------------------------------------------

TEST(JsonSchemaDocuments, Person) {
  const std::string schema = R"({
    "title": "Person", "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 20},
      "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "email": {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+\\.[a-z]{2,}$"}
    },
    "required": ["name", "age"], "additionalProperties": false})";
  expect_documents(
      schema,
      {R"({"name":"Ada","age":36})", R"({"name":"Ada","age":36,"email":"ada@math.org"})",
       "{\n  \"name\": \"Ada\",\n  \"age\": 150,\n  \"email\": \"a.b@c.io\"\n}",
       "{ \"name\" : \"A\\\"da\" , \"age\" : 0 }", "{\"name\":\"\\u00e9\",\"age\":1}",
       "{" + std::string(20, ' ') + "\"name\":\"Ada\",\"age\":36}"},
      {R"({"name":"Ada"})", R"({"age":36})", R"({"name":"Ada","age":36,"x":1})",
       R"({"name":"Ada","age":"36"})", R"({"age":36,"name":"Ada"})", R"({"name":"Ada","age":151})",
       R"({"name":"Ada","age":-1})", R"({"name":"","age":36})", R"({"name":"Ada","age":36,})",
       R"({"name":"Ada","age":36,"email":"ada.org"})", R"({"name":"Ada","age":36.5})",
       R"({"name":"Ada","age":36,"email":"a"b@c.io"})", " {\"name\":\"Ada\",\"age\":36}",
       "{\"name\":\"Ada\",\"age\":36}\n", "{\"name\":\"A\nda\",\"age\":36}",
       "{" + std::string(21, ' ') + "\"name\":\"Ada\",\"age\":36}", R"([])", R"(null)"});
}

TEST(JsonSchemaDocuments, NestedOrderWithRefs) {
  const std::string schema = R"({
    "$defs": {
      "Address": {"type": "object", "properties": {
          "city": {"type": "string", "maxLength": 10},
          "zip": {"type": "string", "pattern": "^\\d{5}$"}},
        "required": ["city", "zip"]},
      "Item": {"type": "object", "properties": {
          "sku": {"type": "string", "format": "uuid"},
          "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
        "required": ["sku", "qty"]}
    },
    "type": "object",
    "properties": {
      "ship_to": {"$ref": "#/$defs/Address"},
      "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 1,
                "maxItems": 2},
      "status": {"enum": ["new", "paid"]},
      "note": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
      "placed": {"type": "string", "format": "date-time"}
    },
    "required": ["ship_to", "items", "status", "note"]})";
  const std::string sku = "\"123e4567-e89b-12d3-a456-426614174000\"";
  const std::string item = R"({"sku":)" + sku + R"(,"qty":2})";
  expect_documents(
      schema,
      {R"({"ship_to":{"city":"Oslo","zip":"01234"},"items":[)" + item +
           R"(],"status":"new","note":null})",
       R"({"ship_to":{"city":"Oslo","zip":"01234"},"items":[)" + item + "," + item +
           R"(],"status":"paid","note":"hi","placed":"2024-02-29T13:05:00.5+01:00"})",
       "{\n  \"ship_to\": {\n    \"city\": \"Oslo\",\n    \"zip\": \"01234\"\n  },\n"
       "  \"items\": [\n    " +
           item + "\n  ],\n  \"status\": \"new\",\n  \"note\": null\n}"},
      {R"({"ship_to":{"city":"Oslo","zip":"01234"},"items":[],"status":"new","note":null})",
       R"({"ship_to":{"city":"Oslo","zip":"01234"},"items":[)" + item + "," + item + "," + item +
           R"(],"status":"new","note":null})",
       R"({"ship_to":{"city":"Oslo","zip":"01234"},"items":[)" + item +
           R"(],"status":"old","note":null})",
       R"({"ship_to":{"city":"Oslo","zip":"1234"},"items":[)" + item +
           R"(],"status":"new","note":null})",
       R"({"ship_to":{"zip":"01234","city":"Oslo"},"items":[)" + item +
           R"(],"status":"new","note":null})",
       R"({"ship_to":{"city":"Oslo","zip":"01234"},"items":[)" + item + R"(],"status":"new"})",
       R"({"ship_to":{"city":"Oslo","zip":"01234"},"items":[)" + item +
           R"(,],"status":"new","note":null})",
       R"({"ship_to":{"city":"Oslo","zip":"01234"},"items":[)" + item +
           R"(],"status":"new","note":"toolong"})",
       R"({"ship_to":{"city":"Oslo","zip":"01234"},"items":[{"sku":"x","qty":2}],"status":"new","note":null})",
       R"({"ship_to":{"city":"Oslo","zip":"01234"},"items":[)" + item +
           R"(],"status":"new","note":null,"placed":"2024-02-29"})"});
}

TEST(JsonSchemaDocuments, EnumsConstsAndTuples) {
  expect_documents(
      R"({"type": "object", "properties": {
            "kind": {"const": "point"},
            "xy": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}],
                   "minItems": 2},
            "tags": {"type": "array", "items": {"enum": ["a", "b\"c", {"x": 1}]}, "maxItems": 2}},
          "required": ["kind", "xy"]})",
      {R"({"kind":"point","xy":[1.5,-2e3]})", R"({"kind":"point","xy":[0,0],"tags":[]})",
       R"({"kind":"point","xy":[0,0],"tags":["a","b\"c"]})",
       R"({"kind":"point","xy":[0,0],"tags":[{"x":1}]})", "{\"kind\":\"point\",\"xy\":[ 1 , 2 ]}"},
      {R"({"kind":"line","xy":[1,2]})", R"({"kind":"point","xy":[1]})",
       R"({"kind":"point","xy":[1,2,3]})", R"({"kind":"point","xy":[1,2],"tags":["c"]})",
       R"({"kind":"point","xy":[1,2],"tags":["a","a","a"]})",
       R"({"kind":"point","xy":[1,2],"tags":[{"x": 1}]})", R"({"kind":"point","xy":[01,2]})"});
}

TEST(JsonSchemaDocuments, StringFormats) {
  expect_documents(R"({"type": "string", "format": "date"})",
                   {R"("2024-02-29")", R"("1999-12-31")"},
                   {R"("2024-13-01")", R"("24-01-01")", R"("2024-01-32")", R"(2024-01-01)"});
  expect_documents(R"({"type": "string", "format": "time"})",
                   {R"("12:30:00Z")", R"("23:59:60+05:30")", R"("00:00:00.123-07:00")"},
                   {R"("12:30:00")", R"("24:00:00Z")", R"("12:60:00Z")", R"("1:00:00Z")"});
  expect_documents(R"({"type": "string", "format": "date-time"})",
                   {R"("2024-01-02T03:04:05Z")", R"("2024-01-02t03:04:05.9z")"},
                   {R"("2024-01-02 03:04:05Z")", R"("2024-01-02T03:04Z")"});
  expect_documents(
      R"({"type": "string", "format": "uuid"})", {R"("123E4567-e89b-12d3-a456-426614174000")"},
      {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400")"});
}

TEST(JsonSchemaDocuments, NetworkAndDurationFormats) {
  expect_documents(
      R"({"type": "string", "format": "ipv4"})",
      {R"("0.0.0.0")", R"("192.168.1.255")", R"("10.200.249.9")"},
      {R"("256.1.1.1")", R"("1.2.3")", R"("01.2.3.4")", R"("1.2.3.4.5")", R"("a.b.c.d")"});
  expect_documents(
      R"({"type": "string", "format": "ipv6"})",
      {R"("::")", R"("::1")", R"("1::")", R"("2001:db8::8a2e:370:7334")",
       R"("2001:0db8:85a3:0000:0000:8a2e:0370:7334")", R"("1:2:3:4:5:6:7::")",
       R"("::2:3:4:5:6:7:8")", R"("1::8")", R"("::ffff:192.0.2.128")", R"("1:2:3:4:5:6:1.2.3.4")",
       R"("1::5:1.2.3.4")", R"("FE80::0202:B3FF:FE1E:8329")"},
      {R"("1:2:3:4:5:6:7:8:9")", R"("1::2::3")", R"(":::")", R"("1:2:3:4:5:6:7")", R"("12345::")",
       R"("1:2:3:4:5:6:7::8")", R"("::1.2.3")", R"("1:2:3:4:5:6:7:1.2.3.4")", R"("g::1")",
       R"("1:2:3:4:5:6:7:8::")"});
  expect_documents(R"({"type": "string", "format": "hostname"})",
                   {R"("localhost")", R"("api.example.com")", R"("a-b.c1")",
                    R"("xn--bcher-kva.de")", "\"" + std::string(63, 'a') + ".b\""},
                   {R"("-a.com")", R"("a-.com")", R"("a..b")", R"("a.b.")", R"("a_b.com")", R"("")",
                    "\"" + std::string(64, 'a') + "\""});
  expect_documents(
      R"({"type": "string", "format": "email"})",
      {R"("jane.doe@example.com")", R"("a+tag@sub.example.co")", R"("x!#$%&'*=?^_`{|}~-@a.b")"},
      {R"("jane@localhost")", R"("jane.@example.com")", R"(".jane@example.com")",
       R"("a b@example.com")", R"("a@b@example.com")", R"("@example.com")"});
  expect_documents(R"({"type": "string", "format": "uri"})",
                   {R"("https://example.com/a/b?q=1&r=%20#frag")", R"("urn:isbn:0451450523")",
                    R"("mailto:a@b.c")", R"("http://[::1]:8080/")"},
                   {R"("/relative/path")", R"("https://a.b/ c")", R"("http://a/%zz")",
                    R"("1http:x")", R"("https://example.com/\"")"});
  expect_documents(R"({"type": "string", "format": "uri-reference"})",
                   {R"("/relative/path?x=1")", R"("../a")", R"("")", R"("https://a.b/")"},
                   {R"("a b")", R"("a\\b")", R"("%2")"});
  expect_documents(R"({"type": "string", "format": "duration"})",
                   {R"("P1Y2M3DT4H5M6S")", R"("P3W")", R"("PT0S")", R"("P1D")", R"("PT36H")",
                    R"("P1M")", R"("PT1H30M")", R"("P2Y")", R"("P1DT1M")"},
                   {R"("P")", R"("PT")", R"("P1H")", R"("1Y")", R"("P1S")", R"("P1W1D")",
                    R"("PT1S1M")", R"("P1D2M")"});
}

TEST(JsonSchemaDocuments, PatternsStayValidJson) {
  // ".*" would allow a raw quote or control; the rewrite allows only their escapes.
  expect_documents(R"({"type": "string", "pattern": "^.*$"})",
                   {R"("")", R"("a b")", R"("say \"hi\"")", R"("back\\slash")", R"("tab\tx")"},
                   {R"("a"b")", "\"line\nbreak\"", R"("\q")", R"("\n")"});
  expect_documents(R"({"type": "string", "pattern": "[ -~]{1,4}"})",
                   {R"("~")", R"("a\"b")", R"("\\")"}, {R"(""")", R"("a\nb")", R"("abcde")"});
  expect_documents(R"({"type": "string", "pattern": "^\\S+ \\S+$"})", {R"("ab cd")", R"("a\"b c")"},
                   {R"("ab")", R"("a  b")"});
}

TEST(JsonSchemaDocuments, WhitespaceIsBoundedAndOnlyInsideContainers) {
  const std::string schema = R"({"type": "array", "items": {"type": "integer"}})";
  expect_documents(schema,
                   {"[]", "[ ]", "[1,2]", "[\n\t1 ,\r\n 2\n]", "[" + std::string(20, ' ') + "]"},
                   {" []", "[] ", "[" + std::string(21, ' ') + "]", "[1 2]", "[,1]", "[1,]"});
}

TEST(JsonSchemaDocuments, InferredTypesAndNumbers) {
  // No "type": properties -> object, items -> array, minimum -> number.
  expect_documents(R"({"properties": {"xs": {"items": {"minimum": 0}, "maxItems": 2}},
                       "required": ["xs"], "discriminator": {"propertyName": "xs"}})",
                   {R"({"xs":[]})", R"({"xs":[0,1.5e3]})"},
                   {R"({"xs":[-1]})", R"({"xs":[1,2,3]})", R"({})", R"({"xs":[-0.5]})"});
  expect_documents(R"({"type": "number", "exclusiveMinimum": 0})",
                   {"1", "0.5", "0.001", "1e-3", "12.50E+2"}, {"0", "0.0", "0e5", "-1", "00.5"});
  expect_documents(R"({"type": ["string", "null"], "enum": ["a", null, 3]})", {R"("a")", "null"},
                   {"3", R"("b")"});
}

TEST(JsonSchemaDocuments, PatternEdgeCases) {
  // A leading '-' of a negated class stays literal; '"' is not excluded, so its escape is in.
  expect_documents(R"({"type": "string", "pattern": "^[^-a]x$"})", {R"("bx")", R"("\"x")"},
                   {R"("-x")", R"("ax")", R"(""x")"});
  // A \u surrogate pair is one code point, kept as written; a raw one stays raw.
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "\\uD83D\\uDE00"})"),
            R"x("(?:\uD83D\uDE00)")x");
  EXPECT_EQ(compile_ok(R"({"type": "string", "pattern": "\uD83D\uDE00"})"),
            "\"(?:\xF0\x9F\x98\x80)\"");
}

// The regex compiler the grammar uses (regex.h) reads every output and agrees on documents.
TEST(JsonSchemaDialect, RegexCompilerAcceptsTheOutput) {
  struct Case {
    std::string schema;
    std::string valid;
    std::string invalid;
  };
  const Case cases[] = {
      {R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
          "age": {"type": "integer", "minimum": 0, "maximum": 150},
          "email": {"type": "string", "pattern": "^[^@\\s]+@[^@\\s]+$"}},
          "required": ["name"]})",
       "{\n  \"name\": \"\u00e9\",\n  \"age\": 7\n}", R"({"age":7})"},
      {R"({"type": "string", "pattern": "^.*[ -~]\\S\\s\\W[^]\"]$"})", R"("a\"\" !\\")",
       R"("a"b")"},
      {R"({"type": "string", "format": "date-time"})", R"("2024-01-02T03:04:05+01:00")",
       R"("2024-01-02")"},
      {R"({"type": "integer", "minimum": -1000000000000000000, "maximum": 999999999999999999})",
       "-1000000000000000000", "-0"},
      {R"({"enum": ["a.b", 1, null, {"k": [true]}]})", R"({"k":[true]})", R"("ab")"},
      {R"({"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "null"},
          "maxItems": 3})",
       "[true, null]", "[true,null,null,null]"},
      {R"({"type": "array", "items": {"type": "integer"}, "maxItems": 400})", "[1,2]", "[1,]"},
      {R"({"type": "string", "maxLength": 1000})", R"("x")", R"("x)"},
      {R"({"type": "number", "minimum": -90, "maximum": 90})", "-89.99999", "90.01"},
      {R"({"type": "string", "format": "ipv6"})", R"("2001:db8::1")", R"("1::2::3")"},
      {R"({"type": "string", "format": "email"})", R"("a.b@c.de")", R"("a@b")"},
      {R"({"type": "string", "format": "uri"})", R"("https://x.y/z?%41")", R"("x y:")"},
      {R"({"type": "number", "exclusiveMinimum": 1e-1, "exclusiveMaximum": 0.125})", "0.1249",
       "0.1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    const std::string regex = compile_ok(c.schema);
    Result<Dfa> dfa = compile_regex(regex);
    ASSERT_TRUE(dfa.ok()) << dfa.status().to_string() << "\n" << regex;
    auto run = [&](const std::string& doc) {
      int32_t state = dfa->start_state;
      for (unsigned char byte : doc) state = dfa->next(state, byte);
      return dfa->accepting[static_cast<std::size_t>(state)] != 0;
    };
    EXPECT_TRUE(run(c.valid)) << c.valid;
    EXPECT_FALSE(run(c.invalid)) << c.invalid;
  }
}

// ---- optional properties: commas in every combination ----------------------------------

TEST(JsonSchemaOptional, AllPresenceCombinationsOfThree) {
  const char* names[] = {"a", "b", "c"};
  // required: none; "b" (in the middle); "a" (first).
  for (const std::string required : {"[]", R"(["b"])", R"(["a"])"}) {
    const std::string schema = R"({"type": "object", "properties": {"a": {"type": "integer"},
        "b": {"type": "integer"}, "c": {"type": "integer"}}, "required": )" +
                               required + "}";
    SCOPED_TRACE(schema);
    const std::regex re(compile_ok(schema));
    for (int mask = 0; mask < 8; ++mask) {
      std::string compact = "{";
      std::string pretty = "{";
      bool first = true;
      for (int i = 0; i < 3; ++i) {
        if (!(mask & (1 << i))) continue;
        compact += std::string(first ? "" : ",") + "\"" + names[i] + "\":" + std::to_string(i);
        pretty +=
            std::string(first ? "\n  " : ",\n  ") + "\"" + names[i] + "\": " + std::to_string(i);
        first = false;
      }
      compact += "}";
      pretty += first ? "}" : "\n}";
      const bool allowed = required == "[]" || (required == R"(["b"])" ? (mask & 2) : (mask & 1));
      EXPECT_EQ(std::regex_match(compact, re), allowed) << compact;
      EXPECT_EQ(std::regex_match(pretty, re), allowed) << pretty;
    }
    for (const char* wrong : {R"({,"a":0})", R"({"a":0,})", R"({"a":0,,"b":1})", R"({"a":0 "b":1})",
                              R"({"b":1,"a":0})", R"({"a":0,"a":0})", R"({"a":0,"b":1,"c":2,})",
                              R"({"a":0,,"c":2})", R"({,})", R"({"b":1,})", R"({"c":2,"b":1})"}) {
      EXPECT_FALSE(std::regex_match(wrong, re)) << wrong;
    }
  }
}

// ---- free-form values (json_schema.h: at most kMaxFreeFormDepth nested containers) -------

TEST(JsonSchemaFreeForm, ExactRegexes) {
  const std::string sep = W + "," + W;
  const std::string str = "\"" + C + "*\"";  // the regex of {"type": "string"}
  const std::string num = R"(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)";
  EXPECT_EQ(compile_ok(R"({"type": "string"})"), str);
  EXPECT_EQ(compile_ok(R"({"type": "number"})"), num);
  const auto object_of = [&](const std::string& v) {
    const std::string member = str + W + ":" + W + v;
    return "\\{" + W + "(?:" + member + "(?:" + sep + member + ")*" + W + ")?\\}";
  };
  const auto array_of = [&](const std::string& v) {
    return "\\[" + W + "(?:" + v + "(?:" + sep + v + ")*" + W + ")?\\]";
  };
  const std::string scalars = str + "|" + num + "|true|false|null";
  const std::string v0 = "(?:" + scalars + ")";
  const std::string v1 = "(?:" + scalars + "|" + object_of(v0) + "|" + array_of(v0) + ")";
  const std::string v2 = "(?:" + scalars + "|" + object_of(v1) + "|" + array_of(v1) + ")";
  ASSERT_EQ(kMaxFreeFormDepth, 2) << "the expected regexes below spell out 2 levels";
  // A map: any keys, values of the schema.
  EXPECT_EQ(compile_ok(R"({"type": "object", "additionalProperties": {"type": "null"}})"),
            "\\{" + W + "(?:" + str + W + ":" + W + "null(?:" + sep + str + W + ":" + W + "null)*" +
                W + ")?\\}");
  EXPECT_EQ(compile_ok(R"({"type": "object", "additionalProperties": false})"), "\\{" + W + "\\}");
  // The container is the first of the free-form value's levels.
  for (const char* schema :
       {R"({"type": "object"})", R"({"type": "object", "additionalProperties": true})",
        R"({"type": "object", "additionalProperties": {"description": "any"}})",
        R"({"additionalProperties": {}})", R"({"type": "object", "required": []})"}) {
    EXPECT_EQ(compile_ok(schema), object_of(v1)) << schema;
  }
  for (const char* schema : {R"({"type": "array"})", R"({"type": "array", "items": true})",
                             R"({"type": "array", "items": {"$defs": {}}})"}) {
    EXPECT_EQ(compile_ok(schema), array_of(v1)) << schema;
  }
  for (const char* schema : {"true", "{}", R"({"title": "T", "description": "anything"})"}) {
    EXPECT_EQ(compile_ok(schema), v2) << schema;
  }
  // Beside a prefix, items: true allows free-form values after it.
  EXPECT_EQ(compile_ok(R"({"type": "array", "prefixItems": [{"type": "null"}], "items": true})"),
            "\\[" + W + "(?:null(?:" + sep + v1 + ")*" + W + ")?\\]");
}

// JsonSchemaOptions::free_form_holes: each free-form value is the one byte kFreeFormHole,
// whatever its depth budget; the containers a schema names are still spelt out around it.
TEST(JsonSchemaFreeForm, HolesStandForWholeValues) {
  JsonSchemaOptions holes;
  holes.free_form_holes = true;
  const auto compile_holes = [&](const std::string& schema) {
    Result<std::string> r = json_schema_to_regex(schema, holes);
    EXPECT_TRUE(r.ok()) << schema << "\n" << r.status().to_string();
    return r.ok() ? *r : std::string("(?!)");
  };
  const std::string H(kFreeFormHoleRegex);
  const std::string sep = W + "," + W;
  const std::string str = "\"" + C + "*\"";
  for (const char* schema : {"true", "{}", R"({"description": "anything"})"}) {
    EXPECT_EQ(compile_holes(schema), H) << schema;
  }
  const std::string member = str + W + ":" + W + H;
  EXPECT_EQ(compile_holes(R"({"type": "object"})"),
            "\\{" + W + "(?:" + member + "(?:" + sep + member + ")*" + W + ")?\\}");
  EXPECT_EQ(compile_holes(R"({"type": "array"})"),
            "\\[" + W + "(?:" + H + "(?:" + sep + H + ")*" + W + ")?\\]");
  EXPECT_EQ(
      compile_holes(R"({"type": "object", "properties": {"id": {"type": "integer"},
                              "meta": {}}, "required": ["id", "meta"]})"),
      "\\{" + W + "\"id\"" + W + ":" + W + kInt + sep + "\"meta\"" + W + ":" + W + H + W + "\\}");
  // Schemas without free-form values compile to the same regex either way.
  const std::string plain = R"({"type": "object", "properties": {"a": {"type": "boolean"}}})";
  EXPECT_EQ(compile_holes(plain), compile_ok(plain));
  // No string, number or literal of JSON can match the hole byte.
  const std::regex hole_free(compile_ok(R"({"type": "array", "items": {"type": "string"}})"));
  EXPECT_FALSE(std::regex_match("[\"\x01\"]", hole_free));
}

TEST(JsonSchemaFreeForm, AnyValueUpToTheBound) {
  expect_documents(
      "true",
      {"1", "-0.5e3", "0", R"("x")", R"("")", "true", "false", "null", "{}", "[]", "{ }", "[\n]",
       R"({"a":1})", R"([1,"x",null,true,{}])", R"({"a":{"b":1},"c":[1,"x"]})",
       R"([[1,2],[],{"k":false}])", R"([{"a":1},[]])",
       // Escapes in keys and strings.
       R"({"k\"\\\/\b\f\n\r\t\u00e9":"v\"\u20AC\\"})", "[\"\xC3\xA9\xF0\x9F\x98\x80\"]",
       // Whitespace runs inside containers, up to 20 bytes.
       "{ \"a\" :\n\t[ 1 ,\r\n 2 ] }",
       "[" + std::string(20, ' ') + "1" + std::string(20, '\n') + "]"},
      {// One level past the bound: the third container is never offered.
       R"({"a":{"b":{}}})", R"([[[]]])", R"({"a":[[1]]})", R"([{"a":[]}])", R"({"a":[{}]})",
       R"({"a":{"b":1},"c":[1,[]]})",
       // Not JSON, or whitespace where the compiler allows none.
       "{\"a\":1,}", "[1,]", "{\"a\"}", "{1:2}", "01", "\"a", "tru", "{\"a\" 1}", "[1 2]", " 1",
       "1 ", " {}", "[" + std::string(21, ' ') + "]", "\"a\nb\"", R"("\x")", R"("\u12")", "{'a':1}",
       "nan"});
}

TEST(JsonSchemaFreeForm, ObjectsAndArraysWithoutTheirSubschemas) {
  // The object is level 1: its values have one more level.
  expect_documents(
      R"({"type": "object"})",
      {"{}", "{ }", R"({"a":1,"b":[1,2],"c":{"d":null},"a":2})", R"({"":"","\"":{"\\":null}})"},
      {"[]", "1", "null", R"({"a":{"b":{}}})", R"({"a":[[1]]})", R"({"":"","\"":{"\\":[]}})",
       R"({"a":1,})", R"({,})", R"({"a":})"});
  expect_documents(R"({"type": "array"})", {"[]", R"([1,{"a":"b"},[]])", "[ [ ] , { } ]"},
                   {"{}", "[[[]]]", R"([{"a":[]}])", "[,]", "[1,,2]"});
  expect_documents(R"({"type": "array", "minItems": 1, "maxItems": 2})", {"[{}]", R"([1,[2]])"},
                   {"[]", "[1,2,3]", "[[[1]]]"});
  // A free-form value inside a schema costs only its own levels: "meta" is 2 more deep.
  expect_documents(
      R"({"type": "object", "properties": {"id": {"type": "integer"},
                       "meta": {}}, "required": ["id", "meta"]})",
      {R"({"id":1,"meta":null})", R"({"id":1,"meta":{"a":[1]}})", R"({"id":1,"meta":[[],{}]})"},
      {R"({"id":1,"meta":{"a":[[1]]}})", R"({"id":1})", R"({"meta":1,"id":1})"});
  // The same for a free-form object that is a property: levels counted from it.
  expect_documents(R"({"type": "object", "properties": {"args": {"type": "object"}},
                       "required": ["args"]})",
                   {R"({"args":{}})", R"({"args":{"x":[1,"y"]}})"},
                   {R"({"args":[]})", R"({"args":{"x":[[1]]}})"});
}

TEST(JsonSchemaFreeForm, Maps) {
  expect_documents(
      R"({"type": "object", "additionalProperties": {"type": "integer"}})",
      {"{}", R"({"a":1,"b":2})", R"({"a\"b\u0041":-3})", "{ \"a\" : 1 }"},
      {R"({"a":"x"})", R"({"a":1.5})", R"({"a":1,})", R"({"a":1,"b":null})", "[]", R"({1:1})"});
  // A map's values have the levels of their schema: here an array of free-form values.
  expect_documents(R"({"additionalProperties": {"type": "array"}})", {R"({"a":[[1]],"b":[]})"},
                   {R"({"a":[[[1]]]})", R"({"a":1})"});
  expect_documents(R"({"type": "object", "additionalProperties": false})", {"{}", "{  }"},
                   {R"({"a":1})"});
}

// JsonSchemaOptions::whitespace: none (disable_any_whitespace) or a pattern of the caller's
// (guided_whitespace_pattern), grouped so that an alternation stays inside.
TEST(JsonSchemaWhitespace, NoneOrAPattern) {
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "array"}},
                                  "required": ["a"]})";
  const auto documents = [&](const std::string& ws, const std::vector<std::string>& valid,
                             const std::vector<std::string>& invalid) {
    SCOPED_TRACE("whitespace '" + ws + "'");
    Result<std::string> r = json_schema_to_regex(schema, JsonSchemaOptions{ws});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const std::regex re(*r);
    for (const std::string& d : valid) EXPECT_TRUE(std::regex_match(d, re)) << d << "\n" << *r;
    for (const std::string& d : invalid) EXPECT_FALSE(std::regex_match(d, re)) << d << "\n" << *r;
  };
  documents("", {R"({"a":[]})", R"({"a":[1,{"b":2}]})"},
            {R"({ "a":[]})", R"({"a": []})", R"({"a":[1, 2]})", R"({"a":[{"b" :2}]})"});
  documents(" ?", {R"({ "a" : [ 1 , 2 ] })", R"({"a":[]})"}, {R"({  "a":[]})", "{\n\"a\":[]}"});
  // Without grouping, this alternation would swallow its neighbours.
  documents("\\n?|  ", {"{\n\"a\":[]}", R"({  "a"  :[]  })", R"({"a":[]})"},
            {R"({ "a":[]})", R"({"a":[]} )", "{\n\n\"a\":[]}"});
}

// additionalProperties beside properties: the listed members in order, then any number of
// additional members (any key, the value of the schema or free-form).
TEST(JsonSchemaFreeForm, AdditionalPropertiesBesideProperties) {
  // A required member first: the additional ones follow it.
  expect_documents(
      R"({"type": "object", "properties": {"id": {"type": "integer"}, "tag": {"type": "string"}},
          "required": ["id"], "additionalProperties": {"type": "integer"}})",
      {R"({"id":1})", R"({"id":1,"tag":"x"})", R"({"id":1,"x":2,"y":-3})",
       R"({"id":1,"tag":"x","z":0})", R"({"id":1,"id":2})", "{ \"id\" : 1 , \"w\" : 5 }"},
      {R"({"id":1,"x":"s"})", R"({"x":2,"id":1})", R"({"id":1,"x":2,"tag":"x"})", R"({"x":2})",
       R"({"id":1,})", "{}"});
  // All optional: any listed ones in order, or additional ones alone, or both.
  expect_documents(
      R"({"properties": {"a": {"type": "null"}, "b": {"type": "boolean"}},
          "additionalProperties": true})",
      {"{}", R"({"a":null})", R"({"b":true,"c":[1]})", R"({"c":{"d":1},"e":"f"})",
       R"({"a":null,"b":false,"c":null})",
       // A listed name as an additional key is not excluded (json_schema.h).
       R"({"a":1})"},
      {R"({"c":{"d":{"e":{}}}})", R"({,"c":1})", R"({"a":null,})", R"({"c":1 "d":2})", "[]"});
  // "properties": {} with additional properties is a map; without, only {}.
  expect_documents(R"({"properties": {}, "additionalProperties": {"type": "string"}})",
                   {"{}", R"({"k":"v","l":""})"}, {R"({"k":1})"});
  expect_documents(R"({"type": "object", "properties": {}})", {"{}"}, {R"({"k":1})"});
  // Absent beside properties: no other keys, as before.
  expect_documents(R"({"properties": {"a": {"type": "null"}}})", {"{}", R"({"a":null})"},
                   {R"({"a":null,"b":1})"});
}

// Each free-form form compiles with the regex compiler the grammar uses, well under its caps,
// and the DFA agrees with std::regex on a document at the bound and one past it.
TEST(JsonSchemaFreeForm, DfaStaysWellUnderTheCaps) {
  struct Case {
    std::string schema;
    std::string valid;
    std::string too_deep;
    int32_t max_states;
  };
  std::string eight = R"({"type": "object", "properties": {)";
  std::string eight_doc = "{";
  std::string eight_deep = "{";
  for (int i = 0; i < 8; ++i) {
    const std::string name = "\"p" + std::to_string(i) + "\"";
    eight += (i ? ", " : "") + name + ": {}";
    eight_doc += (i ? "," : "") + name + R"(:{"a":[1]})";
    eight_deep += (i ? "," : "") + name + (i == 7 ? R"(:{"a":[[1]]})" : "1");
  }
  eight += R"(}, "required": ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"]})";
  eight_doc += "}";
  eight_deep += "}";
  // Bounds: kMaxDfaStates / 10 for one free-form value (2 levels: about 2.2k states), / 2 for
  // eight of them side by side (about 18k; 3 levels would be about 9k states for one value,
  // and 4 of them overflow regex.h's NFA cap).
  const Case cases[] = {
      {"true", R"({"a":[1,"\u00e9"]})", R"({"a":[[1]]})", kMaxDfaStates / 10},
      {R"({"type": "object"})", R"({"a":{"b":null}})", R"({"a":{"b":{}}})", kMaxDfaStates / 10},
      {R"({"type": "array"})", R"([[1],{"a":2}])", R"([[[]]])", kMaxDfaStates / 10},
      {R"({"type": "object", "additionalProperties": {"type": "integer"}})", R"({"a":1,"b":2})",
       R"({"a":"x"})", kMaxDfaStates / 10},
      {eight, eight_doc, eight_deep, kMaxDfaStates / 2},
      // Free-form additional members after two listed ones (all optional).
      {R"({"properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
           "additionalProperties": true})",
       R"({"a":1,"b":"x","c":{"d":1},"e":[2]})", R"({"a":1,"c":{"d":[1]}})", kMaxDfaStates / 5},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    const std::string regex = compile_ok(c.schema);
    Result<Dfa> dfa = compile_regex(regex);
    ASSERT_TRUE(dfa.ok()) << dfa.status().to_string();
    EXPECT_LE(dfa->num_states, c.max_states);
    auto run = [&](const std::string& doc) {
      int32_t state = dfa->start_state;
      for (unsigned char byte : doc) state = dfa->next(state, byte);
      return dfa->accepting[static_cast<std::size_t>(state)] != 0;
    };
    const std::regex re(regex);
    EXPECT_TRUE(run(c.valid)) << c.valid;
    EXPECT_TRUE(std::regex_match(c.valid, re)) << c.valid;
    EXPECT_FALSE(run(c.too_deep)) << c.too_deep;
    EXPECT_FALSE(std::regex_match(c.too_deep, re)) << c.too_deep;
  }
}

// ---- errors ------------------------------------------------------------------------------

struct ErrorCase {
  std::string schema;
  StatusCode code;
  std::string message;
};

TEST(JsonSchemaErrors, EveryErrorPathHasItsCodeAndMessage) {
  constexpr StatusCode kBad = StatusCode::kInvalidArgument;
  constexpr StatusCode kNo = StatusCode::kUnimplemented;
  const std::string pattern = R"({"type": "string", "pattern": )";
  const ErrorCase cases[] = {
      // Input as a whole.
      {R"({"type": )", kBad, "json_schema: (root): not valid JSON"},
      {std::string(300, '[') + std::string(300, ']'), kBad,
       "json_schema: (root): JSON nested deeper than 256 levels"},
      {"[1]", kBad, "json_schema: (root): expected a schema (an object), got [1]"},
      {"false", kBad, "json_schema: (root): schema false allows no value"},
      {R"({"properties": {"tags": {"type": "array", "items": {"type": "string"},
          "uniqueItems": true}}})",
       kNo, R"(json_schema: /properties/tags: keyword "uniqueItems" is not supported)"},
      {R"({"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": {}})",
       kNo, R"(json_schema: (root): keyword "patternProperties" is not supported)"},
      {R"({"$defs": 1, "type": "null"})", kBad,
       "json_schema: /$defs: expected an object of named schemas, got 1"},
      // Combinators.
      {R"({"$ref": "#/$defs/A", "type": "null", "$defs": {"A": {"type": "null"}}})", kNo,
       R"(json_schema: (root): keyword "type" beside "$ref" is not supported)"},
      {R"({"anyOf": [{"type": "null"}], "minimum": 1})", kNo,
       R"(json_schema: (root): keyword "minimum" beside "anyOf" is not supported)"},
      {R"({"anyOf": {}})", kBad,
       "json_schema: /anyOf: expected a non-empty list of schemas, got {}"},
      {R"({"oneOf": []})", kBad,
       "json_schema: /oneOf: expected a non-empty list of schemas, got []"},
      {R"({"allOf": [{"type": "null"}, {"type": "null"}]})", kNo,
       "json_schema: /allOf: allOf of 2 schemas is not supported (only of one)"},
      {R"({"anyOf": [{"type": "null"}, {"type": "foo"}]})", kBad,
       "json_schema: /anyOf/1/type: expected \"string\", \"integer\", \"number\", \"boolean\", "
       "\"null\", \"object\" or \"array\", got \"foo\""},
      // type, enum, const.
      {R"({"type": []})", kBad,
       "json_schema: /type: expected a type name or a non-empty list of them, got []"},
      {R"({"type": ["null", "null"]})", kBad, "json_schema: /type: type \"null\" is listed twice"},
      {R"({"enum": ["a"], "minLength": 1})", kNo,
       R"(json_schema: (root): keyword "minLength" beside "enum" is not supported)"},
      {R"({"enum": 3})", kBad, "json_schema: /enum: expected a non-empty list of values, got 3"},
      {R"({"enum": []})", kBad, "json_schema: /enum: expected a non-empty list of values, got []"},
      {R"({"type": "integer", "enum": ["a", 1.5]})", kBad,
       "json_schema: (root): no value satisfies enum / const and type"},
      {R"({"enum": [1, 2], "const": 3})", kBad,
       "json_schema: (root): no value satisfies enum / const"},
      {R"({"minLength": 1, "minimum": 0})", kNo,
       "json_schema: (root): a schema without \"type\" is supported only when its keywords belong "
       "to one type"},
      {R"({"type": "integer", "minLength": 1})", kBad,
       R"(json_schema: /minLength: keyword "minLength" does not apply to type ["integer"])"},
      // $ref.
      {R"({"$ref": 1})", kBad, "json_schema: /$ref: expected a string, got 1"},
      {R"({"$ref": "other.json#/A"})", kNo,
       "json_schema: /$ref: only local references (\"#/...\") are supported, got "
       "\"other.json#/A\""},
      {R"({"$ref": "#anchor"})", kNo,
       "json_schema: /$ref: only JSON-pointer references (\"#/...\") are supported, got "
       "\"#anchor\""},
      {R"({"$ref": "#/$defs/Missing"})", kBad,
       R"(json_schema: /$ref: "#/$defs/Missing" does not resolve)"},
      {R"({"$defs": {"a": {"type": "null"}}, "$ref": "#/$defs/a~2"})", kBad,
       R"(json_schema: /$ref: bad ~ escape in "#/$defs/a~2" (expected ~0 or ~1))"},
      {R"({"$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
          "$ref": "#/$defs/Node"})",
       kNo,
       R"(json_schema: /$defs/Node/properties/next/$ref: recursive $ref "#/$defs/Node" is not supported)"},
      {R"({"type": "object", "properties": {"self": {"$ref": "#"}}})", kNo,
       R"(json_schema: /properties/self/$ref: recursive $ref "#" is not supported)"},
      {R"({"$defs": {"A": {"$ref": "#/$defs/A/x"}}, "$ref": "#/$defs/A"})", kBad,
       R"(json_schema: /$defs/A/$ref: "#/$defs/A/x" does not resolve)"},
      // Strings.
      {R"({"type": "string", "format": "idn-email"})", kNo,
       "json_schema: /format: format \"idn-email\" is not supported (supported: date, time, "
       "date-time, duration, uuid, ipv4, ipv6, hostname, email, uri, uri-reference)"},
      {R"({"type": "string", "format": 1})", kBad,
       "json_schema: /format: expected a string, got 1"},
      {R"({"type": "string", "format": "date", "pattern": "x"})", kNo,
       "json_schema: (root): \"format\" together with \"pattern\", \"minLength\" or \"maxLength\" "
       "is not supported"},
      {R"({"type": "string", "pattern": 1})", kBad,
       "json_schema: /pattern: expected a string, got 1"},
      {R"({"type": "string", "pattern": "x", "maxLength": 3})", kNo,
       "json_schema: (root): \"pattern\" together with \"minLength\" or \"maxLength\" is not "
       "supported; bound the length in the pattern"},
      {R"({"type": "string", "minLength": -1})", kBad,
       "json_schema: /minLength: expected a non-negative integer, got -1"},
      {R"({"type": "string", "maxLength": 1.5})", kBad,
       "json_schema: /maxLength: expected a non-negative integer, got 1.5"},
      {R"({"type": "string", "maxLength": "3"})", kBad,
       "json_schema: /maxLength: expected a non-negative integer, got \"3\""},
      {R"({"type": "string", "minLength": 5, "maxLength": 2})", kBad,
       "json_schema: /minLength: minLength 5 > maxLength 2"},
      {R"({"type": "string", "maxLength": 2000})", kNo,
       "json_schema: /maxLength: maxLength 2000 needs 2000 repetitions, over the limit of 1000"},
      {R"({"type": "string", "minLength": 1001})", kNo,
       "json_schema: /minLength: minLength 1001 needs 1001 repetitions, over the limit of 1000"},
      // Patterns.
      {pattern + R"("a)b"})", kBad, "json_schema: /pattern: at byte 1: unmatched ')'"},
      {pattern + R"("(a"})", kBad, "json_schema: /pattern: unmatched '('"},
      {pattern + R"("x[a-"})", kBad, "json_schema: /pattern: at byte 1: unterminated ["},
      {pattern + R"("a\\"})", kBad, "json_schema: /pattern: at byte 1: trailing backslash"},
      {pattern + R"("(?=a)b"})", kNo,
       "json_schema: /pattern: at byte 0: group \"(?=\" is not supported (lookaround, flags)"},
      {pattern + R"("(a)\\1"})", kNo,
       "json_schema: /pattern: at byte 3: escape \\1 is not supported (backreferences, \\B, \\p, "
       "...)"},
      {pattern + R"("\\bx"})", kNo,
       "json_schema: /pattern: at byte 0: word boundary \\b is not supported"},
      {pattern + R"("a^b"})", kNo,
       "json_schema: /pattern: at byte 1: anchor '^' is supported only at the start or end"},
      {pattern + R"("[z-a]"})", kBad, "json_schema: /pattern: at byte 2: bad class range"},
      {pattern + R"("[\\x01]"})", kBad,
       "json_schema: /pattern: class at byte 0 matches no character a JSON string can hold"},
      {pattern + R"("[\\S\"]"})", kNo,
       "json_schema: /pattern: \\S inside a class that also holds characters JSON must escape is "
       "not supported"},
      {pattern + R"("\\u12"})", kBad,
       "json_schema: /pattern: at byte 0: bad escape \\u (expected 4 hex digits of a code point)"},
      {pattern + R"("(?<name"})", kBad,
       "json_schema: /pattern: at byte 0: unterminated group name"},
      // Numbers.
      {R"({"type": "integer", "minimum": "0"})", kBad,
       "json_schema: /minimum: expected a number, got \"0\""},
      {R"({"type": "integer", "exclusiveMaximum": null})", kBad,
       "json_schema: /exclusiveMaximum: expected a number, got null"},
      {R"({"type": "integer", "exclusiveMinimum": true})", kBad,
       "json_schema: /exclusiveMinimum: a boolean needs \"minimum\" beside it (draft 4)"},
      {R"({"type": "integer", "maximum": 1e19})", kNo,
       "json_schema: /maximum: 1e+19 is outside the supported range +-10^18"},
      {R"({"type": "integer", "minimum": -1000000000000000001})", kNo,
       "json_schema: /minimum: -1000000000000000001 is outside the supported range +-10^18"},
      {R"({"type": "integer", "minimum": 5, "maximum": 4})", kBad,
       "json_schema: (root): no integer satisfies the bounds (lowest allowed 5 > highest allowed "
       "4)"},
      {R"({"type": "integer", "exclusiveMinimum": 4, "exclusiveMaximum": 5})", kBad,
       "json_schema: (root): no integer satisfies the bounds (lowest allowed 5 > highest allowed "
       "4)"},
      {R"({"type": "number", "maximum": 1e19})", kNo,
       "json_schema: /maximum: 1e+19 is outside the supported range +-10^18"},
      {R"({"type": "number", "minimum": -12345678901234567890, "maximum": 0})", kNo,
       "json_schema: /minimum: -1.2345678901234567e+19 is outside the supported range +-10^18"},
      {R"({"type": "number", "exclusiveMinimum": 1e-40})", kNo,
       "json_schema: /exclusiveMinimum: 1e-40 has more than 32 fraction digits"},
      {R"({"type": "number", "minimum": 2.5, "maximum": 1})", kBad,
       "json_schema: (root): no number satisfies the bounds"},
      {R"({"type": "number", "minimum": 0.5, "exclusiveMaximum": 0.5})", kBad,
       "json_schema: (root): no number satisfies the bounds"},
      // Objects.
      {R"({"type": "object", "properties": {}, "additionalProperties": 0})", kBad,
       "json_schema: /additionalProperties: expected a boolean or a schema, got 0"},
      {R"({"type": "object", "additionalProperties": "x"})", kBad,
       "json_schema: /additionalProperties: expected a boolean or a schema, got \"x\""},
      {R"({"type": "object", "additionalProperties": {"type": "nul"}})", kBad,
       "json_schema: /additionalProperties/type: expected \"string\", \"integer\", \"number\", "
       "\"boolean\", \"null\", \"object\" or \"array\", got \"nul\""},
      {R"({"type": "object", "required": ["a"]})", kNo,
       "json_schema: /required: required properties of an object without \"properties\" are "
       "not supported; list them in \"properties\""},
      {R"({"additionalProperties": {"type": "integer"}, "required": ["a"]})", kNo,
       "json_schema: /required: required properties of an object without \"properties\" are "
       "not supported; list them in \"properties\""},
      {R"({"type": "object", "required": [1]})", kBad,
       "json_schema: /required: expected property names, got 1"},
      {R"({"type": "object", "properties": []})", kBad,
       "json_schema: /properties: expected an object of property schemas, got []"},
      {R"({"type": "object", "properties": {"a": {"type": "null"}}, "required": "a"})", kBad,
       "json_schema: /required: expected a list of property names, got \"a\""},
      {R"({"type": "object", "properties": {"a": {"type": "null"}}, "required": [1]})", kBad,
       "json_schema: /required: expected property names, got 1"},
      {R"({"type": "object", "properties": {"a": {"type": "null"}}, "required": ["zip"]})", kBad,
       "json_schema: /required: required property \"zip\" is not in \"properties\""},
      {R"({"type": "object", "properties": {"a": {"type": "null"}}, "required": ["a", "a"]})", kBad,
       "json_schema: /required: property \"a\" is listed twice"},
      {R"({"type": "object", "properties": {"a/b": {"type": "nul"}}})", kBad,
       "json_schema: /properties/a~1b/type: expected \"string\", \"integer\", \"number\", "
       "\"boolean\", \"null\", \"object\" or \"array\", got \"nul\""},
      // Arrays.
      {R"({"type": "array", "items": {"$defs": 1}})", kBad,
       "json_schema: /items/$defs: expected an object of named schemas, got 1"},
      {R"({"type": "array", "maxItems": 50})", kNo,
       // The repeated part "(?:" W "," W V1 ")" counts 1 + 20 + 1 + 20 + 512 = 554 atoms, V1
       // the free-form value of 1 level: (?:S|N|true|false|null|OBJ|ARR) with S = "C*" 13,
       // N = 7 + (?:\.[0-9]+)? 5 + (?:[eE][+-]?[0-9]+)? 7 = 19, true|false|null 13,
       // V0 = 1 + 13 + 19 + 13 = 46; OBJ = \{ W (?:S W : W V0 (?:W , W S W : W V0)* W)? \}
       // = 1 + 20 + (1 + 100 + 143 + 20 + 1) + 1 = 287 (member 100); ARR likewise
       // 1 + 20 + (1 + 46 + 89 + 20 + 1) + 1 = 179; V1 = 1 + 13 + 19 + 13 + 287 + 179 = 512.
       "json_schema: /maxItems: maxItems 50 needs 49 repetitions of a 554-atom regex, over "
       "20000 atoms; lower it or simplify the repeated schema"},
      {R"({"type": "array", "items": {"type": "null"}, "minItems": 3, "maxItems": 2})", kBad,
       "json_schema: /minItems: minItems 3 > maxItems 2"},
      {R"({"type": "array", "items": false, "minItems": 1})", kBad,
       "json_schema: /minItems: minItems > 0 but no items are allowed"},
      {R"({"type": "array", "prefixItems": {}})", kBad,
       "json_schema: /prefixItems: expected a list of schemas, got {}"},
      {R"({"type": "array", "prefixItems": [], "items": [{"type": "null"}]})", kBad,
       "json_schema: /items: a list of schemas beside \"prefixItems\""},
      {R"({"type": "array", "prefixItems": [{"type": "null"}], "minItems": 2})", kBad,
       "json_schema: /minItems: minItems 2 > the 1 prefix items, and no items may follow them"},
      {R"({"type": "array", "items": {"type": "null"}, "maxItems": 5000})", kNo,
       "json_schema: /maxItems: maxItems 5000 needs 4999 repetitions, over the limit of 1000"},
      {R"({"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"},
          "b": {"type": "string"}}, "required": ["a", "b"]}, "maxItems": 500})",
       kNo,
       // The repeated part "(?:" W "," W item ")" counts 1 + 20 + 1 + 20 + 197 = 239 atoms:
       // W = [ \t\n\r]{0,20} counts 20; C = (?:[..]|\\[..]|\\u[..]{4}) counts 1 + 1 + 2 + 6
       // = 10; item = \{ W "a" W : W "C*" W , W "b" W : W "C*" W \} counts 8 * 20 + 1 + 3 + 1 +
       // 13 + 1 + 3 + 1 + 13 + 1 = 197.
       "json_schema: /maxItems: maxItems 500 needs 499 repetitions of a 239-atom regex, over "
       "20000 atoms; lower it or simplify the repeated schema"},
      {R"({"type": "array", "items": {"type": "integer"}, "minItems": 500})", kNo,
       // "(?:" W "," W integer ")": 1 + 20 + 1 + 20 + 7, the integer -?(?:0|[1-9][0-9]*) counting
       // 2 for "-?" and 1 + 4 for the group of 0, [1-9] and [0-9]*.
       "json_schema: /minItems: minItems 500 needs 499 repetitions of a 49-atom regex, over "
       "20000 atoms; lower it or simplify the repeated schema"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.schema);
    Result<std::string> r = json_schema_to_regex(c.schema);
    ASSERT_FALSE(r.ok()) << *r;
    EXPECT_EQ(r.status().code(), c.code) << r.status().message();
    EXPECT_EQ(r.status().message(), c.message);
  }
}

TEST(JsonSchemaErrors, DepthAndSizeGuards) {
  std::string deep = R"({"type": "null"})";
  for (int i = 0; i < kMaxSchemaDepth + 1; ++i)
    deep = R"({"type": "array", "items": )" + deep + "}";
  Result<std::string> r = json_schema_to_regex(deep);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("schemas nested deeper than 64 levels ($ref included)"),
            std::string::npos)
      << r.status().message();

  // Each level holds four copies of the next: 4^10 copies of a string at the bottom.
  std::string defs;
  for (int i = 0; i < 10; ++i) {
    const std::string next = "{\"$ref\": \"#/$defs/L" + std::to_string(i + 1) + "\"}";
    defs += "\"L" + std::to_string(i) + "\": {\"type\": \"array\", \"prefixItems\": [" + next +
            "," + next + "," + next + "," + next + "]},";
  }
  defs += R"("L10": {"type": "string"})";
  r = json_schema_to_regex(R"({"$defs": {)" + defs + R"(}, "$ref": "#/$defs/L0"})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("schema too large: its regex exceeds 262144 bytes"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace packserve::grammar
